import { describe, expect, it } from 'vitest';
import { isNodeletError } from '../../../src/errors.js';
import { HealthRegistry } from '../../../src/health/checks.js';
import { silentLogger } from '../../../src/log.js';
import { createNotifier, watchdogIntervalFromEnv, WatchdogLoop, type Notifier } from '../../../src/system/notify.js';
import { VirtualClock } from '../../helpers/clock.js';

describe('watchdogIntervalFromEnv', () => {
  it.each([
    [{}, undefined],
    [{ WATCHDOG_USEC: '' }, undefined],
    [{ WATCHDOG_USEC: '0' }, undefined],
    [{ WATCHDOG_USEC: '2000000' }, 2000],
    [{ WATCHDOG_USEC: '15000000' }, 15000],
    [{ WATCHDOG_USEC: '1000000' }, 1000],
    [{ WATCHDOG_USEC: '2000000', WATCHDOG_PID: '1234' }, 2000],
    [{ WATCHDOG_USEC: '2000000', WATCHDOG_PID: '999' }, undefined],
  ])('%j -> %s ms', (env, want) => {
    expect(watchdogIntervalFromEnv(env as NodeJS.ProcessEnv, 1234)).toBe(want);
  });

  it.each([['abc'], ['1.5e6'], ['-1'], ['500000'], ['999999']])('rejects WATCHDOG_USEC=%s naming the variable', (v) => {
    let err: unknown;
    try {
      watchdogIntervalFromEnv({ WATCHDOG_USEC: v }, 1);
    } catch (e) {
      err = e;
    }
    expect(isNodeletError(err, 'CONFIG_INVALID')).toBe(true);
    expect((err as Error).message).toContain('WATCHDOG_USEC');
  });
});

describe('createNotifier', () => {
  it('is a silent no-op without NOTIFY_SOCKET', () => {
    const n = createNotifier({});
    expect(n.enabled).toBe(false);
    expect(() => {
      n.ready('x');
      n.status('y');
      n.watchdog();
      n.stopping();
    }).not.toThrow();
  });
});

describe('WatchdogLoop', () => {
  it('pings only while every health check passes', async () => {
    const sent: string[] = [];
    const notifier: Notifier = { enabled: true, ready() {}, status() {}, stopping() {}, watchdog: () => sent.push('WATCHDOG=1') };
    const health = new HealthRegistry();
    let healthy = true;
    health.add({ name: 'loop', check: () => { if (!healthy) throw new Error('stuck'); } });
    const loop = new WatchdogLoop({ notifier, health, timeoutMs: 2000, clock: new VirtualClock(), logger: silentLogger() });
    expect(loop.periodMs).toBe(1000);
    expect(await loop.syncOnce()).toBe(true);
    healthy = false;
    expect(await loop.syncOnce()).toBe(false);
    expect(await loop.syncOnce()).toBe(false);
    healthy = true;
    expect(await loop.syncOnce()).toBe(true);
    expect(sent).toEqual(['WATCHDOG=1', 'WATCHDOG=1']);
  });
});
