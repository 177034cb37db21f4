/**
 * Hand-over between two agents on one lock file, as the kubelet's
 * --exit-on-lock-contention is used for upgrades, under a real systemd 252: nodelet.service
 * runs with that flag; starting a second unit (nodelet-next.service: the shipped unit
 * installed under another name, with its own drop-in) on the same lock file makes the
 * first exit 0, and the second takes the lock and becomes ready.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootBox, type Box } from '../../systemd/harness.js';
import { BOX_LOCK_FILE, installNodelet, journal, lockState, messageText, testConfig, testDropIn, unitShow, waitActive, waitUntil } from '../../systemd/nodelet-box.js';

let box: Box;

beforeAll(async () => {
  box = await bootBox();
  console.log(`[systemd] box booted in ${box.bootMs} ms`);
  await installNodelet(box, { config: testConfig(), dropIn: testDropIn(['--exit-on-lock-contention']) });
  await installNodelet(box, { config: testConfig(), unitName: 'nodelet-next' });
});

afterAll(async () => {
  await box?.poweroff();
});

describe('hand-over with --exit-on-lock-contention', () => {
  it('starting a second agent on the lock makes the first exit 0; the second takes the lock and is ready', async () => {
    await box.run(['systemctl', 'start', 'nodelet']);
    const oldPid = await waitActive(box, 'nodelet');
    expect(await lockState(box, BOX_LOCK_FILE)).toEqual({ holders: [oldPid], waiters: [] });

    const t0 = Date.now();
    // Returns once nodelet-next sent READY=1, which it can only do holding the lock.
    await box.run(['systemctl', 'start', 'nodelet-next'], { timeoutMs: 30_000 });
    console.log(`[systemd] hand-over: systemctl start nodelet-next -> active in ${Date.now() - t0} ms`);
    const nextPid = await waitActive(box, 'nodelet-next');
    // How the old agent ended, read before Restart=always (RestartSec=1 here) replaces it:
    // CLD_EXITED (1) with status 0.
    const ended = await waitUntil('the old nodelet to have exited', async () => {
      const s = await unitShow(box, 'nodelet', ['ExecMainPID', 'ExecMainCode', 'ExecMainStatus', 'SubState', 'Result']);
      return s.ExecMainPID === String(oldPid) && s.ExecMainCode !== '0' ? s : undefined;
    });
    expect(ended).toEqual({ ExecMainPID: String(oldPid), ExecMainCode: '1', ExecMainStatus: '0', SubState: 'auto-restart', Result: 'success' });
    // The operator's next step of an upgrade: retire the old unit, or its Restart=always
    // brings it back to wait for the lock behind the new agent.
    await box.run(['systemctl', 'stop', 'nodelet']);

    expect(nextPid).not.toBe(oldPid);
    expect(await lockState(box, BOX_LOCK_FILE)).toEqual({ holders: [nextPid], waiters: [] });
    expect(await box.exec(['kill', '-0', String(oldPid)])).toMatchObject({ code: 1 });
    expect(await unitShow(box, 'nodelet', ['ActiveState', 'Result'])).toEqual({ ActiveState: 'inactive', Result: 'success' });

    const entries = await journal(box, ['-u', 'nodelet']);
    const oldRecs = entries.filter((e) => e._PID === String(oldPid)).map((e) => JSON.parse(messageText(e)) as { msg: string });
    expect(oldRecs.map((r) => r.msg)).toContainEqual(expect.stringMatching(/^lock contention: .*exiting so the new agent can take over$/));
    expect(oldRecs.map((r) => r.msg)).toContain('nodelet stopped');
    const systemd = entries.filter((e) => e._PID === '1').map(messageText);
    expect(systemd).toContain('nodelet.service: Deactivated successfully.');
    expect(systemd.filter((m) => /Failed with result|SIGKILL|Killing process/.test(m))).toEqual([]);

    // journald reads the new agent's stdout stream asynchronously: poll for its records.
    await waitUntil('nodelet-next to log that it took the lock and is ready', async () => {
      const recs = (await journal(box, ['-u', 'nodelet-next'])).filter((e) => e._PID === String(nextPid)).map((e) => JSON.parse(messageText(e)) as { msg: string; component?: string });
      return recs.some((r) => r.component === 'lock' && r.msg === 'acquired lock file') && recs.some((r) => r.msg === 'nodelet is ready');
    });
  });
});
