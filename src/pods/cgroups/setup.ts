/**
 * Builds the pod cgroups from the configuration (called once by src/wiring/pods.ts):
 * `cgroupsPerQOS`, `cgroupRoot`, `cgroupDriver` (the runtime's when its CRI RuntimeConfig
 * answers, as the kubelet's KubeletCgroupDriverFromCRI), `enforceNodeAllocatable`,
 * `kubeReserved`/`systemReserved`, `cpuCFSQuota`, `cpuCFSQuotaPeriod`, `podPidsLimit`.
 */
import fs from 'node:fs/promises';
import { parseDuration } from '../../config/duration.js';
import { parseQuantity } from '../../config/quantity.js';
import type { CgroupDriver, KubeletConfiguration } from '../../config/types.js';
import { errorMessage } from '../../errors.js';
import type { EventSink } from '../../events.js';
import type { Logger } from '../../log.js';
import { PodCgroups, readCgroupLayout, type CgroupLayout, type NodeAllocatableAbsolute } from './pod-cgroups.js';
import { DEFAULT_QUOTA_PERIOD, nodeAllocatableConfig, type ResourceConfig } from './resources.js';

type CgroupConfig = Pick<
  KubeletConfiguration,
  'cgroupsPerQOS' | 'cgroupRoot' | 'cgroupDriver' | 'enforceNodeAllocatable' | 'kubeReserved' | 'systemReserved' | 'kubeReservedCgroup' | 'systemReservedCgroup' | 'cpuCFSQuota' | 'cpuCFSQuotaPeriod' | 'podPidsLimit'
>;

/** A reservation map (`cpu`, `memory`, `pid`) as the limits of its cgroup (the kubelet's getCgroupConfig); `-compressible`: CPU only. */
export function reservedCgroupConfig(m: Readonly<Record<string, string>> | undefined, compressibleOnly: boolean): ResourceConfig {
  const amount = (k: string, milli: boolean): number | undefined => {
    const v = m?.[k];
    if (v === undefined) return undefined;
    try {
      const q = parseQuantity(v);
      return milli ? Number(q.millis) : Number(q.roundedUp);
    } catch {
      return undefined;
    }
  };
  const cpu = amount('cpu', true);
  const mem = compressibleOnly ? undefined : amount('memory', false);
  const pid = compressibleOnly ? undefined : amount('pid', false);
  const full = nodeAllocatableConfig({ cpuMillis: cpu ?? 0, memoryBytes: mem ?? 0, ...(pid !== undefined ? { pids: pid } : {}) });
  return { ...(cpu !== undefined ? { cpuShares: full.cpuShares! } : {}), ...(mem !== undefined ? { memoryBytes: full.memoryBytes! } : {}), ...(pid !== undefined ? { pidsLimit: full.pidsLimit! } : {}) };
}

/**
 * What kubepods is limited to: capacity (cpu, memory, and pid = kernel.pid_max), minus
 * kubeReserved and systemReserved when `enforceNodeAllocatable` has `pods`; floored at 0.
 * The hard eviction thresholds are not subtracted (the kubelet's getNodeAllocatableInternalAbsolute).
 */
export function kubepodsLimits(cfg: Pick<CgroupConfig, 'cgroupsPerQOS' | 'enforceNodeAllocatable' | 'kubeReserved' | 'systemReserved'>, capacity: { cpuCores: number; memoryBytes: number; pidMax?: number }): NodeAllocatableAbsolute {
  const out: NodeAllocatableAbsolute = { cpuMillis: Math.round(capacity.cpuCores * 1000), memoryBytes: capacity.memoryBytes, ...(capacity.pidMax !== undefined ? { pids: capacity.pidMax } : {}) };
  if (!(cfg.cgroupsPerQOS && (cfg.enforceNodeAllocatable ?? []).includes('pods'))) return out;
  for (const m of [cfg.kubeReserved, cfg.systemReserved]) {
    for (const [k, v] of Object.entries(m ?? {})) {
      let q;
      try {
        q = parseQuantity(v);
      } catch {
        continue; // validated before
      }
      if (k === 'cpu') out.cpuMillis -= Number(q.millis);
      else if (k === 'memory') out.memoryBytes -= Number(q.roundedUp);
      else if (k === 'pid' && out.pids !== undefined) out.pids -= Number(q.roundedUp);
    }
  }
  out.cpuMillis = Math.max(0, out.cpuMillis);
  out.memoryBytes = Math.max(0, out.memoryBytes);
  if (out.pids !== undefined) out.pids = Math.max(0, out.pids);
  return out;
}

export interface PodCgroupsDeps {
  /** Asked for its cgroup driver (CRI RuntimeConfig); unset or failing: the configuration's. */
  cri?: { runtimeConfig(): Promise<{ cgroupDriver: CgroupDriver }> };
  machine: { cpuCores: number; memoryBytes: number };
  events?: EventSink;
  nodeName?: string;
  logger: Logger;
  /** Tests: the cgroup mounts (default: read from /proc/self/mountinfo). */
  layout?: CgroupLayout;
  /** Tests: kernel.pid_max (default: read from /proc). */
  pidMax?: number;
}

/** The pod cgroups for this configuration, or undefined when `cgroupsPerQOS` is false or no cgroup hierarchy is mounted (logged). */
export async function podCgroupsFor(cfg: CgroupConfig, d: PodCgroupsDeps): Promise<PodCgroups | undefined> {
  if (!cfg.cgroupsPerQOS) {
    d.logger.info('cgroupsPerQOS is false: no pod cgroups; sandboxes get the runtime\'s default cgroup');
    return undefined;
  }
  let layout: CgroupLayout;
  try {
    layout = d.layout ?? (await readCgroupLayout());
  } catch (err) {
    d.logger.error({ err: errorMessage(err) }, `cannot read the cgroup mounts: ${errorMessage(err)}; pods run without pod cgroups`);
    return undefined;
  }
  let driver = cfg.cgroupDriver;
  if (d.cri) {
    let timer: NodeJS.Timeout | undefined;
    try {
      // Bounded: a runtime that hangs must not hold nodelet's start (the host checks report it).
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('no answer within 2 s')), 2000);
        timer.unref();
      });
      const answered = (await Promise.race([d.cri.runtimeConfig(), deadline])).cgroupDriver;
      if (answered !== driver) d.logger.warn(`cgroupDriver ${driver} in the configuration is ignored: the runtime uses ${answered}`);
      driver = answered;
    } catch {
      // The runtime does not say (containerd before 2.0: UNIMPLEMENTED): the configuration decides; host checks report it.
    } finally {
      clearTimeout(timer);
    }
  }
  let pidMax = d.pidMax;
  if (pidMax === undefined) {
    const text = await fs.readFile('/proc/sys/kernel/pid_max', 'utf8').catch(() => '');
    const n = Number(text.trim());
    if (Number.isInteger(n) && n > 0) pidMax = n;
  }
  const limits = kubepodsLimits(cfg, { ...d.machine, ...(pidMax !== undefined ? { pidMax } : {}) });
  let period = DEFAULT_QUOTA_PERIOD;
  try {
    const ms = parseDuration(cfg.cpuCFSQuotaPeriod);
    if (ms > 0) period = Math.round(ms * 1000);
  } catch {
    // validated before
  }
  return new PodCgroups({
    layout,
    driver,
    cgroupRoot: cfg.cgroupRoot || '/',
    nodeAllocatable: () => limits,
    reserved: (['System', 'Kube'] as const).flatMap((who) => {
      const key = who === 'System' ? 'system-reserved' : 'kube-reserved';
      const keys = cfg.enforceNodeAllocatable ?? [];
      const cgroup = who === 'System' ? cfg.systemReservedCgroup : cfg.kubeReservedCgroup;
      if (!cgroup || !(keys.includes(key) || keys.includes(`${key}-compressible`))) return [];
      return [{ who, cgroup, config: reservedCgroupConfig(who === 'System' ? cfg.systemReserved : cfg.kubeReserved, !keys.includes(key)) }];
    }),
    pod: { enforceCpuLimits: cfg.cpuCFSQuota, cpuPeriod: period, ...(cfg.podPidsLimit > 0 ? { podPidsLimit: cfg.podPidsLimit } : {}) },
    logger: d.logger,
    ...(d.events ? { events: d.events } : {}),
    ...(d.nodeName ? { nodeName: d.nodeName } : {}),
  });
}
