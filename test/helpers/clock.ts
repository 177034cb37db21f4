/**
 * The test kit's clock: time moves only when the test says so.
 *
 * `VirtualClock` implements nodelet's Clock. `t` is the time (tests may set it); every
 * `sleep(ms)` is recorded in `sleeps` and registered as a timer due at `t + ms`;
 * `advance(ms)` moves time forward timer by timer, resolving each due sleep and letting
 * the code it wakes run (and register its next sleep) before going on, so a loop driven
 * for a virtual minute turns exactly as it would in a real one. Aborting a sleep's signal
 * rejects it with the signal's reason at once. No real time passes.
 *
 * `ManualClock` is the same clock, for tests that move `t` by hand and never need a sleep
 * to end.
 */
import type { Clock } from '../../src/clock.js';

interface Timer {
  at: number;
  seq: number;
  resolve: () => void;
}

/** Lets every promise continuation and immediate queued so far run (no real time passes). */
export function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

export class VirtualClock implements Clock {
  /** Every duration asked of sleep(), in order. */
  readonly sleeps: number[] = [];
  #timers: Timer[] = [];
  #seq = 0;

  constructor(public t = Date.UTC(2026, 10, 23, 2, 0, 0)) {}

  now(): number {
    return this.t;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    this.sleeps.push(ms);
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const timer: Timer = {
        at: this.t + Math.max(0, ms),
        seq: this.#seq++,
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.#timers = this.#timers.filter((x) => x !== timer);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#timers.push(timer);
    });
  }

  /** Sleeps not yet over. */
  get pending(): number {
    return this.#timers.length;
  }

  /** Moves time forward by `ms`, running every timer that falls due, in order. */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    await settle();
    for (;;) {
      const next = this.#timers.filter((x) => x.at <= end).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!next) break;
      this.#timers = this.#timers.filter((x) => x !== next);
      this.t = Math.max(this.t, next.at);
      next.resolve();
      await settle();
    }
    this.t = end;
    await settle();
  }
}

/** A VirtualClock the test moves by hand (`clock.t += ms`); its sleeps end only through advance() or an abort. */
export class ManualClock extends VirtualClock {}
