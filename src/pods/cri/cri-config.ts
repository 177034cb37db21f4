/**
 * Pod and container specs -> CRI PodSandboxConfig / ContainerConfig, as the kubelet
 * builds them: its labels and annotations (so a restarted nodelet finds and adopts its
 * containers by label), host namespaces, resources as Linux cgroup values, seccomp.
 * Pure: the adapter sends the result. Field names are proto-loader's camelCase of the
 * CRI runtime.v1 messages; enums are their string names.
 */
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import type { DNSConfig } from '../../runtime/types.js';
import { podHostname } from './dns.js';
import { containerEnv, type EnvObjects, type EnvWarning } from './env.js';
import { containerHash } from '../sync/plan.js';
import { applyContainerSwap, type NodeSwap } from './swap.js';
import { containerSecurityContext, podSysctls, sandboxSecurityContext, type ImageUser } from './security-context.js';

import {
  ANN_CONTAINER_HASH,
  ANN_GRACE_PERIOD,
  ANN_PORTS,
  ANN_RESTART_COUNT,
  ANN_TERMINATION_MESSAGE_PATH,
  ANN_TERMINATION_MESSAGE_POLICY,
  LABEL_CONTAINER_NAME,
  LABEL_NODELET_NODE,
  LABEL_POD_NAME,
  LABEL_POD_NAMESPACE,
  LABEL_POD_UID,
} from './labels.js';
export interface SandboxOptions {
  /** `<podLogsDir>/<namespace>_<name>_<uid>` directory for container logs. */
  logDirectory: string;
  /** The pod's DNS (dns.ts podDnsConfig); unset: the runtime's default. */
  dnsConfig?: DNSConfig;
  /** For the hostname's domain (`spec.subdomain`); '' when none. */
  clusterDomain?: string;
  /** This node's name: written as LABEL_NODELET_NODE so that another agent on the same runtime leaves the sandbox alone. */
  nodeName?: string;
  /** The pod's cgroup (src/pods/cgroups), as LinuxPodSandboxConfig.cgroup_parent; unset: the runtime's default. */
  cgroupParent?: string;
}

type CriObject = Record<string, unknown>;

function podLabels(pod: Pod): Record<string, string> {
  return {
    ...(pod.metadata?.labels ?? {}),
    [LABEL_POD_NAME]: pod.metadata!.name!,
    [LABEL_POD_NAMESPACE]: pod.metadata!.namespace ?? 'default',
    [LABEL_POD_UID]: pod.metadata!.uid!,
  };
}

function namespaceOptions(pod: Pod): CriObject {
  const s: Partial<NonNullable<Pod['spec']>> = pod.spec ?? {};
  return {
    network: s.hostNetwork ? 'NODE' : 'POD',
    pid: s.hostPID ? 'NODE' : s.shareProcessNamespace ? 'POD' : 'CONTAINER',
    ipc: s.hostIPC ? 'NODE' : 'POD',
  };
}

export function sandboxConfig(pod: Pod, attempt: number, o: SandboxOptions): CriObject {
  const spec = pod.spec ?? { containers: [] };
  const ports = spec.containers.flatMap((c) =>
    (c.ports ?? []).filter((p) => p.hostPort).map((p) => ({ protocol: p.protocol ?? 'TCP', containerPort: p.containerPort, hostPort: p.hostPort, hostIp: p.hostIP ?? '' })),
  );
  const cfg: CriObject = {
    metadata: { name: pod.metadata!.name, uid: pod.metadata!.uid, namespace: pod.metadata!.namespace ?? 'default', attempt },
    logDirectory: o.logDirectory,
    labels: { ...podLabels(pod), ...(o.nodeName ? { [LABEL_NODELET_NODE]: o.nodeName } : {}) },
    annotations: { ...(pod.metadata?.annotations ?? {}) },
    portMappings: ports,
    linux: {
      ...(o.cgroupParent ? { cgroupParent: o.cgroupParent } : {}),
      securityContext: sandboxSecurityContext(pod, namespaceOptions(pod)),
      sysctls: podSysctls(pod),
    },
  };
  // containerd refuses a hostname for a sandbox in the host's UTS namespace (FACTS.md);
  // the kubelet sets it only for pods with their own network.
  if (!spec.hostNetwork) cfg.hostname = podHostname(pod, o.clusterDomain ?? '').hostname;
  // Every policy gives a config (Default is the host's resolv.conf), host network included.
  if (o.dnsConfig) cfg.dnsConfig = o.dnsConfig;
  return cfg;
}

export interface ContainerOptions {
  restartCount: number;
  seccomp: { profileType: 'RuntimeDefault' | 'Unconfined' | 'Localhost'; localhostRef?: string };
  /** Parses a resource quantity to base units (cores for cpu, bytes for memory). */
  quantity: (q: string | number) => number;
  /** For the downward API in env: the node's name and IP. */
  nodeName?: string;
  hostIP?: string;
  /** The pod's IPs from its sandbox (a pod with its own network); a hostNetwork pod's are the node's. */
  podIPs?: string[];
  /** The node's swap (memorySwap.swapBehavior and host facts); unset: no swap field is set (swap.ts). */
  swap?: NodeSwap;
  /** The image's user (ImageStatus): the container runs as it unless runAsUser is set, as the kubelet's. */
  imageUser?: ImageUser;
  /** What env read from the API for this start (env-sources.ts); unset on a standalone node. */
  envObjects?: EnvObjects;
  /** The node's allocatable, for the downward API's unset limits (env.ts). */
  allocatable?: Readonly<Record<string, string>>;
  /** Gets env's warnings (InvalidEnvironmentVariableNames), to record on the pod. */
  onEnvWarning?: (w: EnvWarning) => void;
  /**
   * An ephemeral container's target (its targetContainerName's container ID): it joins that
   * container's PID namespace (NamespaceMode TARGET), as the kubelet's
   * generateLinuxContainerConfig does when the pod's PID mode is CONTAINER (with hostPID or
   * shareProcessNamespace every container already shares one).
   */
  targetContainerId?: string;
  /** LinuxContainerResources.oom_score_adj (src/pods/cgroups/resources.ts containerOomScoreAdjust); unset: not sent. */
  oomScoreAdj?: number;
}

/** The container's namespaces: the pod's, with the PID namespace of an ephemeral container's target. */
function containerNamespaceOptions(pod: Pod, targetContainerId: string | undefined): CriObject {
  const ns = namespaceOptions(pod);
  return targetContainerId && ns.pid === 'CONTAINER' ? { ...ns, pid: 'TARGET', targetId: targetContainerId } : ns;
}

export function containerConfig(pod: Pod, c: Container, o: ContainerOptions): CriObject {
  // A hostNetwork pod's IP is the node's; another pod's is its sandbox's (created first, so known here).
  const podIPs = pod.spec?.hostNetwork ? (o.hostIP ? [o.hostIP] : []) : (o.podIPs ?? []);
  const env = containerEnv(pod, c, {
    quantity: o.quantity,
    ...(o.nodeName ? { nodeName: o.nodeName } : {}),
    ...(o.hostIP ? { hostIP: o.hostIP } : {}),
    ...(podIPs.length ? { podIP: podIPs[0]!, podIPs } : {}),
    ...(o.envObjects ? { objects: o.envObjects } : {}),
    ...(o.allocatable ? { allocatable: o.allocatable } : {}),
  });
  for (const w of env.warnings) o.onEnvWarning?.(w);
  const limits = c.resources?.limits ?? {};
  const requests = { ...limits, ...(c.resources?.requests ?? {}) };
  const resources: CriObject = {};
  if (limits.cpu !== undefined) {
    const period = 100_000;
    resources.cpuPeriod = period;
    resources.cpuQuota = Math.max(1000, Math.round(o.quantity(limits.cpu) * period));
  }
  resources.cpuShares = requests.cpu !== undefined ? Math.max(2, Math.round(o.quantity(requests.cpu) * 1024)) : 2;
  if (limits.memory !== undefined) resources.memoryLimitInBytes = Math.round(o.quantity(limits.memory));
  if (o.oomScoreAdj !== undefined) resources.oomScoreAdj = o.oomScoreAdj;
  if (o.swap) applyContainerSwap(resources, pod, c, o.swap, o.quantity);
  const ports = (c.ports ?? []).map((p) => ({ containerPort: p.containerPort, protocol: p.protocol ?? 'TCP', ...(p.name ? { name: p.name } : {}) }));
  return {
    metadata: { name: c.name, attempt: o.restartCount },
    image: { image: c.image },
    command: env.command,
    args: env.args,
    workingDir: c.workingDir ?? '',
    envs: env.envs,
    labels: {
      [LABEL_POD_NAME]: pod.metadata!.name!,
      [LABEL_POD_NAMESPACE]: pod.metadata!.namespace ?? 'default',
      [LABEL_POD_UID]: pod.metadata!.uid!,
      [LABEL_CONTAINER_NAME]: c.name,
    },
    annotations: {
      [ANN_CONTAINER_HASH]: containerHash(c),
      [ANN_RESTART_COUNT]: String(o.restartCount),
      [ANN_TERMINATION_MESSAGE_PATH]: c.terminationMessagePath ?? '/dev/termination-log',
      [ANN_TERMINATION_MESSAGE_POLICY]: c.terminationMessagePolicy ?? 'File',
      [ANN_GRACE_PERIOD]: String(pod.spec?.terminationGracePeriodSeconds ?? 30),
      ...(ports.length ? { [ANN_PORTS]: JSON.stringify(ports) } : {}),
    },
    logPath: `${c.name}/${o.restartCount}.log`,
    stdin: !!c.stdin,
    stdinOnce: !!c.stdinOnce,
    tty: !!c.tty,
    linux: {
      resources,
      securityContext: containerSecurityContext(pod, c, { namespaceOptions: containerNamespaceOptions(pod, o.targetContainerId), seccomp: o.seccomp, ...(o.imageUser ? { image: o.imageUser } : {}) }),
    },
  };
}
