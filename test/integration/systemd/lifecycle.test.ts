/**
 * nodelet's start and stop as an operator sees them through systemctl, under a real
 * systemd 252: `systemctl start` returns only once nodelet has sent READY=1 (the unit is
 * `activating` until then, here while another process holds the lock file), `systemctl
 * status` shows nodelet's STATUS= line, and `systemctl stop` gets STOPPING=1, a clean exit 0
 * well within TimeoutStopSec, Result=success and the lock released.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootBox, type Box } from '../../systemd/harness.js';
import { BOX_LOCK_FILE, installNodelet, journal, lockState, messageText, testConfig, unitShow, waitActive, waitUntil } from '../../systemd/nodelet-box.js';

let box: Box;

beforeAll(async () => {
  box = await bootBox();
  console.log(`[systemd] box booted in ${box.bootMs} ms`);
  await installNodelet(box, { config: testConfig() });
});

afterAll(async () => {
  await box?.poweroff();
});

describe('systemctl start nodelet', () => {
  it('returns once nodelet is ready: activating while it waits for the lock, active with the lock held after', async () => {
    // Another agent holds the lock file: nodelet must wait, and systemd must keep the unit activating.
    await box.run(['systemd-run', '--unit=lockholder', '--quiet', '--', 'flock', BOX_LOCK_FILE, 'sleep', 'infinity']);
    await waitUntil('lockholder to hold the lock', async () => {
      const l = await lockState(box, BOX_LOCK_FILE).catch(() => undefined);
      return l !== undefined && l.holders.length === 1;
    });
    let startReturned = false;
    const start = box.exec(['systemctl', 'start', 'nodelet'], { timeoutMs: 60_000 }).then((r) => {
      startReturned = true;
      return r;
    });
    const waiting = await waitUntil('nodelet to wait for the lock', async () => {
      const s = await unitShow(box, 'nodelet', ['ActiveState', 'SubState', 'StatusText', 'MainPID']);
      return s.StatusText!.startsWith('waiting for lock file') ? s : undefined;
    });
    expect(waiting).toMatchObject({ ActiveState: 'activating', SubState: 'start', StatusText: `waiting for lock file ${BOX_LOCK_FILE}` });
    // The waiter in /proc/locks is nodelet's flock(1) child, inside the unit's cgroup.
    // (STATUS= is sent just before the child is spawned: wait for it to show.)
    const waiters = await waitUntil('the waiter to show in /proc/locks', async () => {
      const w = (await lockState(box, BOX_LOCK_FILE)).waiters;
      return w.length > 0 ? w : undefined;
    });
    expect(waiters).toHaveLength(1);
    const stat = (await box.exec(['cat', `/proc/${waiters[0]}/stat`])).stdout;
    expect(Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])).toBe(Number(waiting.MainPID));
    // Still waiting a while later: `systemctl start` has not returned.
    await new Promise((r) => setTimeout(r, 1_000));
    expect(startReturned).toBe(false);
    expect((await unitShow(box, 'nodelet', ['ActiveState'])).ActiveState).toBe('activating');

    await box.run(['systemctl', 'stop', 'lockholder']);
    const r = await start;
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
    // The moment `systemctl start` returns, the unit is active and nodelet holds the lock.
    const s = await unitShow(box, 'nodelet', ['ActiveState', 'SubState', 'MainPID', 'NRestarts']);
    expect(s).toMatchObject({ ActiveState: 'active', SubState: 'running', NRestarts: '0' });
    expect(await lockState(box, BOX_LOCK_FILE)).toEqual({ holders: [Number(s.MainPID)], waiters: [] });
    const held = await box.exec(['flock', '-n', BOX_LOCK_FILE, 'true']);
    expect(held.code).toBe(1);
  });

  it('systemctl status shows the STATUS= line nodelet sets: mode and runtime', async () => {
    const status = await box.exec(['systemctl', 'status', 'nodelet', '--no-pager', '--lines=0']);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(/Active: active \(running\)/);
    expect(status.stdout).toMatch(/^\s+Status: "standalone; .*runtime unix:\/\/\/run\/containerd\/containerd\.sock.*"$/m);
    expect(status.stdout).toMatch(/Main PID: \d+ \(node\)/);
  });

  it('measures start to active with the lock free', async () => {
    await box.run(['systemctl', 'stop', 'nodelet']);
    const t0 = Date.now();
    await box.run(['systemctl', 'start', 'nodelet']);
    const ms = Date.now() - t0;
    console.log(`[systemd] systemctl start nodelet -> active in ${ms} ms`);
    expect((await unitShow(box, 'nodelet', ['ActiveState'])).ActiveState).toBe('active');
    expect(ms).toBeLessThan(10_000);
  });
});

describe('systemctl stop nodelet', () => {
  it('sends SIGTERM, gets STOPPING=1, sees exit 0 within TimeoutStopSec with Result=success, and the lock is free', async () => {
    const pid = await waitActive(box, 'nodelet');
    // At debug level systemd logs every notification it accepts, with the sender's PID.
    await box.run(['systemd-analyze', 'log-level', 'debug']);
    const t0 = Date.now();
    try {
      await box.run(['systemctl', 'stop', 'nodelet']);
    } finally {
      await box.run(['systemd-analyze', 'log-level', 'info']);
    }
    const ms = Date.now() - t0;
    console.log(`[systemd] systemctl stop nodelet took ${ms} ms`);
    // The stopped unit is garbage-collected at once (its ExecMain* properties reset), so the
    // exit status is read from what systemd logged about it.
    const s = await unitShow(box, 'nodelet', ['ActiveState', 'Result', 'TimeoutStopUSec']);
    expect(s).toEqual({ ActiveState: 'inactive', Result: 'success', TimeoutStopUSec: '30s' });
    expect(ms).toBeLessThan(30_000);

    const entries = await journal(box, ['-u', 'nodelet']);
    const msgs = entries.filter((e) => e._PID === '1').map(messageText);
    expect(msgs).toContainEqual(expect.stringMatching(new RegExp(`^nodelet\\.service: Got notification message from PID ${pid} \\(STOPPING=1`)));
    expect(msgs).toContain('nodelet.service: Main process exited, code=exited, status=0/SUCCESS (success)');
    // Logged only for Result=success (a timeout, a signal or a non-zero exit log "Failed with result ...").
    expect(msgs).toContain('nodelet.service: Deactivated successfully.');
    expect(msgs.filter((m) => /Failed with result/.test(m))).toEqual([]);
    expect(msgs.filter((m) => /SIGKILL|Killing process/.test(m))).toEqual([]);
    const own = entries.filter((e) => e._PID === String(pid)).map((e) => JSON.parse(messageText(e)) as { msg: string });
    expect(own.map((r) => r.msg)).toEqual(expect.arrayContaining(['received SIGTERM, shutting down', 'nodelet stopped']));

    expect(await lockState(box, BOX_LOCK_FILE)).toEqual({ holders: [], waiters: [] });
    const free = await box.exec(['flock', '-n', BOX_LOCK_FILE, 'true']);
    expect(free.code).toBe(0);
  });
});
