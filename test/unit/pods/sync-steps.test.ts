/**
 * Each step of a pod sync alone, on the in-memory runtime and a manual clock: what it asks
 * the runtime, which events it sends, what it records on the worker.
 */
import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../../src/errors.js';
import type { ObjectReference } from 'kubernetes-types/core/v1.js';
import type { EventSink } from '../../../src/events.js';
import { silentLogger } from '../../../src/log.js';
import type { ObservedPod } from '../../../src/pods/sync/observed.js';
import { computePodActions, type PodActions, type Waiting } from '../../../src/pods/sync/plan.js';
import {
  addProbeKills,
  collectGarbage,
  ensureSandbox,
  holdFinished,
  killContainers,
  killPod,
  removePod,
  reportBackOffs,
  startContainers,
  type StepContext,
} from '../../../src/pods/sync/sync-steps.js';
import { PodWorker, STEP_BACKOFF } from '../../../src/pods/sync/worker.js';
import { ManualClock } from '../../helpers/clock.js';
import { MemRuntime } from '../../fakes/pod-runtime.js';

const pod = (over: Partial<NonNullable<Pod['spec']>> = {}): Pod => ({
  metadata: { name: 'web', namespace: 'default', uid: 'u1' },
  spec: { restartPolicy: 'Always', terminationGracePeriodSeconds: 5, hostNetwork: true, containers: [{ name: 'app', image: 'busybox' }], ...over },
});

function setup(p = pod()) {
  const clock = new ManualClock();
  const rt = new MemRuntime(clock);
  const events: string[] = [];
  const sink: EventSink = { emit: (ref: ObjectReference, type, reason, message) => void events.push(`${type} ${reason} ${ref.fieldPath ?? ref.name}: ${message}`) };
  const ctx: StepContext = { runtime: rt, events: sink, clock, log: silentLogger(), pullGate: (pull) => pull(), hookHost: '127.0.0.1', gracePeriodSeconds: 5 };
  return { clock, rt, events, ctx, w: new PodWorker(p) };
}

const emptyPlan = (over: Partial<PodActions> = {}): PodActions => ({ killPod: false, start: [], kill: [], removeContainers: [], removeSandboxes: [], waiting: {}, ...over });

describe('ensureSandbox', () => {
  it.each([
    ['keeps the ready sandbox when the plan makes none', false, undefined, 0],
    ['runs a new sandbox with the plan attempt', true, undefined, 1],
  ])('%s', async (_name, create, _x, calls) => {
    const { rt, ctx, w, clock } = setup();
    const ready = await rt.runSandbox(w.pod, 0);
    rt.calls = [];
    const got = await ensureSandbox(ctx, w, emptyPlan(create ? { createSandbox: { attempt: 1 } } : {}), await rt.observePod('u1'), clock.now());
    expect(rt.calls).toHaveLength(calls);
    expect(got.id).toBe(create ? `s${2}` : ready);
    expect(got.attempt).toBe(create ? 1 : 0);
  });

  it('a refused sandbox backs off (1 s doubling): no new attempt before it ends, a quiet error meanwhile', async () => {
    const { rt, ctx, w, clock, events } = setup();
    rt.failSandbox = new NodeletError('UNKNOWN' as never, 'failed to get sandbox image');
    const plan = emptyPlan({ createSandbox: { attempt: 0 } });
    const obs = await rt.observePod('u1');
    await expect(ensureSandbox(ctx, w, plan, obs, clock.now())).rejects.toThrow('failed to get sandbox image');
    expect(w.sandboxBackoff).toMatchObject({ reason: 'CreatePodSandboxError', failures: 1, until: clock.now() + STEP_BACKOFF.initialMs });
    expect(events).toEqual(['Warning FailedCreatePodSandBox web: Failed to create pod sandbox: failed to get sandbox image']);
    clock.t += 500;
    await expect(ensureSandbox(ctx, w, plan, obs, clock.now())).rejects.toMatchObject({ details: { quiet: true } });
    expect(rt.calls.filter((c) => c.startsWith('runSandbox'))).toHaveLength(1);
    clock.t += 500;
    await expect(ensureSandbox(ctx, w, plan, obs, clock.now())).rejects.toThrow();
    expect(w.sandboxBackoff).toMatchObject({ failures: 2, until: clock.now() + 2 * STEP_BACKOFF.initialMs });
    rt.failSandbox = undefined;
    clock.t += 2000;
    await ensureSandbox(ctx, w, plan, obs, clock.now());
    expect(w.sandboxBackoff).toBeUndefined();
  });
});

describe('startContainers', () => {
  it('pulls, starts and reports each container (Pulled, Created, Started)', async () => {
    const { rt, ctx, w, clock, events } = setup(pod({ containers: [{ name: 'a', image: 'busybox' }, { name: 'b', image: 'busybox' }] }));
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    const waiting = {};
    await startContainers(ctx, w, [{ name: 'a', restartCount: 0, init: false }, { name: 'b', restartCount: 0, init: false }], sb, waiting, clock.now());
    expect(rt.calls.filter((c) => c.startsWith('startContainer'))).toEqual(['startContainer a 0', 'startContainer b 0']);
    expect(events.map((e) => e.split(':')[0])).toEqual([
      'Normal Pulled spec.containers{a}', 'Normal Created spec.containers{a}', 'Normal Started spec.containers{a}',
      'Normal Pulled spec.containers{b}', 'Normal Created spec.containers{b}', 'Normal Started spec.containers{b}',
    ]);
    expect(waiting).toEqual({});
  });

  it('an init container starts alone', async () => {
    const { rt, ctx, w, clock } = setup(pod({ initContainers: [{ name: 'i1', image: 'busybox' }, { name: 'i2', image: 'busybox' }] }));
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    await startContainers(ctx, w, [{ name: 'i1', restartCount: 0, init: true }, { name: 'i2', restartCount: 0, init: true }], sb, {}, clock.now());
    expect(rt.calls.filter((c) => c.startsWith('startContainer'))).toEqual(['startContainer i1 0']);
  });

  it('a failed start waits with its reason and backs off; the failure is one Failed event per attempt', async () => {
    const { rt, ctx, w, clock, events } = setup();
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    rt.failStart.set('app', new NodeletError('INVALID_ARGUMENT', 'volume "v": no such volume', { reason: 'CreateContainerConfigError' }));
    const starts = [{ name: 'app', restartCount: 0, init: false }];
    const waiting: Record<string, Waiting> = {};
    await startContainers(ctx, w, starts, sb, waiting, clock.now());
    expect(waiting).toEqual({ app: { reason: 'CreateContainerConfigError', message: 'volume "v": no such volume' } });
    expect(w.startBackoff.get('app')).toMatchObject({ failures: 1, until: clock.now() + 1000 });
    // Within the backoff: no attempt, the same reason shown.
    const again: Record<string, Waiting> = {};
    await startContainers(ctx, w, starts, sb, again, clock.now() + 999);
    expect(again).toEqual(waiting);
    expect(events.filter((e) => e.includes('Failed'))).toHaveLength(1);
    // After it: tried again, then started once the cause is gone, and the backoff forgotten.
    rt.failStart.delete('app');
    await startContainers(ctx, w, starts, sb, {}, clock.now() + 1000);
    expect(w.startBackoff.has('app')).toBe(false);
    expect(rt.calls.filter((c) => c.startsWith('startContainer'))).toEqual(['startContainer app 0']);
  });

  it('a failing postStart hook kills the container and waits with PostStartHookError', async () => {
    const { rt, ctx, w, clock, events } = setup(pod({ containers: [{ name: 'app', image: 'busybox', lifecycle: { postStart: { exec: { command: ['false'] } } } }] }));
    rt.execExit.set('app', 1);
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    const waiting: Record<string, { reason: string }> = {};
    await startContainers(ctx, w, [{ name: 'app', restartCount: 0, init: false }], sb, waiting, clock.now());
    expect(waiting.app!.reason).toBe('PostStartHookError');
    expect(rt.calls.some((c) => c.startsWith('stopContainer'))).toBe(true);
    expect(events.some((e) => e.startsWith('Warning FailedPostStartHook'))).toBe(true);
  });
});

describe('killContainers, killPod, removePod', () => {
  it('killContainers stops each with the grace period and a Killing event carrying its reason', async () => {
    const { rt, ctx, w, clock, events } = setup();
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    await startContainers(ctx, w, [{ name: 'app', restartCount: 0, init: false }], sb, {}, clock.now());
    const id = [...rt.containers.keys()][0]!;
    events.length = 0;
    await killContainers(ctx, w.pod, [{ id, name: 'app', reason: 'failed liveness probe', event: 'Container app failed liveness probe, will be restarted' }]);
    expect(rt.graces).toEqual([5]);
    expect(events).toEqual(['Normal Killing spec.containers{app}: Container app failed liveness probe, will be restarted']);
  });

  it('killPod tries every stop and returns the failures instead of throwing', async () => {
    const { rt, ctx, w, clock } = setup();
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    await startContainers(ctx, w, [{ name: 'app', restartCount: 0, init: false }], sb, {}, clock.now());
    rt.failStopSandbox = new NodeletError('UNAVAILABLE', 'busy');
    const failures = await killPod(ctx, w.pod, await rt.observePod('u1'), 5);
    expect(failures).toEqual([`stop sandbox ${sb.id}: busy`]);
    expect([...rt.containers.values()].every((c) => c.state === 'exited')).toBe(true);
  });

  it('removePod removes containers, sandboxes and the pod directories, or throws when a stop fails', async () => {
    const { rt, ctx, w, clock } = setup();
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    await startContainers(ctx, w, [{ name: 'app', restartCount: 0, init: false }], sb, {}, clock.now());
    rt.failStopSandbox = new NodeletError('UNAVAILABLE', 'busy');
    await expect(removePod(ctx, w.pod, 'u1', 5)).rejects.toThrow('busy');
    expect(rt.sandboxes.size).toBe(1);
    rt.failStopSandbox = undefined;
    await removePod(ctx, w.pod, 'u1', 5);
    expect([rt.sandboxes.size, rt.containers.size]).toEqual([0, 0]);
    expect(rt.calls.at(-1)).toBe('cleanupPod u1');
  });
});

describe('holdFinished', () => {
  const observed = (containers: ('running' | 'exited')[], sandboxReady: boolean): ObservedPod => ({
    uid: 'u1',
    name: 'web',
    namespace: 'default',
    sandboxes: [{ id: 's1', attempt: 0, ready: sandboxReady, createdAt: 0 }],
    containers: containers.map((state, i) => ({ id: `c${i}`, name: `c${i}`, podSandboxId: 's1', attempt: 0, state, restartCount: 0 }) as ObservedPod['containers'][number]),
  });
  const planFor = (p: Pod): PodActions => ({ ...computePodActions(p, observed([], false), 0), createSandbox: { attempt: 0, reason: 'no sandbox' } as PodActions['createSandbox'], start: [{ name: 'app', restartCount: 0, init: false }] });
  it.each([
    ['Running in the API: the plan stands', 'Running', ['running'], true, { held: false, killPod: undefined }],
    ['Succeeded, nothing running: nothing created, started or killed', 'Succeeded', ['exited'], false, { held: true, killPod: false }],
    ['Failed with a running container: nothing created or started, the pod stopped', 'Failed', ['running'], true, { held: true, killPod: true }],
    ['Failed with only a ready sandbox left: it is stopped', 'Failed', ['exited'], true, { held: true, killPod: true }],
  ] as const)('%s', (_what, phase, containers, ready, want) => {
    const p = { ...pod(), status: { phase } };
    const plan = planFor(p);
    const before = structuredClone(plan);
    holdFinished(plan, p, observed([...containers], ready));
    if (!want.held) expect(plan).toEqual(before);
    else expect({ createSandbox: plan.createSandbox, start: plan.start, killPod: plan.killPod }).toEqual({ createSandbox: undefined, start: [], killPod: want.killPod });
  });
});

describe('reportBackOffs, addProbeKills, collectGarbage', () => {
  it('one BackOff event per crash of a container in CrashLoopBackOff', async () => {
    const { rt, ctx, w, clock, events } = setup();
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    await startContainers(ctx, w, [{ name: 'app', restartCount: 1, init: false }], sb, {}, clock.now());
    rt.exit('app', 1);
    const obs = await rt.observePod('u1');
    const plan = computePodActions(w.pod, obs, clock.now());
    expect(plan.waiting.app?.reason).toBe('CrashLoopBackOff');
    events.length = 0;
    reportBackOffs(ctx, w, plan, obs);
    reportBackOffs(ctx, w, plan, obs);
    expect(events).toEqual(['Warning BackOff spec.containers{app}: Back-off restarting failed container app in pod web_default(u1)']);
  });

  it('a container its probes condemn joins the kills, once, unless the whole pod is killed', async () => {
    const { rt, ctx, w, clock } = setup();
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    await startContainers(ctx, w, [{ name: 'app', restartCount: 0, init: false }], sb, {}, clock.now());
    const obs = await rt.observePod('u1');
    const plan = emptyPlan();
    addProbeKills(plan, obs, () => 'Container app failed liveness probe, will be restarted');
    addProbeKills(plan, obs, () => 'Container app failed liveness probe, will be restarted');
    expect(plan.kill.map((k) => k.name)).toEqual(['app']);
    const whole = emptyPlan({ killPod: true });
    addProbeKills(whole, obs, () => 'x');
    expect(whole.kill).toEqual([]);
  });

  it('collectGarbage removes what the plan lists and never fails the sync', async () => {
    const { rt, ctx } = setup();
    await collectGarbage(ctx, emptyPlan({ removeContainers: ['c9'], removeSandboxes: ['s9'] }));
    expect(rt.calls).toEqual(['removeContainer c9', 'removeSandbox s9']);
  });
});

describe('PodWorker states', () => {
  it('moves only along declared transitions; each state shows its status', () => {
    const w = new PodWorker(pod());
    w.status = { phase: 'Running' };
    expect([w.state, w.terminating, w.shownStatus()?.phase]).toEqual(['syncing', false, 'Running']);
    w.moveTo('syncing', 'terminating');
    expect([w.state, w.terminating, w.shownStatus()?.phase]).toEqual(['terminating', true, 'Running']);
    // @ts-expect-error: terminating -> syncing is not a declared transition (and fails at run time too)
    expect(() => w.moveTo('terminating', 'syncing')).toThrow(/not a declared transition/);
    expect(() => w.moveTo('syncing', 'terminating')).toThrow(/cannot move to terminating from terminating/);
    w.moveTo('terminating', 'removed');
    expect(w.shownStatus()).toBeUndefined();
  });
});
