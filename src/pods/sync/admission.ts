/**
 * Pod admission: whether this node runs a pod at all, decided once, when the pod first
 * comes (the kubelet's canAdmitPod in HandlePodAdditions). A rejected pod never runs: it is
 * `Failed` with the handler's reason and "Pod was rejected: <message>", and a Warning event
 * with that reason and message (the kubelet's rejectPod). Pure, but for
 * `hostAppArmorEnabled`, which the composition root asks once at start.
 *
 * Handlers, in the kubelet's order; the first rejection wins:
 * - sysctls (pkg/kubelet/sysctl): the safe set for this kernel plus `allowedUnsafeSysctls`;
 *   a net.* sysctl on a hostNetwork pod, or an IPC one on a hostIPC pod, is refused even
 *   when allowed, since it would change the host's: `SysctlForbidden`.
 * - AppArmor (lifecycle's appArmorAdmitHandler): a profile other than Unconfined on a host
 *   without AppArmor cannot be enforced: `AppArmor`, "Cannot enforce AppArmor: ...".
 * - user namespaces: `hostUsers: false` needs ID mappings nodelet does not make (and that
 *   containerd 1.6 cannot apply): `UserNamespacesNotSupported`. The kubelet, on a runtime
 *   without user namespaces, fails the sandbox instead and the pod stays Pending.
 * - `supplementalGroupsPolicy: Strict` on a runtime whose Status does not say it supports it
 *   (containerd 1.6 says nothing; it would merge the image's groups silently):
 *   `SupplementalGroupsPolicyNotSupported`, as the kubelet since 1.33.
 *
 * - eviction (the eviction manager's Admit, src/node/eviction.ts, after the container count):
 *   under node pressure, a critical pod (static, mirror, or priority 2000000000 and more)
 *   is admitted; under MemoryPressure alone, a pod that is not BestEffort or that tolerates
 *   the `node.kubernetes.io/memory-pressure` NoSchedule taint; otherwise, and under
 *   DiskPressure or PIDPressure, none: `Evicted`, "The node had condition: [DiskPressure]. ".
 *
 * - container count (nodelet's own, first): a pod with more than MAX_CONTAINERS_PER_POD
 *   containers is refused, `TooManyContainers`. The API server caps only the pod's size
 *   (~1.5 MiB: ~45,000 minimal containers); each sync's work grows with the containers
 *   (linear since pod-spec-bounds, but ~0.5 s of status per sync at 45,000 on one thread),
 *   and no node runs such a pod: the whole node's CRI ListContainers answer is capped at
 *   16 MiB, ~25,000 containers. The kubelet has no such bound.
 *
 * - predicates (predicates.ts): OS, resources, node affinity, node name, host ports, taints,
 *   against the node and the pods already admitted.
 */
import fs from 'node:fs/promises';
import type { Container, Pod, PodStatus } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../errors.js';
import { APPARMOR_ANNOTATION_PREFIX, appArmorProfile, normalizeSysctlName } from '../cri/security-context.js';
import { qosClass } from '../status/status.js';
import { isCriticalPod } from '../cri/swap.js';
import { checkPredicates, type PredicateOptions } from './predicates.js';

export interface Rejection {
  /** One word, the pod's status.reason and the event's reason (`SysctlForbidden`). */
  reason: string;
  message: string;
}

/**
 * One admission check: a rejection, or undefined to admit. `others`: the pods admitted before
 * and not finished (the kubelet's active pods), which hold resources and host ports.
 */
export type PodAdmitHandler = (pod: Pod, others?: readonly Pod[]) => Rejection | undefined;

/** The first handler's rejection, or undefined: the pod may run. */
export function admitPod(pod: Pod, handlers: readonly PodAdmitHandler[], others: readonly Pod[] = []): Rejection | undefined {
  for (const h of handlers) {
    const r = h(pod, others);
    if (r) return r;
  }
  return undefined;
}

/** What a rejected pod shows (the kubelet's rejectPod: phase, reason, message, its QoS class kept). */
export function rejectedStatus(pod: Pod, r: Rejection): PodStatus {
  return { phase: 'Failed', reason: r.reason, message: `Pod was rejected: ${r.message}`, qosClass: qosClass(pod) };
}

// ------------------------------------------------------------------------- sysctls

/** pkg/kubelet/sysctl/safe_sysctls.go: safe (namespaced and isolated) sysctls, some only from a kernel version on. */
const SAFE_SYSCTLS: readonly { name: string; kernel?: [number, number] }[] = [
  { name: 'kernel.shm_rmid_forced' },
  { name: 'net.ipv4.ip_local_port_range' },
  { name: 'net.ipv4.tcp_syncookies' },
  { name: 'net.ipv4.ping_group_range' },
  { name: 'net.ipv4.ip_unprivileged_port_start' },
  { name: 'net.ipv4.ip_local_reserved_ports', kernel: [3, 16] },
  { name: 'net.ipv4.tcp_keepalive_time', kernel: [4, 5] },
  { name: 'net.ipv4.tcp_fin_timeout', kernel: [4, 6] },
  { name: 'net.ipv4.tcp_keepalive_intvl', kernel: [4, 5] },
  { name: 'net.ipv4.tcp_keepalive_probes', kernel: [4, 5] },
  { name: 'net.ipv4.tcp_rmem' },
  { name: 'net.ipv4.tcp_wmem' },
];

/** The safe sysctls for a kernel release (`os.release()`, e.g. `6.1.0-18-amd64`); an unparsable one gets only those without a version. */
export function safeSysctls(kernelRelease: string): string[] {
  const m = /^(\d+)\.(\d+)/.exec(kernelRelease);
  const v = m ? [Number(m[1]), Number(m[2])] : undefined;
  return SAFE_SYSCTLS.filter((s) => !s.kernel || (v !== undefined && (v[0]! > s.kernel[0] || (v[0] === s.kernel[0] && v[1]! >= s.kernel[1])))).map((s) => s.name);
}

type SysctlNamespace = 'ipc' | 'net';

/** pkg/kubelet/sysctl/namespace.go: the kernel namespace a sysctl (or a prefix) lives in, or undefined when not known to be namespaced. */
export function sysctlNamespace(name: string): SysctlNamespace | undefined {
  if (name === 'kernel.sem') return 'ipc';
  if (name.startsWith('kernel.shm') || name.startsWith('kernel.msg') || name.startsWith('fs.mqueue.')) return 'ipc';
  if (name.startsWith('net.')) return 'net';
  return undefined;
}

const SYSCTL_SEGMENT = '[a-z0-9]([-_a-z0-9]*[a-z0-9])?';
/** A sysctl name or a pattern ending in `*`, segments separated by `.` or `/` (the kubelet's IsValidSysctlPattern). */
const SYSCTL_PATTERN_RE = new RegExp(`^(${SYSCTL_SEGMENT}[./])*(${SYSCTL_SEGMENT}\\*?|\\*)$`);
const SYSCTL_MAX_LENGTH = 253;

/**
 * The sysctl admission handler: allowed are the safe sysctls and the `allowedUnsafeSysctls`
 * names and patterns (`kernel.msg*`). Throws CONFIG_INVALID for a pattern that is malformed
 * or not known to be namespaced, as the kubelet refuses to start with it.
 */
export function sysctlAdmitHandler(safe: readonly string[], allowedUnsafe: readonly string[]): PodAdmitHandler {
  const exact = new Map<string, SysctlNamespace>();
  const prefixes = new Map<string, SysctlNamespace>();
  for (const raw of [...safe, ...allowedUnsafe]) {
    if (typeof raw !== 'string' || raw.length > SYSCTL_MAX_LENGTH || !SYSCTL_PATTERN_RE.test(raw)) {
      throw new NodeletError('CONFIG_INVALID', `allowedUnsafeSysctls: sysctl ${JSON.stringify(raw)} must have at most ${SYSCTL_MAX_LENGTH} characters and be a sysctl name or a pattern ending in "*" (lower-case segments separated by "." or "/")`, { field: 'allowedUnsafeSysctls' });
    }
    const s = normalizeSysctlName(raw);
    const prefix = s.endsWith('*') ? s.slice(0, -1) : undefined;
    const ns = sysctlNamespace(prefix ?? s);
    if (!ns) throw new NodeletError('CONFIG_INVALID', `allowedUnsafeSysctls: the sysctl${prefix !== undefined ? 's' : ''} ${JSON.stringify(s)} are not known to be namespaced`, { field: 'allowedUnsafeSysctls' });
    if (prefix !== undefined) prefixes.set(prefix, ns);
    else exact.set(s, ns);
  }
  const problem = (name: string, hostNet: boolean, hostIPC: boolean): string | undefined => {
    const s = normalizeSysctlName(name);
    let ns = exact.get(s);
    if (ns === undefined) for (const [p, n] of prefixes) if (s.startsWith(p)) ns = n;
    if (ns === undefined) return `${JSON.stringify(s)} not allowlisted`;
    if ((ns === 'ipc' && hostIPC) || (ns === 'net' && hostNet)) return `${JSON.stringify(s)} not allowed with host ${ns} enabled`;
    return undefined;
  };
  return (pod) => {
    for (const s of pod.spec?.securityContext?.sysctls ?? []) {
      const why = problem(String(s.name), pod.spec?.hostNetwork === true, pod.spec?.hostIPC === true);
      if (why) return { reason: 'SysctlForbidden', message: `forbidden sysctl: ${why}` };
    }
    return undefined;
  };
}

// ------------------------------------------------------------------------- AppArmor

function everyContainer(pod: Pod): Container[] {
  const s = pod.spec;
  return [...(s?.initContainers ?? []), ...(s?.containers ?? []), ...((s?.ephemeralContainers ?? []) as Container[])];
}

/** The kubelet's isRequired: some profile other than Unconfined, in a field or the deprecated annotation. */
function appArmorRequired(pod: Pod): boolean {
  const psc = pod.spec?.securityContext?.appArmorProfile;
  if (psc && psc.type !== 'Unconfined') return true;
  if (everyContainer(pod).some((c) => c.securityContext?.appArmorProfile && c.securityContext.appArmorProfile.type !== 'Unconfined')) return true;
  return Object.entries(pod.metadata?.annotations ?? {}).some(([k, v]) => k.startsWith(APPARMOR_ANNOTATION_PREFIX) && v !== 'unconfined');
}

/** The AppArmor admission handler, for a host with or without AppArmor (hostAppArmorEnabled). */
export function appArmorAdmitHandler(hostEnabled: boolean): PodAdmitHandler {
  return (pod) => {
    if (!appArmorRequired(pod)) return undefined;
    const reject = (why: string): Rejection => ({ reason: 'AppArmor', message: `Cannot enforce AppArmor: ${why}` });
    if (!hostEnabled) return reject('AppArmor is not enabled on the host');
    for (const c of everyContainer(pod)) {
      const p = appArmorProfile(pod, c);
      if (p?.type === 'Localhost' && !p.localhostProfile?.trim()) return reject(`invalid empty AppArmor profile name for container ${c.name}`);
    }
    return undefined;
  };
}

/** runc's test for AppArmor (libcontainer/apparmor.IsEnabled): its module says `Y`. */
export async function hostAppArmorEnabled(file = '/sys/module/apparmor/parameters/enabled'): Promise<boolean> {
  try {
    return (await fs.readFile(file, 'utf8')).startsWith('Y');
  } catch {
    return false;
  }
}

// ------------------------------------------------------------------------- user namespaces

/** `hostUsers: false` is refused: nodelet makes no user namespace mappings. */
export const userNamespaceAdmitHandler: PodAdmitHandler = (pod) =>
  pod.spec?.hostUsers === false
    ? {
        reason: 'UserNamespacesNotSupported',
        message: 'spec.hostUsers: false asks for a user namespace, which nodelet does not set up (it makes no user namespace ID mappings, and containerd 1.6 cannot apply them)',
      }
    : undefined;

/**
 * Strict supplemental groups need the runtime (StatusResponse.features); `supported` is
 * what its last Status said (false, or undefined when it has not answered yet: refused).
 */
export function supplementalGroupsPolicyAdmitHandler(supported: () => boolean | undefined): PodAdmitHandler {
  return (pod) => {
    const policy = (pod.spec?.securityContext as { supplementalGroupsPolicy?: unknown } | undefined)?.supplementalGroupsPolicy;
    if (policy !== 'Strict' || supported() === true) return undefined;
    return { reason: 'SupplementalGroupsPolicyNotSupported', message: 'SupplementalGroupsPolicy=Strict is not supported in this node' };
  };
}

// ------------------------------------------------------------------------- eviction

/** How the eviction manager ends a pod (PodManager.evict): status reason and message, and the kill's grace period. */
export interface Eviction {
  reason: string;
  message: string;
  gracePeriodSeconds: number;
  /** false: no DisruptionTarget condition (local storage limits, as the kubelet); default true. */
  disruptionTarget?: boolean;
}

/** The kubelet's IsCriticalPod (src/pods/cri/swap.ts): never evicted, admitted under pressure. */
export { isCriticalPod };

const MEMORY_PRESSURE_TAINT = 'node.kubernetes.io/memory-pressure';

/** Whether a toleration tolerates the memory-pressure NoSchedule taint (no value), as corev1helpers.ToleratesTaint. */
function toleratesMemoryPressure(t: NonNullable<NonNullable<Pod['spec']>['tolerations']>[number]): boolean {
  if (t.effect && t.effect !== 'NoSchedule') return false;
  if (t.operator === 'Exists') return !t.key || t.key === MEMORY_PRESSURE_TAINT;
  return (t.operator === undefined || t.operator === '' || t.operator === 'Equal') && t.key === MEMORY_PRESSURE_TAINT && (t.value ?? '') === '';
}

/**
 * The eviction admission handler on the node's pressure conditions as the eviction manager
 * last decided them (MemoryPressure, DiskPressure, PIDPressure, in that order); see the
 * file comment.
 */
export function evictionAdmitHandler(conditions: () => readonly string[]): PodAdmitHandler {
  return (pod) => {
    const now = conditions();
    if (now.length === 0 || isCriticalPod(pod)) return undefined;
    if (now.length === 1 && now[0] === 'MemoryPressure' && (qosClass(pod) !== 'BestEffort' || (pod.spec?.tolerations ?? []).some(toleratesMemoryPressure))) return undefined;
    return { reason: 'Evicted', message: `The node had condition: [${now.join(' ')}]. ` };
  };
}

export interface AdmissionOptions {
  /** The node's pressure conditions (the eviction manager's); unset: no eviction admission. */
  pressureConditions?: () => readonly string[];
  /** The kernel release (`os.release()`): which safe sysctls it namespaces. */
  kernelRelease: string;
  /** The config's allowedUnsafeSysctls. */
  allowedUnsafeSysctls?: readonly string[];
  /** Whether the host enforces AppArmor (hostAppArmorEnabled). */
  appArmorEnabled: boolean;
  /** Whether the runtime's last Status said it supports supplementalGroupsPolicy (undefined: not known yet). Default: never. */
  runtimeSupportsSupplementalGroupsPolicy?: () => boolean | undefined;
  /** The node and how to tell static pods, for the predicate checks; unset: none made. */
  predicates?: PredicateOptions;
}

/** The most containers (init, app and ephemeral) nodelet runs in one pod (see above). */
export const MAX_CONTAINERS_PER_POD = 1024;

export function containerCountAdmitHandler(pod: Pod): Rejection | undefined {
  const s = pod.spec;
  const n = (s?.initContainers?.length ?? 0) + (s?.containers?.length ?? 0) + (s?.ephemeralContainers?.length ?? 0);
  if (n <= MAX_CONTAINERS_PER_POD) return undefined;
  return { reason: 'TooManyContainers', message: `the pod has ${n} containers; nodelet runs at most ${MAX_CONTAINERS_PER_POD} in one pod` };
}

/** The kubelet's predicate admit handler (predicates.ts). */
export function predicateAdmitHandler(o: PredicateOptions): PodAdmitHandler {
  return (pod, others = []) => checkPredicates(pod, others, o);
}

/** The node's admission handlers, in order. Throws CONFIG_INVALID for a bad allowedUnsafeSysctls entry. */
export function podAdmitHandlers(o: AdmissionOptions): PodAdmitHandler[] {
  return [
    containerCountAdmitHandler,
    ...(o.pressureConditions ? [evictionAdmitHandler(o.pressureConditions)] : []),
    sysctlAdmitHandler(safeSysctls(o.kernelRelease), o.allowedUnsafeSysctls ?? []),
    appArmorAdmitHandler(o.appArmorEnabled),
    userNamespaceAdmitHandler,
    supplementalGroupsPolicyAdmitHandler(o.runtimeSupportsSupplementalGroupsPolicy ?? (() => false)),
    ...(o.predicates ? [predicateAdmitHandler(o.predicates)] : []),
  ];
}
