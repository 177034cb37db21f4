/**
 * Ephemeral containers on the node (issue 28): the plan starts each once in the ready sandbox
 * and never again, the status reports them as the kubelet does, the container config joins
 * the target's PID namespace, and the steps give the runtime the target's ID.
 */
import { describe, expect, it } from 'vitest';
import type { Container, ObjectReference, Pod } from 'kubernetes-types/core/v1.js';
import type { EventSink } from '../../../src/events.js';
import { silentLogger } from '../../../src/log.js';
import { computePodActions, containerHash, type Waiting } from '../../../src/pods/sync/plan.js';
import { killPod, startContainers, type StepContext } from '../../../src/pods/sync/sync-steps.js';
import { PodWorker } from '../../../src/pods/sync/worker.js';
import { ManualClock } from '../../helpers/clock.js';
import { MemRuntime } from '../../fakes/pod-runtime.js';
import type { ObservedContainer, ObservedPod } from '../../../src/pods/sync/observed.js';
import { computePodStatus } from '../../../src/pods/status/status.js';
import { containerConfig } from '../../../src/pods/cri/cri-config.js';
import { validatePodManifest } from '../../../src/pods/sources/pod-validation.js';

const app: Container = { name: 'app', image: 'docker.io/local/busybox:latest' };
const debug = (o: Record<string, unknown> = {}) => ({ name: 'debugger', image: 'docker.io/local/busybox:latest', stdin: true, tty: true, ...o });
const pod = (spec: Partial<NonNullable<Pod['spec']>> = {}): Pod => ({
  metadata: { name: 'web', namespace: 'default', uid: 'u1' },
  spec: { containers: [app], ...spec },
});
const withDebug = (o: Record<string, unknown> = {}, spec: Partial<NonNullable<Pod['spec']>> = {}) => pod({ ...spec, ephemeralContainers: [debug(o) as never] });
const observed = (o: Partial<ObservedPod> = {}): ObservedPod => ({ uid: 'u1', name: 'web', namespace: 'default', sandboxes: [], containers: [], ...o });
const sb = (id: string, ready = true, attempt = 0) => ({ id, attempt, ready, createdAt: 1000 });
const ctr = (o: Partial<ObservedContainer> & { id: string }): ObservedContainer => ({
  name: 'app', podSandboxId: 's1', attempt: 0, state: 'running', restartCount: 0, hash: containerHash(app), image: app.image!, imageRef: 'sha256:1', createdAt: 2000, ...o,
});
const T = 1_000_000;
const none = { killPod: false, start: [], kill: [], removeContainers: [], removeSandboxes: [], waiting: {} };

describe('computePodActions: ephemeral containers', () => {
  it.each([
    {
      name: 'added to a running pod: started once, alone, with no restart count',
      pod: withDebug(),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1' })] }),
      want: { start: [{ name: 'debugger', restartCount: 0, init: false, ephemeral: {} }] },
    },
    {
      name: 'with a target: the ID of the target\'s newest container goes with it',
      pod: withDebug({ targetContainerName: 'app' }),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'old', state: 'exited', exitCode: 1, createdAt: 1500 }), ctr({ id: 'c2', restartCount: 1 })] }),
      want: { start: [{ name: 'debugger', restartCount: 0, init: false, ephemeral: { target: { name: 'app', id: 'c2' } } }], removeContainers: [] },
    },
    {
      name: 'a target with no container yet: started without an ID (the step refuses it with the kubelet\'s error)',
      pod: withDebug({ targetContainerName: 'app' }),
      obs: observed({ sandboxes: [sb('s1')], containers: [] }),
      want: { start: [{ name: 'debugger', restartCount: 0, init: false, ephemeral: { target: { name: 'app' } } }, { name: 'app', restartCount: 0, init: false }] },
    },
    {
      name: 'running: left alone (not killed as "not in the pod spec")',
      pod: withDebug(),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1' }), ctr({ id: 'e1', name: 'debugger', hash: 'whatever' })] }),
      want: {},
    },
    {
      name: 'exited (even failed, restartPolicy Always): never restarted',
      pod: withDebug(),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1' }), ctr({ id: 'e1', name: 'debugger', state: 'exited', exitCode: 137, finishedAt: T - 3_600_000 })] }),
      want: {},
    },
    {
      name: 'created but never started: not retried either (the kubelet starts one only when none exists)',
      pod: withDebug(),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1' }), ctr({ id: 'e1', name: 'debugger', state: 'created' })] }),
      want: {},
    },
    {
      name: 'no ready sandbox: the sync that makes one starts no ephemeral container',
      pod: withDebug(),
      obs: observed({ sandboxes: [sb('s1', false)], containers: [ctr({ id: 'c1', state: 'exited', exitCode: 137 })] }),
      want: { killPod: true, createSandbox: { attempt: 1 }, start: [{ name: 'app', restartCount: 1, init: false }] },
    },
    {
      name: 'a new sandbox after one that ran it: its exited container (older sandbox) keeps it from starting again',
      pod: withDebug(),
      obs: observed({ sandboxes: [sb('s2', true, 1), { ...sb('s1', false), createdAt: 500 }], containers: [ctr({ id: 'c2', podSandboxId: 's2', restartCount: 1 }), ctr({ id: 'e1', name: 'debugger', state: 'exited', exitCode: 0 })] }),
      want: {},
    },
    {
      name: 'during initialization: started before the init container, which still starts',
      pod: withDebug({}, { initContainers: [{ name: 'init', image: 'x' }] }),
      obs: observed({ sandboxes: [sb('s1')], containers: [] }),
      want: { start: [{ name: 'debugger', restartCount: 0, init: false, ephemeral: {} }, { name: 'init', restartCount: 0, init: true }], waiting: { app: { reason: 'PodInitializing' } } },
    },
    {
      name: 'a Job-style pod whose app finished: a running ephemeral container is stopped with it, none is started',
      pod: pod({ restartPolicy: 'Never', ephemeralContainers: [debug() as never, debug({ name: 'late' }) as never] }),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1', state: 'exited', exitCode: 0 }), ctr({ id: 'e1', name: 'debugger' })] }),
      want: { kill: [{ id: 'e1', name: 'debugger', reason: "the pod's app containers have completed", event: 'Stopping container debugger' }] },
    },
    {
      name: 'a Never pod with a dead sandbox: everything still running is killed, nothing started',
      pod: withDebug({}, { restartPolicy: 'Never' }),
      obs: observed({ sandboxes: [sb('s1', false)], containers: [ctr({ id: 'c1', state: 'exited', exitCode: 0 }), ctr({ id: 'e1', name: 'debugger' })] }),
      want: { killPod: true },
    },
  ])('$name', ({ pod: p, obs, want }) => {
    expect(computePodActions(p, obs, T)).toEqual({ ...none, ...want });
  });

  it('several ephemeral containers: only the new one starts', () => {
    const p = pod({ ephemeralContainers: [debug() as never, debug({ name: 'debugger-2' }) as never] });
    const obs = observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1' }), ctr({ id: 'e1', name: 'debugger', state: 'exited', exitCode: 0 })] });
    expect(computePodActions(p, obs, T).start).toEqual([{ name: 'debugger-2', restartCount: 0, init: false, ephemeral: {} }]);
  });
});

describe('computePodStatus: ephemeralContainerStatuses', () => {
  const Tm = Date.parse('2026-11-27T10:00:00Z');
  const obs = (containers: ObservedContainer[]): ObservedPod => observed({ sandboxes: [{ id: 's1', attempt: 0, ready: true, createdAt: Tm }], containers });
  const at = (o: Partial<ObservedContainer> & { id: string }) => ctr({ createdAt: Tm, startedAt: Tm, ...o });
  const status = (p: Pod, o: ObservedPod, waiting = {}) => computePodStatus({ pod: p, observed: o, waiting, runtimeName: 'containerd', now: Tm });

  it('running: its state, never ready, no `started`; the pod\'s conditions and phase are the app\'s alone', () => {
    const s = status(withDebug(), obs([at({ id: 'c1' }), at({ id: 'e1', name: 'debugger', image: 'docker.io/local/busybox:latest' })]));
    expect(s.ephemeralContainerStatuses).toEqual([
      { name: 'debugger', state: { running: { startedAt: '2026-11-27T10:00:00Z' } }, lastState: {}, ready: false, restartCount: 0, image: 'docker.io/local/busybox:latest', imageID: 'sha256:1', containerID: 'containerd://e1' },
    ]);
    expect(s.phase).toBe('Running');
    expect(s.conditions!.find((c) => c.type === 'Ready')!.status).toBe('True');
  });

  it('waiting: ContainerCreating (PodInitializing in a pod with init containers), or the reason the start failed; terminated with its exit code', () => {
    expect(status(withDebug(), obs([at({ id: 'c1' })])).ephemeralContainerStatuses![0]!.state).toEqual({ waiting: { reason: 'ContainerCreating' } });
    const inits = withDebug({}, { initContainers: [{ name: 'init', image: 'x' }] });
    expect(status(inits, obs([])).ephemeralContainerStatuses![0]!.state).toEqual({ waiting: { reason: 'PodInitializing' } });
    const failed = status(withDebug(), obs([at({ id: 'c1' })]), { debugger: { reason: 'CreateContainerConfigError', message: 'unable to find target container app' } });
    expect(failed.ephemeralContainerStatuses![0]!.state).toEqual({ waiting: { reason: 'CreateContainerConfigError', message: 'unable to find target container app' } });
    const done = status(withDebug(), obs([at({ id: 'c1' }), at({ id: 'e1', name: 'debugger', state: 'exited', exitCode: 3, finishedAt: Tm + 2000 })]));
    expect(done.ephemeralContainerStatuses![0]!.state).toEqual({ terminated: { exitCode: 3, reason: 'Error', startedAt: '2026-11-27T10:00:00Z', finishedAt: '2026-11-27T10:00:02Z', containerID: 'containerd://e1' } });
    expect(done.phase).toBe('Running');
  });

  it('a long termination message is cut as the app containers\' (12 KiB over the app and init containers)', () => {
    const long = status(withDebug(), obs([at({ id: 'c1' }), at({ id: 'e1', name: 'debugger', state: 'exited', exitCode: 1, finishedAt: Tm, message: 'x'.repeat(20_000) })]));
    expect(long.ephemeralContainerStatuses![0]!.state!.terminated!.message).toBe('x'.repeat(12 * 1024));
  });

  it('a pod without ephemeral containers has no ephemeralContainerStatuses', () => {
    expect(status(pod(), obs([at({ id: 'c1' })]))).not.toHaveProperty('ephemeralContainerStatuses');
  });
});

describe('containerConfig: the target\'s PID namespace', () => {
  const opts = { restartCount: 0, seccomp: { profileType: 'RuntimeDefault' as const }, quantity: Number };
  const ns = (p: Pod, targetContainerId?: string) =>
    (containerConfig(p, debug() as Container, { ...opts, ...(targetContainerId ? { targetContainerId } : {}) }).linux as { securityContext: { namespaceOptions: unknown } }).securityContext.namespaceOptions;

  it.each([
    { name: 'with a target: pid TARGET and its ID', p: pod(), target: 'abc123', want: { network: 'POD', pid: 'TARGET', ipc: 'POD', targetId: 'abc123' } },
    { name: 'without: its own PID namespace', p: pod(), target: undefined, want: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' } },
    { name: 'shareProcessNamespace: the pod\'s, target or not', p: pod({ shareProcessNamespace: true }), target: 'abc123', want: { network: 'POD', pid: 'POD', ipc: 'POD' } },
    { name: 'hostPID: the node\'s, target or not', p: pod({ hostPID: true }), target: 'abc123', want: { network: 'POD', pid: 'NODE', ipc: 'POD' } },
  ])('$name', ({ p, target, want }) => {
    expect(ns(p, target)).toEqual(want);
  });
});

describe('static pods', () => {
  it('refuse ephemeral containers, naming the field', () => {
    const doc = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'web' }, spec: { containers: [app], ephemeralContainers: [debug()] } };
    expect(validatePodManifest(doc)).toContainEqual(expect.stringContaining('spec.ephemeralContainers: cannot be set on create'));
  });
});

describe('the sync steps', () => {
  const setup = (p: Pod) => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    rt.present.add('docker.io/local/busybox:latest');
    const events: string[] = [];
    const sink: EventSink = { emit: (ref: ObjectReference, type, reason, message) => void events.push(`${type} ${reason} ${ref.fieldPath ?? ref.name}: ${message}`) };
    const ctx: StepContext = { runtime: rt, events: sink, clock, log: silentLogger(), pullGate: (pull) => pull(), hookHost: '127.0.0.1', gracePeriodSeconds: 5 };
    return { clock, rt, events, ctx, w: new PodWorker(p) };
  };

  it('start the ephemeral container with its target\'s ID, events on spec.ephemeralContainers{...}', async () => {
    const { rt, ctx, w, clock, events } = setup(withDebug({ targetContainerName: 'app' }, { hostNetwork: true }));
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    await startContainers(ctx, w, [{ name: 'app', restartCount: 0, init: false }], sb, {}, clock.now());
    const appId = (await rt.observePod('u1')).containers[0]!.id;
    const plan = computePodActions(w.pod, await rt.observePod('u1'), clock.now());
    expect(plan.start).toEqual([{ name: 'debugger', restartCount: 0, init: false, ephemeral: { target: { name: 'app', id: appId } } }]);
    events.length = 0;
    await startContainers(ctx, w, plan.start, sb, {}, clock.now());
    expect(rt.startSpecs.map((s) => [s.container.name, s.targetContainerId])).toEqual([['app', undefined], ['debugger', appId]]);
    expect(events.map((e) => e.split(':')[0])).toEqual(['Normal Pulled spec.ephemeralContainers{debugger}', 'Normal Created spec.ephemeralContainers{debugger}', 'Normal Started spec.ephemeralContainers{debugger}']);
    // Running now: the next plan leaves it alone.
    expect(computePodActions(w.pod, await rt.observePod('u1'), clock.now()).start).toEqual([]);
  });

  it('a target with no container: the kubelet\'s CreateContainerConfigError, nothing created', async () => {
    const { rt, ctx, w, clock } = setup(withDebug({ targetContainerName: 'app' }, { hostNetwork: true }));
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    const waiting: Record<string, Waiting> = {};
    await startContainers(ctx, w, [{ name: 'debugger', restartCount: 0, init: false, ephemeral: { target: { name: 'app' } } }], sb, waiting, clock.now());
    expect(waiting).toEqual({ debugger: { reason: 'CreateContainerConfigError', message: 'unable to find target container app' } });
    expect(rt.startSpecs).toEqual([]);
  });

  it('killed with the pod', async () => {
    const { rt, ctx, w, clock, events } = setup(withDebug({}, { hostNetwork: true }));
    const sb = { id: await rt.runSandbox(w.pod, 0), attempt: 0 };
    await startContainers(ctx, w, [{ name: 'app', restartCount: 0, init: false }, { name: 'debugger', restartCount: 0, init: false, ephemeral: {} }], sb, {}, clock.now());
    events.length = 0;
    rt.calls = [];
    const ids = (await rt.observePod('u1')).containers.map((c) => c.id);
    expect(await killPod(ctx, w.pod, await rt.observePod('u1'), 5)).toEqual([]);
    expect(rt.calls.filter((c) => c.startsWith('stop')).sort()).toEqual([...ids.map((id) => `stopContainer ${id}`), `stopSandbox ${sb.id}`].sort());
    expect(events).toContain('Normal Killing spec.ephemeralContainers{debugger}: Stopping container debugger');
    expect((await rt.observePod('u1')).containers.every((c) => c.state === 'exited')).toBe(true);
  });
});
