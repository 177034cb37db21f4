import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { parseQuantity } from '../../../src/config/quantity.js';
import { containerConfig } from '../../../src/pods/cri/cri-config.js';
import { calcSwapForBurstable, containerSwapBehavior, isCriticalPod, type NodeSwap } from '../../../src/pods/cri/swap.js';

const GB = 1024 ** 3;
const quantity = (q: string | number) => parseQuantity(String(q)).value;

describe('calcSwapForBurstable (request / node memory * node swap)', () => {
  // The kubelet's own table (TestCalcSwapForBurstablePods).
  it.each([
    [1 * GB, 80 * GB, 4 * GB, 53687091],
    [2 * GB, 40 * GB, 2 * GB, 107374182],
    [5 * GB, 150 * GB, 40 * GB, 1431655765],
  ])('request %d, memory %d, swap %d -> %d', (req, mem, swap, want) => expect(calcSwapForBurstable(req, mem, swap)).toBe(want));

  it('refuses a zero node memory and a request above it', () => {
    expect(() => calcSwapForBurstable(1, 0, 1)).toThrow(/total node memory is 0/);
    expect(() => calcSwapForBurstable(2, 1, 1)).toThrow(/larger than total node memory/);
  });
});

const node: NodeSwap = { behavior: 'LimitedSwap', cgroupV2: true, controllerAvailable: true, memoryCapacityBytes: 8 * GB, swapCapacityBytes: 2 * GB };
const pod = (containers: Container[], over: Partial<Pod> = {}): Pod => ({ metadata: { name: 'p', namespace: 'default', uid: 'u1', ...(over.metadata ?? {}) }, spec: { containers, ...(over.spec ?? {}) } });
const burstable: Container = { name: 'c', image: 'i', resources: { requests: { memory: '1Gi' }, limits: { memory: '2Gi' } } };
const guaranteed: Container = { name: 'c', image: 'i', resources: { requests: { memory: '1Gi', cpu: '1' }, limits: { memory: '1Gi', cpu: '1' } } };
const bestEffort: Container = { name: 'c', image: 'i' };
const seccomp = { profileType: 'RuntimeDefault' as const };
const resources = (p: Pod, n: NodeSwap) => (containerConfig(p, p.spec!.containers[0]!, { restartCount: 0, seccomp, quantity, swap: n }).linux as { resources: Record<string, unknown> }).resources;

describe('container swap', () => {
  it.each([
    ['Burstable on cgroup v2: LimitedSwap', pod([burstable]), node, 'LimitedSwap'],
    ['Guaranteed: none', pod([guaranteed]), node, 'NoSwap'],
    ['BestEffort: none', pod([bestEffort]), node, 'NoSwap'],
    ['Burstable, container without memory: none', pod([{ name: 'c', image: 'i', resources: { requests: { cpu: '1' } } }]), node, 'NoSwap'],
    ['static pod (critical): none', pod([burstable], { metadata: { annotations: { 'kubernetes.io/config.source': 'file' } } }), node, 'NoSwap'],
    ['system-critical priority: none', pod([burstable], { spec: { containers: [burstable], priority: 2_000_001_000 } }), node, 'NoSwap'],
    ['NoSwap behaviour', pod([burstable]), { ...node, behavior: 'NoSwap' }, 'NoSwap'],
    ['cgroup v1: none', pod([burstable]), { ...node, cgroupV2: false }, 'NoSwap'],
  ] as const)('%s', (_n, p, n, want) => expect(containerSwapBehavior(p, p.spec!.containers[0]!, n, quantity)).toBe(want));

  it('LimitedSwap: memory.swap.max is the request\'s share of the node\'s swap', () => {
    expect(resources(pod([burstable]), node)).toMatchObject({ memoryLimitInBytes: 2 * GB, unified: { 'memory.swap.max': String(Math.trunc((1 / 8) * 2 * GB)) } });
  });

  it('NoSwap on cgroup v2: memory.swap.max 0; on cgroup v1: memory+swap = memory', () => {
    expect(resources(pod([guaranteed]), node)).toMatchObject({ unified: { 'memory.swap.max': '0' } });
    const v1 = resources(pod([guaranteed]), { ...node, cgroupV2: false });
    expect(v1.memorySwapLimitInBytes).toBe(GB);
    expect(v1.unified).toBeUndefined();
  });

  it('no swap controller: nothing set', () => {
    const r = resources(pod([burstable]), { ...node, controllerAvailable: false });
    expect(r.unified).toBeUndefined();
    expect(r.memorySwapLimitInBytes).toBeUndefined();
  });

  it('a request above the node memory falls back to no swap', () => {
    expect(resources(pod([{ ...burstable, resources: { requests: { memory: '9Gi' }, limits: { memory: '10Gi' } } }]), node)).toMatchObject({ unified: { 'memory.swap.max': '0' } });
  });

  it('isCriticalPod: static, mirror, priority', () => {
    expect(isCriticalPod(pod([]))).toBe(false);
    expect(isCriticalPod(pod([], { metadata: { annotations: { 'kubernetes.io/config.source': 'api' } } }))).toBe(false);
    expect(isCriticalPod(pod([], { metadata: { annotations: { 'kubernetes.io/config.mirror': 'h' } } }))).toBe(true);
  });
});
