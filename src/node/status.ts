/**
 * The Node object nodelet registers and the status it reports, as the kubelet builds them.
 * Pure: the facts about the machine are gathered at the edge (node/facts.ts); this decides
 * the conditions, capacity, allocatable, addresses, labels and info, and whether a new
 * status differs from the last one reported (heartbeat times aside), and the images
 * the runtime holds (`status.images`).
 *
 * Conditions (reasons and messages are the kubelet's): MemoryPressure, DiskPressure,
 * PIDPressure as node/pressure.ts decided them from the measured signals (a condition it
 * could not decide this turn keeps what it said before, or is Unknown at first), then Ready
 * last. Ready is False with
 * KubeletNotReady when the runtime is down, not ready, or its network is not ready (as the
 * kubelet reports a node without CNI), or while the node shuts down (the shutdown manager's
 * error, `node is shutting down`); the message is the kubelet's aggregate of those errors
 * (one alone as it is, several as `[a, b]`). `lastTransitionTime` moves only when a
 * condition's status changes; `lastHeartbeatTime` on every report.
 */
import type { ContainerImage, Node, NodeAddress, NodeCondition, NodeStatus, Taint } from 'kubernetes-types/core/v1.js';
import { parseQuantity } from '../config/quantity.js';
import type { RuntimeState } from '../runtime/health.js';
import type { Image } from '../runtime/types.js';
import type { PressureDecision, PressureType } from './pressure.js';

/**
 * What the Ready condition is computed from: the runtime's state and, while the node shuts
 * down, the node shutdown manager's error (the kubelet's `ShutdownStatus()`: `node is
 * shutting down`; src/node/shutdown-manager.ts adds it to the runtime state it hands on).
 */
export type ReadinessState = RuntimeState & { nodeShutdownError?: string | undefined };

export interface NodeFacts {
  nodeName: string;
  hostname: string;
  ips: readonly string[];
  /** GOOS/GOARCH names: linux, amd64/arm64. */
  os: string;
  arch: string;
  cpuCores: number;
  memoryBytes: number;
  maxPods: number;
  /** evictionHard memory.available in bytes: subtracted from allocatable memory. */
  evictionHardMemoryBytes: number;
  /** kubeReserved + systemReserved (reservedResources()): subtracted from allocatable. Absent: nothing reserved. */
  reserved?: Reservation;
  /**
   * Size of the root dir's filesystem in bytes (statfs blocks × block size): the
   * `ephemeral-storage` capacity. Absent (not measured yet): no ephemeral-storage reported.
   */
  ephemeralStorageBytes?: number | undefined;
  /** evictionHard nodefs.available, an amount or a fraction of the capacity: subtracted from allocatable ephemeral-storage. */
  evictionHardNodefs?: { quantity: number } | { fraction: number } | undefined;
  /** The runtime's images (CRI ListImages); absent: `status.images` is not reported. */
  images?: readonly Image[];
  /** nodeStatusMaxImages: at most this many images in the status (-1: all). Default 50. */
  maxImages?: number;
  kubeletPort: number;
  /** e.g. `v1.35.0-nodelet.0.1.0` (version.ts): what `kubectl get nodes` shows as VERSION. */
  kubeletVersion: string;
  runtime: ReadinessState;
  /** Per pressure condition: true under pressure, false not, absent when undecided this turn. */
  pressure: PressureDecision;
  info: { machineID: string; systemUUID: string; bootID: string; kernelVersion: string; osImage: string };
  /** What the Node is registered with besides the well-known labels (nodeRegistration()); absent: nothing more. */
  registration?: NodeRegistration;
}

/**
 * What the kubelet's initialNode adds at registration: `--node-labels` (over the well-known
 * ones), `registerWithTaints` (`--register-with-taints`) and, with `--cloud-provider=external`,
 * the `node.cloudprovider.kubernetes.io/uninitialized` taint the cloud controller manager
 * removes once it initialized the Node, `providerID` (`--provider-id`) as spec.providerID,
 * and annotations (`alpha.kubernetes.io/provided-node-ip`). Applied only when the Node is
 * created: a Node that exists keeps what it has (an administrator's `kubectl label`).
 */
export interface NodeRegistration {
  labels?: Record<string, string>;
  taints?: Taint[];
  providerID?: string;
  annotations?: Record<string, string>;
}

/** The taint of a Node a cloud controller manager has not initialized yet (cloudproviderapi.TaintExternalCloudProvider). */
export const EXTERNAL_CLOUD_PROVIDER_TAINT: Readonly<Taint> = Object.freeze({ key: 'node.cloudprovider.kubernetes.io/uninitialized', value: 'true', effect: 'NoSchedule' });

/** The registration from the config and the flags, as the kubelet's initialNode builds it. */
export function nodeRegistration(o: { labels?: Record<string, string>; registerWithTaints?: readonly unknown[]; providerID?: string; externalCloudProvider?: boolean; providedNodeIP?: string }): NodeRegistration {
  const taints: Taint[] = (o.registerWithTaints ?? []).filter((t): t is Taint => typeof t === 'object' && t !== null && typeof (t as Taint).key === 'string' && typeof (t as Taint).effect === 'string');
  if (o.externalCloudProvider) taints.push({ ...EXTERNAL_CLOUD_PROVIDER_TAINT });
  return {
    ...(o.labels && Object.keys(o.labels).length > 0 ? { labels: { ...o.labels } } : {}),
    ...(taints.length > 0 ? { taints } : {}),
    ...(o.providerID ? { providerID: o.providerID } : {}),
    ...(o.providedNodeIP ? { annotations: { 'alpha.kubernetes.io/provided-node-ip': o.providedNodeIP } } : {}),
  };
}

const PRESSURE: { type: PressureType; ok: [string, string]; bad: [string, string]; what: string }[] = [
  { type: 'MemoryPressure', ok: ['KubeletHasSufficientMemory', 'kubelet has sufficient memory available'], bad: ['KubeletHasInsufficientMemory', 'kubelet has insufficient memory available'], what: 'memory' },
  { type: 'DiskPressure', ok: ['KubeletHasNoDiskPressure', 'kubelet has no disk pressure'], bad: ['KubeletHasDiskPressure', 'kubelet has disk pressure'], what: 'disk' },
  { type: 'PIDPressure', ok: ['KubeletHasSufficientPID', 'kubelet has sufficient PID available'], bad: ['KubeletHasInsufficientPID', 'kubelet has insufficient PID available'], what: 'PID' },
];

/** Why the node is not ready, in the kubelet's words and order (runtime, network, node shutdown); empty when it is. */
export function readinessErrors(rt: ReadinessState): string[] {
  const errors: string[] = [];
  if (rt.reason === 'ContainerRuntimeUnknown') errors.push('container runtime status check may not have completed yet');
  else if (rt.reason === 'ContainerRuntimeDown') errors.push(`container runtime is down${rt.lastError ? `: ${rt.lastError}` : ''}`);
  else if (!rt.runtimeReady) errors.push(`container runtime not ready: ${rt.message}`);
  if (rt.runtimeReady && !rt.networkReady) {
    errors.push(`container runtime network not ready: NetworkReady=false reason:${rt.networkReason ?? ''} message:${rt.networkMessage ?? ''}`);
  }
  if (rt.nodeShutdownError) errors.push(rt.nodeShutdownError);
  return errors;
}

/**
 * The Ready condition's message for those errors, as the kubelet's aggregate error prints
 * (apimachinery's utilerrors.NewAggregate): one as it is, several (duplicates once) as `[a, b]`.
 */
export function readinessMessage(errors: readonly string[]): string {
  const distinct = [...new Set(errors)];
  return distinct.length === 1 ? distinct[0]! : `[${distinct.join(', ')}]`;
}

function condition(type: string, status: 'True' | 'False' | 'Unknown', reason: string, message: string, now: string, previous?: NodeCondition[]): NodeCondition {
  const prev = previous?.find((c) => c.type === type);
  return {
    type,
    status,
    reason,
    message,
    lastHeartbeatTime: now,
    lastTransitionTime: prev && prev.status === status && prev.lastTransitionTime ? prev.lastTransitionTime : now,
  };
}

/** One pressure condition: decided, or (undecided) as it was with a new heartbeat, or Unknown when there was none. */
function pressureCondition(p: (typeof PRESSURE)[number], decided: boolean | undefined, now: string, previous?: NodeCondition[]): NodeCondition {
  if (decided !== undefined) {
    const [reason, message] = decided ? p.bad : p.ok;
    return condition(p.type, decided ? 'True' : 'False', reason, message, now, previous);
  }
  const prev = previous?.find((c) => c.type === p.type);
  if (prev?.status === 'True' || prev?.status === 'False' || prev?.status === 'Unknown') {
    return condition(p.type, prev.status, prev.reason ?? '', prev.message ?? '', now, previous);
  }
  return condition(p.type, 'Unknown', 'NodeStatusUnknown', `kubelet cannot measure ${p.what} pressure yet`, now, previous);
}

export function nodeConditions(facts: NodeFacts, previous: NodeCondition[] | undefined, now: string): NodeCondition[] {
  const out = PRESSURE.map((p) => pressureCondition(p, facts.pressure[p.type], now, previous));
  const errors = readinessErrors(facts.runtime);
  out.push(
    errors.length === 0
      ? condition('Ready', 'True', 'KubeletReady', 'kubelet is posting ready status', now, previous)
      : condition('Ready', 'False', 'KubeletNotReady', readinessMessage(errors), now, previous),
  );
  return out;
}

function addresses(facts: NodeFacts): NodeAddress[] {
  return [...facts.ips.map((address) => ({ type: 'InternalIP', address })), { type: 'Hostname', address: facts.hostname }];
}

/** What kubeReserved and systemReserved set aside together, in base units. */
export interface Reservation {
  cpuMillis: number;
  memoryBytes: number;
  ephemeralStorageBytes: number;
}

/**
 * kubeReserved + systemReserved (maps validated by the config: `cpu`, `memory`,
 * `ephemeral-storage`, `pid`, non-negative quantities) summed per resource; CPU in
 * millicores, the others in bytes rounded up (Go's `Value()`).
 */
export function reservedResources(...maps: (Readonly<Record<string, string>> | undefined)[]): Reservation {
  const out: Reservation = { cpuMillis: 0, memoryBytes: 0, ephemeralStorageBytes: 0 };
  for (const m of maps) {
    for (const [k, v] of Object.entries(m ?? {})) {
      const q = parseQuantity(v);
      if (k === 'cpu') out.cpuMillis += Number(q.millis);
      else if (k === 'memory') out.memoryBytes += Number(q.roundedUp);
      else if (k === 'ephemeral-storage') out.ephemeralStorageBytes += Number(q.roundedUp);
    }
  }
  return out;
}

/**
 * A byte count as a BinarySI quantity in Go's canonical form: the largest power-of-1024
 * suffix that keeps it whole (`10Gi`, `20469760Ki`, `17790086017`); under 1024, decimal.
 */
export function binaryQuantity(bytes: number): string {
  let n = Math.max(0, Math.floor(bytes));
  if (n < 1024) return decimalBytes(n);
  const suffixes = ['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'];
  let i = 0;
  while (i < suffixes.length - 1 && n % 1024 === 0) {
    n /= 1024;
    i++;
  }
  return `${n}${suffixes[i]}`;
}

/** A whole number under 1024 as Go's canonical DecimalSI (`1000` -> `1k`). */
function decimalBytes(n: number): string {
  return n !== 0 && n % 1000 === 0 ? `${n / 1000}k` : String(n);
}

/** CPU millicores as Go's canonical DecimalSI: `2`, `1900m`. */
export function cpuQuantity(millis: number): string {
  const m = Math.max(0, Math.round(millis));
  return m % 1000 === 0 ? String(m / 1000) : `${m}m`;
}

/**
 * The Node's images (the kubelet's Images setter): largest first (ties by ID, descending),
 * at most `max` of them (-1: all), each named by its digests then its tags (at most 5
 * names, MaxNamesPerImageInNodeStatus) with its size.
 */
export function nodeImages(images: readonly Image[], max = 50): ContainerImage[] {
  const sorted = [...images].sort((a, b) => b.size - a.size || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
  const kept = max > -1 && max < sorted.length ? sorted.slice(0, max) : sorted;
  return kept.map((i) => ({ names: [...i.repoDigests, ...i.repoTags].slice(0, 5), sizeBytes: i.size }));
}

/**
 * Capacity and allocatable (the kubelet's MachineInfo setter): allocatable = capacity −
 * kubeReserved − systemReserved − the hard eviction threshold of the resource
 * (memory.available for memory, nodefs.available for ephemeral-storage, a percentage of
 * the capacity), floored at 0. `ephemeral-storage` only once the root dir's filesystem was
 * measured.
 */
export type AllocatableFacts = Pick<NodeFacts, 'cpuCores' | 'memoryBytes' | 'maxPods' | 'reserved' | 'evictionHardMemoryBytes' | 'ephemeralStorageBytes' | 'evictionHardNodefs'>;

export function capacityAndAllocatable(facts: AllocatableFacts): Pick<NodeStatus, 'capacity' | 'allocatable'> {
  const r = facts.reserved ?? { cpuMillis: 0, memoryBytes: 0, ephemeralStorageBytes: 0 };
  const memory = facts.memoryBytes;
  const allocatableMemory = Math.max(0, memory - r.memoryBytes - facts.evictionHardMemoryBytes);
  const capacity: Record<string, string> = { cpu: String(facts.cpuCores), memory: `${Math.floor(memory / 1024)}Ki`, pods: String(facts.maxPods) };
  const allocatable: Record<string, string> = { cpu: cpuQuantity(facts.cpuCores * 1000 - r.cpuMillis), memory: `${Math.floor(allocatableMemory / 1024)}Ki`, pods: String(facts.maxPods) };
  const storage = facts.ephemeralStorageBytes;
  if (storage !== undefined && Number.isFinite(storage) && storage >= 0) {
    const t = facts.evictionHardNodefs;
    // The kubelet's GetThresholdQuantity: int64(capacity × percentage), truncated.
    const eviction = !t ? 0 : 'quantity' in t ? t.quantity : Math.floor(storage * t.fraction);
    capacity['ephemeral-storage'] = binaryQuantity(storage);
    allocatable['ephemeral-storage'] = binaryQuantity(storage - r.ephemeralStorageBytes - eviction);
  }
  return { capacity, allocatable };
}

export function nodeStatus(facts: NodeFacts, previous: NodeStatus | undefined, now: string): NodeStatus {
  const rt = facts.runtime;
  return {
    ...capacityAndAllocatable(facts),
    conditions: nodeConditions(facts, previous?.conditions, now),
    addresses: addresses(facts),
    daemonEndpoints: { kubeletEndpoint: { Port: facts.kubeletPort } },
    nodeInfo: {
      ...facts.info,
      containerRuntimeVersion: rt.runtimeName ? `${rt.runtimeName}://${rt.runtimeVersion ?? ''}` : '',
      kubeletVersion: facts.kubeletVersion,
      kubeProxyVersion: '',
      operatingSystem: facts.os,
      architecture: facts.arch,
    },
    ...(facts.images ? { images: nodeImages(facts.images, facts.maxImages) } : {}),
  };
}

/** The labels the kubelet always sets on its Node. */
export function wellKnownLabels(facts: Pick<NodeFacts, 'hostname' | 'os' | 'arch'>): Record<string, string> {
  return {
    'kubernetes.io/hostname': facts.hostname,
    'kubernetes.io/os': facts.os,
    'kubernetes.io/arch': facts.arch,
    'beta.kubernetes.io/os': facts.os,
    'beta.kubernetes.io/arch': facts.arch,
  };
}

/**
 * The Node to create at registration: the labels the kubelet always sets with `--node-labels`
 * over them (as the kubelet: a flag's label wins), the registration's taints, providerID and
 * annotations, and the first status.
 */
export function registrationNode(facts: NodeFacts, now: string): Node {
  const r = facts.registration ?? {};
  const spec = { ...(r.taints && r.taints.length > 0 ? { taints: r.taints.map((t) => ({ ...t })) } : {}), ...(r.providerID ? { providerID: r.providerID } : {}) };
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: facts.nodeName,
      labels: { ...wellKnownLabels(facts), ...r.labels },
      ...(r.annotations ? { annotations: { ...r.annotations } } : {}),
    },
    ...(Object.keys(spec).length > 0 ? { spec } : {}),
    status: nodeStatus(facts, undefined, now),
  };
}

/** JSON with object keys sorted: the server may answer fields in another order. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v)
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

/**
 * True when `next` says something `prev` (the Node's status as the control plane has it)
 * does not (heartbeat times ignored): worth a patch before the report interval. Only what
 * nodelet writes is compared: conditions of other types (a network plugin's
 * NetworkUnavailable) and capacity keys of other managers are theirs, left alone by the
 * strategic merge patch and no reason to write.
 */
export function statusChanged(prev: NodeStatus | undefined, next: NodeStatus): boolean {
  return statusChanges(prev, next).length > 0;
}

/** What statusChanged found: the fields that differ (`conditions.Ready`, `capacity.cpu`, `nodeInfo`, ...); empty when none. */
export function statusChanges(prev: NodeStatus | undefined, next: NodeStatus): string[] {
  if (!prev) return ['(no status yet)'];
  const out: string[] = [];
  const cond = (s: NodeStatus, type: string) => {
    const c = s.conditions?.find((x) => x.type === type);
    if (!c) return undefined;
    const { lastHeartbeatTime: _h, ...rest } = c;
    return rest;
  };
  for (const c of next.conditions ?? []) if (canonical(cond(prev, c.type)) !== canonical(cond(next, c.type))) out.push(`conditions.${c.type}`);
  for (const key of ['capacity', 'allocatable'] as const) {
    for (const [k, v] of Object.entries(next[key] ?? {})) if (prev[key]?.[k] !== v) out.push(`${key}.${k}`);
  }
  for (const key of ['addresses', 'daemonEndpoints', 'nodeInfo'] as const) if (canonical(prev[key]) !== canonical(next[key])) out.push(key);
  if (next.images !== undefined && canonical(prev.images ?? []) !== canonical(next.images)) out.push('images');
  return out;
}
