import net from 'node:net';
import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../../src/errors.js';
import type { EventSink } from '../../../src/events.js';
import { createLogger, silentLogger } from '../../../src/log.js';
import { observedKey, PodManager } from '../../../src/pods/sync/manager.js';
import type { ObservedContainer, ObservedPod } from '../../../src/pods/sync/observed.js';
import { ManualClock, VirtualClock } from '../../helpers/clock.js';
import { MemRuntime } from '../../fakes/pod-runtime.js';

const mkPod = (uid: string, restartPolicy = 'Always'): Pod => ({
  metadata: { name: `web-${uid}`, namespace: 'default', uid },
  spec: { restartPolicy, terminationGracePeriodSeconds: 5, hostNetwork: true, containers: [{ name: 'app', image: 'busybox' }] },
});

function setup() {
  const clock = new ManualClock();
  const rt = new MemRuntime(clock);
  const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, hostIP: '10.0.0.9' });
  return { clock, rt, m };
}

/** A manager whose sources are ready, recording its events as `line` writes them (default `<type> <reason>: <message>`). */
function withEvents(line: (...e: Parameters<EventSink['emit']>) => string = (_ref, type, reason, message) => `${type} ${reason}: ${message}`) {
  const clock = new ManualClock();
  const rt = new MemRuntime(clock);
  const events: string[] = [];
  const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, events: { emit: (...e) => void events.push(line(...e)) } });
  m.setSourcesReady();
  return { clock, rt, events, m };
}

describe('PodManager loop', () => {
  // With live runtime events the relist waits for its syncs (at most relistMs) before it decides its next wait.
  it.each([false, true])('a long image pull holds back neither other pods nor the relist; pulls themselves are serialized (runtime events live: %s)', async (live) => {
    const clock = new VirtualClock();
    const rt = new MemRuntime(clock);
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, relistMs: 5, serializeImagePulls: true, runtimeEvents: { live } });
    // The loop runs on virtual time: each step is one relist.
    const until = (cond: () => boolean) => clock.advanceUntil(cond, { stepMs: 5, maxMs: 2000 });
    m.setSourcesReady();
    const withImage = (uid: string, image: string): Pod => ({ ...mkPod(uid), spec: { ...mkPod(uid).spec!, containers: [{ name: 'app', image }] } });
    m.start();
    try {
      m.setDesired([withImage('a', 'big:1')]);
      await until(() => rt.pulls.length === 1);
      m.setDesired([withImage('a', 'big:1'), withImage('b', 'busybox'), withImage('c', 'big:2')]);
      await until(() => m.getPod('default', 'web-b')?.status?.phase === 'Running');
      expect(m.healthCheck().check()).toBeUndefined();
      // c's pull waits behind a's: one pull at a time.
      expect(rt.pulls.map((p) => p.image)).toEqual(['big:1']);
      expect(m.getPod('default', 'web-a')!.status!.phase).toBe('Pending');
      rt.pulls[0]!.release();
      await until(() => rt.pulls.length === 2);
      expect(rt.pulls[1]!.image).toBe('big:2');
      rt.pulls[1]!.release();
      await until(() => m.listPods().every((p) => p.status?.phase === 'Running'));
    } finally {
      for (const p of rt.pulls) p.release();
      await m.stop();
    }
  });
});

describe('PodManager', () => {
  it('runs a desired pod and reports it Running', async () => {
    const { rt, m } = setup();
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    expect(rt.calls).toEqual(['runSandbox web-u1 0', 'startContainer app 0']);
    const [p] = m.listPods();
    expect(p!.status!.phase).toBe('Running');
    expect(p!.status!.containerStatuses![0]!.containerID).toMatch(/^containerd:\/\/c\d+$/);
  });

  it('adopts what the runtime already runs: a new manager starts nothing', async () => {
    const { rt, clock, m } = setup();
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    const before = [...rt.containers.keys()];
    rt.calls = [];
    const m2 = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    m2.setDesired([mkPod('u1')]);
    expect(rt.adoptedPods).toEqual([]); // a pod it started itself is not adopted
    await m2.syncOnce();
    expect(rt.calls).toEqual([]);
    expect([...rt.containers.keys()]).toEqual(before);
    expect(m2.listPods()[0]!.status!.phase).toBe('Running');
    // Adopted once, at the worker's first sync: the runtime refills the node's records then.
    clock.t += 60_000;
    await m2.syncOnce();
    expect(rt.adoptedPods).toEqual(['u1']);
  });

  it('a crashing container restarts at once, then backs off with CrashLoopBackOff', async () => {
    const { rt, clock, m } = setup();
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    rt.exit('app', 1);
    clock.t += 1000;
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.containerStatuses![0]).toMatchObject({ restartCount: 1, state: { running: {} } });
    rt.exit('app', 1);
    clock.t += 1000;
    await m.syncOnce();
    const st = m.listPods()[0]!.status!.containerStatuses![0]!;
    expect(st.state!.waiting!.reason).toBe('CrashLoopBackOff');
    expect(st.restartCount).toBe(1);
    clock.t += 10_000;
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.containerStatuses![0]).toMatchObject({ restartCount: 2, state: { running: {} } });
  });

  it('a removed pod is stopped with its grace period and removed with its sandbox, then its volumes', async () => {
    const { rt, m } = setup();
    m.setDesired([mkPod('u1'), mkPod('u2')]);
    await m.syncOnce();
    rt.calls = [];
    m.setDesired([mkPod('u2')]);
    await m.syncOnce();
    expect(rt.calls.filter((c) => !c.startsWith('startContainer'))).toEqual([
      expect.stringMatching(/^stopContainer c\d+$/),
      expect.stringMatching(/^stopSandbox s\d+$/),
      expect.stringMatching(/^removeContainer c\d+$/),
      expect.stringMatching(/^removeSandbox s\d+$/),
      'cleanupPod u1',
    ]);
    expect(m.listPods().map((p) => p.metadata!.uid)).toEqual(['u2']);
    expect((await rt.listPods()).map((p) => p.uid)).toEqual(['u2']);
  });

  it('a pod removed while its worker is busy (a long pull) is still stopped and removed once the worker is free', async () => {
    const { rt, clock, m } = setup();
    m.setSourcesReady();
    const pod: Pod = { ...mkPod('u1'), spec: { ...mkPod('u1').spec!, containers: [{ name: 'app', image: 'big:1' }] } };
    m.setDesired([pod]);
    await clock.advanceUntil(() => rt.pulls.length === 1);
    expect(rt.sandboxes.size).toBe(1);
    m.setDesired([]);
    const removal = m.syncOnce();
    rt.pulls[0]!.release();
    await removal;
    await m.syncOnce();
    expect(await rt.listPods()).toEqual([]);
    expect(rt.containers.size).toBe(0);
    expect(m.listPods()).toEqual([]);
  });

  it('a pod deleted in the control plane (deletionTimestamp) is stopped with the deletion grace period, removed, and never started again', async () => {
    const { rt, m } = setup();
    m.setSourcesReady();
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    expect(m.active('u1')).toBe(true);
    expect(m.podStatus('u1')!.phase).toBe('Running');
    const deleting: Pod = { ...mkPod('u1'), metadata: { ...mkPod('u1').metadata, deletionTimestamp: '2026-11-23T00:00:00Z', deletionGracePeriodSeconds: 2 } };
    rt.calls = [];
    m.setDesired([deleting]);
    await m.syncOnce();
    expect(rt.graces).toEqual([2]);
    expect(await rt.listPods()).toEqual([]);
    expect(m.active('u1')).toBe(false);
    // Still desired (the control plane has not removed it yet): not started again.
    await m.syncOnce();
    await m.syncOnce();
    expect(rt.calls.filter((c) => c.startsWith('runSandbox') || c.startsWith('startContainer'))).toEqual([]);
    expect(m.listPods().map((p) => p.metadata!.uid)).toEqual(['u1']);
  });

  it('a pod first seen already being deleted is never started', async () => {
    const { rt, m } = setup();
    m.setSourcesReady();
    m.setDesired([{ ...mkPod('u1'), metadata: { ...mkPod('u1').metadata, deletionTimestamp: '2026-11-23T00:00:00Z' } }]);
    await m.syncOnce();
    await m.syncOnce();
    expect(rt.calls).toEqual([]);
    expect(m.active('u1')).toBe(false);
  });

  it('emits the kubelet\'s pod events: Pulled, Created, Started; BackOff once per crash; Killing; Failed', async () => {
    const { clock, rt, events, m } = withEvents((ref, type, reason, message) => `${type} ${reason} ${ref.name} ${ref.fieldPath ?? '-'}: ${message}`);
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    expect(events).toEqual([
      'Normal Pulled web-u1 spec.containers{app}: Container image "busybox" already present on machine',
      'Normal Created web-u1 spec.containers{app}: Created container: app',
      'Normal Started web-u1 spec.containers{app}: Started container app',
    ]);
    events.length = 0;
    rt.exit('app', 1);
    clock.t += 1000;
    await m.syncOnce(); // restarted at once
    rt.exit('app', 1);
    clock.t += 1000;
    await m.syncOnce(); // back-off
    await m.syncOnce(); // still in back-off: no second event for the same crash
    expect(events.filter((e) => e.includes('BackOff'))).toEqual(['Warning BackOff web-u1 spec.containers{app}: Back-off restarting failed container app in pod web-u1_default(u1)']);
    clock.t += 10_000;
    await m.syncOnce();
    events.length = 0;
    m.setDesired([]);
    await m.syncOnce();
    expect(events).toEqual(['Normal Killing web-u1 spec.containers{app}: Stopping container app']);

    events.length = 0;
    rt.failStart.set('app', new NodeletError('INTERNAL', 'no such file', { reason: 'CreateContainerError' }));
    m.setDesired([mkPod('u2')]);
    await m.syncOnce();
    expect(events.at(-1)).toBe('Warning Failed web-u2 spec.containers{app}: Error: CreateContainerError: no such file');
  });

  it("tcpSocket probes and postStart hooks of a pod with its own network reach its sandbox's IP from the first sync, never the node's", async () => {
    // The pod's IP: a listener on 127.0.0.2; the node's IP (127.0.0.1) has nothing on that port.
    const server = net.createServer((s) => s.end());
    await new Promise<void>((r) => server.listen(0, '127.0.0.2', r));
    const port = (server.address() as net.AddressInfo).port;
    try {
      const clock = new ManualClock();
      const rt = new MemRuntime(clock);
      rt.podIP = '127.0.0.2';
      const events: string[] = [];
      const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, hostIP: '127.0.0.1', events: { emit: (_r, type, reason, message) => void events.push(`${type} ${reason}: ${message}`) } });
      m.setSourcesReady();
      const pod: Pod = {
        ...mkPod('u1'),
        spec: {
          ...mkPod('u1').spec!,
          hostNetwork: false,
          containers: [{ name: 'app', image: 'busybox', lifecycle: { postStart: { tcpSocket: { port } } }, livenessProbe: { tcpSocket: { port }, periodSeconds: 1, failureThreshold: 1 } }],
        },
      };
      m.setDesired([pod]);
      await m.syncOnce();
      for (let i = 0; i < 3; i++) {
        clock.t += 1000;
        await m.probes.tick();
      }
      await m.syncOnce();
      expect(events.filter((e) => e.startsWith('Warning'))).toEqual([]);
      expect(m.listPods()[0]!.status).toMatchObject({ podIP: '127.0.0.2', containerStatuses: [{ restartCount: 0, state: { running: {} } }] });
    } finally {
      server.close();
    }
  });

  it('activeDeadlineSeconds: at the deadline the pod is stopped and Failed/DeadlineExceeded for good; an update of it counts', async () => {
    const { clock, rt, events, m } = withEvents();
    const pod: Pod = { ...mkPod('u1'), spec: { ...mkPod('u1').spec!, activeDeadlineSeconds: 5 } };
    m.setDesired([pod]);
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.phase).toBe('Running');
    // Raised to 8 s before it ran out: 5 s is not the end any more.
    m.setDesired([{ ...pod, spec: { ...pod.spec!, activeDeadlineSeconds: 8 } }]);
    clock.t += 5_000;
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.phase).toBe('Running');
    clock.t += 3_000;
    await m.syncOnce();
    expect(m.listPods()[0]!.status).toMatchObject({ phase: 'Failed', reason: 'DeadlineExceeded', message: 'Pod was active on the node longer than the specified deadline' });
    expect(events).toContain('Normal DeadlineExceeded: Pod was active on the node longer than the specified deadline');
    expect([...rt.containers.values()].filter((c) => c.state === 'running')).toEqual([]);
    // Nothing starts again, whatever the restartPolicy (Always here).
    for (let i = 0; i < 3; i++) {
      clock.t += 20_000;
      await m.syncOnce();
    }
    expect(rt.calls.filter((c) => c.startsWith('startContainer'))).toHaveLength(1);
    expect(m.listPods()[0]!.status!.phase).toBe('Failed');
  });

  it('probes: a failing readiness probe keeps the pod not Ready; a failing liveness probe kills the container and restartPolicy restarts it', async () => {
    const { clock, rt, events, m } = withEvents();
    const pod: Pod = {
      ...mkPod('u1'),
      spec: {
        ...mkPod('u1').spec!,
        containers: [{ name: 'app', image: 'busybox', readinessProbe: { exec: { command: ['ready'] }, periodSeconds: 1 }, livenessProbe: { exec: { command: ['alive'] }, periodSeconds: 1, failureThreshold: 2 } }],
      },
    };
    m.setDesired([pod]);
    await m.syncOnce();
    const appStatus = () => m.listPods()[0]!.status!;
    expect(appStatus().containerStatuses![0]).toMatchObject({ ready: false, started: true, state: { running: {} } });
    expect(appStatus().conditions!.find((c) => c.type === 'Ready')!.status).toBe('False');
    await m.probes.tick();
    await m.syncOnce();
    expect(appStatus().containerStatuses![0]!.ready).toBe(true);
    expect(appStatus().conditions!.find((c) => c.type === 'Ready')!.status).toBe('True');

    // Liveness fails twice: the container is killed, then started again (restartCount 1).
    rt.execExit.set('app', 1);
    clock.t += 1000;
    await m.probes.tick();
    clock.t += 1000;
    await m.probes.tick();
    await m.syncOnce();
    expect(events).toContain('Normal Killing: Container app failed liveness probe, will be restarted');
    // Both probes run the same failing command (the test runtime answers per container).
    expect(events.filter((e) => e.startsWith('Warning Unhealthy')).sort()).toEqual([
      'Warning Unhealthy: Liveness probe failed: command ["alive"] exited with 1',
      'Warning Unhealthy: Liveness probe failed: command ["alive"] exited with 1',
      'Warning Unhealthy: Readiness probe failed: command ["ready"] exited with 1',
      'Warning Unhealthy: Readiness probe failed: command ["ready"] exited with 1',
    ]);
    clock.t += 1000;
    await m.syncOnce();
    expect(appStatus().containerStatuses![0]).toMatchObject({ restartCount: 1, state: { running: {} }, lastState: { terminated: { exitCode: 137 } } });
    // The new container is probed afresh: not ready until its readiness probe succeeds.
    expect(appStatus().containerStatuses![0]!.ready).toBe(false);
  });

  it('lifecycle hooks: preStop runs before the stop and its time comes off the grace period; a failing postStart kills the container', async () => {
    const { rt, events, m } = withEvents();
    const withHooks = (uid: string, lifecycle: NonNullable<Pod['spec']>['containers'][number]['lifecycle']): Pod => ({
      ...mkPod(uid),
      spec: { ...mkPod(uid).spec!, terminationGracePeriodSeconds: 30, containers: [{ name: 'app', image: 'busybox', lifecycle }] },
    });
    m.setDesired([withHooks('u1', { preStop: { exec: { command: ['drain'] } }, postStart: { exec: { command: ['warm'] } } })]);
    await m.syncOnce();
    expect(rt.calls.filter((c) => c.startsWith('exec') || c.startsWith('startContainer'))).toEqual(['startContainer app 0', 'exec app warm']);
    rt.calls = [];
    m.setDesired([]);
    await m.syncOnce();
    expect(rt.calls.slice(0, 2)).toEqual(['exec app drain', expect.stringMatching(/^stopContainer c\d+$/)]);
    expect(rt.graces).toEqual([30]); // the hook took no (manual) time

    // postStart fails: FailedPostStartHook, the container is stopped, the reason is PostStartHookError.
    rt.execExit.set('app', 1);
    rt.graces = [];
    m.setDesired([withHooks('u2', { postStart: { exec: { command: ['warm'] } } })]);
    await m.syncOnce();
    expect(events).toContain('Warning FailedPostStartHook: command ["warm"] exited with 1');
    expect(rt.graces).toEqual([30]);
    expect(m.listPods()[0]!.status!.containerStatuses![0]!.state!.waiting).toMatchObject({ reason: 'PostStartHookError', message: 'PostStartHook failed: command ["warm"] exited with 1' });
  });

  it('removes runtime pods that no source wants (after a restart), once the sources are ready', async () => {
    const { rt, clock, m } = setup();
    m.setDesired([mkPod('u1'), mkPod('u2')]);
    await m.syncOnce();
    const m2 = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    // Before the sources delivered their first set, nothing is removed: u1 may be about to be asked for.
    await m2.syncOnce();
    expect((await rt.listPods()).map((p) => p.uid).sort()).toEqual(['u1', 'u2']);
    m2.setDesired([mkPod('u1')]);
    m2.setSourcesReady();
    await m2.syncOnce();
    expect((await rt.listPods()).map((p) => p.uid)).toEqual(['u1']);
    expect(rt.calls.filter((c) => c.startsWith('runSandbox')).length).toBe(2);
  });

  it('a pod removed and wanted again with the same UID is run again', async () => {
    const { rt, m } = setup();
    m.setSourcesReady();
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    m.setDesired([]);
    await m.syncOnce();
    expect(await rt.listPods()).toEqual([]);
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.phase).toBe('Running');
  });

  it('a sandbox the runtime refuses is retried after a backoff, not on every relist', async () => {
    const { rt, clock, m } = setup();
    rt.failSandbox = new NodeletError('INTERNAL', 'failed to setup network for sandbox: cni plugin not initialized');
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    await m.syncOnce();
    await m.syncOnce();
    expect(rt.calls.filter((c) => c.startsWith('runSandbox'))).toHaveLength(1);
    expect(m.listPods()[0]!.status).toMatchObject({ phase: 'Pending', reason: 'SyncError', message: expect.stringContaining('cni plugin not initialized') });
    clock.t += 1_000;
    await m.syncOnce();
    expect(rt.calls.filter((c) => c.startsWith('runSandbox'))).toHaveLength(2);
    clock.t += 1_000; // the second failure backs off 2 s
    await m.syncOnce();
    expect(rt.calls.filter((c) => c.startsWith('runSandbox'))).toHaveLength(2);
    rt.failSandbox = undefined;
    clock.t += 1_000;
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.phase).toBe('Running');
  });

  it('a start error becomes the waiting reason, retried after a backoff', async () => {
    const { rt, clock, m } = setup();
    rt.failStart.set('app', new NodeletError('INVALID_ARGUMENT', 'seccomp profile /r/seccomp/x.json: no such file', { reason: 'CreateContainerError' }));
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.containerStatuses![0]!.state).toEqual({
      waiting: { reason: 'CreateContainerError', message: 'seccomp profile /r/seccomp/x.json: no such file' },
    });
    rt.failStart.clear();
    await m.syncOnce();
    expect(rt.calls.filter((c) => c.startsWith('startContainer'))).toEqual([]);
    clock.t += 1000;
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.phase).toBe('Running');
  });
});

describe('PodManager: a burst of desired-set changes', () => {
  it('lists the runtime one relist at a time, not once per change, and ends on the last set', async () => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    let lists = 0;
    let inFlight = 0;
    let maxInFlight = 0;
    const list = rt.listPods.bind(rt);
    rt.listPods = async () => {
      lists++;
      maxInFlight = Math.max(maxInFlight, ++inFlight);
      try {
        // An answer that takes a few turns of the event loop, as a CRI call does.
        for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
        return await list();
      } finally {
        inFlight--;
      }
    };
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    m.setSourcesReady();
    const version = (n: number): Pod => ({ ...mkPod('u1'), metadata: { ...mkPod('u1').metadata, annotations: { n: String(n) } } });
    // 1,000 watch events' worth of changes, as fast as they come.
    for (let n = 0; n < 1000; n++) m.setDesired([version(n)]);
    // Until the kicked relists and their syncs have settled (macrotasks, no timers).
    for (let idle = 0, seen = -1; idle < 20; idle++) {
      await new Promise((r) => setImmediate(r));
      if (lists !== seen) [seen, idle] = [lists, 0];
    }
    // setSourcesReady's relist, then one more for all the changes made while it ran.
    expect(lists).toBeLessThanOrEqual(3);
    expect(maxInFlight).toBe(1);
    const [p] = m.listPods();
    expect(p!.metadata!.annotations!.n).toBe('999');
    expect(p!.status!.phase).toBe('Running');
    expect(rt.calls).toEqual(['runSandbox web-u1 0', 'startContainer app 0']);
  });
});

describe('PodManager: a new pod\'s first sync (what it asks the runtime before its sandbox)', () => {
  /** A runtime whose looks (listPods, observePod) are recorded in `calls` with the other calls, in order. */
  function lookingRuntime(clock: ManualClock) {
    const rt = new MemRuntime(clock);
    const list = rt.listPods.bind(rt);
    const observe = rt.observePod.bind(rt);
    let hide: string | undefined;
    rt.listPods = async () => {
      rt.calls.push('listPods');
      return (await list()).filter((p) => p.uid !== hide);
    };
    rt.observePod = async (uid) => {
      rt.calls.push(`observePod ${uid}`);
      return observe(uid);
    };
    return { rt, hideFromListing: (uid: string | undefined) => void (hide = uid) };
  }
  /** Until the work set going has settled (macrotasks only, no timers). */
  const settle = async () => {
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
  };

  it('once the runtime was listed, a pod it did not hold starts at once: no listing and no look before its sandbox', async () => {
    const clock = new ManualClock();
    const { rt } = lookingRuntime(clock);
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    m.setSourcesReady();
    await m.syncOnce();
    rt.calls = [];
    const u1 = mkPod('u1');
    m.setDesired([u1]);
    await settle();
    // The look after is the sync's own status (what it started), as before.
    expect(rt.calls).toEqual(['runSandbox web-u1 0', 'startContainer app 0', 'observePod u1']);
    expect(m.listPods()[0]!.status!.phase).toBe('Running');
    // A pod added beside one that runs (the same object: unchanged) starts the same way.
    rt.calls = [];
    m.setDesired([u1, mkPod('u2')]);
    await settle();
    expect(rt.calls).toEqual(['runSandbox web-u2 0', 'startContainer app 0', 'observePod u2']);
  });

  it('before any listing (a restart), a new pod waits for the relist\'s listing, and is synced on it without a second look', async () => {
    const clock = new ManualClock();
    const { rt } = lookingRuntime(clock);
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    m.setDesired([mkPod('u1')]);
    await settle();
    expect(rt.calls).toEqual(['listPods', 'runSandbox web-u1 0', 'startContainer app 0', 'observePod u1']);
  });

  it('a pod the last listing found is adopted after a restart, not started again', async () => {
    const { clock, rt, m: first } = setup();
    first.setDesired([mkPod('u1')]);
    await first.syncOnce();
    rt.calls = [];
    // The restarted agent lists before its sources speak (no sourcesReady: nothing is removed).
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    await m.syncOnce();
    m.setDesired([mkPod('u1')]);
    await settle();
    await m.syncOnce();
    expect(rt.calls).toEqual([]);
    expect(m.listPods()[0]!.status!.phase).toBe('Running');
  });

  it("a new sandbox's first container has its image checked while the runtime makes the sandbox; a pull still waits for the sandbox", async () => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    const ensure = rt.ensureImage.bind(rt);
    const run = rt.runSandbox.bind(rt);
    rt.ensureImage = async (pod, c, gate) => {
      rt.calls.push(`ensureImage ${c.image}`);
      return ensure(pod, c, gate);
    };
    rt.runSandbox = async (pod, attempt, sent) => {
      const id = await run(pod, attempt, sent);
      rt.calls.push(`sandbox of ${pod.metadata!.name} made`);
      return id;
    };
    // With metrics, as the daemon runs it (the counting runtime in between).
    const metrics = { relisted: () => {}, podWorkerDuration: () => {}, podStartDuration: () => {}, podStarted: () => {}, containerStarted: () => {} };
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, metrics });
    m.setSourcesReady();
    await m.syncOnce();
    m.setDesired([mkPod('u1')]);
    await settle();
    // Present: asked once, once the runtime was asked for the sandbox (before it is there); the start uses the answer.
    expect(rt.calls).toEqual(['runSandbox web-u1 0', 'ensureImage busybox', 'sandbox of web-u1 made', 'startContainer app 0']);
    rt.calls = [];
    const big: Pod = { ...mkPod('u2'), spec: { ...mkPod('u2').spec!, containers: [{ name: 'app', image: 'big:1', imagePullPolicy: 'IfNotPresent' }] } };
    m.setDesired([...m.listPods().map(({ status: _s, ...p }) => p).filter((p) => p.metadata!.uid === 'u1'), big]);
    await settle();
    // Absent: the early check does not pull; the start pulls once the sandbox is made.
    expect(rt.calls).toEqual(['runSandbox web-u2 0', 'ensureImage big:1', 'sandbox of web-u2 made', 'ensureImage big:1']);
    expect(rt.pulls.map((p) => p.image)).toEqual(['big:1']);
    rt.pulls[0]!.release();
    await settle();
    expect(m.getPod('default', 'web-u2')!.status!.phase).toBe('Running');
  });

  it('a pod wanted again after its removal failed is synced on a fresh listing (it is still in the runtime), even when the last listing missed it', async () => {
    const clock = new ManualClock();
    const { rt, hideFromListing } = lookingRuntime(clock);
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    m.setSourcesReady();
    await m.syncOnce();
    m.setDesired([mkPod('u1')]);
    await settle();
    // Its removal fails, on a listing that did not show it yet (taken while its first sync ran).
    rt.failStopSandbox = new NodeletError('UNAVAILABLE', 'device busy');
    hideFromListing('u1');
    m.setDesired([]);
    await settle();
    expect(m.active('u1')).toBe(true);
    rt.failStopSandbox = undefined;
    hideFromListing(undefined);
    rt.calls = [];
    m.setDesired([mkPod('u1')]);
    await settle();
    // Listed: its sandbox is still there (its stopped container restarts in it), no second one.
    expect(rt.calls.filter((c) => !c.startsWith('observePod'))).toEqual(['listPods', 'startContainer app 1']);
    expect(m.listPods()[0]!.status!.phase).toBe('Running');
    expect(rt.sandboxes.size).toBe(1);
  });
});

describe('PodManager: a removal the runtime keeps failing', () => {
  /** Log records at warn and above, as nodelet writes them. */
  function recordingLogger() {
    const lines: { level: string; msg: string }[] = [];
    const logger = createLogger({ journal: false, level: 'info', destination: { write: (l: string) => void lines.push(JSON.parse(l)) } });
    return { logger, lines };
  }

  /** A manager with one running pod, logging to `lines`. */
  async function runningPod() {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    const { logger, lines } = recordingLogger();
    const m = new PodManager({ runtime: rt, logger, clock });
    m.setSourcesReady();
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    return { clock, rt, lines, m };
  }

  it('is retried with the backoff (1 s doubling), one warning per error, and completes once the runtime recovers', async () => {
    const { clock, rt, lines, m } = await runningPod();
    rt.failStopSandbox = new NodeletError('UNAVAILABLE', 'rpc error: StopPodSandbox failed: device busy');
    m.setDesired([]);
    // 60 s of relists, one a second, while every StopPodSandbox fails.
    const attempts: number[] = [];
    const t0 = clock.t;
    for (let s = 0; s <= 60; s++) {
      clock.t = t0 + s * 1000;
      const before = rt.calls.filter((c) => c.startsWith('stopSandbox')).length;
      await m.syncOnce();
      if (rt.calls.filter((c) => c.startsWith('stopSandbox')).length > before) attempts.push(s);
      expect(m.active('u1')).toBe(true); // still in the runtime: never reported gone
    }
    // Attempts spaced by the backoff: 0, 1, 3, 7, 15, 31 s (the next is due at 63 s).
    expect(attempts).toEqual([0, 1, 3, 7, 15, 31]);
    const warnings = lines.filter((l) => l.level === 'warn');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.msg).toContain('StopPodSandbox failed: device busy');
    expect(rt.sandboxes.size).toBe(1);

    rt.failStopSandbox = undefined;
    clock.t = t0 + 63_000;
    await m.syncOnce();
    expect(rt.sandboxes.size).toBe(0);
    expect(rt.containers.size).toBe(0);
    expect(m.active('u1')).toBe(false);
    expect(lines.some((l) => l.msg === 'pod removed from the runtime after 6 failed attempts')).toBe(true);
    expect(lines.filter((l) => l.level === 'warn')).toHaveLength(1);
  });

  it('a new error message is warned again, with the failure count kept', async () => {
    const { clock, rt, lines, m } = await runningPod();
    m.setDesired([]);
    rt.failStopSandbox = new NodeletError('UNAVAILABLE', 'first error');
    await m.syncOnce();
    rt.failStopSandbox = new NodeletError('UNAVAILABLE', 'second error');
    clock.t += 1000;
    await m.syncOnce();
    const warnings = lines.filter((l) => l.level === 'warn').map((l) => l.msg);
    expect(warnings).toHaveLength(2);
    expect(warnings[1]).toContain('second error');
  });
});

describe('PodManager housekeeping', () => {
  it('removes the directories of pods neither wanted nor in the runtime, once every source has spoken, and leaves the others', async () => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    m.setDesired([mkPod('kept')]);
    await m.syncOnce();
    rt.leftovers.add('gone'); // left by a pod removed from the runtime while nodelet was down
    await m.syncOnce();
    expect(rt.calls).not.toContain('cleanupPod gone'); // sources not all heard from yet
    m.setSourcesReady();
    await m.syncOnce();
    expect(rt.calls.filter((c) => c.startsWith('cleanupPod'))).toEqual(['cleanupPod gone']);
    expect([...rt.leftovers]).toEqual(['kept']);
    // The runtime was told which pods are kept anyway (it need not look into their cgroups).
    expect([rt.leftoverKept?.('kept'), rt.leftoverKept?.('gone')]).toEqual([true, false]);
    // Looked for again only after the housekeeping period.
    rt.leftovers.add('later');
    await m.syncOnce();
    expect(rt.calls).not.toContain('cleanupPod later');
    clock.t += 10_000;
    await m.syncOnce();
    expect(rt.calls).toContain('cleanupPod later');
  });
});

describe('PodManager: one agent per runtime', () => {
  it('never removes runtime pods marked with another node\'s name, warns once per pod with a Warning event on the Node, and removes unmarked (a kubelet\'s) pods nobody wants', async () => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    rt.nodeName = 'n1';
    const lines: { level: string; msg: string; uid?: string }[] = [];
    const logger = createLogger({ journal: false, level: 'info', destination: { write: (l: string) => void lines.push(JSON.parse(l)) } });
    const events: { ref: string; type: string; reason: string; message: string }[] = [];
    const m = new PodManager({ runtime: rt, logger, clock, nodeName: 'n1', events: { emit: (ref, type, reason, message) => void events.push({ ref: `${ref.kind}/${ref.name}`, type, reason, message }) } });
    // What the runtime holds before this agent starts: another node's agent's pod, a kubelet's (unmarked) pod, and one of ours from before a restart.
    const sandbox = (id: string, uid: string, node?: string) =>
      rt.sandboxes.set(id, { id, attempt: 0, ready: true, createdAt: 0, uid, name: `web-${uid}`, namespace: 'default', ...(node ? { node } : {}) });
    sandbox('sx', 'other', 'n2');
    sandbox('sk', 'kubelets');
    sandbox('so', 'ours-old', 'n1');
    m.setSourcesReady();
    m.setDesired([mkPod('u1')]);
    for (let i = 0; i < 5; i++) {
      await m.syncOnce();
      clock.t += 1000;
    }
    // Ours runs, marked with our name; the unmarked and our unwanted pods are removed; the other node's pod stays untouched.
    expect([...rt.sandboxes.values()].map((s) => [s.uid, s.node]).sort()).toEqual([['other', 'n2'], ['u1', 'n1']]);
    expect(rt.calls.filter((c) => c.includes('sx'))).toEqual([]);
    const warned = lines.filter((l) => l.level === 'warn');
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ uid: 'other', msg: expect.stringContaining('was created by the agent of node "n2"') });
    expect(events.filter((e) => e.type === 'Warning')).toEqual([{ ref: 'Node/n1', type: 'Warning', reason: 'ForeignRuntimePod', message: warned[0]!.msg }]);
    // Even when a source asks for a pod with that UID to go (deleted), the other agent's pod is not ours to remove.
    m.setDesired([mkPod('u1'), { ...mkPod('other'), metadata: { ...mkPod('other').metadata, deletionTimestamp: '2026-01-01T00:00:00Z', deletionGracePeriodSeconds: 0 } }]);
    await m.syncOnce();
    expect(rt.sandboxes.has('sx')).toBe(true);
  });
});

describe('PodManager: a pod the control plane says is over', () => {
  it('is kept with its containers (status, logs) but never started again, and goes when it is deleted', async () => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    m.setSourcesReady();
    const pod = mkPod('job', 'Never');
    m.setDesired([pod]);
    await m.syncOnce();
    rt.exit('app', 0);
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.phase).toBe('Succeeded');
    // The API now says Succeeded; the runtime forgets the container (say, a runtime reset).
    const done = { ...pod, status: { phase: 'Succeeded' } };
    m.setDesired([done]);
    rt.containers.clear();
    rt.calls = [];
    clock.t += 60_000;
    await m.syncOnce();
    expect(rt.calls.filter((c) => c.startsWith('runSandbox') || c.startsWith('startContainer'))).toEqual([]);
    expect(m.getPod('default', 'web-job')).toBeDefined(); // still served (/pods, /containerLogs)
    m.setDesired([]);
    await m.syncOnce();
    expect(rt.calls).toContain('cleanupPod job');
  });
});

describe('PodManager: when a pod syncs (the kubelet\'s triggers, not every relist)', () => {
  it('a steady pod is synced on a runtime change, a source change, a backoff end and every syncFrequency, not on each relist', async () => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    let syncs = 0;
    const metrics = { relisted: () => {}, podWorkerDuration: () => void syncs++, podStartDuration: () => {}, podStarted: () => {}, containerStarted: () => {} };
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, metrics, syncFrequencyMs: 60_000 });
    m.setSourcesReady();
    const [p1, p2] = [mkPod('u1'), mkPod('u2')];
    const relists = async (n: number) => {
      syncs = 0;
      for (let i = 0; i < n; i++) {
        clock.t += 1000;
        await m.syncOnce();
      }
      return syncs;
    };
    m.setDesired([p1, p2]);
    await m.syncOnce();
    await m.syncOnce(); // one more look after the syncs that acted
    expect(await relists(10)).toBe(0);
    // Containers exit (seen by the relist): their pods sync and restart them at once.
    rt.exit('app', 1);
    expect(await relists(1)).toBe(2);
    expect(m.listPods()[0]!.status!.containerStatuses![0]).toMatchObject({ restartCount: 1, state: { running: {} } });
    await relists(1);
    expect(await relists(3)).toBe(0);
    // The second crash backs off 10 s: no sync until it ends, then the restart.
    rt.exit('app', 1);
    expect(await relists(1)).toBe(2);
    expect(m.listPods()[0]!.status!.containerStatuses![0]!.state!.waiting!.reason).toBe('CrashLoopBackOff');
    await relists(1); // the look after removing the older dead container
    expect(await relists(7)).toBe(0);
    await relists(2);
    expect(m.listPods()[0]!.status!.containerStatuses![0]).toMatchObject({ restartCount: 2, state: { running: {} } });
    await relists(1);
    expect(await relists(3)).toBe(0);
    // A source change syncs the changed pod alone.
    m.setDesired([p1, { ...p2, metadata: { ...p2.metadata, labels: { a: 'b' } } }]);
    await m.syncOnce();
    expect(syncs).toBe(1);
    // syncFrequency: every pod once a minute.
    expect(await relists(60)).toBe(2);
  });
});

describe('PodManager: status changes told at once (what wakes the status writer)', () => {
  it('tells each changed status once, after the sync that computed it, never a status unchanged, and a pod that left the runtime', async () => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    const told: { uid: string; phase: string | undefined }[] = [];
    // The listener reads the status as the writer would: the new one is already in place.
    const m: PodManager = new PodManager({ runtime: rt, logger: silentLogger(), clock, onStatusChange: (uid) => told.push({ uid, phase: m.podStatus(uid)?.phase }) });
    m.setSourcesReady();
    m.setDesired([mkPod('u1', 'Never')]);
    await m.syncOnce();
    expect(told).toEqual([{ uid: 'u1', phase: 'Running' }]);
    // Relists and syncs that find the same status (the look after a sync that acted, the periodic resync) tell nothing.
    for (let i = 0; i < 3; i++) {
      clock.t += 1000;
      await m.syncOnce();
    }
    clock.t += 61_000;
    await m.syncOnce();
    expect(told).toHaveLength(1);
    // The container exits: its new status is told once.
    rt.exit('app', 3);
    clock.t += 1000;
    await m.syncOnce();
    clock.t += 1000;
    await m.syncOnce();
    expect(told).toEqual([
      { uid: 'u1', phase: 'Running' },
      { uid: 'u1', phase: 'Failed' },
    ]);
    // Removed: once the pod is out of the runtime (no longer active), that is told too.
    m.setDesired([]);
    await m.syncOnce();
    expect(m.active('u1')).toBe(false);
    expect(told.at(-1)).toEqual({ uid: 'u1', phase: undefined });
    expect(told).toHaveLength(3);
  });

  it('a listener that throws does not break the sync', async () => {
    const { rt, clock } = setup();
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, onStatusChange: () => { throw new Error('boom'); } });
    m.setDesired([mkPod('u1')]);
    await m.syncOnce();
    expect(m.listPods()[0]!.status!.phase).toBe('Running');
  });
});

describe('observedKey (the relist\'s "nothing changed")', () => {
  const ctr = (id: string, o: Partial<ObservedContainer> = {}): ObservedContainer => ({ id, name: id, podSandboxId: 's1', attempt: 0, state: 'running', restartCount: 0, hash: 'h', image: 'i', imageRef: 'r', createdAt: 1, startedAt: 2, ...o });
  const pod = (containers: ObservedContainer[]): ObservedPod => ({ uid: 'u', name: 'p', namespace: 'default', sandboxes: [{ id: 's1', attempt: 0, ready: true, createdAt: 1 }], containers });

  it('is the same for the same pod listed in another order, and differs for a state, a new or removed container, a restart with the same count', () => {
    const base = observedKey(pod([ctr('a'), ctr('b')]));
    expect(observedKey(pod([ctr('b'), ctr('a')]))).toBe(base);
    expect(observedKey(pod([ctr('a'), ctr('b', { state: 'exited', finishedAt: 3, exitCode: 1 })]))).not.toBe(base);
    expect(observedKey(pod([ctr('a'), ctr('b'), ctr('c')]))).not.toBe(base);
    expect(observedKey(pod([ctr('a')]))).not.toBe(base);
    expect(observedKey(pod([ctr('a'), ctr('b2', { name: 'b', attempt: 1, restartCount: 1 })]))).not.toBe(base);
    expect(observedKey(undefined)).toBe('');
  });
});

describe('PodManager: with live runtime events (relist on a change, not every second)', () => {
  it('syncs a steady pod again 1 to 1.5 syncFrequency after its last sync, on the relists that run anyway: pods started at different times do not each call for a relist', async () => {
    const clock = new VirtualClock();
    const rt = new MemRuntime(clock);
    let relists = 0;
    const syncs: number[] = [];
    const metrics = { relisted: () => void relists++, podWorkerDuration: () => void syncs.push(clock.now()), podStartDuration: () => {}, podStarted: () => {}, containerStarted: () => {} };
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, metrics, syncFrequencyMs: 60_000, runtimeEvents: { live: true } });
    m.setSourcesReady();
    m.start();
    try {
      // 20 pods, one every 3 s: their minutes end 3 s apart.
      const pods: Pod[] = [];
      for (let i = 0; i < 20; i++) {
        pods.push(mkPod(`s${i}`));
        m.setDesired([...pods]);
        await clock.advance(3000);
      }
      await clock.advanceUntil(() => m.listPods().every((p) => p.status?.phase === 'Running'), { stepMs: 100, maxMs: 5000 });
      await clock.advance(5000);
      relists = 0;
      syncs.length = 0;
      await clock.advance(180_000);
      // The relist every 10 s (the housekeeping's), not one per pod's minute (60 in 180 s).
      expect(relists).toBeGreaterThanOrEqual(17);
      expect(relists).toBeLessThanOrEqual(19);
      // Each pod synced every 60 to 90 s: 2 or 3 times in 180 s, no more, no fewer.
      expect(syncs.length).toBeGreaterThanOrEqual(40);
      expect(syncs.length).toBeLessThanOrEqual(60);
    } finally {
      await m.stop();
    }
  });

  it('relists on runtimeChanged() and when something falls due, at most 10 s apart; every second again while a pod waits for a look or events are not live', async () => {
    const clock = new VirtualClock();
    const rt = new MemRuntime(clock);
    let relists = 0;
    let syncs = 0;
    const metrics = { relisted: () => void relists++, podWorkerDuration: () => void syncs++, podStartDuration: () => {}, podStarted: () => {}, containerStarted: () => {} };
    const events = { live: false };
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, metrics, syncFrequencyMs: 25_000, runtimeEvents: events });
    m.setSourcesReady();
    m.start();
    try {
      m.setDesired([mkPod('u1')]);
      await clock.advanceUntil(() => m.listPods()[0]?.status?.phase === 'Running', { stepMs: 100, maxMs: 5000 });
      await clock.advance(3000);
      // Not live: the kubelet's 1 s relist.
      relists = 0;
      await clock.advance(10_000);
      expect(relists).toBe(10);
      // Live and steady: the housekeeping's relist every 10 s, and the pod's periodic sync
      // (syncFrequency 25 s) at the first of them 25 s after its last sync.
      events.live = true;
      await clock.advance(1000);
      relists = 0;
      syncs = 0;
      await clock.advance(60_000);
      expect(relists).toBeGreaterThanOrEqual(6);
      expect(relists).toBeLessThanOrEqual(7);
      expect(syncs).toBe(2);
      // A container exits: nothing sees it until the runtime tells, then at once.
      rt.exit('app', 1);
      await clock.advance(500);
      expect(m.listPods()[0]!.status!.containerStatuses![0]!.restartCount).toBe(0);
      m.runtimeChanged();
      await clock.advance(10);
      expect(m.listPods()[0]!.status!.containerStatuses![0]).toMatchObject({ restartCount: 1, state: { running: {} } });
      // The sync acted: looks 30, 100 and 300 ms after the change (the runtime's listing may
      // lag its event by a few ms), then every second until the pod is steady again.
      relists = 0;
      await clock.advance(2000);
      expect(relists).toBe(4);
      // Told before the runtime's listing shows it (containerd's event service races its CRI
      // plugin): the looks of the next seconds see it.
      await clock.advance(30_000);
      m.runtimeChanged();
      await clock.advance(500);
      rt.exit('app', 1);
      await clock.advance(1000);
      // (A second crash: the kubelet's back-off, seen in the status.)
      expect(m.listPods()[0]!.status!.containerStatuses![0]!.state!.waiting?.reason).toBe('CrashLoopBackOff');
    } finally {
      await m.stop();
    }
  });
});
