/**
 * Pod volumes a node agent sets up by itself: `hostPath` (with the kubelet's type checks)
 * and `emptyDir` (a directory under `<root-dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/`,
 * the kubelet's layout, removed with the pod). Each container's `volumeMounts` become CRI
 * mounts (readOnly, subPath/subPathExpr, mountPropagation).
 *
 * Every name that becomes a host path element (the pod UID, volume and container names)
 * is checked here again, whatever validated the pod before: an API pod never went
 * through nodelet's manifest validation, and a name like `../..` would lead anywhere.
 * A subPath is resolved inside its volume without following links and bind-mounted from
 * the resolved descriptor (subpath.ts), at every container creation.
 *
 * `configMap`, `secret`, `downwardAPI` and `projected` volumes are written by
 * volumes/api-data.ts (kept up to date by api-volumes.ts). Volumes that need a plugin
 * (persistentVolumeClaim, csi, ...) are refused with CreateContainerConfigError naming the
 * volume: the container does not start without a volume it asked for, and the reason says why.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Container, Pod, Volume } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../errors.js';
import type { Mount, MountPropagation } from '../../runtime/types.js';
import { ExpansionTooLarge, expand } from '../cri/env.js';
import { isDnsLabel, isDnsSubdomain, isPodUid } from '../sources/pod-validation.js';
import { bindSubPath, hostMounter, removeTree, subPathTarget, unmountUnder, type Mounter } from './subpath.js';
import { ifExists, readdirOrEmpty } from '../../system/fs-util.js';
import { parseQuantity } from '../../config/quantity.js';
import { isApiDataVolume } from './api-data.js';
import { ApiVolumes } from './api-volumes.js';
import { needsOwnership, setVolumeOwnership } from './volume-ownership.js';

const REASON = { reason: 'CreateContainerConfigError' } as const;

/** `<root-dir>/pods/<uid>`; refuses a UID that is not one (it would be a path). */
export function podDir(rootDir: string, uid: string): string {
  if (!isPodUid(uid)) throw new NodeletError('INVALID_ARGUMENT', `pod UID ${JSON.stringify(uid)} is not a valid UID`, REASON);
  return path.join(rootDir, 'pods', uid);
}

/** The emptyDir's directory; refuses a volume name that is not a DNS-1123 label (it would be a path). */
export function emptyDirPath(rootDir: string, uid: string, volume: string): string {
  if (!isDnsLabel(volume)) throw new NodeletError('INVALID_ARGUMENT', `volume ${JSON.stringify(volume)}: not a valid volume name (a DNS-1123 label)`, REASON);
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

/** Checks (and per its type creates) a hostPath; the kubelet's messages. */
async function hostPathReady(volume: string, p: string, type: string | undefined): Promise<void> {
  const fail = (msg: string) => new NodeletError('INVALID_ARGUMENT', `volume "${volume}": hostPath type check failed: ${msg}`, REASON);
  if (!path.isAbsolute(p)) throw fail(`${p} is not an absolute path`);
  const t = type ?? '';
  if (t === '') return;
  const st = await ifExists(fs.stat(p));
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

/**
 * An emptyDir with `medium: Memory` is a tmpfs, as the kubelet mounts it (with the
 * SizeMemoryBackedVolumes gate, on by default): the smaller of `sizeLimit` and the pod's
 * memory limit (every app container's limits.memory, summed, when each has one), else the
 * kernel's default (half of RAM; the kubelet caps it at the node's allocatable memory). Mounted
 * once per volume: a start that finds it mounted leaves it.
 */
async function mountMemoryVolume(pod: Pod, v: Volume, dir: string, quantity: (q: string | number) => number, mounter: Mounter): Promise<void> {
  if ((await mounter.mountPoints()).includes(path.resolve(dir))) return;
  if (!mounter.tmpfs) throw new NodeletError('UNIMPLEMENTED', `volume "${v.name}": emptyDir medium Memory needs a mounter that mounts tmpfs`, REASON);
  const limits = (pod.spec?.containers ?? []).map((c) => c.resources?.limits?.memory);
  const podLimit = limits.length && limits.every((l) => l !== undefined) ? limits.reduce((sum: number, l) => sum + quantity(l!), 0) : undefined;
  // As the kubelet's calculateEmptyDirMemorySize: the smallest of what is set (a sizeLimit of 0 counts as unset).
  const sizeLimit = v.emptyDir?.sizeLimit !== undefined ? quantity(v.emptyDir.sizeLimit) : undefined;
  const sizes = [podLimit, sizeLimit].filter((x): x is number => x !== undefined && x > 0);
  await mounter.tmpfs(dir, sizes.length ? Math.ceil(Math.min(...sizes)) : undefined);
}

async function volumeHostPath(pod: Pod, v: Volume, rootDir: string, quantity: (q: string | number) => number, mounter: Mounter, apiVolumes: ApiVolumes | undefined): Promise<string> {
  if (!isDnsLabel(v.name)) throw new NodeletError('INVALID_ARGUMENT', `volume ${JSON.stringify(v.name)}: not a valid volume name (a DNS-1123 label)`, REASON);
  if (v.hostPath) {
    await hostPathReady(v.name, v.hostPath.path, v.hostPath.type);
    return v.hostPath.path;
  }
  if (v.emptyDir) {
    const medium = v.emptyDir.medium ?? '';
    if (medium !== '' && medium !== 'Memory') throw new NodeletError('UNIMPLEMENTED', `volume "${v.name}": emptyDir medium ${JSON.stringify(medium)} is not supported by nodelet (the node's disk, or Memory)`, REASON);
    const dir = emptyDirPath(rootDir, pod.metadata?.uid ?? '', v.name);
    await fs.mkdir(dir, { recursive: true });
    if (medium === 'Memory') await mountMemoryVolume(pod, v, dir, quantity, mounter);
    const fsGroup = pod.spec?.securityContext?.fsGroup;
    // as the kubelet: any user of the pod may write; with an fsGroup, the group owns it (setgid: new files too)
    if (fsGroup === undefined || (await needsOwnership(dir, fsGroup))) await fs.chmod(dir, 0o777);
    if (fsGroup !== undefined) await setVolumeOwnership(dir, fsGroup, v.name);
    return dir;
  }
  // Without the pods' ApiVolumes (a caller of its own): one without the control plane.
  if (isApiDataVolume(v)) return (apiVolumes ?? new ApiVolumes({ rootDir, quantity, mounter })).setUp(pod, v);
  const kind = Object.keys(v).find((k) => k !== 'name') ?? 'none';
  throw new NodeletError('UNIMPLEMENTED', `volume "${v.name}": type ${kind} is not supported by nodelet (hostPath, emptyDir, configMap, secret, downwardAPI and projected are)`, REASON);
}

export interface ContainerMountsOptions {
  /** The container's environment, for `$(VAR)` in subPathExpr. */
  env?: ReadonlyMap<string, string>;
  /** Parses resource quantities (downwardAPI resourceFieldRef); default config/quantity.ts. */
  quantity?: (q: string | number) => number;
  /** Default: the host's (util-linux mount, /proc/self/mountinfo). */
  mounter?: Mounter;
  /** The pods' configMap, secret, downwardAPI and projected volumes (the runtime's); default: one without the control plane. */
  apiVolumes?: ApiVolumes;
}

/** Linux's PATH_MAX: a longer subPath could never be opened, so its expansion stops there. */
const MAX_SUBPATH = 4096;

function expandSubPath(expr: string, env: ReadonlyMap<string, string> | undefined, refuse: (msg: string) => Error): string {
  try {
    return expand(expr, env ?? new Map(), MAX_SUBPATH);
  } catch (err) {
    if (err instanceof ExpansionTooLarge) throw refuse(`subPathExpr would expand past ${MAX_SUBPATH} bytes (PATH_MAX)`);
    throw err;
  }
}

/**
 * Sets up the volumes `container` mounts and returns its CRI mounts, in volumeMounts order.
 * A subPath (or an expanded subPathExpr) is bound onto
 * `<root-dir>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>`, which the runtime gets.
 */
export async function containerMounts(pod: Pod, container: Container, rootDir: string, o: ContainerMountsOptions = {}): Promise<Mount[]> {
  const volumes = new Map((pod.spec?.volumes ?? []).map((v) => [v.name, v]));
  const mounts: Mount[] = [];
  const list = container.volumeMounts ?? [];
  for (let i = 0; i < list.length; i++) {
    const vm = list[i]!;
    const what = `volumeMount ${JSON.stringify(vm.name)} of container ${container.name}`;
    const refuse = (msg: string) => new NodeletError('INVALID_ARGUMENT', `${what}: ${msg}`, REASON);
    const v = volumes.get(vm.name);
    if (!v) throw refuse(`the pod has no volume named ${JSON.stringify(vm.name)}`);
    if (typeof vm.mountPath !== 'string' || !path.isAbsolute(vm.mountPath)) throw refuse(`mountPath ${JSON.stringify(vm.mountPath)} must be an absolute path`);
    let host = await volumeHostPath(pod, v, rootDir, o.quantity ?? ((q) => parseQuantity(String(q)).value), o.mounter ?? hostMounter, o.apiVolumes);
    if (vm.subPath && vm.subPathExpr) throw refuse('subPath and subPathExpr are mutually exclusive');
    // As the kubelet: subPathExpr is expanded from the container's environment; an empty result is the whole volume.
    const sub = vm.subPath || (vm.subPathExpr ? expandSubPath(vm.subPathExpr, o.env, refuse) : '');
    if (sub) {
      if (!isDnsLabel(container.name)) throw refuse(`container name ${JSON.stringify(container.name)} is not a valid DNS-1123 label`);
      const target = subPathTarget(podDir(rootDir, pod.metadata?.uid ?? ''), vm.name, container.name, i);
      await bindSubPath({ volumeRoot: host, subPath: sub, target: path.resolve(target), mounter: o.mounter ?? hostMounter, what });
      host = target;
    }
    const propagation = PROPAGATION[vm.mountPropagation ?? 'None'];
    if (!propagation) throw refuse(`unknown mountPropagation ${JSON.stringify(vm.mountPropagation)}`);
    // As the kubelet, API data volumes are always mounted read-only.
    mounts.push({ containerPath: vm.mountPath, hostPath: host, readonly: !!vm.readOnly || isApiDataVolume(v), selinuxRelabel: false, propagation });
  }
  return mounts;
}

/**
 * Removes the pod's directory (its emptyDir volumes, its subPath binds) once the pod is
 * gone from the runtime: the subPath binds are unmounted first, and nothing is removed
 * across a mount point (a recursive delete through a bind would delete host files).
 */
export async function removePodDir(rootDir: string, uid: string, mounter: Mounter = hostMounter): Promise<void> {
  if (!isPodUid(uid)) return; // never a path outside <root-dir>/pods
  const dir = podDir(rootDir, uid);
  await unmountUnder(path.join(dir, 'volume-subpaths'), mounter);
  // Memory-backed emptyDirs are tmpfs mounts nodelet made (told by their source): unmounted,
  // so that the walk below may remove their directories. Any other mount stops the walk.
  const volumes = path.join(dir, 'volumes') + path.sep;
  for (const m of (await mounter.memoryVolumes?.()) ?? []) if (m.startsWith(volumes)) await mounter.unmount(m);
  await removeTree(dir, mounter);
}

/** `<podLogsDir>/<namespace>_<name>_<uid>`; refuses names that are not the API's (they would be paths). */
export function podLogDir(podLogsDir: string, namespace: string, name: string, uid: string): string {
  if (!isDnsLabel(namespace) || !isDnsSubdomain(name) || !isPodUid(uid)) {
    throw new NodeletError('INVALID_ARGUMENT', `pod ${JSON.stringify(namespace)}/${JSON.stringify(name)} (uid ${JSON.stringify(uid)}): not valid names for a log directory`, { reason: 'CreatePodSandboxError' });
  }
  return path.join(podLogsDir, `${namespace}_${name}_${uid}`);
}

/**
 * Removes the pod's log directories (`<namespace>_<name>_<uid>` in podLogsDir). Found by
 * UID, so a pod whose name nodelet no longer knows (removed after a restart) is found too;
 * only entries that podLogDir could have made match.
 */
export async function removePodLogDirs(podLogsDir: string, uid: string, mounter: Mounter = hostMounter): Promise<void> {
  if (!isPodUid(uid)) return;
  for (const n of await readdirOrEmpty(podLogsDir)) {
    const parts = n.split('_');
    if (parts.length !== 3 || parts[2] !== uid || !isDnsLabel(parts[0]) || !isDnsSubdomain(parts[1])) continue;
    await removeTree(path.join(podLogsDir, n), mounter);
  }
}

/**
 * The UIDs of pods that left something on the node: a `<root-dir>/pods/<uid>` directory or
 * a `<podLogsDir>/<namespace>_<name>_<uid>` one. The pod manager removes those of pods
 * that are neither wanted nor in the runtime (a nodelet that died between a pod's removal
 * from the runtime and the removal of its directories, or a pod removed while nodelet was
 * down), as the kubelet's housekeeping removes orphaned pod directories.
 */
export async function leftoverPodUids(rootDir: string, podLogsDir: string): Promise<string[]> {
  const list = async (dir: string) => {
    try {
      return await fs.readdir(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  };
  const uids = new Set((await list(path.join(rootDir, 'pods'))).filter(isPodUid));
  for (const n of await list(podLogsDir)) {
    const parts = n.split('_');
    if (parts.length === 3 && isDnsLabel(parts[0]!) && isDnsSubdomain(parts[1]!) && isPodUid(parts[2]!)) uids.add(parts[2]!);
  }
  return [...uids];
}
