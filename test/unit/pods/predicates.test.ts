import { describe, expect, it } from 'vitest';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { podAdmitHandlers } from '../../../src/pods/sync/admission.js';
import { checkPredicates, nodeAffinityMatches, podRequests, type NodeView, type PredicateOptions } from '../../../src/pods/sync/predicates.js';
import { nodeViewFor } from '../../../src/node/node-view.js';
import { managerWithEvents } from '../../helpers/pod-manager.js';

const NODE: NodeView = {
  name: 'n1',
  labels: { 'kubernetes.io/hostname': 'n1', 'kubernetes.io/os': 'linux', disk: 'ssd', generation: '5' },
  taints: [],
  allocatable: { cpu: '2', memory: '4Gi', pods: '110', 'ephemeral-storage': '10Gi' },
};

function pod(name: string, over: { containers?: Partial<Container>[]; init?: Partial<Container>[]; spec?: Partial<NonNullable<Pod['spec']>>; static?: boolean; created?: string } = {}): Pod {
  return {
    metadata: {
      name,
      namespace: 'default',
      uid: `uid-${name}`,
      annotations: { 'kubernetes.io/config.source': over.static ? 'file' : 'api' },
      ...(over.created ? { creationTimestamp: over.created } : {}),
    },
    spec: {
      containers: (over.containers ?? [{}]).map((c, i) => ({ name: `c${i}`, image: 'busybox', ...c })),
      ...(over.init ? { initContainers: over.init.map((c, i) => ({ name: `i${i}`, image: 'busybox', ...c })) } : {}),
      ...over.spec,
    },
  };
}

const cpu = (req: string): Partial<Container> => ({ resources: { requests: { cpu: req } } });
const opts = (node: Partial<NodeView> = {}): PredicateOptions => ({ node: () => ({ ...NODE, ...node }), isStatic: (p) => p.metadata?.annotations?.['kubernetes.io/config.source'] !== 'api' });

describe('podRequests (component-helpers PodRequests)', () => {
  it('sums app containers, takes the larger of that and the init phase, counts sidecars in both, adds overhead', () => {
    const p = pod('p', {
      containers: [cpu('100m')],
      init: [cpu('500m'), { ...cpu('200m'), restartPolicy: 'Always' }, cpu('400m')],
      spec: { overhead: { cpu: '50m' } },
    });
    // app 100 + sidecar 200 = 300; init phase: 500, then 400 + the sidecar's 200 = 600; + overhead 50
    expect(podRequests(p).get('cpu')).toBe(650);
  });

  it('a limit without a request requests the limit (the API defaulting)', () => {
    const p = pod('p', { containers: [{ resources: { limits: { memory: '1Gi', cpu: '1' } } }, { resources: { limits: { cpu: '2' }, requests: { cpu: '500m' } } }] });
    expect(podRequests(p).get('memory')).toBe(1024 ** 3);
    expect(podRequests(p).get('cpu')).toBe(1500);
  });
});

describe('checkPredicates (the kubelet predicate admit handler)', () => {
  it('OutOfcpu with the kubelet message: requested, used by the admitted pods, allocatable', () => {
    const r = checkPredicates(pod('new', { containers: [cpu('1')] }), [pod('a', { containers: [cpu('1500m')] })], opts());
    expect(r).toEqual({ reason: 'OutOfcpu', message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000" });
    expect(checkPredicates(pod('new', { containers: [cpu('500m')] }), [pod('a', { containers: [cpu('1500m')] })], opts())).toBeUndefined();
  });

  it('OutOfmemory, OutOfephemeral-storage, OutOfpods; resources come before every other check', () => {
    const mem = pod('m', { containers: [{ resources: { requests: { memory: '5Gi' } } }], spec: { nodeSelector: { disk: 'hdd' } } });
    expect(checkPredicates(mem, [], opts())?.reason).toBe('OutOfmemory');
    const eph = pod('e', { containers: [{ resources: { requests: { 'ephemeral-storage': '11Gi' } } }] });
    expect(checkPredicates(eph, [], opts())).toEqual({ reason: 'OutOfephemeral-storage', message: `Node didn't have enough resource: ephemeral-storage, requested: ${11 * 1024 ** 3}, used: 0, capacity: ${10 * 1024 ** 3}` });
    expect(checkPredicates(pod('x'), [pod('a'), pod('b')], opts({ allocatable: { ...NODE.allocatable, pods: '2' } }))).toEqual({ reason: 'OutOfpods', message: "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2" });
  });

  it('an extended resource the node lacks is not judged (cluster-level); hugepages the node lacks are', () => {
    expect(checkPredicates(pod('g', { containers: [{ resources: { requests: { 'example.com/gpu': '1' }, limits: { 'example.com/gpu': '1' } } }] }), [], opts())).toBeUndefined();
    expect(checkPredicates(pod('g', { containers: [{ resources: { requests: { 'example.com/gpu': '2' } } }] }), [], opts({ allocatable: { ...NODE.allocatable, 'example.com/gpu': '1' } }))?.reason).toBe('OutOfexample.com/gpu');
    expect(checkPredicates(pod('h', { containers: [{ resources: { requests: { 'hugepages-2Mi': '4Mi', memory: '4Mi' } } }] }), [], opts())).toEqual({ reason: 'OutOfhugepages-2Mi', message: `Node didn't have enough resource: hugepages-2Mi, requested: ${4 * 1024 ** 2}, used: 0, capacity: 0` });
  });

  it('nodeSelector and required node affinity against the labels: NodeAffinity', () => {
    const msg = { reason: 'NodeAffinity', message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector" };
    expect(checkPredicates(pod('s', { spec: { nodeSelector: { disk: 'hdd' } } }), [], opts())).toEqual(msg);
    expect(checkPredicates(pod('s', { spec: { nodeSelector: { disk: 'ssd' } } }), [], opts())).toBeUndefined();
    const aff = (terms: object[]): Pod => pod('a', { spec: { affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms as never } } } } });
    const node = { ...NODE };
    expect(nodeAffinityMatches(aff([{ matchExpressions: [{ key: 'disk', operator: 'In', values: ['hdd'] }] }, { matchExpressions: [{ key: 'generation', operator: 'Gt', values: ['4'] }] }]), node)).toBe(true);
    expect(nodeAffinityMatches(aff([{ matchExpressions: [{ key: 'generation', operator: 'Lt', values: ['4'] }] }]), node)).toBe(false);
    expect(nodeAffinityMatches(aff([{ matchExpressions: [{ key: 'gpu', operator: 'DoesNotExist' }, { key: 'disk', operator: 'NotIn', values: ['hdd'] }] }]), node)).toBe(true);
    expect(nodeAffinityMatches(aff([{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n1'] }] }]), node)).toBe(true);
    expect(nodeAffinityMatches(aff([{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n2'] }] }]), node)).toBe(false);
    expect(nodeAffinityMatches(aff([{}]), node), 'an empty term matches nothing').toBe(false);
  });

  it('a host port an admitted pod holds: NodePorts (same protocol, overlapping host IP)', () => {
    const holder = pod('h', { containers: [{ ports: [{ containerPort: 80, hostPort: 8080 }] }] });
    const same = pod('s', { containers: [{ ports: [{ containerPort: 81, hostPort: 8080, hostIP: '127.0.0.1' }] }] });
    const udp = pod('u', { containers: [{ ports: [{ containerPort: 81, hostPort: 8080, protocol: 'UDP' }] }] });
    expect(checkPredicates(same, [holder], opts())).toEqual({ reason: 'NodePorts', message: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports" });
    expect(checkPredicates(udp, [holder], opts())).toBeUndefined();
  });

  it('an untolerated NoExecute taint refuses an API pod, not a static one; NoSchedule is the scheduler\'s business', () => {
    const tainted = opts({ taints: [{ key: 'dedicated', value: 'db', effect: 'NoExecute' }, { key: 'other', effect: 'NoSchedule' }] });
    expect(checkPredicates(pod('a'), [], tainted)).toEqual({ reason: 'TaintToleration', message: "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate" });
    expect(checkPredicates(pod('s', { static: true }), [], tainted)).toBeUndefined();
    expect(checkPredicates(pod('t', { spec: { tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'db', effect: 'NoExecute' }] } }), [], tainted)).toBeUndefined();
    expect(checkPredicates(pod('t', { spec: { tolerations: [{ operator: 'Exists' }] } }), [], tainted)).toBeUndefined();
    expect(checkPredicates(pod('t', { spec: { tolerations: [{ key: 'dedicated', value: 'web', effect: 'NoExecute' }] } }), [], tainted)?.reason).toBe('TaintToleration');
  });

  it('a pod for another OS: the kubernetes.io/os label or spec.os', () => {
    const labelled = pod('w');
    labelled.metadata!.labels = { 'kubernetes.io/os': 'windows' };
    expect(checkPredicates(labelled, [], opts())?.reason).toBe('PodOSSelectorNodeLabelDoesNotMatch');
    expect(checkPredicates(pod('w', { spec: { os: { name: 'windows' } } }), [], opts())).toEqual({ reason: 'PodOSNotSupported', message: "Failed to admit pod as the OS field doesn't match node OS" });
  });
});

describe('nodeViewFor', () => {
  const machine = { os: 'linux', arch: 'amd64', cpuCores: 4, memoryBytes: 8 * 1024 ** 3 };
  const config = { maxPods: 110, kubeReserved: { cpu: '500m', memory: '1Gi' }, systemReserved: { cpu: '500m' }, evictionHard: { 'memory.available': '100Mi' }, registerWithTaints: [{ key: 'k', value: 'v', effect: 'NoExecute' }] };
  it('standalone: allocatable is capacity minus reserved and evictionHard; labels and taints of registration', () => {
    const v = nodeViewFor({ nodeName: 'n1', hostname: 'h1', machine, config, ephemeralStorageBytes: () => undefined })();
    expect(v.allocatable).toEqual({ cpu: '3', memory: `${(8 * 1024 - 1024 - 100) * 1024}Ki`, pods: '110' });
    expect(v.labels['kubernetes.io/hostname']).toBe('h1');
    expect(v.taints).toEqual([{ key: 'k', value: 'v', effect: 'NoExecute' }]);
  });
  it('connected: the Node as the control plane has it (labels and taints an administrator set)', () => {
    const apiNode = { metadata: { name: 'n1', labels: { team: 'a' } }, spec: { taints: [] }, status: { allocatable: { cpu: '1', memory: '1Gi', pods: '10' } } };
    const v = nodeViewFor({ nodeName: 'n1', hostname: 'h1', machine, config, ephemeralStorageBytes: () => undefined, apiNode: () => apiNode })();
    expect(v).toEqual({ name: 'n1', labels: { team: 'a' }, taints: [], allocatable: { cpu: '1', memory: '1Gi', pods: '10' } });
  });
});

describe('PodManager predicate admission', () => {
  it('pods that do not all fit: the oldest run, the newest is Failed OutOfcpu with no CRI call for it; a finished pod frees its share', async () => {
    const { rt, events, m } = managerWithEvents({ admitHandlers: podAdmitHandlers({ kernelRelease: '6.1.0', allowedUnsafeSysctls: [], appArmorEnabled: false, predicates: opts() }) });
    const a = pod('a', { containers: [cpu('1')], created: '2026-01-01T00:00:01Z' });
    const b = pod('b', { containers: [cpu('1')], created: '2026-01-01T00:00:02Z' });
    const c = pod('c', { containers: [cpu('1')], created: '2026-01-01T00:00:03Z' });
    m.setDesired([c, b, a]); // listed newest first: admission still goes oldest first
    await m.syncOnce();
    expect(m.podStatus('uid-c')).toEqual({ phase: 'Failed', reason: 'OutOfcpu', message: "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000, used: 2000, capacity: 2000", qosClass: 'Burstable' });
    expect(m.podStatus('uid-a')!.phase).toBe('Running');
    expect(m.podStatus('uid-b')!.phase).toBe('Running');
    expect(rt.calls.filter((x) => x.startsWith('runSandbox'))).toHaveLength(2);
    expect(events).toContain("Warning OutOfcpu: Node didn't have enough resource: cpu, requested: 1000, used: 2000, capacity: 2000");
    // a rejected pod holds nothing: a new pod of 0 cpu is admitted beside them
    m.setDesired([c, b, a, pod('d', { created: '2026-01-01T00:00:04Z' })]);
    await m.syncOnce();
    expect(m.podStatus('uid-d')!.phase).not.toBe('Failed');
  });
});
