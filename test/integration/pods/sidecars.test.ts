/**
 * Native sidecars on a real containerd (issue 28.1), static pods on this file's own
 * containerd: a sidecar whose startup probe passes after 2 s holds the app back until then;
 * the pod reaches Running 2/2 with Initialized; killing the sidecar behind nodelet restarts
 * only it; a restartPolicy Never pod with a sidecar ends Succeeded when its app exits 0; on
 * deletion the app stops before the sidecar (the runtime's own finish times).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ContainerStatus, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../helpers/nodelet.js';
import { busyboxPod, podContainers, startPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-sidecars';
let node: PodNode;

beforeAll(async () => {
  node = await startPodNode({ containerdDir: CONTAINERD_DIR });
}, 120_000);

afterAll(async () => {
  await node?.close();
}, 120_000);

const IMAGE = 'docker.io/local/busybox:latest';
/** A sidecar that answers its startup probe 2 s after it starts, and runs until stopped (it exits at once on SIGTERM). */
const sidecar = {
  name: 'proxy',
  image: IMAGE,
  imagePullPolicy: 'IfNotPresent',
  restartPolicy: 'Always',
  command: ['/bin/sh', '-c', 'trap "exit 0" TERM; sleep 2; touch /tmp/up; while true; do sleep 1; done'],
  startupProbe: { exec: { command: ['cat', '/tmp/up'] }, periodSeconds: 1, failureThreshold: 30 },
};

function withSidecar(name: string, script: string, restartPolicy?: string): object {
  const p = busyboxPod(name, script, restartPolicy ? { restartPolicy } : {}) as Pod;
  return { ...p, spec: { ...p.spec!, terminationGracePeriodSeconds: 10, initContainers: [sidecar] } };
}

const statusOf = (p: Pod | undefined, name: string): ContainerStatus | undefined => [...(p?.status?.initContainerStatuses ?? []), ...(p?.status?.containerStatuses ?? [])].find((s) => s.name === name);
const startedAt = (s: ContainerStatus | undefined) => Date.parse(s?.state?.running?.startedAt ?? s?.state?.terminated?.startedAt ?? '');

describe('native sidecars on containerd', () => {
  it('the app starts after the sidecar has started; Running 2/2, Initialized; a killed sidecar restarts alone; deletion stops the app first', async () => {
    const shared = path.join(node.dir, 'order');
    const p = withSidecar('mesh', 'trap "echo main >> /order/order; exit 0" TERM; while true; do sleep 1; done') as Pod;
    const volume = { name: 'order', hostPath: { path: shared, type: 'DirectoryOrCreate' } };
    const mount = { name: 'order', mountPath: '/order' };
    const proxySpec = { ...sidecar, command: ['/bin/sh', '-c', 'trap "echo proxy >> /order/order; exit 0" TERM; sleep 2; touch /tmp/up; while true; do sleep 1; done'], volumeMounts: [mount] };
    node.writeManifest('mesh.yaml', { ...p, spec: { ...p.spec!, volumes: [volume], initContainers: [proxySpec], containers: [{ ...p.spec!.containers[0]!, volumeMounts: [mount] }] } });
    const running = await eventually(async () => {
      const p = await node.pod('mesh');
      return p?.status?.phase === 'Running' && statusOf(p, 'main')?.ready && statusOf(p, 'proxy')?.ready ? p : undefined;
    }, 60_000);
    expect(running.status!.conditions!.find((c) => c.type === 'Initialized')?.status).toBe('True');
    expect(running.status!.conditions!.find((c) => c.type === 'Ready')?.status).toBe('True');
    const proxy = statusOf(running, 'proxy')!;
    expect(proxy).toMatchObject({ started: true, ready: true, restartCount: 0 });
    // The startup probe passes no sooner than 2 s after the sidecar started; the app started after that.
    const gap = startedAt(statusOf(running, 'main')) - startedAt(proxy);
    expect(gap).toBeGreaterThanOrEqual(2_000);

    // The sidecar killed behind nodelet: it alone restarts, the app keeps its container.
    const appId = statusOf(running, 'main')!.containerID!.replace('containerd://', '');
    const proxyId = proxy.containerID!.replace('containerd://', '');
    await node.cri.stopContainer(proxyId, 0);
    const restarted = await eventually(async () => {
      const p = await node.pod('mesh');
      const s = statusOf(p, 'proxy');
      return s?.restartCount === 1 && s.state?.running ? p : undefined;
    }, 60_000);
    expect(statusOf(restarted, 'main')).toMatchObject({ restartCount: 0, containerID: `containerd://${appId}` });

    // Deleted: the app stops first, then the sidecar. Each appends its name to a host file when
    // SIGTERM reaches it, so the file holds the order the runtime delivered the stops in.
    const uid = restarted.metadata!.uid!;
    fs.rmSync(path.join(node.manifests, 'mesh.yaml'));
    await eventually(async () => (await podContainers(node.cri, uid)).length === 0, 60_000);
    const order = fs.readFileSync(path.join(shared, 'order'), 'utf8');
    console.log(`sidecars: app started ${gap} ms after the sidecar; SIGTERM order on deletion: ${JSON.stringify(order)}`);
    expect(order).toBe('main\nproxy\n');
  }, 180_000);

  it('a restartPolicy Never pod ends Succeeded when its app exits 0, its sidecar stopped', async () => {
    node.writeManifest('job.yaml', withSidecar('job', 'echo done', 'Never'));
    const done = await eventually(async () => {
      const p = await node.pod('job');
      return p?.status?.phase === 'Succeeded' ? p : undefined;
    }, 60_000);
    expect(statusOf(done, 'main')?.state?.terminated?.exitCode).toBe(0);
    await eventually(async () => !statusOf(await node.pod('job'), 'proxy')?.state?.running, 30_000);
  }, 120_000);
});
