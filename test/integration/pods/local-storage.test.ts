/**
 * Local ephemeral storage limits on a real containerd (issues 28.4 and 30.4), pods from the
 * test control plane (static pods are critical and never evicted): an emptyDir written past its
 * `sizeLimit`, and a container whose logs pass its `ephemeral-storage` limit, end Failed/Evicted
 * with the kubelet's messages and an Evicted event, without a DisruptionTarget condition; a pod
 * within its limits keeps running. The eviction manager measures at its 10 s housekeeping.
 */
import type { Event as CoreEvent, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS, PODS } from '../../../src/controlplane/client.js';
import { stopContainerd } from '../../helpers/containerd.js';
import { eventually } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { boundPod, NODE_NAME, startPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-local-storage';
const NAMES = ['scratch', 'chatty', 'within'];

let cluster: TestCluster;
let node: PodNode;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-local-storage-' });
  node = await startPodNode({ kubeconfig: cluster.nodeKubeconfig(NODE_NAME), containerdDir: CONTAINERD_DIR });
}, 180_000);

afterAll(async () => {
  for (const name of NAMES) await cluster?.api.delete(PODS, { namespace: 'default', name }).catch(() => undefined);
  await node?.close();
  await cluster?.close();
  await stopContainerd({ dir: CONTAINERD_DIR });
}, 120_000);

const getPod = (name: string) => cluster.api.get<Pod>(PODS, { namespace: 'default', name }).catch(() => undefined);

function apiPod(name: string, script: string, o: { sizeLimit?: string; limit?: string; second?: string } = {}): Pod {
  const p = boundPod(NODE_NAME, name, script, o.limit ? { container: { resources: { limits: { 'ephemeral-storage': o.limit } } } } : {});
  const spec = p.spec!;
  return {
    ...p,
    spec: {
      ...spec,
      automountServiceAccountToken: false,
      ...(o.sizeLimit ? { volumes: [{ name: 'cache', emptyDir: { sizeLimit: o.sizeLimit } }] } : {}),
      containers: [
        { ...spec.containers[0]!, ...(o.sizeLimit ? { volumeMounts: [{ name: 'cache', mountPath: '/cache' }] } : {}) },
        ...(o.second ? [{ name: 'quiet', image: spec.containers[0]!.image, imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'], resources: { limits: { 'ephemeral-storage': o.second } } }] : []),
      ],
    },
  };
}

describe('local storage limits on containerd', () => {
  it('an emptyDir past its sizeLimit and a container past its ephemeral-storage limit evict their pods; a pod within its limits runs on', async () => {
    await cluster.api.create<Pod>(PODS, apiPod('scratch', 'dd if=/dev/zero of=/cache/f bs=1024 count=2048 && sleep 3600', { sizeLimit: '1024Ki' }));
    // ~2 MB of output: its log file (with the CRI prefixes) passes 1Mi; the second container's
    // 100Mi keeps the pod's total limit (101Mi) out of the way, so the container's own speaks.
    await cluster.api.create<Pod>(PODS, apiPod('chatty', 'yes 0123456789012345678901234567890123456789 | head -c 2000000; sleep 3600', { limit: '1Mi', second: '100Mi' }));
    await cluster.api.create<Pod>(PODS, apiPod('within', 'dd if=/dev/zero of=/cache/f bs=1024 count=1024 && sleep 3600', { sizeLimit: '10Mi' }));
    const t0 = Date.now();
    const failed = async (name: string) => {
      const p = await getPod(name);
      return p?.status?.phase === 'Failed' ? p : undefined;
    };
    const scratch = await eventually(() => failed('scratch'), 60_000, 200);
    const chatty = await eventually(() => failed('chatty'), 60_000, 200);
    console.log(`local storage: both pods Failed/Evicted ${Date.now() - t0} ms after their creation (the eviction manager's housekeeping: 10 s)`);
    expect(scratch.status).toMatchObject({ reason: 'Evicted', message: 'Usage of EmptyDir volume "cache" exceeds the limit "1Mi". ' });
    expect(chatty.status).toMatchObject({ reason: 'Evicted', message: 'Container main exceeded its local ephemeral storage limit "1Mi". ' });
    for (const p of [scratch, chatty]) expect(p.status?.conditions?.find((c) => c.type === 'DisruptionTarget')).toBeUndefined();
    const events = (await cluster.api.listAll<CoreEvent>(EVENTS, { namespace: 'default' })).items.filter((e) => e.reason === 'Evicted');
    expect(events.map((e) => `${e.involvedObject.name}: ${e.message}`).sort()).toEqual([
      'chatty: Container main exceeded its local ephemeral storage limit "1Mi". ',
      'scratch: Usage of EmptyDir volume "cache" exceeds the limit "1Mi". ',
    ]);
    const within = await getPod('within');
    expect(within?.status?.phase).toBe('Running');
    expect(within?.status?.containerStatuses?.[0]?.state?.running).toBeDefined();
  }, 120_000);
});
