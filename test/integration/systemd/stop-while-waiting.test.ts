/**
 * `systemctl stop nodelet` while nodelet still waits for the lock file (another agent holds
 * it, as after a hand-over when Restart=always brings the old unit back): nodelet must exit
 * 0 promptly, not sit out TimeoutStopSec until systemd SIGKILLs it (Result=timeout).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootBox, type Box } from '../../systemd/harness.js';
import { BOX_LOCK_FILE, installNodelet, journal, lockState, messageText, testConfig, unitShow, waitUntil } from '../../systemd/nodelet-box.js';

let box: Box;

beforeAll(async () => {
  box = await bootBox();
  await installNodelet(box, { config: testConfig() });
});

afterAll(async () => {
  await box?.poweroff();
});

describe('systemctl stop while nodelet waits for the lock', () => {
  it('exits 0 at once with Result=success, no SIGKILL, and leaves the holder alone', async () => {
    await box.run(['systemd-run', '--unit=lockholder', '--quiet', '--', 'flock', BOX_LOCK_FILE, 'sleep', 'infinity']);
    await waitUntil('lockholder to hold the lock', async () => (await lockState(box, BOX_LOCK_FILE).catch(() => undefined))?.holders.length === 1);
    const holder = (await lockState(box, BOX_LOCK_FILE)).holders[0];
    await box.run(['systemctl', 'start', '--no-block', 'nodelet']);
    const waiting = await waitUntil('nodelet to wait for the lock', async () => {
      const s = await unitShow(box, 'nodelet', ['StatusText', 'MainPID']);
      return s.StatusText === `waiting for lock file ${BOX_LOCK_FILE}` ? Number(s.MainPID) : undefined;
    });

    const t0 = Date.now();
    await box.run(['systemctl', 'stop', 'nodelet'], { timeoutMs: 40_000 });
    const ms = Date.now() - t0;
    const msgs = (await journal(box, ['-u', 'nodelet'])).filter((e) => e._PID === '1').map(messageText);
    expect(msgs.filter((m) => /timed out|SIGKILL|Failed with result/.test(m))).toEqual([]);
    expect(ms).toBeLessThan(5_000);
    expect((await unitShow(box, 'nodelet', ['ActiveState', 'Result'])).Result).toBe('success');
    expect(await box.exec(['kill', '-0', String(waiting)])).toMatchObject({ code: 1 });
    expect(await lockState(box, BOX_LOCK_FILE)).toEqual({ holders: [holder], waiters: [] });
  });
});
