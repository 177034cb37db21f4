import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { computePodStatus, qosClass } from '../../../src/pods/status/status.js';
import type { ObservedContainer, ObservedPod } from '../../../src/pods/sync/observed.js';

const T = Date.parse('2026-11-22T10:00:00Z');
const pod = (restartPolicy = 'Always', extra: Partial<NonNullable<Pod['spec']>> = {}): Pod => ({
  metadata: { name: 'web-node1', namespace: 'default', uid: 'u1' },
  spec: { restartPolicy, hostNetwork: true, containers: [{ name: 'app', image: 'img' }], ...extra },
});
const ctr = (o: Partial<ObservedContainer>): ObservedContainer => ({
  id: 'c1', name: 'app', podSandboxId: 's1', attempt: 0, state: 'running', restartCount: 0, hash: '', image: 'img', imageRef: 'sha256:abc', createdAt: T, startedAt: T, ...o,
});
const obs = (containers: ObservedContainer[], ready = true): ObservedPod => ({
  uid: 'u1', name: 'web-node1', namespace: 'default', sandboxes: [{ id: 's1', attempt: 0, ready, createdAt: T }], containers,
});
const status = (p: Pod, o: ObservedPod, waiting = {}) => computePodStatus({ pod: p, observed: o, waiting, runtimeName: 'containerd', hostIP: '10.0.0.5', now: T });

describe('computePodStatus', () => {
  it('a pod with its own network: podIP and podIPs from its sandbox, hostIP from the node; kept from the previous status once the sandbox is gone', () => {
    const own = pod('Always', { hostNetwork: false });
    const o = obs([ctr({})]);
    o.sandboxes[0]!.ips = ['10.244.7.5', 'fd00::5'];
    const s = status(own, o);
    expect(s).toMatchObject({ podIP: '10.244.7.5', podIPs: [{ ip: '10.244.7.5' }, { ip: 'fd00::5' }], hostIP: '10.0.0.5', hostIPs: [{ ip: '10.0.0.5' }] });
    const gone = computePodStatus({ pod: own, observed: { ...o, sandboxes: [] }, waiting: {}, runtimeName: 'containerd', hostIP: '10.0.0.5', previous: s, now: T });
    expect(gone).toMatchObject({ podIP: '10.244.7.5', podIPs: [{ ip: '10.244.7.5' }, { ip: 'fd00::5' }] });
    expect(status(own, obs([ctr({})])).podIP).toBeUndefined();
  });

  it('a running container: phase Running, Ready, running state with start time and IDs', () => {
    const s = status(pod(), obs([ctr({})]));
    expect(s.phase).toBe('Running');
    expect(s.podIP).toBe('10.0.0.5');
    expect(s.conditions!.find((c) => c.type === 'Ready')!.status).toBe('True');
    expect(s.containerStatuses).toEqual([
      { name: 'app', state: { running: { startedAt: '2026-11-22T10:00:00Z' } }, lastState: {}, ready: true, restartCount: 0, image: 'img', imageID: 'sha256:abc', containerID: 'containerd://c1', started: true },
    ]);
  });

  it('termination messages: an exited container\'s message in terminated (state and lastState), cut to the pod\'s 12 KiB split between its containers', () => {
    const two = pod('Never', { containers: [{ name: 'app', image: 'img' }, { name: 'side', image: 'img' }] });
    const s = status(two, obs([ctr({ state: 'exited', exitCode: 3, finishedAt: T, message: 'bye\n' }), ctr({ id: 'c2', name: 'side', state: 'exited', exitCode: 1, finishedAt: T, message: 'x'.repeat(7000) })]));
    expect(s.containerStatuses![0]!.state!.terminated).toMatchObject({ exitCode: 3, message: 'bye\n' });
    expect(s.containerStatuses![1]!.state!.terminated!.message).toBe('x'.repeat(6144));
    // A crash-looping container's last termination is cut too.
    const looping = status(two, obs([ctr({ state: 'exited', exitCode: 1, restartCount: 2, finishedAt: T, message: 'y'.repeat(9000) })]), { app: { reason: 'CrashLoopBackOff' } });
    expect(looping.containerStatuses![0]!.lastState!.terminated!.message).toBe('y'.repeat(6144));
  });

  it('crash loop: waiting CrashLoopBackOff with the last termination, phase Running under Always', () => {
    const s = status(pod(), obs([ctr({ state: 'exited', exitCode: 1, restartCount: 3, finishedAt: T + 1000 })]), {
      app: { reason: 'CrashLoopBackOff', message: 'back-off 40s restarting failed container=app pod=web-node1_default(u1)' },
    });
    expect(s.phase).toBe('Running');
    expect(s.containerStatuses![0]).toMatchObject({
      state: { waiting: { reason: 'CrashLoopBackOff' } },
      lastState: { terminated: { exitCode: 1, reason: 'Error', finishedAt: '2026-11-22T10:00:01Z', containerID: 'containerd://c1' } },
      restartCount: 3,
      ready: false,
    });
  });

  it.each([
    ['Never', 1, 'Failed'],
    ['Never', 0, 'Succeeded'],
    ['OnFailure', 0, 'Succeeded'],
    ['Always', 0, 'Running'],
  ])('restartPolicy %s, exit %i -> %s', (policy, exitCode, phase) => {
    const s = status(pod(policy), obs([ctr({ state: 'exited', exitCode, finishedAt: T })]));
    expect(s.phase).toBe(phase);
    expect(s.containerStatuses![0]!.state!.terminated!.reason).toBe(exitCode === 0 ? 'Completed' : 'Error');
  });

  it('no container yet: Pending with ContainerCreating, or the worker reason', () => {
    expect(status(pod(), obs([])).containerStatuses![0]!.state).toEqual({ waiting: { reason: 'ContainerCreating' } });
    const s = status(pod(), obs([]), { app: { reason: 'CreateContainerError', message: 'seccomp profile /x: not found' } });
    expect(s.phase).toBe('Pending');
    expect(s.containerStatuses![0]!.state).toEqual({ waiting: { reason: 'CreateContainerError', message: 'seccomp profile /x: not found' } });
  });

  it('init containers: app containers wait with PodInitializing until they succeed', () => {
    const p = pod('Always', { initContainers: [{ name: 'init', image: 'img' }] });
    const s = status(p, obs([ctr({ id: 'i1', name: 'init' })]));
    expect(s.phase).toBe('Pending');
    expect(s.conditions!.find((c) => c.type === 'Initialized')!.status).toBe('False');
    expect(s.containerStatuses![0]!.state).toEqual({ waiting: { reason: 'PodInitializing' } });
  });

  it('qosClass', () => {
    expect(qosClass(pod())).toBe('BestEffort');
    expect(qosClass(pod('Always', { containers: [{ name: 'a', resources: { limits: { cpu: '1', memory: '1Gi' } } }] }))).toBe('Guaranteed');
    expect(qosClass(pod('Always', { containers: [{ name: 'a', resources: { requests: { cpu: '1' } } }] }))).toBe('Burstable');
  });
});
