/**
 * CriPodRuntime, the pod manager's runtime port, over the CRI client against the test CRI
 * server: what a relist costs in CRI calls, and that what it observes stays right.
 */
import fs from 'node:fs';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CriPodRuntime } from '../../../src/pods/cri-pod-runtime.js';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { tempDir } from '../../helpers/nodelet.js';

let cri: FakeRuntime;
let client: CriClient;
let rt: CriPodRuntime;
let dir: string;

beforeAll(async () => {
  cri = await startFakeRuntime();
  client = createCriClient({ runtimeEndpoint: `unix://${cri.socketPath}`, requestTimeoutMs: 5000 });
  dir = tempDir('nodelet-cripodruntime-');
  rt = new CriPodRuntime({ cri: client, rootDir: dir, podLogsDir: `${dir}/logs`, seccompDefault: false });
});

afterAll(async () => {
  client?.close();
  await cri?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

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
