/**
 * A runtime that fails to stop a pod's sandbox, through the whole daemon: the built nodelet
 * on the test CRI server, a static pod removed while StopPodSandbox answers an error. The
 * removal is retried with the backoff (1 s doubling) for the 60 s the runtime keeps failing, never in a tight loop; the log holds
 * one warning for the unchanged error; once the runtime answers again the pod goes.
 * (test/unit/pods/manager.test.ts drives the same failure for 60 s of virtual time.)
 */
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeNode, sleeperManifest, type FakeNode } from '../../helpers/fake-node.js';
import { eventually, type NodeletProcess } from '../../helpers/nodelet.js';

let node: FakeNode;
let cri: FakeNode['cri'];
let nodelet: NodeletProcess;
let dir: string;

beforeAll(async () => {
  node = await startFakeNode({ manifests: { 'app.yaml': sleeperManifest('app', undefined).replace('  hostNetwork: true\n', '  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n') } });
  ({ cri, nodelet, dir } = node);
  await eventually(() => [...cri.containers.values()].some((c) => c.state === 'CONTAINER_RUNNING'), 20_000);
});

afterAll(() => node?.close());

describe('a pod whose sandbox the runtime cannot stop', () => {
  it('is retried with the backoff and one warning, and removed once the runtime recovers', async () => {
    cri.failWith('StopPodSandbox', { code: grpc.status.UNKNOWN, message: 'failed to stop sandbox: device or resource busy' });
    const from = cri.calls.length;
    const t0 = Date.now();
    fs.rmSync(path.join(dir, 'manifests', 'app.yaml'));
    // 60 s of failures: attempts at about 0, 1, 3, 7, 15 and 31 s (the next is due at 63 s),
    // not one a second, and the log does not grow with them.
    const stopsSoFar = () => cri.calls.slice(from).filter((c) => c.method === 'StopPodSandbox').map((c) => c.at - t0);
    const linesBefore = nodelet.records.length;
    await new Promise((r) => setTimeout(r, 60_000 - (Date.now() - t0)));
    const stops = stopsSoFar();
    console.log(`StopPodSandbox failing for 60 s: attempts at ${stops.map((t) => (t / 1000).toFixed(1)).join(', ')} s; ${nodelet.records.length - linesBefore} log lines`);
    expect(stops.length).toBeGreaterThanOrEqual(5);
    expect(stops.length).toBeLessThanOrEqual(7);
    for (let i = 1; i < stops.length; i++) expect(stops[i]! - stops[i - 1]!).toBeGreaterThan(700 * 2 ** (i - 1));
    expect(nodelet.records.length - linesBefore).toBeLessThan(30);
    expect(cri.sandboxes.size).toBe(1);
    const warnings = nodelet.records.filter((r) => r.level === 'warn' && /removing pod failed/.test(r.msg));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.msg).toContain('device or resource busy');

    cri.failWith('StopPodSandbox', undefined);
    await eventually(() => cri.sandboxes.size === 0, 40_000, 100);
    expect(cri.containers.size).toBe(0);
    await nodelet.waitForMsg(/pod removed from the runtime after \d+ failed attempts/);
    expect(nodelet.records.filter((r) => r.level === 'warn' && /removing pod failed/.test(r.msg))).toHaveLength(1);
  }, 150_000);
});
