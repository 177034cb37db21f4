/**
 * The pod sync decision, as a pure function: given the desired pod, what the runtime
 * holds for it and the time, which actions bring the runtime closer to the pod. The
 * worker executes them; tests compare whole plans.
 *
 * Follows the kubelet's computePodActions: one ready sandbox per pod (else kill all and
 * make a new one with the next attempt), init containers one at a time in order, then
 * every app container, restarts per restartPolicy with crash-loop backoff.
 *
 * Backoff is derived from the runtime alone (nodelet keeps no state): the n-th restart
 * of a container waits min(10s * 2^(n-1), 5m) after its last exit (see backoffPolicy for the
 * kubelet's settings of both), the first restart is
 * immediate (as the kubelet's first failure has no backoff entry yet), and a container
 * that ran for 10 minutes before exiting starts over at 10s.
 */
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { containerHash as kubeletContainerHash } from './container-hash.js';
import { containersByName, latestSandbox, type ObservedContainer, type ObservedPod, type ObservedSandbox } from './observed.js';

export const BACKOFF = { initialMs: 10_000, maxMs: 300_000, resetAfterRunMs: 600_000 } as const;

/** The crash-loop back-off's first and longest wait. */
export interface BackoffPolicy {
  initialMs: number;
  maxMs: number;
}

/**
 * The kubelet's policy (KEP-4603): 10s doubling to 5m, or 1s doubling to 1m with the gate
 * ReduceDefaultCrashLoopBackOffDecay; a `crashLoopBackOff.maxContainerRestartPeriod` (gate
 * KubeletCrashLoopBackOffMax) is then the longest wait, and the first one too when shorter.
 */
export function backoffPolicy(o: { reducedDecay?: boolean; maxContainerRestartPeriodMs?: number } = {}): BackoffPolicy {
  let initialMs: number = o.reducedDecay ? 1_000 : BACKOFF.initialMs;
  let maxMs: number = o.reducedDecay ? 60_000 : BACKOFF.maxMs;
  const period = o.maxContainerRestartPeriodMs;
  if (period !== undefined && period > 0) {
    maxMs = period;
    initialMs = Math.min(initialMs, period);
  }
  return { initialMs, maxMs };
}

export interface StartContainer {
  name: string;
  /** Restart count of the new container: previous instance's + 1, or 0. */
  restartCount: number;
  init: boolean;
  /**
   * An ephemeral container (spec.ephemeralContainers): started once, never restarted.
   * `target` is its targetContainerName and the ID of that container's newest instance
   * (unset when none exists: the start then fails as the kubelet's, "unable to find target
   * container"), whose process namespace it joins.
   */
  ephemeral?: { target?: { name: string; id?: string } };
}

export interface Waiting {
  reason: string;
  message?: string;
}

export interface PodActions {
  /** Stop every container and sandbox of the pod first (a new sandbox follows, or the pod is done). */
  killPod: boolean;
  /** Make a new sandbox with this attempt number. */
  createSandbox?: { attempt: number };
  /** Containers to create and start, in order (init containers one at a time). */
  start: StartContainer[];
  /** Running containers to stop; `event`, when set, is the Killing event's message. */
  kill: { id: string; name: string; reason: string; event?: string }[];
  /** Dead containers no longer needed (older instances; the newest dead one stays for status). */
  removeContainers: string[];
  /** Old, not-ready sandboxes with nothing running in them. */
  removeSandboxes: string[];
  /** Containers that will not start in this sync, and why. */
  waiting: Record<string, Waiting>;
  /** When a backoff ends: the worker syncs again then. */
  resyncAt?: number;
}

export function restartPolicy(pod: Pod): 'Always' | 'OnFailure' | 'Never' {
  const p = pod.spec?.restartPolicy;
  return p === 'OnFailure' || p === 'Never' ? p : 'Always';
}

function shouldRestart(policy: string, c: ObservedContainer): boolean {
  if (policy === 'Always') return true;
  if (policy === 'OnFailure') return c.exitCode !== 0;
  return false;
}

/** Backoff before restarting `c` (which exited); 0 when it may start now. */
export function backoffMs(c: ObservedContainer, policy: BackoffPolicy = BACKOFF): number {
  if (c.restartCount <= 0) return 0;
  if (c.startedAt !== undefined && c.finishedAt !== undefined && c.finishedAt - c.startedAt >= BACKOFF.resetAfterRunMs) {
    return policy.initialMs;
  }
  return Math.min(policy.maxMs, policy.initialMs * 2 ** (c.restartCount - 1));
}

/** `<name>_<namespace>(<uid>)`, as the kubelet names a pod in messages. */
export function podTitle(pod: Pod): string {
  return `${pod.metadata?.name}_${pod.metadata?.namespace}(${pod.metadata?.uid})`;
}

/**
 * `io.kubernetes.container.hash` of a container spec: the kubelet's own HashContainer (see
 * container-hash.ts), so containers a kubelet made are recognized as unchanged.
 */
export function containerHash(c: Container): string {
  // Each sync asks for every running container's hash: kept per spec object (a pod's spec lives
  // as long as its version), as container-hash.ts's bounded memo is cleared over and over by a
  // pod of more than its 4,096 entries (the API lets a pod have ~45,000 containers).
  const known = hashes.get(c);
  if (known && known.name === c.name && known.image === c.image) return known.hash;
  const hash = kubeletContainerHash(c);
  hashes.set(c, { name: c.name, image: c.image, hash });
  return hash;
}

const hashes = new WeakMap<Container, { name: string; image: string | undefined; hash: string }>();

/** A native sidecar: an init container with `restartPolicy: Always` (GA in 1.33). It keeps running beside the app containers. */
export function isSidecar(c: Container): boolean {
  return c.restartPolicy === 'Always';
}

/** The pod's ephemeral containers (added through the API's `pods/ephemeralcontainers`), as Containers. */
export function ephemeralContainers(pod: Pod): (Container & { targetContainerName?: string })[] {
  return (pod.spec?.ephemeralContainers ?? []) as (Container & { targetContainerName?: string })[];
}

/**
 * The kubelet's computePodActions. `started(id)`: whether a running container has started
 * (its startup probe passed; default: running is started), for native sidecars, the next
 * init container starting only once the sidecar before it has.
 *
 * In the kubelet's steps: garbage (old dead instances, idle sandboxes); a changed sandbox
 * (replace it, or end a pod that will not run again); then, in the ready sandbox, the
 * ephemeral containers, containers not in the spec, the init containers and sidecars, the
 * app containers, and the end of a pod whose app containers completed.
 */
export function computePodActions(pod: Pod, observed: ObservedPod, now: number, backoff: BackoffPolicy = BACKOFF, started: (containerId: string) => boolean = () => true): PodActions {
  const p = planInput(pod, observed, now, backoff, started);
  removeGarbage(p);
  const sb = p.sandbox;
  if (!sb || !sb.ready || p.readySandboxes.length > 1) return sandboxChanged(p);
  const inSandbox = (name: string) => p.named(name).find((c) => c.podSandboxId === sb.id);
  startEphemeralContainers(p);
  killContainersNotInSpec(p, sb);
  if (!initContainerActions(p, inSandbox)) {
    for (const a of p.apps) p.actions.waiting[a.name] = { reason: 'PodInitializing' };
    return p.actions;
  }
  if (appContainerActions(p, inSandbox) && p.apps.length > 0) stopWhenAppsCompleted(p, sb, inSandbox);
  return p.actions;
}

/** What the steps of one computePodActions read, and the plan they write (`actions`). */
interface PlanInput {
  pod: Pod;
  observed: ObservedPod;
  now: number;
  backoff: BackoffPolicy;
  started: (containerId: string) => boolean;
  policy: 'Always' | 'OnFailure' | 'Never';
  inits: Container[];
  apps: Container[];
  /** The newest sandbox. */
  sandbox: ObservedSandbox | undefined;
  readySandboxes: ObservedSandbox[];
  byName: ReadonlyMap<string, readonly ObservedContainer[]>;
  /** The instances of a container name, newest first. */
  named: (name: string) => readonly ObservedContainer[];
  /** Restart count of a new instance of that name: the newest's + 1, or 0. */
  nextCount: (name: string) => number;
  actions: PodActions;
}

/** A container's instance in the current sandbox, if any. */
type InSandbox = (name: string) => ObservedContainer | undefined;

function planInput(pod: Pod, observed: ObservedPod, now: number, backoff: BackoffPolicy, started: (containerId: string) => boolean): PlanInput {
  // Looked up by name once per container: grouped once (the API lets a pod have ~45,000).
  const byName = containersByName(observed);
  const named = (name: string): readonly ObservedContainer[] => byName.get(name) ?? [];
  const nextCount = (name: string) => {
    const prev = named(name)[0];
    return prev ? prev.restartCount + 1 : 0;
  };
  return {
    pod, observed, now, backoff, started,
    policy: restartPolicy(pod),
    inits: pod.spec?.initContainers ?? [],
    apps: pod.spec?.containers ?? [],
    sandbox: latestSandbox(observed),
    readySandboxes: observed.sandboxes.filter((s) => s.ready),
    byName, named, nextCount,
    actions: { killPod: false, start: [], kill: [], removeContainers: [], removeSandboxes: [], waiting: {} },
  };
}

/**
 * Of each name's dead containers the newest stays (it is the status's lastState, as the
 * kubelet's container GC keeps one per container); older ones, and old idle sandboxes, go.
 */
function removeGarbage(p: PlanInput): void {
  const { observed, actions } = p;
  for (const all of p.byName.values()) {
    const dead = all.filter((c) => c.state === 'exited');
    for (const c of dead.slice(1)) actions.removeContainers.push(c.id);
  }
  const busySandboxes = new Set(observed.containers.filter((c) => c.state === 'running').map((c) => c.podSandboxId));
  // An old sandbox that holds an ephemeral container's instance stays: removing it would
  // remove that container, the only record that it ran, and it would start again.
  for (const ec of p.pod.spec?.ephemeralContainers ?? []) for (const c of p.named(ec.name)) busySandboxes.add(c.podSandboxId);
  for (const s of observed.sandboxes) {
    if (s === p.sandbox || s.ready) continue;
    if (!busySandboxes.has(s.id)) actions.removeSandboxes.push(s.id);
  }
}

/**
 * No sandbox, or the newest is not ready, or more than one is (the kubelet's
 * podSandboxChanged): kill the pod and make a new sandbox with the next attempt, starting
 * the first init container or else every app container; unless the pod ran and will not run
 * again, whose leftovers are only cleaned up.
 */
function sandboxChanged(p: PlanInput): PodActions {
  const { observed, actions, policy, inits, readySandboxes, sandbox: sb } = p;
  const anyRan = observed.containers.some((c) => c.state === 'exited' || c.state === 'running');
  if (sb && policy === 'Never' && anyRan) {
    // The pod ran and will not run again: clean up what still runs, make nothing new.
    actions.killPod = observed.containers.some((c) => c.state === 'running') || readySandboxes.length > 0;
    return actions;
  }
  if (sb && policy === 'OnFailure' && anyRan && allSucceeded(p.pod, p.byName)) {
    actions.killPod = readySandboxes.length > 0;
    return actions;
  }
  actions.killPod = observed.sandboxes.length > 0 || observed.containers.some((c) => c.state === 'running');
  actions.createSandbox = { attempt: sb ? sb.attempt + 1 : 0 };
  if (inits.length > 0) actions.start.push({ name: inits[0]!.name, restartCount: p.nextCount(inits[0]!.name), init: true });
  else for (const c of p.apps) actions.start.push({ name: c.name, restartCount: p.nextCount(c.name), init: false });
  return actions;
}

/**
 * Ephemeral containers, in the ready sandbox only (a sync that makes the sandbox starts
 * none), before and whatever the init containers do: each starts once, when the runtime
 * holds no container of its name in any sandbox, and is never restarted nor replaced.
 */
function startEphemeralContainers(p: PlanInput): void {
  for (const ec of ephemeralContainers(p.pod)) {
    if (p.named(ec.name).length > 0) continue;
    const targetName = ec.targetContainerName;
    const targetId = targetName ? p.named(targetName)[0]?.id : undefined;
    p.actions.start.push({ name: ec.name, restartCount: 0, init: false, ephemeral: targetName ? { target: { name: targetName, ...(targetId ? { id: targetId } : {}) } } : {} });
  }
}

/** A running container of the sandbox that no init, app or ephemeral container of the spec names is stopped. */
function killContainersNotInSpec(p: PlanInput, sb: ObservedSandbox): void {
  const specNames = new Set([...p.inits, ...p.apps, ...ephemeralContainers(p.pod)].map((c) => c.name));
  for (const c of p.observed.containers) {
    if (c.podSandboxId === sb.id && c.state === 'running' && !specNames.has(c.name)) {
      p.actions.kill.push({ id: c.id, name: c.name, reason: 'container is not in the pod spec' });
    }
  }
}

/**
 * The init phase (the kubelet's computeInitContainerActions); true when the pod is
 * initialized and its app containers may be looked at. Once an app container exists in the
 * sandbox, the pod was initialized: the init containers are done with, and a sidecar that
 * stops is restarted beside the apps without holding them. Until then, the init containers
 * run in order: a regular one must succeed, a sidecar must have started (its startup probe
 * passed), before the next one starts.
 */
function initContainerActions(p: PlanInput, inSandbox: InSandbox): boolean {
  const { pod, now, actions, backoff, nextCount } = p;
  if (p.apps.some((a) => inSandbox(a.name))) {
    for (const spec of p.inits) if (isSidecar(spec)) keepSidecar(pod, spec, inSandbox(spec.name), now, actions, backoff, nextCount);
    return true;
  }
  for (const spec of p.inits) {
    const cur = inSandbox(spec.name);
    if (isSidecar(spec)) {
      if (cur?.state === 'running' && (!cur.hash || cur.hash === containerHash(spec)) && p.started(cur.id)) continue;
      keepSidecar(pod, spec, cur, now, actions, backoff, nextCount);
      return false;
    }
    if (cur && cur.state === 'exited' && cur.exitCode === 0) continue;
    // Still running or created, or failed under restartPolicy Never (which fails the pod): nothing to start.
    if (cur && (cur.state === 'running' || cur.state === 'created' || p.policy === 'Never')) return false;
    if (!cur) actions.start.push({ name: spec.name, restartCount: nextCount(spec.name), init: true });
    else restartOrBackOff(pod, spec.name, cur, now, actions, true, backoff);
    return false;
  }
  return true;
}

/**
 * The app containers' keep / kill / start decisions: a missing one starts, a running one
 * whose spec changed is replaced, one created but never started is replaced, an exited one
 * restarts per restartPolicy after its backoff. True when they are all done for good (none
 * runs nor will restart: a Job's pod whose work is over).
 */
function appContainerActions(p: PlanInput, inSandbox: InSandbox): boolean {
  const { policy, actions } = p;
  let appsDone = policy !== 'Always';
  for (const spec of p.apps) {
    const cur = inSandbox(spec.name);
    if (!cur) {
      appsDone = false;
      actions.start.push({ name: spec.name, restartCount: p.nextCount(spec.name), init: false });
      continue;
    }
    if (cur.state !== 'exited' || shouldRestart(policy, cur)) appsDone = false;
    if (cur.state === 'running') {
      if (cur.hash && cur.hash !== containerHash(spec)) {
        actions.kill.push({ id: cur.id, name: spec.name, reason: 'container spec changed' });
        actions.start.push({ name: spec.name, restartCount: cur.restartCount + 1, init: false });
      }
      continue;
    }
    if (cur.state === 'created' || cur.state === 'unknown') {
      // Created but never started (a start that failed): replace it.
      actions.removeContainers.push(cur.id);
      actions.start.push({ name: spec.name, restartCount: cur.restartCount + 1, init: false });
      continue;
    }
    if (shouldRestart(policy, cur)) restartOrBackOff(p.pod, spec.name, cur, p.now, actions, false, p.backoff);
  }
  return appsDone;
}

/**
 * A pod that does not restart its app containers (a Job's) is over when they are: its
 * sidecars are stopped, last started first, and not restarted; its ephemeral containers end
 * with the pod's work too (the kubelet kills the whole pod then).
 */
function stopWhenAppsCompleted(p: PlanInput, sb: ObservedSandbox, inSandbox: InSandbox): void {
  const { actions } = p;
  const completed = 'the pod\'s app containers have completed';
  const sidecars = new Set(p.inits.filter(isSidecar).map((c) => c.name));
  actions.start = actions.start.filter((s) => !sidecars.has(s.name));
  for (const s of sidecars) delete actions.waiting[s];
  for (const spec of [...p.inits].reverse()) {
    const cur = sidecars.has(spec.name) ? inSandbox(spec.name) : undefined;
    if (cur && (cur.state === 'running' || cur.state === 'created')) actions.kill.push({ id: cur.id, name: spec.name, reason: completed, event: `Stopping container ${spec.name}` });
  }
  for (const ec of ephemeralContainers(p.pod)) {
    actions.start = actions.start.filter((s) => s.name !== ec.name);
    for (const c of p.named(ec.name)) {
      if (c.podSandboxId === sb.id && (c.state === 'running' || c.state === 'created')) actions.kill.push({ id: c.id, name: ec.name, reason: completed, event: `Stopping container ${ec.name}` });
    }
  }
}

/**
 * A sidecar's own actions, whatever the pod's restartPolicy: started when missing, replaced
 * when it never ran or its spec changed, restarted after the crash-loop backoff when it
 * stopped.
 */
function keepSidecar(pod: Pod, spec: Container, cur: ObservedContainer | undefined, now: number, actions: PodActions, backoff: BackoffPolicy, nextCount: (name: string) => number): void {
  if (!cur) {
    actions.start.push({ name: spec.name, restartCount: nextCount(spec.name), init: true });
  } else if (cur.state === 'running') {
    if (cur.hash && cur.hash !== containerHash(spec)) {
      actions.kill.push({ id: cur.id, name: spec.name, reason: 'container spec changed' });
      actions.start.push({ name: spec.name, restartCount: cur.restartCount + 1, init: true });
    }
  } else if (cur.state === 'created' || cur.state === 'unknown') {
    actions.removeContainers.push(cur.id);
    actions.start.push({ name: spec.name, restartCount: cur.restartCount + 1, init: true });
  } else {
    restartOrBackOff(pod, spec.name, cur, now, actions, true, backoff);
  }
}

function restartOrBackOff(pod: Pod, name: string, cur: ObservedContainer, now: number, actions: PodActions, init: boolean, backoff: BackoffPolicy): void {
  const wait = backoffMs(cur, backoff);
  const until = (cur.finishedAt ?? now) + wait;
  if (wait > 0 && now < until) {
    actions.waiting[name] = {
      reason: 'CrashLoopBackOff',
      message: `back-off ${formatSeconds(wait)} restarting failed container=${name} pod=${podTitle(pod)}`,
    };
    actions.resyncAt = Math.min(actions.resyncAt ?? Infinity, until);
    return;
  }
  actions.start.push({ name, restartCount: cur.restartCount + 1, init });
}

function formatSeconds(ms: number): string {
  const s = Math.round(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${s % 60}s` : `${s}s`;
}

function allSucceeded(pod: Pod, byName: ReadonlyMap<string, readonly ObservedContainer[]>): boolean {
  return (pod.spec?.containers ?? []).every((c) => {
    const cur = byName.get(c.name)?.[0];
    return cur?.state === 'exited' && cur.exitCode === 0;
  });
}
