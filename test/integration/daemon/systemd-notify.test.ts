import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { eventually, freePort, runNodelet, startNodelet, tempDir, type NodeletProcess } from '../../helpers/nodelet.js';
import { startNotifySocket } from '../../helpers/notify-socket.js';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function startWithNotify(extraEnv: Record<string, string> = {}) {
  const dir = tempDir();
  const sock = await startNotifySocket(dir);
  cleanup.push(sock.close);
  const port = await freePort();
  const lock = path.join(dir, 'kubelet.lock');
  const p: NodeletProcess = startNodelet(
    ['--root-dir', path.join(dir, 'root'), '--lock-file', lock, '--healthz-port', String(port), '--read-only-port', '0', '--port', String(await freePort())],
    { env: { NOTIFY_SOCKET: sock.path, ...extraEnv } },
  );
  cleanup.push(async () => {
    p.kill('SIGKILL');
    await p.exited;
  });
  return { dir, sock, port, lock, p };
}

describe('systemd notifications', () => {
  it('sends READY=1 with a status, then WATCHDOG=1 about every WATCHDOG_USEC/2, and STOPPING=1 on SIGTERM', async () => {
    const { sock, p } = await startWithNotify({ WATCHDOG_USEC: '2000000' });
    await eventually(() => sock.assignments().filter((x) => x.a === 'WATCHDOG=1').length >= 4, 8000);
    const as = sock.assignments();
    const ready = as.findIndex((x) => x.a === 'READY=1');
    expect(ready).toBeGreaterThanOrEqual(0);
    expect(as.find((x) => x.a.startsWith('STATUS=') && /standalone/.test(x.a))).toBeDefined();
    const pings = as.filter((x) => x.a === 'WATCHDOG=1');
    expect(as.indexOf(pings[0]!)).toBeGreaterThan(ready);
    const gaps = pings.slice(1).map((x, i) => x.t - pings[i]!.t);
    // About every second; what systemd needs is a ping well within WATCHDOG_USEC (2 s), which
    // a loaded CI machine delaying a timer by a few hundred ms must not fail.
    for (const g of gaps) {
      expect(g).toBeGreaterThan(700);
      expect(g).toBeLessThan(1900);
    }
    p.kill('SIGTERM');
    expect((await p.exited).code).toBe(0);
    await eventually(() => sock.assignments().some((x) => x.a === 'STOPPING=1'));
  });

  it('withholds pings while a health check fails, and /healthz names it', async () => {
    const { sock, lock, port, p } = await startWithNotify({ WATCHDOG_USEC: '2000000' });
    await eventually(() => sock.assignments().some((x) => x.a === 'WATCHDOG=1'), 5000);
    const ok = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect([ok.status, await ok.text()]).toEqual([200, 'ok']);
    // Removing the lock file breaks the guarantee the lock gives: the "lockfile" check fails.
    fs.rmSync(lock);
    const warned = await p.waitForMsg(/watchdog pings withheld/);
    expect(warned.level).toBe('warn');
    const countAt = sock.assignments().filter((x) => x.a === 'WATCHDOG=1').length;
    await new Promise((r) => setTimeout(r, 2500));
    expect(sock.assignments().filter((x) => x.a === 'WATCHDOG=1').length).toBe(countAt);
    const bad = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(bad.status).toBe(500);
    expect(await bad.text()).toContain('[-]lockfile failed: lock file');
    const verbose = await (await fetch(`http://127.0.0.1:${port}/healthz?verbose`)).text();
    expect(verbose).toContain('[+]eventloop ok');
  });

  it('sends nothing when WATCHDOG_USEC is unset or 0, and runs fine without NOTIFY_SOCKET', async () => {
    const { sock, p } = await startWithNotify({ WATCHDOG_USEC: '0' });
    await eventually(() => sock.assignments().some((x) => x.a === 'READY=1'));
    await new Promise((r) => setTimeout(r, 1500));
    expect(sock.assignments().some((x) => x.a === 'WATCHDOG=1')).toBe(false);
    p.kill('SIGTERM');
    expect((await p.exited).code).toBe(0);

    const dir = tempDir();
    const q = startNodelet(['--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'l'), '--healthz-port', '0', '--read-only-port', '0', '--port', String(await freePort())]);
    await q.waitForMsg(/nodelet is ready/);
    q.kill('SIGTERM');
    expect((await q.exited).code).toBe(0);
  });

  it.each([['abc'], ['500000']])('WATCHDOG_USEC=%s is a startup error naming it, before the lock is taken', async (v) => {
    const dir = tempDir();
    const r = await runNodelet(['--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'l'), '--healthz-port', '0'], {
      env: { WATCHDOG_USEC: v },
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('WATCHDOG_USEC');
    expect(fs.existsSync(path.join(dir, 'l'))).toBe(false);
    expect(fs.existsSync(path.join(dir, 'root'))).toBe(false);
  });
});
