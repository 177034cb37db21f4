/**
 * The built nodelet in connected mode against the test control plane, on the test CRI
 * server: it registers its Node and reports it Ready, renews its Lease, runs the pods the
 * control plane binds to it (and removes them when they are deleted there), writes their
 * status back, finishes graceful deletions, keeps mirror pods for its static pods, sends
 * Events, and its HTTPS server asks the control plane about bearer tokens (TokenReview)
 * and permissions (SubjectAccessReview). kubectl shows it as an operator sees it.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Event as CoreEvent, Node, Pod, PodList } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCriClient } from '../../../src/runtime/cri-client.js';
import { EVENTS, LEASES, NODES, PODS } from '../../../src/controlplane/client.js';
import { startControlPlane } from '../../control-plane/server.js';
import { startConnectedNode, type ConnectedNode } from '../../faults/connected-node.js';
import { adminKubectl, KUBECTL } from '../../helpers/kubectl.js';
import { eventually, freePort, startNodelet, tempDir } from '../../helpers/nodelet.js';
import { request } from '../server/client.js';

let n1: ConnectedNode;
let readOnlyPort: number;

beforeAll(async () => {
  readOnlyPort = await freePort();
  // The v1beta1 defaults otherwise: webhook authentication and Webhook authorization.
  n1 = await startConnectedNode({ prefix: 'nodelet-connected-', webhook: true, config: { readOnlyPort }, manifests: { 'web.yaml': staticManifest('v1') } });
});

afterAll(async () => {
  await n1?.close();
});

function staticManifest(version: string): string {
  return `apiVersion: v1
kind: Pod
metadata: {name: static-web, labels: {version: ${version}}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers: [{name: web, image: docker.io/local/busybox:latest, imagePullPolicy: IfNotPresent, command: [sleep, '3600']}]
`;
}

const kubectl = (args: string[]) => adminKubectl(n1.dir, args);

const nodePods = async () => ((await (await fetch(`http://127.0.0.1:${readOnlyPort}/pods`)).json()) as PodList).items;

describe('nodelet connected to a control plane', () => {
  it('says it runs connected, registers its Node with the kubelet labels, and reports it Ready', async () => {
    expect(n1.nodelet.records.find((r) => /starting nodelet in connected mode/.test(r.msg))).toBeTruthy();
    const node = await eventually(async () => {
      const n = await n1.api.get<Node>(NODES, { name: 'n1' }).catch(() => undefined);
      return n?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True' ? n : undefined;
    }, 15_000);
    expect(node.metadata!.labels).toMatchObject({ 'kubernetes.io/hostname': 'n1', 'kubernetes.io/os': 'linux' });
    expect(node.status!.daemonEndpoints!.kubeletEndpoint!.Port).toBe(n1.ports.https);
    expect(node.status!.nodeInfo!.containerRuntimeVersion).toMatch(/:\/\//);
    expect(node.status!.conditions!.map((c) => c.type)).toEqual(['MemoryPressure', 'DiskPressure', 'PIDPressure', 'Ready']);
  });

  it('renews kube-node-lease/n1, owned by its Node', async () => {
    const first = await eventually(() => n1.api.get<Lease>(LEASES, { namespace: 'kube-node-lease', name: 'n1' }).catch(() => undefined), 15_000);
    const node = await n1.api.get<Node>(NODES, { name: 'n1' });
    expect(first.spec).toMatchObject({ holderIdentity: 'n1', leaseDurationSeconds: 4 });
    expect(first.metadata!.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: node.metadata!.uid }]);
    // 4 s lease: renewed about every second.
    await eventually(async () => {
      const l = await n1.api.get<Lease>(LEASES, { namespace: 'kube-node-lease', name: 'n1' });
      return l.spec!.renewTime !== first.spec!.renewTime;
    }, 5_000);
  });

  it('runs a pod the control plane binds to it, and removes it when the pod is deleted there', async () => {
    const pod: Pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'api-pod', namespace: 'default' },
      spec: { nodeName: 'n1', hostNetwork: true, terminationGracePeriodSeconds: 0, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] },
    };
    const created = await n1.api.create<Pod>(PODS, pod);
    // A pod bound to another node is not ours.
    await n1.api.create<Pod>(PODS, { ...pod, metadata: { name: 'elsewhere', namespace: 'default' }, spec: { ...pod.spec!, nodeName: 'n2' } });
    const running = await eventually(async () => (await nodePods()).find((p) => p.metadata!.name === 'api-pod' && p.status?.phase === 'Running'), 15_000);
    expect(running.metadata!.uid).toBe(created.metadata!.uid);
    // Its status goes back to the control plane, as `kubectl get pods` shows it.
    const inApi = await eventually(async () => {
      const p = await n1.api.get<Pod>(PODS, { namespace: 'default', name: 'api-pod' });
      return p.status?.phase === 'Running' ? p : undefined;
    }, 10_000);
    expect(inApi.status!.containerStatuses).toEqual([expect.objectContaining({ name: 'app', ready: true, restartCount: 0, state: { running: expect.objectContaining({ startedAt: expect.any(String) }) } })]);
    expect(inApi.status!.conditions!.find((c) => c.type === 'Ready')).toMatchObject({ status: 'True' });
    expect(inApi.metadata!.managedFields!.map((f) => [f.manager, f.operation, f.subresource])).toContainEqual(['nodelet', 'Update', 'status']);
    // Events, as `kubectl describe pod` lists them.
    const podEvents = await eventually(async () => {
      const { items } = await n1.api.listAll<CoreEvent>(EVENTS, { namespace: 'default' });
      const mine = items.filter((e) => e.involvedObject.uid === created.metadata!.uid);
      return mine.some((e) => e.reason === 'Started') ? mine : undefined;
    }, 10_000);
    expect(podEvents.map((e) => [e.reason, e.type, e.message, e.involvedObject.fieldPath, e.source?.host])).toEqual([
      ['Pulled', 'Normal', 'Container image "docker.io/local/busybox:latest" already present on machine', 'spec.containers{app}', 'n1'],
      ['Created', 'Normal', 'Created container: app', 'spec.containers{app}', 'n1'],
      ['Started', 'Normal', 'Started container app', 'spec.containers{app}', 'n1'],
    ]);
    const nodeEvents = (await n1.api.listAll<CoreEvent>(EVENTS, { namespace: 'default' })).items.filter((e) => e.involvedObject.kind === 'Node' && e.involvedObject.name === 'n1');
    expect(nodeEvents.map((e) => e.reason)).toEqual(expect.arrayContaining(['Starting', 'NodeReady']));
    expect((await nodePods()).some((p) => p.metadata!.name === 'elsewhere')).toBe(false);
    const runtime = createCriClient({ runtimeEndpoint: `unix://${n1.cri.socketPath}`, requestTimeoutMs: 5000 });
    try {
      const sel = { labelSelector: { 'io.kubernetes.pod.uid': created.metadata!.uid! } };
      expect((await runtime.listPodSandbox(sel)).length).toBe(1);
      await n1.api.delete(PODS, { namespace: 'default', name: 'api-pod' });
      await eventually(async () => !(await nodePods()).some((p) => p.metadata!.name === 'api-pod'), 15_000);
      await eventually(async () => (await runtime.listPodSandbox(sel)).length === 0, 15_000);
    } finally {
      runtime.close();
    }
  });

  it('a finished pod is Succeeded in the API and is not run again; a pod deleted with a finalizer is stopped, then deleted by nodelet', async () => {
    const spec = (command: string[]): NonNullable<Pod['spec']> => ({
      nodeName: 'n1',
      hostNetwork: true,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 0,
      containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command }],
    });
    const once = await n1.api.create<Pod>(PODS, { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'once', namespace: 'default' }, spec: spec(['sh', '-c', 'exit 0']) });
    const done = await eventually(async () => {
      const p = await n1.api.get<Pod>(PODS, { namespace: 'default', name: 'once' });
      return p.status?.phase === 'Succeeded' ? p : undefined;
    }, 15_000);
    expect(done.status!.containerStatuses![0]!.state!.terminated).toMatchObject({ exitCode: 0, reason: 'Completed' });
    // Terminal, as the kubelet keeps it: its sandbox stopped, its one container kept (status,
    // `kubectl logs`), never run again and never written back to Running; removed from the
    // runtime once the pod is deleted in the API.
    const runtime = createCriClient({ runtimeEndpoint: `unix://${n1.cri.socketPath}`, requestTimeoutMs: 5000 });
    try {
      const onceSel = { labelSelector: { 'io.kubernetes.pod.uid': once.metadata!.uid! } };
      await eventually(async () => (await runtime.listPodSandbox(onceSel)).every((sb) => sb.state === 'SANDBOX_NOTREADY'), 15_000);
      await new Promise((r) => setTimeout(r, 2_000)); // two relists: nothing started again
      expect(await runtime.listContainers(onceSel)).toHaveLength(1);
      expect((await n1.api.get<Pod>(PODS, { namespace: 'default', name: 'once' })).status!.phase).toBe('Succeeded');
      await n1.api.delete(PODS, { namespace: 'default', name: 'once' });
      await eventually(async () => (await runtime.listPodSandbox(onceSel)).length === 0, 15_000);

      const held = await n1.api.create<Pod>(PODS, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'held', namespace: 'default', finalizers: ['example.com/hold'] },
        spec: { ...spec(['sleep', '3600']), restartPolicy: 'Always' },
      });
      const sel = { labelSelector: { 'io.kubernetes.pod.uid': held.metadata!.uid! } };
      await eventually(async () => (await n1.api.get<Pod>(PODS, { namespace: 'default', name: 'held' })).status?.phase === 'Running', 15_000);
      await n1.api.delete(PODS, { namespace: 'default', name: 'held' });
      // The finalizer keeps it in the API with deletionTimestamp: nodelet stops and removes it
      // from the runtime, then ends its part of the deletion (DELETE, grace 0, UID precondition).
      await eventually(async () => (await runtime.listPodSandbox(sel)).length === 0, 15_000);
      await n1.nodelet.waitForMsg(/deleted from the control plane/, 10_000);
      const terminating = await n1.api.get<Pod>(PODS, { namespace: 'default', name: 'held' });
      expect(terminating.metadata!.deletionTimestamp).toBeTruthy();
      await n1.api.patch(PODS, { namespace: 'default', name: 'held' }, { metadata: { finalizers: null } }, { type: 'merge' });
      await eventually(async () => (await n1.api.get<Pod>(PODS, { namespace: 'default', name: 'held' }).catch(() => undefined)) === undefined, 5_000);
      // Not started again meanwhile.
      expect(n1.cri.calls.filter((c) => c.method === 'RunPodSandbox' && JSON.stringify(c.request).includes(held.metadata!.uid!))).toHaveLength(1);
    } finally {
      runtime.close();
    }
  });

  it('a static pod has a mirror pod in the API with its status; a deleted mirror comes back, an edited file replaces it, a removed file deletes it', async () => {
    const mirrorOf = async (pred: (p: Pod) => boolean = () => true) =>
      eventually(async () => {
        const p = await n1.api.get<Pod>(PODS, { namespace: 'default', name: 'static-web-n1' }).catch(() => undefined);
        return p && !p.metadata!.deletionTimestamp && p.status?.phase === 'Running' && pred(p) ? p : undefined;
      }, 15_000);
    const staticPod = await eventually(async () => (await nodePods()).find((p) => p.metadata!.name === 'static-web-n1' && p.status?.phase === 'Running'), 15_000);
    const node = await n1.api.get<Node>(NODES, { name: 'n1' });
    const first = await mirrorOf();
    expect(first.metadata!.annotations).toMatchObject({ 'kubernetes.io/config.mirror': staticPod.metadata!.uid, 'kubernetes.io/config.source': 'file' });
    expect(first.metadata!.uid).not.toBe(staticPod.metadata!.uid);
    expect(first.metadata!.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: node.metadata!.uid, controller: true }]);
    expect(first.metadata!.labels).toEqual({ version: 'v1' });
    expect(first.status!.containerStatuses![0]!.containerID).toBe(staticPod.status!.containerStatuses![0]!.containerID);
    const sandboxesBefore = n1.cri.calls.filter((c) => c.method === 'RunPodSandbox').length;

    // Deleting the mirror pod does not touch the static pod: the mirror comes back.
    await n1.api.delete(PODS, { namespace: 'default', name: 'static-web-n1' });
    const second = await mirrorOf((p) => p.metadata!.uid !== first.metadata!.uid);
    expect(second.metadata!.annotations!['kubernetes.io/config.mirror']).toBe(staticPod.metadata!.uid);
    expect(n1.cri.calls.filter((c) => c.method === 'RunPodSandbox').length).toBe(sandboxesBefore);

    // An edited file is a new static pod: its mirror replaces the old one.
    fs.writeFileSync(path.join(n1.dir, 'manifests', 'web.yaml'), staticManifest('v2'));
    const third = await mirrorOf((p) => p.metadata!.labels?.['version'] === 'v2');
    expect(third.metadata!.annotations!['kubernetes.io/config.mirror']).not.toBe(staticPod.metadata!.uid);

    fs.rmSync(path.join(n1.dir, 'manifests', 'web.yaml'));
    await eventually(async () => (await n1.api.get<Pod>(PODS, { namespace: 'default', name: 'static-web-n1' }).catch(() => undefined)) === undefined, 15_000);
    expect(n1.nodelet.records.filter((r) => (r.level === 'warn' || r.level === 'error') && /mirror/.test(r.msg))).toEqual([]);
  });

  it.runIf(fs.existsSync(KUBECTL))('as an operator sees it with kubectl: the node Ready, the pod Running on it, its events in describe', async () => {
    await n1.api.create<Pod>(PODS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'seen', namespace: 'default' },
      spec: { nodeName: 'n1', hostNetwork: true, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] },
    });
    // Asked column by column: what the test checks, whatever the server's table prints.
    await eventually(async () => {
      const r = await kubectl(['get', 'nodes', '--no-headers', '-o', 'custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status']);
      return /^n1\s+True$/m.test(r.stdout);
    }, 15_000);
    const pods = await eventually(async () => {
      const r = await kubectl(['get', 'pods', '--no-headers', '-o', 'custom-columns=NAME:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName,READY:.status.containerStatuses[*].ready']);
      return /^seen\s+Running\s+n1\s+true$/m.test(r.stdout) ? r.stdout : undefined;
    }, 15_000);
    expect(pods).not.toMatch(/^elsewhere\s+Running/m);
    const describe = await eventually(async () => {
      const r = await kubectl(['describe', 'pod', 'seen']);
      return /Started\s+.*Started container app/.test(r.stdout) ? r.stdout : undefined;
    }, 10_000);
    expect(describe).toMatch(/^Node:\s+n1\//m);
    expect(describe).toMatch(/^Status:\s+Running/m);
    expect(describe).toMatch(/Normal\s+Pulled\s+.*kubelet\s+Container image "docker.io\/local\/busybox:latest" already present on machine/);
    await n1.api.delete(PODS, { namespace: 'default', name: 'seen' });
  });

  it('HTTPS: a bearer token is checked with a TokenReview and the request with a SubjectAccessReview', async () => {
    n1.cp.addToken('forensics-token', 'forensics', ['ops']);
    n1.cp.setAccessRules((a) =>
      a.user === 'forensics' && a.verb === 'get' && a.resource === 'nodes' && a.subresource === 'proxy' ? { allowed: true } : { allowed: false, reason: `no rule for ${a.user}` },
    );
    const ok = await request(`https://127.0.0.1:${n1.ports.https}/pods`, { ca: n1.servingCert(), token: 'forensics-token' });
    expect(ok.status).toBe(200);
    // create nodes/checkpoint is not granted: 403 before any lookup.
    const denied = await request(`https://127.0.0.1:${n1.ports.https}/checkpoint/default/api-pod/app`, { method: 'POST', ca: n1.servingCert(), token: 'forensics-token' });
    expect(denied.status).toBe(403);
    expect(denied.body).toContain('subresource(s)=[checkpoint]');
    expect(denied.body).toContain('no rule for forensics');
    const unknown = await request(`https://127.0.0.1:${n1.ports.https}/pods`, { ca: n1.servingCert(), token: 'wrong' });
    expect(unknown.status).toBe(401);
  });

  // Last: it stops the agent.
  it('SIGTERM: exits 0 at once with the watch open, the loops stopped and queued events sent; no warning on the way', async () => {
    const from = n1.nodelet.records.length;
    const t0 = Date.now();
    n1.nodelet.kill('SIGTERM');
    const { code } = await n1.nodelet.exited;
    expect(code).toBe(0);
    // Was 20 s: the client closed first and waited for the watch the reflector still held.
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(n1.nodelet.records.slice(from).filter((r) => r.level === 'warn' || r.level === 'error').map((r) => r.msg)).toEqual([]);
    // Nor from Node on stderr over the whole run: its 11 services each listened on the one
    // AbortSignal the daemon gave them all, and Node printed "MaxListenersExceededWarning:
    // Possible EventTarget memory leak detected. 11 abort listeners added to [AbortSignal]".
    expect(n1.nodelet.stderr.split('\n').filter((l) => /\(node:\d+\) \w*Warning/.test(l))).toEqual([]);
  });
});

describe('a control plane that does not answer', () => {
  it('never blocks startup or crashes nodelet: it is ready, logs the failures and keeps retrying', async () => {
    const d = tempDir('nodelet-connected-down-');
    // Its CA stays in a folder of ours after it is gone, as a real cluster's CA would.
    const gone = await startControlPlane({ pkiDir: path.join(d, 'pki') });
    gone.writeKubeconfig(path.join(d, 'kubelet.kubeconfig'), { user: 'system:node:n9' });
    await gone.close();
    const p = startNodelet([
      '--kubeconfig', path.join(d, 'kubelet.kubeconfig'),
      '--root-dir', path.join(d, 'root'),
      '--lock-file', path.join(d, 'lock'),
      '--hostname-override', 'n9',
      '--container-runtime-endpoint', `unix://${n1.cri.socketPath}`,
      '--port', String(await freePort()),
      '--read-only-port', '0',
      '--healthz-port', '0',
    ]);
    try {
      await p.waitForMsg(/nodelet is ready/, 20_000);
      const warn = await p.waitFor((r) => r.level === 'warn' && /cannot update node status|cannot renew the node lease|pods: /.test(r.msg), 20_000);
      expect(warn.msg).toMatch(/ECONNREFUSED|connect|UNAVAILABLE|fetch failed/i);
      await new Promise((r) => setTimeout(r, 1500));
      expect(p.child.exitCode).toBeNull();
    } finally {
      p.kill('SIGTERM');
      expect((await p.exited).code).toBe(0);
    }
  });
});
