/**
 * The node's lock file, with flock(2) semantics exactly as the kubelet takes it:
 * open(O_CREAT|O_RDWR|O_CLOEXEC, 0600) then an exclusive flock held for the life of the
 * process. The kernel releases it when the process dies, even by SIGKILL, so there is
 * never a stale lock; util-linux `flock` and a kubelet on the same path see it.
 *
 * fs-ext is a native addon (loaded lazily: only the daemon needs it); nodelet itself
 * only ever calls the non-blocking flock. Waiting is done by a util-linux `flock` child
 * (see acquireLock), which is visible in /proc/locks as a waiter: that is how a holder
 * started with --exit-on-lock-contention notices a successor (see watchContention).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { realClock } from '../clock.js';
import { NodeletError } from '../errors.js';
import { Loop } from '../loop.js';
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
 * Aborting `signal` while waiting kills the waiting child and rejects with CANCELLED.
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
  // The first turn logs at once, then every relogMs while waiting.
  const relog = new Loop({ name: 'lock-wait-log', turn: async () => logWait(), delayMs: () => opts.relogMs ?? 30_000, clock: realClock });
  relog.start();
  try {
    // Wait in a child (util-linux flock on the same path), never on a libuv worker
    // thread: a thread blocked in flock(2) cannot be interrupted, and Node joins its
    // threadpool at exit, so `systemctl stop` of a waiting nodelet would hang until the
    // holder let go. The child shows in /proc/locks as the waiter (a holder with
    // --exit-on-lock-contention sees it); once it gets the lock it exits at once and we
    // race for it with a non-blocking flock, looping if a third process won.
    for (;;) {
      if (!(await waitInChild(path, opts.signal))) {
        // The waiter was killed by a signal, most likely the one stopping us too (systemd
        // signals the whole cgroup, and the child's exit may be seen before our own
        // SIGTERM): wait a moment for that abort, or else wait again.
        await abortableSleep(100, opts.signal, path);
        continue;
      }
      try {
        ext.flockSync(fd, 'exnb');
        break;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'EAGAIN' && code !== 'EWOULDBLOCK') {
          throw new NodeletError('INTERNAL', `cannot lock ${path}: ${(err as Error).message}`, { path }, { cause: err });
        }
      }
    }
  } catch (err) {
    fs.closeSync(fd);
    throw err;
  } finally {
    await relog.stop();
  }
  opts.logger.info({ lockFile: path }, 'acquired lock file');
  return makeHandle(path, fd, inode);
}

function abortableSleep(ms: number, signal: AbortSignal | undefined, path: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const cancelled = () => new NodeletError('CANCELLED', `gave up waiting for lock file ${path}`);
    if (signal?.aborted) return reject(cancelled());
    const onAbort = () => {
      clearTimeout(t);
      reject(cancelled());
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Resolves true when `flock <path> true` could take (and at once dropped) the lock, false
 * when the child was killed by a signal nodelet did not send; killable through `signal`.
 */
function waitInChild(path: string, signal: AbortSignal | undefined): Promise<boolean> {
  return new Promise<boolean>((resolve, reject) => {
    const onAbort = () => {
      child.kill('SIGKILL');
      reject(new NodeletError('CANCELLED', `gave up waiting for lock file ${path}`));
    };
    if (signal?.aborted) return reject(new NodeletError('CANCELLED', `gave up waiting for lock file ${path}`));
    const child = spawnTied('flock', ['--exclusive', path, 'true']);
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    signal?.addEventListener('abort', onAbort, { once: true });
    child.on('error', (err) => {
      signal?.removeEventListener('abort', onAbort);
      reject(new NodeletError('INTERNAL', `cannot wait for lock file ${path}: flock(1): ${err.message}`, { path }, { cause: err }));
    });
    child.on('exit', (code, sig) => {
      signal?.removeEventListener('abort', onAbort);
      if (signal?.aborted) return;
      if (code === 0) resolve(true);
      else if (sig) resolve(false);
      else reject(new NodeletError('INTERNAL', `cannot wait for lock file ${path}: flock(1) exited ${code ?? sig}: ${stderr.trim()}`, { path }));
    });
  });
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

/** Children nodelet starts for the lock die with it (prctl PR_SET_PDEATHSIG via util-linux setpriv), even on SIGKILL. */
function spawnTied(cmd: string, args: string[]) {
  return spawn('setpriv', ['--pdeathsig', 'KILL', '--', cmd, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
}

export interface ContentionWatch {
  /** Resolves once the watch is in place (the inotify watch established, or known unavailable). */
  readonly ready: Promise<void>;
  stop(): void;
}

/**
 * --exit-on-lock-contention: calls `onContention(reason)` once when another process opens
 * the lock file, waits for the lock, or deletes or replaces the file.
 *
 * As the kubelet: an inotify watch for IN_OPEN | IN_DELETE_SELF | IN_MOVE_SELF on the file
 * (Node's fs.watch cannot ask for IN_OPEN, so it is `inotifywait` from inotify-tools, a child
 * tied to nodelet's life). nodelet itself never opens the file again while it holds it.
 * Always, and the only way when inotifywait is not installed: /proc/locks polled for a
 * process waiting on our inode ("->" entries), and the path checked for our inode.
 */
export function watchContention(handle: LockHandle, onContention: (reason: string) => void, opts: { logger: Logger; intervalMs?: number }): ContentionWatch {
  let done = false;
  const fire = (reason: string) => {
    if (done) return;
    done = true;
    void poll.stop();
    child?.kill('SIGKILL');
    onContention(reason);
  };
  const poll = new Loop({
    name: 'lock-contention',
    turn: async () => {
      const waiter = readProcLocks().find((e) => e.inode === handle.inode && e.waiting && e.pid !== process.pid);
      if (waiter) fire(`${describePid(waiter.pid)} is waiting for lock file ${handle.path}`);
      else if (!handle.stillOwnsPath()) fire(`lock file ${handle.path} was deleted or replaced`);
    },
    delayMs: () => opts.intervalMs ?? 200,
    clock: realClock,
  });
  poll.start();

  let child: ReturnType<typeof spawnTied> | undefined;
  const ready = new Promise<void>((resolve) => {
    const fallback = (why: string) => {
      opts.logger.info({ lockFile: handle.path }, `${why}: lock contention is detected from waiters in /proc/locks only, not from a mere open of ${handle.path}`);
      resolve();
    };
    child = spawnTied('inotifywait', ['-m', '-e', 'open', '-e', 'delete_self', '-e', 'move_self', '--format', '%e', handle.path]);
    let err = '';
    child.on('error', (e) => fallback(`cannot run inotifywait (${e.message})`));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      err += d;
      if (err.includes('Watches established')) resolve();
    });
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      const event = d.trim().split('\n')[0];
      fire(event?.includes('OPEN') ? `another process opened lock file ${handle.path}` : `lock file ${handle.path} was deleted or moved (${event})`);
    });
    child.on('exit', (code) => {
      if (done) return;
      // 127 from setpriv: inotifywait is not installed.
      fallback(code === 127 ? 'inotifywait (inotify-tools) is not installed' : `inotifywait exited (${code}): ${err.trim().split('\n').pop() ?? ''}`);
    });
  });
  return {
    ready,
    stop() {
      done = true;
      void poll.stop();
      child?.kill('SIGKILL');
    },
  };
}
