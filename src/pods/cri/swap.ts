/**
 * Container swap as the kubelet configures it (kuberuntime_container_linux.go,
 * configureContainerSwapResources / GetContainerSwapBehavior / calcSwapForBurstablePods).
 * Pure; the node's facts (cgroup version, swap controller, capacities) are read once at
 * start and passed in.
 *
 * - No swap controller on the node: nothing is set (the runtime's default).
 * - `LimitedSwap` applies only on cgroup v2, to a Burstable pod's container that asks for
 *   memory with request != limit, in a pod that is not critical (static, mirror, or
 *   priority >= 2000000000): `memory.swap.max` = floor(request / node memory * node swap).
 * - Everything else is NoSwap: cgroup v2 `memory.swap.max` = 0; cgroup v1
 *   `memory_swap_limit_in_bytes` = `memory_limit_in_bytes` (memory+swap equal to memory).
 */
import { isStaticPod } from '../sources/static-source.js';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { qosClass } from '../status/status.js';

export interface NodeSwap {
  behavior: 'NoSwap' | 'LimitedSwap';
  cgroupV2: boolean;
  /** v1 memory.memsw.limit_in_bytes, v2 memory.swap.max: without it the kubelet sets nothing. */
  controllerAvailable: boolean;
  /** The node's memory capacity (MemTotal), bytes. */
  memoryCapacityBytes: number;
  /** The node's swap capacity (SwapTotal), bytes. */
  swapCapacityBytes: number;
}

/** The kubelet's SystemCriticalPriority (2 * HighestUserDefinablePriority). */
export const SYSTEM_CRITICAL_PRIORITY = 2_000_000_000;

/** The built-in classes a static pod may name without a resolved priority (scheduling's). */
const CRITICAL_CLASSES: Readonly<Record<string, number>> = { 'system-cluster-critical': SYSTEM_CRITICAL_PRIORITY, 'system-node-critical': SYSTEM_CRITICAL_PRIORITY + 1000 };

/**
 * The kubelet's IsCriticalPod: static pods (config.source other than api), mirror pods, and
 * system-critical priority (a pod without a resolved priority counts its built-in class's).
 */
export function isCriticalPod(pod: Pod): boolean {
  const ann = pod.metadata?.annotations ?? {};
  if (isStaticPod(pod)) return true;
  if (ann['kubernetes.io/config.mirror'] !== undefined) return true;
  const p = pod.spec?.priority ?? CRITICAL_CLASSES[pod.spec?.priorityClassName ?? ''] ?? 0;
  return p >= SYSTEM_CRITICAL_PRIORITY;
}

/**
 * (request / node memory) * node swap, truncated as Go's int64(float64) does. Throws when
 * the node memory is 0 or the request is larger than it (the kubelet then gives NoSwap).
 */
export function calcSwapForBurstable(containerMemoryRequest: number, nodeMemory: number, nodeSwap: number): number {
  if (!(nodeMemory > 0)) throw new Error('total node memory is 0');
  if (containerMemoryRequest > nodeMemory) throw new Error(`container request ${containerMemoryRequest} is larger than total node memory ${nodeMemory}`);
  return Math.trunc((containerMemoryRequest / nodeMemory) * nodeSwap);
}

/** The behaviour for one container: LimitedSwap only where the kubelet allows it. */
export function containerSwapBehavior(pod: Pod, c: Container, node: NodeSwap, quantity: (q: string | number) => number): 'NoSwap' | 'LimitedSwap' {
  if (node.behavior !== 'LimitedSwap' || !node.controllerAvailable || !node.cgroupV2) return 'NoSwap';
  if (isCriticalPod(pod) || qosClass(pod) !== 'Burstable') return 'NoSwap';
  const req = c.resources?.requests?.memory;
  const lim = c.resources?.limits?.memory;
  const reqBytes = req === undefined ? 0 : quantity(req);
  const limBytes = lim === undefined ? 0 : quantity(lim);
  if (reqBytes === 0 && limBytes === 0) return 'NoSwap';
  if (reqBytes === limBytes) return 'NoSwap';
  return 'LimitedSwap';
}

/** Sets the swap fields of a CRI LinuxContainerResources (`memoryLimitInBytes` already set). Mutates `resources`. */
export function applyContainerSwap(resources: Record<string, unknown>, pod: Pod, c: Container, node: NodeSwap, quantity: (q: string | number) => number): void {
  if (!node.controllerAvailable) return;
  const noSwap = () => {
    if (!node.cgroupV2) {
      // memory+swap = memory: no swap beyond the memory limit (ignored by the runtime when there is no limit).
      if (typeof resources.memoryLimitInBytes === 'number') resources.memorySwapLimitInBytes = resources.memoryLimitInBytes;
      return;
    }
    resources.unified = { ...((resources.unified as Record<string, string> | undefined) ?? {}), 'memory.swap.max': '0' };
  };
  if (containerSwapBehavior(pod, c, node, quantity) !== 'LimitedSwap') return noSwap();
  const req = c.resources?.requests?.memory ?? c.resources?.limits?.memory;
  let swap: number;
  try {
    swap = calcSwapForBurstable(req === undefined ? 0 : quantity(req), node.memoryCapacityBytes, node.swapCapacityBytes);
  } catch {
    return noSwap();
  }
  resources.unified = { ...((resources.unified as Record<string, string> | undefined) ?? {}), 'memory.swap.max': String(swap) };
}
