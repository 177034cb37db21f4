/**
 * The pod manager: one serialized worker per pod UID, a relist loop that wakes them,
 * and the removal of runtime pods that no pod source wants any more.
 *
 * Contract: `setDesired` is called by the pod sources (static files now, the control
 * plane later) with the full desired set whenever it changes; `syncOnce` is one relist
 * turn (tests call it); `start`/`stop` run the loop. Nothing here keeps state that the
 * runtime does not also hold, except reasons and backoffs for errors, which are
 * re-learned after a restart.
 */
import type { Pod, PodStatus } from 'kubernetes-types/core/v1.js';
import { realClock, type Clock } from '../../clock.js';
import { errorMessage, NodeletError } from '../../errors.js';
import type { HealthCheck } from '../../health/checks.js';
import { nodeRef, noEvents, podRef, type EventSink } from '../../events.js';
import type { Logger } from '../../log.js';
import { Loop } from '../../loop.js';
import { notInRuntime, type ObservedPod } from './observed.js';
import { admitPod, rejectedStatus, type Eviction, type PodAdmitHandler } from './admission.js';
import { podKey } from '../sources/lookup.js';
import { computePodActions, type BackoffPolicy, type Waiting } from './plan.js';
import type { PodRuntime } from '../cri/runtime-port.js';
import { ProbeManager } from '../probes/probes.js';
import { computePodStatus, statusPodIP, sameJson } from '../status/status.js';
import { addProbeKills, checkImageEarly, collectGarbage, ensureSandbox, type EarlyImage, activeDeadlineAt, DEADLINE_EXCEEDED, holdFinished, holdPastDeadline, killContainers, killPod, removePod, reportBackOffs, startContainers, type StepContext } from './sync-steps.js';
import { nextBackoff, PodWorker, type Backoff } from './worker.js';
import { countingPodRuntime, noPodMetrics, type PodManagerMetrics } from './metrics-hooks.js';

export interface PodManagerOptions {
  runtime: PodRuntime;
  logger: Logger;
  clock?: Clock;
  relistMs?: number;
  hostIP?: string;
  serializeImagePulls?: boolean;
  /** Grace period for runtime pods found without a desired pod and without the annotation. */
  defaultGracePeriodSeconds?: number;
  /** Where pod events go (connected: the control plane). */
  events?: EventSink;
  /** What /metrics counts of the pods (running pods and containers, worker and start durations, starts). */
  metrics?: PodManagerMetrics;
  /** This node's name: the Node the warning about another agent's pods is an event on (none when unset). */
  nodeName?: string;
  /**
   * The kubelet's syncFrequency (default 1 min): a steady pod is synced again at the first
   * relist at least this long after its last sync, and no later than half of it more (the
   * kubelet requeues a synced pod after syncFrequency plus a jitter of up to half of it).
   * Otherwise a pod syncs only when something asks for it: its observation in the relist
   * changed (the PLEG), a source changed it, a probe result changed, a backoff it waits for
   * ended, or its last sync acted or failed.
   */
  syncFrequencyMs?: number;
  /** The crash-loop back-off (default: the kubelet's 10s doubling to 5m). */
  crashLoopBackOff?: BackoffPolicy;
  /**
   * Told, with the pod's UID, when what the status writer reads of a pod changed: a sync
   * computed a status that differs from the last one, or the pod left the runtime (no longer
   * `active`). Called synchronously after the change; connected mode wakes the status writer
   * with it, so a change reaches the API at once, as the kubelet's status manager sends it.
   */
  onStatusChange?: (uid: string) => void;
  /**
   * The runtime's change events (runtime-events.ts). While a subscription is `live`, a
   * steady node relists on `runtimeChanged()` and at least every EVENTED_RELIST_MS, and
   * still every `relistMs` while a pod waits for a look (a sync that acted or failed, a pod
   * being stopped), when a backoff or the housekeeping falls due, and when a pod's periodic
   * sync can wait no longer (SYNC_SLACK).
   */
  runtimeEvents?: { readonly live: boolean };
  /**
   * Admission (admission.ts), asked once for each pod when it first comes: a rejected pod
   * never runs; it is Failed with the reason, and a Warning event says why. Default: none.
   */
  admitHandlers?: readonly PodAdmitHandler[];
}

/**
 * The longest wait between two relists while runtime events are live: a safety net for an
 * event the runtime did not send (the kubelet's Evented PLEG relists every 5 min; the
 * housekeeping below wants a turn every 10 s anyway).
 */
export const EVENTED_RELIST_MS = 10_000;

/**
 * A steady pod's periodic sync may wait up to this fraction of syncFrequency past it, as the
 * kubelet's pod workers requeue with `wait.Jitter(resyncInterval, 0.5)`. nodelet uses the
 * slack to ride the relists that run anyway: with live events, pods that started at different
 * times would otherwise each call for a relist of their own when their minute is up (110 pods
 * started over a minute: a relist every second, for ever).
 */
const SYNC_SLACK = 0.5;

/** How long after a runtime event the relist keeps its `relistMs` pace (runtimeChanged). */
export const RUNTIME_CHANGE_FOLLOW_MS = 3000;

/**
 * The looks after a runtime event, in ms after it, before the `relistMs` pace: containerd's
 * event service publishes a task's exit as its CRI plugin receives it, and the plugin's own
 * record (what ListContainers answers) follows a few ms later; the relist at the event can
 * still list the container running, the one 30 ms on sees it exited.
 */
export const RUNTIME_CHANGE_LOOKS_MS: readonly number[] = [30, 100, 300];

/** How often the directories pods left on the node are looked for (the kubelet's housekeeping runs every 2 s; a directory listing every 10 s is plenty). */
const HOUSEKEEPING_MS = 10_000;

/** Serializes async work: one at a time, in order. */
class Mutex {
  #tail: Promise<unknown> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const r = this.#tail.then(fn, fn);
    this.#tail = r.catch(() => undefined);
    return r;
  }
}

/** A pod's creation time in ms for ordering (unset or unparsable: first, as Go's zero time). */
function creationOrder(pod: Pod): number {
  const t = Date.parse(pod.metadata?.creationTimestamp ?? '');
  return Number.isNaN(t) ? 0 : t;
}

export class PodManager {
  readonly #o: Required<Omit<PodManagerOptions, 'hostIP' | 'nodeName' | 'crashLoopBackOff' | 'runtimeEvents' | 'admitHandlers'>> & { hostIP?: string; nodeName?: string; crashLoopBackOff?: BackoffPolicy; runtimeEvents?: { readonly live: boolean }; admitHandlers?: readonly PodAdmitHandler[] };
  readonly #workers = new Map<string, PodWorker>();
  readonly #pulls = new Mutex();
  #desired = new Map<string, Pod>();
  readonly #loop: Loop;
  #lastTurn = 0;
  #lastError = '';
  #sourcesReady = false;
  /** Runtime pods whose removal failed, by UID: no new attempt before the backoff ends. */
  readonly #removals = new Map<string, Backoff>();
  /** When leftover pod directories were last looked for (0: not yet; the first turn after sourcesReady does). */
  #lastHousekeeping = -Infinity;
  readonly #probes: ProbeManager;
  /** Runtime pods marked with another node's name already reported (one warning per pod). */
  readonly #foreign = new Set<string>();
  /** Clock time each pod was first seen, until it first runs (kubelet_pod_start_duration_seconds). */
  readonly #firstSeen = new Map<string, number>();
  /**
   * Idle cost: a steady pod's sync reuses the relist's observation instead of asking the
   * runtime again (the kubelet's PLEG cache idea), but only an observation listed after
   * that worker's last sync ended (so it holds that sync's effects). #seq orders both.
   */
  #seq = 0;
  readonly #syncedSeq = new WeakMap<PodWorker, number>();
  /** Pods the eviction manager ended (evict), by UID: Failed for good, as a pod past its deadline. */
  readonly #evictions = new Map<string, Eviction>();
  /** The UIDs the last successful listing found in the runtime; undefined until one succeeded. */
  #listedUids: ReadonlySet<string> | undefined;

  constructor(o: PodManagerOptions) {
    this.#o = { clock: realClock, relistMs: 1000, syncFrequencyMs: 60_000, serializeImagePulls: true, defaultGracePeriodSeconds: 30, events: noEvents, metrics: noPodMetrics, onStatusChange: () => {}, ...o };
    this.#o.runtime = countingPodRuntime(this.#o.runtime, this.#o.metrics);
    this.#probes = new ProbeManager({
      exec: this.#exec,
      clock: this.#o.clock,
      events: this.#o.events,
      logger: this.#o.logger.child({ component: 'probes' }),
      onChange: (uid) => this.#wake(uid),
    });
    this.#loop = new Loop({ name: 'pod-relist', turn: (signal) => this.#turn(signal), delayMs: () => this.#relistDelayMs(), clock: this.#o.clock, logger: this.#o.logger });
  }

  /** When the runtime last told of a change (runtimeChanged). */
  #changedAt = -Infinity;

  /**
   * The runtime told of a change (or events may have been missed): relist now, and every
   * `relistMs` for RUNTIME_CHANGE_FOLLOW_MS more. containerd's event service publishes a
   * task's exit as its CRI plugin receives it too, so a relist at once can still list the
   * container running: the looks that follow see the CRI plugin's update.
   */
  runtimeChanged(): void {
    this.#changedAt = this.#o.clock.now();
    this.#loop.wake();
  }

  /** Where the last successful listing of the relist started, in #seq. */
  #listedSeq = 0;

  /**
   * The runtime's event told that a container of pod `uid` exited (cri-pod-runtime.ts
   * noteContainerEvent): a steady pod syncs at once on the last listing with that exit
   * (runtime.observeNoted, no call to the runtime), as the kubelet's Evented PLEG syncs a pod
   * on the statuses its event carries, instead of waiting for a relist whose listing can
   * still show the container running. Only a pod whose last sync ended before that listing
   * (so it holds the sync's effects), not one in a sync or waiting for one: the relist
   * (runtimeChanged) sees to those. At most one sync per pod queued, whatever the events.
   */
  runtimeContainerExited(uid: string | undefined): void {
    if (uid === undefined) return;
    const w = this.#workers.get(uid);
    const want = this.#desired.get(uid);
    if (!w || !want || deleting(want) || w.terminating || w.rejected || w.busy || w.needsSync) return;
    if ((this.#syncedSeq.get(w) ?? 0) > this.#listedSeq) return;
    const noted = this.#o.runtime.observeNoted?.(uid);
    if (!noted) return;
    void w.request(async () => this.#sync(w, await noted.catch(() => undefined)));
  }

  /**
   * The wait before the next relist: `relistMs` (the kubelet's 1 s PLEG), or with live
   * runtime events until the first thing falls due, at most EVENTED_RELIST_MS.
   */
  #relistDelayMs(): number {
    const now = this.#o.clock.now();
    // relistMs after the last listing (the turn may have waited for its syncs since).
    const every = Math.max(0, this.#o.relistMs - (now - this.#lastTurn));
    if (!this.#o.runtimeEvents?.live) return every;
    const since = now - this.#changedAt;
    if (since < RUNTIME_CHANGE_FOLLOW_MS) {
      const look = RUNTIME_CHANGE_LOOKS_MS.find((t) => t > since);
      return look === undefined ? every : Math.min(every, look - since);
    }
    let due = now + EVENTED_RELIST_MS;
    const periodic = this.#o.syncFrequencyMs * (1 + SYNC_SLACK);
    for (const w of this.#workers.values()) {
      if (w.needsSync || w.terminating || w.busy) return every;
      due = Math.min(due, w.wakeAt, w.lastSyncAt + periodic);
    }
    for (const r of this.#removals.values()) due = Math.min(due, r.until);
    if (this.#sourcesReady) due = Math.min(due, this.#lastHousekeeping + HOUSEKEEPING_MS);
    return Math.min(EVENTED_RELIST_MS, Math.max(every, due - now));
  }

  /**
   * The worker of a pod that has just come: admitted, or rejected for good (the kubelet's
   * canAdmitPod then rejectPod): Failed with the handler's reason, a Warning event, logged.
   */
  #newWorker(pod: Pod): PodWorker {
    const w = new PodWorker(pod);
    const uid = pod.metadata!.uid!;
    this.#workers.set(uid, w);
    const handlers = this.#o.admitHandlers ?? [];
    const rejected = handlers.length ? admitPod(pod, handlers, this.#activePods(w)) : undefined;
    if (!rejected) {
      this.#firstSeen.set(uid, this.#o.clock.now());
      return w;
    }
    w.rejected = rejected;
    this.#log.warn({ pod: podKey(pod), uid, reason: rejected.reason }, `pod rejected: ${rejected.message}`);
    this.#o.events.emit(podRef(pod), 'Warning', rejected.reason, rejected.message);
    this.#setStatus(w, rejectedStatus(pod, rejected));
    return w;
  }

  /**
   * The pods that hold the node's resources and host ports, for admission (the kubelet's
   * active pods): admitted, not finished (a terminal phase, or stopped and removed), the new
   * pod's own worker aside. A pod being stopped still holds them until it is gone.
   */
  #activePods(except: PodWorker): Pod[] {
    const out: Pod[] = [];
    for (const w of this.#workers.values()) {
      if (w === except || w.rejected || w.state === 'removed') continue;
      const phase = w.status?.phase;
      if (phase === 'Succeeded' || phase === 'Failed') continue;
      out.push(w.pod);
    }
    return out;
  }

  /**
   * The sync of a rejected pod: nothing starts; what the runtime still runs for it (a pod
   * found running when nodelet started, rejected now) is stopped; it stays Failed.
   */
  async #syncRejected(w: PodWorker, listed: ObservedPod | undefined): Promise<void> {
    const ctx = this.#stepContext(w.pod, w);
    w.needsSync = false;
    w.wakeAt = Infinity;
    try {
      const observed = listed ?? (await ctx.runtime.observePod(w.pod.metadata!.uid!));
      w.observed = observed;
      if (observed.containers.some((c) => c.state === 'running' || c.state === 'created') || observed.sandboxes.some((s) => s.ready)) {
        for (const f of await killPod(ctx, w.pod, observed, ctx.gracePeriodSeconds)) ctx.log.warn(f);
        w.needsSync = true;
      }
    } catch (err) {
      ctx.log.warn({ err: errorMessage(err) }, `cannot stop the containers of rejected pod: ${errorMessage(err)}`);
      w.needsSync = true;
    }
    this.#setStatus(w, rejectedStatus(w.pod, w.rejected!));
    w.observedKey = observedKey(w.observed);
    w.observedRef = w.observed;
    w.lastSyncAt = ctx.clock.now();
    this.#syncedSeq.set(w, ++this.#seq);
  }

  /** A probe result changed: the pod's worker syncs now (status, or a restart). */
  #wake(uid: string): void {
    const w = this.#workers.get(uid);
    if (w && !w.terminating && this.#desired.has(uid)) void w.request(() => this.#sync(w));
  }

  /** The probe scheduler, for tests that drive it turn by turn. */
  get probes(): ProbeManager {
    return this.#probes;
  }

  get #log(): Logger {
    return this.#o.logger;
  }

  /**
   * The full desired set from the sources. A new pod the runtime cannot hold anything of
   * syncs at once (#startUnlisted); any other change (a pod changed, removed, wanted again
   * while it stops, or new but maybe in the runtime) asks for a relist, which wakes its worker.
   */
  setDesired(pods: Pod[]): void {
    const next = new Map<string, Pod>();
    for (const p of pods) {
      const uid = p.metadata?.uid;
      if (!uid) throw new NodeletError('INVALID_ARGUMENT', `pod ${p.metadata?.namespace}/${p.metadata?.name} has no uid`);
      next.set(uid, p);
    }
    this.#desired = next;
    const added: Pod[] = [];
    let relist = false;
    for (const [uid, pod] of next) {
      const w = this.#workers.get(uid);
      if (w && !w.terminating) {
        if (w.pod !== pod) {
          w.needsSync = true;
          relist = true;
        }
        w.pod = pod;
      } else if (!w && !deleting(pod)) {
        added.push(pod);
      } else {
        relist = true;
      }
    }
    for (const [uid, w] of this.#workers) if (!w.terminating && !next.has(uid)) relist = true;
    // New pods are admitted oldest first, as the kubelet's HandlePodAdditions: when they do
    // not all fit, the ones created first run.
    added.sort((a, b) => creationOrder(a) - creationOrder(b));
    for (const pod of added) {
      this.#log.info({ pod: podKey(pod), uid: pod.metadata!.uid }, 'pod added');
      if (!this.#startUnlisted(this.#newWorker(pod))) relist = true;
    }
    // Only new pods, each started at once: nothing for a relist to do.
    if (relist || added.length === 0) this.#kick();
  }

  /**
   * A new pod's first sync at once, without a relist, when the runtime cannot hold anything
   * of it: the last listing found nothing for its UID and no removal of it failed since. The
   * runtime gains a pod's sandboxes only through its worker, and a worker is forgotten only
   * once its pod is out of the runtime (or with a failed removal, kept in #removals), so that
   * absence still holds. False (the relist's listing decides) before the first listing, as
   * after a restart, where the pod may be there to adopt.
   */
  #startUnlisted(w: PodWorker): boolean {
    const uid = w.pod.metadata!.uid!;
    if (!this.#listedUids || this.#listedUids.has(uid) || this.#removals.has(uid)) return false;
    void w.request(() => this.#sync(w, notInRuntime(uid))).catch((err) => this.#log.error({ err: errorMessage(err) }, 'pod worker failed'));
    return true;
  }

  /**
   * A relist asked for by a change of the desired set: at most one in flight, and one more
   * after it when changes came meanwhile. One relist per change let a burst of 5,000 pod
   * watch events start ~1,400 concurrent CRI list pairs, whose answers then held the event
   * loop (decode and garbage collection) for seconds after the burst.
   */
  #kicked: Promise<void> | undefined;
  #kickAgain = false;
  #kick(): void {
    if (this.#kicked) {
      this.#kickAgain = true;
      return;
    }
    this.#kicked = (async () => {
      do {
        this.#kickAgain = false;
        await this.#turn();
      } while (this.#kickAgain);
    })().finally(() => (this.#kicked = undefined));
  }

  /**
   * Every pod source has delivered its first full set: from now on, runtime pods that no
   * source wants are removed. Before it, a restarted nodelet would kill the pods it is about
   * to adopt.
   */
  setSourcesReady(): void {
    if (this.#sourcesReady) return;
    this.#sourcesReady = true;
    this.#kick();
  }

  /** Pods with their current status, for /pods and the checkpoint lookup. */
  listPods(): Pod[] {
    const out: Pod[] = [];
    for (const [uid, pod] of this.#desired) {
      const w = this.#workers.get(uid);
      out.push({ apiVersion: 'v1', kind: 'Pod', ...pod, status: w?.shownStatus() ?? { phase: 'Pending' } });
    }
    return out;
  }

  /**
   * The pods the eviction manager may rank (the kubelet's active pods): wanted, admitted, not
   * finished (a terminal phase), not being removed, not already evicted.
   */
  activePods(): Pod[] {
    const out: Pod[] = [];
    for (const [uid, w] of this.#workers) {
      const want = this.#desired.get(uid);
      if (!want || deleting(want) || w.terminating || w.rejected || this.#evictions.has(uid)) continue;
      const phase = w.status?.phase;
      if (phase !== 'Succeeded' && phase !== 'Failed') out.push(w.pod);
    }
    return out;
  }

  /**
   * Ends a pod for the eviction manager (the kubelet's TerminatePodAbnormallyAndWait): what
   * runs is stopped with `gracePeriodSeconds`, nothing starts again, and the pod is Failed
   * with the eviction's reason and message and a DisruptionTarget condition, for as long as
   * it is wanted. Resolves once its sync (the stop) is done: true, or false when the pod is
   * not a running pod of this node (unknown, finished, being removed, already evicted).
   */
  async evict(uid: string, e: Eviction): Promise<boolean> {
    const w = this.#workers.get(uid);
    if (!w || !this.#desired.has(uid) || w.terminating || w.rejected || this.#evictions.has(uid)) return false;
    if (w.status?.phase === 'Succeeded' || w.status?.phase === 'Failed') return false;
    this.#evictions.set(uid, { ...e });
    w.needsSync = true;
    await w.request(() => this.#sync(w));
    return true;
  }

  /** The status last computed for a pod, or undefined before its first sync. */
  podStatus(uid: string): PodStatus | undefined {
    return this.#workers.get(uid)?.status;
  }

  /**
   * Whether the pod still has a worker (running, or being stopped and removed from the
   * runtime) or is still in the runtime after a failed removal, waiting for its retry.
   */
  active(uid: string): boolean {
    return this.#workers.has(uid) || this.#removals.has(uid);
  }

  /** One pod with its status; builds only that one (the checkpoint and log routes ask once per request). */
  getPod(namespace: string, name: string): Pod | undefined {
    for (const [uid, pod] of this.#desired) {
      if (pod.metadata?.namespace !== namespace || pod.metadata?.name !== name) continue;
      return { apiVersion: 'v1', kind: 'Pod', ...pod, status: this.#workers.get(uid)?.shownStatus() ?? { phase: 'Pending' } };
    }
    return undefined;
  }

  /**
   * The loop's own liveness: it turns (whatever the runtime answers). The threshold is the
   * kubelet's PLEG relist threshold (3 min): longer than one CRI call may take
   * (runtimeRequestTimeout, 2 min), so a slow runtime shows in the node's Ready condition
   * and logs, and only a loop stuck beyond any deadline fails /healthz and the watchdog.
   */
  healthCheck(maxAgeMs = Math.max(180_000, this.#o.relistMs * 10)): HealthCheck {
    return {
      name: 'pod-workers',
      check: () => {
        const age = this.#o.clock.now() - this.#lastTurn;
        if (this.#lastTurn && age > maxAgeMs) throw new Error(`pod relist has not run for ${Math.round(age / 1000)}s`);
      },
    };
  }

  /** One relist: sync every desired pod and terminate runtime pods nobody wants. */
  async syncOnce(): Promise<void> {
    await Promise.all(await this.#relist());
  }

  /**
   * Lists the runtime and hands each pod to its worker; resolves once the work is handed
   * out, with the workers' promises. The loop does not wait for the workers: one pod's
   * long image pull or slow stop never holds back the others or the relist.
   */
  async #relist(): Promise<Promise<void>[]> {
    const listSeq = ++this.#seq;
    const all = await this.#listRuntime(listSeq);
    if (!all) return [];
    const jobs: Promise<void>[] = [];
    const now = this.#o.clock.now();
    const listed = new Map(all.map((o) => [o.uid, o]));
    // A desired pod whose old worker finished terminating (same UID wanted again) gets a new
    // one; a pod being deleted in the control plane never starts again.
    for (const [uid, pod] of this.#desired) if (!this.#workers.has(uid) && !deleting(pod)) this.#newWorker(pod);
    for (const [uid, w] of this.#workers) {
      const want = this.#desired.get(uid);
      if (!want || deleting(want) || w.terminating) continue;
      const obs = listed.get(uid);
      // A steady pod is left alone: nothing changed in the runtime, nothing asked for it.
      // (A sync in flight is still waited for by syncOnce.)
      if (!w.needsSync && now < w.wakeAt && now - w.lastSyncAt < this.#o.syncFrequencyMs && this.#unchanged(w, obs)) {
        if (w.busy) jobs.push(w.idle());
        continue;
      }
      jobs.push(w.request(() => this.#syncListed(w, obs, listSeq)));
    }
    for (const [uid, w] of this.#workers) {
      if (w.terminating) {
        if (w.busy) jobs.push(w.idle());
        continue;
      }
      const want = this.#desired.get(uid);
      if (want && !deleting(want)) continue;
      w.moveTo('syncing', 'terminating');
      // Deleted in the control plane: the deletion's own grace period, as the kubelet.
      const grace = want?.metadata?.deletionGracePeriodSeconds ?? gracePeriod(w.pod, this.#o.defaultGracePeriodSeconds);
      this.#log.info({ pod: podKey(w.pod), uid, gracePeriodSeconds: grace }, want ? 'pod is being deleted; stopping its containers' : 'pod removed; stopping its containers');
      jobs.push(w.request(() => this.#terminate(w, grace)));
    }
    // A failure record outlives nothing: a runtime pod that went away by other means is forgotten.
    const present = new Set(all.map((o) => o.uid));
    for (const uid of this.#removals.keys()) if (!present.has(uid)) this.#removals.delete(uid);
    for (const uid of this.#foreign) if (!present.has(uid)) this.#foreign.delete(uid);
    if (this.#sourcesReady && now - this.#lastHousekeeping >= HOUSEKEEPING_MS) {
      this.#lastHousekeeping = now;
      jobs.push(this.#removeLeftovers(present));
    }
    for (const obs of all) {
      // Another agent's pod on a shared runtime: never ours to remove, whatever the sources say.
      if (obs.foreign) {
        this.#reportForeign(obs);
        continue;
      }
      if (this.#workers.has(obs.uid)) continue;
      // A pod still wanted runs; one being deleted in the control plane whose removal failed
      // earlier is retried here, like a runtime pod nobody wants.
      const want = this.#desired.get(obs.uid);
      if (want && !deleting(want)) continue;
      // Until every pod source has delivered its first set, a runtime pod nobody asked for
      // yet may be one a source is about to ask for (the kubelet's sourcesReady): keep it.
      if (!want && !this.#sourcesReady) continue;
      // A removal that failed waits for its backoff: never a tight loop against a failing runtime.
      const failed = this.#removals.get(obs.uid);
      if (failed && now < failed.until) continue;
      const w = new PodWorker(want ?? { metadata: { name: obs.name, namespace: obs.namespace, uid: obs.uid } }, 'terminating');
      this.#workers.set(obs.uid, w);
      if (!failed) this.#log.info({ pod: `${obs.namespace}/${obs.name}`, uid: obs.uid }, 'runtime pod has no desired pod; removing it');
      const grace = want?.metadata?.deletionGracePeriodSeconds ?? obs.gracePeriodSeconds ?? this.#o.defaultGracePeriodSeconds;
      jobs.push(w.request(() => this.#terminate(w, grace)));
    }
    return jobs;
  }

  /** The relist's listing of the runtime (numbered `listSeq`); undefined when it failed (logged once per error). */
  async #listRuntime(listSeq: number): Promise<ObservedPod[] | undefined> {
    try {
      const all = await this.#o.runtime.listPods();
      this.#listedSeq = listSeq;
      this.#listedUids = new Set(all.map((o) => o.uid));
      this.#o.metrics.relisted(all);
      if (this.#lastError) this.#log.info('runtime answers again; pod sync resumed');
      this.#lastError = '';
      return all;
    } catch (err) {
      const msg = errorMessage(err);
      if (msg !== this.#lastError) this.#log.warn({ err: msg }, `cannot list pods from the runtime: ${msg}`);
      this.#lastError = msg;
      return undefined;
    } finally {
      this.#lastTurn = this.#o.clock.now();
    }
  }

  /**
   * The relist's sync of a pod, when its turn comes: on the relist's observation when that is
   * newer than the worker's last sync. A sync that ran in between (a runtime event's,
   * runtimeContainerExited) and saw what this listing shows, and did nothing, leaves nothing
   * to do: no second look at the runtime.
   */
  #syncListed(w: PodWorker, obs: ObservedPod | undefined, listSeq: number): Promise<void> {
    const since = (this.#syncedSeq.get(w) ?? 0) > listSeq;
    if (since && !w.needsSync && this.#unchanged(w, obs)) return Promise.resolve();
    // Not listed and no sync since: the runtime has nothing of the pod (no second look).
    return this.#sync(w, since ? undefined : (obs ?? notInRuntime(w.pod.metadata!.uid!)));
  }

  /**
   * The relist's observation of a pod leads to what its last sync saw: the same object (the
   * pod runtime keeps an unchanged pod's observation, cri-pod-runtime.ts), else the same
   * observedKey (then remembered as that object, so the next relist compares no strings).
   */
  #unchanged(w: PodWorker, obs: ObservedPod | undefined): boolean {
    if (obs !== undefined && obs === w.observedRef) return true;
    if (observedKey(obs) !== w.observedKey) return false;
    w.observedRef = obs;
    return true;
  }

  /** One warning (and one Warning event on the Node) per runtime pod marked with another node's name. */
  #reportForeign(obs: ObservedPod): void {
    if (this.#foreign.has(obs.uid)) return;
    this.#foreign.add(obs.uid);
    const message = `runtime pod ${obs.namespace}/${obs.name} (uid ${obs.uid}) was created by the agent of node "${obs.node}": another node agent shares this container runtime; nodelet leaves the pod alone`;
    this.#log.warn({ pod: `${obs.namespace}/${obs.name}`, uid: obs.uid, node: obs.node }, message);
    if (this.#o.nodeName) this.#o.events.emit(nodeRef(this.#o.nodeName), 'Warning', 'ForeignRuntimePod', message);
  }

  /**
   * Housekeeping: the directories of pods that are neither wanted, nor in the runtime, nor
   * being removed (left by a nodelet that died between a pod's removal from the runtime
   * and the removal of its directories, or by a pod removed while nodelet was down) are
   * removed, as the kubelet removes orphaned pod directories. Never throws.
   */
  async #removeLeftovers(inRuntime: ReadonlySet<string>): Promise<void> {
    const rt = this.#o.runtime;
    const kept = (uid: string) => this.#desired.has(uid) || this.#workers.has(uid) || inRuntime.has(uid);
    let uids: string[];
    try {
      uids = await rt.leftoverPods(kept);
    } catch (err) {
      this.#log.warn({ err: errorMessage(err) }, `cannot list the pod directories left on the node: ${errorMessage(err)}`);
      return;
    }
    for (const uid of uids) {
      if (kept(uid)) continue;
      this.#log.info({ uid }, `removing the directories of pod ${uid}, which is no longer wanted nor in the runtime`);
      await rt.cleanupPod(uid).catch((err) => this.#log.warn({ uid, err: errorMessage(err) }, `cannot remove the directories of pod ${uid}: ${errorMessage(err)}`));
    }
  }

  /** What the sync steps of one pod need: the runtime, events, clock, hooks' host, its log. */
  #stepContext(pod: Pod, w: PodWorker | undefined): StepContext {
    return {
      runtime: this.#o.runtime,
      events: this.#o.events,
      clock: this.#o.clock,
      log: this.#log.child({ pod: podKey(pod), uid: pod.metadata?.uid }),
      pullGate: this.#o.serializeImagePulls ? (pull) => this.#pulls.run(pull) : (pull) => pull(),
      // Where a hook's httpGet/tcpSocket connects when it names no host: the pod's IP.
      hookHost: w?.status?.podIP ?? this.#o.hostIP ?? '127.0.0.1',
      gracePeriodSeconds: gracePeriod(pod, this.#o.defaultGracePeriodSeconds),
    };
  }

  /** One sync of a wanted pod: the plan, then its steps in order, then the status. */
  /** `listed`: the relist's observation of the pod, when newer than this worker's last sync. */
  async #sync(w: PodWorker, listed?: ObservedPod): Promise<void> {
    if (w.rejected) return this.#syncRejected(w, listed);
    let ctx = this.#stepContext(w.pod, w);
    const uid = w.pod.metadata!.uid!;
    const syncStarted = ctx.clock.now();
    const operation = w.status ? 'sync' : 'create';
    // Cleared before the work: a source change or a wake-up meanwhile asks for one more sync.
    w.needsSync = false;
    w.wakeAt = Infinity;
    try {
      const observed = listed ?? (await ctx.runtime.observePod(uid));
      // preStop hooks of this sync reach the pod at its sandbox's IP, also when no status has it yet (adopted after a restart).
      const podIP = w.pod.spec?.hostNetwork ? undefined : observed.sandboxes.find((s) => s.ready)?.ips?.[0];
      if (podIP) ctx = { ...ctx, hookHost: podIP };
      const now = ctx.clock.now();
      // A pod adopted already running (nodelet restarted) is not a pod start.
      if (operation === 'create' && observed.containers.some((c) => c.state === 'running')) {
        this.#firstSeen.delete(uid);
        await ctx.runtime.adopted?.(w.pod, observed);
      }
      const plan = computePodActions(w.pod, observed, now, this.#o.crashLoopBackOff, (id) => this.#probes.started(id));
      holdFinished(plan, w.pod, observed);
      holdPastDeadline(ctx, w, plan, observed, now);
      const evicted = this.#evictions.get(uid);
      if (evicted) {
        // Evicted: nothing starts again; what runs stops with the eviction's grace period.
        ctx = { ...ctx, gracePeriodSeconds: evicted.gracePeriodSeconds };
        plan.createSandbox = undefined;
        plan.start = [];
        plan.waiting = {};
        plan.killPod = observed.containers.some((c) => c.state === 'running') || observed.sandboxes.some((sb) => sb.ready);
      }
      const waiting: Record<string, Waiting> = { ...plan.waiting };
      reportBackOffs(ctx, w, plan, observed);
      addProbeKills(plan, observed, (id) => this.#probes.mustRestart(id));
      const idle = !plan.killPod && !plan.createSandbox && !plan.start.length && !plan.kill.length && !plan.removeContainers.length && !plan.removeSandboxes.length;
      // What changed is shown before it is acted on (the kubelet's SyncPod sets the status from
      // the runtime's state first): a container's exit reaches the status at the runtime's
      // pace, not after its restart (a CreateContainer and StartContainer later).
      if (!idle && operation === 'sync') await this.#refreshStatus(ctx, w, observed.sandboxes.find((s) => s.ready)?.id, waiting, observed);
      if (plan.killPod) for (const f of await killPod(ctx, w.pod, observed, ctx.gracePeriodSeconds)) ctx.log.warn(f);
      let early: EarlyImage | undefined;
      const sandbox = await ensureSandbox(ctx, w, plan, observed, now, () => (early = checkImageEarly(ctx, w, plan, now)));
      await killContainers(ctx, w.pod, plan.kill);
      await startContainers(ctx, w, plan.start, sandbox, waiting, now, early);
      await ctx.runtime.refreshVolumes?.(w.pod);
      await collectGarbage(ctx, plan);
      // Nothing done: what was observed is still what runs (no second look at the runtime).
      await this.#refreshStatus(ctx, w, sandbox.id, waiting, idle ? observed : undefined);
      // A sync that acted looks again at the next relist (what it started may change at once).
      if (!idle) w.needsSync = true;
      w.wakeAt = wakeAt(w, plan.resyncAt, ctx.clock.now());
      // The deadline, counted from the start time the status now holds, wakes the worker too.
      const deadline = w.deadlineExceeded ? undefined : activeDeadlineAt(w.pod, w.status?.startTime, ctx.clock.now());
      if (deadline !== undefined) w.wakeAt = Math.min(w.wakeAt, deadline);
    } catch (err) {
      const msg = errorMessage(err);
      const quiet = err instanceof NodeletError && err.details.quiet === true;
      if (!quiet && w.status?.message !== msg) ctx.log.warn({ err: msg }, `pod sync failed: ${msg}`);
      this.#setStatus(w, { ...(w.status ?? { phase: 'Pending' }), message: msg, reason: 'SyncError' } as PodStatus);
      // A failed sync is tried again at the next relist, as before (its steps keep their own backoffs).
      w.needsSync = true;
    }
    w.observedKey = observedKey(w.observed);
    w.observedRef = w.observed;
    w.lastSyncAt = ctx.clock.now();
    this.#syncedSeq.set(w, ++this.#seq);
    this.#o.metrics.podWorkerDuration(operation, (ctx.clock.now() - syncStarted) / 1000);
  }

  /** The last step of a sync: what runs now, the probes told, the pod's status computed. */
  async #refreshStatus(ctx: StepContext, w: PodWorker, sandboxId: string | undefined, waiting: Record<string, Waiting>, current?: ObservedPod): Promise<void> {
    const pod = w.pod;
    const observed = current ?? (await ctx.runtime.observePod(pod.metadata!.uid!));
    w.observed = observed;
    const running = observed.containers.filter((c) => c.state === 'running' && c.podSandboxId === sandboxId);
    // Probes connect to the pod's IP as this status gives it (its sandbox's, or the node's on
    // the host network): the previous status has none on a pod's first sync, and the node's
    // IP is the wrong host for a pod with its own network. Told before the status is
    // computed, which asks the probes for readiness.
    const ip = statusPodIP(pod, observed, this.#o.hostIP, w.status);
    this.#probes.update(pod, running.map((c) => ({ id: c.id, name: c.name, startedAt: c.startedAt ?? c.createdAt })), ip ?? this.#o.hostIP ?? '127.0.0.1');
    let status = computePodStatus({
      probes: this.#probes,
      pod,
      observed,
      waiting,
      runtimeName: ctx.runtime.runtimeName(),
      hostIP: this.#o.hostIP,
      previous: w.status,
      now: ctx.clock.now(),
    });
    if (w.deadlineExceeded) status = { ...status, phase: 'Failed', ...DEADLINE_EXCEEDED };
    const evicted = this.#evictions.get(pod.metadata!.uid!);
    if (evicted) status = evictedStatus(status, evicted, w.status, ctx.clock.now());
    if (w.status?.phase !== status.phase) ctx.log.info({ phase: status.phase }, `pod is ${status.phase}`);
    const seen = this.#firstSeen.get(pod.metadata!.uid!);
    if (seen !== undefined && status.phase === 'Running') {
      this.#o.metrics.podStartDuration((ctx.clock.now() - seen) / 1000);
      this.#firstSeen.delete(pod.metadata!.uid!);
    }
    this.#setStatus(w, status);
  }

  /** Keeps a pod's new status; one that differs from the last is told to onStatusChange. */
  #setStatus(w: PodWorker, status: PodStatus): void {
    const changed = !w.status || !sameJson(status, w.status);
    w.status = status;
    if (changed) this.#statusChanged(w.pod.metadata!.uid!);
  }

  #statusChanged(uid: string): void {
    try {
      this.#o.onStatusChange(uid);
    } catch (err) {
      this.#log.error({ uid, err: errorMessage(err) }, `status change listener failed: ${errorMessage(err)}`);
    }
  }

  readonly #exec = (id: string, cmd: string[], timeout: number) => this.#o.runtime.execSync(id, cmd, timeout);

  /**
   * Removes a pod from the runtime (removePod); on success the worker is removed, on
   * failure it is forgotten and the runtime pod is retried after the step backoff, with
   * one warning per change of error (the attempts in between only count).
   */
  async #terminate(w: PodWorker, grace: number): Promise<void> {
    const uid = w.pod.metadata!.uid!;
    const ctx = this.#stepContext(w.pod, w);
    const killStarted = ctx.clock.now();
    this.#firstSeen.delete(uid);
    try {
      this.#probes.remove(uid);
      await removePod(ctx, w.pod, uid, grace);
      w.moveTo('terminating', 'removed');
      this.#workers.delete(uid);
      this.#evictions.delete(uid);
      const failed = this.#removals.get(uid);
      this.#removals.delete(uid);
      // No longer active: the status writer may finish the pod's deletion in the API now.
      this.#statusChanged(uid);
      ctx.log.info(failed ? { failedAttempts: failed.failures } : {}, failed ? `pod removed from the runtime after ${failed.failures} failed attempts` : 'pod removed from the runtime');
    } catch (err) {
      const message = errorMessage(err);
      const prev = this.#removals.get(uid);
      const next = nextBackoff(prev, 'RemovePodError', message, ctx.clock.now());
      this.#removals.set(uid, next);
      if (prev?.message !== message) ctx.log.warn({ err: message, failures: next.failures }, `removing pod failed, will retry with backoff: ${message}`);
      else ctx.log.debug({ err: message, failures: next.failures, retryAt: next.until }, 'removing pod failed again');
      this.#workers.delete(uid);
      this.#evictions.delete(uid);
    }
    this.#o.metrics.podWorkerDuration('kill', (ctx.clock.now() - killStarted) / 1000);
  }

  start(signal?: AbortSignal): void {
    this.#probes.start(signal);
    this.#loop.start(signal);
  }

  /**
   * One relist turn: hands the work out. A turn of the loop (`signal` given) with live
   * events then waits for its syncs, at most relistMs; a kick's turn and a turn without
   * live events go on without waiting for the workers.
   */
  async #turn(signal?: AbortSignal): Promise<void> {
    const jobs = await this.#relist().catch((err) => {
      this.#log.error({ err: errorMessage(err) }, 'pod relist failed');
      return [];
    });
    const done = Promise.all(jobs).catch((err) => this.#log.error({ err: errorMessage(err) }, 'pod worker failed'));
    // With live events the next relist depends on what these syncs find (one that acted wants
    // a look in a second; a steady pod's periodic sync, a few ms, wants none): wait for them,
    // at most relistMs, so that the wait is decided on their outcome and not on "a worker is
    // busy" (which would add a relist a second after every periodic sync). A longer sync (a
    // pull, a stop) keeps the relist at its pace for the other pods.
    if (!signal || !jobs.length || !this.#o.runtimeEvents?.live) return;
    const cut = new AbortController();
    const onStop = () => cut.abort();
    signal.addEventListener('abort', onStop, { once: true });
    try {
      await Promise.race([done, this.#o.clock.sleep(this.#o.relistMs, cut.signal).catch(() => {})]);
    } finally {
      cut.abort();
      signal.removeEventListener('abort', onStop);
    }
  }

  /** Stops the loop and waits for workers in flight. Containers keep running: they belong to the runtime. */
  async stop(): Promise<void> {
    await this.#loop.stop();
    await this.#probes.stop();
    await Promise.all([...this.#workers.values()].map((w) => w.idle()));
  }
}

/** When a pod waiting for a backoff (crash loop, a failed start or sandbox) must sync again. */
function wakeAt(w: PodWorker, resyncAt: number | undefined, now: number): number {
  let t = resyncAt ?? Infinity;
  for (const b of w.startBackoff.values()) if (b.until > now) t = Math.min(t, b.until);
  if (w.sandboxBackoff && w.sandboxBackoff.until > now) t = Math.min(t, w.sandboxBackoff.until);
  return t;
}

/**
 * What a pod sync depends on in an observation, as one string: two observations with the
 * same key lead to the same plan and status (the PLEG's "nothing changed").
 */
export function observedKey(o: ObservedPod | undefined): string {
  if (!o || (!o.sandboxes.length && !o.containers.length)) return '';
  // In ID order: the runtime lists in no fixed order, and the same pod listed in another order is unchanged.
  const sandboxes = o.sandboxes.map((s) => `${s.id}/${s.attempt}/${s.ready ? 1 : 0}/${s.createdAt}/${s.ips?.join(',') ?? ''};`).sort();
  const containers = o.containers.map((c) => `${c.id}/${c.name}/${c.podSandboxId}/${c.state}/${c.restartCount}/${c.attempt}/${c.hash}/${c.startedAt ?? ''}/${c.finishedAt ?? ''}/${c.exitCode ?? ''}/${c.reason ?? ''};`).sort();
  return `${sandboxes.join('')}|${containers.join('')}`;
}

/**
 * An evicted pod's status (the kubelet's eviction PodStatusFunc): Failed, the eviction's
 * reason and message, and (unless the eviction says not) a DisruptionTarget condition (reason
 * TerminationByKubelet) whose transition time stays that of the first status that had it.
 */
function evictedStatus(status: PodStatus, e: Eviction, previous: PodStatus | undefined, now: number): PodStatus {
  // Local storage evictions carry no condition (the kubelet passes none for them).
  if (e.disruptionTarget === false) return { ...status, phase: 'Failed', reason: e.reason, message: e.message };
  const before = previous?.conditions?.find((c) => c.type === 'DisruptionTarget');
  const condition = { type: 'DisruptionTarget', status: 'True', reason: 'TerminationByKubelet', message: e.message, lastTransitionTime: before?.lastTransitionTime ?? new Date(Math.floor(now / 1000) * 1000).toISOString().replace('.000Z', 'Z') };
  return { ...status, phase: 'Failed', reason: e.reason, message: e.message, conditions: [...(status.conditions ?? []).filter((c) => c.type !== 'DisruptionTarget'), condition] };
}

/** The control plane asked for the pod's deletion (metadata.deletionTimestamp set). */
function deleting(pod: Pod): boolean {
  return !!pod.metadata?.deletionTimestamp;
}

function gracePeriod(pod: Pod, dflt: number): number {
  const g = pod.spec?.terminationGracePeriodSeconds;
  return typeof g === 'number' && g >= 0 ? g : dflt;
}
