/**
 * `subPath` without ever leaving the volume (the kubelet's safe subpath, against the
 * CVE-2017-1002101 class): a container that can write into a volume can plant a symbolic
 * link there at any time, and a host path built by joining strings would follow it onto
 * the host.
 *
 * So the subPath is walked from the volume root one component at a time, each opened
 * relative to its opened parent (`/proc/self/fd/<parent>/<name>`, Node's stand-in for
 * openat) with O_NOFOLLOW|O_PATH and checked with fstat: a link anywhere is refused, a
 * missing directory is created relative to its parent and opened the same way. The
 * final descriptor is what gets mounted: `mount --bind /proc/<pid>/fd/<n>` binds the
 * very inode that was checked (no path is resolved again) onto a target nodelet owns,
 * `<root-dir>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>`, and that target
 * is the host path the runtime gets.
 *
 * Those binds live as long as the pod: `unmountUnder` takes them down before the pod
 * directory goes, and `removeTree` never removes across a mount point (a recursive
 * delete through a live bind would delete the host files it shows).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { NodeletError, errorMessage } from '../../errors.js';
import { ifExists } from '../../system/fs-util.js';

const REASON = { reason: 'CreateContainerConfigError' } as const;
/** O_PATH (Linux): a descriptor that names an inode without opening it for IO; Node has no constant for it. */
const O_PATH = 0o10000000;
const OPEN_NOFOLLOW = O_PATH | fs.constants.O_NOFOLLOW;

/** The host's mount table and the two mount operations subpaths need (the IO edge; tests fake it). */
export interface Mounter {
  /** Bind-mounts `source` (taken as is, never canonicalized) onto `target`. */
  bind(source: string, target: string): Promise<void>;
  /** Unmounts `target`; lazily when it is busy. */
  unmount(target: string): Promise<void>;
  /** Every mount point of nodelet's mount namespace, as absolute paths. */
  mountPoints(): Promise<string[]>;
  /**
   * Mounts a tmpfs on `target` (mode 0777), of at most `sizeBytes` when given (else the
   * kernel's default, half of RAM), with MEMORY_VOLUME_SOURCE as its source.
   */
  tmpfs?(target: string, sizeBytes?: number): Promise<void>;
  /** The mount points of the tmpfs mounts `tmpfs` made (their source is MEMORY_VOLUME_SOURCE). */
  memoryVolumes?(): Promise<string[]>;
}

/** The source of the tmpfs mounts nodelet makes for Memory emptyDirs: how they are told from a mount a container made. */
export const MEMORY_VOLUME_SOURCE = 'nodelet-memory-volume';

/** The mount points of a mountinfo text whose filesystem is a tmpfs of source `source`. */
export function tmpfsMountsOf(text: string, source: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n')) {
    const [head, tail] = line.split(' - ');
    const f = head?.split(' ') ?? [];
    const t = tail?.split(' ') ?? [];
    if (f.length < 5 || t[0] !== 'tmpfs' || t[1] !== source) continue;
    out.push(f[4]!.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8))));
  }
  return out;
}

/** The mount points of a `/proc/<pid>/mountinfo` text (field 5, octal escapes decoded). */
export function parseMountInfo(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    if (f.length < 5 || !f[4]) continue;
    out.push(f[4].replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8))));
  }
  return out;
}

function run(cmd: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    // Never a shell: paths go to the program as arguments.
    execFile(cmd, args, { timeout: 30_000 }, (err, _stdout, stderr) => {
      if (!err) return resolve();
      const why = String(stderr).trim() || errorMessage(err);
      reject(new NodeletError('INTERNAL', `${cmd} ${args.join(' ')}: ${why}`, {}, { cause: err }));
    });
  });
}

/** util-linux mount/umount and /proc/self/mountinfo. */
export const hostMounter: Mounter = {
  // --no-canonicalize: mount must not resolve /proc/<pid>/fd/<n> back into a path string.
  bind: (source, target) => run('mount', ['--no-canonicalize', '--bind', source, target]),
  async unmount(target) {
    try {
      await run('umount', [target]);
    } catch {
      await run('umount', ['--lazy', target]);
    }
  },
  mountPoints: async () => parseMountInfo(await fsp.readFile('/proc/self/mountinfo', 'utf8')),
  tmpfs: (target, sizeBytes) => run('mount', ['--no-canonicalize', '-t', 'tmpfs', '-o', `mode=0777${sizeBytes !== undefined ? `,size=${sizeBytes}` : ''}`, MEMORY_VOLUME_SOURCE, target]),
  memoryVolumes: async () => tmpfsMountsOf(await fsp.readFile('/proc/self/mountinfo', 'utf8'), MEMORY_VOLUME_SOURCE),
};

/**
 * The components of a subPath, or why it cannot be one: relative, and no empty, `.` or
 * `..` component (a path is never cleaned into something else), no NUL. Pure.
 */
export function subPathComponents(subPath: string): string[] {
  const fail = (why: string) => new NodeletError('INVALID_ARGUMENT', why, REASON);
  if (subPath.startsWith('/')) throw fail('must be a relative path');
  if (subPath.includes('\0')) throw fail('must not contain a NUL character');
  const parts = subPath.split('/');
  for (const p of parts) {
    if (p === '') throw fail('must not contain an empty path element ("//" or a trailing "/")');
    if (p === '.' || p === '..') throw fail(`must not contain a "${p}" element`);
  }
  return parts;
}

/** `<podDir>/volume-subpaths/<volume>/<container>/<index>`: the kubelet's layout. Names must be checked by the caller. */
export function subPathTarget(podDir: string, volume: string, container: string, index: number): string {
  return path.join(podDir, 'volume-subpaths', volume, container, String(index));
}

function under(root: string, p: string): boolean {
  return p === root || p.startsWith(root.endsWith('/') ? root : `${root}/`);
}

/**
 * `p` with its parent's real path (as mountinfo names it), its last element kept as is:
 * a link there is never followed. Undefined when the parent does not exist.
 */
async function realParentJoin(p: string): Promise<string | undefined> {
  try {
    return path.join(await fsp.realpath(path.dirname(path.resolve(p))), path.basename(p));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

export interface BindSubPathOptions {
  /** The volume's directory on the host (nodelet's emptyDir, or the hostPath the pod names). */
  volumeRoot: string;
  subPath: string;
  /** The directory or file nodelet owns where the subPath is bound (see subPathTarget). */
  target: string;
  mounter: Mounter;
  /** Names the mount in errors: `volumeMount "v" of container c`. */
  what: string;
}

/**
 * Resolves `subPath` inside `volumeRoot` without following any link, creates what is
 * missing as directories (0755), and binds the result onto `target`, replacing a stale
 * bind there. Throws with reason CreateContainerConfigError naming the mount and the
 * subPath when a component is a link or not a directory.
 */
export async function bindSubPath(o: BindSubPathOptions): Promise<void> {
  const fail = (why: string, cause?: unknown) =>
    new NodeletError('INVALID_ARGUMENT', `${o.what}: subPath ${JSON.stringify(o.subPath)} ${why}`, REASON, cause === undefined ? undefined : { cause });
  let parts: string[];
  try {
    parts = subPathComponents(o.subPath);
  } catch (err) {
    throw fail(errorMessage(err));
  }
  // The previous bind goes first, whatever comes next: a refused subPath leaves nothing bound.
  const target = await unmountTarget(o.target, o.mounter);
  const handles: fsp.FileHandle[] = [];
  try {
    let cur: fsp.FileHandle;
    try {
      // The volume root itself is nodelet's directory or the hostPath the pod names: followed as given.
      cur = await fsp.open(o.volumeRoot, O_PATH | fs.constants.O_DIRECTORY);
    } catch (err) {
      throw fail(`cannot be resolved: the volume's directory ${o.volumeRoot} cannot be opened: ${errorMessage(err)}`, err);
    }
    handles.push(cur);
    let isDir = true;
    for (let i = 0; i < parts.length; i++) {
      const name = parts[i]!;
      const shown = JSON.stringify(parts.slice(0, i + 1).join('/'));
      const child = `/proc/self/fd/${cur.fd}/${name}`;
      let next: fsp.FileHandle | undefined;
      for (let attempt = 0; !next; attempt++) {
        try {
          next = await fsp.open(child, OPEN_NOFOLLOW);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code !== 'ENOENT' || attempt > 0) throw fail(`cannot be resolved at ${shown}: ${code ?? errorMessage(err)}`, err);
          // As the kubelet: a missing subPath is created, as directories, relative to the opened parent
          // (mkdir never follows a link in its last component; EEXIST is a race, opened below and checked).
          try {
            await fsp.mkdir(child, { mode: 0o755 });
          } catch (mkErr) {
            if ((mkErr as NodeJS.ErrnoException).code !== 'EEXIST') throw fail(`cannot be created at ${shown}: ${errorMessage(mkErr)}`, mkErr);
          }
        }
      }
      handles.push(next);
      const st = await next.stat();
      if (st.isSymbolicLink()) throw fail(`is refused: ${shown} is a symbolic link, and nodelet never follows a link in a subPath (it could lead out of the volume)`);
      isDir = st.isDirectory();
      if (!isDir && i < parts.length - 1) throw fail(`is refused: ${shown} is not a directory`);
      cur = next;
    }
    await prepareTarget(target, isDir);
    // The checked inode itself, by its descriptor: nothing is resolved by name again.
    await o.mounter.bind(`/proc/${process.pid}/fd/${cur.fd}`, target).catch((err) => {
      throw fail(`cannot be mounted: ${errorMessage(err)}`, err);
    });
  } finally {
    for (const h of handles.reverse()) await h.close().catch(() => undefined);
  }
}

/** Creates the target's parent, unmounts every bind on the target; returns its real path. */
async function unmountTarget(target: string, mounter: Mounter): Promise<string> {
  await fsp.mkdir(path.dirname(target), { recursive: true, mode: 0o750 });
  const real = (await realParentJoin(target))!;
  // Binds can stack (a nodelet killed between mount and use, then restarted): take them all down.
  for (let i = 0; (await mounter.mountPoints()).includes(real); i++) {
    if (i >= 8) throw new NodeletError('INTERNAL', `cannot unmount the stale subPath bind at ${target}`, REASON);
    await mounter.unmount(real);
  }
  return real;
}

/** Makes the (unmounted) `real` target an empty directory or file, as what it will show. */
async function prepareTarget(real: string, dir: boolean): Promise<void> {
  let st: fs.Stats | undefined;
  try {
    st = await fsp.lstat(real);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  if (st && st.isDirectory() !== dir) {
    if (st.isDirectory()) await fsp.rmdir(real);
    else await fsp.unlink(real);
    st = undefined;
  }
  if (!st) {
    if (dir) await fsp.mkdir(real, { mode: 0o750 });
    else await (await fsp.open(real, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o640)).close();
  }
}

/** Unmounts every mount at or below `dir` (deepest first), or throws naming what stays. */
export async function unmountUnder(dir: string, mounter: Mounter): Promise<void> {
  const real = await realParentJoin(dir);
  if (!real) return;
  const errors: string[] = [];
  for (let round = 0; round < 8; round++) {
    const points = (await mounter.mountPoints()).filter((m) => under(real, m)).sort((a, b) => b.length - a.length);
    if (!points.length) return;
    errors.length = 0;
    for (const m of points) await mounter.unmount(m).catch((err) => errors.push(errorMessage(err)));
  }
  throw new NodeletError('INTERNAL', `cannot unmount what is mounted under ${dir}${errors.length ? `: ${errors.join('; ')}` : ''}`);
}

/**
 * Removes `dir` and everything in it, never across a mount point: it refuses when a mount
 * is at or below it (mountinfo), and a directory entry on another device stops the walk
 * (st_dev). Links are removed, never followed. A missing `dir` is no error.
 */
export async function removeTree(dir: string, mounter: Mounter): Promise<void> {
  const real = await realParentJoin(dir);
  if (!real) return;
  const mounted = (await mounter.mountPoints()).filter((m) => under(real, m));
  if (mounted.length) throw new NodeletError('INTERNAL', `will not remove ${dir}: ${mounted.join(', ')} ${mounted.length === 1 ? 'is a mount point' : 'are mount points'}`);
  const st = await ifExists(fsp.lstat(real));
  if (st) await removeWalk(real, st.dev);
}

async function removeWalk(p: string, dev: number): Promise<void> {
  const st = await ifExists(fsp.lstat(p));
  if (!st) return;
  if (st.dev !== dev) throw new NodeletError('INTERNAL', `will not remove ${p}: it is on another filesystem (a mount point)`);
  if (st.isDirectory()) {
    for (const name of await fsp.readdir(p)) await removeWalk(path.join(p, name), dev);
    await fsp.rmdir(p).catch((err) => {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    });
  } else {
    await fsp.unlink(p).catch((err) => {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    });
  }
}
