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
import { containersByName, latestSandbox, type ObservedContainer, type ObservedPod } from './observed.js';

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
 */
export function computePodActions(pod: Pod, observed: ObservedPod, now: number, backoff: BackoffPolicy = BACKOFF, started: (containerId: string) => boolean = () => true): PodActions {
  const actions: PodActions = { killPod: false, start: [], kill: [], removeContainers: [], removeSandboxes: [], waiting: {} };
  const policy = restartPolicy(pod);
  const inits = pod.spec?.initContainers ?? [];
  const apps = pod.spec?.containers ?? [];
  const sb = latestSandbox(observed);
  const readySandboxes = observed.sandboxes.filter((s) => s.ready);
  // Looked up by name once per container: grouped once (the API lets a pod have ~45,000).
  const byName = containersByName(observed);
  const named = (name: string): readonly ObservedContainer[] => byName.get(name) ?? [];
  const nextCount = (name: string) => {
    const prev = named(name)[0];
    return prev ? prev.restartCount + 1 : 0;
  };

  // Of each name's dead containers the newest stays (it is the status's lastState, as the
  // kubelet's container GC keeps one per container); older ones, and old idle sandboxes, go.
  for (const all of byName.values()) {
    const dead = all.filter((c) => c.state === 'exited');
    for (const c of dead.slice(1)) actions.removeContainers.push(c.id);
  }
  const busySandboxes = new Set(observed.containers.filter((c) => c.state === 'running').map((c) => c.podSandboxId));
  // An old sandbox that holds an ephemeral container's instance stays: removing it would
  // remove that container, the only record that it ran, and it would start again.
  for (const ec of pod.spec?.ephemeralContainers ?? []) for (const c of named(ec.name)) busySandboxes.add(c.podSandboxId);
  for (const s of observed.sandboxes) {
    if (s === sb || s.ready) continue;
    if (!busySandboxes.has(s.id)) actions.removeSandboxes.push(s.id);
  }

  const needNewSandbox = !sb || !sb.ready || readySandboxes.length > 1;
  if (needNewSandbox) {
    const anyRan = observed.containers.some((c) => c.state === 'exited' || c.state === 'running');
    if (sb && policy === 'Never' && anyRan) {
      // The pod ran and will not run again: clean up what still runs, make nothing new.
      actions.killPod = observed.containers.some((c) => c.state === 'running') || readySandboxes.length > 0;
      return actions;
    }
    if (sb && policy === 'OnFailure' && anyRan && allSucceeded(pod, byName)) {
      actions.killPod = readySandboxes.length > 0;
      return actions;
    }
    actions.killPod = observed.sandboxes.length > 0 || observed.containers.some((c) => c.state === 'running');
    actions.createSandbox = { attempt: sb ? sb.attempt + 1 : 0 };
    if (inits.length > 0) actions.start.push({ name: inits[0]!.name, restartCount: nextCount(inits[0]!.name), init: true });
    else for (const c of apps) actions.start.push({ name: c.name, restartCount: nextCount(c.name), init: false });
    return actions;
  }

  // Ephemeral containers, in the ready sandbox only (a sync that makes the sandbox starts
  // none), before and whatever the init containers do: each starts once, when the runtime
  // holds no container of its name in any sandbox, and is never restarted nor replaced.
  const ephemerals = ephemeralContainers(pod);
  for (const ec of ephemerals) {
    if (named(ec.name).length > 0) continue;
    const targetName = ec.targetContainerName;
    const targetId = targetName ? named(targetName)[0]?.id : undefined;
    actions.start.push({ name: ec.name, restartCount: 0, init: false, ephemeral: targetName ? { target: { name: targetName, ...(targetId ? { id: targetId } : {}) } } : {} });
  }

  const inSandbox = (name: string) => named(name).find((c) => c.podSandboxId === sb.id);
  const specNames = new Set([...inits, ...apps, ...ephemerals].map((c) => c.name));
  for (const c of observed.containers) {
    if (c.podSandboxId === sb.id && c.state === 'running' && !specNames.has(c.name)) {
      actions.kill.push({ id: c.id, name: c.name, reason: 'container is not in the pod spec' });
    }
  }

  const waitForInit = () => {
    for (const a of apps) actions.waiting[a.name] = { reason: 'PodInitializing' };
    return actions;
  };
  // Once an app container exists in the sandbox, the pod was initialized: the init
  // containers are done with, and a sidecar that stops is restarted beside the apps without
  // holding them (the kubelet's "initialized" test).
  const initialized = apps.some((a) => inSandbox(a.name));
  if (initialized) for (const spec of inits) if (isSidecar(spec)) keepSidecar(pod, spec, inSandbox(spec.name), now, actions, backoff, nextCount);
  // Init containers, in order, until the pod is initialized: a regular one must succeed, a
  // sidecar must have started (its startup probe passed), before the next one starts.
  for (const spec of initialized ? [] : inits) {
    const cur = inSandbox(spec.name);
    if (isSidecar(spec)) {
      if (cur?.state === 'running' && (!cur.hash || cur.hash === containerHash(spec)) && started(cur.id)) continue;
      keepSidecar(pod, spec, cur, now, actions, backoff, nextCount);
      return waitForInit();
    }
    if (cur && cur.state === 'exited' && cur.exitCode === 0) continue;
    if (cur && (cur.state === 'running' || cur.state === 'created')) {
      for (const a of apps) actions.waiting[a.name] = { reason: 'PodInitializing' };
      return actions;
    }
    if (!cur) {
      actions.start.push({ name: spec.name, restartCount: nextCount(spec.name), init: true });
    } else if (policy === 'Never') {
      // A failed init container with restartPolicy Never fails the pod.
      for (const a of apps) actions.waiting[a.name] = { reason: 'PodInitializing' };
      return actions;
    } else {
      restartOrBackOff(pod, spec.name, cur, now, actions, true, backoff);
    }
    for (const a of apps) actions.waiting[a.name] = { reason: 'PodInitializing' };
    return actions;
  }

  let appsDone = policy !== 'Always';
  for (const spec of apps) {
    const cur = inSandbox(spec.name);
    if (!cur) {
      appsDone = false;
      actions.start.push({ name: spec.name, restartCount: nextCount(spec.name), init: false });
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
    if (shouldRestart(policy, cur)) restartOrBackOff(pod, spec.name, cur, now, actions, false, backoff);
  }
  // A pod that does not restart its app containers (a Job's) is over when they are: its
  // sidecars are stopped, last started first, and not restarted.
  if (appsDone && apps.length > 0) {
    const sidecars = new Set(inits.filter(isSidecar).map((c) => c.name));
    actions.start = actions.start.filter((s) => !sidecars.has(s.name));
    for (const s of sidecars) delete actions.waiting[s];
    for (const spec of [...inits].reverse()) {
      const cur = sidecars.has(spec.name) ? inSandbox(spec.name) : undefined;
      if (cur && (cur.state === 'running' || cur.state === 'created')) actions.kill.push({ id: cur.id, name: spec.name, reason: 'the pod\'s app containers have completed', event: `Stopping container ${spec.name}` });
    }
    // Ephemeral containers end with the pod's work too (the kubelet kills the whole pod then).
    for (const ec of ephemerals) {
      actions.start = actions.start.filter((s) => s.name !== ec.name);
      for (const c of named(ec.name)) {
        if (c.podSandboxId === sb.id && (c.state === 'running' || c.state === 'created')) actions.kill.push({ id: c.id, name: ec.name, reason: 'the pod\'s app containers have completed', event: `Stopping container ${ec.name}` });
      }
    }
  }
  return actions;
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
