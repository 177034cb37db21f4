/**
 * The systemd watchdog with nodelet, for real: with WatchdogSec=3 (test drop-in) a healthy
 * nodelet pings every ~1.5 s and runs for several periods with no restart; once its event
 * loop is frozen (`kill -STOP`), systemd logs `Watchdog timeout`, kills it with SIGABRT,
 * restarts it (Restart=always), and the new process takes the lock the kernel released
 * and is active again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootBox, type Box } from '../../systemd/harness.js';
import { BOX_LOCK_FILE, installNodelet, journal, lockState, messageText, testConfig, unitShow, waitActive, waitUntil } from '../../systemd/nodelet-box.js';

let box: Box;

beforeAll(async () => {
  box = await bootBox();
  console.log(`[systemd] box booted in ${box.bootMs} ms`);
  await installNodelet(box, { config: testConfig() });
  await box.run(['systemctl', 'start', 'nodelet']);
});

afterAll(async () => {
  await box?.poweroff();
});

describe('watchdog (WatchdogSec=3)', () => {
  it('a healthy nodelet pings about every 1.5 s and stays up for several periods with no restart', async () => {
    const pid = await waitActive(box, 'nodelet');
    expect((await unitShow(box, 'nodelet', ['WatchdogUSec'])).WatchdogUSec).toBe('3s');
    // systemd stamps WatchdogTimestampMonotonic with every WATCHDOG=1 it accepts.
    const stamps: number[] = [];
    const until = Date.now() + 10_000; // over three periods
    while (Date.now() < until) {
      const t = Number((await unitShow(box, 'nodelet', ['WatchdogTimestampMonotonic'])).WatchdogTimestampMonotonic);
      if (t > 0 && t !== stamps.at(-1)) stamps.push(t);
      await new Promise((r) => setTimeout(r, 100));
    }
    const gaps = stamps.slice(1).map((t, i) => (t - stamps[i]!) / 1000);
    console.log(`[systemd] watchdog ping gaps (ms): ${gaps.map((g) => g.toFixed(0)).join(', ')}`);
    expect(stamps.length).toBeGreaterThanOrEqual(6);
    for (const g of gaps) {
      expect(g).toBeGreaterThan(1_000);
      expect(g).toBeLessThan(2_500);
    }
    const s = await unitShow(box, 'nodelet', ['ActiveState', 'MainPID', 'NRestarts']);
    expect(s).toEqual({ ActiveState: 'active', MainPID: String(pid), NRestarts: '0' });
    const msgs = (await journal(box, ['-u', 'nodelet'])).map(messageText);
    expect(msgs.filter((m) => /Watchdog timeout/.test(m))).toEqual([]);
  });

  it('a frozen nodelet (kill -STOP) is killed with SIGABRT on Watchdog timeout, restarted, retakes the lock and is active again', async () => {
    const oldPid = await waitActive(box, 'nodelet');
    expect((await lockState(box, BOX_LOCK_FILE)).holders).toEqual([oldPid]);
    const t0 = Date.now();
    await box.run(['kill', '-STOP', String(oldPid)]);
    const newPid = await waitUntil(
      'nodelet to be restarted and active',
      async () => {
        const s = await unitShow(box, 'nodelet', ['ActiveState', 'SubState', 'MainPID', 'NRestarts']);
        return s.ActiveState === 'active' && s.SubState === 'running' && s.NRestarts === '1' ? Number(s.MainPID) : undefined;
      },
      20_000,
    );
    const ms = Date.now() - t0;
    expect(newPid).not.toBe(oldPid);
    expect(await box.exec(['kill', '-0', String(oldPid)])).toMatchObject({ code: 1 });

    const entries = await journal(box, ['-u', 'nodelet']);
    const systemd = entries.filter((e) => e._PID === '1');
    const at = (re: RegExp) => {
      const e = systemd.find((x) => re.test(messageText(x)));
      if (!e) throw new Error(`systemd did not log ${re}; it logged:\n${systemd.map(messageText).join('\n')}`);
      return Number(e.__MONOTONIC_TIMESTAMP) / 1000;
    };
    const timeout = at(/^nodelet\.service: Watchdog timeout \(limit 3s\)!$/);
    const abort = at(new RegExp(`^nodelet\\.service: Killing process ${oldPid} \\(node\\) with signal SIGABRT\\.$`));
    const exited = at(/^nodelet\.service: Main process exited, code=(killed|dumped), status=6\/ABRT$/);
    const failed = at(/^nodelet\.service: Failed with result 'watchdog'\.$/);
    const scheduled = at(/^nodelet\.service: Scheduled restart job, restart counter is at 1\.$/);
    expect(timeout).toBeLessThanOrEqual(abort);
    expect(abort).toBeLessThanOrEqual(exited);
    expect(exited).toBeLessThanOrEqual(failed);
    expect(failed).toBeLessThanOrEqual(scheduled);
    // The new process started after the old one died, and holds the lock the kernel released.
    const started = entries.filter((e) => e._PID === String(newPid)).map((e) => JSON.parse(messageText(e)) as { msg: string; component?: string });
    expect(started).toContainEqual(expect.objectContaining({ component: 'lock', msg: 'acquired lock file' }));
    expect(started).toContainEqual(expect.objectContaining({ msg: 'nodelet is ready' }));
    expect(await lockState(box, BOX_LOCK_FILE)).toEqual({ holders: [newPid], waiters: [] });

    const lastActive = entries.filter((e) => e._PID === '1' && /^Started nodelet\.service/.test(messageText(e))).at(-1);
    const activeAgain = Number(lastActive!.__MONOTONIC_TIMESTAMP) / 1000;
    console.log(
      `[systemd] watchdog: SIGSTOP -> active again in ${ms} ms; Watchdog timeout -> active again ${(activeAgain - timeout).toFixed(0)} ms ` +
        `(SIGABRT +${(abort - timeout).toFixed(0)} ms, exited +${(exited - timeout).toFixed(0)} ms, RestartSec=1)`,
    );
    // Freeze to timeout is WatchdogSec minus the time since the last ping: at most 3 s, plus
    // RestartSec=1 and nodelet's start.
    expect(ms).toBeLessThan(10_000);
  });
});
