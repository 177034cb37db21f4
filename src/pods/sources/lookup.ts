/**
 * The node's pods as the servers see them: every desired pod (static and from the control
 * plane) with its current status. The pod manager implements it; the daemon wires it into
 * the HTTPS and read-only servers and the checkpoint service.
 */
import type { Pod } from 'kubernetes-types/core/v1.js';

export interface PodLookup {
  getPod(namespace: string, name: string): Pod | undefined;
  listPods(): Pod[];
}

/** A pod's `<namespace>/<name>` (namespace `default` when unset). */
export function podKey(pod: Pod): string {
  return `${pod.metadata?.namespace ?? 'default'}/${pod.metadata?.name}`;
}
