/**
 * Node lifecycle per the spec's Ready state table (what the node lifecycle controller does):
 * no heartbeat (lease renewal or Ready heartbeat) for longer than the grace period makes the
 * node's conditions Unknown and adds the `node.kubernetes.io/unreachable` taint; Ready=False
 * for longer than the grace period adds `node.kubernetes.io/not-ready`; a healthy node loses
 * both. Pure: the server stores what this returns.
 */
import type { Obj } from './store.js';

export const UNREACHABLE_TAINT = 'node.kubernetes.io/unreachable';
export const NOT_READY_TAINT = 'node.kubernetes.io/not-ready';

function ms(t: unknown): number {
  if (typeof t !== 'string') return NaN;
  return Date.parse(t);
}

/** The new node (spec.taints and status.conditions changed) or undefined when nothing is to change. */
export function nodeLifecycle(node: Obj, lease: Obj | undefined, now: number, graceMs: number): Obj | undefined {
  const out = structuredClone(node);
  const conds: Obj[] = Array.isArray(out['status']?.['conditions']) ? out['status']['conditions'] : [];
  const ready = conds.find((c) => c['type'] === 'Ready');
  const probes = [ms(lease?.['spec']?.['renewTime']), ms(ready?.['lastHeartbeatTime']), ms(out['metadata']?.['creationTimestamp'])].filter((x) => !Number.isNaN(x));
  const lastSeen = probes.length > 0 ? Math.max(...probes) : now;
  const nowIso = new Date(now).toISOString().replace(/\.\d{3}Z$/, 'Z');
  let changed = false;

  if (now - lastSeen > graceMs) {
    // No message within the grace period: every node-reported condition becomes Unknown.
    const types = ['Ready', 'MemoryPressure', 'DiskPressure', 'PIDPressure'];
    for (const type of types) {
      let c = conds.find((x) => x['type'] === type);
      if (!c) {
        c = { type, lastHeartbeatTime: nowIso };
        conds.push(c);
      }
      if (c['status'] !== 'Unknown') {
        c['status'] = 'Unknown';
        c['reason'] = 'NodeStatusUnknown';
        c['message'] = 'Kubelet stopped posting node status.';
        c['lastTransitionTime'] = nowIso;
        changed = true;
      }
    }
    out['status'] = { ...(out['status'] ?? {}), conditions: conds };
  }

  const readyNow = conds.find((c) => c['type'] === 'Ready');
  const status = readyNow?.['status'];
  const falseLongEnough = status === 'False' && now - ms(readyNow?.['lastTransitionTime']) > graceMs;
  const want = new Set<string>();
  if (status === 'Unknown') want.add(UNREACHABLE_TAINT);
  if (falseLongEnough) want.add(NOT_READY_TAINT);
  // A False node not yet past the grace period keeps a not-ready taint it already has.
  if (status === 'False' && !falseLongEnough && hasTaint(out, NOT_READY_TAINT)) want.add(NOT_READY_TAINT);

  const taints: Obj[] = Array.isArray(out['spec']?.['taints']) ? out['spec']['taints'] : [];
  const kept = taints.filter((t) => (t['key'] !== UNREACHABLE_TAINT && t['key'] !== NOT_READY_TAINT) || want.has(t['key']));
  for (const key of want) if (!kept.some((t) => t['key'] === key)) kept.push({ key, effect: 'NoExecute', timeAdded: nowIso });
  if (kept.length !== taints.length || kept.some((t, i) => t !== taints[i])) {
    changed = true;
    out['spec'] = { ...(out['spec'] ?? {}) };
    if (kept.length > 0) out['spec']['taints'] = kept;
    else delete out['spec']['taints'];
  }
  return changed ? out : undefined;
}

function hasTaint(node: Obj, key: string): boolean {
  return Array.isArray(node['spec']?.['taints']) && node['spec']['taints'].some((t: Obj) => t['key'] === key);
}
