/**
 * Pod status as a pure function of the pod, what the runtime holds, and the worker's
 * last reasons for containers that are not running (CrashLoopBackOff,
 * CreateContainerError, ErrImagePull, ...). Phase follows the kubelet's getPhase.
 */
import type { ContainerState, ContainerStatus, Pod, PodCondition, PodStatus } from 'kubernetes-types/core/v1.js';
import { containersByName, latestSandbox, type ObservedContainer, type ObservedPod } from '../sync/observed.js';
import { ephemeralContainers, isSidecar, restartPolicy, type Waiting } from '../sync/plan.js';
import { limitTerminationMessages } from '../logs/termination-message.js';

export interface StatusInputs {
  pod: Pod;
  observed: ObservedPod;
  /** Reasons the worker recorded for containers it could not start. */
  waiting: Record<string, Waiting>;
  /** Prefix of container IDs: `containerd://`. */
  runtimeName: string;
  hostIP?: string;
  /** The previous status, to keep lastTransitionTime of unchanged conditions. */
  previous?: PodStatus;
  now: number;
  /** Probe results of running containers (default: running is started and ready). */
  probes?: { ready(containerId: string): boolean; started(containerId: string): boolean };
}

const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z'));

function terminated(c: ObservedContainer, runtimeName: string): ContainerState {
  return {
    terminated: {
      exitCode: c.exitCode ?? 0,
      reason: c.reason || (c.exitCode === 0 ? 'Completed' : 'Error'),
      ...(c.message ? { message: c.message } : {}),
      startedAt: iso(c.startedAt),
      finishedAt: iso(c.finishedAt),
      containerID: `${runtimeName}://${c.id}`,
    },
  };
}

function containerStatus(
  name: string,
  image: string,
  /** The observed containers of this name, newest first (containersByName). */
  all: readonly ObservedContainer[],
  sandboxId: string | undefined,
  waiting: Waiting | undefined,
  defaultWaiting: string,
  runtimeName: string,
  probes?: StatusInputs['probes'],
): ContainerStatus {
  const cur = all.find((c) => c.podSandboxId === sandboxId) ?? all[0];
  const prevDead = all.find((c) => c !== cur && c.state === 'exited');
  let state: ContainerState;
  let lastState: ContainerState = {};
  if (cur && cur.state === 'running' && !waiting) {
    state = { running: { startedAt: iso(cur.startedAt ?? cur.createdAt) } };
    if (prevDead) lastState = terminated(prevDead, runtimeName);
  } else if (waiting) {
    state = { waiting: { reason: waiting.reason, ...(waiting.message ? { message: waiting.message } : {}) } };
    if (cur && cur.state === 'exited') lastState = terminated(cur, runtimeName);
  } else if (cur && cur.state === 'exited') {
    state = terminated(cur, runtimeName);
    if (prevDead) lastState = terminated(prevDead, runtimeName);
  } else {
    state = { waiting: { reason: defaultWaiting } };
  }
  return {
    name,
    state,
    lastState,
    ready: !!state.running && (!probes || probes.ready(cur!.id)),
    restartCount: cur?.restartCount ?? 0,
    image,
    imageID: cur?.imageRef ?? '',
    ...(cur ? { containerID: `${runtimeName}://${cur.id}` } : {}),
    started: !!state.running && (!probes || probes.started(cur!.id)),
  };
}

export function computePodStatus(inp: StatusInputs): PodStatus {
  const { pod, observed, waiting, runtimeName, now } = inp;
  const sb = latestSandbox(observed);
  const sandboxId = sb?.id;
  const inits = pod.spec?.initContainers ?? [];
  const apps = pod.spec?.containers ?? [];
  // Grouped once: looking each container up in the whole list is quadratic (~45,000 containers fit in a pod).
  const byName = containersByName(observed);
  const named = (name: string) => byName.get(name) ?? [];
  // Native sidecars (restartPolicy Always) are probed, and report started and ready as app containers do.
  const initStatuses = inits.map((c) => containerStatus(c.name, c.image ?? '', named(c.name), sandboxId, waiting[c.name], 'PodInitializing', runtimeName, isSidecar(c) ? inp.probes : undefined));
  const sidecarStatuses = initStatuses.filter((_, i) => isSidecar(inits[i]!));
  const regularInitStatuses = initStatuses.filter((_, i) => !isSidecar(inits[i]!));
  // Initialized: every regular init container succeeded and every sidecar has started (or,
  // once an app container exists, the pod was: a sidecar restarting later does not undo it).
  const appsCreated = apps.some((c) => named(c.name).some((o) => o.podSandboxId === sandboxId));
  const initialized = regularInitStatuses.every((s) => s.state?.terminated?.exitCode === 0) && (appsCreated || sidecarStatuses.every((s) => s.started));
  const appStatuses = apps.map((c) =>
    containerStatus(c.name, c.image ?? '', named(c.name), sandboxId, waiting[c.name], initialized ? 'ContainerCreating' : 'PodInitializing', runtimeName, inp.probes),
  );
  // Ephemeral containers: never probed, never ready, no `started`, and no part of the phase
  // or the conditions; waiting like the pod's other containers (PodInitializing in a pod with
  // init containers), as the kubelet's convertToAPIContainerStatuses reports them.
  const ephemeralStatuses = ephemeralContainers(pod).map((c) => {
    const { started: _started, ...st } = containerStatus(c.name, c.image ?? '', named(c.name), sandboxId, waiting[c.name], inits.length > 0 ? 'PodInitializing' : 'ContainerCreating', runtimeName);
    return { ...st, ready: false };
  });
  const initFailed = regularInitStatuses.some((s) => (s.state?.terminated?.exitCode ?? 0) !== 0) && restartPolicy(pod) === 'Never';

  const phase = initFailed ? 'Failed' : podPhase(pod, initialized, appStatuses);
  // A sidecar's readiness counts in the pod's, as an app container's does.
  const allReady = appStatuses.length > 0 && appStatuses.every((s) => s.ready) && sidecarStatuses.every((s) => s.ready);
  const cond = (type: string, ok: boolean, reason?: string): PodCondition => {
    const status = ok ? 'True' : 'False';
    const prev = inp.previous?.conditions?.find((c) => c.type === type);
    return {
      type,
      status,
      ...(reason && !ok ? { reason } : {}),
      lastProbeTime: null as unknown as undefined,
      lastTransitionTime: prev && prev.status === status ? prev.lastTransitionTime : iso(now),
    };
  };
  const notReady = [...sidecarStatuses, ...appStatuses].filter((s) => !s.ready).map((s) => s.name);
  // readinessGates: Ready also waits for each named condition, which others set on the pod
  // through the API (the kubelet's GeneratePodReadyCondition and its messages).
  const gatesUnready: string[] = [];
  for (const g of pod.spec?.readinessGates ?? []) {
    const c = pod.status?.conditions?.find((x) => x.type === g.conditionType);
    if (!c) gatesUnready.push(`corresponding condition of pod readiness gate "${g.conditionType}" does not exist.`);
    else if (c.status !== 'True') gatesUnready.push(`the status of pod readiness gate "${g.conditionType}" is not "True", but ${c.status}`);
  }
  const startTime = inp.previous?.startTime ?? iso(now);
  // Terminated states' messages within the pod's 12 KiB, as the kubelet's status manager cuts them.
  return limitTerminationMessages(pod, {
    phase,
    conditions: [
      cond('PodReadyToStartContainers', !!sb?.ready),
      cond('Initialized', initialized, 'ContainersNotInitialized'),
      cond('Ready', allReady && !gatesUnready.length, allReady ? 'ReadinessGatesNotReady' : 'ContainersNotReady'),
      cond('ContainersReady', allReady, 'ContainersNotReady'),
      cond('PodScheduled', true),
    ].map((c) =>
      c.status === 'True' || (c.type !== 'Ready' && c.type !== 'ContainersReady')
        ? c
        : { ...c, message: allReady ? gatesUnready.join(', ') : `containers with unready status: [${notReady.join(' ')}]` },
    ),
    ...(inp.hostIP ? { hostIP: inp.hostIP, hostIPs: [{ ip: inp.hostIP }] } : {}),
    ...podIPs(pod, sb?.ips, inp),
    startTime,
    ...(initStatuses.length ? { initContainerStatuses: initStatuses } : {}),
    containerStatuses: appStatuses,
    ...(ephemeralStatuses.length ? { ephemeralContainerStatuses: ephemeralStatuses } : {}),
    qosClass: qosClass(pod),
  });
}

/**
 * A hostNetwork pod's IPs are the node's; another pod's are its sandbox's, kept from the
 * previous status once the sandbox is gone (the kubelet keeps them too: a finished pod
 * still shows the IP it had).
 */
/** The `status.podIP` computePodStatus gives for this observation (probes and hooks connect there). */
export function statusPodIP(pod: Pod, observed: ObservedPod, hostIP: string | undefined, previous: PodStatus | undefined): string | undefined {
  return podIPs(pod, latestSandbox(observed)?.ips, { hostIP, previous }).podIP;
}

function podIPs(pod: Pod, sandboxIPs: string[] | undefined, inp: Pick<StatusInputs, 'hostIP' | 'previous'>): Pick<PodStatus, 'podIP' | 'podIPs'> {
  if (pod.spec?.hostNetwork) return inp.hostIP ? { podIP: inp.hostIP, podIPs: [{ ip: inp.hostIP }] } : {};
  if (sandboxIPs?.length) return { podIP: sandboxIPs[0]!, podIPs: sandboxIPs.map((ip) => ({ ip })) };
  const prev = inp.previous;
  return prev?.podIP ? { podIP: prev.podIP, podIPs: prev.podIPs ?? [{ ip: prev.podIP }] } : {};
}

/** The kubelet's getPhase for app containers. */
function podPhase(pod: Pod, initialized: boolean, statuses: ContainerStatus[]): string {
  if (!initialized) return 'Pending';
  let waiting = 0, running = 0, stopped = 0, succeeded = 0;
  for (const s of statuses) {
    if (s.state?.running) running++;
    else if (s.state?.terminated) {
      stopped++;
      if (s.state.terminated.exitCode === 0) succeeded++;
    } else if (s.state?.waiting) {
      if (s.lastState?.terminated) {
        stopped++;
        if (s.lastState.terminated.exitCode === 0) succeeded++;
      } else waiting++;
    }
  }
  if (waiting > 0) return 'Pending';
  if (running > 0) return 'Running';
  if (stopped > 0) {
    const policy = restartPolicy(pod);
    if (policy === 'Always') return 'Running';
    if (stopped === succeeded) return 'Succeeded';
    if (policy === 'Never') return 'Failed';
    return 'Running';
  }
  return 'Pending';
}

/** BestEffort without any request or limit; Guaranteed when every container's limits equal requests for cpu and memory; else Burstable. */
export function qosClass(pod: Pod): string {
  const cs = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
  let any = false;
  let guaranteed = cs.length > 0;
  for (const c of cs) {
    const req = { ...(c.resources?.limits ?? {}), ...(c.resources?.requests ?? {}) };
    const lim = c.resources?.limits ?? {};
    if (Object.keys(req).length || Object.keys(lim).length) any = true;
    for (const r of ['cpu', 'memory']) {
      if (lim[r] === undefined || String(req[r]) !== String(lim[r])) guaranteed = false;
    }
  }
  if (!any) return 'BestEffort';
  return guaranteed ? 'Guaranteed' : 'Burstable';
}

/**
 * Whether `a` and `b` serialize to the same JSON, key order aside: undefined members and
 * functions count as absent, as JSON.stringify drops them (on either side, so two statuses
 * just computed compare as well as one against a copy parsed from JSON). Walks both without
 * building strings.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') {
    // JSON.stringify writes NaN and the infinities as null.
    if (typeof a === 'number' && !Number.isFinite(a)) return b === null || (typeof b === 'number' && !Number.isFinite(b));
    if (typeof b === 'number' && !Number.isFinite(b)) return a === null;
    return false;
  }
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJson(inArray(a[i]), inArray(b[i]))) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  if (typeof (a as { toJSON?: unknown }).toJSON === 'function') return sameJson(JSON.parse(JSON.stringify(a)), b);
  if (typeof (b as { toJSON?: unknown }).toJSON === 'function') return sameJson(a, JSON.parse(JSON.stringify(b)));
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  let n = 0;
  for (const k in ao) {
    if (!Object.prototype.hasOwnProperty.call(ao, k)) continue;
    const v = ao[k];
    if (absent(v)) continue;
    n++;
    if (!Object.prototype.hasOwnProperty.call(bo, k) || !sameJson(v, bo[k])) return false;
  }
  let m = 0;
  for (const k in bo) if (Object.prototype.hasOwnProperty.call(bo, k) && !absent(bo[k])) m++;
  return n === m;
}

/** What JSON.stringify leaves out of an object. */
const absent = (v: unknown): boolean => v === undefined || typeof v === 'function';
/** What JSON.stringify writes for an array element it cannot write. */
const inArray = (v: unknown): unknown => (absent(v) ? null : v);
