/**
 * Named health checks. The same registry answers /healthz (plain HTTP and the HTTPS
 * server) and gates the systemd watchdog: a ping is sent only while every check passes.
 *
 * What is judged here is nodelet's own liveness (its loops turning, its event loop
 * responsive), not the runtime's or the control plane's: a dead containerd shows in the
 * node's Ready condition, because restarting nodelet would not fix it.
 */
import { createHistogram, monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { realClock, type Clock } from '../clock.js';
import { Loop } from '../loop.js';

export interface HealthCheck {
  readonly name: string;
  /** Throws (or rejects) with a reason when unhealthy. Must be cheap: called every ping. */
  check(): void | Promise<void>;
}

export interface CheckResult {
  name: string;
  ok: boolean;
  reason?: string;
}

export interface HealthReport {
  ok: boolean;
  results: CheckResult[];
}

export class HealthRegistry {
  readonly #checks: HealthCheck[] = [];

  add(check: HealthCheck): void {
    if (this.#checks.some((c) => c.name === check.name)) throw new Error(`duplicate health check ${check.name}`);
    this.#checks.push(check);
  }

  remove(name: string): void {
    const i = this.#checks.findIndex((c) => c.name === name);
    if (i >= 0) this.#checks.splice(i, 1);
  }

  names(): string[] {
    return this.#checks.map((c) => c.name);
  }

  /** Runs every check (concurrently, each bounded by timeoutMs) and reports all of them. */
  async run(timeoutMs = 2000): Promise<HealthReport> {
    const results = await Promise.all(
      this.#checks.map(async (c): Promise<CheckResult> => {
        let timer: NodeJS.Timeout | undefined;
        try {
          await Promise.race([
            Promise.resolve().then(() => c.check()),
            new Promise((_, reject) => {
              timer = setTimeout(() => reject(new Error(`check timed out after ${timeoutMs}ms`)), timeoutMs);
            }),
          ]);
          return { name: c.name, ok: true };
        } catch (err) {
          return { name: c.name, ok: false, reason: err instanceof Error ? err.message : String(err) };
        } finally {
          clearTimeout(timer);
        }
      }),
    );
    return { ok: results.every((r) => r.ok), results };
  }
}

/**
 * Renders a report the way the Kubernetes healthz handlers do: `ok` when healthy;
 * otherwise, or with `verbose`, one `[+]name ok` / `[-]name failed: reason` line per
 * check followed by `healthz check passed` / `healthz check failed`.
 */
export function renderHealthz(report: HealthReport, verbose: boolean): { status: number; body: string } {
  if (report.ok && !verbose) return { status: 200, body: 'ok' };
  const lines = report.results.map((r) => (r.ok ? `[+]${r.name} ok` : `[-]${r.name} failed: ${r.reason ?? 'unknown'}`));
  lines.push(report.ok ? 'healthz check passed' : 'healthz check failed');
  return { status: report.ok ? 200 : 500, body: lines.join('\n') + '\n' };
}

/** How long one step held the event loop, as the event-loop check reports it. */
export interface EventLoopDelayReport {
  /** The longest delay seen since the last report, in ms. */
  maxMs: number;
}

/** What the fine-grained sampler looks like to the monitor (Node's IntervalHistogram; a fake in tests). */
export interface DelaySampler {
  /** Longest delay recorded since the last reset, in ns (0 when nothing was recorded). */
  readonly max: number;
  readonly count: number;
  reset(): void;
  disable(): void;
}

/**
 * Event-loop delay at almost no cost while nodelet is idle.
 *
 * Node's delay histogram (`monitorEventLoopDelay`) wakes the process every `resolution`
 * ms to time its own timer: at 10 ms that is 100 wake-ups a second, which on these
 * machines cost more than half of nodelet's whole idle CPU (two of them ran, 10 and 20 ms,
 * one for this check and one for /metrics). A step can only hold the loop for X ms where
 * the loop was busy for X ms, which `performance.eventLoopUtilization()` tells for free.
 * So the fine sampler (20 ms) runs only after two windows in a row in which the loop was
 * busy for at least `busyMs` (a busy period: steps that long were possible), and stops
 * after a quieter one; in every window the check's own timer is a sampler too (how late its
 * turn came), so a step that holds an idle loop is still seen, at worst as its length minus
 * one check period. Two windows, not one: a node's periodic work (relist, log rotation,
 * static rescan at 110 pods) is one busy window every 10 s, and a fine sampler started after
 * each ran through the quiet window that follows (strace of a 110-pod node's main thread:
 * 176 of its wake-ups in 20 s at 10 ms, 2 now).
 * Each `sample()` is one window (a turn of the event-loop check); the windows' longest
 * delays also feed /metrics (`take()`: the longest and the 99th percentile since the
 * previous scrape).
 */
export class EventLoopDelay {
  readonly #busyMs: number;
  readonly #activeMs: () => number;
  readonly #fine: () => DelaySampler;
  #sampler: DelaySampler | undefined;
  /** Busy windows in a row, up to the last one. */
  #busyWindows = 0;
  /** The windows' longest delays since the last take(), in ns (createHistogram records integers ≥ 1). */
  readonly #windows = createHistogram();

  constructor(o: { busyMs?: number; activeMs?: () => number; fine?: () => DelaySampler } = {}) {
    this.#busyMs = o.busyMs ?? 50;
    this.#activeMs = o.activeMs ?? activeMsSinceLastCall();
    this.#fine =
      o.fine ??
      (() => {
        const h = monitorEventLoopDelay({ resolution: 20 });
        h.enable();
        return h;
      });
  }

  /** Whether the fine sampler runs now (the last two windows were busy). */
  get fine(): boolean {
    return this.#sampler !== undefined;
  }

  /**
   * Ends a window: `latenessMs` is how late the caller's timer fired. Returns the longest
   * delay seen in the window, in ms, and decides whether the next window is sampled finely.
   */
  sample(latenessMs: number): number {
    let maxMs = Math.max(0, latenessMs);
    const s = this.#sampler;
    if (s) {
      if (s.count > 0) maxMs = Math.max(maxMs, s.max / 1e6);
      s.reset();
    }
    if (maxMs > 0) this.#windows.record(Math.max(1, Math.round(maxMs * 1e6)));
    const busy = this.#activeMs() >= this.#busyMs;
    this.#busyWindows = busy ? this.#busyWindows + 1 : 0;
    if (this.#busyWindows >= 2 && !s) this.#sampler = this.#fine();
    else if (!busy && s) {
      s.disable();
      this.#sampler = undefined;
    }
    return maxMs;
  }

  /** For /metrics: the longest window delay and their 99th percentile since the last take, in seconds; then forgets them. */
  take(): { maxSeconds: number; p99Seconds: number } {
    const h = this.#windows;
    const out = h.count > 0 ? { maxSeconds: h.max / 1e9, p99Seconds: h.percentile(99) / 1e9 } : { maxSeconds: 0, p99Seconds: 0 };
    h.reset();
    return out;
  }

  stop(): void {
    this.#sampler?.disable();
    this.#sampler = undefined;
  }
}

/** Milliseconds the event loop was active (not waiting for events) since the previous call. */
function activeMsSinceLastCall(): () => number {
  let last = performance.eventLoopUtilization();
  return () => {
    const now = performance.eventLoopUtilization();
    const d = performance.eventLoopUtilization(now, last);
    last = now;
    return d.active;
  };
}

/**
 * Liveness of the event loop: a loop that should turn every `periodMs` (on the real
 * clock: its point is to notice when timers stop firing); the check fails when the last
 * turn is older than `maxLagMs`. (A fully frozen event loop cannot answer at all; this
 * catches one that is alive but starved.) Each turn ends a window of `delay`
 * (EventLoopDelay: how late this turn came, and the fine sampler when the loop was busy)
 * and hands its longest delay to `onDelay` (the daemon logs it: a step that held the loop
 * is named in the log with how long). Start it with the daemon; `stop()` ends it.
 */
export function eventLoopCheck(
  o: { periodMs?: number; maxLagMs?: number; clock?: Clock; delay?: EventLoopDelay; onDelay?: (r: EventLoopDelayReport) => void } = {},
): HealthCheck & { start(signal?: AbortSignal): void; stop(): Promise<void> } {
  // 500 ms: a wake-up at rest of its own (docs/architecture.md), the only one that notices
  // timers firing late and names the step that held the loop; the fine sampler only runs
  // after a busy window.
  const { periodMs = 500, maxLagMs = 10_000, clock = realClock } = o;
  const delay = o.delay ?? new EventLoopDelay();
  let last = clock.now();
  const loop = new Loop({
    name: 'eventloop-check',
    turn: async () => {
      const now = clock.now();
      // The previous turn ended at `last` and slept periodMs: whatever is beyond that held the loop.
      const maxMs = Math.round(delay.sample(now - last - periodMs));
      last = now;
      if (maxMs > 0) o.onDelay?.({ maxMs });
    },
    delayMs: () => periodMs,
    clock,
  });
  return {
    name: 'eventloop',
    check() {
      const lag = clock.now() - last;
      if (lag > maxLagMs) throw new Error(`event loop stalled for ${lag}ms`);
    },
    start: (signal) => {
      last = clock.now() - periodMs;
      loop.start(signal);
    },
    stop: async () => {
      await loop.stop();
      delay.stop();
    },
  };
}
