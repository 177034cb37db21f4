/**
 * A loop that runs one turn, sleeps on the Clock for the delay the owner decides (an
 * interval, a backoff), and again until stopped. Turns must not throw: each owner logs
 * and retries its own faults. `stop()` waits for the turn in flight.
 */
import type { Clock } from './clock.js';

export class PeriodicLoop {
  #abort: AbortController | undefined;
  #loop: Promise<void> | undefined;

  constructor(
    private readonly turn: () => Promise<unknown>,
    private readonly delayMs: () => number,
    private readonly clock: Clock,
  ) {}

  get running(): boolean {
    return this.#loop !== undefined;
  }

  /** Starts the loop, first turn at once. Idempotent while running. */
  start(): void {
    if (this.#loop) return;
    const abort = new AbortController();
    this.#abort = abort;
    this.#loop = (async () => {
      while (!abort.signal.aborted) {
        await this.turn();
        await this.clock.sleep(this.delayMs(), abort.signal).catch(() => undefined);
      }
    })();
  }

  async stop(): Promise<void> {
    this.#abort?.abort();
    await this.#loop;
    this.#loop = undefined;
  }
}
