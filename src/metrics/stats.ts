/**
 * The node's and its pods' resource usage, for `/stats/summary` (the Summary API,
 * k8s.io/kubelet/pkg/apis/stats/v1alpha1) and `/metrics/resource` (resource.ts), built from
 * one set of reads:
 * - CRI: ListPodSandbox (ready) + ListContainers (running) say what is live;
 *   ListContainerStats gives each container's cpu, memory, writable layer (and swap where
 *   the runtime reports it); ListPodSandboxStats gives pod cpu/memory/network where the
 *   runtime answers it (containerd 1.6 does not for sandboxes without a cgroup parent:
 *   then pod usage is the sum of its containers', and the failure is remembered for a
 *   minute so scrapes do not pay for it); ImageFsInfo the image filesystem.
 * - host: the root cgroup (cgroup v1 cpuacct.usage, memory.usage_in_bytes and memory.stat)
 *   or /proc/stat, /proc/meminfo (memory, swap), statfs of the root dir and image fs,
 *   /proc/sys/kernel/pid_max and /proc/loadavg (rlimit), /proc/stat btime (node start).
 *
 * Contract: `get()` answers a snapshot no older than `maxAgeMs` (default 2 s); concurrent
 * callers share one collection in flight, so several scrapers in one interval cost one set
 * of CRI calls. A CRI failure rejects (the caller answers 500 / resource_scrape_error 1);
 * host files that cannot be read leave their fields out.
 */
import fsp from 'node:fs/promises';
import { realClock, type Clock } from '../clock.js';
import type { ContainerStats as CriContainerStats, ContainerState, CpuUsage, ImageService, MemoryUsage, PodSandboxState, PodSandboxStats as CriPodStats, RuntimeService, SwapUsage, UInt64Value } from '../runtime/types.js';

// ------------------------------------------------------------------ Summary API (v1alpha1) shapes

export interface CPUStats {
  time: string;
  usageNanoCores?: number;
  usageCoreNanoSeconds?: number;
}
export interface MemoryStats {
  time: string;
  availableBytes?: number;
  usageBytes?: number;
  workingSetBytes?: number;
  rssBytes?: number;
  pageFaults?: number;
  majorPageFaults?: number;
}
export interface SwapStats {
  time: string;
  swapAvailableBytes?: number;
  swapUsageBytes?: number;
}
export interface FsStats {
  time: string;
  availableBytes?: number;
  capacityBytes?: number;
  usedBytes?: number;
  inodesFree?: number;
  inodes?: number;
  inodesUsed?: number;
}
export interface NetworkStats {
  time: string;
  name?: string;
  rxBytes?: number;
  rxErrors?: number;
  txBytes?: number;
  txErrors?: number;
  interfaces?: { name: string; rxBytes?: number; rxErrors?: number; txBytes?: number; txErrors?: number }[];
}
export interface ContainerStats {
  name: string;
  startTime: string;
  cpu?: CPUStats;
  memory?: MemoryStats;
  rootfs?: FsStats;
  swap?: SwapStats;
}
export interface PodStats {
  podRef: { name: string; namespace: string; uid: string };
  startTime: string;
  containers: ContainerStats[];
  cpu?: CPUStats;
  memory?: MemoryStats;
  network?: NetworkStats;
  'ephemeral-storage'?: FsStats;
  process_stats?: { process_count?: number };
  swap?: SwapStats;
}
export interface NodeStats {
  nodeName: string;
  startTime: string;
  cpu?: CPUStats;
  memory?: MemoryStats;
  fs?: FsStats;
  runtime?: { imageFs?: FsStats; containerFs?: FsStats };
  rlimit?: { time: string; maxpid?: number; curproc?: number };
  swap?: SwapStats;
}
export interface Summary {
  node: NodeStats;
  pods: PodStats[];
}

/** Times as the Summary API writes them (metav1.Time: RFC 3339, whole seconds). */
export function rfc3339(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

/** A snapshot: the Summary plus the exact sample times (ms) the resource metrics carry. */
export interface StatsSnapshot {
  summary: Summary;
  /** Milliseconds since the epoch at which the snapshot was taken. */
  takenAtMs: number;
  /** Exact sample times (ms), keyed by the stats objects of `summary` (its `time` strings keep whole seconds only). */
  timesMs: WeakMap<object, number>;
}

// ------------------------------------------------------------------ inputs

export type StatsRuntime = Pick<RuntimeService, 'listPodSandbox' | 'listContainers' | 'listContainerStats' | 'listPodSandboxStats'> & Pick<ImageService, 'imageFsUsage'>;

export interface HostReader {
  /** File text, or undefined when it cannot be read. */
  read(path: string): Promise<string | undefined>;
  statfs(path: string): Promise<{ bsize: number; blocks: number; bfree: number; bavail: number; files: number; ffree: number } | undefined>;
}

export const realHost: HostReader = {
  async read(p) {
    try {
      return await fsp.readFile(p, 'utf8');
    } catch {
      return undefined;
    }
  },
  async statfs(p) {
    try {
      return await fsp.statfs(p);
    } catch {
      return undefined;
    }
  },
};

export interface StatsProviderOptions {
  runtime: StatsRuntime;
  nodeName: string;
  /** Its filesystem is the node's `fs` (nodefs). */
  rootDir: string;
  clock?: Clock;
  host?: HostReader;
  maxAgeMs?: number;
  /** Called with each collection's wall time and outcome (metrics). */
  onCollect?: (seconds: number, ok: boolean) => void;
}

const SANDBOX_READY: PodSandboxState = 'SANDBOX_READY';
const RUNNING: ContainerState = 'CONTAINER_RUNNING';
const USER_HZ = 100;

const v = (x: UInt64Value | null | undefined): number | undefined => (x ? Number(x.value) : undefined);
const nsToMs = (ns: number): number => ns / 1e6;

function parseKeyed(text: string | undefined, sep: RegExp): Map<string, number> {
  const m = new Map<string, number>();
  for (const line of (text ?? '').split('\n')) {
    const [k, val] = line.split(sep);
    if (k && val !== undefined) m.set(k.trim(), Number.parseInt(val, 10));
  }
  return m;
}

/** Removes undefined fields (so JSON and comparisons show only what is known). */
function defined<T extends object>(o: T): T {
  for (const k of Object.keys(o) as (keyof T)[]) if (o[k] === undefined) delete o[k];
  return o;
}

export class StatsProvider {
  readonly #o: Required<Omit<StatsProviderOptions, 'onCollect'>> & Pick<StatsProviderOptions, 'onCollect'>;
  #cached: StatsSnapshot | undefined;
  #inflight: Promise<StatsSnapshot> | undefined;
  #prevNodeCpu: { ns: number; atMs: number } | undefined;
  #sandboxStatsFailedAt = -Infinity;

  constructor(o: StatsProviderOptions) {
    this.#o = { clock: realClock, host: realHost, maxAgeMs: 2000, ...o };
  }

  /** A snapshot no older than maxAgeMs; one collection in flight at a time. */
  get(): Promise<StatsSnapshot> {
    const now = this.#o.clock.now();
    if (this.#cached && now - this.#cached.takenAtMs < this.#o.maxAgeMs) return Promise.resolve(this.#cached);
    this.#inflight ??= this.#collect().finally(() => (this.#inflight = undefined));
    return this.#inflight;
  }

  async #collect(): Promise<StatsSnapshot> {
    const t0 = performance.now();
    try {
      const snap = await this.#read();
      this.#cached = snap;
      this.#o.onCollect?.((performance.now() - t0) / 1000, true);
      return snap;
    } catch (err) {
      this.#o.onCollect?.((performance.now() - t0) / 1000, false);
      throw err;
    }
  }

  async #read(): Promise<StatsSnapshot> {
    const { runtime, host, clock } = this.#o;
    const now = clock.now();
    const trySandboxStats = runtime.listPodSandboxStats && now - this.#sandboxStatsFailedAt > 60_000;
    const [sandboxes, containers, cstats, pstats, imageFs, node] = await Promise.all([
      runtime.listPodSandbox({ state: SANDBOX_READY }),
      runtime.listContainers({ state: RUNNING }),
      runtime.listContainerStats ? runtime.listContainerStats() : Promise.resolve([] as CriContainerStats[]),
      trySandboxStats
        ? runtime.listPodSandboxStats!().catch(() => {
            this.#sandboxStatsFailedAt = now;
            return [] as CriPodStats[];
          })
        : Promise.resolve([] as CriPodStats[]),
      runtime.imageFsUsage ? runtime.imageFsUsage().catch(() => []) : Promise.resolve([]),
      this.#nodeStats(now),
    ]);
    const times = new WeakMap<object, number>();
    const ctx: Assembly = { now, times, stamp: (o, ms) => (times.set(o, ms), o), imgStat: undefined };

    // Image filesystem: the runtime's usage, the filesystem's capacity.
    const img = imageFs[0];
    ctx.imgStat = img?.fsId?.mountpoint ? await host.statfs(img.fsId.mountpoint) : undefined;
    if (img) {
      const imageFsStats = imageFsStatsOf(img, ctx);
      node.runtime = { imageFs: imageFsStats, containerFs: imageFsStats };
    }

    const statsById = new Map<string, CriContainerStats>();
    for (const s of cstats) if (s.attributes?.id) statsById.set(s.attributes.id, s);
    const podStatsById = new Map<string, CriPodStats>();
    for (const s of pstats) if (s.attributes?.id) podStatsById.set(s.attributes.id, s);
    const bySandbox = new Map<string, typeof containers>();
    for (const c of containers) {
      const list = bySandbox.get(c.podSandboxId) ?? [];
      list.push(c);
      bySandbox.set(c.podSandboxId, list);
    }
    const pods = sandboxes.map((sb) => {
      const usage = { rootfsUsed: 0, rootfsInodes: 0 };
      const cs = (bySandbox.get(sb.id) ?? []).map((c) => containerStatsOf(c, statsById.get(c.id), usage, ctx));
      return podStatsOf(sb, cs, podStatsById.get(sb.id)?.linux ?? undefined, usage, node, ctx);
    });
    const summary: Summary = { node, pods };
    for (const k of ['cpu', 'memory', 'swap', 'fs', 'rlimit'] as const) if (node[k]) times.set(node[k]!, now);
    return { summary, takenAtMs: now, timesMs: times };
  }

  /** The node from the root cgroup and /proc; fields that cannot be read are left out. */
  async #nodeStats(now: number): Promise<NodeStats> {
    const { host, nodeName, rootDir } = this.#o;
    const [cpuacct, procStat, meminfo, memUsage, memStat, fsStat, pidMax, loadavg] = await Promise.all([
      host.read('/sys/fs/cgroup/cpuacct/cpuacct.usage'),
      host.read('/proc/stat'),
      host.read('/proc/meminfo'),
      host.read('/sys/fs/cgroup/memory/memory.usage_in_bytes'),
      host.read('/sys/fs/cgroup/memory/memory.stat'),
      host.statfs(rootDir),
      host.read('/proc/sys/kernel/pid_max'),
      host.read('/proc/loadavg'),
    ]);
    const time = rfc3339(now);
    const btime = /^btime (\d+)$/m.exec(procStat ?? '');
    const node: NodeStats = { nodeName, startTime: rfc3339(btime ? Number(btime[1]) * 1000 : 0) };

    // CPU: the root cgroup's cpuacct (ns, as cAdvisor reads it), else /proc/stat's busy jiffies.
    let cpuNs: number | undefined = cpuacct ? Number.parseInt(cpuacct, 10) : undefined;
    if (cpuNs === undefined || Number.isNaN(cpuNs)) {
      const f = /^cpu\s+(.*)$/m.exec(procStat ?? '')?.[1]?.trim().split(/\s+/).map(Number);
      // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
      cpuNs = f && f.length >= 4 ? (f.slice(0, 8).reduce((a, b) => a + b, 0) - (f[3] ?? 0) - (f[4] ?? 0)) * (1e9 / USER_HZ) : undefined;
    }
    if (cpuNs !== undefined) {
      const prev = this.#prevNodeCpu;
      const nano = prev && now > prev.atMs && cpuNs >= prev.ns ? Math.round(((cpuNs - prev.ns) / (now - prev.atMs)) * 1000) : undefined;
      this.#prevNodeCpu = { ns: cpuNs, atMs: now };
      node.cpu = defined<CPUStats>({ time, usageNanoCores: nano, usageCoreNanoSeconds: cpuNs });
    }

    // Memory: root cgroup usage minus inactive file pages (the working set as cAdvisor computes it), else MemTotal - MemAvailable.
    const mi = parseKeyed(meminfo, /:\s+/);
    const kb = (k: string) => (mi.has(k) ? mi.get(k)! * 1024 : undefined);
    const ms = parseKeyed(memStat, / /);
    const usage = memUsage ? Number.parseInt(memUsage, 10) : undefined;
    const total = kb('MemTotal');
    const avail = kb('MemAvailable');
    const usageBytes = usage ?? (total !== undefined && avail !== undefined ? total - avail : undefined);
    if (usageBytes !== undefined) {
      const inactive = ms.get('total_inactive_file') ?? 0;
      const ws = Math.max(0, usageBytes - inactive);
      node.memory = defined<MemoryStats>({
        time,
        availableBytes: total !== undefined ? Math.max(0, total - ws) : undefined,
        usageBytes,
        workingSetBytes: ws,
        rssBytes: ms.get('total_rss'),
        pageFaults: ms.get('total_pgfault'),
        majorPageFaults: ms.get('total_pgmajfault'),
      });
    }
    const swapTotal = kb('SwapTotal');
    const swapFree = kb('SwapFree');
    if (swapTotal !== undefined && swapFree !== undefined) node.swap = { time, swapAvailableBytes: swapFree, swapUsageBytes: swapTotal - swapFree };
    if (fsStat) {
      node.fs = {
        time,
        availableBytes: fsStat.bavail * fsStat.bsize,
        capacityBytes: fsStat.blocks * fsStat.bsize,
        usedBytes: (fsStat.blocks - fsStat.bfree) * fsStat.bsize,
        inodesFree: fsStat.ffree,
        inodes: fsStat.files,
        inodesUsed: fsStat.files - fsStat.ffree,
      };
    }
    const maxpid = pidMax ? Number.parseInt(pidMax, 10) : undefined;
    const curproc = loadavg ? Number(/\/(\d+)/.exec(loadavg)?.[1]) : undefined;
    if (maxpid !== undefined || curproc !== undefined) node.rlimit = defined({ time, maxpid, curproc: Number.isNaN(curproc) ? undefined : curproc });
    return node;
  }
}

type Statfs = Awaited<ReturnType<HostReader['statfs']>>;
type CriSandbox = Awaited<ReturnType<StatsRuntime['listPodSandbox']>>[number];
type CriContainer = Awaited<ReturnType<StatsRuntime['listContainers']>>[number];
type CriImageFs = Awaited<ReturnType<NonNullable<StatsRuntime['imageFsUsage']>>>[number];

/** What one snapshot's assembly shares: its time, the sample time of each object, the image filesystem's statfs. */
interface Assembly {
  now: number;
  times: WeakMap<object, number>;
  /** Records `o`'s sample time and returns it. */
  stamp: <T extends object>(o: T, ms: number) => T;
  imgStat: Statfs;
}

/** The capacity half of an FsStats, from a statfs (none without one). */
function fsCapacity(s: Statfs): Partial<FsStats> {
  return s ? { availableBytes: s.bavail * s.bsize, capacityBytes: s.blocks * s.bsize, inodesFree: s.ffree, inodes: s.files } : {};
}

function imageFsStatsOf(img: CriImageFs, ctx: Assembly): FsStats {
  const t = img.timestamp ? nsToMs(img.timestamp) : ctx.now;
  return ctx.stamp(defined<FsStats>({ time: rfc3339(t), ...fsCapacity(ctx.imgStat), usedBytes: v(img.usedBytes), inodesUsed: v(img.inodesUsed) }), t);
}

/** One running container's stats; its writable layer counts into the pod's `usage`. */
function containerStatsOf(c: CriContainer, st: CriContainerStats | undefined, usage: { rootfsUsed: number; rootfsInodes: number }, ctx: Assembly): ContainerStats {
  const { stamp } = ctx;
  const out: ContainerStats = { name: c.labels['io.kubernetes.container.name'] ?? c.metadata.name, startTime: rfc3339(nsToMs(c.createdAt)) };
  ctx.times.set(out, nsToMs(c.createdAt));
  if (st?.cpu) out.cpu = stamp(cpuStats(st.cpu), nsToMs(st.cpu.timestamp));
  if (st?.memory) out.memory = stamp(memoryStats(st.memory), nsToMs(st.memory.timestamp));
  if (st?.swap) out.swap = stamp(swapStats(st.swap), nsToMs(st.swap.timestamp));
  if (st?.writableLayer) {
    const wl = st.writableLayer;
    const t = wl.timestamp ? nsToMs(wl.timestamp) : ctx.now;
    usage.rootfsUsed += v(wl.usedBytes) ?? 0;
    usage.rootfsInodes += v(wl.inodesUsed) ?? 0;
    out.rootfs = stamp(defined<FsStats>({ time: rfc3339(t), ...fsCapacity(ctx.imgStat), usedBytes: v(wl.usedBytes), inodesUsed: v(wl.inodesUsed) }), t);
  }
  return out;
}

/** A pod's stats: the runtime's pod-level stats where it gives them, else its containers' summed. */
function podStatsOf(sb: CriSandbox, cs: ContainerStats[], ps: NonNullable<CriPodStats['linux']> | undefined, usage: { rootfsUsed: number; rootfsInodes: number }, node: NodeStats, ctx: Assembly): PodStats {
  const { stamp, times, now } = ctx;
  const podRef = {
    name: sb.labels['io.kubernetes.pod.name'] ?? sb.metadata.name,
    namespace: sb.labels['io.kubernetes.pod.namespace'] ?? sb.metadata.namespace,
    uid: sb.labels['io.kubernetes.pod.uid'] ?? sb.metadata.uid,
  };
  const pod: PodStats = { podRef, startTime: rfc3339(nsToMs(sb.createdAt)), containers: cs };
  if (ps?.cpu) pod.cpu = stamp(cpuStats(ps.cpu), nsToMs(ps.cpu.timestamp));
  else if (cs.some((c) => c.cpu)) pod.cpu = sumCpu(cs, times);
  if (ps?.memory) pod.memory = stamp(memoryStats(ps.memory), nsToMs(ps.memory.timestamp));
  else if (cs.some((c) => c.memory)) pod.memory = sumMemory(cs, times);
  if (ps?.network?.defaultInterface) {
    const d = ps.network.defaultInterface;
    const t = nsToMs(ps.network.timestamp);
    pod.network = stamp(defined<NetworkStats>({ time: rfc3339(t), name: d.name, rxBytes: v(d.rxBytes), rxErrors: v(d.rxErrors), txBytes: v(d.txBytes), txErrors: v(d.txErrors) }), t);
  }
  if (ps?.process?.processCount) pod.process_stats = { process_count: v(ps.process.processCount) };
  const swaps = cs.filter((c) => c.swap?.swapUsageBytes !== undefined);
  if (swaps.length) {
    const t = Math.max(...swaps.map((c) => times.get(c.swap!) ?? now));
    pod.swap = stamp({ time: rfc3339(t), swapUsageBytes: swaps.reduce((a, c) => a + (c.swap!.swapUsageBytes ?? 0), 0) }, t);
  }
  // Ephemeral storage, where cheap: the containers' writable layers (logs and emptyDirs are not walked).
  if (cs.some((c) => c.rootfs)) {
    const nfs = node.fs;
    pod['ephemeral-storage'] = stamp(
      defined<FsStats>({ time: rfc3339(now), availableBytes: nfs?.availableBytes, capacityBytes: nfs?.capacityBytes, usedBytes: usage.rootfsUsed, inodesFree: nfs?.inodesFree, inodes: nfs?.inodes, inodesUsed: usage.rootfsInodes }),
      now,
    );
  }
  return pod;
}

function cpuStats(c: CpuUsage): CPUStats {
  return defined<CPUStats>({ time: rfc3339(nsToMs(c.timestamp)), usageNanoCores: v(c.usageNanoCores), usageCoreNanoSeconds: v(c.usageCoreNanoSeconds) });
}

function memoryStats(m: MemoryUsage): MemoryStats {
  return defined<MemoryStats>({
    time: rfc3339(nsToMs(m.timestamp)),
    availableBytes: v(m.availableBytes) || undefined,
    usageBytes: v(m.usageBytes),
    workingSetBytes: v(m.workingSetBytes),
    rssBytes: v(m.rssBytes),
    pageFaults: v(m.pageFaults),
    majorPageFaults: v(m.majorPageFaults),
  });
}

function swapStats(s: SwapUsage): SwapStats {
  return defined<SwapStats>({ time: rfc3339(nsToMs(s.timestamp)), swapAvailableBytes: v(s.swapAvailableBytes), swapUsageBytes: v(s.swapUsageBytes) });
}

/** Pod CPU as the sum of its containers' (when the runtime gives no pod-level stats). */
function sumCpu(cs: ContainerStats[], times: WeakMap<object, number>): CPUStats {
  const with_ = cs.filter((c) => c.cpu);
  const t = Math.max(...with_.map((c) => times.get(c.cpu!) ?? 0));
  const out = { time: rfc3339(t), usageNanoCores: with_.reduce((a, c) => a + (c.cpu!.usageNanoCores ?? 0), 0), usageCoreNanoSeconds: with_.reduce((a, c) => a + (c.cpu!.usageCoreNanoSeconds ?? 0), 0) };
  times.set(out, t);
  return out;
}

function sumMemory(cs: ContainerStats[], times: WeakMap<object, number>): MemoryStats {
  const with_ = cs.filter((c) => c.memory);
  const t = Math.max(...with_.map((c) => times.get(c.memory!) ?? 0));
  const sum = (k: keyof Omit<MemoryStats, 'time'>) => with_.reduce((a, c) => a + (c.memory![k] ?? 0), 0);
  const out = { time: rfc3339(t), usageBytes: sum('usageBytes'), workingSetBytes: sum('workingSetBytes'), rssBytes: sum('rssBytes'), pageFaults: sum('pageFaults'), majorPageFaults: sum('majorPageFaults') };
  times.set(out, t);
  return out;
}
