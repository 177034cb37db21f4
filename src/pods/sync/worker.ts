/**
 * A pod's worker: the serialized runner of its syncs and of its removal, and the little
 * state nodelet keeps about it beyond what the runtime holds (backoffs of failing steps,
 * the status last computed).
 *
 * The worker's lifecycle is declared (in the manner of krustlet's state types): each state
 * names the states it may move to, `moveTo(from, to)` accepts only a declared pair at
 * compile time, and each state says which status the pod shows while in it.
 *
 *   syncing      the pod is wanted: every sync brings the runtime closer to its spec
 *   terminating  the pod is no longer wanted (or is being deleted): its containers are
 *                stopped with the grace period, then it is removed from the runtime
 *   removed      gone from the runtime; the manager forgets the worker
 */
import type { Pod, PodStatus } from 'kubernetes-types/core/v1.js';
import { backoffDelay } from '../../clock.js';
import type { ObservedPod } from './observed.js';

export const WORKER_TRANSITIONS = {
  syncing: ['terminating'],
  terminating: ['removed'],
  removed: [],
} as const satisfies Record<string, readonly string[]>;

export type WorkerState = keyof typeof WORKER_TRANSITIONS;
export type NextState<S extends WorkerState> = (typeof WORKER_TRANSITIONS)[S][number];

/** Backoff of a pod's failing steps (a start, a sandbox, a removal): 1 s doubling to 60 s. */
export const STEP_BACKOFF = { initialMs: 1_000, maxMs: 60_000 } as const;

/** A step that failed: what the pod shows while it backs off, and when it may run again. */
export interface Backoff {
  reason: string;
  message: string;
  failures: number;
  until: number;
}

/** The backoff after one more failure of a step (pure). */
export function nextBackoff(prev: Backoff | undefined, reason: string, message: string, now: number): Backoff {
  const failures = (prev?.failures ?? 0) + 1;
  return { reason, message, failures, until: now + backoffDelay(failures - 1, STEP_BACKOFF.initialMs, STEP_BACKOFF.maxMs) };
}

export class PodWorker {
  pod: Pod;
  /** The status last computed by a sync. */
  status: PodStatus | undefined;
  observed: ObservedPod | undefined;
  /** Per container: its failed start, kept until it starts or the backoff ends. */
  readonly startBackoff = new Map<string, Backoff>();
  /** The last sandbox creation failure, kept until its backoff ends. */
  sandboxBackoff: Backoff | undefined;
  /** The pod ran past its activeDeadlineSeconds: it is Failed for good (DeadlineExceeded). */
  deadlineExceeded = false;
  /** Refused at admission (admission.ts): it never runs, and is Failed with this reason. */
  rejected: { reason: string; message: string } | undefined;
  /** Per container: the restart count whose back-off was last reported as an event. */
  readonly backoffReported = new Map<string, number>();
  /**
   * When the worker must sync again (the kubelet's pod sync triggers): `needsSync` after a
   * source change, a sync that acted or failed, or a new worker; `wakeAt` when a backoff
   * it waits for ends; `observedKey` what the runtime held after its last sync (a relist
   * that sees something else wakes it); `lastSyncAt` for the periodic resync.
   */
  needsSync = true;
  wakeAt = Infinity;
  observedKey = '';
  /** The observation observedKey was last computed or confirmed for: the relist's same object is unchanged without a key. */
  observedRef: ObservedPod | undefined;
  lastSyncAt = -Infinity;
  #state: WorkerState;
  #next: (() => Promise<void>) | undefined;
  #running: Promise<void> | undefined;

  constructor(pod: Pod, state: 'syncing' | 'terminating' = 'syncing') {
    this.pod = pod;
    this.#state = state;
  }

  get state(): WorkerState {
    return this.#state;
  }

  /** Stopping or gone: no sync runs any more. */
  get terminating(): boolean {
    return this.#state !== 'syncing';
  }

  /** Moves along a declared transition; a worker not in `from` is a bug. */
  moveTo<S extends WorkerState>(from: S, to: NextState<S>): void {
    const allowed: readonly WorkerState[] = WORKER_TRANSITIONS[from];
    if (!allowed.includes(to)) throw new Error(`pod worker ${this.pod.metadata?.uid}: ${from} -> ${to} is not a declared transition`);
    if (this.#state !== from) throw new Error(`pod worker ${this.pod.metadata?.uid}: cannot move to ${to} from ${this.#state} (expected ${from})`);
    this.#state = to;
  }

  /** The status the pod shows in its current state. */
  shownStatus(): PodStatus | undefined {
    switch (this.#state) {
      case 'syncing':
      case 'terminating':
        return this.status; // the last one computed: a stopping pod shows what it ran as
      case 'removed':
        return undefined;
    }
  }

  /**
   * Runs `fn` now, or after the current run. Requests made meanwhile coalesce into one run
   * of the latest: a terminate asked for during a sync replaces the pending sync, never the
   * other way round (the relist stops asking for syncs once a worker is terminating).
   */
  request(fn: () => Promise<void>): Promise<void> {
    this.#next = fn;
    if (this.#running) return this.#running;
    this.#running = (async () => {
      try {
        for (let f = this.#next; f; f = this.#next) {
          this.#next = undefined;
          await f();
        }
      } finally {
        this.#running = undefined;
      }
    })();
    return this.#running;
  }

  /** A sync or termination is running (or queued behind one). */
  get busy(): boolean {
    return this.#running !== undefined;
  }

  idle(): Promise<void> {
    return this.#running ?? Promise.resolve();
  }
}
