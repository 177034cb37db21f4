/**
 * Pod volumes a node agent sets up by itself: `hostPath` (with the kubelet's type checks)
 * and `emptyDir` (a directory under `<root-dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/`,
 * the kubelet's layout, removed with the pod). Each container's `volumeMounts` become CRI
 * mounts (readOnly, subPath, mountPropagation).
 *
 * Volumes that need the control plane or a plugin (configMap, secret, projected,
 * persistentVolumeClaim, csi, ...) and `emptyDir.medium: Memory` are refused with
 * CreateContainerConfigError naming the volume: the container does not start without a
 * volume it asked for, and the reason says why.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Container, Pod, Volume } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../errors.js';
import type { Mount, MountPropagation } from '../runtime/types.js';

const REASON = { reason: 'CreateContainerConfigError' } as const;

export function podDir(rootDir: string, uid: string): string {
  return path.join(rootDir, 'pods', uid);
}

export function emptyDirPath(rootDir: string, uid: string, volume: string): string {
  return path.join(podDir(rootDir, uid), 'volumes', 'kubernetes.io~empty-dir', volume);
}

const PROPAGATION: Record<string, MountPropagation> = {
  None: 'PROPAGATION_PRIVATE',
  HostToContainer: 'PROPAGATION_HOST_TO_CONTAINER',
  Bidirectional: 'PROPAGATION_BIDIRECTIONAL',
};

const FILE_TYPES: Record<string, { test: (s: import('node:fs').Stats) => boolean; what: string }> = {
  Directory: { test: (s) => s.isDirectory(), what: 'a directory' },
  File: { test: (s) => s.isFile(), what: 'a file' },
  Socket: { test: (s) => s.isSocket(), what: 'a socket file' },
  CharDevice: { test: (s) => s.isCharacterDevice(), what: 'a character device' },
  BlockDevice: { test: (s) => s.isBlockDevice(), what: 'a block device' },
};

async function statOrUndefined(p: string) {
  try {
    return await fs.stat(p);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** Checks (and per its type creates) a hostPath; the kubelet's messages. */
async function hostPathReady(volume: string, p: string, type: string | undefined): Promise<void> {
  const fail = (msg: string) => new NodeletError('INVALID_ARGUMENT', `volume "${volume}": hostPath type check failed: ${msg}`, REASON);
  if (!path.isAbsolute(p)) throw fail(`${p} is not an absolute path`);
  const t = type ?? '';
  if (t === '') return;
  const st = await statOrUndefined(p);
  if (t === 'DirectoryOrCreate') {
    if (!st) await fs.mkdir(p, { recursive: true, mode: 0o755 });
    else if (!st.isDirectory()) throw fail(`${p} is not a directory`);
    return;
  }
  if (t === 'FileOrCreate') {
    if (!st) {
      await fs.mkdir(path.dirname(p), { recursive: true, mode: 0o755 });
      await (await fs.open(p, 'a', 0o644)).close();
    } else if (!st.isFile()) throw fail(`${p} is not a file`);
    return;
  }
  const check = FILE_TYPES[t];
  if (!check) throw fail(`unknown hostPath type ${JSON.stringify(t)}`);
  if (!st) throw fail(`${p} does not exist`);
  if (!check.test(st)) throw fail(`${p} is not ${check.what}`);
}

async function volumeHostPath(pod: Pod, v: Volume, rootDir: string): Promise<string> {
  if (v.hostPath) {
    await hostPathReady(v.name, v.hostPath.path, v.hostPath.type);
    return v.hostPath.path;
  }
  if (v.emptyDir) {
    if (v.emptyDir.medium === 'Memory') throw new NodeletError('UNIMPLEMENTED', `volume "${v.name}": emptyDir medium Memory is not supported by nodelet`, REASON);
    const dir = emptyDirPath(rootDir, pod.metadata!.uid!, v.name);
    await fs.mkdir(dir, { recursive: true });
    await fs.chmod(dir, 0o777); // as the kubelet: any user of the pod may write
    return dir;
  }
  const kind = Object.keys(v).find((k) => k !== 'name') ?? 'none';
  throw new NodeletError('UNIMPLEMENTED', `volume "${v.name}": type ${kind} is not supported by nodelet (hostPath and emptyDir are)`, REASON);
}

/** Sets up the volumes `container` mounts and returns its CRI mounts, in volumeMounts order. */
export async function containerMounts(pod: Pod, container: Container, rootDir: string): Promise<Mount[]> {
  const volumes = new Map((pod.spec?.volumes ?? []).map((v) => [v.name, v]));
  const mounts: Mount[] = [];
  for (const vm of container.volumeMounts ?? []) {
    const v = volumes.get(vm.name);
    if (!v) throw new NodeletError('INVALID_ARGUMENT', `volumeMount "${vm.name}" of container ${container.name}: the pod has no volume named "${vm.name}"`, REASON);
    let host = await volumeHostPath(pod, v, rootDir);
    if (vm.subPath) {
      if (path.isAbsolute(vm.subPath) || vm.subPath.split('/').includes('..')) {
        throw new NodeletError('INVALID_ARGUMENT', `volumeMount "${vm.name}" of container ${container.name}: subPath ${JSON.stringify(vm.subPath)} must be a relative path without ".."`, REASON);
      }
      host = path.join(host, vm.subPath);
      // As the kubelet: a missing subPath is created as a directory.
      if (!(await statOrUndefined(host))) await fs.mkdir(host, { recursive: true, mode: 0o755 });
    }
    const propagation = PROPAGATION[vm.mountPropagation ?? 'None'];
    if (!propagation) throw new NodeletError('INVALID_ARGUMENT', `volumeMount "${vm.name}" of container ${container.name}: unknown mountPropagation ${JSON.stringify(vm.mountPropagation)}`, REASON);
    mounts.push({ containerPath: vm.mountPath, hostPath: host, readonly: !!vm.readOnly, selinuxRelabel: false, propagation });
  }
  return mounts;
}

/** Removes the pod's directory (its emptyDir volumes) once the pod is gone from the runtime. */
export async function removePodDir(rootDir: string, uid: string): Promise<void> {
  if (!/^[A-Za-z0-9-]+$/.test(uid)) return; // never a path outside <root-dir>/pods
  await fs.rm(podDir(rootDir, uid), { recursive: true, force: true });
}
