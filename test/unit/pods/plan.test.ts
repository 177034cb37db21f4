import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { backoffMs, backoffPolicy, computePodActions, containerHash } from '../../../src/pods/sync/plan.js';
import type { ObservedContainer, ObservedPod } from '../../../src/pods/sync/observed.js';

const app = { name: 'app', image: 'docker.io/local/busybox:latest' };
const pod = (spec: Partial<NonNullable<Pod['spec']>> = {}): Pod => ({
  metadata: { name: 'web-node1', namespace: 'default', uid: 'u1' },
  spec: { containers: [app], ...spec },
});
const observed = (o: Partial<ObservedPod> = {}): ObservedPod => ({ uid: 'u1', name: 'web-node1', namespace: 'default', sandboxes: [], containers: [], ...o });
const sb = (id: string, ready = true, attempt = 0, createdAt = 1000) => ({ id, attempt, ready, createdAt });
const ctr = (o: Partial<ObservedContainer> & { id: string }): ObservedContainer => ({
  name: 'app', podSandboxId: 's1', attempt: 0, state: 'running', restartCount: 0, hash: containerHash(app), image: app.image, imageRef: 'sha256:1', createdAt: 2000, ...o,
});
const T = 1_000_000;

describe('computePodActions', () => {
  it.each([
    {
      name: 'a new pod gets a sandbox and its containers',
      pod: pod(),
      obs: observed(),
      want: { killPod: false, createSandbox: { attempt: 0 }, start: [{ name: 'app', restartCount: 0, init: false }] },
    },
    {
      name: 'a dead sandbox is replaced with the next attempt, restart counts continue',
      pod: pod(),
      obs: observed({ sandboxes: [sb('s1', false, 2)], containers: [ctr({ id: 'c1', state: 'exited', exitCode: 137, restartCount: 4 })] }),
      want: { killPod: true, createSandbox: { attempt: 3 }, start: [{ name: 'app', restartCount: 5, init: false }] },
    },
    {
      name: 'a running pod is left alone (adoption after restart)',
      pod: pod(),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1' })] }),
      want: {},
    },
    {
      name: 'restartPolicy Never: an exited container stays exited',
      pod: pod({ restartPolicy: 'Never' }),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1', state: 'exited', exitCode: 1 })] }),
      want: {},
    },
    {
      name: 'restartPolicy OnFailure: success is not restarted',
      pod: pod({ restartPolicy: 'OnFailure' }),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1', state: 'exited', exitCode: 0 })] }),
      want: {},
    },
    {
      name: 'restartPolicy OnFailure: a failure restarts at once the first time',
      pod: pod({ restartPolicy: 'OnFailure' }),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1', state: 'exited', exitCode: 2, finishedAt: T })] }),
      want: { start: [{ name: 'app', restartCount: 1, init: false }] },
    },
    {
      name: 'a second crash waits 10s: CrashLoopBackOff',
      pod: pod(),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c2', state: 'exited', exitCode: 1, restartCount: 1, startedAt: T - 100, finishedAt: T })] }),
      now: T + 5000,
      want: {
        waiting: { app: { reason: 'CrashLoopBackOff', message: 'back-off 10s restarting failed container=app pod=web-node1_default(u1)' } },
        resyncAt: T + 10_000,
      },
    },
    {
      name: 'after the backoff the container restarts with the next count',
      pod: pod(),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c2', state: 'exited', exitCode: 1, restartCount: 1, startedAt: T - 100, finishedAt: T })] }),
      now: T + 10_000,
      want: { start: [{ name: 'app', restartCount: 2, init: false }] },
    },
    {
      name: 'init containers run one at a time before app containers',
      pod: pod({ initContainers: [{ name: 'i1', image: 'x' }, { name: 'i2', image: 'x' }] }),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1', name: 'i1', state: 'exited', exitCode: 0 })] }),
      want: { start: [{ name: 'i2', restartCount: 0, init: true }], waiting: { app: { reason: 'PodInitializing' } } },
    },
    {
      name: 'a running init container holds the app containers back',
      pod: pod({ initContainers: [{ name: 'i1', image: 'x' }] }),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1', name: 'i1', state: 'running' })] }),
      want: { waiting: { app: { reason: 'PodInitializing' } } },
    },
    {
      name: 'a container not in the spec is stopped',
      pod: pod(),
      obs: observed({ sandboxes: [sb('s1')], containers: [ctr({ id: 'c1' }), ctr({ id: 'c9', name: 'old' })] }),
      want: { kill: [{ id: 'c9', name: 'old', reason: 'container is not in the pod spec' }] },
    },
    {
      name: 'older dead instances are removed, the newest dead one is kept',
      pod: pod(),
      obs: observed({
        sandboxes: [sb('s1')],
        containers: [ctr({ id: 'c3', restartCount: 2 }), ctr({ id: 'c2', state: 'exited', restartCount: 1 }), ctr({ id: 'c1', state: 'exited', restartCount: 0 })],
      }),
      want: { removeContainers: ['c1'] },
    },
  ])('$name', ({ pod: p, obs, now, want }) => {
    expect(computePodActions(p, obs, now ?? T)).toEqual({ killPod: false, start: [], kill: [], removeContainers: [], removeSandboxes: [], waiting: {}, ...want });
  });
});

describe('backoffMs', () => {
  it.each([
    [0, 0],
    [1, 10_000],
    [2, 20_000],
    [3, 40_000],
    [5, 160_000],
    [6, 300_000],
    [20, 300_000],
  ])('restart count %i waits %i ms', (restartCount, want) => {
    expect(backoffMs(ctr({ id: 'c', state: 'exited', restartCount, startedAt: 0, finishedAt: 1000 }))).toBe(want);
  });

  it('starts over at 10s after a run of 10 minutes', () => {
    expect(backoffMs(ctr({ id: 'c', state: 'exited', restartCount: 7, startedAt: 0, finishedAt: 600_000 }))).toBe(10_000);
  });

  // The kubelet's settings: crashLoopBackOff.maxContainerRestartPeriod caps the wait (and is the
  // first wait when under 10s); ReduceDefaultCrashLoopBackOffDecay is 1s doubling to 1m.
  it.each([
    ['default', {}, [0, 10_000, 20_000, 160_000, 300_000]],
    ['maxContainerRestartPeriod 1s', { maxContainerRestartPeriodMs: 1_000 }, [0, 1_000, 1_000, 1_000, 1_000]],
    ['maxContainerRestartPeriod 5s', { maxContainerRestartPeriodMs: 5_000 }, [0, 5_000, 5_000, 5_000, 5_000]],
    ['maxContainerRestartPeriod 30s', { maxContainerRestartPeriodMs: 30_000 }, [0, 10_000, 20_000, 30_000, 30_000]],
    ['reduced decay', { reducedDecay: true }, [0, 1_000, 2_000, 16_000, 60_000]],
    ['reduced decay, period 5m', { reducedDecay: true, maxContainerRestartPeriodMs: 300_000 }, [0, 1_000, 2_000, 16_000, 300_000]],
  ] as const)('%s: restart counts 0, 1, 2, 5, 20 wait %j ms', (_name, o, want) => {
    const policy = backoffPolicy(o);
    const got = [0, 1, 2, 5, 20].map((restartCount) => backoffMs(ctr({ id: 'c', state: 'exited', restartCount, startedAt: 0, finishedAt: 1000 }), policy));
    expect(got).toEqual(want);
  });

  it('a plan with a 1s period restarts a container of restart count 3 one second after its exit, not 40 s', () => {
    const exited = ctr({ id: 'c', state: 'exited', restartCount: 3, startedAt: 0, finishedAt: 1000 });
    expect(backoffMs(exited)).toBe(40_000);
    expect(backoffMs(exited, backoffPolicy({ maxContainerRestartPeriodMs: 1_000 }))).toBe(1_000);
  });
});
