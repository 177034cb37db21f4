/**
 * The PodRuntime port (src/pods/cri/runtime-port.ts), as ONE suite run against the in-memory
 * fake the unit tests use (test/fakes/pod-runtime.ts) and the real adapter (CriPodRuntime)
 * on a real containerd. When one passes and the other fails, the fake lies and the pod
 * manager's unit tests built on it cannot be trusted.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CriPodRuntime } from '../../../src/pods/cri/cri-pod-runtime.js';
import type { ObservedPod } from '../../../src/pods/sync/observed.js';
import { containerHash } from '../../../src/pods/sync/plan.js';
import type { PodRuntime } from '../../../src/pods/cri/runtime-port.js';
import { createCriClient } from '../../../src/runtime/cri-client.js';
import { MemRuntime } from '../../fakes/pod-runtime.js';
import { VirtualClock } from '../../helpers/clock.js';
import { BUSYBOX_IMAGE, ensureContainerd } from '../../helpers/containerd.js';
import { tempDir } from '../../helpers/nodelet.js';

/** Each implementation of the port under its name: started once per suite, stopped after it. */
const backends: Record<string, () => Promise<{ rt: PodRuntime; stop(): Promise<void> }>> = {
  MemRuntime: async () => {
    const rt = new MemRuntime(new VirtualClock());
    rt.present.add(BUSYBOX_IMAGE);
    return { rt, stop: async () => undefined };
  },
  'CriPodRuntime on containerd': async () => {
    const { endpoint } = await ensureContainerd({ dir: '/var/lib/nodelet-dev/containerd-podruntime' });
    const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 30_000 });
    const dir = tempDir('nodelet-podruntime-contract-');
    const rt = new CriPodRuntime({ cri, rootDir: dir, podLogsDir: `${dir}/logs`, seccompDefault: false, resolvConf: '' });
    return {
      rt,
      async stop() {
        cri.close();
        fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};

const app: Container = { name: 'app', image: BUSYBOX_IMAGE, command: ['sleep', '3600'] };

/** A host-network pod (no CNI needed) with a fresh UID, so cases never see each other's pods. */
function mkPod(name: string, containers: Container[] = [app]): Pod {
  const uid = crypto.randomUUID();
  return { metadata: { name: `${name}-${uid.slice(0, 6)}`, namespace: 'contract', uid }, spec: { hostNetwork: true, terminationGracePeriodSeconds: 0, containers } };
}

/** What the pod manager reads of an observed pod: every field but times and the runtime's IDs. */
function shape(p: ObservedPod) {
  return {
    uid: p.uid,
    name: p.name,
    namespace: p.namespace,
    ...(p.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: p.gracePeriodSeconds } : {}),
    sandboxes: p.sandboxes.map((s) => ({ attempt: s.attempt, ready: s.ready, createdAt: typeof s.createdAt })),
    containers: p.containers.map((c) => ({
      name: c.name,
      attempt: c.attempt,
      state: c.state,
      restartCount: c.restartCount,
      hash: c.hash,
      image: c.image,
      imageRef: c.imageRef.startsWith('sha256:') ? 'sha256:…' : c.imageRef,
      ...(c.exitCode !== undefined ? { exitCode: c.exitCode } : {}),
      ...(c.reason !== undefined ? { reason: c.reason } : {}),
      ...(c.finishedAt !== undefined ? { finishedAt: typeof c.finishedAt } : {}),
    })),
  };
}

for (const [name, start] of Object.entries(backends)) {
  describe(`PodRuntime contract: ${name}`, () => {
    let rt: PodRuntime;
    let stop: () => Promise<void>;
    const made: { sandboxes: string[]; uids: string[] } = { sandboxes: [], uids: [] };

    beforeAll(async () => {
      ({ rt, stop } = await start());
    });
    afterAll(async () => {
      for (const id of made.sandboxes) {
        await rt.stopSandbox(id).catch(() => undefined);
        await rt.removeSandbox(id).catch(() => undefined);
      }
      for (const uid of made.uids) await rt.cleanupPod(uid).catch(() => undefined);
      await stop?.();
    });

    async function running(pod: Pod, restartCount = 0): Promise<{ sandboxId: string; ids: string[] }> {
      const sandboxId = await rt.runSandbox(pod, 0);
      made.sandboxes.push(sandboxId);
      made.uids.push(pod.metadata!.uid!);
      const ids: string[] = [];
      for (const container of pod.spec!.containers) ids.push(await rt.startContainer({ pod, container, sandboxId, sandboxAttempt: 0, restartCount, init: false }));
      return { sandboxId, ids };
    }

    it('an image already present is not pulled: ensureImage resolves false without the gate', async () => {
      const gated: string[] = [];
      const pulled = await rt.ensureImage(mkPod('img'), app, async (pull) => (gated.push('pull'), pull()));
      expect([pulled, gated]).toEqual([false, []]);
    });

    it('runSandbox and startContainer: observePod shows them running, with the kubelet\'s restart count and hash', async () => {
      const pod = mkPod('run');
      const { sandboxId, ids } = await running(pod, 2);
      const seen = await rt.observePod(pod.metadata!.uid!);
      expect(seen.sandboxes.map((s) => s.id)).toEqual([sandboxId]);
      expect(seen.containers.map((c) => [c.id, c.podSandboxId])).toEqual([[ids[0], sandboxId]]);
      expect(shape(seen)).toEqual({
        uid: pod.metadata!.uid,
        name: pod.metadata!.name,
        namespace: 'contract',
        gracePeriodSeconds: 0,
        sandboxes: [{ attempt: 0, ready: true, createdAt: 'number' }],
        containers: [{ name: 'app', attempt: 2, state: 'running', restartCount: 2, hash: containerHash(app), image: BUSYBOX_IMAGE, imageRef: 'sha256:…' }],
      });
      expect(seen.containers[0]!.startedAt).toEqual(expect.any(Number));
    });

    it('stopContainer makes it exited (killed: 137) and leaves the sandbox ready; a second stop is fine', async () => {
      const pod = mkPod('stop');
      const { ids } = await running(pod);
      await rt.stopContainer(ids[0]!, 0);
      await rt.stopContainer(ids[0]!, 0);
      const seen = shape(await rt.observePod(pod.metadata!.uid!));
      expect(seen.containers).toEqual([expect.objectContaining({ state: 'exited', exitCode: 137, reason: 'Error', finishedAt: 'number' })]);
      expect(seen.sandboxes).toEqual([expect.objectContaining({ ready: true })]);
    });

    it('stopSandbox makes the sandbox not ready and its containers exited', async () => {
      const pod = mkPod('stopsb');
      const { sandboxId } = await running(pod);
      await rt.stopSandbox(sandboxId);
      const seen = shape(await rt.observePod(pod.metadata!.uid!));
      expect(seen.sandboxes).toEqual([expect.objectContaining({ ready: false })]);
      expect(seen.containers).toEqual([expect.objectContaining({ state: 'exited', exitCode: 137 })]);
    });

    it('removeContainer and removeSandbox: the pod is gone from observePod and listPods', async () => {
      const pod = mkPod('rm');
      const uid = pod.metadata!.uid!;
      const { sandboxId, ids } = await running(pod);
      expect((await rt.listPods()).map((p) => p.uid)).toContain(uid);
      await rt.stopSandbox(sandboxId);
      await rt.removeContainer(ids[0]!);
      expect((await rt.observePod(uid)).containers).toEqual([]);
      await rt.removeSandbox(sandboxId);
      expect(await rt.observePod(uid)).toEqual({ uid, name: '', namespace: 'default', sandboxes: [], containers: [] });
      expect((await rt.listPods()).map((p) => p.uid)).not.toContain(uid);
    });

    it('removeSandbox removes the containers still in it', async () => {
      const pod = mkPod('rmsb');
      const { sandboxId } = await running(pod);
      await rt.stopSandbox(sandboxId);
      await rt.removeSandbox(sandboxId);
      expect((await rt.observePod(pod.metadata!.uid!)).containers).toEqual([]);
    });

    it('listPods lists every pod with its sandboxes and containers', async () => {
      const a = mkPod('la');
      const b = mkPod('lb', [app, { ...app, name: 'side' }]);
      await running(a);
      await running(b);
      const listed = new Map((await rt.listPods()).map((p) => [p.uid, p]));
      expect(shape(listed.get(a.metadata!.uid!)!)).toEqual(shape(await rt.observePod(a.metadata!.uid!)));
      expect(listed.get(b.metadata!.uid!)!.containers.map((c) => c.name).sort()).toEqual(['app', 'side']);
    });

    it('stop of an unknown sandbox and remove of an unknown container or sandbox are fine (already gone)', async () => {
      const unknown = crypto.randomBytes(32).toString('hex');
      await expect(rt.stopSandbox(unknown)).resolves.toBeUndefined();
      await expect(rt.stopContainer(unknown, 0)).resolves.toBeUndefined();
      await expect(rt.removeContainer(unknown)).resolves.toBeUndefined();
      await expect(rt.removeSandbox(unknown)).resolves.toBeUndefined();
    });

    it('observePod of an unknown UID is an empty pod', async () => {
      const uid = crypto.randomUUID();
      expect(await rt.observePod(uid)).toEqual({ uid, name: '', namespace: 'default', sandboxes: [], containers: [] });
    });

    it('cleanupPod after the pod is removed, and of a pod never seen, resolves', async () => {
      const pod = mkPod('clean');
      const { sandboxId } = await running(pod);
      await rt.stopSandbox(sandboxId);
      await rt.removeSandbox(sandboxId);
      await expect(rt.cleanupPod(pod.metadata!.uid!)).resolves.toBeUndefined();
      await expect(rt.cleanupPod(crypto.randomUUID())).resolves.toBeUndefined();
    });
  });
}
