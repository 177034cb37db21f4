/**
 * Graceful node shutdown as connected mode wires it (src/connected.ts, with the daemon's two
 * hooks: the facts' runtime state through the shutdown manager, and its start waking the node
 * status reporter): when a shutdown starts, the Node's Ready=False with the kubelet's message
 * reaches the control plane at once, not after nodeStatusUpdateFrequency. In-memory Node API,
 * the test kit's clock; the machine facts and pressure signals are this host's.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Node, NodeStatus } from 'kubernetes-types/core/v1.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { connectedMode, type ControlPlanePorts, type ModeContext } from '../../../src/connected.js';
import type { KubeletConfiguration } from '../../../src/config/types.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import type { NodeApi } from '../../../src/node/reporter.js';
import type { RuntimeState } from '../../../src/runtime/health.js';
import { ManualClock } from '../../helpers/clock.js';
import { idleShutdownManager } from '../../helpers/shutdown-manager.js';

/** A Node API in memory: create, get, and a status patch that replaces conditions by type. */
class MemNodes implements NodeApi {
  nodes = new Map<string, Node>();
  patches: { at: number; ready: NonNullable<NodeStatus['conditions']>[number] | undefined }[] = [];
  constructor(readonly clock: ManualClock) {}
  async getNode(name: string) {
    return this.nodes.get(name);
  }
  async createNode(n: Node) {
    if (this.nodes.has(n.metadata!.name!)) throw new NodeletError('ALREADY_EXISTS', 'exists');
    this.nodes.set(n.metadata!.name!, { ...n, metadata: { ...n.metadata, uid: 'node-uid' } });
    return this.nodes.get(n.metadata!.name!)!;
  }
  async patchNodeStatus(name: string, status: NodeStatus) {
    const cur = this.nodes.get(name)!;
    const conditions = [...(cur.status?.conditions ?? []).filter((c) => !status.conditions?.some((p) => p.type === c.type)), ...(status.conditions ?? [])];
    const n = { ...cur, status: { ...cur.status, ...status, conditions } };
    this.nodes.set(name, n);
    this.patches.push({ at: this.clock.now(), ready: conditions.find((c) => c.type === 'Ready') });
    return n;
  }
}

const ready: RuntimeState = { runtimeReady: true, networkReady: true, reason: 'ContainerRuntimeReady', message: '', runtimeName: 'containerd', runtimeVersion: '2.0' };

let dir: string;
beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-shutdown-wiring-'))));
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('graceful node shutdown in connected mode', () => {
  it('the shutdown starting sends Ready=False, KubeletNotReady, "node is shutting down" at once', async () => {
    const clock = new ManualClock();
    const nodes = new MemNodes(clock);
    const unused = {} as never;
    const cp: ControlPlanePorts = { server: 'mem', nodes, leases: unused, reviews: unused, pods: unused, podStatus: unused, mirrorPods: unused, events: { create: async () => {}, patch: async () => {} }, close: async () => {} };
    const config = { nodeStatusUpdateFrequency: '10s', nodeStatusReportFrequency: '5m', nodeLeaseDurationSeconds: 40, evictionHard: {}, maxPods: 110, port: 10250 } as unknown as KubeletConfiguration;
    const mode = connectedMode(cp, { identity: { nodeName: 'n1', hostname: 'n1', ips: ['192.0.2.1'] }, config, clock, logger: silentLogger() });
    const shutdown = idleShutdownManager(dir, clock);
    // The daemon's ModeContext, as src/daemon.ts builds it for these two.
    const ctx: ModeContext = {
      sources: unused,
      pods: { podStatus: () => undefined, active: () => false },
      runtimeState: () => shutdown.runtimeState(ready),
      rootDir: dir,
      onNodeShutdown: (reportNow) => shutdown.onShutdownStart(reportNow),
    };
    const status = mode.services(ctx).find((s) => s.name === 'node-status')!;
    const life = new AbortController();
    await status.start(life.signal);
    await clock.whenSleeping();
    expect(nodes.patches.at(-1)!.ready).toMatchObject({ status: 'True', reason: 'KubeletReady' });
    const before = nodes.patches.length;
    await clock.advance(3_000);
    expect(nodes.patches).toHaveLength(before);

    const t = clock.now();
    const done = shutdown.processShutdown();
    await clock.whenSleeping();
    expect(nodes.patches.slice(before)).toEqual([{ at: t, ready: expect.objectContaining({ status: 'False', reason: 'KubeletNotReady', message: 'node is shutting down' }) }]);
    await done;
    life.abort();
    await status.stop();
  });
});
