/** A Clock the test moves by hand (`clock.t += ms`); its sleeps end only when aborted. */
import type { Clock } from '../../src/clock.js';

export class ManualClock implements Clock {
  constructor(public t = Date.UTC(2026, 10, 23, 2, 0, 0)) {}
  now(): number {
    return this.t;
  }
  sleep(_ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((_, reject) => signal?.addEventListener('abort', () => reject(signal.reason), { once: true }));
  }
}
