/**
 * The one way nodelet reads a file that a configuration, a manifest or a request names.
 * Every such file is treated as hostile: it may be a FIFO (an `open(2)` for reading blocks
 * a libuv thread until a writer comes, which may be never; four of them and nodelet's file
 * IO stops for good), a device (`/dev/zero` never ends), a symlink out of the directory it
 * must stay in (a secret read and echoed back in a status), or simply huge.
 *
 * Contract of readBoundedFile / readBoundedFileSync:
 * 1. The path is opened with `O_PATH` (Linux): this opens nothing for IO, so it has no
 *    side effect on a FIFO or device and never blocks; symlinks are followed unless
 *    `noFollow`. A symlink loop fails here (ELOOP).
 * 2. `fstat` of that descriptor: anything but a regular file is refused at once, never
 *    read; a regular file over `maxBytes` is refused by its size, never read.
 * 3. With `confineTo`, the descriptor's real path (`/proc/self/fd/<n>`, i.e. where every
 *    symlink and `..` led) must lie inside the real path of that directory.
 * 4. Only then is the same file opened for reading, through `/proc/self/fd/<n>`, with
 *    `O_RDONLY|O_NONBLOCK|O_NOCTTY` (and O_CLOEXEC, which libuv adds), and read up to
 *    `maxBytes + 1` bytes: a file that grew past the limit since its fstat is refused too.
 * Without /proc (or O_PATH), it falls back to opening the path itself with O_NONBLOCK,
 * checking that it is still the inode step 2 saw.
 *
 * Errors are NodeletErrors naming the file and what it is (`seccomp profile`,
 * `static pod manifest`, ...): NOT_FOUND when it does not exist, INVALID_ARGUMENT
 * otherwise; `details` carries `file`, `what`, `reason` (the message without the file),
 * and `errno`, `size`, `limit` when they apply.
 *
 * Limits (FILE_LIMITS), all in one place:
 * - static pod manifest 1.5 MiB: etcd's default request limit (`--max-request-bytes`), so
 *   no API object, hence no Pod, can be larger;
 * - KubeletConfiguration, drop-in, kubeconfig 1 MiB: real ones are a few KiB (a
 *   kubeconfig with three embedded certificates ~10 KiB);
 * - PEM files (certificates, keys, CA bundles) and token files 1 MiB: the largest real
 *   one is a system CA bundle (~220 KiB);
 * - seccomp profile 1 MiB: the runtimes' default profiles are ~25 KiB.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { NodeletError } from '../errors.js';

const MiB = 1024 * 1024;

export const FILE_LIMITS = {
  staticPodManifest: 1.5 * MiB,
  configFile: MiB,
  kubeconfig: MiB,
  pem: MiB,
  token: MiB,
  seccompProfile: MiB,
} as const;

/** Linux's O_PATH (not in Node's fs.constants). */
const O_PATH = 0o10000000;
const { O_RDONLY, O_NONBLOCK, O_NOFOLLOW } = fs.constants;
const O_NOCTTY = fs.constants.O_NOCTTY ?? 0;
const READ_FLAGS = O_RDONLY | O_NONBLOCK | O_NOCTTY;

export interface SafeOpenOptions {
  /** What the file is, for messages: `seccomp profile`, `static pod manifest`, ... */
  what: string;
  /** A directory the file must stay inside (after every symlink and `..`). */
  confineTo?: string;
  /** Refuse a symlink as the last path element instead of following it. */
  noFollow?: boolean;
}

export interface ReadBoundedOptions extends SafeOpenOptions {
  /** Largest size accepted, in bytes. */
  maxBytes: number;
}

/** `1.5 MiB`, `512 KiB`, `12 bytes`: sizes in messages. */
export function formatBytes(n: number): string {
  if (n >= MiB) return `${+(n / MiB).toFixed(1)} MiB`;
  if (n >= 1024) return `${+(n / 1024).toFixed(1)} KiB`;
  return `${n} bytes`;
}

/** What a non-regular file is, in words. */
export function fileKind(st: fs.Stats): string {
  if (st.isFile()) return 'a regular file';
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSymbolicLink()) return 'a symbolic link';
  return 'not a regular file';
}

function refused(file: string, what: string, reason: string, extra: Record<string, unknown> = {}, code: 'INVALID_ARGUMENT' | 'NOT_FOUND' = 'INVALID_ARGUMENT', cause?: unknown): NodeletError {
  return new NodeletError(code, `${what} ${file} ${reason}`, { file, what, reason, ...extra }, cause !== undefined ? { cause } : undefined);
}

/**
 * A read failure without the file's name, for callers that name it themselves:
 * `ENOENT: does not exist`, `is a FIFO, not a regular file: ...`.
 */
export function readFailure(err: unknown): string {
  if (!(err instanceof NodeletError)) return err instanceof Error ? err.message : String(err);
  const { errno, reason } = err.details as { errno?: string; reason?: string };
  if (reason === undefined) return err.message;
  return errno ? `${errno}: ${reason}` : reason;
}

/** An errno from open/read/stat, as a NodeletError naming the file. */
export function ioError(file: string, what: string, err: unknown): NodeletError {
  if (err instanceof NodeletError) return err;
  const errno = (err as NodeJS.ErrnoException).code ?? 'EIO';
  const reason =
    errno === 'ENOENT'
      ? 'does not exist'
      : errno === 'ELOOP'
        ? 'cannot be opened: too many levels of symbolic links (a symlink loop?)'
        : errno === 'EACCES' || errno === 'EPERM'
          ? 'is not readable (permission denied)'
          : errno === 'ENOTDIR'
            ? 'cannot be opened: a path element is not a directory'
            : errno === 'EISDIR'
              ? 'is a directory, expected a file'
              : errno === 'ENAMETOOLONG'
                ? 'cannot be opened: the name is too long'
                : `cannot be read (${errno})`;
  return refused(file, what, reason, { errno }, errno === 'ENOENT' ? 'NOT_FOUND' : 'INVALID_ARGUMENT', err);
}

function checkStat(file: string, what: string, st: fs.Stats, maxBytes: number | undefined): void {
  if (!st.isFile()) {
    if (st.isDirectory()) throw refused(file, what, 'is a directory, expected a file', { kind: 'a directory' });
    throw refused(file, what, `is ${fileKind(st)}, not a regular file: refused without reading it`, { kind: fileKind(st) });
  }
  if (maxBytes !== undefined && st.size > maxBytes) {
    throw refused(file, what, `is ${formatBytes(st.size)} (${st.size} bytes), over the ${formatBytes(maxBytes)} limit for a ${what}`, { size: st.size, limit: maxBytes });
  }
}

function inside(dir: string, real: string): boolean {
  return real.startsWith(dir.endsWith(path.sep) ? dir : dir + path.sep);
}

function confinementError(file: string, what: string, dir: string): NodeletError {
  return refused(file, what, `leaves the directory ${dir} (a symbolic link or .. pointing outside it): refused`, { confineTo: dir });
}

function sameInode(a: fs.Stats, b: fs.Stats): boolean {
  return a.dev === b.dev && a.ino === b.ino;
}

/**
 * Opens a regular file for reading under the contract above (steps 1-4, without reading).
 * The caller reads and closes the returned handle. Used as is for streamed files
 * (checkpoint archives); readBoundedFile for the rest.
 */
export async function openRegularFile(file: string, o: SafeOpenOptions & { maxBytes?: number }): Promise<{ handle: fsp.FileHandle; stats: fs.Stats }> {
  const nofollow = o.noFollow ? O_NOFOLLOW : 0;
  let pathFd: fsp.FileHandle | undefined;
  try {
    pathFd = await fsp.open(file, O_PATH | nofollow);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EINVAL') throw ioError(file, o.what, err);
    // No O_PATH (not Linux): the fallback below.
  }
  try {
    let st: fs.Stats;
    try {
      st = pathFd ? await pathFd.stat() : await (o.noFollow ? fsp.lstat(file) : fsp.stat(file));
    } catch (err) {
      throw ioError(file, o.what, err);
    }
    checkStat(file, o.what, st, o.maxBytes);
    const procPath = pathFd ? `/proc/self/fd/${pathFd.fd}` : undefined;
    if (o.confineTo !== undefined) {
      let dir: string;
      let real: string;
      try {
        dir = await fsp.realpath(o.confineTo);
      } catch (err) {
        throw refused(file, o.what, `cannot be checked: its directory ${o.confineTo} cannot be resolved (${(err as NodeJS.ErrnoException).code ?? 'error'})`, { confineTo: o.confineTo });
      }
      try {
        real = procPath ? await fsp.readlink(procPath) : await fsp.realpath(file);
      } catch {
        real = await fsp.realpath(file).catch(() => '');
      }
      if (!inside(dir, real)) throw confinementError(file, o.what, o.confineTo);
    }
    let handle: fsp.FileHandle;
    try {
      handle = await fsp.open(procPath ?? file, READ_FLAGS | (procPath ? 0 : nofollow));
    } catch (err) {
      if (procPath && (err as NodeJS.ErrnoException).code === 'ENOENT') {
        // No /proc mounted: open the path itself, then make sure it is what was checked.
        try {
          handle = await fsp.open(file, READ_FLAGS | nofollow);
        } catch (err2) {
          throw ioError(file, o.what, err2);
        }
      } else throw ioError(file, o.what, err);
    }
    try {
      const again = await handle.stat();
      if (!sameInode(st, again) || !again.isFile()) throw refused(file, o.what, 'changed while it was being opened: refused');
    } catch (err) {
      await handle.close();
      throw ioError(file, o.what, err);
    }
    return { handle, stats: st };
  } finally {
    await pathFd?.close();
  }
}

/** Reads a file under the contract above; refuses what is not a regular file within `maxBytes`. */
export async function readBoundedFile(file: string, o: ReadBoundedOptions): Promise<Buffer> {
  const { handle, stats } = await openRegularFile(file, o);
  try {
    // Sized from fstat, read to EOF: files of /proc and /sys say 0 or 4096 and hold more or less.
    const chunks: Buffer[] = [];
    let total = 0;
    const chunkSize = Math.min(Math.max(stats.size, 4096), 256 * 1024, o.maxBytes + 1);
    for (;;) {
      const buf = Buffer.allocUnsafe(Math.min(chunkSize, o.maxBytes + 1 - total));
      let n: number;
      try {
        ({ bytesRead: n } = await handle.read(buf, 0, buf.length, null));
      } catch (err) {
        throw ioError(file, o.what, err);
      }
      if (n === 0) break;
      chunks.push(n === buf.length ? buf : buf.subarray(0, n));
      total += n;
      if (total > o.maxBytes) throw refused(file, o.what, `grew past the ${formatBytes(o.maxBytes)} limit for a ${o.what} while being read`, { size: total, limit: o.maxBytes });
    }
    return Buffer.concat(chunks, total);
  } finally {
    await handle.close();
  }
}

/** readBoundedFile as UTF-8 text. */
export async function readBoundedText(file: string, o: ReadBoundedOptions): Promise<string> {
  return (await readBoundedFile(file, o)).toString('utf8');
}

/**
 * The synchronous twin, for the few places that read at startup in a synchronous API
 * (kubeconfigs): every step is the same, so a FIFO or device is refused without a
 * blocking open, and the read is bounded.
 */
export function readBoundedFileSync(file: string, o: ReadBoundedOptions): Buffer {
  const { fd } = openRegularFileSync(file, o);
  try {
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const buf = Buffer.allocUnsafe(Math.min(64 * 1024, o.maxBytes + 1 - total));
      let n: number;
      try {
        n = fs.readSync(fd, buf, 0, buf.length, null);
      } catch (err) {
        throw ioError(file, o.what, err);
      }
      if (n === 0) break;
      chunks.push(buf.subarray(0, n));
      total += n;
      if (total > o.maxBytes) throw refused(file, o.what, `grew past the ${formatBytes(o.maxBytes)} limit for a ${o.what} while being read`, { size: total, limit: o.maxBytes });
    }
    return Buffer.concat(chunks, total);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * openRegularFile's synchronous twin (steps 1-4, without reading): for startup reads in a
 * synchronous API, and for a few syscalls on a file nodelet's own directory holds, where a
 * thread-pool round trip per call would cost more than the calls (checkpoint archives).
 * The caller reads and closes `fd`.
 */
export function openRegularFileSync(file: string, o: SafeOpenOptions & { maxBytes?: number }): { fd: number; stats: fs.Stats } {
  const nofollow = o.noFollow ? O_NOFOLLOW : 0;
  let pathFd: number | undefined;
  try {
    pathFd = fs.openSync(file, O_PATH | nofollow);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EINVAL') throw ioError(file, o.what, err);
  }
  let fd: number | undefined;
  try {
    let st: fs.Stats;
    try {
      st = pathFd !== undefined ? fs.fstatSync(pathFd) : o.noFollow ? fs.lstatSync(file) : fs.statSync(file);
    } catch (err) {
      throw ioError(file, o.what, err);
    }
    checkStat(file, o.what, st, o.maxBytes);
    const procPath = pathFd !== undefined ? `/proc/self/fd/${pathFd}` : undefined;
    if (o.confineTo !== undefined) {
      let dir: string;
      try {
        dir = fs.realpathSync(o.confineTo);
      } catch (err) {
        throw refused(file, o.what, `cannot be checked: its directory ${o.confineTo} cannot be resolved (${(err as NodeJS.ErrnoException).code ?? 'error'})`, { confineTo: o.confineTo });
      }
      let real = '';
      try {
        real = procPath ? fs.readlinkSync(procPath) : fs.realpathSync(file);
      } catch {
        /* refused below */
      }
      if (!inside(dir, real)) throw confinementError(file, o.what, o.confineTo);
    }
    try {
      fd = fs.openSync(procPath ?? file, READ_FLAGS | (procPath ? 0 : nofollow));
    } catch (err) {
      if (procPath && (err as NodeJS.ErrnoException).code === 'ENOENT') {
        try {
          fd = fs.openSync(file, READ_FLAGS | nofollow);
        } catch (err2) {
          throw ioError(file, o.what, err2);
        }
      } else throw ioError(file, o.what, err);
    }
    const again = fs.fstatSync(fd);
    if (!sameInode(st, again) || !again.isFile()) throw refused(file, o.what, 'changed while it was being opened: refused');
    const opened = fd;
    fd = undefined;
    return { fd: opened, stats: st };
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
    if (pathFd !== undefined) fs.closeSync(pathFd);
  }
}

/** readBoundedFileSync as UTF-8 text. */
export function readBoundedTextSync(file: string, o: ReadBoundedOptions): string {
  return readBoundedFileSync(file, o).toString('utf8');
}
