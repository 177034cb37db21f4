/**
 * The real clock's wait (src/clock.ts) on vitest's fake timers (no real time passes): a delay
 * beyond a Node timer's 2^31-1 ms (24.8 days; a year-long certificate's renewal point is months away) is waited in
 * full, never fired at once, and an abort still ends it.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { realClock } from '../../src/clock.js';

const DAY = 86_400_000;

beforeEach(() => vi.useFakeTimers({ now: Date.UTC(2026, 10, 27) }));
afterEach(() => vi.useRealTimers());

/** realClock's wait, under the fake timers installed above. */
const wait = (ms: number, signal?: AbortSignal) => realClock.sleep.call(realClock, ms, signal);

describe('realClock waits', () => {
  it('waits the whole of a delay longer than a Node timer takes', async () => {
    let done = false;
    const p = wait(200 * DAY).then(() => (done = true));
    await vi.advanceTimersByTimeAsync(199 * DAY);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(DAY);
    await p;
    expect(done).toBe(true);
  });

  it('ends a long wait when its signal aborts', async () => {
    const ctl = new AbortController();
    const p = wait(100 * DAY, ctl.signal);
    await vi.advanceTimersByTimeAsync(30 * DAY);
    ctl.abort(new Error('stopped'));
    await expect(p).rejects.toThrow('stopped');
    expect(vi.getTimerCount()).toBe(0);
  });
});
