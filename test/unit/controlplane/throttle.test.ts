import { describe, expect, it } from 'vitest';
import { ThrottledDelivery, type Schedule } from '../../../src/controlplane/throttle.js';

/** A clock and a scheduler driven by the test: `run(t)` moves time to t and runs what is due. */
function harness(gapMs = 100) {
  let now = 1000;
  const timers: { at: number; fn: () => void; ms: number; live: boolean }[] = [];
  const schedule: Schedule = (fn, ms) => {
    const t = { at: now + Math.max(0, ms), fn, ms, live: true };
    timers.push(t);
    return () => void (t.live = false);
  };
  const delivered: number[] = [];
  const d = new ThrottledDelivery(() => delivered.push(now), { gapMs, now: () => now, schedule });
  const run = (t: number) => {
    now = t;
    for (const x of timers.filter((x) => x.live && x.at <= t).sort((a, b) => a.at - b.at)) {
      x.live = false;
      x.fn();
    }
  };
  return { d, delivered, timers, run, at: () => now };
}

describe('ThrottledDelivery', () => {
  it('a request after a quiet spell is delivered on the next turn, with no wait', () => {
    const h = harness();
    h.d.request();
    expect(h.timers.map((t) => t.ms)).toEqual([expect.any(Number)]);
    expect(h.timers[0]!.ms).toBeLessThanOrEqual(0);
    expect(h.delivered).toEqual([]);
    h.run(1000);
    expect(h.delivered).toEqual([1000]);
    expect(h.d.pending).toBe(false);
  });

  it('requests of one chunk make one delivery', () => {
    const h = harness();
    for (let i = 0; i < 50; i++) h.d.request();
    expect(h.timers).toHaveLength(1);
    h.run(1000);
    expect(h.delivered).toEqual([1000]);
  });

  it('a burst of requests is delivered at most once per gap, the last request never lost', () => {
    const h = harness(100);
    // 5,000 requests, one every 3 ms (15 s).
    for (let i = 0; i < 5000; i++) {
      h.run(1000 + i * 3);
      h.d.request();
    }
    h.run(1000 + 5000 * 3 + 200);
    const gaps = h.delivered.slice(1).map((t, i) => t - h.delivered[i]!);
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(100);
    // About one per 100 ms over 15 s, not one per request.
    expect(h.delivered.length).toBeGreaterThan(140);
    expect(h.delivered.length).toBeLessThan(160);
    // The last request (at 15,997) was delivered after it.
    expect(h.delivered.at(-1)!).toBeGreaterThanOrEqual(1000 + 4999 * 3);
    expect(h.d.pending).toBe(false);
  });

  it('a request within the gap waits for its end; flush delivers at once and cancels what was pending', () => {
    const h = harness(100);
    h.d.request();
    h.run(1000);
    h.run(1030);
    h.d.request();
    expect(h.timers.at(-1)!.at).toBe(1100);
    h.run(1099);
    expect(h.delivered).toEqual([1000]);
    h.run(1100);
    expect(h.delivered).toEqual([1000, 1100]);
    h.run(1150);
    h.d.request();
    h.d.flush();
    expect(h.delivered).toEqual([1000, 1100, 1150]);
    h.run(1300);
    expect(h.delivered).toEqual([1000, 1100, 1150]);
  });

  it('cancel drops the pending delivery', () => {
    const h = harness();
    h.d.request();
    h.d.cancel();
    h.run(5000);
    expect(h.delivered).toEqual([]);
    expect(h.d.pending).toBe(false);
  });
});
