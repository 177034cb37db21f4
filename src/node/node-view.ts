/**
 * The node as pod admission sees it (the kubelet's getNodeAnyWay): connected, the Node as the
 * control plane has it (its labels, taints and allocatable, which an administrator may have
 * changed: `kubectl label`, `kubectl taint`); standalone, or before the Node is known, the
 * node nodelet would register: the well-known labels, `registerWithTaints`, and allocatable
 * computed as the status reports it (capacity − kubeReserved − systemReserved − evictionHard).
 */
import fs from 'node:fs/promises';
import type { Node, Taint } from 'kubernetes-types/core/v1.js';
import type { KubeletConfiguration } from '../config/types.js';
import type { NodeView } from '../pods/sync/predicates.js';
import type { MachineFacts } from './facts.js';
import { parseThresholds, thresholdAmount } from './pressure.js';
import { capacityAndAllocatable, reservedResources, wellKnownLabels } from './status.js';

export interface NodeViewOptions {
  nodeName: string;
  hostname: string;
  machine: Pick<MachineFacts, 'os' | 'arch' | 'cpuCores' | 'memoryBytes'>;
  config: Pick<KubeletConfiguration, 'maxPods' | 'kubeReserved' | 'systemReserved' | 'evictionHard' | 'registerWithTaints'>;
  /** The root dir's filesystem size in bytes (ephemeral-storage capacity), when measured. */
  ephemeralStorageBytes: () => number | undefined;
  /** Connected: the Node as last watched. */
  apiNode?: () => Node | undefined;
}

/** `registerWithTaints` entries that are taints (key and effect strings); the config validated them. */
function configTaints(list: readonly unknown[] | undefined): Taint[] {
  return (list ?? []).filter((t): t is Taint => typeof t === 'object' && t !== null && typeof (t as Taint).key === 'string' && typeof (t as Taint).effect === 'string');
}

export function nodeViewFor(o: NodeViewOptions): () => NodeView {
  const { config: cfg, machine } = o;
  const { thresholds } = parseThresholds(cfg.evictionHard ?? {});
  const memory = thresholds.find((t) => t.signal === 'memory.available');
  const nodefs = thresholds.find((t) => t.signal === 'nodefs.available');
  const labels = wellKnownLabels({ hostname: o.hostname, os: machine.os, arch: machine.arch });
  const taints = configTaints(cfg.registerWithTaints);
  const reserved = reservedResources(cfg.kubeReserved, cfg.systemReserved);
  return () => {
    const api = o.apiNode?.();
    const local = capacityAndAllocatable({
      cpuCores: machine.cpuCores,
      memoryBytes: machine.memoryBytes,
      maxPods: cfg.maxPods,
      reserved,
      evictionHardMemoryBytes: memory ? thresholdAmount(memory, machine.memoryBytes) : 0,
      ephemeralStorageBytes: o.ephemeralStorageBytes(),
      evictionHardNodefs: nodefs ? ('quantity' in nodefs ? { quantity: nodefs.quantity } : { fraction: nodefs.fraction }) : undefined,
    }).allocatable!;
    return {
      name: o.nodeName,
      labels: api?.metadata?.labels ?? labels,
      taints: api ? (api.spec?.taints ?? []) : taints,
      allocatable: api?.status?.allocatable ?? local,
    };
  };
}

/** The size of the filesystem holding `dir` in bytes (statfs), or undefined when it cannot be read. */
export async function filesystemBytes(dir: string): Promise<number | undefined> {
  try {
    const s = await fs.statfs(dir);
    return s.blocks * s.bsize;
  } catch {
    return undefined;
  }
}
