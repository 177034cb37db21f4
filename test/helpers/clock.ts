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
 * `advanceToNext()` runs just the earliest pending sleep (a loop stepped turn by turn);
 * `whenSleeping()` waits until the code sleeps (after real IO, which settle() cannot wait for);
 * `advanceUntil(cond)` advances step by step until a condition holds (bounded in virtual
 * time, so a condition that never comes fails the test instead of hanging it).
 *
 * `{ autoAdvance: true }`: for code driven by real IO (a socket, a test API server) whose
 * backoffs the test does not want to wait for. Each sleep ends on the next macrotask, time
 * jumping to the end of the earliest pending sleep, as if nothing else happened meanwhile.
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

export interface VirtualClockOptions {
  /** Every sleep ends on the next macrotask, time jumping to it (see above). Default false. */
  autoAdvance?: boolean;
}

export class VirtualClock implements Clock {
  /** Every duration asked of sleep(), in order. */
  readonly sleeps: number[] = [];
  #timers: Timer[] = [];
  #seq = 0;
  #sleepWaiters: (() => void)[] = [];
  readonly #auto: boolean;

  constructor(
    public t = Date.UTC(2026, 10, 23, 2, 0, 0),
    o: VirtualClockOptions = {},
  ) {
    this.#auto = o.autoAdvance ?? false;
  }

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
      for (const w of this.#sleepWaiters.splice(0)) w();
      if (this.#auto) setImmediate(() => this.#fire(this.#earliest()));
    });
  }

  #earliest(end = Infinity): Timer | undefined {
    return this.#timers.filter((x) => x.at <= end).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
  }

  #fire(timer: Timer | undefined): void {
    if (!timer) return;
    this.#timers = this.#timers.filter((x) => x !== timer);
    this.t = Math.max(this.t, timer.at);
    timer.resolve();
  }

  /** Sleeps not yet over. */
  get pending(): number {
    return this.#timers.length;
  }

  /**
   * Resolves once the code under test waits on this clock (a sleep is pending): for code
   * that does real IO (files, sockets) between its sleeps, where settling is not enough.
   */
  whenSleeping(): Promise<void> {
    if (this.#timers.length > 0) return Promise.resolve();
    return new Promise((resolve) => this.#sleepWaiters.push(resolve));
  }

  /** Moves time forward by `ms`, running every timer that falls due, in order. */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    await settle();
    for (;;) {
      const next = this.#earliest(end);
      if (!next) break;
      this.#fire(next);
      await settle();
    }
    this.t = end;
    await settle();
  }

  /**
   * Moves time to the end of the earliest pending sleep and runs it (and what it wakes),
   * nothing more. Resolves the milliseconds moved (0 when no sleep is pending).
   */
  async advanceToNext(): Promise<number> {
    await settle();
    const next = this.#earliest();
    if (!next) return 0;
    const from = this.t;
    this.#fire(next);
    await settle();
    return this.t - from;
  }

  /**
   * Advances `stepMs` at a time until `cond()` holds; throws once `maxMs` of virtual time
   * went by without it (no real time passes either way).
   */
  async advanceUntil(cond: () => boolean, o: { stepMs?: number; maxMs?: number; what?: string } = {}): Promise<void> {
    const { stepMs = 100, maxMs = 60_000 } = o;
    await settle();
    for (let waited = 0; !cond(); waited += stepMs) {
      if (waited >= maxMs) throw new Error(`${o.what ?? 'condition'} not reached within ${maxMs} ms of virtual time`);
      await this.advance(stepMs);
    }
  }
}

/** A VirtualClock the test moves by hand (`clock.t += ms`); its sleeps end only through advance() or an abort. */
export class ManualClock extends VirtualClock {}
