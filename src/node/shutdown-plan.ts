/**
 * Graceful node shutdown, the decisions (pure): which pods go in which group, in which order,
 * with which grace period, how long logind must be asked to wait, and the state file's content.
 * The kubelet's rules (pkg/kubelet/nodeshutdown):
 *
 * - `shutdownGracePeriod` T and `shutdownGracePeriodCriticalPods` C become two priority groups:
 *   priority 0 with T - C seconds, then priority 2000000000 (system-critical) with C seconds.
 *   `shutdownGracePeriodByPodPriority` gives the groups directly. Groups run from the lowest
 *   priority to the highest; a group with no pods is skipped (no wait).
 * - A pod goes in the group with the highest priority not above its own (below the lowest:
 *   the lowest; above the highest: the highest).
 * - A pod's grace period is its group's, or its own `terminationGracePeriodSeconds` when smaller.
 * - logind is asked for the sum of the groups' periods (`InhibitDelayMaxSec`).
 *
 * A pod's priority is `spec.priority`. A static pod never went through the API server's
 * priority admission, so for the two built-in classes nodelet fills in what it would have
 * (`system-node-critical` 2000001000, `system-cluster-critical` 2000000000); any other class
 * without `spec.priority` is 0, as the kubelet reads an unset priority.
 */
import type { Pod } from 'kubernetes-types/core/v1.js';
import { parseDuration } from '../config/duration.js';
import type { ShutdownGracePeriodByPodPriority } from '../config/types.js';

/** scheduling.SystemCriticalPriority. */
export const SYSTEM_CRITICAL_PRIORITY = 2_000_000_000;
/** The built-in priority classes and their values (the API server creates them). */
export const BUILTIN_PRIORITY_CLASSES: Readonly<Record<string, number>> = {
  'system-cluster-critical': SYSTEM_CRITICAL_PRIORITY,
  'system-node-critical': SYSTEM_CRITICAL_PRIORITY + 1000,
};

/** The kubelet's words for a pod stopped by a node shutdown, and for one refused while it lasts. */
export const NODE_SHUTDOWN_REASON = 'Terminated';
export const NODE_SHUTDOWN_MESSAGE = 'Pod was terminated in response to imminent node shutdown.';
export const NODE_SHUTDOWN_NOT_ADMITTED_REASON = 'NodeShutdown';
export const NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE = 'Pod was rejected as the node is shutting down.';
/** The shutdown manager's error while the node shuts down (its `ShutdownStatus()`): the Ready condition's message. */
export const NODE_SHUTTING_DOWN_ERROR = 'node is shutting down';
/** `<root-dir>/graceful_node_shutdown_state`. */
export const SHUTDOWN_STATE_FILE = 'graceful_node_shutdown_state';

export interface ShutdownGroup {
  priority: number;
  shutdownGracePeriodSeconds: number;
}

export interface ShutdownSettings {
  shutdownGracePeriod?: string | undefined;
  shutdownGracePeriodCriticalPods?: string | undefined;
  shutdownGracePeriodByPodPriority?: readonly ShutdownGracePeriodByPodPriority[] | undefined;
}

/**
 * The priority groups the configuration asks for, lowest priority first; empty when graceful
 * shutdown is off (both periods zero and no byPodPriority list). Assumes a validated config.
 */
export function shutdownGroups(s: ShutdownSettings, gates: { byPodPriority: boolean } = { byPodPriority: true }): ShutdownGroup[] {
  let groups: ShutdownGroup[];
  if (gates.byPodPriority && s.shutdownGracePeriodByPodPriority?.length) {
    // A field left out is Go's zero value.
    groups = s.shutdownGracePeriodByPodPriority.map((g) => ({ priority: g.priority ?? 0, shutdownGracePeriodSeconds: g.shutdownGracePeriodSeconds ?? 0 }));
  } else {
    // Whole seconds, as the kubelet's int64(d / time.Second).
    const total = parseDuration(s.shutdownGracePeriod ?? '0s');
    const critical = parseDuration(s.shutdownGracePeriodCriticalPods ?? '0s');
    if (total <= 0 || total - critical < 0) return [];
    groups = [
      { priority: 0, shutdownGracePeriodSeconds: Math.floor((total - critical) / 1000) },
      { priority: SYSTEM_CRITICAL_PRIORITY, shutdownGracePeriodSeconds: Math.floor(critical / 1000) },
    ];
  }
  return groups.sort((a, b) => a.priority - b.priority);
}

/** What logind must wait for: the sum of the groups' periods, in seconds. */
export function periodRequestedSeconds(groups: readonly ShutdownGroup[]): number {
  return groups.reduce((sum, g) => sum + g.shutdownGracePeriodSeconds, 0);
}

/** The pod's priority as the shutdown manager reads it (see the file comment). */
export function podPriority(pod: Pod): number {
  const p = pod.spec?.priority;
  if (typeof p === 'number') return p;
  const cls = pod.spec?.priorityClassName;
  return cls !== undefined ? (BUILTIN_PRIORITY_CLASSES[cls] ?? 0) : 0;
}

export interface PodGroup<P = Pod> extends ShutdownGroup {
  pods: P[];
}

/** The pods in their groups, groups in order (lowest priority first), empty groups kept. */
export function groupByPriority<P extends Pod>(groups: readonly ShutdownGroup[], pods: readonly P[]): PodGroup<P>[] {
  const out: PodGroup<P>[] = groups.map((g) => ({ ...g, pods: [] }));
  if (out.length === 0) return out;
  for (const pod of pods) {
    const prio = podPriority(pod);
    // The first group whose priority is >= the pod's; then step down unless it is equal.
    let i = out.findIndex((g) => g.priority >= prio);
    if (i === -1) i = out.length - 1;
    else if (i > 0 && out[i]!.priority > prio) i--;
    out[i]!.pods.push(pod);
  }
  return out;
}

/** The grace period a pod gets in its group: the group's, or the pod's own when smaller. */
export function podGraceSeconds(pod: Pod, group: ShutdownGroup): number {
  const own = pod.spec?.terminationGracePeriodSeconds;
  return typeof own === 'number' && own >= 0 && own <= group.shutdownGracePeriodSeconds ? own : group.shutdownGracePeriodSeconds;
}

/** The state file, as the kubelet writes it: Go's JSON of two time.Time (the zero time when unset). */
export interface ShutdownState {
  startTime?: Date | undefined;
  endTime?: Date | undefined;
}

const GO_ZERO_TIME = '0001-01-01T00:00:00Z';

export function encodeShutdownState(s: ShutdownState): string {
  return JSON.stringify({ startTime: s.startTime?.toISOString() ?? GO_ZERO_TIME, endTime: s.endTime?.toISOString() ?? GO_ZERO_TIME });
}

/** Reads the state file's JSON; a zero or missing time is undefined. Throws on anything else than that shape. */
export function decodeShutdownState(text: string): ShutdownState {
  const v = JSON.parse(text) as unknown;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
  const time = (k: 'startTime' | 'endTime'): Date | undefined => {
    const t = (v as Record<string, unknown>)[k];
    if (t === undefined || t === null || t === GO_ZERO_TIME) return undefined;
    if (typeof t !== 'string' || Number.isNaN(Date.parse(t))) throw new Error(`${k} is not a time: ${JSON.stringify(t)}`);
    return new Date(t);
  };
  return { startTime: time('startTime'), endTime: time('endTime') };
}

/** The logind.conf.d drop-in the kubelet writes when InhibitDelayMaxSec is too short. */
export const LOGIND_DROP_IN_DIR = '/etc/systemd/logind.conf.d';
export const LOGIND_DROP_IN_FILE = '99-kubelet.conf';

export function logindDropIn(seconds: number): string {
  return `# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=${seconds}\n`;
}
