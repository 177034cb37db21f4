/**
 * The kubelet's "legacy" container log symlinks, what log shippers (fluentd, fluent-bit,
 * vector, promtail) read: `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`,
 * a symbolic link to the container's live CRI log file (`<podLogsDir>/<ns>_<pod>_<uid>/
 * <container>/<n>.log`). Made right after the container starts (only when its log file
 * exists, so no dangling link is made), removed when the container is removed; the links
 * into a removed pod's log directory are swept with it. The name is cut to 255 bytes
 * (ext4's limit) keeping the `.log`, as the kubelet's logSymlink. The directory is a flag
 * (`--container-log-dir`), `/var/log/containers` by default.
 *
 * Failures are the caller's to log: a link is a convenience for shippers, never a reason
 * to fail a container.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import { readdirOrEmpty } from '../../system/fs-util.js';

/** The kubelet's ContainerLogsDir. */
export const DEFAULT_CONTAINER_LOG_DIR = '/var/log/containers';
const SUFFIX = '.log';
const EXT4_MAX_NAME = 255;

/** `<dir>/<pod>_<namespace>_<container>-<containerId>.log`, the name cut to 255 bytes. Pure. */
export function containerLogSymlink(dir: string, pod: string, namespace: string, container: string, containerId: string): string {
  let name = `${pod}_${namespace}_${container}-${containerId}`;
  // Names are DNS labels/subdomains and hex IDs: one byte per character.
  if (name.length > EXT4_MAX_NAME - SUFFIX.length) name = name.slice(0, EXT4_MAX_NAME - SUFFIX.length);
  return path.join(dir, name + SUFFIX);
}

/** Links `link` to `target` when `target` exists; an old link of the same name (an ID is never reused) is replaced. */
export async function createLogSymlink(link: string, target: string): Promise<boolean> {
  try {
    await fsp.lstat(target);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
  }
  await fsp.mkdir(path.dirname(link), { recursive: true, mode: 0o755 });
  try {
    await fsp.symlink(target, link);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    await fsp.rm(link, { force: true });
    await fsp.symlink(target, link);
  }
  return true;
}

/** Removes the link if it is one (a file planted there by someone else is left alone). */
export async function removeLogSymlink(link: string): Promise<void> {
  try {
    if (!(await fsp.lstat(link)).isSymbolicLink()) return;
    await fsp.rm(link, { force: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/**
 * Removes the links of `dir` that point into the log directory of the pod with this UID
 * (`<podLogsDir>/<ns>_<pod>_<uid>/...`): what is left of a pod whose containers went with
 * their sandbox, or from before a restart. Only symbolic links ending `.log` are read.
 */
export async function removePodLogSymlinks(dir: string, podLogsDir: string, uid: string): Promise<void> {
  const names = await readdirOrEmpty(dir);
  const root = path.resolve(podLogsDir);
  for (const n of names) {
    if (!n.endsWith(SUFFIX)) continue;
    const link = path.join(dir, n);
    let target: string;
    try {
      target = await fsp.readlink(link);
    } catch {
      continue; // not a link, or gone
    }
    const rel = path.relative(root, path.resolve(dir, target));
    const podDir = rel.split(path.sep)[0] ?? '';
    if (!rel.startsWith('..') && podDir.endsWith(`_${uid}`)) await fsp.rm(link, { force: true });
  }
}
