/**
 * Connected mode: the statuses of the control plane's pods go back to it (the kubelet's
 * status manager), and a pod deleted there is removed for good once its containers are gone.
 *
 * A turn runs as soon as the pod manager has a changed status (`statusChanged()`, as the
 * kubelet's status manager sends a changed status at once; changes told while a turn runs
 * coalesce into one more turn), and every `periodMs` (1 s) as a backstop. Each turn
 * compares the status the pod manager computed with the last one written and patches
 * `pods/<name>/status` when it changed: a strategic merge patch, so conditions merge
 * by type and those of other writers (PodScheduled from the scheduler) stay; top-level
 * fields nodelet wrote before and no longer has are cleared with null. The pod's UID goes
 * in the patch, so a pod recreated under the same name is never given the old one's status.
 * A pod that is Succeeded or Failed in the API is never written again (a terminal phase is
 * final). A mirror pod gets its static pod's status. A pod with `deletionTimestamp` whose
 * containers the manager has removed is deleted with grace period 0 and a UID
 * precondition, which ends its deletion.
 */
import type { Pod, PodStatus } from 'kubernetes-types/core/v1.js';
import { realClock, type Clock } from '../../clock.js';
import { errorMessage, NodeletError } from '../../errors.js';
import type { Logger } from '../../log.js';
import { LoopOwner } from '../../loop.js';
import { podKey } from '../sources/lookup.js';
import { isMirrorPod } from './mirror.js';
import { sameJson } from './status.js';

export { sameJson };

export interface PodStatusApi {
  /** Strategic merge patch of `pods/<name>/status` with `{metadata: {uid}, status}`. */
  patchPodStatus(namespace: string, name: string, uid: string, status: Record<string, unknown>): Promise<void>;
  /** DELETE with `gracePeriodSeconds: 0` and `preconditions.uid`. */
  deletePod(namespace: string, name: string, uid: string): Promise<void>;
}

/** What the writer reads of the pod manager. */
export interface PodStatusSource {
  /**
   * The status to write for this API pod (for a mirror pod, its static pod's), or undefined
   * before the first sync. A new status is a new object: one returned is never changed in
   * place (the writer skips an object it has already compared).
   */
  statusOf(pod: Pod): PodStatus | undefined;
  /** Whether the agent still runs this API pod, or is still stopping and removing it. */
  active(pod: Pod): boolean;
}

export interface PodStatusWriterOptions {
  api: PodStatusApi;
  pods: PodStatusSource;
  logger: Logger;
  clock?: Clock;
  /**
   * How often statuses are compared besides the turns statusChanged() and a new or newly
   * deleting API pod ask for (default STATUS_SYNC_MS: a comparison, no request unless changed).
   */
  periodMs?: number;
}

const TERMINAL = new Set(['Succeeded', 'Failed']);

/**
 * The backstop comparison of every status, the kubelet's status manager's syncBatch period
 * (10 s): changes are written when the pod manager tells of them, so this only retries a
 * failed write and catches what nobody told of. It was 1 s: a comparison of every status
 * every second (connected idle with 110 pods in bench/footprint.ts: 1.38 → 1.23 % of a
 * core, one run each).
 */
export const STATUS_SYNC_MS = 10_000;

export class PodStatusWriter extends LoopOwner {
  readonly #o: Required<PodStatusWriterOptions>;
  /** The control plane's pods for this node, as last listed or watched (deleting ones included). */
  #apiPods: Pod[] = [];
  /**
   * Per UID: the status last written (a copy, made from the JSON sent, so the pod manager
   * changing its object later cannot hide a change) and its top-level keys. Compared each
   * turn field by field (sameJson), so a turn where nothing changed allocates nothing per
   * pod: a JSON string of every status every second was most of what this writer allocated.
   */
  readonly #written = new Map<string, { value: unknown; keys: string[]; seen?: PodStatus }>();
  readonly #deleted = new Set<string>();
  /** Per UID of the last set from setApiPods: whether it was being deleted. */
  #apiSeen = new Map<string, boolean>();
  /** Per UID: the last failure logged, so a failing write is logged once, not every turn. */
  readonly #failures = new Map<string, string>();

  constructor(o: PodStatusWriterOptions) {
    super({ name: 'pod-status', clock: o.clock ?? realClock, periodMs: o.periodMs ?? STATUS_SYNC_MS });
    this.#o = { clock: realClock, periodMs: STATUS_SYNC_MS, ...o };
  }

  /**
   * The control plane's full set of this node's pods (from the reflector). A pod not in the
   * previous set (its status may be waiting: a mirror pod just created) or newly being deleted
   * (a pod already out of the runtime is deleted from the API now) wakes a turn.
   */
  setApiPods(pods: Pod[]): void {
    this.#apiPods = pods;
    const prev = this.#apiSeen;
    const next = new Map<string, boolean>();
    let wake = false;
    for (const p of pods) {
      const uid = p.metadata?.uid;
      if (!uid) continue;
      const deleting = p.metadata?.deletionTimestamp != null;
      next.set(uid, deleting);
      if (!wake && prev.get(uid) !== deleting) wake = true;
    }
    this.#apiSeen = next;
    if (wake) this.wake();
  }

  /**
   * The pod manager has a changed status (or a pod left the runtime): a turn runs now, or
   * right after the one in flight. Any number of calls before that turn starts make one turn.
   */
  statusChanged(): void {
    this.wake();
  }

  /** One turn: write changed statuses, finish deletions. Never throws. */
  async syncOnce(): Promise<void> {
    const seen = new Set<string>();
    for (const pod of this.#apiPods) {
      const uid = pod.metadata?.uid;
      if (!uid) continue;
      seen.add(uid);
      // Mirror pods being deleted are the mirror pod manager's to delete and recreate.
      if (pod.metadata?.deletionTimestamp) {
        if (!isMirrorPod(pod)) await this.#finishDeletion(pod, uid);
      }
      else if (!TERMINAL.has(pod.status?.phase ?? '')) await this.#writeStatus(pod, uid);
    }
    for (const uid of this.#written.keys()) if (!seen.has(uid)) this.#written.delete(uid);
    for (const uid of this.#deleted) if (!seen.has(uid)) this.#deleted.delete(uid);
    for (const uid of this.#failures.keys()) if (!seen.has(uid)) this.#failures.delete(uid);
  }

  async #writeStatus(pod: Pod, uid: string): Promise<void> {
    const status = this.#o.pods.statusOf(pod);
    if (!status) return;
    const last = this.#written.get(uid);
    // `seen`: the object a turn already found equal to what was written. The pod manager
    // makes a new one only when it computes the status again (a pod's sync, about once a
    // minute at rest), so most pods of a backstop turn are not compared at all.
    if (last && last.seen === status) return;
    if (last && sameJson(status, last.value)) {
      last.seen = status;
      return;
    }
    const json = JSON.stringify(status);
    const patch: Record<string, unknown> = { ...status };
    for (const k of last?.keys ?? []) if (!(k in patch)) patch[k] = null;
    const { namespace = 'default', name = '' } = pod.metadata ?? {};
    try {
      await this.#o.api.patchPodStatus(namespace, name, uid, patch);
      this.#written.set(uid, { value: JSON.parse(json), keys: Object.keys(status), seen: status });
      this.#failures.delete(uid);
      if (last === undefined || (last.value as PodStatus).phase !== status.phase) this.#o.logger.info({ pod: podKey(pod), uid, phase: status.phase }, `pod status written: ${status.phase}`);
    } catch (err) {
      // Gone: the next watch event removes it; this status is not retried.
      if (err instanceof NodeletError && err.code === 'NOT_FOUND') {
        this.#written.set(uid, { value: JSON.parse(json), keys: Object.keys(status) });
        return;
      }
      this.#failed(pod, uid, `cannot write the pod's status: ${errorMessage(err)}`);
    }
  }

  async #finishDeletion(pod: Pod, uid: string): Promise<void> {
    if (this.#deleted.has(uid) || this.#o.pods.active(pod)) return;
    const { namespace = 'default', name = '' } = pod.metadata ?? {};
    try {
      await this.#o.api.deletePod(namespace, name, uid);
      this.#deleted.add(uid);
      this.#failures.delete(uid);
      this.#o.logger.info({ pod: podKey(pod), uid }, 'pod stopped and removed from the runtime; deleted from the control plane');
    } catch (err) {
      if (err instanceof NodeletError && (err.code === 'NOT_FOUND' || err.code === 'CONFLICT')) {
        // Already gone, or the name now holds another pod (the UID precondition failed).
        this.#deleted.add(uid);
        return;
      }
      this.#failed(pod, uid, `cannot delete the pod: ${errorMessage(err)}`);
    }
  }

  #failed(pod: Pod, uid: string, msg: string): void {
    if (this.#failures.get(uid) === msg) return;
    this.#failures.set(uid, msg);
    this.#o.logger.warn({ pod: podKey(pod), uid }, `${msg}; will retry`);
  }
}
