/**
 * The work one pod costs per sync grows linearly with its spec. The API server takes a Pod
 * of up to ~1.5 MiB (etcd's limit) and caps neither containers, ports nor probes: ~45,000
 * containers fit in one. Each step that once searched the whole list for every container
 * (the plan, the status, the sync steps, the probe set, the resource record) held the event
 * loop for minutes on such a pod; these tests size the pod up and check that the reads of
 * the container lists at 16n are nowhere near 256 times those at n (counted, not timed), and
 * that the answers are still the ones a user sees.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { silentLogger } from '../../../src/log.js';
import { AllocationRecord, decodeAllocationCheckpoint } from '../../../src/pods/sync/allocation.js';
import type { ObservedContainer, ObservedPod } from '../../../src/pods/sync/observed.js';
import { computePodActions, containerHash } from '../../../src/pods/sync/plan.js';
import { ProbeManager } from '../../../src/pods/probes/probes.js';
import type { PodRuntime } from '../../../src/pods/cri/runtime-port.js';
import { computePodStatus } from '../../../src/pods/status/status.js';
import { addProbeKills, killContainers, killPod, reportBackOffs, startContainers, type StepContext } from '../../../src/pods/sync/sync-steps.js';
import { PodWorker } from '../../../src/pods/sync/worker.js';
import { ManualClock } from '../../helpers/clock.js';

const NOW = 10_000_000;

/**
 * Reads of an element of the pod's container lists and of the observed containers: the work
 * a step does on them, counted instead of timed (a timed ratio on a loaded 2-core machine
 * swung from 8 to 32 for linear code as garbage collection joined in or not).
 */
let reads = 0;
function counted<T>(list: T[]): T[] {
  return new Proxy(list, {
    get(target, key, receiver) {
      if (typeof key === 'string' && key.length > 0 && key.charCodeAt(0) >= 48 && key.charCodeAt(0) <= 57) reads++;
      return Reflect.get(target, key, receiver);
    },
  });
}

function bigPod(n: number, o: { inits?: number; probes?: boolean } = {}): Pod {
  const c = (prefix: string, i: number): Container => ({
    name: `${prefix}${i}`,
    image: 'busybox',
    ...(o.probes ? { readinessProbe: { exec: { command: ['true'] } }, livenessProbe: { tcpSocket: { port: 80 } } } : {}),
  });
  return {
    metadata: { name: 'big', namespace: 'default', uid: 'u1' },
    spec: {
      restartPolicy: 'Always',
      initContainers: counted(Array.from({ length: o.inits ?? 0 }, (_, i) => c('i', i))),
      containers: counted(Array.from({ length: n }, (_, i) => c('c', i))),
    },
  };
}

/** Each container of the pod running in sandbox `sb`, after `dead` exited instances. */
function observedOf(pod: Pod, o: { dead?: number; running?: boolean } = {}): ObservedPod {
  const containers: ObservedContainer[] = [];
  for (const c of [...(pod.spec!.initContainers ?? []), ...pod.spec!.containers]) {
    const base = { name: c.name, podSandboxId: 'sb', hash: containerHash(c), image: 'busybox', imageRef: 'sha256:1' };
    for (let d = 0; d < (o.dead ?? 0); d++) {
      containers.push({ ...base, id: `${c.name}-d${d}`, attempt: d, restartCount: d, state: 'exited', createdAt: 1000 + d, startedAt: 1000 + d, finishedAt: 2000 + d, exitCode: 1 });
    }
    if (o.running !== false) containers.push({ ...base, id: `${c.name}-r`, attempt: o.dead ?? 0, restartCount: o.dead ?? 0, state: 'running', createdAt: 5000, startedAt: 5000 });
  }
  return { uid: 'u1', name: 'big', namespace: 'default', sandboxes: [{ id: 'sb', attempt: 0, ready: true, createdAt: 1 }], containers: counted(containers) };
}

/**
 * Runs `step` on inputs of size n and 16n and counts the element reads of the container lists
 * (above): linear work reads ~16 times as many at 16n, the quadratic work this file guards
 * against ~256 times. Fails at 64. The count is the same on any machine, loaded or not.
 */
async function expectLinear(build: (n: number) => () => unknown, n = 500): Promise<void> {
  const small = build(n);
  const large = build(16 * n);
  reads = 0;
  await small();
  const r1 = Math.max(reads, 1);
  reads = 0;
  await large();
  const r16 = reads;
  expect(r16 / r1, `n=${n}: ${r1} reads, 16n: ${r16} reads`).toBeLessThan(64);
}

const stepContext = (rt: Partial<PodRuntime>, events: string[] = []): StepContext => ({
  runtime: rt as PodRuntime,
  events: { emit: (ref, type, reason) => void events.push(`${type} ${reason} ${ref.fieldPath ?? ref.name}`) },
  clock: new ManualClock(NOW),
  log: silentLogger(),
  pullGate: (pull) => pull(),
  hookHost: '127.0.0.1',
  gracePeriodSeconds: 5,
});

describe('the plan of a pod with tens of thousands of containers', () => {
  it('grows linearly: all running, older dead ones to remove, none started, init containers', async () => {
    await expectLinear((n) => {
      const pod = bigPod(n);
      const obs = observedOf(pod, { dead: 2 });
      return () => computePodActions(pod, obs, NOW);
    });
    await expectLinear((n) => {
      const pod = bigPod(n);
      const obs = { ...observedOf(pod, { dead: 2 }), sandboxes: [] };
      return () => computePodActions(pod, obs, NOW);
    });
    await expectLinear((n) => {
      const pod = bigPod(1, { inits: n });
      const obs = observedOf({ ...pod, spec: { ...pod.spec!, containers: [] } }, { dead: 1, running: false });
      return () => computePodActions(pod, obs, NOW);
    });
  });

  it('still keeps the newest dead instance of each container, removes the older, and leaves running ones alone', () => {
    const pod = bigPod(3000);
    const plan = computePodActions(pod, observedOf(pod, { dead: 2 }), NOW);
    expect(plan.removeContainers).toEqual(pod.spec!.containers.map((c) => `${c.name}-d0`));
    expect(plan).toMatchObject({ killPod: false, start: [], kill: [], removeSandboxes: [], waiting: {} });
  });

  it('restarts each crashed container with its own next restart count, or starts all in a new sandbox', () => {
    const pod = bigPod(3000);
    const crashed = observedOf(pod, { dead: 1, running: false });
    const plan = computePodActions(pod, crashed, NOW);
    // One crash each: the first restart has no back-off, with restart count 1.
    expect(plan.start).toEqual(pod.spec!.containers.map((c) => ({ name: c.name, restartCount: 1, init: false })));
    const fresh = computePodActions(pod, { ...crashed, sandboxes: [] }, NOW);
    expect(fresh.createSandbox).toEqual({ attempt: 0 });
    expect(fresh.start).toEqual(pod.spec!.containers.map((c) => ({ name: c.name, restartCount: 1, init: false })));
  });
});

describe('the status of a pod with tens of thousands of containers', () => {
  it('grows linearly', async () => {
    await expectLinear((n) => {
      const pod = bigPod(n);
      const obs = observedOf(pod, { dead: 2 });
      return () => computePodStatus({ pod, observed: obs, waiting: {}, runtimeName: 'containerd', now: NOW });
    });
  });

  it('shows each container its own instance, restart count and last termination', () => {
    const pod = bigPod(3000);
    const st = computePodStatus({ pod, observed: observedOf(pod, { dead: 2 }), waiting: {}, runtimeName: 'containerd', now: NOW });
    expect(st.phase).toBe('Running');
    expect(st.containerStatuses).toHaveLength(3000);
    st.containerStatuses!.forEach((cs, i) => {
      expect(cs).toMatchObject({ name: `c${i}`, ready: true, restartCount: 2, containerID: `containerd://c${i}-r` });
      expect(cs.lastState?.terminated?.containerID).toBe(`containerd://c${i}-d1`);
    });
  });
});

describe('the sync steps of a pod with tens of thousands of containers', () => {
  const fakeRuntime = (started: string[] = []): Partial<PodRuntime> => ({
    ensureImage: async () => false,
    startContainer: async (s) => {
      started.push(`${s.container.name}:${s.container.image}:${s.init}`);
      return `${s.container.name}-new`;
    },
    stopContainer: async () => {},
    stopSandbox: async () => {},
  });

  it('start, stop and report each container in linear time', async () => {
    await expectLinear((n) => {
      const pod = bigPod(n);
      const plan = computePodActions(pod, { ...observedOf(pod), containers: [], sandboxes: [] }, NOW);
      return () => startContainers(stepContext(fakeRuntime()), new PodWorker(pod), plan.start, { id: 'sb', attempt: 0 }, {}, NOW);
    });
    await expectLinear((n) => {
      const pod = bigPod(n);
      const kills = observedOf(pod).containers.map((c) => ({ id: c.id, name: c.name, reason: 'spec changed' }));
      return () => killContainers(stepContext(fakeRuntime()), pod, kills);
    });
    await expectLinear((n) => {
      const pod = bigPod(n);
      const obs = observedOf(pod);
      return () => killPod(stepContext(fakeRuntime()), pod, obs, 5);
    });
    await expectLinear((n) => {
      const pod = bigPod(n);
      const obs = observedOf(pod, { dead: 2 });
      const plan = computePodActions(pod, obs, NOW);
      plan.waiting = Object.fromEntries(pod.spec!.containers.map((c) => [c.name, { reason: 'CrashLoopBackOff' }]));
      return () => reportBackOffs(stepContext(fakeRuntime()), new PodWorker(pod), plan, obs);
    });
    await expectLinear((n) => {
      const obs = observedOf(bigPod(n));
      return () => addProbeKills({ killPod: false, start: [], kill: [], removeContainers: [], removeSandboxes: [], waiting: {} }, obs, () => 'failed liveness probe');
    });
  });

  it('start each container with its own spec, and name init and app containers apart in events', async () => {
    const pod = bigPod(2000, { inits: 2000 });
    const started: string[] = [];
    const w = new PodWorker(pod);
    await startContainers(stepContext(fakeRuntime(started)), w, pod.spec!.containers.map((c) => ({ name: c.name, restartCount: 0, init: false })), { id: 'sb', attempt: 0 }, {}, NOW);
    expect(started).toEqual(pod.spec!.containers.map((c) => `${c.name}:busybox:false`));

    const events: string[] = [];
    const obs = observedOf(pod);
    await killPod(stepContext(fakeRuntime(), events), pod, obs, 5);
    expect(events).toEqual(obs.containers.map((c) => `Normal Killing spec.${c.name.startsWith('i') ? 'initContainers' : 'containers'}{${c.name}}`));

    const backoffs: string[] = [];
    const dead = observedOf(pod, { dead: 3, running: false });
    const plan = { ...computePodActions(pod, dead, NOW), waiting: { c7: { reason: 'CrashLoopBackOff' }, i9: { reason: 'CrashLoopBackOff' } } };
    reportBackOffs(stepContext(fakeRuntime(), backoffs), w, plan, dead);
    reportBackOffs(stepContext(fakeRuntime(), backoffs), w, plan, dead); // once per crash
    expect(backoffs).toEqual(['Warning BackOff spec.containers{c7}', 'Warning BackOff spec.initContainers{i9}']);
    expect(w.backoffReported).toEqual(new Map([['c7', 2], ['i9', 2]]));

    const kills = { killPod: false, start: [], kill: [{ id: 'c1-r', name: 'c1', reason: 'spec changed' }], removeContainers: [], removeSandboxes: [], waiting: {} };
    addProbeKills(kills, obs, (id) => (id === 'c1-r' || id === 'c2-r' ? 'failed liveness probe' : undefined));
    expect(kills.kill.map((k) => k.id)).toEqual(['c1-r', 'c2-r']);
  });
});

describe('the probes of a pod with tens of thousands of containers', () => {
  it('are set up in linear time, each with its own container', async () => {
    const manager = () => new ProbeManager({ exec: async () => ({ exitCode: 0, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) }), logger: silentLogger(), clock: new ManualClock(NOW), onChange: () => {} });
    await expectLinear((n) => {
      const pod = bigPod(n, { probes: true });
      const running = observedOf(pod).containers.map((c) => ({ id: c.id, name: c.name, startedAt: 5000 }));
      return () => manager().update(pod, running, '10.0.0.2');
    });
    const pm = manager();
    const pod = bigPod(3000, { probes: true });
    pm.update(pod, observedOf(pod).containers.map((c) => ({ id: c.id, name: c.name, startedAt: 5000 })), '10.0.0.2');
    // Readiness starts false and liveness true, for each container's own workers.
    expect(pm.ready('c2999-r')).toBe(false);
    expect(pm.mustRestart('c2999-r')).toBeUndefined();
    expect(pm.ready('nope')).toBe(true);
  });
});

describe('the resource record of a pod with thousands of containers', () => {
  let dir = '';
  afterEach(async () => {
    if (dir) await fs.rm(dir, { recursive: true, force: true });
  });

  it('records every container started at once, and the file holds them all', async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'nodelet-alloc-'));
    const r = new AllocationRecord(dir, 'actuated_pods_state', silentLogger());
    await r.load();
    const info = { ContainerResources: { c0: { limits: { cpu: '1' } } } };
    await r.setPod('u1', info);
    // As many starts as arrive while a write is in flight join one write of the latest content.
    await Promise.all(Array.from({ length: 3000 }, (_, i) => r.setContainer('u1', `c${i + 1}`, { requests: { memory: `${i + 1}Mi` } })));
    const onDisk = decodeAllocationCheckpoint(await fs.readFile(path.join(dir, 'actuated_pods_state'), 'utf8'));
    expect(Object.keys(onDisk.u1!.ContainerResources)).toHaveLength(3001);
    expect(onDisk.u1!.ContainerResources.c3000).toEqual({ requests: { memory: '3000Mi' } });
    // What the caller handed over is not changed under it.
    expect(info).toEqual({ ContainerResources: { c0: { limits: { cpu: '1' } } } });
  });
});
