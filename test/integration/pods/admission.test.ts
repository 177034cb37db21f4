/**
 * The kubelet's predicate admission on a real containerd (issue 30.3), connected to the test
 * control plane: pods bound to the node that it cannot run end `Failed` with the kubelet's
 * reason and message and nothing of them reaches the runtime (no sandbox is ever made for them).
 * The node's allocatable is reduced by kubeReserved, as its Node reports; its taint is set
 * through the API as `kubectl taint` does.
 */
import os from 'node:os';
import type { Node, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NODES, PODS } from '../../../src/controlplane/client.js';
import { stopContainerd } from '../../helpers/containerd.js';
import { eventually } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { boundPod, NODE_NAME, startPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-admission';

let cluster: TestCluster;
let node: PodNode;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-admission-' });
  node = await startPodNode({ kubeconfig: cluster.nodeKubeconfig(NODE_NAME), containerdDir: CONTAINERD_DIR, config: { kubeReserved: '{cpu: 500m}' } });
  await eventually(async () => (await cluster.api.get<Node>(NODES, { name: NODE_NAME }).catch(() => undefined))?.status?.allocatable, 60_000);
}, 180_000);

afterAll(async () => {
  await node?.close();
  await cluster?.close();
  await stopContainerd({ dir: CONTAINERD_DIR });
}, 120_000);

const getPod = (name: string) => cluster.api.get<Pod>(PODS, { namespace: 'default', name }).catch(() => undefined);

function apiPod(name: string, over: { resources?: object; spec?: Partial<NonNullable<Pod['spec']>> } = {}): Pod {
  const p = boundPod(NODE_NAME, name, 'sleep 3600', over.resources ? { container: { resources: over.resources } } : {});
  return { ...p, spec: { ...p.spec!, automountServiceAccountToken: false, terminationGracePeriodSeconds: 0, ...over.spec } };
}

/** The pod's status once it is Failed. */
async function failed(name: string): Promise<NonNullable<Pod['status']>> {
  return eventually(async () => {
    const s = (await getPod(name))?.status;
    return s?.phase === 'Failed' ? s : undefined;
  }, 30_000, 100);
}

/** Whether the runtime ever saw a sandbox of this pod. */
async function sandboxesOf(name: string): Promise<number> {
  return (await node.cri.listPodSandbox()).filter((s) => s.labels['io.kubernetes.pod.name'] === name).length;
}

describe('admission on containerd', () => {
  it("the Node's allocatable is capacity minus kubeReserved", async () => {
    const n = await cluster.api.get<Node>(NODES, { name: NODE_NAME });
    const cores = os.availableParallelism();
    expect(n.status!.capacity!['cpu']).toBe(String(cores));
    expect(n.status!.allocatable!['cpu']).toBe(`${cores * 1000 - 500}m`);
  });

  it('a pod requesting more CPU than is left ends Failed/OutOfcpu, and no sandbox is made for it; a pod that fits runs', async () => {
    const cores = os.availableParallelism();
    await cluster.api.create<Pod>(PODS, apiPod('big', { resources: { requests: { cpu: `${cores}` } } }));
    const s = await failed('big');
    expect(s.reason).toBe('OutOfcpu');
    expect(s.message).toBe(`Pod was rejected: Node didn't have enough resource: cpu, requested: ${cores * 1000}, used: 0, capacity: ${cores * 1000 - 500}`);
    await cluster.api.create<Pod>(PODS, apiPod('fits', { resources: { requests: { cpu: '100m' } } }));
    await eventually(async () => (await getPod('fits'))?.status?.phase === 'Running' || undefined, 60_000);
    expect(await sandboxesOf('big')).toBe(0);
  });

  it('a mismatched nodeSelector: NodeAffinity; an untolerated NoExecute taint: TaintToleration; neither reaches the runtime', async () => {
    await cluster.api.create<Pod>(PODS, apiPod('elsewhere', { spec: { nodeSelector: { disk: 'ssd' } } }));
    const a = await failed('elsewhere');
    expect([a.reason, a.message]).toEqual(['NodeAffinity', "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"]);
    // kubectl taint nodes <node> dedicated=db:NoExecute
    await cluster.api.patch<Node>(NODES, { name: NODE_NAME }, { spec: { taints: [{ key: 'dedicated', value: 'db', effect: 'NoExecute' }] } }, { type: 'merge' });
    await eventually(async () => {
      await cluster.api.create<Pod>(PODS, apiPod(`tainted-${Date.now()}`)).catch(() => undefined);
      const pods = (await cluster.api.list<Pod>(PODS, { namespace: 'default' })).items.filter((p) => p.metadata!.name!.startsWith('tainted-'));
      return pods.some((p) => p.status?.reason === 'TaintToleration') || undefined;
    }, 30_000, 1000);
    const tainted = (await cluster.api.list<Pod>(PODS, { namespace: 'default' })).items.find((p) => p.status?.reason === 'TaintToleration')!;
    expect(tainted.status!.message).toBe("Pod was rejected: Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate");
    expect(await sandboxesOf('elsewhere')).toBe(0);
    expect(await sandboxesOf(tainted.metadata!.name!)).toBe(0);
    // A pod that tolerates it runs.
    await cluster.api.create<Pod>(PODS, apiPod('tolerant', { spec: { tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'db', effect: 'NoExecute' }] } }));
    await eventually(async () => (await getPod('tolerant'))?.status?.phase === 'Running' || undefined, 60_000);
  });
});
