/**
 * A container's exit told by containerd's event reaches the pod's status at the event, not
 * when containerd's CRI plugin lists it exited (it deletes the task first: 50-200 ms later,
 * FACTS.md): the pod manager over the CRI pod runtime over a CRI whose listing trails the
 * event, on a virtual clock.
 */
import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { silentLogger } from '../../../src/log.js';
import { CriPodRuntime } from '../../../src/pods/cri/cri-pod-runtime.js';
import { containerHash } from '../../../src/pods/sync/container-hash.js';
import { PodManager } from '../../../src/pods/sync/manager.js';
import { containerEvent } from '../../../src/runtime/containerd-event.js';
import type { CriClient } from '../../../src/runtime/cri-client.js';
import type { Container, ContainerStatus, PodSandbox } from '../../../src/runtime/types.js';
import { VirtualClock } from '../../helpers/clock.js';
import { taskExit, taskOom } from '../../helpers/containerd-events.js';

const S = 1e9;

/** The CRI calls the relist and the pod's status make, over containers the test moves; every call recorded. */
class TrailingCri {
  readonly calls: string[] = [];
  readonly sandboxes: PodSandbox[] = [];
  readonly containers: Container[] = [];
  readonly statuses = new Map<string, ContainerStatus>();

  addPod(uid: string, containers: { id: string; name: string; image: string }[]): void {
    const labels = { 'io.kubernetes.pod.uid': uid, 'io.kubernetes.pod.name': `web-${uid}`, 'io.kubernetes.pod.namespace': 'default' };
    this.sandboxes.push({ id: `sb-${uid}`, metadata: { name: `web-${uid}`, uid, namespace: 'default', attempt: 0 }, state: 'SANDBOX_READY', createdAt: 1000 * S, labels, annotations: {}, runtimeHandler: '' });
    for (const c of containers) {
      const cl = { ...labels, 'io.kubernetes.container.name': c.name };
      const annotations = { 'io.kubernetes.container.hash': containerHash(c), 'io.kubernetes.container.restartCount': '0' };
      const meta = { name: c.name, attempt: 0 };
      this.containers.push({ id: c.id, podSandboxId: `sb-${uid}`, metadata: meta, image: { image: c.image }, imageRef: 'sha256:1', state: 'CONTAINER_RUNNING', createdAt: 1001 * S, labels: cl, annotations, imageId: '' });
      this.statuses.set(c.id, { id: c.id, metadata: meta, state: 'CONTAINER_RUNNING', createdAt: 1001 * S, startedAt: 1002 * S, finishedAt: 0, exitCode: 0, image: { image: c.image }, imageRef: 'sha256:1', reason: '', message: '', labels: cl, annotations, mounts: [], logPath: '', imageId: '' });
    }
  }

  /** containerd's CRI plugin records the exit (after its event): a new list entry, as the client decodes a changed one. */
  recordExit(id: string, exitCode: number, finishedAt: number, reason: string): void {
    const i = this.containers.findIndex((c) => c.id === id);
    this.containers[i] = { ...this.containers[i]!, state: 'CONTAINER_EXITED' };
    this.statuses.set(id, { ...this.statuses.get(id)!, state: 'CONTAINER_EXITED', exitCode, finishedAt, reason });
  }

  readonly client = {
    version: async () => ({ version: '0.1.0', runtimeName: 'containerd', runtimeVersion: '1.6.20', runtimeApiVersion: 'v1' }),
    listPodSandbox: async (f?: { labelSelector?: Record<string, string> }) => {
      this.calls.push(f ? 'ListPodSandbox(pod)' : 'ListPodSandbox');
      return this.sandboxes.filter((s) => !f?.labelSelector || s.labels['io.kubernetes.pod.uid'] === f.labelSelector['io.kubernetes.pod.uid']);
    },
    listContainers: async (f?: { labelSelector?: Record<string, string> }) => {
      this.calls.push(f ? 'ListContainers(pod)' : 'ListContainers');
      return this.containers.filter((c) => !f?.labelSelector || c.labels['io.kubernetes.pod.uid'] === f.labelSelector['io.kubernetes.pod.uid']);
    },
    containerStatus: async (id: string) => {
      this.calls.push(`ContainerStatus ${id}`);
      return this.statuses.get(id)!;
    },
    podSandboxStatus: async (id: string) => {
      this.calls.push(`PodSandboxStatus ${id}`);
      return { ...this.sandboxes.find((s) => s.id === id)!, network: { ip: '', additionalIps: [] }, linux: null };
    },
  };
}

const mkPod = (uid: string, containers: { name: string; image: string }[], restartPolicy = 'Never'): Pod => ({
  metadata: { name: `web-${uid}`, namespace: 'default', uid },
  spec: { restartPolicy, hostNetwork: true, containers },
});

/** The manager on live events, its pods running and steady (the relist waits for events). */
async function steady(pods: { uid: string; containers: { id: string; name: string; image: string }[] }[]) {
  const clock = new VirtualClock();
  const cri = new TrailingCri();
  for (const p of pods) cri.addPod(p.uid, p.containers);
  const rt = new CriPodRuntime({ cri: cri.client as unknown as CriClient, rootDir: '/nonexistent/root', podLogsDir: '/nonexistent/logs', seccompDefault: false, logger: silentLogger() });
  const m = new PodManager({ runtime: rt, logger: silentLogger(), clock, hostIP: '10.0.0.9', runtimeEvents: { live: true } });
  // As wiring/pods.ts hands containerd's events on.
  const event = (bytes: Buffer) => {
    const e = containerEvent(bytes);
    const uid = e && rt.noteContainerEvent(e);
    if (uid) m.runtimeContainerExited(uid);
    m.runtimeChanged();
  };
  m.setDesired(pods.map((p) => mkPod(p.uid, p.containers)));
  m.setSourcesReady();
  m.start();
  await clock.advance(10_000);
  const state = (uid: string, name: string) => m.getPod('default', `web-${uid}`)?.status?.containerStatuses?.find((c) => c.name === name)?.state;
  expect(pods.every((p) => p.containers.every((c) => state(p.uid, c.name)?.running))).toBe(true);
  cri.calls.length = 0;
  return { clock, cri, rt, m, event, state, stop: () => m.stop() };
}

/**
 * The relist the event asked for runs at the same (virtual) instant as the syncs, but on a
 * loaded machine its two list calls may come a few turns of the event loop after one
 * advance(0) settled: advance(0) again (no time passes) until they came, 200 turns at most.
 */
async function relisted(s: { clock: VirtualClock; cri: { calls: string[] } }): Promise<void> {
  for (let i = 0; i < 200 && s.cri.calls.length < 2; i++) await s.clock.advance(0);
}

describe("a container's exit from the runtime's event", () => {
  it('shows in /pods at the event, with no call to the runtime, while its listing still shows the container running; the listing that catches up changes nothing', async () => {
    const s = await steady([{ uid: 'u1', containers: [{ id: 'c1', name: 'app', image: 'busybox' }] }]);
    try {
      s.event(taskExit('c1', 137, 1_700_000_000_123));
      // Before any time passes (no relist, no look 30 ms on): what the event says.
      await s.clock.advance(0);
      expect(s.state('u1', 'app')).toEqual({ terminated: { exitCode: 137, reason: 'Error', startedAt: '1970-01-01T00:16:42Z', finishedAt: '2023-11-14T22:13:20Z', containerID: 'containerd://c1' } });
      expect(s.m.getPod('default', 'web-u1')!.status!.phase).toBe('Failed');
      // The pod's own sync asked nothing; the relist the event asked for listed once (the two list calls).
      await relisted(s);
      expect(s.cri.calls).toEqual(['ListPodSandbox', 'ListContainers']);
      // The looks after the event still list it running: the status holds.
      await s.clock.advance(300);
      expect(s.state('u1', 'app')?.terminated?.exitCode).toBe(137);
      // containerd's CRI plugin records it: ContainerStatus once, the same status.
      const before = JSON.stringify(s.m.getPod('default', 'web-u1')!.status);
      s.cri.recordExit('c1', 137, 1_700_000_000_123 * 1e6, 'Error');
      s.cri.calls.length = 0;
      await s.clock.advance(1000);
      expect(s.cri.calls.filter((c) => c.startsWith('ContainerStatus'))).toEqual(['ContainerStatus c1']);
      expect(JSON.stringify(s.m.getPod('default', 'web-u1')!.status)).toBe(before);
    } finally {
      await s.stop();
    }
  });

  it('an OOM event before the exit gives OOMKilled, as the CRI plugin will; exit 0 is Completed; the other containers stay as listed', async () => {
    const s = await steady([
      {
        uid: 'u1',
        containers: [
          { id: 'c1', name: 'a', image: 'busybox' },
          { id: 'c2', name: 'b', image: 'busybox' },
          { id: 'c3', name: 'c', image: 'busybox' },
        ],
      },
    ]);
    try {
      s.event(taskOom('c1'));
      await s.clock.advance(0);
      // An OOM kill alone (a child process of the container) changes nothing.
      expect(s.state('u1', 'a')?.running).toBeDefined();
      s.event(taskExit('c1', 137, 1_700_000_000_000));
      s.event(taskExit('c2', 0, 1_700_000_000_000));
      await s.clock.advance(0);
      expect(s.state('u1', 'a')?.terminated).toMatchObject({ exitCode: 137, reason: 'OOMKilled' });
      expect(s.state('u1', 'b')?.terminated).toMatchObject({ exitCode: 0, reason: 'Completed' });
      expect(s.state('u1', 'c')?.running).toBeDefined();
    } finally {
      await s.stop();
    }
  });

  it("ignores what is not a running container's own exit: an exec's, an unknown ID's, a second exit of one already told", async () => {
    const s = await steady([{ uid: 'u1', containers: [{ id: 'c1', name: 'app', image: 'busybox' }] }]);
    try {
      s.event(taskExit('c1', 1, 1_700_000_000_000, 'exec-probe'));
      s.event(taskExit('nobody', 1, 1_700_000_000_000));
      await s.clock.advance(0);
      expect(s.state('u1', 'app')?.running).toBeDefined();
      expect(s.rt.noteContainerEvent({ kind: 'exit', containerId: 'nobody', exitCode: 1, exitedAtNs: 1 })).toBeUndefined();
      s.cri.recordExit('c1', 2, 1_700_000_000_000 * 1e6, 'Error');
      await s.clock.advance(1000);
      expect(s.state('u1', 'app')?.terminated?.exitCode).toBe(2);
      // Exited already: an event for it now (a late or replayed one) is not taken over the runtime's record.
      s.event(taskExit('c1', 9, 1_700_000_000_000));
      await s.clock.advance(1000);
      expect(s.state('u1', 'app')?.terminated?.exitCode).toBe(2);
    } finally {
      await s.stop();
    }
  });

  it('a burst of exits across 50 pods: one sync per pod at the event, no call to the runtime for them, and one relist, not one per event', async () => {
    const pods = Array.from({ length: 50 }, (_, i) => ({ uid: `u${i}`, containers: [{ id: `c${i}`, name: 'app', image: 'busybox' }] }));
    const s = await steady(pods);
    try {
      for (const p of pods) s.event(taskExit(p.containers[0]!.id, 137, 1_700_000_000_000));
      await s.clock.advance(0);
      await relisted(s);
      expect(pods.every((p) => s.state(p.uid, 'app')?.terminated?.exitCode === 137)).toBe(true);
      expect(s.cri.calls).toEqual(['ListPodSandbox', 'ListContainers']);
    } finally {
      await s.stop();
    }
  });
});
