/**
 * nodelet keeps no state of its own: after kill -9 it adopts what the runtime holds, and a
 * runtime that goes away and comes back is recovered without restarting nodelet.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureContainerd, stopContainerd } from '../../helpers/containerd.js';
import { eventually } from '../../helpers/nodelet.js';
import { busyboxPod, runtimeOperations, runtimePods, startPodNode, type PodNode } from './harness.js';

/** A containerd of its own: this file stops and starts it, and may run beside other files. */
const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-restarts';

let node: PodNode;

beforeAll(async () => {
  node = await startPodNode({ containerdDir: CONTAINERD_DIR });
});

afterAll(async () => {
  await ensureContainerd({ dir: CONTAINERD_DIR });
  await node?.close();
});

async function containerIds(): Promise<string[]> {
  return (await node.cri.listContainers()).filter((c) => c.labels['io.kubernetes.pod.uid']).map((c) => c.id).sort();
}

/** The `steady` static pod (a sleeper), once Running. */
async function steadyPod() {
  node.writeManifest('steady.yaml', busyboxPod('steady', 'sleep 3600'));
  return eventually(async () => {
    const p = await node.pod('steady');
    return p?.status?.phase === 'Running' ? p : undefined;
  }, 30_000);
}

describe('stateless restarts', () => {
  it('kill -9 then restart: the same sandboxes and container IDs, no duplicates, restart counts kept, orphans removed', async () => {
    node.writeManifest('steady.yaml', busyboxPod('steady', 'sleep 3600'));
    node.writeManifest('crashy.yaml', busyboxPod('crashy', 'sleep 1; exit 1'));
    node.writeManifest('doomed.yaml', busyboxPod('doomed', 'sleep 3600'));
    await eventually(async () => {
      const pods = await node.pods();
      const crashy = pods.find((p) => p.metadata!.name!.startsWith('crashy'));
      return pods.filter((p) => p.status?.phase === 'Running').length === 3 && (crashy?.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1;
    }, 40_000);
    const before = await node.pods();
    const steady = before.find((p) => p.metadata!.name!.startsWith('steady'))!;
    const steadyId = steady.status!.containerStatuses![0]!.containerID;
    const crashyRestarts = before.find((p) => p.metadata!.name!.startsWith('crashy'))!.status!.containerStatuses![0]!.restartCount;
    const sandboxesBefore = (await runtimePods(node.cri)).map((s) => s.id).sort();

    node.nodelet.kill('SIGKILL');
    await node.nodelet.exited;
    // While nodelet is down, a manifest goes away: the restarted nodelet must remove its pod.
    fs.rmSync(path.join(node.manifests, 'doomed.yaml'));
    const doomed = before.find((p) => p.metadata!.name!.startsWith('doomed'))!;
    const idsWhileDown = await containerIds();

    await node.restart();
    await eventually(async () => (await runtimePods(node.cri)).every((s) => s.labels['io.kubernetes.pod.uid'] !== doomed.metadata!.uid), 30_000);
    // A few relists later, the steady pod still has the very same container and sandbox.
    await new Promise((r) => setTimeout(r, 3000));
    const after = await node.pods();
    const steadyAfter = after.find((p) => p.metadata!.name!.startsWith('steady'))!;
    expect(steadyAfter.metadata!.uid).toBe(steady.metadata!.uid);
    expect(steadyAfter.status!.containerStatuses![0]!.containerID).toBe(steadyId);
    expect(steadyAfter.status!.containerStatuses![0]!.restartCount).toBe(0);
    const crashyAfter = after.find((p) => p.metadata!.name!.startsWith('crashy'))!;
    expect(crashyAfter.status!.containerStatuses![0]!.restartCount).toBeGreaterThanOrEqual(crashyRestarts);
    const steadyContainers = (await node.cri.listContainers({ labelSelector: { 'io.kubernetes.pod.uid': steady.metadata!.uid! } })).map((c) => c.id);
    expect(steadyContainers).toEqual([steadyId!.slice('containerd://'.length)]);
    const sandboxesAfter = (await runtimePods(node.cri)).map((s) => s.id).sort();
    expect(sandboxesAfter).toEqual(sandboxesBefore.filter((id) => sandboxesAfter.includes(id)));
    expect(sandboxesAfter.length).toBe(2);
    // Nothing that was there while nodelet was down was duplicated for the kept pods.
    const doomedIds = new Set((await node.cri.listContainers({ labelSelector: { 'io.kubernetes.pod.uid': doomed.metadata!.uid! } })).map((c) => c.id));
    expect(doomedIds.size).toBe(0);
    expect(idsWhileDown.length).toBeGreaterThan(0);
  });

  it('containerd stopped: the runtime is reported not ready and pods are kept; started again: recovered without restarting nodelet', async () => {
    const pod = await steadyPod();
    const id = pod.status!.containerStatuses![0]!.containerID;
    const pid = node.nodelet.pid;
    const mark = node.nodelet.records.length;

    await stopContainerd({ dir: CONTAINERD_DIR });
    const down = await node.nodelet.waitFor((r) => node.nodelet.records.indexOf(r) >= mark && /container runtime .* is not ready/.test(r.msg), 20_000);
    expect(down.level).toBe('warn');
    expect(down.reason).toBe('ContainerRuntimeDown');
    // nodelet keeps serving what it knew; it neither crashes nor forgets the pod.
    await new Promise((r) => setTimeout(r, 2000));
    expect((await node.pod('steady'))?.status?.containerStatuses?.[0]?.containerID).toBe(id);
    expect(node.nodelet.child.exitCode).toBeNull();

    const mark2 = node.nodelet.records.length;
    await ensureContainerd({ dir: CONTAINERD_DIR });
    await node.nodelet.waitFor((r) => node.nodelet.records.indexOf(r) >= mark2 && /container runtime .* is ready/.test(r.msg), 30_000);
    expect(node.nodelet.pid).toBe(pid);
    // The pod's container survived in its shim and is adopted, not recreated.
    await new Promise((r) => setTimeout(r, 2000));
    const again = await node.pod('steady');
    expect(again?.status?.containerStatuses?.[0]?.containerID).toBe(id);
    expect(again?.status?.phase).toBe('Running');
    // A new pod runs: the whole path works again.
    node.writeManifest('fresh.yaml', busyboxPod('fresh', 'sleep 3600'));
    await eventually(async () => (await node.pod('fresh'))?.status?.phase === 'Running', 30_000);
    // containerd's events are subscribed again (the relist went back to every second meanwhile).
    await node.nodelet.waitFor((r) => node.nodelet.records.indexOf(r) >= mark2 && /runtime events: subscribed to containerd's event service/.test(r.msg), 30_000);
  });

  it('runtime events (containerd 1.6: its own event service): idle, the runtime is listed every few seconds, not every second; a container stopped behind nodelet is seen and restarted at once', async () => {
    const pod = await steadyPod();
    await eventually(() => node.nodelet.records.some((r) => /runtime events: subscribed to containerd's event service/.test(r.msg) && r.source === 'containerd'), 30_000);
    // Settled (nothing starting): a window of 10 s.
    await new Promise((r) => setTimeout(r, 4000));
    const before = (await runtimeOperations(node)).list_podsandbox ?? 0;
    await new Promise((r) => setTimeout(r, 10_000));
    const lists = ((await runtimeOperations(node)).list_podsandbox ?? 0) - before;
    console.log(`ListPodSandbox calls in 10 s idle with runtime events: ${lists}`);
    expect(lists).toBeLessThanOrEqual(5);
    // Stopped through CRI by someone else: containerd's TaskExit event makes nodelet look at once.
    const id = pod.status!.containerStatuses![0]!.containerID!.slice('containerd://'.length);
    const started = Date.now();
    await node.cri.stopContainer(id, 0);
    await eventually(async () => {
      const s = (await node.pod('steady'))?.status?.containerStatuses?.[0];
      return s?.restartCount === 1 && s.state?.running ? s : undefined;
    }, 20_000, 50);
    const ms = Date.now() - started;
    console.log(`a container stopped behind nodelet: restarted and reported ${ms} ms after the stop`);
    expect(ms).toBeLessThan(5000);
  });
});
