/**
 * A gRPC liveness probe on containerd (issue 28.5): a hostNetwork static pod whose
 * `livenessProbe` is `grpc: {port}`, against a grpc.health.v1.Health server this test serves
 * on 127.0.0.1 (the node's IP here: `--node-ip 127.0.0.1`, so the probe of a hostNetwork pod
 * goes to it). While it answers SERVING the container keeps running; fewer NOT_SERVING
 * answers in a row than `failureThreshold` restart nothing; `failureThreshold` of them restart
 * the container once, with the kubelet's probe message.
 */
import * as grpc from '@grpc/grpc-js';
import type { ContainerStatus } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stopContainerd } from '../../helpers/containerd.js';
import { serveHealth } from '../../helpers/grpc-health.js';
import { eventually } from '../../helpers/nodelet.js';
import { busyboxPod, startPodNode, type PodNode } from './harness.js';

/** A containerd of its own: stopped at the end. */
const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-grpc-probe';
const SERVING = 1;
const NOT_SERVING = 2;

/**
 * A grpc-js server with only grpc.health.v1.Health/Check: it answers NOT_SERVING for the next
 * `notServing` checks, SERVING otherwise, and counts every check.
 */
class HealthServer {
  readonly server = new grpc.Server();
  checks = 0;
  notServing = 0;
  port = 0;

  async start(): Promise<void> {
    this.port = await serveHealth(this.server, (_call, cb) => {
      this.checks++;
      if (this.notServing > 0) {
        this.notServing--;
        return cb(null, { status: NOT_SERVING });
      }
      cb(null, { status: SERVING });
    });
  }

  /** Resolves once `n` more checks have been answered. */
  async awaitChecks(n: number, timeoutMs: number): Promise<void> {
    const target = this.checks + n;
    await eventually(async () => this.checks >= target, timeoutMs);
  }
}

let node: PodNode;
const health = new HealthServer();

beforeAll(async () => {
  await health.start();
  node = await startPodNode({ containerdDir: CONTAINERD_DIR, args: ['--node-ip', '127.0.0.1'] });
}, 120_000);

afterAll(async () => {
  await node?.close();
  health.server.forceShutdown();
  await stopContainerd({ dir: CONTAINERD_DIR });
}, 120_000);

async function mainStatus(): Promise<ContainerStatus | undefined> {
  return (await node.pod('grpc-live'))?.status?.containerStatuses?.find((c) => c.name === 'main');
}

describe('gRPC liveness probe on containerd', () => {
  it('SERVING keeps the container; NOT_SERVING failureThreshold times in a row restarts it once, with the kubelet\'s message', async () => {
    node.writeManifest(
      'grpc-live.yaml',
      busyboxPod('grpc-live', 'sleep 3600', { container: { livenessProbe: { grpc: { port: health.port }, periodSeconds: 1, timeoutSeconds: 1, failureThreshold: 2 } } }),
    );
    const first = await eventually(async () => {
      const s = await mainStatus();
      return s?.state?.running ? s : undefined;
    }, 60_000);
    // SERVING: probed every second, the same container keeps running.
    await health.awaitChecks(3, 15_000);
    expect(await mainStatus()).toMatchObject({ containerID: first.containerID, restartCount: 0, state: { running: {} } });
    // One NOT_SERVING, then SERVING again: below failureThreshold (2), nothing restarts.
    health.notServing = 1;
    await health.awaitChecks(3, 15_000);
    expect(await mainStatus()).toMatchObject({ containerID: first.containerID, restartCount: 0 });
    // Two in a row: the container is killed and started again, once (the new one is SERVING).
    health.notServing = 2;
    const restarted = await eventually(async () => {
      const s = await mainStatus();
      return s && s.restartCount >= 1 && s.state?.running && s.lastState?.terminated ? s : undefined;
    }, 30_000);
    expect(restarted.containerID).not.toBe(first.containerID);
    expect(restarted.lastState?.terminated?.containerID).toBe(first.containerID);
    await health.awaitChecks(3, 15_000);
    expect(await mainStatus()).toMatchObject({ containerID: restarted.containerID, restartCount: 1, state: { running: {} } });
    // The probe's output as the kubelet words it (standalone: the Unhealthy event's text is in nodelet's log).
    expect(node.nodelet.records.some((r) => r.level === 'warn' && r.msg === 'liveness probe failed 2 times: service unhealthy (responded with "NOT_SERVING")')).toBe(true);
  }, 120_000);
});
