import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { Lifetime } from '../../src/lifetime.js';
import { Loop } from '../../src/loop.js';
import { VirtualClock } from '../helpers/clock.js';

describe('Lifetime', () => {
  it('12 loops on one lifetime (a connected daemon has 11 services): one listener per signal, no Node warning; abort() ends them all', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    try {
      const clock = new VirtualClock();
      const life = new Lifetime();
      const turns = Array.from({ length: 12 }, () => 0);
      const signals = turns.map((_, i) => {
        const signal = life.signal();
        new Loop({ name: `l${i}`, turn: async () => void turns[i]!++, delayMs: () => 1000, clock }).start(signal);
        return signal;
      });
      await clock.advance(1000);
      expect(turns).toEqual(Array.from({ length: 12 }, () => 2));
      expect(signals.map((s) => getEventListeners(s, 'abort').length)).toEqual(Array.from({ length: 12 }, () => 1));

      life.abort(new Error('stopping'));
      expect(life.aborted).toBe(true);
      expect(signals.every((s) => s.aborted && (s.reason as Error).message === 'stopping')).toBe(true);
      await clock.advance(5000);
      expect(turns).toEqual(Array.from({ length: 12 }, () => 2));
      // The loops removed their listeners as they ended.
      expect(signals.map((s) => getEventListeners(s, 'abort').length)).toEqual(Array.from({ length: 12 }, () => 0));
      // Node emits 'warning' on the next tick.
      await new Promise((r) => setImmediate(r));
      expect(warnings).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('a signal asked for after abort() is already aborted, with the same reason', () => {
    const life = new Lifetime();
    const reason = new Error('gone');
    life.abort(reason);
    life.abort(new Error('second'));
    const late = life.signal();
    expect(late.aborted).toBe(true);
    expect(late.reason).toBe(reason);
  });
});
