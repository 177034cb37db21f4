/**
 * What the kubelet writes into its cgroups: ResourceConfigForPod, the QoS cgroups' shares,
 * kubepods' limits, each container's oom_score_adj, and the v1/v2 files for them.
 */
import { describe, expect, it } from 'vitest';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { containerOomScoreAdjust, podResourceConfig, qosResourceConfigs, sharesToWeight, v1Files, v2Files } from '../../../../src/pods/cgroups/resources.js';
import { kubepodsLimits, reservedCgroupConfig } from '../../../../src/pods/cgroups/setup.js';

const OPTS = { enforceCpuLimits: true, cpuPeriod: 100_000 };
const Mi = 1024 * 1024;
const Gi = 1024 * Mi;

function pod(containers: Container['resources'][], extra: Partial<NonNullable<Pod['spec']>> = {}): Pod {
  return { metadata: { name: 'p', namespace: 'default', uid: 'u1' }, spec: { containers: containers.map((resources, i) => ({ name: `c${i}`, image: 'busybox', ...(resources ? { resources } : {}) })), ...extra } };
}

const guaranteed = pod([
  { requests: { cpu: '500m', memory: '128Mi' }, limits: { cpu: '500m', memory: '128Mi' } },
  { requests: { cpu: '250m', memory: '64Mi' }, limits: { cpu: '250m', memory: '64Mi' } },
]);
const burstableNoCpuLimit = pod([
  { requests: { cpu: '100m', memory: '64Mi' }, limits: { memory: '128Mi' } },
  { requests: { cpu: '200m' }, limits: { cpu: '400m', memory: '128Mi' } },
]);
const bestEffort = pod([undefined]);

describe('podResourceConfig (ResourceConfigForPod)', () => {
  it.each([
    ['Guaranteed: shares from requests, quota and memory from the summed limits', guaranteed, OPTS, { cpuShares: 768, cpuQuota: 75_000, cpuPeriod: 100_000, memoryBytes: 192 * Mi }],
    ['Guaranteed with overhead added to requests and limits', { ...guaranteed, spec: { ...guaranteed.spec!, overhead: { cpu: '100m', memory: '10Mi' } } }, OPTS, { cpuShares: 870, cpuQuota: 85_000, cpuPeriod: 100_000, memoryBytes: 202 * Mi }],
    ['Burstable with a container without a CPU limit: no quota; every memory limit set: memory', burstableNoCpuLimit, OPTS, { cpuShares: 307, memoryBytes: 256 * Mi }],
    ['Burstable without any memory limit: no memory', pod([{ requests: { cpu: '1' }, limits: { cpu: '2' } }, { requests: { memory: '1Gi' } }]), OPTS, { cpuShares: 1024 }],
    ['BestEffort: 2 shares only', bestEffort, OPTS, { cpuShares: 2 }],
    ['cpuCFSQuota false: quota -1', guaranteed, { ...OPTS, enforceCpuLimits: false }, { cpuShares: 768, cpuQuota: -1, cpuPeriod: 100_000, memoryBytes: 192 * Mi }],
    ['cpuCFSQuotaPeriod and podPidsLimit', guaranteed, { enforceCpuLimits: true, cpuPeriod: 50_000, podPidsLimit: 256 }, { cpuShares: 768, cpuQuota: 37_500, cpuPeriod: 50_000, memoryBytes: 192 * Mi, pidsLimit: 256 }],
    [
      'an init container larger than the app containers decides the limits',
      pod([{ requests: { cpu: '100m', memory: '64Mi' }, limits: { cpu: '1', memory: '128Mi' } }], { initContainers: [{ name: 'init', image: 'busybox', resources: { requests: { cpu: '100m', memory: '64Mi' }, limits: { cpu: '2', memory: '1Gi' } } }] }),
      OPTS,
      { cpuShares: 102, cpuQuota: 200_000, cpuPeriod: 100_000, memoryBytes: Gi },
    ],
    [
      'an init container without limits leaves the pod without quota and memory limit',
      pod([{ requests: { cpu: '100m', memory: '64Mi' }, limits: { cpu: '1', memory: '128Mi' } }], { initContainers: [{ name: 'init', image: 'busybox' }] }),
      OPTS,
      { cpuShares: 102 },
    ],
  ])('%s', (_name, p, o, want) => {
    expect(podResourceConfig(p as Pod, o)).toEqual(want);
  });
});

describe('qosResourceConfigs (the QoS container manager)', () => {
  it('gives burstable the shares of the Burstable pods\' CPU requests and besteffort 2', () => {
    expect(qosResourceConfigs([guaranteed, burstableNoCpuLimit, bestEffort, burstableNoCpuLimit])).toEqual({ Burstable: { cpuShares: 614 }, BestEffort: { cpuShares: 2 } });
    expect(qosResourceConfigs([])).toEqual({ Burstable: { cpuShares: 2 }, BestEffort: { cpuShares: 2 } });
  });
});

describe('kubepods limits (node allocatable)', () => {
  const cfg = { cgroupsPerQOS: true, enforceNodeAllocatable: ['pods'], kubeReserved: { cpu: '500m', memory: '1Gi', pid: '1000' }, systemReserved: { memory: '512Mi' } };
  it('is capacity minus kubeReserved and systemReserved with pods enforced (eviction thresholds not subtracted)', () => {
    expect(kubepodsLimits(cfg, { cpuCores: 2, memoryBytes: 8 * Gi, pidMax: 4_194_304 })).toEqual({ cpuMillis: 1500, memoryBytes: 8 * Gi - Gi - 512 * Mi, pids: 4_193_304 });
  });
  it('is capacity without enforcement, and never negative', () => {
    expect(kubepodsLimits({ ...cfg, enforceNodeAllocatable: [] }, { cpuCores: 2, memoryBytes: 8 * Gi })).toEqual({ cpuMillis: 2000, memoryBytes: 8 * Gi });
    expect(kubepodsLimits({ ...cfg, kubeReserved: { cpu: '10' } }, { cpuCores: 2, memoryBytes: 8 * Gi })).toEqual({ cpuMillis: 0, memoryBytes: 8 * Gi - 512 * Mi });
  });
  it('limits a reserved cgroup to its reservation (-compressible: CPU only)', () => {
    expect(reservedCgroupConfig({ cpu: '500m', memory: '1Gi', pid: '1000' }, false)).toEqual({ cpuShares: 512, memoryBytes: Gi, pidsLimit: 1000 });
    expect(reservedCgroupConfig({ cpu: '500m', memory: '1Gi' }, true)).toEqual({ cpuShares: 512 });
  });
});

describe('containerOomScoreAdjust (GetContainerOOMScoreAdjust)', () => {
  const cap = 4 * Gi;
  const burstable = (memory?: string) => pod([{ requests: { cpu: '100m', ...(memory ? { memory } : {}) } }]);
  it.each([
    ['Guaranteed', guaranteed, -997],
    ['BestEffort', bestEffort, 1000],
    ['Burstable asking a quarter of memory', burstable('1Gi'), 750],
    ['Burstable asking no memory (1000 would tie BestEffort)', burstable(undefined), 999],
    ['Burstable asking all the memory (at least 3)', burstable('4Gi'), 3],
    ['Burstable asking more than the node has', burstable('8Gi'), 3],
    ['Burstable asking 1 byte (integer division)', burstable('1'), 999],
    ['a node-critical BestEffort pod', { ...bestEffort, spec: { ...bestEffort.spec!, priority: 2_000_001_000, priorityClassName: 'system-node-critical' } }, -997],
    ['a cluster-critical BestEffort pod is not node-critical', { ...bestEffort, spec: { ...bestEffort.spec!, priority: 2_000_000_000, priorityClassName: 'system-cluster-critical' } }, 1000],
  ])('%s', (_name, p, want) => {
    expect(containerOomScoreAdjust(p as Pod, (p as Pod).spec!.containers[0]!, cap)).toBe(want);
  });

  it('gives a sidecar no more than the app container asking least', () => {
    const sidecar: Container = { name: 'side', image: 'busybox', restartPolicy: 'Always', resources: { requests: { cpu: '10m' } } };
    const p = pod([{ requests: { memory: '1Gi' } }, { requests: { memory: '2Gi' } }], { initContainers: [sidecar] });
    expect(containerOomScoreAdjust(p, sidecar, cap)).toBe(750);
  });
});

describe('cgroup files', () => {
  it('writes v1 files per controller', () => {
    expect(v1Files({ cpuShares: 768, cpuQuota: 75_000, cpuPeriod: 100_000, memoryBytes: 192 * Mi, pidsLimit: 100 })).toEqual({
      cpu: { 'cpu.shares': '768', 'cpu.cfs_period_us': '100000', 'cpu.cfs_quota_us': '75000' },
      memory: { 'memory.limit_in_bytes': String(192 * Mi) },
      pids: { 'pids.max': '100' },
    });
    expect(v1Files({ cpuShares: 2, cpuQuota: -1, cpuPeriod: 100_000 })).toEqual({ cpu: { 'cpu.shares': '2', 'cpu.cfs_period_us': '100000', 'cpu.cfs_quota_us': '-1' } });
  });

  it('writes v2 files with libcontainer\'s conversions', () => {
    expect(v2Files({ cpuShares: 768, cpuQuota: 75_000, cpuPeriod: 100_000, memoryBytes: 192 * Mi, pidsLimit: 100 })).toEqual({ 'cpu.weight': '30', 'cpu.max': '75000 100000', 'memory.max': String(192 * Mi), 'pids.max': '100' });
    expect(v2Files({ cpuShares: 2, cpuQuota: -1, cpuPeriod: 100_000 })).toEqual({ 'cpu.weight': '1', 'cpu.max': 'max 100000' });
    expect([2, 1024, 262_144].map(sharesToWeight)).toEqual([1, 39, 10_000]);
  });
});
