/**
 * The node's lock file, with flock(2) semantics exactly as the kubelet takes it:
 * open(O_CREAT|O_RDWR|O_CLOEXEC, 0600) then an exclusive flock held for the life of the
 * process. The kernel releases it when the process dies, even by SIGKILL, so there is
 * never a stale lock; util-linux `flock` and a kubelet on the same path see it.
 *
 * fs-ext is a native addon (loaded lazily: only the daemon needs it). A blocking
 * flock runs on a libuv worker thread, which also makes a waiting nodelet visible in
 * /proc/locks as a waiter: that is how a holder started with --exit-on-lock-contention
 * notices a successor (see watchContention).
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { NodeletError } from '../errors.js';
import type { Logger } from '../log.js';

type FsExt = { flock(fd: number, flags: string, cb: (err: NodeJS.ErrnoException | null) => void): void; flockSync(fd: number, flags: string): void };
let fsExt: FsExt | undefined;
function loadFsExt(): FsExt {
  fsExt ??= createRequire(import.meta.url)('fs-ext') as FsExt;
  return fsExt;
}

/** One line of /proc/locks that concerns a FLOCK. */
export interface LockEntry {
  pid: number;
  inode: number;
  /** True for a process blocked waiting for the lock ("->" lines). */
  waiting: boolean;
  access: 'READ' | 'WRITE';
}

/** Parses /proc/locks. Pure: tests feed it text. Non-FLOCK lines (POSIX, OFDLCK) are ignored. */
export function parseProcLocks(text: string): LockEntry[] {
  const out: LockEntry[] = [];
  for (const line of text.split('\n')) {
    // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" or "1: -> FLOCK  ADVISORY  WRITE 99 fd:01:5678 0 EOF"
    const m = /^\d+:\s+(->\s+)?FLOCK\s+\S+\s+(READ|WRITE)\s+(\d+)\s+[0-9a-f]+:[0-9a-f]+:(\d+)\s/.exec(line);
    if (!m) continue;
    out.push({ waiting: m[1] !== undefined, access: m[2] as 'READ' | 'WRITE', pid: Number(m[3]), inode: Number(m[4]) });
  }
  return out;
}

function readProcLocks(): LockEntry[] {
  try {
    return parseProcLocks(fs.readFileSync('/proc/locks', 'utf8'));
  } catch {
    return [];
  }
}

function describePid(pid: number): string {
  try {
    const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
    return cmd ? `pid ${pid} (${cmd.length > 200 ? cmd.slice(0, 200) + '…' : cmd})` : `pid ${pid}`;
  } catch {
    return `pid ${pid}`;
  }
}

export interface LockHandle {
  readonly path: string;
  readonly fd: number;
  readonly inode: number;
  /** True while the lock file at `path` is still the inode we hold (not deleted or replaced). */
  stillOwnsPath(): boolean;
  /** Releases the lock and closes the file. Idempotent. */
  release(): void;
}

// libuv opens every file with O_CLOEXEC, so children never inherit the lock.
function openLockFile(path: string): number {
  try {
    return fs.openSync(path, fs.constants.O_CREAT | fs.constants.O_RDWR, 0o600);
  } catch (err) {
    throw new NodeletError('INTERNAL', `cannot open lock file ${path}: ${(err as Error).message}`, { path }, { cause: err });
  }
}

/**
 * Takes the exclusive lock, waiting as long as another process holds it. While waiting
 * it logs who holds it (from /proc/locks), once at once and then every `relogMs`.
 * Aborting `signal` while waiting rejects with CANCELLED (the worker thread stays blocked
 * in flock until the process exits, which is what a cancelled start does next).
 */
export async function acquireLock(path: string, opts: { logger: Logger; signal?: AbortSignal; relogMs?: number }): Promise<LockHandle> {
  const ext = loadFsExt();
  const fd = openLockFile(path);
  const inode = Number(fs.fstatSync(fd).ino);
  try {
    ext.flockSync(fd, 'exnb');
    opts.logger.info({ lockFile: path }, 'acquired lock file');
    return makeHandle(path, fd, inode);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EAGAIN' && code !== 'EWOULDBLOCK') {
      fs.closeSync(fd);
      throw new NodeletError('INTERNAL', `cannot lock ${path}: ${(err as Error).message}`, { path }, { cause: err });
    }
  }
  const holders = () =>
    readProcLocks()
      .filter((e) => e.inode === inode && !e.waiting && e.pid !== process.pid)
      .map((e) => describePid(e.pid));
  const logWait = () => {
    const h = holders();
    opts.logger.info({ lockFile: path, holders: h }, `waiting for lock file ${path}, held by ${h.length ? h.join(', ') : 'another process'}`);
  };
  logWait();
  const relog = setInterval(logWait, opts.relogMs ?? 30_000);
  relog.unref();
  try {
    await new Promise<void>((resolve, reject) => {
      const onAbort = () => reject(new NodeletError('CANCELLED', `gave up waiting for lock file ${path}`));
      if (opts.signal?.aborted) return onAbort();
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      ext.flock(fd, 'ex', (err) => {
        opts.signal?.removeEventListener('abort', onAbort);
        if (err) reject(new NodeletError('INTERNAL', `cannot lock ${path}: ${err.message}`, { path }, { cause: err }));
        else resolve();
      });
    });
  } finally {
    clearInterval(relog);
  }
  opts.logger.info({ lockFile: path }, 'acquired lock file');
  return makeHandle(path, fd, inode);
}

function makeHandle(path: string, fd: number, inode: number): LockHandle {
  let released = false;
  return {
    path,
    fd,
    inode,
    stillOwnsPath() {
      try {
        return Number(fs.statSync(path).ino) === inode;
      } catch {
        return false;
      }
    },
    release() {
      if (released) return;
      released = true;
      try {
        loadFsExt().flockSync(fd, 'un');
      } finally {
        fs.closeSync(fd);
      }
    },
  };
}

/**
 * --exit-on-lock-contention: calls `onContention(reason)` once when another process
 * waits for our lock (a "->" FLOCK entry on our inode in /proc/locks) or when the lock
 * file is deleted or replaced. The kubelet watches IN_OPEN with inotify; Node's fs.watch
 * cannot ask for IN_OPEN, so nodelet polls /proc/locks instead (every `intervalMs`). The
 * difference, written in the README: a process that only opens the file without asking
 * for the lock does not make nodelet exit; a successor agent always asks for it.
 */
export function watchContention(handle: LockHandle, onContention: (reason: string) => void, intervalMs = 200): { stop(): void } {
  let done = false;
  const timer = setInterval(() => {
    if (done) return;
    const waiter = readProcLocks().find((e) => e.inode === handle.inode && e.waiting && e.pid !== process.pid);
    let reason: string | undefined;
    if (waiter) reason = `${describePid(waiter.pid)} is waiting for lock file ${handle.path}`;
    else if (!handle.stillOwnsPath()) reason = `lock file ${handle.path} was deleted or replaced`;
    if (reason) {
      done = true;
      clearInterval(timer);
      onContention(reason);
    }
  }, intervalMs);
  timer.unref();
  return {
    stop() {
      done = true;
      clearInterval(timer);
    },
  };
}
