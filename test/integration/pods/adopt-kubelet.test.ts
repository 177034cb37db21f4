/**
 * Taking a node over from a kubelet: before nodelet starts, the test leaves in containerd
 * exactly what a v1.35 kubelet leaves for two pods (test/helpers/kubelet-cri.ts: the
 * kubelet's labels and annotations, no label of nodelet's), an API pod (its UID from the
 * control plane) and a static pod whose manifest declares its UID. Each has one sandbox and
 * two running containers, one of them after 3 restarts (attempt 3, its exited attempt 2
 * beside it). nodelet, started with both pods desired, must adopt them: the same sandbox
 * and containers, nothing created, started or stopped, restart count 3 in its status; and
 * a container stopped afterwards is restarted by nodelet as attempt 4 (after the back-off
 * of a fourth restart: 40 s by default, 10 s here with the kubelet's
 * `crashLoopBackOff.maxContainerRestartPeriod: 10s`). Last, what docs/operating.md says
 * of a kubelet's static pod without a declared UID: nodelet's UID differs, so the pod is
 * replaced once.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS } from '../../../src/controlplane/client.js';
import { containerHash } from '../../../src/pods/sync/container-hash.js';
import { LABEL_MANAGED_BY, LABEL_NODELET_NODE } from '../../../src/pods/cri/labels.js';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import { BUSYBOX_IMAGE } from '../../helpers/containerd.js';
import { asKubeletSees, removeKubeletPodCgroups, runPodAsKubelet, type KubeletLeftovers } from '../../helpers/kubelet-cri.js';
import { eventually } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { podContainers, runtimeOperations, startPodNode, type PodNode, type PodNodePaths } from './harness.js';

/** A containerd of this file's own: the kubelet's pods are not labelled as any nodelet's. */
const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-adopt';
const NODE = 'adopter';
const STATIC_UID = '6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f';

/** The pod as the API server stores it (every default set), two containers: `web` (a port) and `sidecar` (its own termination-message settings). */
function legacySpec(): NonNullable<Pod['spec']> {
  const common: Partial<Container> = { image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent' };
  return {
    restartPolicy: 'Always',
    terminationGracePeriodSeconds: 2,
    dnsPolicy: 'ClusterFirst',
    containers: [
      { ...common, name: 'web', command: ['httpd', '-f', '-p', '8080'], ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }], terminationMessagePath: '/dev/termination-log', terminationMessagePolicy: 'File' },
      { ...common, name: 'sidecar', command: ['sh', '-c', 'sleep 3600'], terminationMessagePath: '/tmp/termination-log', terminationMessagePolicy: 'FallbackToLogsOnError' },
    ],
  };
}

let cluster: TestCluster;
let node: PodNode;
let apiPod: Pod;
const left: Record<'api' | 'static', KubeletLeftovers> = {} as never;
let uids: { api: string; static: string; derived?: string };
/** Runtime operations nodelet made before the test stopped a container. */
let opsAfterSync: Record<string, number> = {};
/** The test's own CRI client (the kubelet's calls, and the stops). */
let kubeletCri: CriClient | undefined;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-adopt-' });
  apiPod = await cluster.api.create<Pod>(PODS, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'legacy', namespace: 'default', labels: { app: 'legacy' }, annotations: { 'example.com/owner': 'team-a' } },
    spec: { ...legacySpec(), nodeName: NODE },
  });
  uids = { api: apiPod.metadata!.uid!, static: STATIC_UID };
  node = await startPodNode({
    kubeconfig: cluster.nodeKubeconfig(NODE),
    containerdDir: CONTAINERD_DIR,
    name: NODE,
    // The longest crash-loop wait (gate KubeletCrashLoopBackOffMax, on by default): 10 s instead of a fourth restart's 40 s.
    config: { crashLoopBackOff: '{maxContainerRestartPeriod: 10s}' },
    async beforeStart(p) {
      // The kubelet's own runtimeRequestTimeout (2 min): a loaded machine can take 10 s to start or stop a container.
      kubeletCri = createCriClient({ runtimeEndpoint: p.endpoint, requestTimeoutMs: 120_000 });
      await leaveKubeletPods(kubeletCri, p);
    },
  });
});

/** What the kubelet left of the two pods before nodelet starts (the API pod exists in the control plane by then). */
async function leaveKubeletPods(cri: CriClient, p: PodNodePaths): Promise<void> {
  // This file's own containerd: whatever a run that was interrupted left goes first.
  for (const sb of await cri.listPodSandbox()) {
    await cri.stopPodSandbox(sb.id);
    await cri.removePodSandbox(sb.id);
  }
  const kubelet = { rootDir: p.rootDir, podLogsDir: p.logsDir };
  // The API pod as the kubelet got it from its API source.
  left.api = await runPodAsKubelet(cri, asKubeletSees(apiPod, 'api'), kubelet, { sidecar: 3 });
  // The static pod: the manifest in staticPodPath, and the pod as the kubelet made it from
  // it (name `<name>-<node>`, the declared UID kept, spec.nodeName set).
  const manifest: Pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'legacy-static', namespace: 'default', uid: STATIC_UID, labels: { app: 'legacy-static' } }, spec: legacySpec() };
  const asKubelet: Pod = { ...manifest, metadata: { ...manifest.metadata, name: `legacy-static-${NODE}` }, spec: { ...manifest.spec!, nodeName: NODE } };
  left.static = await runPodAsKubelet(cri, asKubeletSees(asKubelet, 'file'), kubelet, { sidecar: 3 });
  fs.writeFileSync(path.join(p.manifests, 'legacy-static.yaml'), JSON.stringify(manifest));
}

afterAll(async () => {
  await cluster?.deletePods();
  if (node) {
    // The kubelet's sandboxes carry no nodelet label, so node.close() would not wait for them:
    // both pods go first (the API one deleted, the static one's file removed), then nodelet.
    for (const f of ['legacy-static.yaml', 'legacy-derived.yaml']) fs.rmSync(path.join(node.manifests, f), { force: true });
    await eventually(async () => (await node.cri.listPodSandbox()).every((s) => !Object.values(uids).includes(s.labels['io.kubernetes.pod.uid'] ?? '')), 60_000).catch(() => undefined);
    await node.close();
  }
  await cluster?.close();
  kubeletCri?.close();
  removeKubeletPodCgroups();
});

const apiStatus = async () => (await cluster.api.get<Pod>(PODS, { namespace: 'default', name: 'legacy' })).status;
const mirrorStatus = async () => (await cluster.api.get<Pod>(PODS, { namespace: 'default', name: `legacy-static-${NODE}` }).catch(() => undefined))?.status;
const readOnly = async (name: string) => (await node.pods()).find((p) => p.metadata?.name === name)?.status;
const byName = (st: Pod['status']) => Object.fromEntries((st?.containerStatuses ?? []).map((c) => [c.name, c]));

describe('taking a node over from a kubelet', () => {
  it('the kubelet left exactly its own labels and annotations: none of nodelet', async () => {
    for (const which of ['api', 'static'] as const) {
      const [sandbox] = (await node.cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.uid': uids[which] } }));
      expect(sandbox!.id).toBe(left[which].sandboxId);
      expect(sandbox!.labels[LABEL_NODELET_NODE]).toBeUndefined();
      expect(sandbox!.labels[LABEL_MANAGED_BY]).toBeUndefined();
      expect(Object.keys(sandbox!.labels).sort()).toEqual(['app', 'io.kubernetes.pod.name', 'io.kubernetes.pod.namespace', 'io.kubernetes.pod.uid']);
      for (const c of await podContainers(node.cri, uids[which])) {
        expect(Object.keys(c.labels).sort()).toEqual(['io.kubernetes.container.name', 'io.kubernetes.pod.name', 'io.kubernetes.pod.namespace', 'io.kubernetes.pod.uid']);
        // The kubelet's annotations: its hash of name and image, the restart count its metadata's attempt.
        const spec = legacySpec().containers.find((x) => x.name === c.metadata.name)!;
        expect(c.annotations).toMatchObject({ 'io.kubernetes.container.hash': containerHash(spec), 'io.kubernetes.container.restartCount': String(c.metadata.attempt), 'io.kubernetes.pod.terminationGracePeriod': '2', 'io.kubernetes.container.terminationMessagePolicy': spec.terminationMessagePolicy });
        expect(c.annotations['io.kubernetes.container.ports']).toBe(spec.name === 'web' ? '[{"name":"http","containerPort":8080,"protocol":"TCP"}]' : undefined);
      }
    }
  });

  it('adopts both pods: the same sandbox and containers, restart count 3, no run, create, start or stop call', async () => {
    // Running in nodelet's status: in the API for the API pod, in the mirror pod for the static one, and on /pods.
    for (const [get, name] of [[apiStatus, 'legacy'], [mirrorStatus, `legacy-static-${NODE}`]] as const) {
      const st = await eventually(async () => {
        const s = await get();
        return s?.phase === 'Running' && (s.containerStatuses ?? []).every((c) => c.state?.running) && s.containerStatuses?.length === 2 ? s : undefined;
      }, 60_000);
      expect(byName(st)['sidecar']!.restartCount).toBe(3);
      expect(byName(st)['web']!.restartCount).toBe(0);
      const ro = await readOnly(name);
      expect(byName(ro)['sidecar']!.restartCount).toBe(3);
    }
    // A few relists later (one a second), nothing has changed in the runtime.
    await new Promise((r) => setTimeout(r, 3000));
    for (const which of ['api', 'static'] as const) {
      const l = left[which];
      const sandboxes = await node.cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.uid': uids[which] } });
      expect(sandboxes.map((s) => [s.id, s.state])).toEqual([[l.sandboxId, 'SANDBOX_READY']]);
      const containers = await podContainers(node.cri, uids[which]);
      expect(containers.map((c) => c.id).sort()).toEqual([...Object.values(l.running), ...l.dead].sort());
      for (const [name, id] of Object.entries(l.running)) expect(containers.find((c) => c.id === id)).toMatchObject({ state: 'CONTAINER_RUNNING', metadata: { name } });
      const st = which === 'api' ? await apiStatus() : await readOnly(`legacy-static-${NODE}`);
      expect(Object.fromEntries(Object.entries(byName(st)).map(([n, c]) => [n, [c.containerID, c.restartCount]]))).toEqual({
        web: [`containerd://${l.running['web']}`, 0],
        sidecar: [`containerd://${l.running['sidecar']}`, 3],
      });
    }
    opsAfterSync = await runtimeOperations(node);
    for (const op of ['run_podsandbox', 'stop_podsandbox', 'remove_podsandbox', 'create_container', 'start_container', 'stop_container', 'remove_container']) {
      expect(opsAfterSync[op] ?? 0, op).toBe(0);
    }
    expect(opsAfterSync['list_containers']).toBeGreaterThan(3); // it did relist
  });

  it('a container stopped afterwards is restarted by nodelet: the web container as attempt 1 at once, the sidecar as attempt 4 after its back-off', async () => {
    const t0 = Date.now();
    await Promise.all((['api', 'static'] as const).flatMap((which) => ['sidecar', 'web'].map((name) => kubeletCri!.stopContainer(left[which].running[name]!, 0))));
    // restartCount 0 restarts at once; restartCount 3 waits min(10 s x 2^2, maxContainerRestartPeriod 10 s) (nodelet's back-off, from the runtime's restart count).
    for (const which of ['api', 'static'] as const) {
      const web = await eventually(async () => (await podContainers(node.cri, uids[which])).find((c) => c.metadata.name === 'web' && c.metadata.attempt === 1 && c.state === 'CONTAINER_RUNNING'), 30_000);
      expect(web.annotations['io.kubernetes.container.restartCount']).toBe('1');
      expect(web.podSandboxId).toBe(left[which].sandboxId);
    }
    const waiting = await eventually(async () => {
      const w = byName(await apiStatus())['sidecar']?.state?.waiting;
      return w?.reason === 'CrashLoopBackOff' ? w : undefined;
    }, 20_000);
    expect(waiting).toMatchObject({ reason: 'CrashLoopBackOff', message: expect.stringMatching(/^back-off 10s restarting failed container=sidecar pod=legacy_default/) });
    expect(byName(await apiStatus())['sidecar']!.lastState?.terminated).toMatchObject({ exitCode: 137, containerID: `containerd://${left.api.running['sidecar']}` });
    for (const which of ['api', 'static'] as const) {
      const sidecar = await eventually(async () => (await podContainers(node.cri, uids[which])).find((c) => c.metadata.name === 'sidecar' && c.metadata.attempt === 4 && c.state === 'CONTAINER_RUNNING'), 90_000);
      expect(sidecar.annotations['io.kubernetes.container.restartCount']).toBe('4');
      // The kubelet's log path for it: <container>/<restartCount>.log in the pod's log directory.
      expect((await node.cri.containerStatus(sidecar.id)).logPath).toMatch(new RegExp(`/default_legacy(-static-${NODE})?_${uids[which]}/sidecar/4\\.log$`));
      expect(sidecar.podSandboxId).toBe(left[which].sandboxId);
    }
    const restartedAfterMs = Date.now() - t0;
    const st = await eventually(async () => {
      const s = await apiStatus();
      return byName(s)['sidecar']?.restartCount === 4 && byName(s)['sidecar']?.state?.running ? s : undefined;
    }, 30_000);
    expect(byName(st)['web']!.restartCount).toBe(1);
    expect(byName(await readOnly(`legacy-static-${NODE}`))['sidecar']!.restartCount).toBe(4);
    // The sandbox was kept: nodelet made no new one.
    const ops = await runtimeOperations(node);
    expect(ops['run_podsandbox'] ?? 0).toBe(0);
    expect(ops['start_container']).toBe(4);
    console.log(`adopt-kubelet: sidecars (restartCount 3) restarted as attempt 4 ${restartedAfterMs} ms after the stop; ops after sync ${JSON.stringify(opsAfterSync)}`);
  }, 240_000); // a 10 s back-off, then bounds for a loaded machine

  it("a kubelet's static pod without a declared UID is replaced once: nodelet's derived UID differs (docs/operating.md)", async () => {
    const manifest: Pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'legacy-derived', namespace: 'default', labels: { app: 'legacy-derived' } }, spec: { ...legacySpec(), containers: legacySpec().containers.slice(0, 1) } };
    // The kubelet's UID for it: an MD5 over its spew dump, node and file, which nodelet does not reproduce.
    const kubeletUid = crypto.createHash('md5').update(`kubelet ${Date.now()}`).digest('hex');
    uids.derived = kubeletUid;
    const asKubelet: Pod = { ...manifest, metadata: { ...manifest.metadata, name: `legacy-derived-${NODE}`, uid: kubeletUid }, spec: { ...manifest.spec!, nodeName: NODE } };
    // The kubelet ran it before nodelet took over: made while no nodelet runs (a nodelet
    // running meanwhile removes a pod it does not want as soon as its relist sees it, here
    // between the sandbox and its containers: two agents on one runtime).
    node.nodelet.kill('SIGTERM');
    await node.nodelet.exited;
    const kubelets = await runPodAsKubelet(kubeletCri!, asKubeletSees(asKubelet, 'file'), { rootDir: node.rootDir, podLogsDir: node.logsDir });
    fs.writeFileSync(path.join(node.manifests, 'legacy-derived.yaml'), JSON.stringify(manifest));
    await node.restart();
    const t0 = Date.now();
    const ours = await eventually(async () => {
      const p = (await node.pods()).find((q) => q.metadata?.name === `legacy-derived-${NODE}`);
      return p?.status?.phase === 'Running' ? p : undefined;
    }, 90_000).catch(async (err) => {
      // What nodelet shows and logged of it, to tell a slow machine from a refusal.
      console.log(JSON.stringify((await node.pods()).find((q) => q.metadata?.name === `legacy-derived-${NODE}`)?.status), node.nodelet.stdout.split('\n').filter((l) => l.includes('legacy-derived')).slice(-20).join('\n'));
      throw err;
    });
    expect(ours.metadata!.uid).not.toBe(kubeletUid);
    expect(byName(ours.status)['web']!.containerID).not.toBe(`containerd://${kubelets.running['web']}`);
    expect(byName(ours.status)['web']!.restartCount).toBe(0);
    await eventually(async () => (await node.cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.uid': kubeletUid } })).length === 0, 60_000);
    const [sandbox] = await node.cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.uid': ours.metadata!.uid! } });
    expect(sandbox!.labels[LABEL_NODELET_NODE]).toBe(NODE);
    console.log(`adopt-kubelet: a static pod without a declared UID replaced in ${Date.now() - t0} ms (nodelet's copy Running, the kubelet's removed)`);
  }, 240_000);
});
