/**
 * The kubelet's command-line flags that kubeadm (`kubeadm-flags.env`, `10-kubeadm.conf`) and
 * the managed node images (EKS, GKE, AKS bootstrap scripts) pass, beyond those main.ts
 * declares itself: each sets a KubeletConfiguration field (as the kubelet's deprecated
 * config flags do, winning over the files), or is one of the kubelet's flag-only settings
 * (`--node-labels`, `--cloud-provider`), or is accepted with a warning because nodelet has
 * no use for it (`--pod-infra-container-image`, as the kubelet since 1.27). Flags the kubelet
 * removed are refused naming the flag and the release that removed it; any other unknown
 * flag is refused by commander (`error: unknown option '--x'`), exit code 1, as the kubelet.
 *
 * Pure: parses strings, throws INVALID_ARGUMENT naming the flag; the config validation
 * (src/config/validate.ts) checks the values of the config fields afterwards.
 */
import type { Taint } from 'kubernetes-types/core/v1.js';
import { NodeletError } from './errors.js';

type Kind = 'string' | 'bool' | 'int' | 'number' | 'map' | 'list' | 'eviction' | 'taints';

/** `--flag` -> KubeletConfiguration path, the value's kind, help. */
export const CONFIG_FLAGS: readonly { flag: string; path: readonly string[]; kind: Kind; help: string }[] = [
  { flag: 'register-with-taints', path: ['registerWithTaints'], kind: 'taints', help: 'registerWithTaints: taints the Node registers with, <key>=<value>:<effect>[,...]' },
  { flag: 'provider-id', path: ['providerID'], kind: 'string', help: 'providerID: the Node\'s spec.providerID, e.g. aws:///us-east-1a/i-0abc' },
  { flag: 'rotate-certificates', path: ['rotateCertificates'], kind: 'bool', help: 'rotateCertificates' },
  { flag: 'rotate-server-certificates', path: ['serverTLSBootstrap'], kind: 'bool', help: 'serverTLSBootstrap: request the serving certificate from the cluster' },
  { flag: 'register-node', path: ['registerNode'], kind: 'bool', help: 'registerNode' },
  { flag: 'cgroup-driver', path: ['cgroupDriver'], kind: 'string', help: 'cgroupDriver: cgroupfs or systemd' },
  { flag: 'cgroup-root', path: ['cgroupRoot'], kind: 'string', help: 'cgroupRoot' },
  { flag: 'cgroups-per-qos', path: ['cgroupsPerQOS'], kind: 'bool', help: 'cgroupsPerQOS' },
  { flag: 'kubelet-cgroups', path: ['kubeletCgroups'], kind: 'string', help: 'kubeletCgroups' },
  { flag: 'system-cgroups', path: ['systemCgroups'], kind: 'string', help: 'systemCgroups' },
  { flag: 'kube-reserved-cgroup', path: ['kubeReservedCgroup'], kind: 'string', help: 'kubeReservedCgroup' },
  { flag: 'system-reserved-cgroup', path: ['systemReservedCgroup'], kind: 'string', help: 'systemReservedCgroup' },
  { flag: 'enforce-node-allocatable', path: ['enforceNodeAllocatable'], kind: 'list', help: 'enforceNodeAllocatable, comma-separated' },
  { flag: 'kube-reserved', path: ['kubeReserved'], kind: 'map', help: 'kubeReserved: cpu=100m,memory=256Mi,...' },
  { flag: 'system-reserved', path: ['systemReserved'], kind: 'map', help: 'systemReserved: cpu=100m,memory=256Mi,...' },
  { flag: 'eviction-hard', path: ['evictionHard'], kind: 'eviction', help: 'evictionHard: memory.available<100Mi,nodefs.available<10%,...' },
  { flag: 'resolv-conf', path: ['resolvConf'], kind: 'string', help: 'resolvConf' },
  { flag: 'pod-cidr', path: ['podCIDR'], kind: 'string', help: 'podCIDR' },
  { flag: 'hairpin-mode', path: ['hairpinMode'], kind: 'string', help: 'hairpinMode' },
  { flag: 'runtime-request-timeout', path: ['runtimeRequestTimeout'], kind: 'string', help: 'runtimeRequestTimeout' },
  { flag: 'serialize-image-pulls', path: ['serializeImagePulls'], kind: 'bool', help: 'serializeImagePulls' },
  { flag: 'image-gc-high-threshold', path: ['imageGCHighThresholdPercent'], kind: 'int', help: 'imageGCHighThresholdPercent' },
  { flag: 'image-gc-low-threshold', path: ['imageGCLowThresholdPercent'], kind: 'int', help: 'imageGCLowThresholdPercent' },
  { flag: 'node-status-update-frequency', path: ['nodeStatusUpdateFrequency'], kind: 'string', help: 'nodeStatusUpdateFrequency' },
  { flag: 'node-status-max-images', path: ['nodeStatusMaxImages'], kind: 'int', help: 'nodeStatusMaxImages' },
  { flag: 'sync-frequency', path: ['syncFrequency'], kind: 'string', help: 'syncFrequency' },
  { flag: 'file-check-frequency', path: ['fileCheckFrequency'], kind: 'string', help: 'fileCheckFrequency' },
  { flag: 'volume-plugin-dir', path: ['volumePluginDir'], kind: 'string', help: 'volumePluginDir' },
  { flag: 'anonymous-auth', path: ['authentication', 'anonymous', 'enabled'], kind: 'bool', help: 'authentication.anonymous.enabled' },
  { flag: 'authentication-token-webhook', path: ['authentication', 'webhook', 'enabled'], kind: 'bool', help: 'authentication.webhook.enabled' },
  { flag: 'client-ca-file', path: ['authentication', 'x509', 'clientCAFile'], kind: 'string', help: 'authentication.x509.clientCAFile' },
  { flag: 'authorization-mode', path: ['authorization', 'mode'], kind: 'string', help: 'authorization.mode: AlwaysAllow or Webhook' },
  { flag: 'kube-api-qps', path: ['kubeAPIQPS'], kind: 'number', help: 'kubeAPIQPS' },
  { flag: 'kube-api-burst', path: ['kubeAPIBurst'], kind: 'int', help: 'kubeAPIBurst' },
  { flag: 'event-qps', path: ['eventRecordQPS'], kind: 'number', help: 'eventRecordQPS' },
  { flag: 'event-burst', path: ['eventBurst'], kind: 'int', help: 'eventBurst' },
  { flag: 'registry-qps', path: ['registryPullQPS'], kind: 'number', help: 'registryPullQPS' },
  { flag: 'registry-burst', path: ['registryBurst'], kind: 'int', help: 'registryBurst' },
  { flag: 'protect-kernel-defaults', path: ['protectKernelDefaults'], kind: 'bool', help: 'protectKernelDefaults' },
  { flag: 'seccomp-default', path: ['seccompDefault'], kind: 'bool', help: 'seccompDefault' },
  { flag: 'streaming-connection-idle-timeout', path: ['streamingConnectionIdleTimeout'], kind: 'string', help: 'streamingConnectionIdleTimeout' },
  { flag: 'max-open-files', path: ['maxOpenFiles'], kind: 'int', help: 'maxOpenFiles' },
  { flag: 'oom-score-adj', path: ['oomScoreAdj'], kind: 'int', help: 'oomScoreAdj' },
  { flag: 'cpu-manager-policy', path: ['cpuManagerPolicy'], kind: 'string', help: 'cpuManagerPolicy' },
  { flag: 'topology-manager-policy', path: ['topologyManagerPolicy'], kind: 'string', help: 'topologyManagerPolicy' },
  { flag: 'container-log-max-size', path: ['containerLogMaxSize'], kind: 'string', help: 'containerLogMaxSize' },
  { flag: 'container-log-max-files', path: ['containerLogMaxFiles'], kind: 'int', help: 'containerLogMaxFiles' },
  { flag: 'pod-max-pids', path: ['podPidsLimit'], kind: 'int', help: 'podPidsLimit' },
  { flag: 'allowed-unsafe-sysctls', path: ['allowedUnsafeSysctls'], kind: 'list', help: 'allowedUnsafeSysctls, comma-separated' },
];

/** Flag-only settings nodelet accepts and does not use: the warning each gives. */
export const IGNORED_FLAGS: readonly { flag: string; help: string; warning: string }[] = [
  {
    flag: 'pod-infra-container-image',
    help: 'deprecated, ignored: the runtime\'s sandbox image is used (set it in the runtime)',
    warning: '--pod-infra-container-image is deprecated and ignored, as by the kubelet since 1.27: the container runtime\'s own sandbox (pause) image is used; set the same image in the runtime (containerd: sandbox_image)',
  },
  { flag: 'runtime-cgroups', help: 'ignored: nodelet does not manage the runtime\'s cgroup', warning: '--runtime-cgroups is ignored: nodelet does not move or account the container runtime\'s cgroup' },
  {
    flag: 'image-credential-provider-config',
    help: 'not supported: image credential provider plugins are not run',
    warning: '--image-credential-provider-config is ignored: nodelet does not run image credential provider plugins; images from registries that need one (ECR, GAR, ACR) pull only with imagePullSecrets',
  },
  { flag: 'image-credential-provider-bin-dir', help: 'not supported (see --image-credential-provider-config)', warning: '--image-credential-provider-bin-dir is ignored: nodelet does not run image credential provider plugins' },
];

/** Flags the kubelet removed: refused with the release that removed them. */
export const REMOVED_FLAGS: Readonly<Record<string, string>> = {
  'container-runtime': '1.27 (the runtime is always a CRI endpoint: --container-runtime-endpoint)',
  'network-plugin': '1.24 with dockershim (the runtime configures CNI)',
  'network-plugin-mtu': '1.24 with dockershim',
  'cni-bin-dir': '1.24 with dockershim (the runtime configures CNI)',
  'cni-conf-dir': '1.24 with dockershim (the runtime configures CNI)',
  'cni-cache-dir': '1.24 with dockershim',
  'docker-endpoint': '1.24 with dockershim',
  'image-pull-progress-deadline': '1.24 with dockershim',
  'non-masquerade-cidr': '1.24 with dockershim',
  'dynamic-config-dir': '1.24 (dynamic kubelet configuration)',
  'experimental-dockershim-root-directory': '1.24 with dockershim',
};

/** `--name`: commander's camelCase key. */
export function optionKey(flag: string): string {
  return flag.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());
}

function bad(flag: string, v: string, what: string): NodeletError {
  return new NodeletError('INVALID_ARGUMENT', `--${flag}: ${JSON.stringify(v)} ${what}`, { flag });
}

/** `a=b,c=d` (the kubelet's map flags); a pair without `=` is refused. */
function parseMap(flag: string, v: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of v.split(',').map((s) => s.trim()).filter(Boolean)) {
    const i = part.indexOf('=');
    if (i <= 0) throw bad(flag, part, 'is not <key>=<value>');
    out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

/** `memory.available<100Mi,...` (the kubelet's eviction flags). */
function parseEviction(flag: string, v: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of v.split(',').map((s) => s.trim()).filter(Boolean)) {
    const i = part.indexOf('<');
    if (i <= 0) throw bad(flag, part, 'is not <signal><<quantity>');
    out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

const TAINT_EFFECTS = ['NoSchedule', 'PreferNoSchedule', 'NoExecute'];

/** The kubelet's `--register-with-taints`: `<key>[=<value>]:<effect>`, comma-separated. */
export function parseTaints(flag: string, v: string): Taint[] {
  return v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((spec) => {
      const colon = spec.lastIndexOf(':');
      if (colon <= 0) throw bad(flag, spec, 'is not a taint (<key>=<value>:<effect>)');
      const effect = spec.slice(colon + 1);
      if (!TAINT_EFFECTS.includes(effect)) throw bad(flag, spec, `has effect "${effect}", not one of ${TAINT_EFFECTS.join(', ')}`);
      const kv = spec.slice(0, colon);
      const eq = kv.indexOf('=');
      const key = eq < 0 ? kv : kv.slice(0, eq);
      if (!key) throw bad(flag, spec, 'has no key');
      return eq < 0 ? { key, effect } : { key, value: kv.slice(eq + 1), effect };
    });
}

function convert(flag: string, kind: Kind, v: string): unknown {
  switch (kind) {
    case 'string':
      return v;
    case 'bool':
      if (v !== 'true' && v !== 'false') throw bad(flag, v, 'is not true or false');
      return v === 'true';
    case 'int':
      if (!/^-?\d+$/.test(v)) throw bad(flag, v, 'is not an integer');
      return Number(v);
    case 'number':
      if (!/^-?\d+(\.\d+)?$/.test(v)) throw bad(flag, v, 'is not a number');
      return Number(v);
    case 'map':
      return parseMap(flag, v);
    case 'eviction':
      return parseEviction(flag, v);
    case 'list':
      return v.split(',').map((s) => s.trim()).filter(Boolean);
    case 'taints':
      return parseTaints(flag, v);
  }
}

/** The KubeletConfiguration overrides of the table's flags that were given (commander's option values). */
export function configFlagOverrides(o: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of CONFIG_FLAGS) {
    const v = o[optionKey(f.flag)];
    if (v === undefined) continue;
    let at = out;
    for (const k of f.path.slice(0, -1)) at = (at[k] ??= {}) as Record<string, unknown>;
    at[f.path.at(-1)!] = convert(f.flag, f.kind, String(v));
  }
  return out;
}

/** The warnings of the ignored flags given. */
export function ignoredFlagWarnings(o: Record<string, unknown>): string[] {
  return IGNORED_FLAGS.filter((f) => o[optionKey(f.flag)] !== undefined).map((f) => f.warning);
}

/** Throws for a removed flag that was given. */
export function refuseRemovedFlags(o: Record<string, unknown>): void {
  for (const [flag, when] of Object.entries(REMOVED_FLAGS)) {
    if (o[optionKey(flag)] !== undefined) throw new NodeletError('INVALID_ARGUMENT', `--${flag}: this flag was removed from the kubelet in ${when}`, { flag });
  }
}

/** Label keys the kubelet may set in the kubernetes.io and k8s.io namespaces (kubeletapis.IsKubeletLabel). */
const KUBELET_LABELS = new Set([
  'kubernetes.io/hostname',
  'kubernetes.io/os',
  'kubernetes.io/arch',
  'beta.kubernetes.io/os',
  'beta.kubernetes.io/arch',
  'beta.kubernetes.io/instance-type',
  'node.kubernetes.io/instance-type',
  'failure-domain.beta.kubernetes.io/zone',
  'failure-domain.beta.kubernetes.io/region',
  'topology.kubernetes.io/zone',
  'topology.kubernetes.io/region',
]);
const KUBELET_LABEL_NAMESPACES = ['kubelet.kubernetes.io', 'node.kubernetes.io'];

function inNamespace(ns: string, parent: string): boolean {
  return ns === parent || ns.endsWith(`.${parent}`);
}

/** Whether the kubelet may set this label on its own Node (the NodeRestriction admission's rule too). */
export function isKubeletLabel(key: string): boolean {
  if (KUBELET_LABELS.has(key)) return true;
  const slash = key.indexOf('/');
  const ns = slash < 0 ? '' : key.slice(0, slash);
  return KUBELET_LABEL_NAMESPACES.some((allowed) => inNamespace(ns, allowed));
}

const NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const PREFIX = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * `--node-labels k=v,...` as the kubelet validates it: qualified keys, label values, and no
 * key in the kubernetes.io or k8s.io namespaces outside the kubelet's allowed set (e.g.
 * `node-role.kubernetes.io/worker` is refused: the NodeRestriction admission would refuse it).
 */
export function parseNodeLabels(v: string): Record<string, string> {
  const labels = parseMap('node-labels', v);
  const unknown: string[] = [];
  for (const [key, value] of Object.entries(labels)) {
    const slash = key.indexOf('/');
    const prefix = slash < 0 ? '' : key.slice(0, slash);
    const name = slash < 0 ? key : key.slice(slash + 1);
    if (!NAME.test(name) || name.length > 63 || (slash >= 0 && (!PREFIX.test(prefix) || prefix.length > 253))) throw bad('node-labels', key, 'is not a valid label key');
    if (value && (!NAME.test(value) || value.length > 63)) throw bad('node-labels', `${key}=${value}`, 'has an invalid label value');
    const k8s = inNamespace(prefix, 'kubernetes.io') || inNamespace(prefix, 'k8s.io');
    if (k8s && !isKubeletLabel(key)) unknown.push(key);
  }
  if (unknown.length > 0) {
    throw new NodeletError(
      'INVALID_ARGUMENT',
      `--node-labels: unknown 'kubernetes.io' or 'k8s.io' labels: ${unknown.join(', ')}; labels in those namespaces must begin with an allowed prefix (${KUBELET_LABEL_NAMESPACES.join(', ')}) or be one of ${[...KUBELET_LABELS].sort().join(', ')}`,
      { flag: 'node-labels', labels: unknown },
    );
  }
  return labels;
}

/** What the Node registers with besides the well-known labels and the config's taints. */
export interface RegistrationFlags {
  labels: Record<string, string>;
  /** `--cloud-provider=external`: the kubelet's uninitialized taint and the provided node IP annotation. */
  externalCloudProvider: boolean;
  /** `--node-ip` with an external cloud provider: the `alpha.kubernetes.io/provided-node-ip` annotation. */
  providedNodeIP?: string;
}

/** `--node-labels` and `--cloud-provider` (only `external` or empty: the in-tree providers were removed in 1.29). */
export function registrationFlags(o: Record<string, unknown>): RegistrationFlags {
  const cp = o.cloudProvider as string | undefined;
  if (cp !== undefined && cp !== '' && cp !== 'external') {
    throw new NodeletError('INVALID_ARGUMENT', `--cloud-provider: ${JSON.stringify(cp)} is not supported: only "external" (or empty); the in-tree cloud providers were removed from the kubelet in 1.29`, { flag: 'cloud-provider' });
  }
  const external = cp === 'external';
  const nodeIp = typeof o.nodeIp === 'string' ? o.nodeIp.split(',').map((s) => s.trim()).filter(Boolean).join(',') : '';
  return { labels: o.nodeLabels !== undefined ? parseNodeLabels(String(o.nodeLabels)) : {}, externalCloudProvider: external, ...(external && nodeIp ? { providedNodeIP: nodeIp } : {}) };
}
