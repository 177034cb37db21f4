/**
 * Which pod the eviction manager ends first, and the words it ends it with, as the kubelet's
 * eviction helpers (pkg/kubelet/eviction/helpers.go). Pure.
 *
 * - memory (rankMemoryPressure): pods whose working set is above their memory request first,
 *   then lower priority first, then the larger working set above the request first;
 * - disk (rankDiskPressureFunc): the same with the pod's ephemeral storage (what the runtime
 *   reports of its containers' writable layers) or its inodes, against its
 *   `ephemeral-storage` request;
 * - pids (rankPIDPressure): lower priority first, then more processes first.
 *
 * A pod the stats do not name (no sandbox yet, or the runtime did not report it) ranks
 * before every pod they do, as the kubelet ranks it. Ties keep the given order.
 */
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { parseQuantity } from '../config/quantity.js';
import type { PodStats } from '../metrics/stats.js';
import { podPriority } from './shutdown-plan.js';
import type { Signal } from './pressure.js';

/** The resource a signal starves, in the kubelet's names (its signalToResource). */
export type StarvedResource = 'memory' | 'ephemeral-storage' | 'inodes' | 'pids';

export const SIGNAL_RESOURCE: Readonly<Record<Signal, StarvedResource>> = {
  'memory.available': 'memory',
  'nodefs.available': 'ephemeral-storage',
  'nodefs.inodesFree': 'inodes',
  'imagefs.available': 'ephemeral-storage',
  'imagefs.inodesFree': 'inodes',
  'pid.available': 'pids',
};

/** A pod's stats by its UID (the kubelet's statsFunc). */
export type StatsOf = (pod: Pod) => PodStats | undefined;

export function statsByUid(pods: readonly PodStats[]): StatsOf {
  const m = new Map(pods.map((p) => [p.podRef.uid, p]));
  return (pod) => m.get(pod.metadata?.uid ?? '');
}

function bytes(text: unknown): number {
  if (typeof text !== 'string' && typeof text !== 'number') return 0;
  try {
    return Number(parseQuantity(String(text)).roundedUp);
  } catch {
    return 0;
  }
}

/** A container's request of `resource`; a limit without a request requests the limit (the API's defaulting). */
function containerRequest(c: Container, resource: string): number {
  const req = c.resources?.requests?.[resource];
  return bytes(req ?? c.resources?.limits?.[resource]);
}

/**
 * The pod's request of a resource (the kubelet's GetResourceRequestQuantity): the sum over
 * its containers and sidecars, or the largest init container's when larger, plus overhead.
 */
export function podRequest(pod: Pod, resource: string): number {
  const s = pod.spec;
  let sum = 0;
  let sidecars = 0;
  let initMax = 0;
  for (const c of s?.containers ?? []) sum += containerRequest(c, resource);
  for (const c of s?.initContainers ?? []) {
    const r = containerRequest(c, resource);
    if (c.restartPolicy === 'Always') {
      sidecars += r;
      sum += r;
    } else initMax = Math.max(initMax, r + sidecars);
  }
  return Math.max(sum, initMax) + bytes(s?.overhead?.[resource]);
}

/** What a pod uses of the starved resource, from its stats (undefined: no stats for it). */
export function podUsage(stats: PodStats | undefined, resource: StarvedResource): number | undefined {
  if (!stats) return undefined;
  switch (resource) {
    case 'memory':
      return stats.memory?.workingSetBytes ?? stats.containers.reduce((a, c) => a + (c.memory?.workingSetBytes ?? 0), 0);
    case 'ephemeral-storage':
      return stats['ephemeral-storage']?.usedBytes ?? stats.containers.reduce((a, c) => a + (c.rootfs?.usedBytes ?? 0), 0);
    case 'inodes':
      return stats['ephemeral-storage']?.inodesUsed ?? stats.containers.reduce((a, c) => a + (c.rootfs?.inodesUsed ?? 0), 0);
    case 'pids':
      return stats.process_stats?.process_count ?? 0;
  }
}

/** true first (the kubelet's cmpBool). */
function cmpBool(a: boolean, b: boolean): number {
  return a === b ? 0 : a ? -1 : 1;
}

/** The pods in eviction order for the starved resource (a new array; stable). */
export function rankForEviction(pods: readonly Pod[], resource: StarvedResource, statsOf: StatsOf): Pod[] {
  const requestOf = resource === 'memory' ? 'memory' : 'ephemeral-storage';
  const keyed = pods.map((pod, i) => {
    const usage = podUsage(statsOf(pod), resource);
    const request = resource === 'pids' ? 0 : podRequest(pod, requestOf);
    return { pod, i, usage, request, priority: podPriority(pod) };
  });
  keyed.sort((a, b) => {
    if (a.usage === undefined || b.usage === undefined) return cmpBool(a.usage === undefined, b.usage === undefined) || a.i - b.i;
    if (resource === 'pids') return a.priority - b.priority || b.usage - a.usage || a.i - b.i;
    return cmpBool(a.usage > a.request, b.usage > b.request) || a.priority - b.priority || b.usage - b.request - (a.usage - a.request) || a.i - b.i;
  });
  return keyed.map((k) => k.pod);
}

/**
 * A byte count as Go's resource.Quantity prints a BinarySI value: the largest binary suffix
 * that divides it exactly (`104857600` -> `100Mi`, `1536` -> `1536`), below 1024 plain.
 */
export function formatBinary(n: number): string {
  let v = Math.round(n);
  if (Math.abs(v) < 1024) return String(v);
  const suffixes = ['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'];
  let i = 0;
  while (i < suffixes.length - 1 && v % 1024 === 0 && v !== 0) {
    v /= 1024;
    i++;
  }
  return `${v}${suffixes[i]}`;
}

/** A plain count (inodes, process IDs) as Go prints a DecimalSI quantity: exact multiples of 1000 take k, M, G... */
export function formatDecimal(n: number): string {
  let v = Math.round(n);
  const suffixes = ['', 'k', 'M', 'G', 'T', 'P', 'E'];
  let i = 0;
  while (i < suffixes.length - 1 && v !== 0 && v % 1000 === 0) {
    v /= 1000;
    i++;
  }
  return `${v}${suffixes[i]}`;
}

/** The threshold met for the starved resource, as the message shows it. */
export interface ThresholdShown {
  /** The threshold's amount as the kubelet prints it (`100Mi`, or a percentage resolved against the capacity). */
  quantity: string;
  available: number;
}

/**
 * The kubelet's evictionMessage: "The node was low on resource: memory. Threshold quantity:
 * 100Mi, available: 50Mi. Container app was using 200Mi, request is 0, has larger
 * consumption of memory. " (its trailing space kept). Only memory and ephemeral storage
 * name the containers over their request (app and init containers, not ephemeral ones).
 */
export function evictionMessage(resource: StarvedResource, pod: Pod, stats: PodStats | undefined, met: ThresholdShown | undefined): string {
  let message = `The node was low on resource: ${resource}. `;
  const fmt = resource === 'inodes' || resource === 'pids' ? formatDecimal : formatBinary;
  if (met) message += `Threshold quantity: ${met.quantity}, available: ${fmt(met.available)}. `;
  if (!stats || (resource !== 'memory' && resource !== 'ephemeral-storage')) return message;
  const containers = [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])];
  for (const cs of stats.containers) {
    const c = containers.find((x) => x.name === cs.name);
    if (!c) continue;
    const requestText = c.resources?.requests?.[resource];
    const request = bytes(requestText);
    let usage: number | undefined;
    if (resource === 'memory') usage = cs.memory?.workingSetBytes;
    else if (cs.rootfs?.usedBytes !== undefined) usage = cs.rootfs.usedBytes;
    if (usage !== undefined && usage > request) {
      message += `Container ${c.name} was using ${formatBinary(usage)}, request is ${requestText === undefined ? '0' : String(requestText)}, has larger consumption of ${resource}. `;
    }
  }
  return message;
}

/** A configured quantity as Go prints it back: binary-suffixed ones canonical (`1024Mi` -> `1Gi`), the others as written. */
export function canonicalText(text: string): string {
  try {
    const q = parseQuantity(text);
    return q.format === 'BinarySI' ? formatBinary(q.value) : text;
  } catch {
    return text;
  }
}
