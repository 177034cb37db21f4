/**
 * The eviction manager on a real containerd (issue 30.4), connected to the test control plane
 * (static pods are critical and never evicted, so the pods come from the API). The hard
 * memory threshold is set, at test time, 400Mi under what the node has available as nodelet
 * measures it (MemTotal minus the root memory cgroup's working set, else MemAvailable); a
 * BestEffort pod then holds 1200Mi in a process (busybox dd's buffer, kept by a pipe nobody
 * reads), and is evicted (Failed, Evicted, the kubelet's message, the event) while a
 * Guaranteed pod keeps running. With kernelMemcgNotification the crossing is seen within a
 * second: the time from the signal crossing the threshold (polled by the test every 100 ms,
 * from the same files) to the eviction in the API is printed and bounded.
 */
import fs from 'node:fs';
import type { Event as CoreEvent, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS, PODS } from '../../../src/controlplane/client.js';
import { memoryAvailable, parseMeminfo, statField } from '../../../src/node/pressure.js';
import { stopContainerd } from '../../helpers/containerd.js';
import { eventually } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { boundPod, NODE_NAME, startPodNode, type PodNode } from './harness.js';

const Mi = 1024 * 1024;
const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-eviction';

/** memory.available as nodelet's SignalReader reads it (src/node/signals.ts). */
function memoryAvailableNow(): number {
  const meminfo = parseMeminfo(fs.readFileSync('/proc/meminfo', 'utf8'));
  try {
    const usage = Number(fs.readFileSync('/sys/fs/cgroup/memory/memory.usage_in_bytes', 'utf8'));
    const inactive = statField(fs.readFileSync('/sys/fs/cgroup/memory/memory.stat', 'utf8'), 'total_inactive_file');
    if (inactive !== undefined && Number.isFinite(usage)) return memoryAvailable(meminfo['MemTotal']!, usage, inactive).available;
  } catch {
    // cgroup v2 or no root memory cgroup: MemAvailable, as nodelet.
  }
  return meminfo['MemAvailable']!;
}

let cluster: TestCluster;
let node: PodNode;
let thresholdMi: number;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-eviction-' });
  thresholdMi = Math.floor(memoryAvailableNow() / Mi) - 400;
  node = await startPodNode({
    kubeconfig: cluster.nodeKubeconfig(NODE_NAME),
    containerdDir: CONTAINERD_DIR,
    // kernelMemcgNotification: the crossing is seen within a second, not at the next 10 s turn.
    config: { evictionHard: `{memory.available: ${thresholdMi}Mi}`, evictionPressureTransitionPeriod: '30s', kernelMemcgNotification: true },
  });
}, 180_000);

afterAll(async () => {
  for (const name of ['hog', 'steady']) await cluster?.api.delete(PODS, { namespace: 'default', name }).catch(() => undefined);
  await node?.close();
  await cluster?.close();
  await stopContainerd({ dir: CONTAINERD_DIR });
}, 120_000);

const getPod = (name: string) => cluster.api.get<Pod>(PODS, { namespace: 'default', name }).catch(() => undefined);

function apiPod(name: string, script: string, resources?: object): Pod {
  const p = boundPod(NODE_NAME, name, script, resources ? { container: { resources } } : {});
  return { ...p, spec: { ...p.spec!, automountServiceAccountToken: false, terminationGracePeriodSeconds: 5 } };
}

describe('eviction on containerd', () => {
  it('evicts the BestEffort pod that uses the memory, first, and leaves the Guaranteed pod running', async () => {
    await cluster.api.create<Pod>(PODS, apiPod('steady', 'trap "exit 0" TERM; while true; do sleep 1; done', { requests: { cpu: '50m', memory: '64Mi' }, limits: { cpu: '50m', memory: '64Mi' } }));
    await eventually(async () => (await getPod('steady'))?.status?.phase === 'Running' || undefined, 60_000);
    await cluster.api.create<Pod>(PODS, apiPod('hog', 'sleep 2; dd if=/dev/zero bs=1200M count=1 | sleep 3600'));
    await eventually(async () => (await getPod('hog'))?.status?.phase === 'Running' || undefined, 60_000);
    // The crossing, seen from the same files nodelet reads, every 100 ms.
    const threshold = thresholdMi * Mi;
    const crossedAt = await eventually(async () => (memoryAvailableNow() < threshold ? Date.now() : undefined), 60_000, 100);
    const evicted = await eventually(async () => {
      const p = await getPod('hog');
      return p?.status?.phase === 'Failed' ? p : undefined;
    }, 60_000, 100);
    const evictedAt = Date.now();
    console.log(`eviction: threshold ${thresholdMi}Mi crossed -> pod Failed/Evicted in the API after ${evictedAt - crossedAt} ms with kernelMemcgNotification (kubelet housekeeping period: 10 s)`);
    console.log(`eviction message: ${evicted.status!.message}`);
    expect(evicted.status).toMatchObject({ phase: 'Failed', reason: 'Evicted' });
    expect(evicted.status!.message).toMatch(
      new RegExp(`^The node was low on resource: memory\\. Threshold quantity: ${thresholdMi}Mi, available: \\d+(Ki|Mi)?\\. Container main was using \\d+(Ki|Mi)?, request is 0, has larger consumption of memory\\. $`),
    );
    expect(evicted.status!.conditions!.find((c) => c.type === 'DisruptionTarget')).toMatchObject({ status: 'True', reason: 'TerminationByKubelet' });
    const events = (await cluster.api.listAll<CoreEvent>(EVENTS, { namespace: 'default' })).items.filter((e) => e.involvedObject.name === 'hog' && e.reason === 'Evicted');
    expect(events[0]?.message).toBe(evicted.status!.message);
    // Seen within a second, then the 1 s grace of a hard eviction and the status write (5.5 s
    // without the memory watch: the next 10 s turn).
    expect(evictedAt - crossedAt).toBeLessThan(5_000);
    // The memory came back with the pod's end: the Guaranteed pod is left alone.
    await new Promise((r) => setTimeout(r, 12_000));
    expect((await getPod('steady'))?.status).toMatchObject({ phase: 'Running' });
  }, 240_000);
});
