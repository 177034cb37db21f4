/**
 * The edge for node/pressure.ts: measures the eviction signals once per node status turn.
 *
 * - memory.available: MemTotal minus the root memory cgroup's working set (usage_in_bytes
 *   − total_inactive_file), as the kubelet computes it from cgroup v1
 *   (`/sys/fs/cgroup/memory`); where that cgroup is not readable (cgroup v2, a container),
 *   `MemAvailable` of /proc/meminfo.
 * - nodefs.*: statfs of the root dir's filesystem (`--root-dir`, /var/lib/kubelet).
 * - imagefs.*: statfs of the mountpoint the runtime names in CRI `ImageFsInfo` (containerd:
 *   its snapshotter dir); when the runtime does not answer it (Unimplemented, down), the
 *   root dir's filesystem, as the kubelet treats a runtime without a separate image fs.
 * - pid.available: see pidObservation().
 *
 * Never blocks the caller: every read is asynchronous with a deadline, and a read still in
 * flight from an earlier turn (a hung filesystem) is not started again. A signal that cannot
 * be read is simply absent from the observations (its condition keeps what it said); the
 * failure is logged once, and once more when it reads again.
 */
import fs from 'node:fs/promises';
import type { StatsFs } from 'node:fs';
import path from 'node:path';
import { errorMessage, NodeletError } from '../errors.js';
import type { Logger } from '../log.js';
import {
  decidePressure,
  holdPressure,
  memoryAvailable,
  parseMeminfo,
  parseThresholds,
  pidObservation,
  PRESSURE_TYPES,
  SIGNAL_CONDITION,
  statField,
  thresholdAmount,
  thresholdsMet,
  type Observation,
  type Observations,
  type PressureDecision,
  type PressureType,
  type Signal,
  type Threshold,
} from './pressure.js';

export interface SignalReaderOptions {
  rootDir: string;
  logger: Logger;
  /** The runtime's image filesystems (CRI ImageFsInfo); absent or failing: the root dir's filesystem. */
  imageFsMountpoints?: () => Promise<string[]>;
  /** Roots of the files read (tests point them at fixtures). */
  procDir?: string;
  cgroupMemoryDir?: string;
  /** Deadline of one read (default 2 s). */
  timeoutMs?: number;
  /** statfs(2) (tests give a fixed one: a shared filesystem's free space moves both ways). */
  statfs?: (dir: string) => Promise<Pick<StatsFs, 'bavail' | 'bsize' | 'blocks' | 'ffree' | 'files'>>;
}

type Group = 'memory' | 'nodefs' | 'imagefs' | 'pid';

export class SignalReader {
  readonly #o: Required<Omit<SignalReaderOptions, 'imageFsMountpoints'>> & Pick<SignalReaderOptions, 'imageFsMountpoints'>;
  readonly #inFlight = new Map<string, Promise<unknown>>();
  readonly #failing = new Set<Group>();
  #imageFsSource = '';

  constructor(o: SignalReaderOptions) {
    this.#o = { procDir: '/proc', cgroupMemoryDir: '/sys/fs/cgroup/memory', timeoutMs: 2000, statfs: (dir) => fs.statfs(dir), ...o };
  }

  /** One measurement of every signal; resolves within about the deadline, never rejects. */
  async observe(): Promise<Observations> {
    const groups: [Group, () => Promise<Observations>][] = [
      ['memory', () => this.#memory()],
      ['nodefs', () => this.#fs('nodefs', this.#o.rootDir)],
      ['imagefs', async () => this.#fs('imagefs', await this.#imageFsPath())],
      ['pid', () => this.#pid()],
    ];
    const parts = await Promise.all(groups.map(([g, read]) => this.#guard(g, read)));
    return Object.assign({}, ...parts) as Observations;
  }

  /** memory.available alone (the eviction manager's memory watch); never rejects. */
  observeMemory(): Promise<Observations> {
    return this.#guard('memory', () => this.#memory());
  }

  async #guard(group: Group, read: () => Promise<Observations>): Promise<Observations> {
    try {
      const obs = await read();
      if (this.#failing.delete(group)) this.#o.logger.info({ signal: group }, `node ${group} signals can be read again`);
      return obs;
    } catch (err) {
      if (!this.#failing.has(group)) {
        this.#failing.add(group);
        this.#o.logger.warn({ signal: group, err: errorMessage(err) }, `cannot measure node ${group} signals: ${errorMessage(err)}; the condition keeps its last status`);
      }
      return {};
    }
  }

  /**
   * Runs `fn` with the deadline. A read of `key` still pending (from this turn, or an earlier
   * one that hung) is awaited again rather than repeated, so a hung filesystem holds one
   * thread of the pool, not one more per turn.
   */
  #bounded<T>(key: string, fn: () => Promise<T>): Promise<T> {
    let p = this.#inFlight.get(key) as Promise<T> | undefined;
    if (!p) {
      p = fn().finally(() => this.#inFlight.delete(key));
      this.#inFlight.set(key, p);
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new NodeletError('DEADLINE_EXCEEDED', `${key}: no answer within ${this.#o.timeoutMs} ms`)), this.#o.timeoutMs);
      timer.unref();
    });
    return Promise.race([p, late]).finally(() => clearTimeout(timer));
  }

  #read(file: string): Promise<string> {
    return this.#bounded(file, () => fs.readFile(file, 'utf8'));
  }

  async #memory(): Promise<Observations> {
    const meminfo = parseMeminfo(await this.#read(path.join(this.#o.procDir, 'meminfo')));
    const total = meminfo['MemTotal'];
    if (total === undefined) throw new NodeletError('INTERNAL', 'MemTotal missing from meminfo');
    let obs: Observation | undefined;
    try {
      const [usage, stat] = await Promise.all([this.#read(path.join(this.#o.cgroupMemoryDir, 'memory.usage_in_bytes')), this.#read(path.join(this.#o.cgroupMemoryDir, 'memory.stat'))]);
      const inactive = statField(stat, 'total_inactive_file');
      if (inactive !== undefined && /^\d+\s*$/.test(usage)) obs = memoryAvailable(total, Number(usage), inactive);
    } catch {
      // No cgroup v1 memory controller here: MemAvailable below.
    }
    if (!obs) {
      const avail = meminfo['MemAvailable'];
      if (avail === undefined) throw new NodeletError('INTERNAL', 'neither the root memory cgroup nor MemAvailable can be read');
      obs = { available: avail, capacity: total };
    }
    return { 'memory.available': obs };
  }

  async #imageFsPath(): Promise<string> {
    let source = this.#o.rootDir;
    if (this.#o.imageFsMountpoints) {
      // A runtime that is down for a moment keeps the mountpoint it named last.
      const mounts = await this.#o.imageFsMountpoints().catch(() => (this.#imageFsSource ? [this.#imageFsSource] : []));
      if (mounts[0]) source = mounts[0];
    }
    if (source !== this.#imageFsSource) {
      this.#imageFsSource = source;
      this.#o.logger.info({ imagefs: source }, source === this.#o.rootDir ? `image filesystem: the runtime does not name one; using the root dir's (${source})` : `image filesystem: ${source} (CRI ImageFsInfo)`);
    }
    return source;
  }

  async #fs(prefix: 'nodefs' | 'imagefs', dir: string): Promise<Observations> {
    const s = await this.#bounded(`statfs ${dir}`, () => this.#o.statfs(dir));
    return {
      [`${prefix}.available`]: { available: s.bavail * s.bsize, capacity: s.blocks * s.bsize },
      [`${prefix}.inodesFree`]: { available: s.ffree, capacity: s.files },
    } as Partial<Record<Signal, Observation>>;
  }

  async #pid(): Promise<Observations> {
    const sys = path.join(this.#o.procDir, 'sys/kernel');
    const [pidMax, threadsMax, loadavg] = await Promise.all([
      this.#read(path.join(sys, 'pid_max')),
      this.#read(path.join(sys, 'threads-max')).catch(() => ''),
      this.#read(path.join(this.#o.procDir, 'loadavg')),
    ]);
    const obs = pidObservation(Number(pidMax.trim()), threadsMax.trim() ? Number(threadsMax.trim()) : undefined, loadavg);
    if (!obs) throw new NodeletError('INTERNAL', `cannot read process counts from ${path.join(this.#o.procDir, 'loadavg')}`);
    return { 'pid.available': obs };
  }
}

export interface PressureMonitorOptions {
  reader: Pick<SignalReader, 'observe'>;
  /** `evictionHard` of the configuration (validated). */
  evictionHard: Readonly<Record<string, string>>;
  /** `evictionPressureTransitionPeriod` in ms (the kubelet's default: 5 min). */
  transitionPeriodMs: number;
  clock: { now(): number };
  logger: Logger;
}

/**
 * The pressure conditions of each node status turn: measures (SignalReader), decides
 * (decidePressure, holdPressure) and logs each condition turning on or off with what was
 * measured. Called once per status turn; never rejects.
 */
export class PressureMonitor {
  readonly #o: PressureMonitorOptions;
  readonly thresholds: Threshold[];
  #lastMet: Partial<Record<PressureType, number>> = {};
  #shown: PressureDecision = {};

  constructor(o: PressureMonitorOptions) {
    this.#o = o;
    const { thresholds, ignored } = parseThresholds(o.evictionHard);
    this.thresholds = thresholds;
    if (ignored.length > 0) o.logger.info({ signals: ignored }, `eviction signals nodelet does not measure, ignored: ${ignored.join(', ')}`);
  }

  /** The memory.available hard threshold in bytes for a node of `capacity` bytes (0: none), for allocatable. */
  memoryThresholdBytes(capacity: number): number {
    const t = this.thresholds.find((x) => x.signal === 'memory.available');
    return t ? thresholdAmount(t, capacity) : 0;
  }

  /** The nodefs.available hard threshold (an amount or a fraction of the capacity), for allocatable ephemeral-storage; undefined: none. */
  nodefsThreshold(): { quantity: number } | { fraction: number } | undefined {
    const t = this.thresholds.find((x) => x.signal === 'nodefs.available');
    return t ? ('quantity' in t ? { quantity: t.quantity } : { fraction: t.fraction }) : undefined;
  }

  /** Capacity of the root dir's filesystem in bytes as last measured (the ephemeral-storage capacity); undefined until read once. */
  nodefsCapacityBytes(): number | undefined {
    return this.#nodefsCapacity;
  }

  #nodefsCapacity: number | undefined;

  async decide(): Promise<PressureDecision> {
    const obs = await this.#o.reader.observe();
    if (obs['nodefs.available']) this.#nodefsCapacity = obs['nodefs.available'].capacity;
    const now = this.#o.clock.now();
    const held = holdPressure(decidePressure(this.thresholds, obs), this.#lastMet, now, this.#o.transitionPeriodMs);
    this.#lastMet = held.lastMet;
    for (const type of PRESSURE_TYPES) {
      const v = held.decision[type];
      if (v === undefined || v === this.#shown[type]) continue;
      const met = thresholdsMet(this.thresholds, obs).filter((t) => SIGNAL_CONDITION[t.signal] === type);
      const detail = Object.fromEntries(
        this.thresholds
          .filter((t) => SIGNAL_CONDITION[t.signal] === type)
          .map((t) => [t.signal, { available: obs[t.signal]?.available, threshold: obs[t.signal] ? thresholdAmount(t, obs[t.signal]!.capacity) : undefined }]),
      );
      if (v) this.#o.logger.warn({ condition: type, signals: detail }, `${type}: eviction threshold met (${met.map((t) => t.signal).join(', ') || 'within the transition period'})`);
      else if (this.#shown[type] !== undefined) this.#o.logger.info({ condition: type, signals: detail }, `${type}: no eviction threshold met any more`);
      this.#shown[type] = v;
    }
    return held.decision;
  }
}
