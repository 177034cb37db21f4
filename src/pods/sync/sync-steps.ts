/**
 * The steps of a pod sync and of a pod's removal, each small and testable alone. The pod
 * manager dispatches them in order (manager.ts `#sync`, `#terminate`); the plan they
 * carry out is decided by the pure `computePodActions` (plan.ts).
 *
 * Steps do IO through the context (runtime, events, clock, hooks) and keep the worker's
 * own state (backoffs) on the worker. A step that cannot go on throws; one that only
 * records a failure (a container that will not start) returns and lets the next step run.
 */
import type { Container, LifecycleHandler, Pod } from 'kubernetes-types/core/v1.js';
import type { Clock } from '../../clock.js';
import { errorMessage, NodeletError } from '../../errors.js';
import { podRef, type EventSink } from '../../events.js';
import type { Logger } from '../../log.js';
import { runLifecycleHandler } from './hooks.js';
import type { ObservedPod } from './observed.js';
import { ephemeralContainers, isSidecar, podTitle, type PodActions, type StartContainer, type Waiting } from './plan.js';
import type { PodRuntime } from '../cri/runtime-port.js';
import { finishedInApi } from '../sources/sources.js';
import { nextBackoff, type PodWorker } from './worker.js';

/** How long the pod worker waits for a postStart hook (the kubelet's runtimeRequestTimeout). */
export const POST_START_TIMEOUT_S = 120;

export interface StepContext {
  runtime: PodRuntime;
  events: EventSink;
  clock: Clock;
  log: Logger;
  /** Runs an image pull (serialized when serializeImagePulls). */
  pullGate: <T>(pull: () => Promise<T>) => Promise<T>;
  /** Where a hook's httpGet/tcpSocket connects when it names no host (the pod's IP). */
  hookHost: string;
  /** The pod's termination grace period, for stops during a sync. */
  gracePeriodSeconds: number;
}

/** Where the pod's containers run after the sandbox step. */
export interface SandboxInfo {
  id: string | undefined;
  attempt: number;
  /** The sandbox's own IPs (a pod with its own network): where postStart's httpGet/tcpSocket connect. */
  ips?: string[];
}

export function containerOf(pod: Pod, name: string): { name: string; init: boolean } {
  return { name, init: !!pod.spec?.initContainers?.some((c) => c.name === name) };
}

/**
 * A pod's containers by name, indexed once per step: the steps look up each container they
 * start or stop, and a search of the spec per container is quadratic (the API server lets a
 * pod have ~45,000 containers). Same answers as containerOf and a search of the spec: the
 * first of a name wins, an app container before an init container.
 */
class PodSpecs {
  readonly #apps = new Map<string, Container>();
  readonly #inits = new Map<string, Container>();
  readonly #ephemerals = new Map<string, Container>();
  constructor(pod: Pod) {
    for (const c of pod.spec?.containers ?? []) if (!this.#apps.has(c.name)) this.#apps.set(c.name, c);
    for (const c of pod.spec?.initContainers ?? []) if (!this.#inits.has(c.name)) this.#inits.set(c.name, c);
    for (const c of ephemeralContainers(pod)) if (!this.#ephemerals.has(c.name)) this.#ephemerals.set(c.name, c);
  }
  spec(name: string): Container | undefined {
    return this.#apps.get(name) ?? this.#inits.get(name) ?? this.#ephemerals.get(name);
  }
  /** containerOf(pod, name), ephemeral containers marked (their events' fieldPath). */
  ref(name: string): { name: string; init: boolean; ephemeral?: boolean } {
    const init = this.#inits.has(name);
    return !init && !this.#apps.has(name) && this.#ephemerals.has(name) ? { name, init, ephemeral: true } : { name, init };
  }
}

const exec = (rt: PodRuntime) => (id: string, cmd: string[], timeout: number) => rt.execSync(id, cmd, timeout);

/** A BackOff event once per crash (per restart count) of each container in CrashLoopBackOff. */
export function reportBackOffs(ctx: StepContext, w: PodWorker, plan: PodActions, observed: ObservedPod): void {
  const backingOff = Object.entries(plan.waiting).filter(([, wt]) => wt.reason === 'CrashLoopBackOff');
  if (backingOff.length === 0) return;
  // Each name's highest restart count, in one pass over the observation.
  const restartsOf = new Map<string, number>();
  for (const c of observed.containers) restartsOf.set(c.name, Math.max(restartsOf.get(c.name) ?? 0, c.restartCount));
  const specs = new PodSpecs(w.pod);
  for (const [name] of backingOff) {
    const restarts = restartsOf.get(name) ?? 0;
    if (w.backoffReported.get(name) === restarts) continue;
    w.backoffReported.set(name, restarts);
    ctx.events.emit(podRef(w.pod, specs.ref(name)), 'Warning', 'BackOff', `Back-off restarting failed container ${name} in pod ${podTitle(w.pod)}`);
  }
}

/**
 * A pod the control plane says is over (Succeeded, Failed): nothing is created or started
 * again; what still runs is stopped (a Failed pod), what ran is kept for its status and logs
 * until the pod is deleted.
 */
export function holdFinished(plan: PodActions, pod: Pod, observed: ObservedPod): void {
  if (!finishedInApi(pod)) return;
  plan.createSandbox = undefined;
  plan.start = [];
  plan.killPod = observed.containers.some((c) => c.state === 'running') || observed.sandboxes.some((sb) => sb.ready);
}

/** The kubelet's activeDeadlineSeconds verdict (its active deadline handler's reason and message). */
export const DEADLINE_EXCEEDED = { reason: 'DeadlineExceeded', message: 'Pod was active on the node longer than the specified deadline' } as const;

/** When the pod's activeDeadlineSeconds runs out (ms since the epoch), counted from its status's startTime; undefined without a deadline. */
export function activeDeadlineAt(pod: Pod, startTime: string | undefined, now: number): number | undefined {
  const s = pod.spec?.activeDeadlineSeconds;
  if (typeof s !== 'number' || !(s > 0)) return undefined;
  const started = startTime ? Date.parse(startTime) : now;
  return (Number.isNaN(started) ? now : started) + s * 1000;
}

/**
 * A pod past its activeDeadlineSeconds, as the kubelet's active deadline handler: it is
 * Failed for good; what runs is stopped (within its grace period), nothing starts again.
 * The verdict is taken once (an event, a log line) and kept by the worker.
 */
export function holdPastDeadline(ctx: StepContext, w: PodWorker, plan: PodActions, observed: ObservedPod, now: number): void {
  if (!w.deadlineExceeded) {
    const at = activeDeadlineAt(w.pod, w.status?.startTime, now);
    if (at === undefined || now < at) return;
    w.deadlineExceeded = true;
    ctx.log.info({ activeDeadlineSeconds: w.pod.spec?.activeDeadlineSeconds }, `${DEADLINE_EXCEEDED.message}: stopping it`);
    ctx.events.emit(podRef(w.pod), 'Normal', DEADLINE_EXCEEDED.reason, DEADLINE_EXCEEDED.message);
  }
  plan.createSandbox = undefined;
  plan.start = [];
  plan.waiting = {};
  plan.killPod = observed.containers.some((c) => c.state === 'running') || observed.sandboxes.some((sb) => sb.ready);
}

/** A failed liveness or startup probe: the container joins the plan's kills; restartPolicy decides the rest. */
export function addProbeKills(plan: PodActions, observed: ObservedPod, mustRestart: (containerId: string) => string | undefined): void {
  if (plan.killPod) return;
  const killed = new Set(plan.kill.map((k) => k.id));
  for (const c of observed.containers) {
    const why = c.state === 'running' ? mustRestart(c.id) : undefined;
    if (why && !killed.has(c.id)) {
      killed.add(c.id);
      plan.kill.push({ id: c.id, name: c.name, reason: why, event: why });
    }
  }
}

/**
 * Stops a container: its preStop hook first, when it has one and a grace period, within
 * that period; the runtime gets what is left of it (at least 2 s after a hook, as the
 * kubelet's minimum shutdown window).
 */
export async function stopContainer(ctx: StepContext, pod: Pod, name: string, id: string, grace: number): Promise<void> {
  await stopOne(ctx, pod, new PodSpecs(pod), name, id, grace);
}

async function stopOne(ctx: StepContext, pod: Pod, specs: PodSpecs, name: string, id: string, grace: number): Promise<void> {
  const spec = specs.spec(name);
  const preStop = spec?.lifecycle?.preStop;
  let left = grace;
  if (spec && preStop && grace > 0) {
    const t0 = ctx.clock.now();
    const out = await runLifecycleHandler(preStop, { containerId: id, container: spec, host: ctx.hookHost }, exec(ctx.runtime), grace, ctx.clock);
    if (!out.ok) {
      ctx.log.warn({ container: name }, `preStop hook of ${name} failed: ${out.output}`);
      ctx.events.emit(podRef(pod, specs.ref(name)), 'Warning', 'FailedPreStopHook', out.output);
    }
    left = Math.max(2, grace - Math.floor((ctx.clock.now() - t0) / 1000));
  }
  await ctx.runtime.stopContainer(id, left);
}

/**
 * Stops every container, then every sandbox. The app containers (and regular ones) stop in
 * parallel, each with the grace period; then the native sidecars, one at a time in the
 * reverse of their order in the spec, each with what is left of it (at least 2 s), as the
 * kubelet stops a pod with sidecars: they serve the app containers to the end.
 * Every stop is tried; the failures are returned (not thrown), so the caller decides:
 * a sync logs them, a removal fails with them and retries after its backoff.
 */
export async function killPod(ctx: StepContext, pod: Pod, observed: ObservedPod, grace: number): Promise<string[]> {
  const live = observed.containers.filter((c) => c.state === 'running' || c.state === 'created');
  const failures: string[] = [];
  const specs = new PodSpecs(pod);
  // A runtime pod no source knows (no spec) has no object for events to be about.
  if (pod.spec) for (const c of live) ctx.events.emit(podRef(pod, specs.ref(c.name)), 'Normal', 'Killing', `Stopping container ${c.name}`);
  const sidecarOrder = (pod.spec?.initContainers ?? []).filter(isSidecar).map((c) => c.name).reverse();
  const sidecars = new Set(sidecarOrder);
  const t0 = ctx.clock.now();
  const stop = (c: (typeof live)[number], g: number) => stopOne(ctx, pod, specs, c.name, c.id, g).catch((e) => failures.push(`stop container ${c.name}: ${errorMessage(e)}`));
  await Promise.all(live.filter((c) => !sidecars.has(c.name)).map((c) => stop(c, grace)));
  for (const name of sidecarOrder) {
    const left = Math.max(2, grace - Math.floor((ctx.clock.now() - t0) / 1000));
    await Promise.all(live.filter((c) => c.name === name).map((c) => stop(c, grace > 0 ? left : grace)));
  }
  for (const s of observed.sandboxes) await ctx.runtime.stopSandbox(s.id).catch((e) => failures.push(`stop sandbox ${s.id}: ${errorMessage(e)}`));
  return failures;
}

/**
 * The sandbox the containers go into: the ready one, or a new one when the plan asks (`sent`:
 * called once the runtime was asked for it, see runSandbox). A sandbox the runtime refuses
 * (no CNI for a pod network, a missing pause image) is retried with the step backoff, not
 * hammered on every relist: until it ends this throws quietly.
 */
export async function ensureSandbox(ctx: StepContext, w: PodWorker, plan: PodActions, observed: ObservedPod, now: number, sent?: () => void): Promise<SandboxInfo> {
  const ready = observed.sandboxes.find((s) => s.ready);
  if (!plan.createSandbox) return { id: ready?.id, attempt: ready?.attempt ?? 0, ...(ready?.ips ? { ips: ready.ips } : {}) };
  const prev = w.sandboxBackoff;
  if (prev && now < prev.until) throw new NodeletError('UNAVAILABLE', prev.message, { reason: prev.reason, quiet: true });
  ctx.log.info({ attempt: plan.createSandbox.attempt }, 'creating pod sandbox');
  try {
    const id = await ctx.runtime.runSandbox(w.pod, plan.createSandbox.attempt, sent);
    w.sandboxBackoff = undefined;
    const ips = w.pod.spec?.hostNetwork ? [] : ((await ctx.runtime.sandboxIPs?.(id).catch(() => [])) ?? []);
    return { id, attempt: plan.createSandbox.attempt, ...(ips.length ? { ips } : {}) };
  } catch (err) {
    w.sandboxBackoff = nextBackoff(prev, 'CreatePodSandboxError', errorMessage(err), now);
    ctx.events.emit(podRef(w.pod), 'Warning', 'FailedCreatePodSandBox', `Failed to create pod sandbox: ${errorMessage(err)}`);
    throw err;
  }
}

/** What a start learned of its container's image while the pod's sandbox was made (checkImageEarly). */
export interface EarlyImage {
  /** The container. */
  name: string;
  /** false: the image is present and may be used as it is; undefined: the start sees to it itself (a pull, a refusal). */
  present: Promise<false | undefined>;
}

/**
 * The first container's image checked while a new sandbox is made (called once the runtime
 * was asked for it: the runtime's ~100 ms of work, where nodelet only waits; before, the check
 * would compete with the sandbox's own preparation): a present image is known when the
 * sandbox is there, as the start would have found it right after. Only a check: a pull still
 * waits for the sandbox, as the kubelet's (this gate refuses it; the start then pulls), and
 * only for a policy other than Always and a pod without pull secrets (their lookup warns and
 * sends events, once per start). Never rejects.
 */
export function checkImageEarly(ctx: StepContext, w: PodWorker, plan: PodActions, now: number): EarlyImage | undefined {
  const s = plan.start[0];
  if (!plan.createSandbox || !s || s.ephemeral) return undefined;
  const backoff = w.startBackoff.get(s.name);
  const spec = new PodSpecs(w.pod).spec(s.name);
  if ((backoff && now < backoff.until) || !spec || spec.imagePullPolicy === 'Always' || (w.pod.spec?.imagePullSecrets?.length ?? 0) > 0) return undefined;
  const noPull = () => Promise.reject(new Error('a pull waits for the sandbox'));
  return { name: s.name, present: ctx.runtime.ensureImage(w.pod, spec, noPull).then((pulled) => (pulled ? undefined : false), () => undefined) };
}

/** Stops the containers the plan kills (spec changed, not in the spec, a failed probe). */
export async function killContainers(ctx: StepContext, pod: Pod, kills: PodActions['kill']): Promise<void> {
  const specs = new PodSpecs(pod);
  for (const k of kills) {
    ctx.log.info({ containerId: k.id, container: k.name }, `stopping container: ${k.reason}`);
    ctx.events.emit(podRef(pod, specs.ref(k.name)), 'Normal', 'Killing', k.event ?? `Stopping container ${k.name}`);
    await stopOne(ctx, pod, specs, k.name, k.id, ctx.gracePeriodSeconds);
  }
}

/**
 * Pulls, creates and starts one container, then runs its postStart hook (the worker waits
 * for it; a failure kills the container, which then restarts per restartPolicy). Throws
 * with the waiting reason in `details.reason`.
 */
async function startOne(ctx: StepContext, pod: Pod, spec: Container, s: StartContainer, sandbox: SandboxInfo, early: EarlyImage | undefined): Promise<void> {
  const ref = podRef(pod, { name: s.name, init: s.init, ...(s.ephemeral ? { ephemeral: true } : {}) });
  const known = early?.name === s.name ? await early.present : undefined;
  const pullStart = ctx.clock.now();
  const pulled = known ?? (await ctx.runtime.ensureImage(pod, spec, ctx.pullGate));
  ctx.events.emit(
    ref,
    'Normal',
    'Pulled',
    pulled ? `Successfully pulled image "${spec.image}" in ${((ctx.clock.now() - pullStart) / 1000).toFixed(3)}s` : `Container image "${spec.image}" already present on machine`,
  );
  // After the image, as the kubelet's getTargetID: the target must have a container in the runtime.
  const target = s.ephemeral?.target;
  if (target && !target.id) throw new NodeletError('NOT_FOUND', `unable to find target container ${target.name}`, { reason: 'CreateContainerConfigError' });
  const id = await ctx.runtime.startContainer({ pod, container: spec, sandboxId: sandbox.id!, sandboxAttempt: sandbox.attempt, restartCount: s.restartCount, init: s.init, ...(target?.id ? { targetContainerId: target.id } : {}) });
  ctx.log.info({ container: s.name, containerId: id, restartCount: s.restartCount }, 'container started');
  ctx.events.emit(ref, 'Normal', 'Created', `Created container: ${s.name}`);
  ctx.events.emit(ref, 'Normal', 'Started', `Started container ${s.name}`);
  // Ephemeral containers have no lifecycle hooks (the API refuses them; one that slips through is not run).
  const postStart: LifecycleHandler | undefined = s.ephemeral ? undefined : spec.lifecycle?.postStart;
  if (!postStart) return;
  // A pod with its own network is reached at its sandbox's IP (the one just made, on a first start), never the node's.
  const host = (!pod.spec?.hostNetwork && sandbox.ips?.[0]) || ctx.hookHost;
  const out = await runLifecycleHandler(postStart, { containerId: id, container: spec, host }, exec(ctx.runtime), POST_START_TIMEOUT_S, ctx.clock);
  if (out.ok) return;
  // As the kubelet: the container is killed and restarts per restartPolicy.
  ctx.events.emit(ref, 'Warning', 'FailedPostStartHook', out.output);
  ctx.events.emit(ref, 'Normal', 'Killing', `FailedPostStartHook`);
  await ctx.runtime.stopContainer(id, ctx.gracePeriodSeconds).catch((e) => ctx.log.warn({ err: errorMessage(e) }, 'stop container'));
  throw new NodeletError('INTERNAL', `PostStartHook failed: ${out.output}`, { reason: 'PostStartHookError' });
}

/**
 * Starts what the plan starts, in order (an init container alone); `early`: what
 * checkImageEarly found of the first one's image. A container whose last
 * start failed waits for its backoff and shows the failure's reason meanwhile; a new
 * failure is recorded with the next backoff, warned once per message, and sent as a
 * Failed event. Fills `waiting` with what did not start.
 */
export async function startContainers(ctx: StepContext, w: PodWorker, starts: StartContainer[], sandbox: SandboxInfo, waiting: Record<string, Waiting>, now: number, early?: EarlyImage): Promise<void> {
  const pod = w.pod;
  const specs = new PodSpecs(pod);
  for (const s of starts) {
    const spec = specs.spec(s.name)!;
    const prev = w.startBackoff.get(s.name);
    if (prev && now < prev.until) {
      waiting[s.name] = { reason: prev.reason, ...(prev.message ? { message: prev.message } : {}) };
      continue;
    }
    try {
      await startOne(ctx, pod, spec, s, sandbox, early);
      w.startBackoff.delete(s.name);
    } catch (err) {
      const reason = (err instanceof NodeletError && typeof err.details.reason === 'string' && err.details.reason) || 'CreateContainerError';
      const message = errorMessage(err);
      w.startBackoff.set(s.name, nextBackoff(prev, reason, message, now));
      waiting[s.name] = { reason, message };
      if (prev?.message !== message) ctx.log.warn({ container: s.name, reason }, `container ${s.name}: ${reason}: ${message}`);
      ctx.events.emit(podRef(pod, specs.ref(s.name)), 'Warning', 'Failed', `Error: ${reason}: ${message}`);
    }
    if (s.init) break;
  }
}

/** Removes the dead containers and idle sandboxes the plan no longer needs (best effort). */
export async function collectGarbage(ctx: StepContext, plan: PodActions): Promise<void> {
  for (const id of plan.removeContainers) await ctx.runtime.removeContainer(id).catch((e) => ctx.log.debug({ err: errorMessage(e) }, 'remove container'));
  for (const id of plan.removeSandboxes) await ctx.runtime.removeSandbox(id).catch((e) => ctx.log.debug({ err: errorMessage(e) }, 'remove sandbox'));
}

/**
 * Removes the pod from the runtime: stops everything (the grace period, preStop hooks),
 * then removes containers and sandboxes, then what the pod left on the node. Throws when
 * a stop or a removal fails (the caller retries with its backoff); the node-side cleanup
 * is best effort, logged.
 */
export async function removePod(ctx: StepContext, pod: Pod, uid: string, grace: number): Promise<void> {
  const observed = await ctx.runtime.observePod(uid);
  const stopFailures = await killPod(ctx, pod, observed, grace);
  // A sandbox the runtime could not stop cannot be removed: fail now, with the reason.
  if (stopFailures.length) throw new NodeletError('UNAVAILABLE', stopFailures.join('; '));
  for (const c of observed.containers) await ctx.runtime.removeContainer(c.id);
  for (const s of observed.sandboxes) await ctx.runtime.removeSandbox(s.id);
  await ctx.runtime.cleanupPod(uid).catch((e) => ctx.log.warn({ err: errorMessage(e) }, `cannot remove the pod's directories: ${errorMessage(e)}`));
}
