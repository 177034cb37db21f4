import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import { Loop } from '../../src/loop.js';
import { VirtualClock } from '../helpers/clock.js';

function counting(delays: () => number = () => 1000) {
  const clock = new VirtualClock();
  const turns: number[] = [];
  const loop = new Loop({ name: 't', turn: async () => void turns.push(clock.now() - t0), delayMs: delays, clock });
  const t0 = clock.t;
  return { clock, turns, loop };
}

describe('Loop', () => {
  it('turns at once, then after each delay the owner decides', async () => {
    let n = 0;
    const { clock, turns, loop } = counting(() => [1000, 2000, 4000][Math.min(n++, 2)]!);
    loop.start();
    await clock.advance(10_000);
    expect(turns).toEqual([0, 1000, 3000, 7000]);
    await loop.stop();
  });

  it('a delay of 0 goes on without sleeping', async () => {
    let n = 0;
    const { clock, turns, loop } = counting(() => (n++ < 2 ? 0 : 1000));
    loop.start();
    await clock.advance(1000);
    expect(turns).toEqual([0, 0, 0, 1000]);
    expect(clock.sleeps).toEqual([1000, 1000]);
    await loop.stop();
  });

  it('stop() ends the sleep at once and waits for the turn in flight; start(signal) ends with the signal', async () => {
    const { clock, turns, loop } = counting();
    loop.start();
    await clock.advance(0);
    await loop.stop();
    expect(loop.running).toBe(false);
    expect(clock.pending).toBe(0);
    await clock.advance(5000);
    expect(turns).toEqual([0]);

    const ctl = new AbortController();
    const b = counting();
    b.loop.start(ctl.signal);
    await b.clock.advance(1000);
    ctl.abort();
    await b.clock.advance(5000);
    expect(b.turns).toEqual([0, 1000]);
  });

  it('wake() cuts the sleep short; a wake during a turn skips the next sleep', async () => {
    const { clock, turns, loop } = counting(() => 60_000);
    loop.start();
    await clock.advance(100);
    loop.wake();
    await clock.advance(0);
    expect(turns).toEqual([0, 100]);
    await loop.stop();
  });

  it('syncOnce() runs one turn outside the schedule', async () => {
    const { turns, loop } = counting();
    await loop.syncOnce();
    await loop.syncOnce();
    expect(turns).toEqual([0, 0]);
  });

  it('a turn that throws is logged, and the loop goes on', async () => {
    const lines: { msg: string }[] = [];
    const clock = new VirtualClock();
    let n = 0;
    const loop = new Loop({
      name: 'flaky',
      turn: async () => {
        if (n++ === 0) throw new Error('boom');
      },
      delayMs: () => 1000,
      clock,
      logger: createLogger({ journal: false, destination: { write: (l: string) => void lines.push(JSON.parse(l)) } }),
    });
    loop.start();
    await clock.advance(2000);
    expect(n).toBe(3);
    expect(lines.map((l) => l.msg)).toEqual(['flaky turn failed: boom']);
    await loop.stop();
  });
});
