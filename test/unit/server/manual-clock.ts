import type { Clock } from '../../../src/clock.js';

/** A clock the test moves by hand; sleep() is not used by the code under test here. */
export class ManualClock implements Clock {
  constructor(public t = Date.UTC(2026, 10, 22, 23, 40, 5)) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
  sleep(): Promise<void> {
    return Promise.reject(new Error('ManualClock.sleep is not expected in these tests'));
  }
}
