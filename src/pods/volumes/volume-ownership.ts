/**
 * The pod's fsGroup on its emptyDir volumes, as the kubelet's SetVolumeOwnership: every
 * file and directory gets the group, group read/write (and execute and the setgid bit on
 * directories, so what the containers create there inherits the group). The read-only
 * volumes nodelet writes (configMap, secret, downwardAPI, projected: api-data.ts) get group
 * read only (the kubelet's roMask), on each new payload directory before it is swapped in.
 *
 * The kubelet sets an emptyDir's ownership when it sets the volume up (once per pod, not
 * per container start), with no fsGroupChangePolicy (it passes nil for emptyDir). nodelet
 * sets volumes up at every container creation, so it asks the kubelet's OnRootMismatch
 * question first: a root that already has the group, group rwx and setgid is left alone
 * (one stat), and only otherwise is the tree walked: at the volume's creation (then it is
 * empty), or after something changed its root. hostPath volumes are never changed.
 *
 * The tree is written by containers, so it is hostile: the walk never follows a link, never
 * opens a file for IO (a device node or FIFO a container made is only chown'd and chmod'ed
 * through an O_PATH descriptor, `/proc/self/fd/<n>`), never leaves the volume's filesystem,
 * and goes at most MAX_DEPTH levels deep.
 */
import { constants as fsc } from 'node:fs';
import fs from 'node:fs/promises';
import { NodeletError } from '../../errors.js';

/** Linux's O_PATH (not in Node's fs.constants). */
const O_PATH = 0o10000000;
/** Each level holds one descriptor while its children are walked. */
const MAX_DEPTH = 256;
/** The kubelet's masks: rw for the group, x too on directories, plus setgid on directories. */
const RW = 0o660;
const DIR = 0o2000 | RW | 0o110;
/** For read-only volumes (configMap, secret, downwardAPI, projected), the kubelet's roMask: read for the group, x on directories. */
const RO = 0o440;
const RO_DIR = 0o2000 | RO | 0o110;

/** The kubelet's requiresPermissionChange: the root lacks the group, group rwx or setgid. */
export async function needsOwnership(dir: string, fsGroup: number, readOnly = false): Promise<boolean> {
  const st = await fs.lstat(dir);
  const want = readOnly ? 0o550 : 0o770;
  return !st.isDirectory() || st.gid !== fsGroup || (st.mode & want) !== want || (st.mode & 0o2000) === 0;
}

/**
 * Gives `dir` (an emptyDir's directory) and everything under it the group `fsGroup`, unless
 * its root has it already. Errors name the volume.
 */
export async function setVolumeOwnership(dir: string, fsGroup: number, volume: string, readOnly = false): Promise<void> {
  if (!Number.isInteger(fsGroup) || fsGroup < 0 || fsGroup > 0xffffffff) throw new NodeletError('INVALID_ARGUMENT', `volume "${volume}": fsGroup ${fsGroup} is not a group ID`, { reason: 'CreateContainerConfigError' });
  try {
    if (!(await needsOwnership(dir, fsGroup, readOnly))) return;
    const root = await fs.lstat(dir);
    await own(dir, fsGroup, root.dev, 0, readOnly ? { file: RO, dir: RO_DIR } : { file: RW, dir: DIR });
  } catch (err) {
    if (err instanceof NodeletError) throw err;
    throw new NodeletError('INTERNAL', `volume "${volume}": cannot set the ownership of fsGroup ${fsGroup}: ${(err as Error).message}`, { reason: 'CreateContainerConfigError' }, { cause: err });
  }
}

async function own(p: string, gid: number, dev: number, depth: number, masks: { file: number; dir: number }): Promise<void> {
  let h: fs.FileHandle;
  try {
    h = await fs.open(p, O_PATH | fsc.O_NOFOLLOW);
  } catch (err) {
    // Removed by a container since its directory was read: nothing left to own.
    if (depth > 0 && (err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  try {
    const st = await h.stat();
    // A link's own mode and group mean nothing; what it points to is not the volume's.
    if (st.isSymbolicLink() || st.dev !== dev) return;
    const self = `/proc/self/fd/${h.fd}`;
    await fs.chown(self, -1, gid);
    await fs.chmod(self, (st.mode & 0o7777) | (st.isDirectory() ? masks.dir : masks.file));
    if (!st.isDirectory()) return;
    if (depth >= MAX_DEPTH) throw new NodeletError('INVALID_ARGUMENT', `directories nested deeper than ${MAX_DEPTH} levels`);
    for (const name of await fs.readdir(self)) await own(`${self}/${name}`, gid, dev, depth + 1, masks);
  } finally {
    await h.close();
  }
}
