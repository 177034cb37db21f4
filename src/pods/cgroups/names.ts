/**
 * The kubelet's cgroup names (pkg/kubelet/cm/cgroup_manager_linux.go), pure.
 *
 * A cgroup is named inside nodelet as a list of components (the kubelet's `CgroupName`):
 * `['kubepods', 'burstable', 'pod<uid>']`. A driver turns it into the path the runtime and
 * the cgroup filesystem see:
 *   - cgroupfs: `/kubepods/burstable/pod<uid>`;
 *   - systemd: each component with `-` escaped to `_`, joined by `-` into a slice name, and
 *     expanded into its parents: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`.
 * `cgroupRoot` is always read in cgroupfs form (the kubelet's ParseCgroupfsToCgroupName),
 * whatever the driver.
 */
import type { CgroupDriver } from '../../config/types.js';

export type CgroupName = readonly string[];
export type QosClass = 'Guaranteed' | 'Burstable' | 'BestEffort';

/** The node allocatable cgroup under cgroupRoot (the kubelet's defaultNodeAllocatableCgroupName). */
export const KUBEPODS = 'kubepods';
/** The pod cgroup's component: `pod` + UID (GetPodCgroupNameSuffix). */
export const POD_CGROUP_PREFIX = 'pod';

/** `/a/b` -> ['a', 'b']; `/` -> []. */
export function parseCgroupfsName(name: string): CgroupName {
  const parts = name.replace(/^\/+/, '').split('/');
  return parts.length === 1 && parts[0] === '' ? [] : parts.filter((p) => p !== '');
}

export function toCgroupfs(name: CgroupName): string {
  return '/' + name.join('/');
}

/** `a-b` -> `a_b`: systemd reads `-` in a slice name as the parent separator. */
function escapeSystemd(part: string): string {
  return part.replaceAll('-', '_');
}

/**
 * libcontainer's ExpandSlice: `a-b-c.slice` -> `/a.slice/a-b.slice/a-b-c.slice`. Throws for a
 * name that is not a slice or has an empty component (`a--b.slice`, `-a.slice`).
 */
export function expandSlice(slice: string): string {
  if (!slice.endsWith('.slice') || slice.includes('/')) throw new Error(`invalid slice name: ${slice}`);
  const base = slice.slice(0, -'.slice'.length);
  if (base === '-') return '/';
  let path = '';
  let prefix = '';
  for (const component of base.split('-')) {
    if (component === '') throw new Error(`invalid slice name: ${slice}`);
    path += `/${prefix}${component}.slice`;
    prefix += `${component}-`;
  }
  return path;
}

export function toSystemd(name: CgroupName): string {
  if (name.length === 0 || (name.length === 1 && name[0] === '')) return '/';
  return expandSlice(name.map(escapeSystemd).join('-') + '.slice');
}

/** The driver's path for a name (the kubelet's cgroupManager.Name): what goes in `cgroup_parent` and under each cgroup mount. */
export function cgroupPath(name: CgroupName, driver: CgroupDriver): string {
  return driver === 'systemd' ? toSystemd(name) : toCgroupfs(name);
}

/** The node allocatable cgroup: `<cgroupRoot>/kubepods`. */
export function kubepodsName(cgroupRoot: string): CgroupName {
  return [...parseCgroupfsName(cgroupRoot), KUBEPODS];
}

/** Where a QoS class's pods go: Guaranteed directly under kubepods, the others in `burstable`/`besteffort`. */
export function qosCgroupName(kubepods: CgroupName, qos: QosClass): CgroupName {
  return qos === 'Guaranteed' ? kubepods : [...kubepods, qos.toLowerCase()];
}

export function podCgroupName(kubepods: CgroupName, qos: QosClass, uid: string): CgroupName {
  return [...qosCgroupName(kubepods, qos), POD_CGROUP_PREFIX + uid];
}

/**
 * The pod UID in a pod cgroup's directory name (`pod<uid>` for cgroupfs,
 * `kubepods-burstable-pod<uid_>.slice` for systemd), or undefined for any other directory.
 */
export function podUidFromDir(dir: string, driver: CgroupDriver): string | undefined {
  if (driver === 'cgroupfs') return dir.startsWith(POD_CGROUP_PREFIX) && dir.length > POD_CGROUP_PREFIX.length ? dir.slice(POD_CGROUP_PREFIX.length) : undefined;
  const m = /-pod([^-]+)\.slice$/.exec(dir);
  return m ? m[1]!.replaceAll('_', '-') : undefined;
}

/** The kubelet's ParseSystemdToCgroupName: `/a.slice/a-b.slice` -> ['a', 'b'] (`_` back to `-`). */
export function parseSystemdName(name: string): CgroupName {
  const base = name.split('/').filter(Boolean).pop() ?? '';
  const slice = base.endsWith('.slice') ? base.slice(0, -'.slice'.length) : base;
  if (slice === '' || slice === '-') return [];
  return slice.split('-').map((p) => p.replaceAll('_', '-'));
}

/** A cgroup named in the configuration in the driver's form (kubeReservedCgroup, systemReservedCgroup), as the kubelet's cgroupManager.CgroupName. */
export function parseDriverName(name: string, driver: CgroupDriver): CgroupName {
  return driver === 'systemd' ? parseSystemdName(name) : parseCgroupfsName(name);
}
