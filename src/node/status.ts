/**
 * The Node object nodelet registers and the status it reports, as the kubelet builds them.
 * Pure: the facts about the machine are gathered at the edge (node/facts.ts); this decides
 * the conditions, capacity, allocatable, addresses, labels and info, and whether a new
 * status differs from the last one reported (heartbeat times aside).
 *
 * Conditions (reasons and messages are the kubelet's): MemoryPressure, DiskPressure,
 * PIDPressure (False while nodelet does not evict), then Ready last. Ready is False with
 * KubeletNotReady and every reason joined when the runtime is down, not ready, or its
 * network is not ready, as the kubelet reports a node without CNI. `lastTransitionTime`
 * moves only when a condition's status changes; `lastHeartbeatTime` on every report.
 */
import type { Node, NodeAddress, NodeCondition, NodeStatus } from 'kubernetes-types/core/v1.js';
import type { RuntimeState } from '../runtime/health.js';

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
  /** e.g. `v1.32.0-nodelet.0.1.0`: what `kubectl get nodes` shows as VERSION. */
  kubeletVersion: string;
  runtime: RuntimeState;
  info: { machineID: string; systemUUID: string; bootID: string; kernelVersion: string; osImage: string };
}

const PRESSURE: { type: string; ok: [string, string] }[] = [
  { type: 'MemoryPressure', ok: ['KubeletHasSufficientMemory', 'kubelet has sufficient memory available'] },
  { type: 'DiskPressure', ok: ['KubeletHasNoDiskPressure', 'kubelet has no disk pressure'] },
  { type: 'PIDPressure', ok: ['KubeletHasSufficientPID', 'kubelet has sufficient PID available'] },
];

/** Why the node is not ready, in the kubelet's words; empty when it is. */
export function readinessErrors(rt: RuntimeState): string[] {
  const errors: string[] = [];
  if (rt.reason === 'ContainerRuntimeUnknown') errors.push('container runtime status check may not have completed yet');
  else if (rt.reason === 'ContainerRuntimeDown') errors.push(`container runtime is down${rt.lastError ? `: ${rt.lastError}` : ''}`);
  else if (!rt.runtimeReady) errors.push(`container runtime not ready: ${rt.message}`);
  if (rt.runtimeReady && !rt.networkReady) {
    errors.push(`container runtime network not ready: NetworkReady=false reason:${rt.networkReason ?? ''} message:${rt.networkMessage ?? ''}`);
  }
  return errors;
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

export function nodeConditions(facts: NodeFacts, previous: NodeCondition[] | undefined, now: string): NodeCondition[] {
  const out = PRESSURE.map((p) => condition(p.type, 'False', p.ok[0], p.ok[1], now, previous));
  const errors = readinessErrors(facts.runtime);
  out.push(
    errors.length === 0
      ? condition('Ready', 'True', 'KubeletReady', 'kubelet is posting ready status', now, previous)
      : condition('Ready', 'False', 'KubeletNotReady', errors.join(', '), now, previous),
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

/** True when `next` says something `prev` did not (heartbeat times ignored): worth a patch before the report interval. */
export function statusChanged(prev: NodeStatus | undefined, next: NodeStatus): boolean {
  if (!prev) return true;
  const strip = (s: NodeStatus) => ({ ...s, conditions: (s.conditions ?? []).map(({ lastHeartbeatTime: _h, ...c }) => c) });
  return JSON.stringify(strip(prev)) !== JSON.stringify(strip(next));
}
