/**
 * Named health checks. The same registry answers /healthz (plain HTTP and the HTTPS
 * server) and gates the systemd watchdog: a ping is sent only while every check passes.
 *
 * What is judged here is nodelet's own liveness (its loops turning, its event loop
 * responsive), not the runtime's or the control plane's: a dead containerd shows in the
 * node's Ready condition, because restarting nodelet would not fix it.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
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
  /** The longest delay seen since the last report, in ms (10 ms resolution). */
  maxMs: number;
}

/**
 * Liveness of the event loop: a loop that should turn every `periodMs` (on the real
 * clock: its point is to notice when timers stop firing); the check fails when the last
 * turn is older than `maxLagMs`. (A fully frozen event loop cannot answer at all; this
 * catches one that is alive but starved.) Each turn also reads Node's event-loop delay
 * histogram and hands its maximum since the last turn to `onDelay` (the daemon logs it:
 * a step that held the loop is named in the log with how long). Start it with the
 * daemon; `stop()` ends it.
 */
export function eventLoopCheck(
  o: { periodMs?: number; maxLagMs?: number; clock?: Clock; onDelay?: (r: EventLoopDelayReport) => void } = {},
): HealthCheck & { start(signal?: AbortSignal): void; stop(): Promise<void> } {
  const { periodMs = 500, maxLagMs = 10_000, clock = realClock } = o;
  let last = clock.now();
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  const loop = new Loop({
    name: 'eventloop-check',
    turn: async () => {
      last = clock.now();
      const maxMs = Math.round(histogram.max / 1e6);
      histogram.reset();
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
      histogram.enable();
      loop.start(signal);
    },
    stop: async () => {
      await loop.stop();
      histogram.disable();
    },
  };
}
