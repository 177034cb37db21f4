/**
 * Static pods through CRI on a real containerd: run, edit, delete, crash-loop backoff,
 * seccomp Localhost profiles. One nodelet for the file; each test removes its pods.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eventually, freePort } from '../../helpers/nodelet.js';
import https from 'node:https';
import { decodeAllocationCheckpoint } from '../../../src/pods/sync/allocation.js';
import { busyboxPod, containerLog, NODE_NAME, runtimePods, startPodNode, type PodNode } from './harness.js';

let node: PodNode;

beforeAll(async () => {
  node = await startPodNode();
});

afterAll(async () => {
  await node?.close();
});

afterEach(async () => {
  for (const f of fs.readdirSync(node.manifests)) fs.rmSync(path.join(node.manifests, f));
  await eventually(async () => (await runtimePods(node.cri)).length === 0, 60_000);
});

/** GET over HTTPS to the node (its self-signed serving certificate is not what this test checks). */
function httpsGet(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    https
      .get(url, { rejectUnauthorized: false }, (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

async function running(name: string, timeoutMs = 30_000): Promise<Pod> {
  return eventually(async () => {
    const p = await node.pod(name);
    return p?.status?.phase === 'Running' && p.status.containerStatuses?.every((c) => c.state?.running) ? p : undefined;
  }, timeoutMs);
}

async function runtimeContainers(uid: string) {
  return node.cri.listContainers({ labelSelector: { 'io.kubernetes.pod.uid': uid } });
}

describe('static pods on containerd', () => {
  it('runs a pod from a manifest: sandbox and container carry the kubelet labels; command, args and env are used', async () => {
    node.writeManifest(
      'hello.yaml',
      busyboxPod('hello', 'echo "$GREETING from $0 in $(pwd)"; sleep 3600', {
        container: { args: ['nodelet'], env: [{ name: 'GREETING', value: 'hi' }], workingDir: '/tmp', resources: { limits: { cpu: '100m', memory: '32Mi' } } },
      }),
    );
    const pod = await running('hello');
    expect(pod.metadata).toMatchObject({ name: `hello-${NODE_NAME}`, namespace: 'default' });
    expect(pod.metadata!.uid).toMatch(/^[0-9a-f]{32}$/);
    const cs = pod.status!.containerStatuses![0]!;
    expect(cs).toMatchObject({ name: 'main', ready: true, restartCount: 0 });
    expect(cs.containerID).toMatch(/^containerd:\/\/[0-9a-f]{64}$/);

    const [sandbox] = await runtimePods(node.cri);
    expect(sandbox!.labels).toMatchObject({ 'io.kubernetes.pod.name': `hello-${NODE_NAME}`, 'io.kubernetes.pod.namespace': 'default', 'io.kubernetes.pod.uid': pod.metadata!.uid, test: 'hello' });
    const [container] = await runtimeContainers(pod.metadata!.uid!);
    expect(container!.id).toBe(cs.containerID!.slice('containerd://'.length));
    expect(container!.labels['io.kubernetes.container.name']).toBe('main');
    expect(container!.annotations['io.kubernetes.container.restartCount']).toBe('0');
    await eventually(() => containerLog(node, pod, 'main').includes('hi from nodelet in /tmp'), 10_000);
  });

  it('env on containerd: the downward API and $(VAR) expansion in env and args, as the kubelet', async () => {
    node.writeManifest(
      'downward.yaml',
      busyboxPod('downward', 'echo "pod=$POD node=$NODE ns=$NS greeting=$GREETING arg=$0"; sleep 3600', {
        container: {
          args: ['$(GREETING)'],
          env: [
            { name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
            { name: 'NODE', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
            { name: 'NS', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
            { name: 'GREETING', value: 'hi-$(NODE)' },
          ],
        },
      }),
    );
    const pod = await running('downward');
    await eventually(() => containerLog(node, pod, 'main').includes(`pod=downward-${NODE_NAME} node=${NODE_NAME} ns=default greeting=hi-${NODE_NAME} arg=hi-${NODE_NAME}`), 10_000);
  });

  it('GET /containerLogs on containerd: tail with timestamps, previous instance, follow, and 4xx naming what is wrong', async () => {
    node.writeManifest('talker.yaml', busyboxPod('talker', 'for i in 1 2 3; do echo line-$i; done; sleep 1; echo late; exit 1'));
    // Restarted once: instance 0 said everything and exited 1.
    await eventually(async () => ((await node.pod('talker'))?.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1, 30_000);
    const get = (q: string) => httpsGet(`https://127.0.0.1:${node.port}/containerLogs/default/talker-${NODE_NAME}/main${q}`);
    const prev = await get('?previous=true&timestamps=true&tailLines=2');
    expect(prev.status).toBe(200);
    expect(prev.body).toMatch(/^\d{4}-\d{2}-\d{2}T\S+Z line-3\n\d{4}-\d{2}-\d{2}T\S+Z late\n$/);
    // follow on the current instance: what it writes after the request, until it exits.
    const followed = await get('?follow=true');
    expect(followed.status).toBe(200);
    expect(followed.body).toBe('line-1\nline-2\nline-3\nlate\n');
    expect((await get('?tailLines=x')).status).toBe(400);
    expect((await httpsGet(`https://127.0.0.1:${node.port}/containerLogs/default/talker-${NODE_NAME}/nope`)).body).toContain('container \\"nope\\" not found in pod');
    expect((await httpsGet(`https://127.0.0.1:${node.port}/containerLogs/default/absent/main`)).status).toBe(404);
  });

  it('replaces the pod when its manifest is edited, and removes it when the manifest is deleted', async () => {
    node.writeManifest('web.yaml', busyboxPod('web', 'echo v1; sleep 3600'));
    const v1 = await running('web');
    const v1Container = v1.status!.containerStatuses![0]!.containerID;

    node.writeManifest('web.yaml', busyboxPod('web', 'echo v2; sleep 3600'));
    const v2 = await eventually(async () => {
      const p = await running('web');
      return p.metadata!.uid !== v1.metadata!.uid ? p : undefined;
    }, 40_000);
    expect(v2.status!.containerStatuses![0]!.containerID).not.toBe(v1Container);
    await eventually(async () => (await runtimeContainers(v1.metadata!.uid!)).length === 0, 30_000);
    await eventually(() => containerLog(node, v2, 'main').includes('v2'), 10_000);
    expect((await node.pods()).map((p) => p.metadata!.name)).toEqual([`web-${NODE_NAME}`]);

    fs.rmSync(path.join(node.manifests, 'web.yaml'));
    await eventually(async () => (await node.pods()).length === 0, 10_000);
    await eventually(async () => (await runtimePods(node.cri)).length === 0 && (await runtimeContainers(v2.metadata!.uid!)).length === 0, 30_000);
  });

  it("keeps the kubelet's allocated_pods_state and actuated_pods_state: what the pod was allocated and its container started with, until the pod goes", async () => {
    const resources = { requests: { cpu: '100m', memory: '32Mi' }, limits: { memory: '64Mi' } };
    node.writeManifest('sized.yaml', busyboxPod('sized', 'sleep 3600', { container: { resources } }));
    const uid = (await running('sized')).metadata!.uid!;
    const record = (file: string) => decodeAllocationCheckpoint(fs.readFileSync(path.join(node.rootDir, file), 'utf8'));
    const want = { ContainerResources: { main: { limits: { memory: '64Mi' }, requests: { cpu: '100m', memory: '32Mi' } } } };
    expect(record('allocated_pods_state')[uid]).toEqual(want);
    expect(record('actuated_pods_state')[uid]).toEqual(want);
    expect(fs.statSync(path.join(node.rootDir, 'allocated_pods_state')).mode & 0o777).toBe(0o600);

    fs.rmSync(path.join(node.manifests, 'sized.yaml'));
    await eventually(() => !(uid in record('allocated_pods_state')) && !(uid in record('actuated_pods_state')), 30_000);
  });

  it('skips a malformed manifest with a log naming the file and the reason; the other pods keep running', async () => {
    node.writeManifest('good.yaml', busyboxPod('good', 'sleep 3600'));
    const good = await running('good');
    fs.writeFileSync(path.join(node.manifests, 'bad.yaml'), 'apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n  - name: x\n');
    fs.writeFileSync(path.join(node.manifests, '.hidden.yaml'), 'not: a pod');
    const rec = await node.nodelet.waitFor((r) => r.msg.includes('skipping static pod manifest') && String(r.file).endsWith('bad.yaml'));
    expect(rec.msg).toContain('spec.containers[0].image: required');
    expect(node.nodelet.records.some((r) => String(r.file ?? '').endsWith('.hidden.yaml'))).toBe(false);
    await new Promise((r) => setTimeout(r, 1500));
    const after = await running('good');
    expect(after.status!.containerStatuses![0]!.containerID).toBe(good.status!.containerStatuses![0]!.containerID);
    expect((await node.pods()).length).toBe(1);
  });

  it('backs a crashing container off with CrashLoopBackOff and a rising restart count', async () => {
    node.writeManifest('crash.yaml', busyboxPod('crash', 'echo crashing; exit 3'));
    const looping = await eventually(async () => {
      const p = await node.pod('crash');
      const cs = p?.status?.containerStatuses?.[0];
      return cs?.state?.waiting?.reason === 'CrashLoopBackOff' && cs.restartCount >= 1 ? p : undefined;
    }, 40_000);
    const cs = looping.status!.containerStatuses![0]!;
    expect(cs.lastState?.terminated).toMatchObject({ exitCode: 3, reason: 'Error' });
    expect(cs.state!.waiting!.message).toMatch(/back-off \d+s restarting failed container=main/);
    expect(looping.status!.phase).toBe('Running');
    // The restart count keeps rising (the backoff after the second crash is 10 s).
    await eventually(async () => ((await node.pod('crash'))?.status?.containerStatuses?.[0]?.restartCount ?? 0) > cs.restartCount, 45_000);
    // One container per restart in the runtime, each with its restart count.
    const counts = (await runtimeContainers(looping.metadata!.uid!)).map((c) => Number(c.annotations['io.kubernetes.container.restartCount']));
    expect(new Set(counts).size).toBe(counts.length);
  });

  it('restartPolicy Never: a finished pod is Succeeded and its container is not restarted', async () => {
    node.writeManifest('once.yaml', busyboxPod('once', 'echo done', { restartPolicy: 'Never' }));
    const done = await eventually(async () => {
      const p = await node.pod('once');
      return p?.status?.phase === 'Succeeded' ? p : undefined;
    }, 30_000);
    expect(done.status!.containerStatuses![0]).toMatchObject({ restartCount: 0, state: { terminated: { exitCode: 0, reason: 'Completed' } } });
    await new Promise((r) => setTimeout(r, 2000));
    expect((await runtimeContainers(done.metadata!.uid!)).length).toBe(1);
  });

  it('termination messages on containerd: what the container wrote at its terminationMessagePath, or with FallbackToLogsOnError and nothing written, its last log lines', async () => {
    node.writeManifest('bye.yaml', busyboxPod('bye', 'echo bye > /dev/termination-log; exit 3', { restartPolicy: 'Never' }));
    node.writeManifest(
      'fallback.yaml',
      // stdout and stderr are copied into the log separately: the pause puts the stderr line after every stdout line in the file.
      busyboxPod('fallback', 'i=1; while [ $i -le 100 ]; do echo line-$i; i=$((i+1)); done; sleep 1; echo oops >&2; exit 2', { restartPolicy: 'Never', container: { terminationMessagePolicy: 'FallbackToLogsOnError' } }),
    );
    // The kubelet's conformance case: a non-root user at a non-default path (the file is 0666).
    node.writeManifest('nonroot.yaml', busyboxPod('nonroot', 'echo from-uid-$(id -u) > /tmp/msg', { restartPolicy: 'Never', container: { terminationMessagePath: '/tmp/msg', securityContext: { runAsUser: 1000 } } }));
    const finished = (name: string, phase: string) =>
      eventually(async () => {
        const p = await node.pod(name);
        return p?.status?.phase === phase ? p : undefined;
      }, 30_000);

    const bye = await finished('bye', 'Failed');
    expect(bye.status!.containerStatuses![0]!.state!.terminated).toMatchObject({ exitCode: 3, reason: 'Error', message: 'bye\n' });
    // The file the message came from: pods/<uid>/containers/<name>/<8 hex digits>, mode 0666.
    const byeDir = path.join(node.rootDir, 'pods', bye.metadata!.uid!, 'containers', 'main');
    const files = fs.readdirSync(byeDir);
    expect(files).toEqual([expect.stringMatching(/^[0-9a-f]{8}$/)]);
    expect(fs.readFileSync(path.join(byeDir, files[0]!), 'utf8')).toBe('bye\n');
    expect(fs.statSync(path.join(byeDir, files[0]!)).mode & 0o777).toBe(0o666);

    const fb = await finished('fallback', 'Failed');
    const lastLines = `${Array.from({ length: 79 }, (_, i) => `line-${i + 22}`).join('\n')}\noops\n`;
    expect(fb.status!.containerStatuses![0]!.state!.terminated).toMatchObject({ exitCode: 2, reason: 'Error', message: lastLines });

    const nonroot = await finished('nonroot', 'Succeeded');
    expect(nonroot.status!.containerStatuses![0]!.state!.terminated).toMatchObject({ exitCode: 0, message: 'from-uid-1000\n' });

    // The files go with the pod.
    fs.rmSync(path.join(node.manifests, 'bye.yaml'));
    await eventually(() => !fs.existsSync(path.join(node.rootDir, 'pods', bye.metadata!.uid!)), 30_000);
  });

  it('probes on containerd: an httpGet readiness probe makes the container ready; a failing exec liveness probe restarts it', async () => {
    const port = await freePort();
    node.writeManifest(
      'probed.yaml',
      busyboxPod('probed', '', {
        spec: {
          containers: [
            {
              name: 'main',
              image: 'docker.io/local/busybox:latest',
              imagePullPolicy: 'IfNotPresent',
              command: ['/bin/sh', '-c', 'touch /tmp/healthy; sleep 3; rm /tmp/healthy; sleep 3600'],
              livenessProbe: { exec: { command: ['cat', '/tmp/healthy'] }, periodSeconds: 1, failureThreshold: 1 },
            },
            {
              name: 'web',
              image: 'docker.io/local/busybox:latest',
              imagePullPolicy: 'IfNotPresent',
              command: ['/bin/sh', '-c', `mkdir -p /www && echo ok > /www/index.html && sleep 2 && exec httpd -f -p 127.0.0.1:${port} -h /www`],
              ports: [{ name: 'http', containerPort: port }],
              readinessProbe: { httpGet: { host: '127.0.0.1', port: 'http', path: '/index.html' }, periodSeconds: 1 },
            },
          ],
        },
      }),
    );
    // web: running but not ready until httpd answers (it starts 2 s late).
    const notReady = await eventually(async () => {
      const p = await node.pod('probed');
      const web = p?.status?.containerStatuses?.find((c) => c.name === 'web');
      return web?.state?.running ? web : undefined;
    }, 30_000);
    expect(notReady.ready).toBe(false);
    const ready = await eventually(async () => {
      const p = await node.pod('probed');
      return p?.status?.containerStatuses?.find((c) => c.name === 'web')?.ready ? p : undefined;
    }, 15_000);
    expect(ready.status!.containerStatuses!.find((c) => c.name === 'web')).toMatchObject({ started: true, state: { running: {} } });
    // main: /tmp/healthy goes after 3 s, the liveness probe fails, the container is killed and restarted.
    const restarted = await eventually(async () => {
      const p = await node.pod('probed');
      const main = p?.status?.containerStatuses?.find((c) => c.name === 'main');
      return main && main.restartCount >= 1 && main.lastState?.terminated ? main : undefined;
    }, 30_000);
    expect(restarted.lastState!.terminated).toMatchObject({ exitCode: 137 });
    expect(node.nodelet.records.some((r) => r.level === 'warn' && /liveness probe failed 1 times: cat: can't open '\/tmp\/healthy'/.test(r.msg))).toBe(true);
  });

  it('volumes on containerd: an emptyDir shared by two containers, a hostPath the host sees, a readOnly mount; the emptyDir goes with the pod', async () => {
    const hostDir = path.join(node.dir, 'host-data');
    node.writeManifest(
      'vols.yaml',
      busyboxPod('vols', '', {
        spec: {
          volumes: [
            { name: 'shared', emptyDir: {} },
            { name: 'data', hostPath: { path: hostDir, type: 'DirectoryOrCreate' } },
          ],
          containers: [
            {
              name: 'writer',
              image: 'docker.io/local/busybox:latest',
              imagePullPolicy: 'IfNotPresent',
              command: ['/bin/sh', '-c', 'echo from-writer > /shared/note; echo on-host > /data/out; sleep 3600'],
              volumeMounts: [{ name: 'shared', mountPath: '/shared' }, { name: 'data', mountPath: '/data' }],
            },
            {
              name: 'reader',
              image: 'docker.io/local/busybox:latest',
              imagePullPolicy: 'IfNotPresent',
              command: ['/bin/sh', '-c', 'until [ -f /shared/note ]; do sleep 0.2; done; cat /shared/note; touch /shared/ro 2>/dev/null || echo read-only; sleep 3600'],
              volumeMounts: [{ name: 'shared', mountPath: '/shared', readOnly: true }],
            },
          ],
        },
      }),
    );
    const pod = await running('vols');
    await eventually(() => containerLog(node, pod, 'reader').includes('from-writer') && containerLog(node, pod, 'reader').includes('read-only'), 15_000);
    expect(fs.readFileSync(path.join(hostDir, 'out'), 'utf8')).toBe('on-host\n');
    const emptyDir = path.join(node.rootDir, 'pods', pod.metadata!.uid!, 'volumes', 'kubernetes.io~empty-dir', 'shared');
    expect(fs.readFileSync(path.join(emptyDir, 'note'), 'utf8')).toBe('from-writer\n');
    fs.rmSync(path.join(node.manifests, 'vols.yaml'));
    await eventually(() => !fs.existsSync(path.join(node.rootDir, 'pods', pod.metadata!.uid!)), 30_000);
    expect(fs.existsSync(path.join(hostDir, 'out'))).toBe(true);
  });

  it('lifecycle hooks on containerd: postStart runs after the start, preStop before the stop', async () => {
    const hostDir = path.join(node.dir, 'hooks');
    node.writeManifest(
      'hooked.yaml',
      busyboxPod('hooked', 'sleep 3600', {
        container: {
          volumeMounts: [{ name: 'data', mountPath: '/data' }],
          lifecycle: {
            postStart: { exec: { command: ['/bin/sh', '-c', 'echo started > /data/poststart'] } },
            preStop: { exec: { command: ['/bin/sh', '-c', 'echo drained > /data/prestop'] } },
          },
        },
        spec: { terminationGracePeriodSeconds: 5, volumes: [{ name: 'data', hostPath: { path: hostDir, type: 'DirectoryOrCreate' } }] },
      }),
    );
    await running('hooked');
    expect(fs.readFileSync(path.join(hostDir, 'poststart'), 'utf8')).toBe('started\n');
    expect(fs.existsSync(path.join(hostDir, 'prestop'))).toBe(false);
    fs.rmSync(path.join(node.manifests, 'hooked.yaml'));
    await eventually(() => fs.existsSync(path.join(hostDir, 'prestop')), 20_000);
    expect(fs.readFileSync(path.join(hostDir, 'prestop'), 'utf8')).toBe('drained\n');
  });

  it('a volume nodelet cannot set up leaves the container waiting with CreateContainerConfigError naming it; a static pod showing an API object is skipped naming the field', async () => {
    node.writeManifest('csivol.yaml', busyboxPod('csivol', 'sleep 3600', { container: { volumeMounts: [{ name: 'data', mountPath: '/data' }] }, spec: { volumes: [{ name: 'data', csi: { driver: 'example.com/none' } }] } }));
    const waiting = await eventually(async () => {
      const w = (await node.pod('csivol'))?.status?.containerStatuses?.[0]?.state?.waiting;
      return w?.reason === 'CreateContainerConfigError' ? w : undefined; // ContainerCreating first, until the sync tried
    }, 20_000);
    expect(waiting).toMatchObject({ reason: 'CreateContainerConfigError', message: expect.stringContaining('volume "data": type csi is not supported by nodelet') });
    // A static pod cannot refer to API objects (the kubelet's PreventStaticPodAPIReferences): the manifest is skipped, naming the field.
    node.writeManifest('cfgvol.yaml', busyboxPod('cfgvol', 'sleep 3600', { container: { volumeMounts: [{ name: 'cfg', mountPath: '/cfg' }] }, spec: { volumes: [{ name: 'cfg', configMap: { name: 'app' } }] } }));
    const skipped = await node.nodelet.waitFor((r) => String(r.file ?? '').endsWith('cfgvol.yaml') && /skipping static pod manifest/.test(r.msg), 20_000);
    expect(skipped.msg).toContain('spec.volumes[0].configMap: a static pod cannot refer to API objects (ConfigMap "app")');
    expect(await node.pod('cfgvol')).toBeUndefined();
  });

  it('runs init containers in order to completion before the containers', async () => {
    node.writeManifest(
      'init.yaml',
      busyboxPod('init', 'cat /tmp/order 2>/dev/null; echo main-started; sleep 3600', {
        spec: {
          initContainers: [
            { name: 'first', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', 'echo first; sleep 1'] },
            { name: 'second', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', 'echo second'] },
          ],
        },
      }),
    );
    const pod = await running('init');
    const init = pod.status!.initContainerStatuses!;
    expect(init.map((c) => [c.name, c.state?.terminated?.exitCode])).toEqual([
      ['first', 0],
      ['second', 0],
    ]);
    const first = new Date(init[0]!.state!.terminated!.finishedAt!).getTime();
    const second = new Date(init[1]!.state!.terminated!.startedAt!).getTime();
    expect(second).toBeGreaterThanOrEqual(first - 1000);
    const mainStart = new Date(pod.status!.containerStatuses![0]!.state!.running!.startedAt!).getTime();
    expect(mainStart).toBeGreaterThanOrEqual(new Date(init[1]!.state!.terminated!.finishedAt!).getTime() - 1000);
  });
});

describe('seccomp Localhost profiles', () => {
  it('a missing profile file leaves the container waiting with CreateContainerError naming the file', async () => {
    node.writeManifest(
      'nosuch.yaml',
      busyboxPod('nosuch', 'sleep 3600', { container: { securityContext: { seccompProfile: { type: 'Localhost', localhostProfile: 'profiles/missing.json' } } } }),
    );
    const p = await eventually(async () => {
      const pod = await node.pod('nosuch');
      return pod?.status?.containerStatuses?.[0]?.state?.waiting?.reason === 'CreateContainerError' ? pod : undefined;
    }, 30_000);
    expect(p.status!.containerStatuses![0]!.state!.waiting!.message).toContain(path.join(node.rootDir, 'seccomp', 'profiles/missing.json'));
    expect((await runtimeContainers(p.metadata!.uid!)).length).toBe(0);
  });

  it('an existing profile is enforced: a syscall it denies fails inside the container, the rest works', async () => {
    const dir = path.join(node.rootDir, 'seccomp', 'profiles');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(
      path.join(dir, 'no-mkdir.json'),
      JSON.stringify({ defaultAction: 'SCMP_ACT_ALLOW', syscalls: [{ names: ['mkdir', 'mkdirat'], action: 'SCMP_ACT_ERRNO', errnoRet: 1 }] }),
    );
    node.writeManifest(
      'confined.yaml',
      busyboxPod('confined', 'if mkdir /tmp/x; then echo mkdir-allowed; else echo mkdir-denied; fi; touch /tmp/y && echo touch-ok; sleep 3600', {
        // The pod's setting, inherited by the container.
        spec: { securityContext: { seccompProfile: { type: 'Localhost', localhostProfile: 'profiles/no-mkdir.json' } } },
      }),
    );
    const pod = await running('confined');
    const log = await eventually(() => {
      const l = containerLog(node, pod, 'main');
      return l.includes('touch-ok') ? l : undefined;
    }, 10_000);
    expect(log).toContain('mkdir-denied');
    expect(log).not.toContain('mkdir-allowed');

    // The same command without the profile can mkdir: the profile made the difference.
    node.writeManifest('free.yaml', busyboxPod('free', 'if mkdir /tmp/x; then echo mkdir-allowed; else echo mkdir-denied; fi; sleep 3600'));
    const free = await running('free');
    expect(await eventually(() => containerLog(node, free, 'main').includes('mkdir-allowed'), 10_000)).toBe(true);
  });

  it('a profile of the wrong shape is refused before creation with CreateContainerError naming the file', async () => {
    const dir = path.join(node.rootDir, 'seccomp');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'notify.json'), JSON.stringify({ defaultAction: 'SCMP_ACT_NOTIFY' }));
    node.writeManifest('badprofile.yaml', busyboxPod('badprofile', 'sleep 3600', { container: { securityContext: { seccompProfile: { type: 'Localhost', localhostProfile: 'notify.json' } } } }));
    const p = await eventually(async () => {
      const pod = await node.pod('badprofile');
      return pod?.status?.containerStatuses?.[0]?.state?.waiting?.reason === 'CreateContainerError' ? pod : undefined;
    }, 30_000);
    expect(p.status!.containerStatuses![0]!.state!.waiting!.message).toMatch(/notify\.json.*defaultAction: SCMP_ACT_NOTIFY cannot be the default action/);
  });
});
