/**
 * Local ephemeral storage limits, as the kubelet's eviction manager enforces them
 * (`localStorageEviction`, with `localStorageCapacityIsolation: true`, the default). Each
 * housekeeping turn, before the node-pressure thresholds, every active pod that declares such a
 * limit is measured, and evicted at once (grace 1 s, no DisruptionTarget condition) when, in
 * the kubelet's order:
 * 1. an emptyDir on disk holds more than its `sizeLimit`:
 *    `Usage of EmptyDir volume "cache" exceeds the limit "1Mi". `
 * 2. the pod's ephemeral usage (its containers' writable layers and logs, its emptyDirs on disk
 *    and configMap volumes) is more than its containers' `ephemeral-storage` limits together
 *    (component-helpers' PodLimits): `Pod ephemeral local storage usage exceeds the total limit
 *    of containers 2Gi. `
 * 3. an app container's writable layer plus its logs is more than its own limit:
 *    `Container app exceeded its local ephemeral storage limit "1Gi". `
 *
 * Directories are measured as `du -x` does (allocated blocks, hard links once, not across
 * mounts, symlinks not followed), asynchronously and bounded: at most MAX_ENTRIES entries per
 * pod and turn, a larger tree counted as far as that (a lower bound, logged). Pods without a
 * limit are never walked, so a node whose pods declare none pays nothing. The writable layer
 * comes from the runtime's container stats; the kubelet leaves it out where the image
 * filesystem is a dedicated one, nodelet always counts it. Memory-backed emptyDirs are left
 * out: their tmpfs is already mounted with the limit as its size.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Pod, Volume } from 'kubernetes-types/core/v1.js';
import { parseQuantity } from '../config/quantity.js';
import type { PodStats } from '../metrics/stats.js';
import { podLimitAmounts } from '../pods/sync/predicates.js';
import { canonicalText, formatBinary, formatDecimal } from './eviction-rank.js';

/** Entries (files and directories) walked per pod and turn at most. */
export const MAX_ENTRIES = 100_000;

/** What was measured of one pod, in bytes. */
export interface LocalUsage {
  /** emptyDir (disk) and configMap volumes by name. */
  volumes: ReadonlyMap<string, number>;
  /** Each container's log files by container name. */
  logs: ReadonlyMap<string, number>;
  /** Whether the walk stopped at MAX_ENTRIES (the figures are lower bounds). */
  truncated: boolean;
}

interface Limit {
  bytes: number;
  text: string;
}

function limitOf(text: unknown): Limit | undefined {
  if (typeof text !== 'string' && typeof text !== 'number') return undefined;
  try {
    const q = parseQuantity(String(text));
    const bytes = Number(q.roundedUp);
    return bytes > 0 ? { bytes, text: String(text) } : undefined;
  } catch {
    return undefined;
  }
}

/** The emptyDirs on disk with a positive sizeLimit. */
function emptyDirLimits(pod: Pod): Array<{ name: string; limit: Limit }> {
  const out: Array<{ name: string; limit: Limit }> = [];
  for (const v of pod.spec?.volumes ?? []) {
    if (!v.emptyDir || v.emptyDir.medium === 'Memory') continue;
    const limit = limitOf(v.emptyDir.sizeLimit);
    if (limit) out.push({ name: v.name, limit });
  }
  return out;
}

/** The volumes whose bytes count as the pod's local ephemeral storage (the kubelet's IsLocalEphemeralVolume). */
export function localVolumes(pod: Pod): string[] {
  return (pod.spec?.volumes ?? []).filter((v) => (v.emptyDir && v.emptyDir.medium !== 'Memory') || v.configMap).map((v) => v.name);
}

/**
 * The pod's ephemeral-storage limit as component-helpers' PodLimits (predicates.ts
 * podLimitAmounts: containers and sidecars summed, an init container's own if larger, the
 * overhead); undefined when no container declares one. Printed as Go prints the sum (the
 * format of the first limit declared).
 */
export function podEphemeralLimit(pod: Pod): Limit | undefined {
  const containers = [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])];
  const first = containers.map((c) => limitOf(c.resources?.limits?.['ephemeral-storage'])).find((l) => l !== undefined);
  const bytes = podLimitAmounts(pod).get('ephemeral-storage');
  if (!first || !bytes) return undefined;
  const binary = parseQuantity(first.text).format === 'BinarySI';
  return { bytes, text: binary ? formatBinary(bytes) : formatDecimal(bytes) };
}

/** Whether the pod declares a local storage limit (only such pods are measured). */
export function hasLocalStorageLimit(pod: Pod): boolean {
  return emptyDirLimits(pod).length > 0 || podEphemeralLimit(pod) !== undefined;
}

/** The kubelet's verdict on one measured pod: the eviction message, or undefined. */
export function localStorageViolation(pod: Pod, usage: LocalUsage, stats: PodStats | undefined): string | undefined {
  for (const { name, limit } of emptyDirLimits(pod)) {
    const used = usage.volumes.get(name);
    if (used !== undefined && used > limit.bytes) return `Usage of EmptyDir volume ${JSON.stringify(name)} exceeds the limit ${JSON.stringify(canonicalText(limit.text))}. `;
  }
  const rootfs = new Map((stats?.containers ?? []).map((c) => [c.name, c.rootfs?.usedBytes ?? 0]));
  const podLimit = podEphemeralLimit(pod);
  if (podLimit) {
    let total = 0;
    for (const v of localVolumes(pod)) total += usage.volumes.get(v) ?? 0;
    for (const n of new Set([...rootfs.keys(), ...usage.logs.keys()])) total += (rootfs.get(n) ?? 0) + (usage.logs.get(n) ?? 0);
    if (total > podLimit.bytes) return `Pod ephemeral local storage usage exceeds the total limit of containers ${podLimit.text}. `;
  }
  for (const c of pod.spec?.containers ?? []) {
    const limit = limitOf(c.resources?.limits?.['ephemeral-storage']);
    if (!limit || (!rootfs.has(c.name) && !usage.logs.has(c.name))) continue;
    const used = (rootfs.get(c.name) ?? 0) + (usage.logs.get(c.name) ?? 0);
    if (used > limit.bytes) return `Container ${c.name} exceeded its local ephemeral storage limit ${JSON.stringify(canonicalText(limit.text))}. `;
  }
  return undefined;
}

/** A walk's running count, shared by the directories of one pod. */
interface Walk {
  left: number;
  seen: Set<string>;
}

/**
 * Bytes allocated under `dir` as `du -x -s` counts them; 0 when it does not exist. Never
 * follows a symlink nor enters another filesystem; stops when `walk.left` runs out.
 */
export async function diskUsage(dir: string, walk: Walk): Promise<number> {
  let root;
  try {
    root = await fsp.lstat(dir);
  } catch {
    return 0;
  }
  if (!root.isDirectory()) return root.blocks * 512;
  let total = root.blocks * 512;
  const pending = [dir];
  while (pending.length && walk.left > 0) {
    const d = pending.pop()!;
    let entries: string[];
    try {
      entries = await fsp.readdir(d);
    } catch {
      continue; // gone or unreadable meanwhile: what is left is counted
    }
    for (const name of entries) {
      if (--walk.left < 0) break;
      const p = path.join(d, name);
      const st = await fsp.lstat(p).catch(() => undefined);
      if (!st || st.dev !== root.dev) continue;
      if (st.nlink > 1 && !st.isDirectory()) {
        const key = `${st.dev}:${st.ino}`;
        if (walk.seen.has(key)) continue;
        walk.seen.add(key);
      }
      total += st.blocks * 512;
      if (st.isDirectory()) pending.push(p);
    }
  }
  return total;
}

export interface LocalStorageDirs {
  /** `<root-dir>/pods/<uid>/volumes/<plugin>/<name>` of a volume. */
  volumeDir(pod: Pod, volume: Volume): string | undefined;
  /** `<podLogsDir>/<namespace>_<name>_<uid>/<container>`. */
  containerLogDir(pod: Pod, container: string): string | undefined;
}

/** Measures a pod's local volumes and its containers' logs (MAX_ENTRIES at most). */
export async function measureLocalUsage(pod: Pod, dirs: LocalStorageDirs, maxEntries = MAX_ENTRIES): Promise<LocalUsage> {
  const walk: Walk = { left: maxEntries, seen: new Set() };
  const volumes = new Map<string, number>();
  const wanted = new Set(localVolumes(pod));
  for (const v of pod.spec?.volumes ?? []) {
    if (!wanted.has(v.name)) continue;
    const dir = dirs.volumeDir(pod, v);
    if (dir) volumes.set(v.name, await diskUsage(dir, walk));
  }
  const logs = new Map<string, number>();
  for (const c of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]) {
    const dir = dirs.containerLogDir(pod, c.name);
    if (dir) logs.set(c.name, await diskUsage(dir, walk));
  }
  return { volumes, logs, truncated: walk.left < 0 };
}
