/**
 * Node pressure, decided as the kubelet's eviction manager decides it (pure): each hard
 * eviction threshold (`evictionHard`) is compared with what was observed of its signal; a
 * met threshold puts its condition under pressure (memory.available -> MemoryPressure,
 * nodefs.* and imagefs.* -> DiskPressure, pid.available -> PIDPressure). A threshold is met
 * when the available amount is below it; a percentage is of the signal's capacity.
 *
 * A signal that could not be observed this turn meets nothing and proves nothing: a
 * condition with such a signal and no met threshold is undecided (`undefined`), and the
 * status keeps what it said before (node/status.ts). A condition with no threshold at all
 * is never under pressure, as the kubelet reports it.
 *
 * Once under pressure, a condition stays so until no threshold of it was met for
 * `evictionPressureTransitionPeriod` (default 5 min), so that a node hovering at a threshold
 * does not flap (`holdPressure`).
 */
import { parseThresholdValue } from '../config/quantity.js';

/** The signals nodelet measures, in the kubelet's names. */
export const SIGNALS = ['memory.available', 'nodefs.available', 'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', 'pid.available'] as const;
export type Signal = (typeof SIGNALS)[number];

export const PRESSURE_TYPES = ['MemoryPressure', 'DiskPressure', 'PIDPressure'] as const;
export type PressureType = (typeof PRESSURE_TYPES)[number];

export const SIGNAL_CONDITION: Readonly<Record<Signal, PressureType>> = {
  'memory.available': 'MemoryPressure',
  'nodefs.available': 'DiskPressure',
  'nodefs.inodesFree': 'DiskPressure',
  'imagefs.available': 'DiskPressure',
  'imagefs.inodesFree': 'DiskPressure',
  'pid.available': 'PIDPressure',
};

/** What was measured of one signal: bytes, inodes or process IDs. */
export interface Observation {
  available: number;
  capacity: number;
}
export type Observations = Partial<Record<Signal, Observation>>;

/** A hard threshold: an amount, or a fraction of the signal's capacity (0 < fraction < 1). */
export type Threshold = { signal: Signal; quantity: number } | { signal: Signal; fraction: number };

/**
 * The thresholds nodelet acts on, from an `evictionHard` map already validated by the
 * config (so a bad value here is a bug and throws). Disabled values (`0%`, `100%`) are
 * dropped, as the kubelet drops them. Signals nodelet does not measure are returned apart
 * (`ignored`), so the caller can say so once: `allocatableMemory.available` (the kubelet's
 * allocatable cgroup, which nodelet does not create) and `containerfs.*` (a split image
 * filesystem, which CRI runtimes here do not report).
 */
export function parseThresholds(evictionHard: Readonly<Record<string, string>>): { thresholds: Threshold[]; ignored: string[] } {
  const thresholds: Threshold[] = [];
  const ignored: string[] = [];
  for (const [signal, text] of Object.entries(evictionHard)) {
    if (!(SIGNALS as readonly string[]).includes(signal)) {
      ignored.push(signal);
      continue;
    }
    const v = parseThresholdValue(text);
    if (v.kind === 'disabled') continue;
    thresholds.push(v.kind === 'quantity' ? { signal: signal as Signal, quantity: v.quantity.value } : { signal: signal as Signal, fraction: v.fraction });
  }
  return { thresholds, ignored };
}

/** The amount below which `t` is met, given the signal's capacity. */
export function thresholdAmount(t: Threshold, capacity: number): number {
  return 'quantity' in t ? t.quantity : capacity * t.fraction;
}

/** The thresholds met by these observations (unobserved signals meet none). */
export function thresholdsMet(thresholds: readonly Threshold[], obs: Observations): Threshold[] {
  return thresholds.filter((t) => {
    const o = obs[t.signal];
    return o !== undefined && o.available < thresholdAmount(t, o.capacity);
  });
}

/** Per condition: true under pressure, false not, undefined when a signal it needs was not observed. */
export type PressureDecision = Partial<Record<PressureType, boolean>>;

export function decidePressure(thresholds: readonly Threshold[], obs: Observations): PressureDecision {
  const met = new Set(thresholdsMet(thresholds, obs).map((t) => SIGNAL_CONDITION[t.signal]));
  const out: PressureDecision = {};
  for (const type of PRESSURE_TYPES) {
    if (met.has(type)) out[type] = true;
    else if (!thresholds.some((t) => SIGNAL_CONDITION[t.signal] === type && obs[t.signal] === undefined)) out[type] = false;
  }
  return out;
}

/**
 * The transition period: a condition last seen under pressure at `lastMet[type]` stays
 * under pressure until `periodMs` has passed. Returns the held decision and the updated
 * `lastMet` (pure; the caller keeps `lastMet` between turns).
 */
export function holdPressure(
  decision: PressureDecision,
  lastMet: Readonly<Partial<Record<PressureType, number>>>,
  now: number,
  periodMs: number,
): { decision: PressureDecision; lastMet: Partial<Record<PressureType, number>> } {
  const next = { ...lastMet };
  const held: PressureDecision = { ...decision };
  for (const type of PRESSURE_TYPES) {
    if (decision[type] === true) next[type] = now;
    else if (next[type] !== undefined && now - next[type]! < periodMs) held[type] = true;
  }
  return { decision: held, lastMet: next };
}

/** Memory available the kubelet's way: capacity minus the root cgroup's working set (usage − inactive file), floored at 0. */
export function memoryAvailable(capacity: number, usage: number, inactiveFile: number): Observation {
  const workingSet = Math.max(0, usage - inactiveFile);
  return { available: Math.max(0, capacity - workingSet), capacity };
}

/** Fields of /proc/meminfo in bytes (`MemTotal: 16384 kB` -> 16777216). */
export function parseMeminfo(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^(\w+(?:\(\w+\))?):\s+(\d+)(?:\s+kB)?\s*$/.exec(line);
    if (m) out[m[1]!] = Number(m[2]) * (line.trimEnd().endsWith('kB') ? 1024 : 1);
  }
  return out;
}

/** One key of a cgroup `memory.stat` (`total_inactive_file 123`). */
export function statField(text: string, key: string): number | undefined {
  const m = new RegExp(`^${key} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : undefined;
}

/**
 * Process IDs: capacity is the smaller of kernel.pid_max and kernel.threads-max (both bound
 * the tasks the kernel can have), in use is the task count of /proc/loadavg's fourth field
 * (`running/total`), as the kubelet counts them.
 */
export function pidObservation(pidMax: number, threadsMax: number | undefined, loadavg: string): Observation | undefined {
  const m = /^\S+ \S+ \S+ \d+\/(\d+) /.exec(loadavg);
  const capacity = threadsMax !== undefined && threadsMax > 0 ? Math.min(pidMax, threadsMax) : pidMax;
  if (!m || !(capacity > 0)) return undefined;
  return { available: Math.max(0, capacity - Number(m[1])), capacity };
}
