/**
 * Ephemeral containers end to end (issue 28), on a containerd of this file's own and the
 * test control plane: added through `pods/ephemeralcontainers` (a strategic merge patch, a
 * JSON patch, and kubectl 1.32's `kubectl debug`), started by nodelet in the pod's sandbox,
 * in the target's PID namespace when they name one, reported in
 * `status.ephemeralContainerStatuses`, reached by `kubectl exec`, `logs` and `attach`,
 * never restarted, and gone with the pod.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ContainerStatus, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS } from '../../../src/controlplane/client.js';
import { BUSYBOX_IMAGE } from '../../helpers/containerd.js';
import { KUBECTL, KubectlProcesses } from '../../helpers/kubectl.js';
import { eventually } from '../../helpers/nodelet.js';
import { busyboxPod, startNetworkedNode, tearDownNetworkedNode, type NetworkedNode } from '../../helpers/pod-network.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-ephemeral';
const NODE = 'ephemeralnode';
// The target's process, recognizable in another container's `ps`.
const TARGET_SCRIPT = 'exec sleep 31337';

let node: NetworkedNode | undefined;
const kubectls = new KubectlProcesses(() => path.join(node!.dir, 'admin.kubeconfig'));
const kubectl = (args: string[]) => kubectls.run(args, { timeoutMs: 30_000 });

const getPod = (name: string) => node!.api.get<Pod>(PODS, { namespace: 'default', name }).catch(() => undefined);
const ephemeralStatus = (p: Pod | undefined, name: string): ContainerStatus | undefined => p?.status?.ephemeralContainerStatuses?.find((s) => s.name === name);

function runningPod(name: string): Promise<Pod> {
  let last: Pod | undefined;
  return eventually(async () => {
    last = await getPod(name);
    return last?.status?.containerStatuses?.[0]?.state?.running ? last : undefined;
  }, 30_000, 100).catch((err: Error) => {
    throw new Error(`${err.message}: pod ${name} not running; status ${JSON.stringify(last?.status)}`);
  });
}

function ephemeralRunning(pod: string, name: string): Promise<ContainerStatus> {
  let last: Pod | undefined;
  return eventually(async () => {
    last = await getPod(pod);
    const st = ephemeralStatus(last, name);
    return st?.state?.running ? st : undefined;
  }, 30_000, 100).catch((err: Error) => {
    throw new Error(`${err.message}: ephemeral container ${name} of ${pod} not running; spec ${JSON.stringify(last?.spec?.ephemeralContainers)}, statuses ${JSON.stringify(last?.status?.ephemeralContainerStatuses)}; the pod's containers ${JSON.stringify(last?.status?.containerStatuses)}`);
  });
}

beforeAll(async () => {
  expect(fs.existsSync(KUBECTL), `${KUBECTL} is required`).toBe(true);
  node = await startNetworkedNode({ containerdDir: CONTAINERD_DIR, node: NODE, prefix: 'nodelet-ephemeral-', args: ['--node-ip', '127.0.0.1'] });
  // No service account token volume: what these pods test is their containers.
  await node.api.create<Pod>(PODS, busyboxPod(NODE, 'target', TARGET_SCRIPT, { automountServiceAccountToken: false }));
  await node.api.create<Pod>(PODS, busyboxPod(NODE, 'debugme', TARGET_SCRIPT, { automountServiceAccountToken: false }));
}, 60_000);

afterAll(async () => {
  await kubectls.stopAll();
  await tearDownNetworkedNode({ ...node });
}, 90_000);

describe('pods/ephemeralcontainers', () => {
  it('a strategic merge patch adds one with a target: it runs in the target\'s PID namespace, its status is reported, exec, logs and attach reach it', async () => {
    const { api } = node!;
    const before = await runningPod('target');
    await api.patch<Pod>(PODS, { namespace: 'default', name: 'target' }, {
      spec: { ephemeralContainers: [{ name: 'debugger', image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent', targetContainerName: 'main', command: ['/bin/sh', '-c', 'while true; do echo polo; sleep 0.5; done'] }] },
    }, { type: 'strategic', subresource: 'ephemeralcontainers' });
    const st = await ephemeralRunning('target', 'debugger');
    expect(st).toMatchObject({ name: 'debugger', ready: false, restartCount: 0, image: BUSYBOX_IMAGE, lastState: {} });
    expect(st.containerID).toMatch(/^containerd:\/\/[0-9a-f]{64}$/);
    // The app container was left alone, and the pod is still Running and Ready.
    const p = (await getPod('target'))!;
    expect(p.status?.containerStatuses?.[0]?.containerID).toBe(before.status?.containerStatuses?.[0]?.containerID);
    expect(p.status?.phase).toBe('Running');
    expect(p.status?.conditions?.find((c) => c.type === 'Ready')?.status).toBe('True');

    // The target's PID namespace: its process is PID 1 there, and `ps` lists it.
    const ps = await kubectl(['exec', 'target', '-c', 'debugger', '--', 'ps', '-o', 'pid,args']);
    expect(ps.code, ps.stderr).toBe(0);
    expect(ps.stdout).toMatch(/^\s*1\s+sleep 31337\s*$/m);
    const pid1 = await kubectl(['exec', 'target', '-c', 'debugger', '--', 'cat', '/proc/1/cmdline']);
    expect(pid1.stdout.split('\0').filter(Boolean)).toEqual(['sleep', '31337']);

    const logs = await kubectl(['logs', 'target', '-c', 'debugger', '--tail=2']);
    expect({ code: logs.code, stdout: logs.stdout }).toEqual({ code: 0, stdout: 'polo\npolo\n' });

    // attach: the output it writes from now on.
    const a = kubectls.background(['attach', 'target', '-c', 'debugger']);
    await eventually(() => /polo\npolo\n/.test(a.output()), 10_000, 50).catch(() => {
      throw new Error(`kubectl attach showed: ${JSON.stringify(a.output())}`);
    });
    await kubectls.stop(a.child);

    // GET of the subresource: the pod, with its one ephemeral container (defaulted by the server).
    const got = await api.get<Pod>(PODS, { namespace: 'default', name: 'target', subresource: 'ephemeralcontainers' });
    expect(got.spec?.ephemeralContainers).toEqual([
      { name: 'debugger', image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent', targetContainerName: 'main', command: ['/bin/sh', '-c', 'while true; do echo polo; sleep 0.5; done'], terminationMessagePath: '/dev/termination-log', terminationMessagePolicy: 'File' },
    ]);
  }, 90_000);

  it('a JSON patch adds a second one without a target: its own PID namespace; it exits and is never restarted', async () => {
    const { api } = node!;
    await ephemeralRunning('target', 'debugger');
    await api.patch<Pod>(PODS, { namespace: 'default', name: 'target' }, [
      { op: 'add', path: '/spec/ephemeralContainers/-', value: { name: 'short', image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', 'ps -o pid,args; exit 3'] } },
    ], { type: 'json', subresource: 'ephemeralcontainers' });
    const done = await eventually(async () => ephemeralStatus(await getPod('target'), 'short')?.state?.terminated, 30_000, 100);
    expect(done).toMatchObject({ exitCode: 3, reason: 'Error' });
    const logs = await kubectl(['logs', 'target', '-c', 'short']);
    expect(logs.stdout).not.toContain('sleep 31337');
    expect(logs.stdout).toMatch(/^\s*1\s+\/bin\/sh -c ps -o pid,args; exit 3\s*$/m);
    // Never restarted: the same container, still terminated, after a few more syncs.
    await new Promise((r) => setTimeout(r, 3000));
    const later = ephemeralStatus(await getPod('target'), 'short');
    expect(later?.state?.terminated?.containerID ?? later?.containerID).toBe(done.containerID);
    expect(later?.restartCount).toBe(0);
    const containers = (await node!.cri.listContainers({ labelSelector: { 'io.kubernetes.pod.uid': (await getPod('target'))!.metadata!.uid!, 'io.kubernetes.container.name': 'short' } })).length;
    expect(containers).toBe(1);
    // The first one still runs.
    expect(ephemeralStatus(await getPod('target'), 'debugger')?.state?.running).toBeTruthy();
  }, 60_000);

  it('refuses what kube-apiserver refuses, with its messages', async () => {
    const r = await kubectl(['patch', 'pod', 'target', '--subresource=ephemeralcontainers', '--type=strategic', '-p', JSON.stringify({ spec: { ephemeralContainers: [{ name: 'bad', image: BUSYBOX_IMAGE, ports: [{ containerPort: 80 }], targetContainerName: 'nope' }] } })]);
    expect(r.code).not.toBe(0);
    // kubectl prints each cause of the 422 on a line of its own.
    expect(r.stderr).toBe('The Pod "target" is invalid: \n* spec.ephemeralContainers[2].targetContainerName: Not found: "nope"\n* spec.ephemeralContainers[2].ports: Forbidden: cannot be set for an Ephemeral Container\n');
    const removed = await kubectl(['patch', 'pod', 'target', '--subresource=ephemeralcontainers', '--type=json', '-p', '[{"op":"remove","path":"/spec/ephemeralContainers/0"}]']);
    expect(removed.stderr).toContain('existing ephemeral containers "debugger" may not be removed');
    const dup = await kubectl(['patch', 'pod', 'target', '--subresource=ephemeralcontainers', '--type=strategic', '-p', JSON.stringify({ spec: { ephemeralContainers: [{ name: 'main', image: BUSYBOX_IMAGE }] } })]);
    expect(dup.stderr).toContain('spec.ephemeralContainers[2].name: Duplicate value: "main"');
    // Discovery lists the subresource, as kube-apiserver's.
    const res = await kubectl(['get', '--raw', '/api/v1']);
    expect(JSON.parse(res.stdout).resources).toContainEqual(expect.objectContaining({ name: 'pods/ephemeralcontainers', verbs: ['get', 'patch', 'update'] }));
  }, 30_000);
});

describe('kubectl debug', () => {
  it('-it --target: a shell that sees the target\'s processes; its status appears; it ends when the shell exits', async () => {
    await runningPod('debugme');
    // kubectl on a real pseudo-terminal (util-linux `script`), as in kubectl-streaming.test.ts.
    const { child: k, output, exited, seen } = kubectls.terminal(`debug -it debugme --image=${BUSYBOX_IMAGE} --image-pull-policy=IfNotPresent --target=main`, { seenMs: 30_000 });
    // kubectl names the container it made (debugger-xxxxx) and attaches to its shell.
    const name = (await seen(/Defaulting debug container name to (debugger-[a-z0-9]+)/))[1]!;
    await eventually(async () => {
      k.stdin.write('\r');
      await new Promise((r) => setTimeout(r, 200));
      return /# $/m.test(output());
    }, 20_000, 0);
    const mark = output().length;
    k.stdin.write('ps -o pid,args\r');
    await seen(/^\s*1\s+sleep 31337\s*\r?$/m, mark);
    const st = ephemeralStatus(await getPod('debugme'), name);
    expect(st).toMatchObject({ name, ready: false, image: BUSYBOX_IMAGE });
    expect(st?.state?.running).toBeTruthy();
    const spec = (await getPod('debugme'))!.spec!.ephemeralContainers!.find((c) => c.name === name);
    expect(spec).toMatchObject({ name, image: BUSYBOX_IMAGE, targetContainerName: 'main', stdin: true, tty: true });
    k.stdin.write('exit 0\r');
    expect(await exited).toBe(0);
    const done = await eventually(async () => ephemeralStatus(await getPod('debugme'), name)?.state?.terminated, 20_000, 100);
    expect(done.exitCode).toBe(0);
  }, 90_000);

  it('without -i: the container is made and runs the command; the pod\'s removal takes every container with it', async () => {
    // -v=8: what kubectl sends, a strategic merge patch of the subresource.
    const r = await kubectl(['-v=8', 'debug', 'debugme', `--image=${BUSYBOX_IMAGE}`, '--image-pull-policy=IfNotPresent', '--', 'sleep', '1d']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/\] PATCH https:\/\/[^ ]+\/api\/v1\/namespaces\/default\/pods\/debugme\/ephemeralcontainers\n.*Request Headers:\n(.*\n)*?.*Content-Type: application\/strategic-merge-patch\+json\n(.*\n)*?.*Response Status: 200 OK/);
    const name = /Defaulting debug container name to (debugger-[a-z0-9]+)/.exec(r.stderr + r.stdout)?.[1];
    expect(name).toBeDefined();
    await ephemeralRunning('debugme', name!);
    const uid = (await getPod('debugme'))!.metadata!.uid!;
    const ps = await kubectl(['exec', 'debugme', '-c', name!, '--', 'ps', '-o', 'pid,args']);
    expect(ps.stdout).toMatch(/^\s*1\s+sleep 1d\s*$/m);
    await node!.api.delete(PODS, { namespace: 'default', name: 'debugme' });
    await eventually(async () => (await node!.cri.listContainers({ labelSelector: { 'io.kubernetes.pod.uid': uid } })).length === 0 && !(await getPod('debugme')), 30_000, 100);
  }, 60_000);
});
