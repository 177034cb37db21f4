/**
 * The pod's and its containers' securityContext as the kubelet hands it to CRI
 * (kuberuntime's generatePodSandboxLinuxConfig, determineEffectiveSecurityContext,
 * convertToRuntimeSecurityContext, verifyRunAsNonRoot; pkg/securitycontext). Pure: the
 * adapter (cri-pod-runtime.ts) gives the image's user from ImageStatus, cri-config.ts puts
 * the results into the sandbox and container configs.
 *
 * Capabilities go as the pod names them (`NET_ADMIN`, `ALL`): the runtime adds the `CAP_`
 * prefix, as with the kubelet. What the runtime or the host cannot do is refused before
 * this (admission.ts), never dropped here.
 */
import type { AppArmorProfile, Container, Pod, PodSecurityContext, SecurityContext } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../errors.js';

type CriObject = Record<string, unknown>;

/** pkg/securitycontext: the paths a `Default` procMount masks, and those it makes read-only (moby's defaults). */
export const DEFAULT_MASKED_PATHS: readonly string[] = [
  '/proc/asound',
  '/proc/acpi',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
];
export const DEFAULT_READONLY_PATHS: readonly string[] = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];

/** The deprecated AppArmor annotation (`container.apparmor.security.beta.kubernetes.io/<container>`), still read by the kubelet. */
export const APPARMOR_ANNOTATION_PREFIX = 'container.apparmor.security.beta.kubernetes.io/';

/** What the image says its process runs as (CRI Image.uid / Image.username). */
export interface ImageUser {
  uid?: number;
  username?: string;
}

/**
 * The kubelet's getImageUser: the image's numeric user when it has one, else its user name,
 * else root (an image that names no user runs as root).
 */
export function imageUser(image: { uid?: { value: number } | null; username?: string } | undefined): ImageUser {
  if (image?.uid) return { uid: image.uid.value };
  if (image?.username) return { username: image.username };
  return { uid: 0 };
}

/** Every container of the pod (init, regular, ephemeral), as the kubelet's VisitContainers. */
function allContainers(pod: Pod): Container[] {
  const s = pod.spec;
  return [...(s?.initContainers ?? []), ...(s?.containers ?? []), ...((s?.ephemeralContainers ?? []) as Container[])];
}

/** kubecontainer.HasPrivilegedContainer: the sandbox must be privileged for any container of the pod to be (containerd refuses otherwise). */
export function hasPrivilegedContainer(pod: Pod): boolean {
  return allContainers(pod).some((c) => c.securityContext?.privileged === true);
}

/** securitycontext.DetermineEffectiveSecurityContext: the container's settings over the pod's, for the fields the pod level has. */
export function effectiveSecurityContext(pod: Pod, c: Container): SecurityContext {
  const psc: PodSecurityContext = pod.spec?.securityContext ?? {};
  const sc: SecurityContext = { ...(c.securityContext ?? {}) };
  if (sc.seLinuxOptions === undefined && psc.seLinuxOptions !== undefined) sc.seLinuxOptions = psc.seLinuxOptions;
  if (sc.runAsUser === undefined && psc.runAsUser !== undefined) sc.runAsUser = psc.runAsUser;
  if (sc.runAsGroup === undefined && psc.runAsGroup !== undefined) sc.runAsGroup = psc.runAsGroup;
  if (sc.runAsNonRoot === undefined && psc.runAsNonRoot !== undefined) sc.runAsNonRoot = psc.runAsNonRoot;
  return sc;
}

/** The pod-level groups every container gets: fsGroup first, then supplementalGroups (the kubelet's order). */
function podGroups(psc: PodSecurityContext | undefined): number[] {
  return [...(psc?.fsGroup !== undefined ? [psc.fsGroup] : []), ...(psc?.supplementalGroups ?? [])];
}

function groupsPolicy(psc: PodSecurityContext | undefined): CriObject {
  // Newer than the kubernetes-types release in use (1.31 alpha, beta since 1.33).
  const p = (psc as { supplementalGroupsPolicy?: unknown } | undefined)?.supplementalGroupsPolicy;
  if (p === undefined) return {};
  if (p !== 'Merge' && p !== 'Strict') throw new NodeletError('INVALID_ARGUMENT', `unsupported supplementalGroupsPolicy: ${String(p)}`, { reason: 'CreateContainerConfigError' });
  return { supplementalGroupsPolicy: p };
}

function seLinux(o: { user?: string; role?: string; type?: string; level?: string } | undefined): CriObject {
  return o ? { selinuxOptions: { user: o.user ?? '', role: o.role ?? '', type: o.type ?? '', level: o.level ?? '' } } : {};
}

/**
 * The sandbox's LinuxSandboxSecurityContext, as generatePodSandboxLinuxConfig: privileged
 * when any container is, the runtime's default seccomp for the pause process, and the
 * pod-level user, groups and SELinux options.
 */
export function sandboxSecurityContext(pod: Pod, namespaceOptions: CriObject): CriObject {
  const psc = pod.spec?.securityContext;
  const groups = podGroups(psc);
  return {
    namespaceOptions,
    privileged: hasPrivilegedContainer(pod),
    seccomp: { profileType: 'RuntimeDefault', localhostRef: '' },
    ...(psc?.runAsUser !== undefined ? { runAsUser: { value: psc.runAsUser } } : {}),
    ...(psc?.runAsGroup !== undefined ? { runAsGroup: { value: psc.runAsGroup } } : {}),
    ...(groups.length ? { supplementalGroups: groups } : {}),
    ...groupsPolicy(psc),
    ...seLinux(psc?.seLinuxOptions),
  };
}

/** Sysctl names with `/` as the separator (`net/ipv4/ip_forward`) in the dotted form, as the kubelet normalizes them (`.` and `/` swapped). */
export function normalizeSysctlName(name: string): string {
  const i = name.search(/[./]/);
  if (i === -1 || name[i] === '.') return name;
  return name.replace(/[./]/g, (ch) => (ch === '.' ? '/' : '.'));
}

/** The pod's sysctls for the sandbox, names normalized. */
export function podSysctls(pod: Pod): Record<string, string> {
  return Object.fromEntries((pod.spec?.securityContext?.sysctls ?? []).map((s) => [normalizeSysctlName(s.name), s.value]));
}

/** apparmor.GetProfile: the container's field, then the deprecated annotation, then the pod's field. */
export function appArmorProfile(pod: Pod, c: Container): AppArmorProfile | undefined {
  const own = c.securityContext?.appArmorProfile;
  if (own) return own;
  const ann = pod.metadata?.annotations?.[APPARMOR_ANNOTATION_PREFIX + c.name];
  if (ann !== undefined) {
    if (ann === 'runtime/default') return { type: 'RuntimeDefault' };
    if (ann === 'unconfined') return { type: 'Unconfined' };
    if (ann.startsWith('localhost/')) return { type: 'Localhost', localhostProfile: ann.slice('localhost/'.length) };
  }
  return pod.spec?.securityContext?.appArmorProfile;
}

/** The CRI AppArmor profile and its deprecated string form (what runtimes before the `apparmor` field, containerd 1.6 among them, read). */
function appArmor(pod: Pod, c: Container): CriObject {
  const p = appArmorProfile(pod, c);
  if (!p) return {};
  switch (p.type) {
    case 'RuntimeDefault':
      return { apparmor: { profileType: 'RuntimeDefault', localhostRef: '' }, apparmorProfile: 'runtime/default' };
    case 'Unconfined':
      return { apparmor: { profileType: 'Unconfined', localhostRef: '' }, apparmorProfile: 'unconfined' };
    case 'Localhost':
      if (!p.localhostProfile) throw new NodeletError('INVALID_ARGUMENT', 'missing localhost apparmor profile name', { reason: 'CreateContainerConfigError' });
      return { apparmor: { profileType: 'Localhost', localhostRef: p.localhostProfile }, apparmorProfile: `localhost/${p.localhostProfile}` };
    default:
      throw new NodeletError('INVALID_ARGUMENT', `unknown apparmor profile type: ${JSON.stringify(p.type)}`, { reason: 'CreateContainerConfigError' });
  }
}

export interface ContainerSecurityOptions {
  namespaceOptions: CriObject;
  /** The resolved seccomp profile (seccomp.ts). */
  seccomp: { profileType: string; localhostRef?: string };
  /** The image's user (imageUser); unset: none is passed and the runtime uses the image's. */
  image?: ImageUser;
}

/**
 * The container's LinuxContainerSecurityContext, as determineEffectiveSecurityContext:
 * the effective settings, the image's user when none is set, the pod's fsGroup and
 * supplementalGroups (and their policy), no_new_privs from allowPrivilegeEscalation: false,
 * masked and read-only paths per procMount (none for `Unmasked`), AppArmor.
 */
export function containerSecurityContext(pod: Pod, c: Container, o: ContainerSecurityOptions): CriObject {
  const sc = effectiveSecurityContext(pod, c);
  const psc = pod.spec?.securityContext;
  const caps = sc.capabilities;
  const unmasked = sc.procMount === 'Unmasked';
  const groups = podGroups(psc);
  const user: CriObject =
    sc.runAsUser !== undefined
      ? { runAsUser: { value: sc.runAsUser } }
      : { ...(o.image?.uid !== undefined ? { runAsUser: { value: o.image.uid } } : {}), ...(o.image?.username ? { runAsUsername: o.image.username } : {}) };
  return {
    ...(caps ? { capabilities: { addCapabilities: [...(caps.add ?? [])], dropCapabilities: [...(caps.drop ?? [])] } } : {}),
    privileged: sc.privileged === true,
    namespaceOptions: o.namespaceOptions,
    ...seLinux(sc.seLinuxOptions),
    ...user,
    ...(sc.runAsGroup !== undefined ? { runAsGroup: { value: sc.runAsGroup } } : {}),
    readonlyRootfs: sc.readOnlyRootFilesystem === true,
    ...(groups.length ? { supplementalGroups: groups } : {}),
    ...groupsPolicy(psc),
    noNewPrivs: sc.allowPrivilegeEscalation === false,
    maskedPaths: unmasked ? [] : [...DEFAULT_MASKED_PATHS],
    readonlyPaths: unmasked ? [] : [...DEFAULT_READONLY_PATHS],
    seccomp: { profileType: o.seccomp.profileType, localhostRef: o.seccomp.localhostRef ?? '' },
    ...appArmor(pod, c),
  };
}

/** format.Pod: `<name>_<namespace>(<uid>)`. */
function podDesc(pod: Pod): string {
  return `${pod.metadata?.name ?? ''}_${pod.metadata?.namespace ?? 'default'}(${pod.metadata?.uid ?? ''})`;
}

const MAX_INT32 = 2147483647;

/**
 * verifyRunAsNonRoot: with runAsNonRoot true, the user the container will run as must be
 * known and not root. Returns the kubelet's message (the container then waits in
 * CreateContainerConfigError), or undefined when it may run.
 */
export function runAsNonRootProblem(pod: Pod, c: Container, image: ImageUser): string | undefined {
  const sc = effectiveSecurityContext(pod, c);
  if (sc.runAsNonRoot !== true) return undefined;
  const where = `(pod: ${JSON.stringify(podDesc(pod))}, container: ${c.name})`;
  if (sc.runAsUser !== undefined) return sc.runAsUser === 0 ? `container's runAsUser breaks non-root policy ${where}` : undefined;
  if (image.uid === undefined && image.username) return `container has runAsNonRoot and image has non-numeric user (${image.username}), cannot verify user is non-root ${where}`;
  if (image.uid === undefined) return undefined;
  if (image.uid === 0) return `container has runAsNonRoot and image will run as root ${where}`;
  if (image.uid < 0 || image.uid > MAX_INT32) {
    return `container has runAsNonRoot and image has an invalid user id (${image.uid}). (Must be 1-(${MAX_INT32})): must be between 0 and ${MAX_INT32}, inclusive ${where}`;
  }
  return undefined;
}
