/**
 * client-go's token bucket as nodelet's clients use it (kubeAPIQPS/kubeAPIBurst,
 * eventRecordQPS/eventBurst), on the test kit's clock: a full bucket at the start, refilled
 * at `qps`, each request waiting for its own token in the order asked; 0 means client-go's
 * defaults and a negative QPS no limit.
 */
import { describe, expect, it } from 'vitest';
import { CLIENT_GO_DEFAULT_BURST, CLIENT_GO_DEFAULT_QPS, clientGoLimit, noLimit, TokenBucket } from '../../../src/controlplane/rate-limit.js';
import { VirtualClock } from '../../helpers/clock.js';

/** Starts `n` takes at once; returns the clock times at which each got its token. */
async function takeTimes(clock: VirtualClock, limiter: { take(): Promise<void> }, n: number, runForMs: number): Promise<number[]> {
  const start = clock.now();
  const times: number[] = [];
  for (let i = 0; i < n; i++) void limiter.take().then(() => times.push(clock.now() - start));
  await clock.advance(runForMs);
  return times;
}

describe('TokenBucket', () => {
  it('a burst goes at once, the rest at qps, in order', async () => {
    const clock = new VirtualClock();
    expect(await takeTimes(clock, new TokenBucket(5, 3, clock), 7, 2000)).toEqual([0, 0, 0, 200, 400, 600, 800]);
  });

  it('refills while idle, never above the burst', async () => {
    const clock = new VirtualClock();
    const b = new TokenBucket(10, 2, clock);
    await takeTimes(clock, b, 2, 0);
    await clock.advance(60_000);
    expect(await takeTimes(clock, b, 4, 1000)).toEqual([0, 0, 100, 200]);
  });

  it('rejects what client-go would not build', () => {
    const clock = new VirtualClock();
    expect(() => new TokenBucket(0, 1, clock)).toThrow(RangeError);
    expect(() => new TokenBucket(5, 0, clock)).toThrow('a token bucket needs qps > 0 and burst >= 1, got 5 and 0');
  });
});

describe('clientGoLimit (a rest.Config QPS and Burst)', () => {
  it('QPS 0 and burst 0 are client-go defaults: 5 a second, a burst of 10', async () => {
    expect([CLIENT_GO_DEFAULT_QPS, CLIENT_GO_DEFAULT_BURST]).toEqual([5, 10]);
    const clock = new VirtualClock();
    expect(await takeTimes(clock, clientGoLimit(0, 0, clock), 12, 1000)).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 200, 400]);
  });

  it('the kubelet defaults (50, 100): a hundred at once, then one every 20 ms', async () => {
    const clock = new VirtualClock();
    const times = await takeTimes(clock, clientGoLimit(50, 100, clock), 103, 1000);
    expect(times.slice(98)).toEqual([0, 0, 20, 40, 60]);
  });

  it('a negative QPS (the heartbeat client) is no limit', async () => {
    const clock = new VirtualClock();
    expect(clientGoLimit(-1, 0, clock)).toBe(noLimit);
    expect(await takeTimes(clock, clientGoLimit(-1, 1, clock), 50, 0)).toEqual(Array(50).fill(0));
  });

  it('kubeAPIQPS 5 with burst 1 holds a minute to 5 a second (+1)', async () => {
    const clock = new VirtualClock();
    const times = await takeTimes(clock, clientGoLimit(5, 1, clock), 1000, 60_000);
    expect(times.length).toBe(301);
  });
});
