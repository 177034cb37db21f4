/**
 * CriPodRuntime, the pod manager's runtime port, over the CRI client against the test CRI
 * server: what a relist costs in CRI calls, and that what it observes stays right.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CriPodRuntime } from '../../../src/pods/cri/cri-pod-runtime.js';
import type { FakeRuntime } from '../../cri/fake-runtime.js';
import { startFakeCriPodRuntime, type FakeCriPodRuntime } from '../../helpers/fake-cri-runtime.js';

let bench: FakeCriPodRuntime | undefined;
let cri: FakeRuntime;
let rt: CriPodRuntime;

beforeAll(async () => {
  ({ cri, rt } = bench = await startFakeCriPodRuntime('nodelet-cripodruntime-'));
});

afterAll(() => bench?.close());

const pod: Pod = {
  metadata: { name: 'web', namespace: 'default', uid: 'u-web' },
  spec: { hostNetwork: true, containers: [{ name: 'a', image: 'docker.io/local/busybox:latest', command: ['sleep', '3600'] }, { name: 'b', image: 'docker.io/local/busybox:latest', command: ['sleep', '3600'] }] },
};

const statusCalls = () => cri.calls.filter((c) => c.method === 'ContainerStatus').length;

describe('CriPodRuntime relist', () => {
  it('asks ContainerStatus only for containers that are new or changed state, and still sees every change', async () => {
    const sandboxId = await rt.runSandbox(pod, 0);
    const ids: string[] = [];
    for (const c of pod.spec!.containers) ids.push(await rt.startContainer({ pod, container: c, sandboxId, sandboxAttempt: 0, restartCount: 0, init: false }));

    let before = statusCalls();
    const [first] = await rt.listPods();
    expect(first!.containers.map((c) => [c.name, c.state])).toEqual([['a', 'running'], ['b', 'running']]);
    expect(statusCalls() - before).toBe(2);

    // Nothing changed: the next relists and observations ask nothing more.
    before = statusCalls();
    await rt.listPods();
    const again = await rt.observePod('u-web');
    expect(statusCalls() - before).toBe(0);
    expect(again.containers).toEqual(first!.containers);

    // One container exits: only it is asked about, and its exit is seen.
    cri.exitContainer(ids[1]!, 3);
    before = statusCalls();
    const [after] = await rt.listPods();
    expect(statusCalls() - before).toBe(1);
    expect(after!.containers.find((c) => c.name === 'b')).toMatchObject({ state: 'exited', exitCode: 3, finishedAt: expect.any(Number) });
    expect(after!.containers.find((c) => c.name === 'a')).toEqual(first!.containers.find((c) => c.name === 'a'));

    // Removed containers are forgotten.
    await rt.removeContainer(ids[1]!);
    const [removed] = await rt.listPods();
    expect(removed!.containers.map((c) => c.name)).toEqual(['a']);
  });
});

describe('CriPodRuntime relist short-cut', () => {
  const other: Pod = { metadata: { name: 'keep', namespace: 'default', uid: 'u-keep' }, spec: { hostNetwork: true, containers: [{ name: 'a', image: 'docker.io/local/busybox:latest', command: ['sleep', '3600'] }] } };
  const relisted = async () => (await rt.listPods()).find((o) => o.uid === 'u-keep')!;

  it('hands back the same observation while nothing of the pod changed, and a new one for each change', async () => {
    const sandboxId = await rt.runSandbox(other, 0);
    const start = (restartCount: number) => rt.startContainer({ pod: other, container: other.spec!.containers[0]!, sandboxId, sandboxAttempt: 0, restartCount, init: false });
    const first = await start(0);
    const o1 = await relisted();
    const calls = cri.calls.length;
    expect(await relisted()).toBe(o1);
    // Unchanged: two list calls a relist, nothing else asked.
    expect(cri.calls.slice(calls).map((c) => c.method).sort()).toEqual(['ListContainers', 'ListPodSandbox']);

    // A state change.
    cri.exitContainer(first, 1);
    const o2 = await relisted();
    expect(o2).not.toBe(o1);
    expect(o2.containers.map((c) => [c.id, c.state, c.exitCode])).toEqual([[first, 'exited', 1]]);
    expect(await relisted()).toBe(o2);

    // A new container (the restart), then the old one removed: the same count of containers as before, another ID.
    const second = await start(1);
    const o3 = await relisted();
    expect(o3.containers.map((c) => c.id).sort()).toEqual([first, second].sort());
    await rt.removeContainer(first);
    const o4 = await relisted();
    expect(o4).not.toBe(o3);
    expect(o4.containers.map((c) => [c.id, c.state, c.restartCount])).toEqual([[second, 'running', 1]]);
    expect(o4.containers.length).toBe(o1.containers.length);
    expect(await relisted()).toBe(o4);

    // The sandbox stopped: a change too.
    await rt.stopSandbox(sandboxId);
    const o5 = await relisted();
    expect(o5.sandboxes.map((s) => s.ready)).toEqual([false]);
  });
});

describe('CriPodRuntime container start', () => {
  const run = <T>(f: () => Promise<T>) => f();
  const image = 'docker.io/local/busybox:latest';
  const withUid = (uid: string, container: Container): Pod => ({ metadata: { name: uid, namespace: 'default', uid }, spec: { hostNetwork: true, containers: [container] } });
  const messageFiles = (uid: string, name: string) => {
    const dir = path.join(bench!.dir, 'pods', uid, 'containers', name);
    return fs.existsSync(dir) ? fs.readdirSync(dir) : [];
  };

  it('asks ImageStatus once for a present image: the status ensureImage found gives the image user for the config', async () => {
    const p = withUid('u-once', { name: 'app', image, imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] });
    const sandboxId = await rt.runSandbox(p, 0);
    const before = cri.callsOf('ImageStatus').length;
    expect(await rt.ensureImage(p, p.spec!.containers[0]!, run)).toBe(false);
    const id = await rt.startContainer({ pod: p, container: p.spec!.containers[0]!, sandboxId, sandboxAttempt: 0, restartCount: 0, init: false });
    expect(cri.callsOf('ImageStatus').length - before).toBe(1);
    // The next start (a restart) asks again: an answer is used once.
    expect(await rt.ensureImage(p, p.spec!.containers[0]!, run)).toBe(false);
    await rt.startContainer({ pod: p, container: p.spec!.containers[0]!, sandboxId, sandboxAttempt: 0, restartCount: 1, init: false });
    expect(cri.callsOf('ImageStatus').length - before).toBe(2);
    // Without ensureImage first (an image pulled by other means), it is asked at creation.
    await rt.startContainer({ pod: p, container: p.spec!.containers[0]!, sandboxId, sandboxAttempt: 0, restartCount: 2, init: false });
    expect(cri.callsOf('ImageStatus').length - before).toBe(3);
    expect(id).toMatch(/\w/);
  });

  it('a start refused on its config (runAsNonRoot, root image) leaves no termination-log file; a started one has its own', async () => {
    const refused = withUid('u-nonroot', { name: 'app', image, command: ['sleep', '3600'], securityContext: { runAsNonRoot: true } });
    const sandboxId = await rt.runSandbox(refused, 0);
    await expect(rt.startContainer({ pod: refused, container: refused.spec!.containers[0]!, sandboxId, sandboxAttempt: 0, restartCount: 0, init: false })).rejects.toMatchObject({ details: { reason: 'CreateContainerConfigError' } });
    expect(messageFiles('u-nonroot', 'app')).toEqual([]);
    const started = withUid('u-message', { name: 'app', image, command: ['sleep', '3600'] });
    const sb = await rt.runSandbox(started, 0);
    await rt.startContainer({ pod: started, container: started.spec!.containers[0]!, sandboxId: sb, sandboxAttempt: 0, restartCount: 0, init: false });
    const [file] = messageFiles('u-message', 'app');
    const create = cri.callsOf('CreateContainer').at(-1)!.request as { config: { mounts: { container_path?: string; containerPath?: string; host_path?: string; hostPath?: string }[] } };
    expect(create.config.mounts.map((m) => [m.containerPath ?? m.container_path, path.basename(m.hostPath ?? m.host_path ?? '')])).toEqual([['/dev/termination-log', file]]);
  });
});
