/**
 * The fault suite's profile and its figures. `npm run test:faults` runs the short profile
 * (CI); `npm run test:faults -- --full` sets NODELET_FAULTS_FULL=1 for the full one. Each
 * test file adds its counts to a Tally and writes `<category>.json` into the report
 * directory (NODELET_FAULTS_REPORT, set by run.mjs), which run.mjs sums into
 * `summary.json`: the figures RELIABILITY.md quotes.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const FULL = process.env.NODELET_FAULTS_FULL === '1';

/** The short profile's value, or the full one's. */
export function pick<T>(short: T, full: T): T {
  return FULL ? full : short;
}

export const reportDir = process.env.NODELET_FAULTS_REPORT ?? path.join(os.tmpdir(), 'nodelet-faults-report');

/** Counts of one category (cases tried, faults injected, crashes, ...), written once at the end. */
export class Tally {
  readonly counts: Record<string, number> = {};
  readonly notes: Record<string, unknown> = {};
  readonly started = Date.now();
  constructor(readonly category: string) {}
  add(key: string, n = 1): void {
    this.counts[key] = (this.counts[key] ?? 0) + n;
  }
  note(key: string, value: unknown): void {
    this.notes[key] = value;
  }
  /**
   * Liveness of the run: the out-of-process /healthz poller's latencies (-1 = failed) and
   * nodelet's log records (a second "starting nodelet" is a crash and restart). Returns the
   * failed polls.
   */
  addLiveness(latencies: readonly number[], records: ReadonlyArray<{ msg: string }>): number {
    const failed = latencies.filter((l) => l < 0).length;
    this.add('healthz polls', latencies.length);
    this.add('healthz failures', failed);
    this.add('crashes', records.filter((x) => /starting nodelet/.test(x.msg)).length - 1);
    return failed;
  }
  write(): void {
    fs.mkdirSync(reportDir, { recursive: true });
    const out = { category: this.category, profile: FULL ? 'full' : 'short', seconds: Math.round((Date.now() - this.started) / 100) / 10, counts: this.counts, notes: this.notes };
    fs.writeFileSync(path.join(reportDir, `${this.category}.json`), `${JSON.stringify(out, null, 2)}\n`);
  }
}

/** A small seeded PRNG (mulberry32): the same seed generates the same cases, so a failure can be replayed. */
export function rng(seed: number): { next(): number; int(n: number): number; pick<T>(xs: readonly T[]): T; seed: number } {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (n) => Math.floor(next() * n), pick: (xs) => xs[Math.floor(next() * xs.length)]!, seed };
}

/** The seed of this run: NODELET_FAULTS_SEED, else the time; printed so a run can be replayed. */
export const SEED = Number(process.env.NODELET_FAULTS_SEED ?? Date.now() % 2 ** 31);

/** Resident set size and open descriptors of a process, from /proc. */
export function procUsage(pid: number): { rssKiB: number; fds: number } {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return { rssKiB, fds: fs.readdirSync(`/proc/${pid}/fd`).length };
}
