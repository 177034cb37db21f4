import { describe, expect, it } from 'vitest';
import { EventLoopDelay, eventLoopCheck, HealthRegistry, renderHealthz } from '../../../src/health/checks.js';
import { VirtualClock } from '../../helpers/clock.js';

describe('HealthRegistry + renderHealthz', () => {
  it('answers ok when all pass, lists every check with verbose', async () => {
    const h = new HealthRegistry();
    h.add({ name: 'a', check() {} });
    h.add({ name: 'b', check: async () => {} });
    const r = await h.run();
    expect(renderHealthz(r, false)).toEqual({ status: 200, body: 'ok' });
    expect(renderHealthz(r, true)).toEqual({ status: 200, body: '[+]a ok\n[+]b ok\nhealthz check passed\n' });
  });

  it('answers 500 naming the failing checks and their reasons', async () => {
    const h = new HealthRegistry();
    h.add({ name: 'a', check() {} });
    h.add({ name: 'lockfile', check() { throw new Error('lock file /x was deleted'); } });
    const r = await h.run();
    expect(r.ok).toBe(false);
    expect(renderHealthz(r, false)).toEqual({ status: 500, body: '[+]a ok\n[-]lockfile failed: lock file /x was deleted\nhealthz check failed\n' });
  });

  it('fails a check that does not answer in time', async () => {
    const h = new HealthRegistry();
    h.add({ name: 'slow', check: () => new Promise(() => {}) });
    const r = await h.run(20);
    expect(r.results).toEqual([{ name: 'slow', ok: false, reason: 'check timed out after 20ms' }]);
  });

  it('refuses two checks with the same name', () => {
    const h = new HealthRegistry();
    h.add({ name: 'a', check() {} });
    expect(() => h.add({ name: 'a', check() {} })).toThrow(/duplicate/);
  });
});

describe('EventLoopDelay', () => {
  /** A monitor whose busy time and fine sampler the test sets. */
  function monitor() {
    let active = 0;
    const samplers: { max: number; count: number; reset(): void; disable(): void; on: boolean }[] = [];
    const delay = new EventLoopDelay({
      busyMs: 50,
      activeMs: () => active,
      fine: () => {
        const s = { max: 0, count: 0, on: true, reset: () => ((s.max = 0), (s.count = 0)), disable: () => void (s.on = false) };
        samplers.push(s);
        return s;
      },
    });
    return { delay, samplers, busy: (ms: number) => (active = ms) };
  }

  it('runs the fine sampler only after two windows in a row in which the loop was busy for busyMs, and stops it after a quiet one', () => {
    const { delay, samplers, busy } = monitor();
    busy(3);
    expect(delay.sample(0)).toBe(0);
    expect(delay.fine).toBe(false);
    // One busy window between quiet ones (a node's periodic work): no fine sampler.
    busy(80);
    delay.sample(0);
    expect(delay.fine).toBe(false);
    busy(3);
    delay.sample(0);
    busy(80);
    delay.sample(0);
    expect(delay.fine).toBe(false);
    delay.sample(0);
    expect(delay.fine).toBe(true);
    samplers[0]!.max = 120e6;
    samplers[0]!.count = 5;
    busy(60);
    expect(delay.sample(2)).toBe(120); // the fine sampler's longest, read and reset
    expect(samplers[0]!.count).toBe(0);
    busy(10);
    expect(delay.sample(0)).toBe(0);
    expect(delay.fine).toBe(false);
    expect(samplers.map((s) => s.on)).toEqual([false]);
  });

  it('sees a step that held an idle loop by how late the check came, and gives /metrics the windows since the last scrape', () => {
    const { delay, busy } = monitor();
    busy(0);
    expect(delay.sample(-1)).toBe(0); // early timers are not delays
    busy(1500);
    expect(delay.sample(1200)).toBe(1200);
    expect(delay.fine).toBe(false);
    busy(0);
    delay.sample(40);
    expect(delay.take()).toEqual({ maxSeconds: expect.closeTo(1.2, 2), p99Seconds: expect.closeTo(1.2, 2) }); // an HDR histogram: 3 significant digits
    expect(delay.take()).toEqual({ maxSeconds: 0, p99Seconds: 0 });
    delay.stop();
    expect(delay.fine).toBe(false);
  });
});

describe('eventLoopCheck', () => {
  it('hands each turn\'s delay (how late it came) to onDelay and fails once no turn came for maxLagMs', async () => {
    const clock = new VirtualClock();
    const delays: number[] = [];
    const check = eventLoopCheck({ periodMs: 500, maxLagMs: 10_000, clock, delay: new EventLoopDelay({ activeMs: () => 0 }), onDelay: (r) => delays.push(r.maxMs) });
    check.start();
    await clock.advance(2_000);
    expect(delays).toEqual([]); // on time
    expect(() => check.check()).not.toThrow();
    await check.stop();
    clock.t += 10_001;
    expect(() => check.check()).toThrow(/event loop stalled/);
  });
});
