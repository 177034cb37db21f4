/**
 * The shipped unit, as shipped, under a real systemd 252 booted in a container: it is
 * installed byte for byte, passes `systemd-analyze verify` with no diagnostic at all, can be
 * enabled, and nodelet started from it runs with the hardening the unit declares. Also the
 * harness itself: a pristine box boots, runs the host's Node, powers off and leaves no cgroup.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shebangNodeFlags } from '../../helpers/nodelet.js';
import { bootBox, projectRoot, type Box } from '../../systemd/harness.js';
import { BOX_UNIT_PATH, installNodelet, SHIPPED_UNIT, testConfig, unitShow, waitActive } from '../../systemd/nodelet-box.js';

let box: Box;

beforeAll(async () => {
  box = await bootBox();
  console.log(`[systemd] box booted in ${box.bootMs} ms`);
});

afterAll(async () => {
  await box?.poweroff();
});

describe('the box', () => {
  it('boots systemd 252 as PID 1 with journald, pristine, and runs the host Node from the read-only project', async () => {
    expect(box.failedUnits).toEqual([]);
    expect(await box.run(['systemctl', 'is-system-running'])).toBe('running\n');
    expect((await box.run(['systemctl', '--version'])).split('\n')[0]).toMatch(/^systemd 252 /);
    expect((await box.run(['cat', '/proc/1/comm'])).trim()).toBe('systemd');
    expect((await unitShow(box, 'systemd-journald.service', ['ActiveState'])).ActiveState).toBe('active');
    expect(await box.run(['node', '-p', 'process.version'])).toBe(`${process.version}\n`);
    // The project is bound read-only: a test cannot change the checkout.
    const w = await box.exec(['touch', '/opt/nodelet/should-not-exist']);
    expect(w.code).not.toBe(0);
    expect(w.stderr).toMatch(/Read-only file system/);
    expect(fs.existsSync(path.join(projectRoot, 'should-not-exist'))).toBe(false);
    // The native addons built on the host load in the box (libsystemd0 is in the rootfs).
    expect(await box.run(['node', '-e', "require('/opt/nodelet/node_modules/sd-notify'); require('/opt/nodelet/node_modules/fs-ext'); console.log('ok')"])).toBe('ok\n');
  });
});

describe('systemd/nodelet.service', () => {
  it('is installed unchanged and passes systemd-analyze verify with no output at all', async () => {
    await installNodelet(box, { config: testConfig() });
    await box.run(['cmp', `/opt/nodelet/${SHIPPED_UNIT}`, BOX_UNIT_PATH]);
    // 252 exits 0 on parse warnings: the output is what must be empty. Verify the shipped
    // file alone (the test drop-in moved away), then with the drop-in as the tests run it.
    await box.sh('mv /etc/systemd/system/nodelet.service.d /root/dropins.d && systemctl daemon-reload');
    const alone = await box.exec(['systemd-analyze', 'verify', BOX_UNIT_PATH]);
    expect({ code: alone.code, out: alone.stdout + alone.stderr }).toEqual({ code: 0, out: '' });
    await box.sh('mv /root/dropins.d /etc/systemd/system/nodelet.service.d && systemctl daemon-reload');
    const withDropIn = await box.exec(['systemd-analyze', 'verify', BOX_UNIT_PATH]);
    expect({ code: withDropIn.code, out: withDropIn.stdout + withDropIn.stderr }).toEqual({ code: 0, out: '' });
  });

  it('the verify check is not vacuous: a misspelt directive in a copy is reported (while the exit code is still 0)', async () => {
    await box.sh(`sed 's/^Type=notify$/Type=notfy/' ${BOX_UNIT_PATH} > /root/broken.service`);
    const r = await box.exec(['systemd-analyze', 'verify', '/root/broken.service']);
    expect(r.stdout + r.stderr).toMatch(/Failed to parse service type, ignoring: notfy/);
  });

  it('declares what the kubelet units do: notify, watchdog, restarts forever, ordering after the runtime, SyslogIdentifier', async () => {
    const shipped = fs.readFileSync(path.join(projectRoot, SHIPPED_UNIT), 'utf8');
    expect(shipped).toMatch(/^WatchdogSec=15$/m);
    // The effective values (systemd's parse of the shipped file, with the test drop-in over it).
    const s = await unitShow(box, 'nodelet.service', [
      'Type', 'NotifyAccess', 'Restart', 'StartLimitIntervalUSec', 'After', 'Wants', 'SyslogIdentifier', 'TimeoutStopUSec', 'KillMode', 'WantedBy', 'NoNewPrivileges', 'ExecStart', 'DropInPaths',
    ]);
    expect(s).toMatchObject({
      Type: 'notify',
      NotifyAccess: 'main',
      Restart: 'always',
      StartLimitIntervalUSec: '0',
      SyslogIdentifier: 'nodelet',
      TimeoutStopUSec: '30s',
      KillMode: 'control-group',
      NoNewPrivileges: 'yes',
      DropInPaths: '/etc/systemd/system/nodelet.service.d/10-test.conf',
    });
    expect(s.After!.split(' ')).toEqual(expect.arrayContaining(['containerd.service', 'crio.service', 'network-online.target']));
    expect(s.Wants!.split(' ')).toContain('network-online.target');
    expect(s.ExecStart).toContain('path=/usr/local/bin/nodelet ; argv[]=/usr/local/bin/nodelet $NODELET_CONFIG_ARGS $NODELET_EXTRA_ARGS ;');
    await box.run(['systemctl', 'enable', 'nodelet']);
    expect((await box.run(['readlink', '/etc/systemd/system/multi-user.target.wants/nodelet.service'])).trim()).toBe(BOX_UNIT_PATH);
  });

  it('nodelet runs under it with the unit hardening and the shipped config paths (the --config-dir directory is created)', async () => {
    const t0 = Date.now();
    await box.run(['systemctl', 'start', 'nodelet']);
    console.log(`[systemd] systemctl start nodelet returned after ${Date.now() - t0} ms`);
    const pid = await waitActive(box, 'nodelet');
    const status = await box.readFile(`/proc/${pid}/status`);
    expect(status).toMatch(/^NoNewPrivs:\s+1$/m);
    expect(status).toMatch(/^Seccomp:\s+2$/m);
    const cmdline = (await box.readFile(`/proc/${pid}/cmdline`)).split('\0').filter(Boolean);
    // The kernel runs the entry's shebang (`/usr/bin/env -S node <flags>`): node with the shipped V8 flags, then the link and the unit's arguments.
    expect(cmdline).toEqual(['node', ...shebangNodeFlags(), '/usr/local/bin/nodelet', '--config=/var/lib/kubelet/config.yaml', '--config-dir=/etc/kubernetes/kubelet.conf.d', '--lock-file=/var/run/kubelet.lock']);
    expect(shebangNodeFlags()).toContain('--no-opt');
    expect((await box.run(['stat', '-c', '%F', '/etc/kubernetes/kubelet.conf.d'])).trim()).toBe('directory');
    await box.run(['systemctl', 'stop', 'nodelet']);
  });
});

describe('the harness', () => {
  it('powers the box off cleanly: nspawn exits 0 and the cgroups it made are gone', async () => {
    const t0 = Date.now();
    await box.poweroff();
    console.log(`[systemd] box powered off in ${Date.now() - t0} ms`);
    expect(box.exitInfo).toEqual({ code: 0, signal: null });
    for (const cg of box.cgroups) expect(fs.existsSync(cg)).toBe(false);
    expect(fs.existsSync(`/proc/${box.systemdPid}`)).toBe(false);
  });
});
