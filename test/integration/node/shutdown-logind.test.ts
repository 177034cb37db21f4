/**
 * The logind edge (src/node/shutdown-logind.ts) without a logind: the inhibitor holder with a
 * stand-in systemd-inhibit (held once `cat` echoes, released by closing its stdin, gone when
 * the holder ends), its failure with the real systemd-inhibit's message, and connectLogind on
 * a host without a system bus and on a private dbus-daemon without logind: each a clear
 * reason, never a crash.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log.js';
import { connectLogind, holdInhibitor } from '../../../src/node/shutdown-logind.js';

let dir: string;
let fakeInhibit: string;
let argsFile: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-logind-'));
  argsFile = path.join(dir, 'args');
  fakeInhibit = path.join(dir, 'systemd-inhibit');
  // Records its arguments, then runs the command after `--`, as systemd-inhibit does once it holds the lock.
  fs.writeFileSync(fakeInhibit, `#!/bin/sh\nprintf '%s\\n' "$@" > '${argsFile}'\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n`, { mode: 0o755 });
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('holdInhibitor', () => {
  it('holds the lock through systemd-inhibit ... cat until released', async () => {
    const inh = await holdInhibitor({ systemdInhibit: fakeInhibit, logger: silentLogger() });
    expect(fs.readFileSync(argsFile, 'utf8').trim().split('\n')).toEqual(['--what=shutdown', '--mode=delay', '--who=nodelet', '--why=nodelet needs time to handle node shutdown', '--', 'cat']);
    let gone = false;
    void inh.gone.then(() => (gone = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(gone).toBe(false);
    const t0 = Date.now();
    await Promise.all([inh.release(), inh.release()]);
    expect(gone).toBe(true);
    expect(Date.now() - t0).toBeLessThan(900); // cat ended at EOF, not the 1 s kill
  });

  it('rejects with what systemd-inhibit said when it cannot take the lock', async () => {
    const failing = path.join(dir, 'failing-inhibit');
    fs.writeFileSync(failing, '#!/bin/sh\necho "Failed to inhibit: Access denied" >&2\nexit 1\n', { mode: 0o755 });
    await expect(holdInhibitor({ systemdInhibit: failing, logger: silentLogger() })).rejects.toThrow(/^systemd-inhibit ended \(exit 1\) without taking the lock: Failed to inhibit: Access denied$/);
  });

  it('rejects when systemd-inhibit is not installed', async () => {
    await expect(holdInhibitor({ systemdInhibit: path.join(dir, 'nope'), logger: silentLogger() })).rejects.toThrow(/cannot run systemd-inhibit: spawn .*nope ENOENT/);
  });
});

describe('connectLogind', () => {
  it('no system bus: a reason, no connection attempt', async () => {
    await expect(connectLogind({ logger: silentLogger(), busAddress: `unix:path=${path.join(dir, 'no-bus')}` })).rejects.toThrow(`no D-Bus system bus (${path.join(dir, 'no-bus')} does not exist)`);
  });

  describe('a bus without logind (a private dbus-daemon)', () => {
    let daemon: ChildProcess;
    let address: string;
    beforeAll(async () => {
      const conf = path.join(dir, 'bus.conf');
      const sock = path.join(dir, 'bus.sock');
      fs.writeFileSync(
        conf,
        `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>custom</type><listen>unix:path=${sock}</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy></busconfig>`,
      );
      daemon = spawn('dbus-daemon', ['--config-file', conf, '--nofork', '--print-address=1'], { stdio: ['ignore', 'pipe', 'ignore'] });
      address = await new Promise<string>((resolve, reject) => {
        daemon.on('error', (err) => reject(new Error(`dbus-daemon (package dbus) is needed for this test: ${err.message}`)));
        daemon.stdout!.setEncoding('utf8').once('data', (d: string) => resolve(d.trim()));
      });
    });
    afterAll(() => {
      daemon?.kill('SIGTERM');
    });

    it('says logind is not there', async () => {
      await expect(connectLogind({ logger: silentLogger(), busAddress: address })).rejects.toThrow(/^cannot read InhibitDelayMaxUSec from systemd-logind: .*org\.freedesktop\.login1/);
    });
  });
});
