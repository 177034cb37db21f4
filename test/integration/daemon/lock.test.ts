import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { eventually, freePort, runNodelet, startNodelet, tempDir, type NodeletProcess } from '../../helpers/nodelet.js';

const started: NodeletProcess[] = [];
afterEach(async () => {
  for (const p of started.splice(0)) {
    p.kill('SIGKILL');
    await p.exited;
  }
});

/** A nodelet of its own: own root dir and lock, its own HTTPS port, no healthz or read-only port. */
async function nodelet(dir: string, lock: string, extra: string[] = []) {
  const port = String(await freePort());
  const p = startNodelet(['--root-dir', path.join(dir, 'root'), '--lock-file', lock, '--healthz-port', '0', '--read-only-port', '0', '--port', port, ...extra]);
  started.push(p);
  return p;
}

/** A fresh directory and the lock file in it. */
function lockDir(): { dir: string; lock: string } {
  const dir = tempDir();
  return { dir, lock: path.join(dir, 'kubelet.lock') };
}

/** A nodelet of its own (see nodelet) on the lock of a fresh directory, ready: it holds the lock. */
async function readyHolder(extra: string[] = []): Promise<{ dir: string; lock: string; a: NodeletProcess }> {
  const { dir, lock } = lockDir();
  const a = await nodelet(dir, lock, extra);
  await a.waitForMsg(/nodelet is ready/);
  return { dir, lock, a };
}

/** util-linux flock, non-blocking: true when the lock could be taken. */
function flockFree(lock: string): boolean {
  return spawnSync('flock', ['-n', lock, 'true']).status === 0;
}

describe('lock file', () => {
  it('is held while nodelet runs and released by the kernel after kill -9', async () => {
    const { lock, a } = await readyHolder();
    expect(fs.statSync(lock).mode & 0o777).toBe(0o600);
    expect(flockFree(lock)).toBe(false);
    a.kill('SIGKILL');
    await a.exited;
    expect(flockFree(lock)).toBe(true);
  });

  it('a second nodelet waits, says who holds the lock, and starts when the first stops', async () => {
    const { dir, lock, a } = await readyHolder();
    const b = await nodelet(dir, lock);
    const waiting = await b.waitForMsg(/waiting for lock file/);
    expect(waiting.holders).toEqual([expect.stringContaining(`pid ${a.pid}`)]);
    // B does not start its services while it waits.
    await new Promise((r) => setTimeout(r, 500));
    expect(b.records.some((r) => /nodelet is ready/.test(r.msg))).toBe(false);
    a.kill('SIGTERM');
    expect((await a.exited).code).toBe(0);
    await b.waitForMsg(/nodelet is ready/);
    expect(flockFree(lock)).toBe(false);
  });

  it('a waiter child killed by a signal (systemd signals the whole cgroup on stop) is neither a failure nor the end of the wait', async () => {
    const { dir, lock } = lockDir();
    const { spawn, execFileSync } = await import('node:child_process');
    const holder = spawn('flock', ['-o', lock, 'sleep', '30'], { stdio: 'ignore' });
    await eventually(() => !flockFree(lock));
    const a = await nodelet(dir, lock);
    await a.waitForMsg(/waiting for lock file/);
    // The child that waits: flock(1) (exec'd by setpriv), a direct child of nodelet.
    const waiter = await eventually(() => {
      const pids = execFileSync('pgrep', ['-P', String(a.pid), '-x', 'flock'], { encoding: 'utf8' }).trim();
      return pids ? Number(pids.split('\n')[0]) : undefined;
    });
    process.kill(waiter, 'SIGTERM');
    // nodelet keeps waiting (a new waiter), and takes the lock when it is free.
    const next = await eventually(() => {
      try {
        const p = Number(execFileSync('pgrep', ['-P', String(a.pid), '-x', 'flock'], { encoding: 'utf8' }).trim().split('\n')[0]);
        return p && p !== waiter ? p : undefined;
      } catch {
        return undefined;
      }
    });
    expect(next).not.toBe(waiter);
    expect(a.records.filter((r) => r.level === 'error')).toEqual([]);
    holder.kill('SIGKILL');
    await a.waitForMsg(/nodelet is ready/);
    // Stopped while it waits, with its waiter signalled at the same moment: exit 0.
    const b = await nodelet(dir, lock);
    await b.waitForMsg(/waiting for lock file/);
    const bWaiter = await eventually(() => {
      try {
        return Number(execFileSync('pgrep', ['-P', String(b.pid), '-x', 'flock'], { encoding: 'utf8' }).trim().split('\n')[0]) || undefined;
      } catch {
        return undefined;
      }
    });
    process.kill(bWaiter, 'SIGTERM');
    b.kill('SIGTERM');
    expect(await b.exited).toEqual({ code: 0, signal: null });
    a.kill('SIGTERM');
    expect((await a.exited).code).toBe(0);
  });

  it('waits for a lock held by util-linux flock (kubelet-compatible semantics)', async () => {
    const { dir, lock } = lockDir();
    const { spawn } = await import('node:child_process');
    const holder = spawn('flock', ['-o', lock, 'sleep', '30'], { stdio: 'ignore' });
    await eventually(() => !flockFree(lock));
    const a = await nodelet(dir, lock);
    await a.waitForMsg(/waiting for lock file/);
    // -o: the lock is held by flock itself, not inherited by sleep, so killing flock frees it.
    holder.kill('SIGKILL');
    await a.waitForMsg(/nodelet is ready/);
  });

  it('--exit-on-lock-contention: the holder exits 0 when a successor waits, and the successor takes over', async () => {
    const { dir, lock, a } = await readyHolder(['--exit-on-lock-contention']);
    const b = await nodelet(dir, lock);
    const { code } = await a.exited;
    expect(code).toBe(0);
    expect(a.records.some((r) => /lock contention/.test(r.msg))).toBe(true);
    await b.waitForMsg(/nodelet is ready/);
  });

  it('--exit-on-lock-contention: a process that merely opens the lock file makes the holder exit 0 (inotify IN_OPEN, as the kubelet)', async () => {
    const { lock, a } = await readyHolder(['--exit-on-lock-contention']);
    // Reading our own /proc/locks or stat-ing the file is not contention.
    await new Promise((r) => setTimeout(r, 500));
    expect(a.child.exitCode).toBeNull();
    fs.closeSync(fs.openSync(lock, 'r'));
    expect((await a.exited).code).toBe(0);
    expect(a.records.find((r) => /lock contention/.test(r.msg))!.msg).toContain(`another process opened lock file ${lock}`);
    expect(flockFree(lock)).toBe(true);
  });

  it('--exit-on-lock-contention without inotifywait: a waiting successor is still seen in /proc/locks', async () => {
    const { dir, lock } = lockDir();
    // A PATH with setpriv and flock but no inotifywait.
    const bin = path.join(dir, 'bin');
    fs.mkdirSync(bin);
    for (const tool of ['setpriv', 'flock']) fs.symlinkSync(spawnSync('sh', ['-c', `command -v ${tool}`]).stdout.toString().trim(), path.join(bin, tool));
    const port = String(await freePort());
    const a = startNodelet(['--root-dir', path.join(dir, 'root'), '--lock-file', lock, '--healthz-port', '0', '--read-only-port', '0', '--port', port, '--exit-on-lock-contention'], { env: { PATH: bin } });
    started.push(a);
    await a.waitForMsg(/nodelet is ready/);
    expect(a.records.some((r) => /inotifywait \(inotify-tools\) is not installed/.test(r.msg))).toBe(true);
    fs.closeSync(fs.openSync(lock, 'r'));
    await new Promise((r) => setTimeout(r, 600));
    expect(a.child.exitCode).toBeNull();
    const b = await nodelet(dir, lock);
    expect((await a.exited).code).toBe(0);
    expect(a.records.find((r) => /^lock contention: /.test(r.msg))!.msg).toMatch(/is waiting for lock file/);
    await b.waitForMsg(/nodelet is ready/);
  });

  it('two agents with different lock paths do not see each other', async () => {
    const dir = tempDir();
    // Each its own root dir: the root dir's files are one agent's (its fixed temp names are
    // cleaned at start), so two agents sharing one race on them, which is what the lock is for.
    const a = await nodelet(dir, path.join(dir, 'a.lock'));
    const b = await nodelet(tempDir(), path.join(dir, 'b.lock'));
    await Promise.all([a.waitForMsg(/nodelet is ready/), b.waitForMsg(/nodelet is ready/)]);
  });

  it('--exit-on-lock-contention without --lock-file is an error', async () => {
    const dir = tempDir();
    const r = await runNodelet(['--root-dir', path.join(dir, 'root'), '--exit-on-lock-contention', '--healthz-port', '0']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('--exit-on-lock-contention requires --lock-file');
    expect(fs.existsSync(path.join(dir, 'root'))).toBe(false);
  });

  it('SIGTERM stops it with exit 0 and releases the lock', async () => {
    const { lock, a } = await readyHolder();
    const t0 = Date.now();
    a.kill('SIGTERM');
    expect((await a.exited).code).toBe(0);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(flockFree(lock)).toBe(true);
    expect(a.records.some((r) => r.msg === 'nodelet stopped')).toBe(true);
  });
});
