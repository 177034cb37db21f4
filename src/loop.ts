/**
 * The one loop kind every periodic thing in nodelet runs on (node status, lease, mirror
 * pods, status writer, probes, runtime health, watchdog, pod relist, reflector, event
 * flush, static pod rescan).
 *
 * A Loop runs one turn, sleeps on the injected Clock for the delay its owner decides (an
 * interval, a backoff, 0 to go on at once), and again until stopped. Turns must not throw:
 * each owner logs and retries its own faults (a turn that throws anyway is logged by the
 * loop, counted as a turn, and the loop goes on). `start(signal)` also stops when `signal`
 * aborts; `stop()` cancels the sleep at once and waits for the turn in flight; `syncOnce()`
 * runs one turn outside the loop (tests drive time with it). `wake()` cuts the current
 * sleep short, so an owner told of a change (an inotify event) turns now.
 */
import type { Clock } from './clock.js';
import { errorMessage } from './errors.js';
import type { Logger } from './log.js';

export interface LoopOptions {
  /** One turn; receives the loop's signal, aborted when the loop stops. */
  turn: (signal: AbortSignal) => Promise<unknown>;
  /** Delay before the next turn, asked after each turn. */
  delayMs: () => number;
  clock: Clock;
  /** Where a turn that throws is reported (turns should not throw). */
  logger?: Logger;
  /** Names the loop in that report. */
  name?: string;
}

export class Loop {
  readonly #o: LoopOptions;
  #abort: AbortController | undefined;
  #loop: Promise<void> | undefined;
  #wake: AbortController | undefined;
  #woken = false;

  constructor(o: LoopOptions) {
    this.#o = o;
  }

  get running(): boolean {
    return this.#loop !== undefined;
  }

  /** Starts the loop, first turn at once. Idempotent while running. */
  start(signal?: AbortSignal): void {
    if (this.#loop) return;
    const abort = new AbortController();
    this.#abort = abort;
    const onOuter = () => abort.abort(signal?.reason);
    if (signal?.aborted) abort.abort(signal.reason);
    else signal?.addEventListener('abort', onOuter, { once: true });
    this.#loop = (async () => {
      while (!abort.signal.aborted) {
        await this.#turn(abort.signal);
        if (abort.signal.aborted) break;
        await this.#sleep(abort.signal);
      }
    })().finally(() => signal?.removeEventListener('abort', onOuter));
  }

  /** Stops the loop: the sleep ends at once, the turn in flight is awaited. Idempotent. */
  async stop(): Promise<void> {
    this.#abort?.abort();
    const loop = this.#loop;
    this.#loop = undefined;
    this.#abort = undefined;
    await loop;
  }

  /** One turn now, outside the loop's schedule (tests, and owners that want a turn at once). */
  async syncOnce(): Promise<void> {
    await this.#turn(this.#abort?.signal ?? new AbortController().signal);
  }

  /** Ends the current sleep: the next turn runs now (or right after the one in flight). */
  wake(): void {
    this.#woken = true;
    this.#wake?.abort();
  }

  async #turn(signal: AbortSignal): Promise<void> {
    try {
      await this.#o.turn(signal);
    } catch (err) {
      this.#o.logger?.error({ err: errorMessage(err), loop: this.#o.name }, `${this.#o.name ?? 'loop'} turn failed: ${errorMessage(err)}`);
    }
  }

  async #sleep(signal: AbortSignal): Promise<void> {
    const ms = this.#o.delayMs();
    if (this.#woken || ms <= 0) {
      this.#woken = false;
      return;
    }
    const wake = new AbortController();
    this.#wake = wake;
    const onStop = () => wake.abort();
    signal.addEventListener('abort', onStop, { once: true });
    try {
      await this.#o.clock.sleep(ms, wake.signal);
    } catch {
      // woken or stopped
    } finally {
      signal.removeEventListener('abort', onStop);
      this.#wake = undefined;
      this.#woken = false;
    }
  }
}

/**
 * What the composition root starts and stops: every long-lived part of the daemon.
 * `start` begins the work (it may resolve once the part is ready, as a server listening);
 * `stop` ends it and waits for what is in flight. Both idempotent.
 */
export interface Service {
  readonly name: string;
  start(signal: AbortSignal): void | Promise<unknown>;
  stop(): Promise<void>;
}

/**
 * Base of the objects that own one Loop (node status, lease, mirror pods, pod status,
 * runtime health, watchdog): `syncOnce()` is their turn, `nextDelayMs()` the delay after
 * it; start/stop are the loop's. Constructing one starts nothing.
 */
export abstract class LoopOwner {
  readonly #loop: Loop;
  readonly #periodMs: number;

  /** `periodMs`: the delay between turns unless the owner decides it (nextDelayMs). */
  constructor(o: { name: string; clock: Clock; logger?: Logger; periodMs?: number }) {
    this.#periodMs = o.periodMs ?? 1000;
    this.#loop = new Loop({ name: o.name, turn: () => this.syncOnce(), delayMs: () => this.nextDelayMs(), clock: o.clock, ...(o.logger ? { logger: o.logger } : {}) });
  }

  /** One turn (tests call it directly). Should not throw: owners log and retry their own faults. */
  abstract syncOnce(): Promise<unknown>;

  /** The delay before the next turn, asked after each one: the period, unless overridden (a backoff). */
  nextDelayMs(): number {
    return this.#periodMs;
  }

  get running(): boolean {
    return this.#loop.running;
  }

  /** Starts the loop, first turn at once; it also ends when `signal` aborts. Idempotent. */
  start(signal?: AbortSignal): void {
    this.#loop.start(signal);
  }

  /** Stops the loop and waits for the turn in flight. Idempotent. */
  stop(): Promise<void> {
    return this.#loop.stop();
  }

  /** Cuts the current sleep short: the next turn runs now. */
  protected wake(): void {
    this.#loop.wake();
  }
}
