/**
 * Native sidecars (init containers with `restartPolicy: Always`, GA in 1.33) as the kubelet
 * runs them: started in order with the init containers, the next one only once the sidecar
 * has started; kept running beside the app containers and restarted whatever the pod's
 * restartPolicy; counted in Initialized and Ready; stopped after the app containers, last
 * first; and, in a pod that does not restart its app containers, stopped once they are done.
 */
import { describe, expect, it } from 'vitest';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { silentLogger } from '../../../src/log.js';
import type { ObservedContainer, ObservedPod } from '../../../src/pods/sync/observed.js';
import { computePodActions, containerHash } from '../../../src/pods/sync/plan.js';
import type { PodRuntime } from '../../../src/pods/cri/runtime-port.js';
import { computePodStatus } from '../../../src/pods/status/status.js';
import { killPod, type StepContext } from '../../../src/pods/sync/sync-steps.js';
import { ManualClock } from '../../helpers/clock.js';

const T = 1_000_000;
const c = (name: string, o: Partial<Container> = {}): Container => ({ name, image: 'busybox', ...o });
const mesh = c('mesh', { restartPolicy: 'Always' });
const logs = c('logs', { restartPolicy: 'Always' });
const setup = c('setup');
const app = c('app');
const pod = (restartPolicy = 'Always'): Pod => ({
  metadata: { name: 'web', namespace: 'default', uid: 'u1' },
  spec: { restartPolicy, initContainers: [mesh, setup, logs], containers: [app] },
});
const spec = (name: string) => [mesh, setup, logs, app].find((x) => x.name === name)!;
const ctr = (name: string, o: Partial<ObservedContainer> = {}): ObservedContainer => ({
  id: `${name}-1`, name, podSandboxId: 's1', attempt: 0, state: 'running', restartCount: 0, hash: containerHash(spec(name)), image: 'busybox', imageRef: 'sha256:1', createdAt: 1000, startedAt: 1000, ...o,
});
const obs = (...containers: ObservedContainer[]): ObservedPod => ({ uid: 'u1', name: 'web', namespace: 'default', sandboxes: [{ id: 's1', attempt: 0, ready: true, createdAt: 1 }], containers });
const done = (name: string, exitCode = 0) => ctr(name, { state: 'exited', exitCode, finishedAt: 2000 });
const starts = (p: ReturnType<typeof computePodActions>) => p.start.map((s) => `${s.name}${s.init ? ' (init)' : ''}`);

describe('native sidecars: the plan', () => {
  it('start in order with the init containers: the next waits until the sidecar has started', () => {
    const notStarted = () => false;
    expect(starts(computePodActions(pod(), obs(), T))).toEqual(['mesh (init)']);
    // mesh runs, its startup probe has not passed yet: nothing else starts.
    const waiting = computePodActions(pod(), obs(ctr('mesh')), T, undefined, notStarted);
    expect(starts(waiting)).toEqual([]);
    expect(waiting.waiting).toEqual({ app: { reason: 'PodInitializing' } });
    // Started: the regular init container next, then the second sidecar, then the app.
    expect(starts(computePodActions(pod(), obs(ctr('mesh')), T))).toEqual(['setup (init)']);
    expect(starts(computePodActions(pod(), obs(ctr('mesh'), done('setup')), T))).toEqual(['logs (init)']);
    expect(starts(computePodActions(pod(), obs(ctr('mesh'), done('setup'), ctr('logs')), T))).toEqual(['app']);
  });

  it('restart after the crash-loop backoff whatever the pod restartPolicy, beside running apps, without holding them', () => {
    for (const policy of ['Always', 'OnFailure', 'Never']) {
      const crashed = obs(done('mesh', 1), done('setup'), ctr('logs'), ctr('app'));
      const plan = computePodActions(pod(policy), crashed, 2000 + 10, undefined);
      // First restart: no backoff (the kubelet's first one is immediate after 0 restarts).
      expect(starts(plan), policy).toEqual(['mesh (init)']);
      expect(plan.kill).toEqual([]);
      const again = computePodActions(pod(policy), obs(ctr('mesh', { state: 'exited', exitCode: 1, restartCount: 1, finishedAt: 2000 }), done('setup'), ctr('logs'), ctr('app')), 2000 + 10);
      expect(again.waiting.mesh?.reason, policy).toBe('CrashLoopBackOff');
      expect(again.waiting.app, policy).toBeUndefined();
    }
  });

  it("a pod that does not restart its apps is over when they are: its sidecars are stopped, last first, and not restarted", () => {
    const finished = obs(ctr('mesh'), done('setup'), ctr('logs'), done('app'));
    const plan = computePodActions(pod('Never'), finished, T);
    expect(plan.kill.map((k) => k.name)).toEqual(['logs', 'mesh']);
    expect(plan.start).toEqual([]);
    const after = computePodActions(pod('Never'), obs(done('mesh', 137), done('setup'), done('logs', 137), done('app')), T);
    expect(after).toMatchObject({ start: [], kill: [], waiting: {} });
    // With restartPolicy Always the app restarts and the sidecars keep running.
    expect(computePodActions(pod('Always'), finished, T).kill).toEqual([]);
  });
});

describe('native sidecars: the status', () => {
  const status = (o: ObservedPod, probes?: { ready(id: string): boolean; started(id: string): boolean }, policy = 'Always') =>
    computePodStatus({ pod: pod(policy), observed: o, waiting: {}, runtimeName: 'containerd', now: T, ...(probes ? { probes } : {}) });
  const cond = (s: ReturnType<typeof status>, type: string) => s.conditions!.find((x) => x.type === type)!.status;

  it('Initialized once the regular init containers succeeded and every sidecar started; Ready counts the sidecars', () => {
    const starting = status(obs(ctr('mesh'), done('setup'), ctr('logs')), { ready: () => false, started: (id) => id !== 'logs-1' });
    expect(cond(starting, 'Initialized')).toBe('False');
    expect(starting.phase).toBe('Pending');
    const running = obs(ctr('mesh'), done('setup'), ctr('logs'), ctr('app'));
    const up = status(running);
    expect(cond(up, 'Initialized')).toBe('True');
    expect(up.phase).toBe('Running');
    expect(cond(up, 'Ready')).toBe('True');
    expect(up.initContainerStatuses!.map((s) => [s.name, s.started, s.ready])).toEqual([
      ['mesh', true, true],
      ['setup', false, false],
      ['logs', true, true],
    ]);
    const meshNotReady = status(running, { ready: (id) => id !== 'mesh-1', started: () => true });
    expect(cond(meshNotReady, 'Ready')).toBe('False');
    expect(meshNotReady.conditions!.find((x) => x.type === 'Ready')!.message).toBe('containers with unready status: [mesh]');
  });

  it('a Job-style pod is Succeeded when its app exits 0, whatever its sidecars did', () => {
    expect(status(obs(done('mesh', 137), done('setup'), done('logs', 137), done('app')), undefined, 'Never').phase).toBe('Succeeded');
  });
});

describe('native sidecars: stopping the pod', () => {
  it('the app containers stop first, then the sidecars one by one, last started first, within the grace period', async () => {
    const clock = new ManualClock(T);
    const stops: string[] = [];
    const rt: Partial<PodRuntime> = {
      stopContainer: async (id, grace) => {
        stops.push(`${id} ${grace}`);
        clock.t += 3_000; // each stop takes 3 s
      },
      stopSandbox: async (id) => void stops.push(`sandbox ${id}`),
    };
    const ctx: StepContext = { runtime: rt as PodRuntime, events: { emit() {} }, clock, log: silentLogger(), pullGate: (p) => p(), hookHost: '127.0.0.1', gracePeriodSeconds: 30 };
    await killPod(ctx, pod(), obs(ctr('mesh'), done('setup'), ctr('logs'), ctr('app')), 30);
    expect(stops).toEqual(['app-1 30', 'logs-1 27', 'mesh-1 24', 'sandbox s1']);
  });
});
