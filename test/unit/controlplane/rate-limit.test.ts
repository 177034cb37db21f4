import { describe, expect, it } from 'vitest';
import { clientGoLimit, noLimit, TokenBucket } from '../../../src/controlplane/rate-limit.js';
import { ManualClock } from '../../helpers/clock.js';

describe('TokenBucket (client-go flowcontrol)', () => {
  it('starts full, then lets qps a second through, each waiter in its turn', () => {
    const clock = new ManualClock(0);
    const b = new TokenBucket(5, 2, clock);
    // Two at once (the burst), then one per 200 ms, each reserving the next token.
    expect([b.reserve(), b.reserve(), b.reserve(), b.reserve(), b.reserve()]).toEqual([0, 0, 200, 400, 600]);
    clock.t = 2_000;
    // Refilled, but never above the burst.
    expect([b.reserve(), b.reserve(), b.reserve()]).toEqual([0, 0, 200]);
  });

  it('take() waits on the clock; a waiter that gives up returns its token', async () => {
    const clock = new ManualClock(0);
    const b = new TokenBucket(1, 1, clock);
    await b.take();
    const ac = new AbortController();
    const given = b.take(ac.signal).then(() => 'went', () => 'gave up');
    ac.abort(new Error('client left'));
    expect(await given).toBe('gave up');
    let went = false;
    const next = b.take().then(() => (went = true));
    await clock.advance(999);
    expect(went).toBe(false);
    await clock.advance(1);
    await next;
    expect(went).toBe(true);
  });

  it("reads QPS and burst as client-go's rest.Config: 0 is the default (5, 10), negative no limit", () => {
    const clock = new ManualClock(0);
    const zero = clientGoLimit(0, 0, clock) as TokenBucket;
    expect(Array.from({ length: 11 }, () => zero.reserve())).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 200]);
    expect(clientGoLimit(-1, 0, clock)).toBe(noLimit);
    expect(() => new TokenBucket(0, 1, clock)).toThrow(RangeError);
  });
});
