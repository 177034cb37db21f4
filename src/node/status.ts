/**
 * The Node object nodelet registers and the status it reports, as the kubelet builds them.
 * Pure: the facts about the machine are gathered at the edge (node/facts.ts); this decides
 * the conditions, capacity, allocatable, addresses, labels and info, and whether a new
 * status differs from the last one reported (heartbeat times aside).
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
import type { Node, NodeAddress, NodeCondition, NodeStatus } from 'kubernetes-types/core/v1.js';
import type { RuntimeState } from '../runtime/health.js';
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
  kubeletPort: number;
  /** e.g. `v1.35.0-nodelet.0.1.0` (version.ts): what `kubectl get nodes` shows as VERSION. */
  kubeletVersion: string;
  runtime: ReadinessState;
  /** Per pressure condition: true under pressure, false not, absent when undecided this turn. */
  pressure: PressureDecision;
  info: { machineID: string; systemUUID: string; bootID: string; kernelVersion: string; osImage: string };
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

export function nodeStatus(facts: NodeFacts, previous: NodeStatus | undefined, now: string): NodeStatus {
  const memory = facts.memoryBytes;
  const allocatableMemory = Math.max(0, memory - facts.evictionHardMemoryBytes);
  const rt = facts.runtime;
  return {
    capacity: { cpu: String(facts.cpuCores), memory: `${Math.floor(memory / 1024)}Ki`, pods: String(facts.maxPods) },
    allocatable: { cpu: String(facts.cpuCores), memory: `${Math.floor(allocatableMemory / 1024)}Ki`, pods: String(facts.maxPods) },
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
  };
}

/** The Node to create at registration: labels the kubelet always sets, and the first status. */
export function registrationNode(facts: NodeFacts, now: string): Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: facts.nodeName,
      labels: {
        'kubernetes.io/hostname': facts.hostname,
        'kubernetes.io/os': facts.os,
        'kubernetes.io/arch': facts.arch,
        'beta.kubernetes.io/os': facts.os,
        'beta.kubernetes.io/arch': facts.arch,
      },
    },
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
  return out;
}
