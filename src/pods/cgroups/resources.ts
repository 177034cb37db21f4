/**
 * What the kubelet writes into its cgroups, pure (pkg/kubelet/cm helpers_linux.go,
 * qos_container_manager_linux.go, node_container_manager_linux.go; pkg/kubelet/qos/policy.go):
 *
 *   - the pod cgroup (ResourceConfigForPod): CPU shares from the pod's requests; a CFS quota
 *     from the sum of its limits only when every container has a CPU limit (always for
 *     Guaranteed); a memory limit only when every container has a memory limit; `overhead`
 *     added to requests, and to the limits that are set; BestEffort: 2 shares only;
 *   - the QoS cgroups (UpdateCgroups): besteffort 2 shares, burstable the shares of the sum
 *     of the Burstable pods' CPU requests;
 *   - kubepods (node allocatable): memory, CPU shares and pids from capacity minus
 *     kubeReserved and systemReserved (the eviction thresholds are not subtracted here);
 *   - each container's oom_score_adj (GetContainerOOMScoreAdjust).
 *
 * Then the values as files, for cgroup v1 (per controller) and v2 (libcontainer's
 * conversions: cpu.weight from shares, cpu.max from quota and period).
 */
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { qosClass } from '../status/status.js';
import { isCriticalPod } from '../cri/swap.js';
import { podRequests, resourceAmount } from '../sync/predicates.js';
import type { QosClass } from './names.js';

/** The kubelet's ResourceConfig subset nodelet writes. Undefined: left as it is. */
export interface ResourceConfig {
  cpuShares?: number;
  /** Microseconds per period; -1: no limit. */
  cpuQuota?: number;
  cpuPeriod?: number;
  memoryBytes?: number;
  pidsLimit?: number;
}

export const MIN_SHARES = 2;
export const SHARES_PER_CPU = 1024;
export const DEFAULT_QUOTA_PERIOD = 100_000;
const MIN_QUOTA_PERIOD = 1000;

export function milliCpuToShares(milli: number): number {
  if (milli === 0) return MIN_SHARES;
  return Math.max(MIN_SHARES, Math.floor((milli * SHARES_PER_CPU) / 1000));
}

/** CFS quota for a CPU limit over `period` µs; 0 for no limit; at least 1 ms. */
export function milliCpuToQuota(milli: number, period: number): number {
  if (milli === 0) return 0;
  return Math.max(MIN_QUOTA_PERIOD, Math.floor((milli * period) / 1000));
}


/**
 * The pod's limits as component-helpers' PodLimits: app containers and sidecars summed, the
 * larger of that and each init container's own (with the sidecars started before it), then
 * `overhead` added to the limits that are set. Also whether every container, init included,
 * declares a CPU and a memory limit.
 */
export function podLimits(pod: Pod): { cpuMillis: number; memoryBytes: number; cpuDeclared: boolean; memoryDeclared: boolean } {
  let cpuDeclared = true;
  let memoryDeclared = true;
  const of = (c: Container) => {
    const cpu = resourceAmount('cpu', c.resources?.limits?.cpu);
    const mem = resourceAmount('memory', c.resources?.limits?.memory);
    if (cpu === 0) cpuDeclared = false;
    if (mem === 0) memoryDeclared = false;
    return { cpu, mem };
  };
  let cpu = 0;
  let mem = 0;
  for (const c of pod.spec?.containers ?? []) {
    const l = of(c);
    cpu += l.cpu;
    mem += l.mem;
  }
  let sideCpu = 0;
  let sideMem = 0;
  let initCpu = 0;
  let initMem = 0;
  for (const c of pod.spec?.initContainers ?? []) {
    const l = of(c);
    if (c.restartPolicy === 'Always') {
      cpu += l.cpu;
      mem += l.mem;
      sideCpu += l.cpu;
      sideMem += l.mem;
      initCpu = Math.max(initCpu, sideCpu);
      initMem = Math.max(initMem, sideMem);
    } else {
      initCpu = Math.max(initCpu, l.cpu + sideCpu);
      initMem = Math.max(initMem, l.mem + sideMem);
    }
  }
  cpu = Math.max(cpu, initCpu);
  mem = Math.max(mem, initMem);
  const overhead = pod.spec?.overhead ?? {};
  if (cpu > 0 && overhead.cpu !== undefined) cpu += resourceAmount('cpu', overhead.cpu);
  if (mem > 0 && overhead.memory !== undefined) mem += resourceAmount('memory', overhead.memory);
  return { cpuMillis: cpu, memoryBytes: mem, cpuDeclared, memoryDeclared };
}

export interface PodCgroupOptions {
  /** `cpuCFSQuota`: false leaves CPU limits unenforced (quota -1). */
  enforceCpuLimits: boolean;
  /** `cpuCFSQuotaPeriod` in µs. */
  cpuPeriod: number;
  /** `podPidsLimit` (> 0: set). */
  podPidsLimit?: number;
}

export function podQos(pod: Pod): QosClass {
  return qosClass(pod) as QosClass;
}

/** The kubelet's ResourceConfigForPod (hugepages and memory QoS aside). */
export function podResourceConfig(pod: Pod, o: PodCgroupOptions): ResourceConfig {
  const qos = podQos(pod);
  const pids = o.podPidsLimit !== undefined && o.podPidsLimit > 0 ? { pidsLimit: o.podPidsLimit } : {};
  if (qos === 'BestEffort') return { cpuShares: MIN_SHARES, ...pids };
  const reqs = podRequests(pod);
  const lim = podLimits(pod);
  const cpuShares = milliCpuToShares(reqs.get('cpu') ?? 0);
  const quota = o.enforceCpuLimits ? milliCpuToQuota(lim.cpuMillis, o.cpuPeriod) : -1;
  const out: ResourceConfig = { cpuShares, ...pids };
  if (qos === 'Guaranteed' || lim.cpuDeclared) {
    out.cpuQuota = quota;
    out.cpuPeriod = o.cpuPeriod;
  }
  if (qos === 'Guaranteed' || lim.memoryDeclared) out.memoryBytes = lim.memoryBytes;
  return out;
}

/** The QoS cgroups' settings for the pods on the node (the kubelet's setCPUCgroupConfig; memory reservations need QOSReserved, alpha: not done). */
export function qosResourceConfigs(pods: Iterable<Pod>): { Burstable: ResourceConfig; BestEffort: ResourceConfig } {
  let burstableMilli = 0;
  for (const p of pods) if (podQos(p) === 'Burstable') burstableMilli += podRequests(p).get('cpu') ?? 0;
  return { Burstable: { cpuShares: Math.max(MIN_SHARES, milliCpuToShares(burstableMilli)) }, BestEffort: { cpuShares: MIN_SHARES } };
}

/** What kubepods is limited to (the kubelet's getCgroupConfig of allocatable): memory, CPU shares, pids. */
export function nodeAllocatableConfig(a: { cpuMillis: number; memoryBytes: number; pids?: number }): ResourceConfig {
  return { cpuShares: milliCpuToShares(Math.max(0, a.cpuMillis)), memoryBytes: Math.max(0, a.memoryBytes), ...(a.pids !== undefined ? { pidsLimit: Math.max(0, a.pids) } : {}) };
}

const GUARANTEED_OOM_SCORE_ADJ = -997;
const BESTEFFORT_OOM_SCORE_ADJ = 1000;

/** The kubelet's IsNodeCriticalPod: a critical pod of priority class system-node-critical. */
export function isNodeCriticalPod(pod: Pod): boolean {
  return isCriticalPod(pod) && pod.spec?.priorityClassName === 'system-node-critical';
}

/**
 * The kubelet's GetContainerOOMScoreAdjust: node-critical and Guaranteed -997, BestEffort
 * 1000; Burstable 1000 - 1000*request/capacity (integer division), a sidecar no higher than
 * the app container with the smallest request, then at least 3 and at most 999.
 */
export function containerOomScoreAdjust(pod: Pod, c: Container, memoryCapacityBytes: number): number {
  if (isNodeCriticalPod(pod)) return GUARANTEED_OOM_SCORE_ADJ;
  const qos = podQos(pod);
  if (qos === 'Guaranteed') return GUARANTEED_OOM_SCORE_ADJ;
  if (qos === 'BestEffort') return BESTEFFORT_OOM_SCORE_ADJ;
  if (!(memoryCapacityBytes > 0)) return BESTEFFORT_OOM_SCORE_ADJ - 1;
  const request = (x: Container) => resourceAmount('memory', x.resources?.requests?.memory ?? x.resources?.limits?.memory);
  const adj = (req: number) => 1000 - Math.trunc((1000 * req) / memoryCapacityBytes);
  let score = adj(request(c));
  const isSidecar = c.restartPolicy === 'Always' && (pod.spec?.initContainers ?? []).some((i) => i.name === c.name);
  if (isSidecar && pod.spec?.containers?.length) {
    const minReq = Math.min(...pod.spec.containers.map(request));
    score = Math.min(score, adj(minReq));
  }
  if (score < 1000 + GUARANTEED_OOM_SCORE_ADJ) return 1000 + GUARANTEED_OOM_SCORE_ADJ;
  if (score === BESTEFFORT_OOM_SCORE_ADJ) return score - 1;
  return score;
}

/** libcontainer's ConvertCPUSharesToCgroupV2Value: [2, 262144] shares -> [1, 10000] weight; 0 unset. */
export function sharesToWeight(shares: number): number {
  if (shares === 0) return 0;
  return 1 + Math.floor(((shares - 2) * 9999) / 262142);
}

/** cgroup v1 files by controller (cpu, memory, pids). */
export function v1Files(r: ResourceConfig): Record<string, Record<string, string>> {
  const out: Record<string, Record<string, string>> = {};
  const put = (ctl: string, file: string, v: string) => ((out[ctl] ??= {})[file] = v);
  if (r.cpuShares !== undefined) put('cpu', 'cpu.shares', String(r.cpuShares));
  // The period first: a quota is checked against the period in place.
  if (r.cpuPeriod !== undefined) put('cpu', 'cpu.cfs_period_us', String(r.cpuPeriod));
  if (r.cpuQuota !== undefined) put('cpu', 'cpu.cfs_quota_us', String(r.cpuQuota === 0 ? -1 : r.cpuQuota));
  if (r.memoryBytes !== undefined) put('memory', 'memory.limit_in_bytes', r.memoryBytes === 0 ? '-1' : String(r.memoryBytes));
  if (r.pidsLimit !== undefined) put('pids', 'pids.max', r.pidsLimit > 0 ? String(r.pidsLimit) : 'max');
  return out;
}

/** cgroup v2 files (libcontainer's conversions). */
export function v2Files(r: ResourceConfig): Record<string, string> {
  const out: Record<string, string> = {};
  if (r.cpuShares !== undefined && r.cpuShares !== 0) out['cpu.weight'] = String(sharesToWeight(r.cpuShares));
  if (r.cpuQuota !== undefined || r.cpuPeriod !== undefined) {
    const quota = r.cpuQuota === undefined || r.cpuQuota <= 0 ? 'max' : String(r.cpuQuota);
    out['cpu.max'] = `${quota} ${r.cpuPeriod ?? DEFAULT_QUOTA_PERIOD}`;
  }
  if (r.memoryBytes !== undefined) out['memory.max'] = r.memoryBytes === 0 ? 'max' : String(r.memoryBytes);
  if (r.pidsLimit !== undefined) out['pids.max'] = r.pidsLimit > 0 ? String(r.pidsLimit) : 'max';
  return out;
}
