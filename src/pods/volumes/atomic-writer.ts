/**
 * The kubelet's atomic writer (pkg/volume/util/atomic_writer.go), the layout every
 * configMap, secret, downwardAPI and projected volume has, and that programs reading such
 * a volume rely on (they watch `..data` to see an update):
 *
 *   <dir>/..2026_11_27_15_40_00.123456789/   the payload, written in full first
 *   <dir>/..data -> ..2026_11_27_15_40_00.123456789
 *   <dir>/<top-level entry> -> ..data/<top-level entry>   one link per user-visible entry
 *
 * An update writes a new timestamped directory, swaps `..data` with one rename(2) (a
 * reader sees the old set or the new one, never a mix), adds links for new entries,
 * removes those of entries gone, then the old directory. An unchanged payload writes
 * nothing. Paths are checked as the kubelet checks them (relative, no `..` element, not
 * starting with `..`, bounded lengths); the directory is nodelet's own, under the pod's.
 *
 * Who calls it: the volume setup of a container start and each pod sync (cheap when
 * nothing changed: one readlink and a read of each payload file).
 */
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { NodeletError } from '../../errors.js';

/** One file of a volume's payload: its bytes and its mode (permission bits). */
export interface FileProjection {
  data: Buffer;
  mode: number;
}

const DATA = '..data';
const DATA_TMP = '..data_tmp';
const MAX_PATH = 4096;
const MAX_NAME = 255;

/** Checks one payload path as the kubelet's validatePath; the message names it. */
export function payloadPathProblem(p: string): string | undefined {
  if (p === '') return 'must not be empty';
  if (p.length > MAX_PATH) return `must be at most ${MAX_PATH} characters`;
  if (path.isAbsolute(p)) return 'must be a relative path';
  const parts = p.split('/');
  if (parts.some((s) => s.length > MAX_NAME)) return `each path element must be at most ${MAX_NAME} characters`;
  if (parts.includes('..')) return 'must not contain ".."';
  if (p.startsWith('..')) return 'must not start with ".."';
  if (parts.some((s) => s === '' || s === '.')) return 'must not contain empty or "." elements';
  return undefined;
}

function timestampName(now: Date): string {
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  const stamp = `${now.getUTCFullYear()}_${p(now.getUTCMonth() + 1)}_${p(now.getUTCDate())}_${p(now.getUTCHours())}_${p(now.getUTCMinutes())}_${p(now.getUTCSeconds())}`;
  return `..${stamp}.${crypto.randomInt(1e9).toString().padStart(9, '0')}`;
}

async function readlinkOr(p: string): Promise<string | undefined> {
  try {
    return await fs.readlink(p);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'EINVAL') return undefined;
    throw err;
  }
}

/** The files under `dir` (relative paths), not following links; undefined when it is not a directory. */
async function listFiles(dir: string, prefix = ''): Promise<string[] | undefined> {
  let entries: import('node:fs').Dirent[];
  try {
    entries = await fs.readdir(path.join(dir, prefix), { withFileTypes: true });
  } catch {
    return undefined;
  }
  const out: string[] = [];
  for (const e of entries) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...((await listFiles(dir, rel)) ?? []));
    else out.push(rel);
  }
  return out;
}

/** True when `tsDir` holds exactly `payload`, byte for byte and mode for mode. */
async function holds(tsDir: string, payload: ReadonlyMap<string, FileProjection>): Promise<boolean> {
  const files = await listFiles(tsDir);
  if (!files || files.length !== payload.size) return false;
  for (const [p, f] of payload) {
    try {
      const st = await fs.lstat(path.join(tsDir, p));
      if (!st.isFile() || (st.mode & 0o7777) !== f.mode || st.size !== f.data.length) return false;
      if (!(await fs.readFile(path.join(tsDir, p))).equals(f.data)) return false;
    } catch {
      return false;
    }
  }
  return true;
}

/**
 * Makes `dir` hold `payload` (relative path -> file) in the atomic writer's layout.
 * `setPerms(tsDir)` runs on the new timestamped directory before it is swapped in (fsGroup
 * ownership). Returns whether anything was written.
 */
export async function writeAtomically(dir: string, payload: ReadonlyMap<string, FileProjection>, o: { now?: Date; setPerms?: (tsDir: string) => Promise<void> } = {}): Promise<boolean> {
  for (const p of payload.keys()) {
    const problem = payloadPathProblem(p);
    if (problem) throw new NodeletError('INVALID_ARGUMENT', `path ${JSON.stringify(p)}: ${problem}`, { reason: 'CreateContainerConfigError' });
  }
  await fs.mkdir(dir, { recursive: true, mode: 0o755 });
  const oldTs = await readlinkOr(path.join(dir, DATA));
  // The link is ours: it names a sibling, never a path elsewhere.
  const oldTsDir = oldTs && !oldTs.includes('/') && oldTs.startsWith('..') ? path.join(dir, oldTs) : undefined;
  if (oldTsDir && (await holds(oldTsDir, payload))) return false;

  const oldVisible = new Set(oldTsDir ? ((await fs.readdir(oldTsDir).catch(() => [])) as string[]) : []);
  const newVisible = new Set([...payload.keys()].map((p) => p.split('/')[0]!));

  const tsName = timestampName(o.now ?? new Date());
  const tsDir = path.join(dir, tsName);
  await fs.mkdir(tsDir, { mode: 0o755 });
  try {
    for (const [p, f] of payload) {
      const file = path.join(tsDir, p);
      await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o755 });
      await fs.writeFile(file, f.data, { flag: 'wx', mode: f.mode });
      await fs.chmod(file, f.mode); // exactly the mode asked: the umask took bits away
    }
    await o.setPerms?.(tsDir);
    const tmp = path.join(dir, DATA_TMP);
    await fs.rm(tmp, { force: true });
    await fs.symlink(tsName, tmp);
    await fs.rename(tmp, path.join(dir, DATA));
  } catch (err) {
    await fs.rm(tsDir, { recursive: true, force: true });
    throw err;
  }

  for (const name of newVisible) {
    const link = path.join(dir, name);
    if ((await readlinkOr(link)) === `${DATA}/${name}`) continue;
    await fs.rm(link, { recursive: true, force: true });
    await fs.symlink(`${DATA}/${name}`, link);
  }
  for (const name of oldVisible) if (!newVisible.has(name)) await fs.rm(path.join(dir, name), { force: true });
  if (oldTsDir) await fs.rm(oldTsDir, { recursive: true, force: true });
  return true;
}
