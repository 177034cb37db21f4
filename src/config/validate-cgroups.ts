/**
 * The kubelet's validation of the cgroup fields (pkg/kubelet/apis/config/validation and
 * cmd/kubelet's checks), with nodelet's checks of the paths it writes under /sys/fs/cgroup:
 *   - `enforceNodeAllocatable`: each of pods, system-reserved, kube-reserved,
 *     system-reserved-compressible, kube-reserved-compressible, none; `none` alone; a
 *     `-compressible` key not with its plain one; only with `cgroupsPerQOS: true`;
 *     system-reserved / kube-reserved need `systemReservedCgroup` / `kubeReservedCgroup`;
 *   - `systemCgroups` needs `cgroupRoot`;
 *   - `cgroupRoot`, `kubeReservedCgroup`, `systemReservedCgroup`, `kubeletCgroups`,
 *     `systemCgroups`: absolute cgroup paths without `.`/`..` components (nodelet's own rule:
 *     they name directories under the cgroup mounts).
 * Called by validateConfig (validate.ts) with its accessors.
 */
import type { Json } from './merge.js';

const ENFORCEMENT_KEYS = ['pods', 'system-reserved', 'kube-reserved', 'system-reserved-compressible', 'kube-reserved-compressible', 'none'];

/** Why a cgroup path is refused, or undefined. '' (unset) is fine. */
export function cgroupPathProblem(v: string): string | undefined {
  if (v === '') return undefined;
  if (!v.startsWith('/')) return `must be an absolute cgroup path (such as /kubelet.slice or /), got ${JSON.stringify(v)}`;
  if (/[\x00-\x1f\x7f]/.test(v)) return `must not contain control characters, got ${JSON.stringify(v)}`;
  if (v.split('/').some((p) => p === '.' || p === '..')) return `must not contain . or .. components, got ${JSON.stringify(v)}`;
  if (v.length > 4096) return `must be at most 4096 characters, got ${v.length}`;
  return undefined;
}

/** `add(originPath, fieldPath, message)`: the problem is reported on `fieldPath`, in the file that set `originPath`. */
export function validateCgroupFields(get: (p: readonly string[]) => Json | undefined, addAt: (originPath: readonly string[], p: readonly string[], message: string) => void): void {
  const add = (p: readonly string[], message: string) => addAt(p, p, message);
  const ENA = ['enforceNodeAllocatable'];
  for (const field of ['cgroupRoot', 'kubeReservedCgroup', 'systemReservedCgroup', 'kubeletCgroups', 'systemCgroups']) {
    const v = get([field]);
    if (typeof v !== 'string') continue;
    const problem = cgroupPathProblem(v);
    if (problem) add([field], problem);
  }
  const str = (field: string): string => {
    const v = get([field]);
    return typeof v === 'string' ? v : '';
  };
  if (str('systemCgroups') !== '' && str('cgroupRoot') === '') add(['systemCgroups'], 'is set but cgroupRoot is not; set cgroupRoot too');

  const list = get(['enforceNodeAllocatable']);
  if (!Array.isArray(list)) return;
  const keys = list.filter((k): k is string => typeof k === 'string');
  keys.forEach((k, i) => {
    if (!ENFORCEMENT_KEYS.includes(k)) addAt(ENA, [...ENA, String(i)], `option ${JSON.stringify(k)} is not valid: valid options are ${ENFORCEMENT_KEYS.map((x) => JSON.stringify(x)).join(', ')}`);
  });
  if (keys.includes('none') && keys.length > 1) add(['enforceNodeAllocatable'], 'may not contain additional enforcements when "none" is specified');
  // Named on enforceNodeAllocatable, in the file that turned cgroupsPerQOS off when the list is the default one.
  if (keys.length > 0 && get(['cgroupsPerQOS']) === false) addAt(['cgroupsPerQOS'], ENA, 'is not supported unless cgroupsPerQOS is true: set enforceNodeAllocatable: [] with cgroupsPerQOS: false');
  for (const who of ['system', 'kube']) {
    const plain = `${who}-reserved`;
    const compressible = `${plain}-compressible`;
    if (keys.includes(plain) && keys.includes(compressible)) add(['enforceNodeAllocatable'], `may not contain both ${JSON.stringify(plain)} and ${JSON.stringify(compressible)}`);
    if ((keys.includes(plain) || keys.includes(compressible)) && str(`${who}ReservedCgroup`) === '') {
      addAt(ENA, [`${who}ReservedCgroup`], `must be specified when ${JSON.stringify(keys.includes(plain) ? plain : compressible)} is in enforceNodeAllocatable`);
    }
  }
}
