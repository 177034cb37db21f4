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
import { backoffDelay, realClock, type Clock } from '../clock.js';
import { errorMessage, NodeletError } from '../errors.js';
import type { HealthCheck } from '../health/checks.js';
import { noEvents, podRef, type EventSink } from '../events.js';
import type { Logger } from '../log.js';
import { Loop } from '../loop.js';
import type { ObservedPod } from './observed.js';
import { computePodActions, podTitle, type Waiting } from './plan.js';
import type { PodRuntime } from './runtime-port.js';
import { runLifecycleHandler } from './hooks.js';
import { ProbeManager } from './probes.js';
import { computePodStatus } from './status.js';

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
}

/** Serializes async work: one at a time, in order. */
class Mutex {
  #tail: Promise<unknown> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const r = this.#tail.then(fn, fn);
    this.#tail = r.catch(() => undefined);
    return r;
  }
}

/** Backoff of a pod's failing steps (a start, a sandbox, a removal): 1 s doubling to 60 s. */
const START_ERROR_BACKOFF = { initialMs: 1_000, maxMs: 60_000 };

/** A pod whose removal from the runtime failed: retried after `until`, warned once per message. */
interface RemovalFailure {
  message: string;
  failures: number;
  until: number;
}
/** How long the pod worker waits for a postStart hook (the kubelet's runtimeRequestTimeout). */
const POST_START_TIMEOUT_S = 120;

class PodWorker {
  pod: Pod;
  status: PodStatus | undefined;
  observed: ObservedPod | undefined;
  /** Reasons of failed starts, kept until the container starts or the backoff ends. */
  readonly errors = new Map<string, Waiting & { until: number; failures: number }>();
  /** The last sandbox creation failure, kept until its backoff ends. */
  sandboxError: { message: string; until: number; failures: number } | undefined;
  /** Per container: the restart count whose back-off was last reported as an event. */
  readonly backoffReported = new Map<string, number>();
  terminating = false;
  #next: (() => Promise<void>) | undefined;
  #running: Promise<void> | undefined;

  constructor(pod: Pod) {
    this.pod = pod;
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

  idle(): Promise<void> {
    return this.#running ?? Promise.resolve();
  }
}

export class PodManager {
  readonly #o: Required<Omit<PodManagerOptions, 'hostIP'>> & { hostIP?: string };
  readonly #workers = new Map<string, PodWorker>();
  readonly #pulls = new Mutex();
  #desired = new Map<string, Pod>();
  readonly #loop: Loop;
  #lastTurn = 0;
  #lastError = '';
  #sourcesReady = false;
  /** Runtime pods whose removal failed, by UID: no new attempt before the backoff ends. */
  readonly #removals = new Map<string, RemovalFailure>();
  readonly #probes: ProbeManager;

  constructor(o: PodManagerOptions) {
    this.#o = { clock: realClock, relistMs: 1000, serializeImagePulls: true, defaultGracePeriodSeconds: 30, events: noEvents, ...o };
    this.#probes = new ProbeManager({
      exec: this.#exec,
      clock: this.#o.clock,
      events: this.#o.events,
      logger: this.#o.logger.child({ component: 'probes' }),
      onChange: (uid) => this.#wake(uid),
    });
    this.#loop = new Loop({ name: 'pod-relist', turn: () => this.#turn(), delayMs: () => this.#o.relistMs, clock: this.#o.clock, logger: this.#o.logger });
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

  /** The full desired set from the sources. Wakes the workers of new and removed pods. */
  setDesired(pods: Pod[]): void {
    const next = new Map<string, Pod>();
    for (const p of pods) {
      const uid = p.metadata?.uid;
      if (!uid) throw new NodeletError('INVALID_ARGUMENT', `pod ${p.metadata?.namespace}/${p.metadata?.name} has no uid`);
      next.set(uid, p);
    }
    this.#desired = next;
    for (const [uid, pod] of next) {
      const w = this.#workers.get(uid);
      if (w && !w.terminating) w.pod = pod;
      else if (!w && !deleting(pod)) {
        this.#log.info({ pod: podKey(pod), uid }, 'pod added');
        this.#workers.set(uid, new PodWorker(pod));
      }
    }
    void this.syncOnce().catch(() => undefined);
  }

  /**
   * Every pod source has delivered its first full set: from now on, runtime pods that no
   * source wants are removed. Before it, a restarted nodelet would kill the pods it is about
   * to adopt.
   */
  setSourcesReady(): void {
    if (this.#sourcesReady) return;
    this.#sourcesReady = true;
    void this.syncOnce().catch(() => undefined);
  }

  /** Pods with their current status, for /pods and the checkpoint lookup. */
  listPods(): Pod[] {
    const out: Pod[] = [];
    for (const [uid, pod] of this.#desired) {
      const w = this.#workers.get(uid);
      out.push({ apiVersion: 'v1', kind: 'Pod', ...pod, status: w?.status ?? { phase: 'Pending' } });
    }
    return out;
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

  getPod(namespace: string, name: string): Pod | undefined {
    return this.listPods().find((p) => p.metadata?.namespace === namespace && p.metadata?.name === name);
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
    let all: ObservedPod[];
    try {
      all = await this.#o.runtime.listPods();
      if (this.#lastError) this.#log.info('runtime answers again; pod sync resumed');
      this.#lastError = '';
    } catch (err) {
      const msg = errorMessage(err);
      if (msg !== this.#lastError) this.#log.warn({ err: msg }, `cannot list pods from the runtime: ${msg}`);
      this.#lastError = msg;
      return [];
    } finally {
      this.#lastTurn = this.#o.clock.now();
    }
    const jobs: Promise<void>[] = [];
    // A desired pod whose old worker finished terminating (same UID wanted again) gets a new
    // one; a pod being deleted in the control plane never starts again.
    for (const [uid, pod] of this.#desired) if (!this.#workers.has(uid) && !deleting(pod)) this.#workers.set(uid, new PodWorker(pod));
    for (const [uid, w] of this.#workers) {
      const want = this.#desired.get(uid);
      if (want && !deleting(want) && !w.terminating) jobs.push(w.request(() => this.#sync(w)));
    }
    for (const [uid, w] of this.#workers) {
      if (w.terminating) {
        jobs.push(w.idle());
        continue;
      }
      const want = this.#desired.get(uid);
      if (want && !deleting(want)) continue;
      w.terminating = true;
      // Deleted in the control plane: the deletion's own grace period, as the kubelet.
      const grace = want?.metadata?.deletionGracePeriodSeconds ?? gracePeriod(w.pod, this.#o.defaultGracePeriodSeconds);
      this.#log.info({ pod: podKey(w.pod), uid, gracePeriodSeconds: grace }, want ? 'pod is being deleted; stopping its containers' : 'pod removed; stopping its containers');
      jobs.push(w.request(() => this.#terminate(uid, w.pod, grace)));
    }
    // A failure record outlives nothing: a runtime pod that went away by other means is forgotten.
    const present = new Set(all.map((o) => o.uid));
    for (const uid of this.#removals.keys()) if (!present.has(uid)) this.#removals.delete(uid);
    const now = this.#o.clock.now();
    for (const obs of all) {
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
      const w = new PodWorker(want ?? { metadata: { name: obs.name, namespace: obs.namespace, uid: obs.uid } });
      w.terminating = true;
      this.#workers.set(obs.uid, w);
      if (!failed) this.#log.info({ pod: `${obs.namespace}/${obs.name}`, uid: obs.uid }, 'runtime pod has no desired pod; removing it');
      const grace = want?.metadata?.deletionGracePeriodSeconds ?? obs.gracePeriodSeconds ?? this.#o.defaultGracePeriodSeconds;
      jobs.push(w.request(() => this.#terminate(obs.uid, w.pod, grace)));
    }
    return jobs;
  }

  async #sync(w: PodWorker): Promise<void> {
    const rt = this.#o.runtime;
    const pod = w.pod;
    const uid = pod.metadata!.uid!;
    const key = podKey(pod);
    const log = this.#log.child({ pod: key, uid });
    try {
      let observed = await rt.observePod(uid);
      const now = this.#o.clock.now();
      const actions = computePodActions(pod, observed, now);
      const waiting: Record<string, Waiting> = { ...actions.waiting };
      const ev = this.#o.events;
      for (const [name, wt] of Object.entries(actions.waiting)) {
        if (wt.reason !== 'CrashLoopBackOff') continue;
        const restarts = Math.max(0, ...observed.containers.filter((c) => c.name === name).map((c) => c.restartCount));
        if (w.backoffReported.get(name) === restarts) continue;
        w.backoffReported.set(name, restarts);
        ev.emit(podRef(pod, containerOf(pod, name)), 'Warning', 'BackOff', `Back-off restarting failed container ${name} in pod ${podTitle(pod)}`);
      }

      // A failed liveness or startup probe: the container is killed; restartPolicy decides the rest.
      if (!actions.killPod) {
        for (const c of observed.containers) {
          const why = c.state === 'running' ? this.#probes.mustRestart(c.id) : undefined;
          if (why && !actions.kill.some((k) => k.id === c.id)) actions.kill.push({ id: c.id, name: c.name, reason: why, event: why });
        }
      }
      if (actions.killPod) for (const f of await this.#killAll(pod, observed, gracePeriod(pod, this.#o.defaultGracePeriodSeconds), log)) log.warn(f);
      const readySandbox = observed.sandboxes.find((s) => s.ready);
      let sandboxId = readySandbox?.id;
      let sandboxAttempt = readySandbox?.attempt ?? 0;
      if (actions.createSandbox) {
        // A sandbox the runtime refuses (no CNI for a pod network, a missing pause image) is
        // retried with the start-error backoff, not hammered on every relist.
        const prev = w.sandboxError;
        if (prev && now < prev.until) throw new NodeletError('UNAVAILABLE', prev.message, { reason: 'CreatePodSandboxError', quiet: true });
        log.info({ attempt: actions.createSandbox.attempt }, 'creating pod sandbox');
        try {
          sandboxId = await rt.runSandbox(pod, actions.createSandbox.attempt);
          sandboxAttempt = actions.createSandbox.attempt;
          w.sandboxError = undefined;
        } catch (err) {
          const failures = (prev?.failures ?? 0) + 1;
          w.sandboxError = { message: errorMessage(err), failures, until: now + backoffDelay(failures - 1, START_ERROR_BACKOFF.initialMs, START_ERROR_BACKOFF.maxMs) };
          ev.emit(podRef(pod), 'Warning', 'FailedCreatePodSandBox', `Failed to create pod sandbox: ${errorMessage(err)}`);
          throw err;
        }
      }
      for (const k of actions.kill) {
        log.info({ containerId: k.id, container: k.name }, `stopping container: ${k.reason}`);
        ev.emit(podRef(pod, containerOf(pod, k.name)), 'Normal', 'Killing', k.event ?? `Stopping container ${k.name}`);
        await this.#stopContainer(pod, k.name, k.id, gracePeriod(pod, this.#o.defaultGracePeriodSeconds), log);
      }
      for (const s of actions.start) {
        const spec = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].find((c) => c.name === s.name)!;
        const prevErr = w.errors.get(s.name);
        if (prevErr && now < prevErr.until) {
          waiting[s.name] = { reason: prevErr.reason, ...(prevErr.message ? { message: prevErr.message } : {}) };
          continue;
        }
        const ref = podRef(pod, { name: s.name, init: s.init });
        try {
          const pullStart = this.#o.clock.now();
          const pulled = await rt.ensureImage(pod, spec, this.#o.serializeImagePulls ? (pull) => this.#pulls.run(pull) : (pull) => pull());
          ev.emit(
            ref,
            'Normal',
            'Pulled',
            pulled ? `Successfully pulled image "${spec.image}" in ${((this.#o.clock.now() - pullStart) / 1000).toFixed(3)}s` : `Container image "${spec.image}" already present on machine`,
          );
          const id = await rt.startContainer({ pod, container: spec, sandboxId: sandboxId!, sandboxAttempt, restartCount: s.restartCount, init: s.init });
          w.errors.delete(s.name);
          log.info({ container: s.name, containerId: id, restartCount: s.restartCount }, 'container started');
          ev.emit(ref, 'Normal', 'Created', `Created container: ${s.name}`);
          ev.emit(ref, 'Normal', 'Started', `Started container ${s.name}`);
          const postStart = spec.lifecycle?.postStart;
          if (postStart) {
            const out = await runLifecycleHandler(postStart, { containerId: id, container: spec, host: this.#hookHost(w) }, this.#exec, POST_START_TIMEOUT_S, this.#o.clock);
            if (!out.ok) {
              // As the kubelet: the container is killed and restarts per restartPolicy.
              ev.emit(ref, 'Warning', 'FailedPostStartHook', out.output);
              ev.emit(ref, 'Normal', 'Killing', `FailedPostStartHook`);
              await rt.stopContainer(id, gracePeriod(pod, this.#o.defaultGracePeriodSeconds)).catch((e) => log.warn({ err: errorMessage(e) }, 'stop container'));
              throw new NodeletError('INTERNAL', `PostStartHook failed: ${out.output}`, { reason: 'PostStartHookError' });
            }
          }
        } catch (err) {
          const reason = (err instanceof NodeletError && typeof err.details.reason === 'string' && err.details.reason) || 'CreateContainerError';
          const failures = (prevErr?.failures ?? 0) + 1;
          const delay = backoffDelay(failures - 1, START_ERROR_BACKOFF.initialMs, START_ERROR_BACKOFF.maxMs);
          const message = errorMessage(err);
          w.errors.set(s.name, { reason, message, until: now + delay, failures });
          waiting[s.name] = { reason, message };
          if (prevErr?.message !== message) log.warn({ container: s.name, reason }, `container ${s.name}: ${reason}: ${message}`);
          ev.emit(ref, 'Warning', 'Failed', `Error: ${reason}: ${message}`);
        }
        if (s.init) break;
      }
      for (const id of actions.removeContainers) await rt.removeContainer(id).catch((e) => log.debug({ err: errorMessage(e) }, 'remove container'));
      for (const id of actions.removeSandboxes) await rt.removeSandbox(id).catch((e) => log.debug({ err: errorMessage(e) }, 'remove sandbox'));

      observed = await rt.observePod(uid);
      w.observed = observed;
      const running = observed.containers.filter((c) => c.state === 'running' && c.podSandboxId === sandboxId);
      this.#probes.update(pod, running.map((c) => ({ id: c.id, name: c.name, startedAt: c.startedAt ?? c.createdAt })), w.status?.podIP ?? this.#o.hostIP ?? '127.0.0.1');
      const status = computePodStatus({
        probes: this.#probes,
        pod,
        observed,
        waiting,
        runtimeName: rt.runtimeName(),
        hostIP: this.#o.hostIP,
        previous: w.status,
        now: this.#o.clock.now(),
      });
      if (w.status?.phase !== status.phase) log.info({ phase: status.phase }, `pod is ${status.phase}`);
      w.status = status;
    } catch (err) {
      const msg = errorMessage(err);
      const quiet = err instanceof NodeletError && err.details.quiet === true;
      if (!quiet && w.status?.message !== msg) log.warn({ err: msg }, `pod sync failed: ${msg}`);
      w.status = { ...(w.status ?? { phase: 'Pending' }), message: msg, reason: 'SyncError' } as PodStatus;
    }
  }

  /**
   * Stops a container: its preStop hook first, when it has one and a grace period, within
   * that period; the runtime gets what is left of it (at least 2 s after a hook, as the
   * kubelet's minimum shutdown window).
   */
  async #stopContainer(pod: Pod, name: string, id: string, grace: number, log: Logger): Promise<void> {
    const spec = pod.spec?.containers?.find((c) => c.name === name) ?? pod.spec?.initContainers?.find((c) => c.name === name);
    const preStop = spec?.lifecycle?.preStop;
    let left = grace;
    if (spec && preStop && grace > 0) {
      const t0 = this.#o.clock.now();
      const out = await runLifecycleHandler(preStop, { containerId: id, container: spec, host: this.#hookHost(this.#workers.get(pod.metadata?.uid ?? '')) }, this.#exec, grace, this.#o.clock);
      if (!out.ok) {
        log.warn({ container: name }, `preStop hook of ${name} failed: ${out.output}`);
        this.#o.events.emit(podRef(pod, containerOf(pod, name)), 'Warning', 'FailedPreStopHook', out.output);
      }
      left = Math.max(2, grace - Math.floor((this.#o.clock.now() - t0) / 1000));
    }
    await this.#o.runtime.stopContainer(id, left);
  }

  readonly #exec = (id: string, cmd: string[], timeout: number) => this.#o.runtime.execSync(id, cmd, timeout);

  /** Where a hook's httpGet/tcpSocket connects when it names no host: the pod's IP. */
  #hookHost(w: PodWorker | undefined): string {
    return w?.status?.podIP ?? this.#o.hostIP ?? '127.0.0.1';
  }

  /**
   * Stops every container (in parallel, each with its grace period), then every sandbox.
   * Every stop is tried; the failures are returned (not thrown), so the caller decides:
   * a sync logs them, a removal fails with them and retries after its backoff.
   */
  async #killAll(pod: Pod, observed: ObservedPod, grace: number, log: Logger): Promise<string[]> {
    const rt = this.#o.runtime;
    const live = observed.containers.filter((c) => c.state === 'running' || c.state === 'created');
    const failures: string[] = [];
    // A runtime pod no source knows (no spec) has no object for events to be about.
    if (pod.spec) for (const c of live) this.#o.events.emit(podRef(pod, containerOf(pod, c.name)), 'Normal', 'Killing', `Stopping container ${c.name}`);
    await Promise.all(live.map((c) => this.#stopContainer(pod, c.name, c.id, grace, log).catch((e) => failures.push(`stop container ${c.name}: ${errorMessage(e)}`))));
    for (const s of observed.sandboxes) await rt.stopSandbox(s.id).catch((e) => failures.push(`stop sandbox ${s.id}: ${errorMessage(e)}`));
    return failures;
  }

  async #terminate(uid: string, pod: Pod, grace: number): Promise<void> {
    const rt = this.#o.runtime;
    const log = this.#log.child({ pod: podKey(pod), uid });
    try {
      this.#probes.remove(uid);
      const observed = await rt.observePod(uid);
      const stopFailures = await this.#killAll(pod, observed, grace, log);
      // A sandbox the runtime could not stop cannot be removed: fail now, with the reason.
      if (stopFailures.length) throw new NodeletError('UNAVAILABLE', stopFailures.join('; '));
      for (const c of observed.containers) await rt.removeContainer(c.id);
      for (const s of observed.sandboxes) await rt.removeSandbox(s.id);
      await rt.cleanupPod(uid).catch((e) => log.warn({ err: errorMessage(e) }, `cannot remove the pod's volumes: ${errorMessage(e)}`));
      this.#workers.delete(uid);
      const failed = this.#removals.get(uid);
      this.#removals.delete(uid);
      log.info(failed ? { failedAttempts: failed.failures } : {}, failed ? `pod removed from the runtime after ${failed.failures} failed attempts` : 'pod removed from the runtime');
    } catch (err) {
      // Forget the worker: a relist after the backoff finds the runtime pod again and retries.
      // One warning per change of error; the attempts in between only count.
      const message = errorMessage(err);
      const prev = this.#removals.get(uid);
      const failures = (prev?.failures ?? 0) + 1;
      const delay = backoffDelay(failures - 1, START_ERROR_BACKOFF.initialMs, START_ERROR_BACKOFF.maxMs);
      this.#removals.set(uid, { message, failures, until: this.#o.clock.now() + delay });
      if (prev?.message !== message) log.warn({ err: message, failures }, `removing pod failed, will retry with backoff: ${message}`);
      else log.debug({ err: message, failures, retryInMs: delay }, 'removing pod failed again');
      this.#workers.delete(uid);
    }
  }

  start(signal?: AbortSignal): void {
    this.#probes.start(signal);
    this.#loop.start(signal);
  }

  /** One relist turn of the loop: hands the work out and goes on without waiting for the workers. */
  async #turn(): Promise<void> {
    const jobs = await this.#relist().catch((err) => {
      this.#log.error({ err: errorMessage(err) }, 'pod relist failed');
      return [];
    });
    void Promise.all(jobs).catch((err) => this.#log.error({ err: errorMessage(err) }, 'pod worker failed'));
  }

  /** Stops the loop and waits for workers in flight. Containers keep running: they belong to the runtime. */
  async stop(): Promise<void> {
    await this.#loop.stop();
    await this.#probes.stop();
    await Promise.all([...this.#workers.values()].map((w) => w.idle()));
  }
}

export function podKey(pod: Pod): string {
  return `${pod.metadata?.namespace ?? 'default'}/${pod.metadata?.name}`;
}

function containerOf(pod: Pod, name: string): { name: string; init: boolean } {
  return { name, init: !!pod.spec?.initContainers?.some((c) => c.name === name) };
}

/** The control plane asked for the pod's deletion (metadata.deletionTimestamp set). */
function deleting(pod: Pod): boolean {
  return !!pod.metadata?.deletionTimestamp;
}

function gracePeriod(pod: Pod, dflt: number): number {
  const g = pod.spec?.terminationGracePeriodSeconds;
  return typeof g === 'number' && g >= 0 ? g : dflt;
}
