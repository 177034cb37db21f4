/**
 * The kubelet's validation of the graceful node shutdown fields
 * (pkg/kubelet/apis/config/validation): both periods zero means off; each is zero or at
 * least 1 s; the critical pods' period is at most the whole; `shutdownGracePeriodByPodPriority`
 * excludes the other two; each needs its feature gate. Entries of the list must be objects
 * with an int32 `priority` and an int64 `shutdownGracePeriodSeconds` (the kubelet's decoder).
 * Called by validateConfig (validate.ts) with its accessors.
 */
import { parseDurationNs } from './duration.js';
import { isFeatureEnabled } from './feature-gates.js';
import { isJsonObject, type Json } from './merge.js';

const SECOND_NS = 1_000_000_000n;

export function validateShutdownFields(get: (p: readonly string[]) => Json | undefined, add: (p: readonly string[], message: string) => void): void {
  const gates = get(['featureGates']);
  const cfg = { featureGates: isJsonObject(gates) ? (Object.fromEntries(Object.entries(gates).filter(([, v]) => typeof v === 'boolean')) as Record<string, boolean>) : {} };
  const graceful = isFeatureEnabled(cfg, 'GracefulNodeShutdown');
  const byPriorityGate = isFeatureEnabled(cfg, 'GracefulNodeShutdownBasedOnPodPriority');
  const ns = (field: string): bigint | undefined => {
    const v = get([field]);
    if (typeof v !== 'string') return undefined;
    try {
      return parseDurationNs(v);
    } catch {
      return undefined; // reported by the document pass
    }
  };
  const total = ns('shutdownGracePeriod') ?? 0n;
  const critical = ns('shutdownGracePeriodCriticalPods') ?? 0n;
  if (graceful) {
    // (A negative period is reported once, by the generic duration check.)
    if (total >= 0n && critical > total) {
      add(['shutdownGracePeriodCriticalPods'], `must be <= shutdownGracePeriod (${String(get(['shutdownGracePeriod']) ?? '0s')}), got ${JSON.stringify(get(['shutdownGracePeriodCriticalPods']) ?? '0s')}`);
    }
    for (const [field, v] of [['shutdownGracePeriod', total], ['shutdownGracePeriodCriticalPods', critical]] as const) {
      if (v > 0n && v < SECOND_NS) add([field], `must be either zero or otherwise >= 1 sec, got ${JSON.stringify(get([field]))}`);
    }
  } else if (total > 0n || critical > 0n) {
    add([total > 0n ? 'shutdownGracePeriod' : 'shutdownGracePeriodCriticalPods'], 'specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown');
  }

  const list = get(['shutdownGracePeriodByPodPriority']);
  if (!Array.isArray(list) || list.length === 0) return;
  if (!byPriorityGate) {
    add(['shutdownGracePeriodByPodPriority'], 'specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority');
  } else if (total > 0n || critical > 0n) {
    add(['shutdownGracePeriodByPodPriority'], 'cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time');
  }
  list.forEach((item, i) => {
    const p = ['shutdownGracePeriodByPodPriority', String(i)];
    if (!isJsonObject(item)) {
      add(p, 'must be an object with priority and shutdownGracePeriodSeconds');
      return;
    }
    for (const k of Object.keys(item)) {
      if (k !== 'priority' && k !== 'shutdownGracePeriodSeconds') add([...p, k], `unknown field "${k}"`);
    }
    const prio = item.priority;
    if (prio !== undefined && (typeof prio !== 'number' || !Number.isInteger(prio) || prio < -(2 ** 31) || prio > 2 ** 31 - 1)) {
      add([...p, 'priority'], `must be an integer between ${-(2 ** 31)} and ${2 ** 31 - 1}, got ${JSON.stringify(prio)}`);
    }
    const secs = item.shutdownGracePeriodSeconds;
    if (secs !== undefined && (typeof secs !== 'number' || !Number.isSafeInteger(secs))) {
      add([...p, 'shutdownGracePeriodSeconds'], `must be an integer, got ${JSON.stringify(secs)}`);
    }
  });
}
