/**
 * Connected mode on a real containerd: a pod the control plane binds to the node runs in
 * containerd, its status (containerd:// IDs, probe readiness) and events reach the API,
 * a static pod gets its mirror pod, and deleting the pod in the API removes it from
 * containerd. The control plane is the in-process test server.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Event as CoreEvent, Node, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { binaryQuantity } from '../../../src/node/status.js';
import { EVENTS, PODS } from '../../../src/controlplane/client.js';
import { eventually } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { busyboxPod, NODE_NAME, runtimePods, startPodNode, type PodNode } from './harness.js';

let cluster: TestCluster;
let node: PodNode;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-connected-containerd-' });
  // kubeReserved ephemeral-storage, and the default evictionHard (nodefs.available 10%), come off allocatable.
  node = await startPodNode({ kubeconfig: cluster.nodeKubeconfig(NODE_NAME), containerdDir: '/var/lib/nodelet-dev/containerd-connected', config: { kubeReserved: '{ephemeral-storage: 1Gi}' } });
});

afterAll(async () => {
  await node?.close();
  await cluster?.close();
});

const getPod = (name: string) => cluster.api.get<Pod>(PODS, { namespace: 'default', name }).catch(() => undefined);

describe('connected mode on containerd', () => {
  it('runs a bound pod in containerd, reports its status with probe readiness and its events, and removes it when deleted in the API', async () => {
    const created = await cluster.api.create<Pod>(PODS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'bound', namespace: 'default' },
      spec: {
        nodeName: NODE_NAME,
        hostNetwork: true,
        terminationGracePeriodSeconds: 1,
        containers: [
          {
            name: 'app',
            image: 'docker.io/local/busybox:latest',
            imagePullPolicy: 'IfNotPresent',
            command: ['/bin/sh', '-c', 'sleep 2; touch /tmp/ready; sleep 3600'],
            readinessProbe: { exec: { command: ['cat', '/tmp/ready'] }, periodSeconds: 1 },
          },
        ],
      },
    });
    const uid = created.metadata!.uid!;
    // Running first, not ready until the file exists; then ready, all in the API.
    const running = await eventually(async () => {
      const p = await getPod('bound');
      return p?.status?.phase === 'Running' ? p : undefined;
    }, 30_000);
    expect(running.status!.containerStatuses![0]!.containerID).toMatch(/^containerd:\/\/[0-9a-f]{64}$/);
    const ready = await eventually(async () => {
      const p = await getPod('bound');
      return p?.status?.containerStatuses?.[0]?.ready ? p : undefined;
    }, 20_000);
    expect(ready.status!.conditions!.find((c) => c.type === 'Ready')).toMatchObject({ status: 'True' });
    const sandboxes = (await runtimePods(node.cri)).filter((s) => s.labels['io.kubernetes.pod.uid'] === uid);
    expect(sandboxes).toHaveLength(1);
    const reasons = (await cluster.api.listAll<CoreEvent>(EVENTS, { namespace: 'default' })).items.filter((e) => e.involvedObject.uid === uid).map((e) => e.reason);
    expect(reasons).toEqual(expect.arrayContaining(['Pulled', 'Created', 'Started']));

    await cluster.api.delete(PODS, { namespace: 'default', name: 'bound' });
    await eventually(async () => !(await runtimePods(node.cri)).some((s) => s.labels['io.kubernetes.pod.uid'] === uid), 30_000);
  });

  it("a downwardAPI volume holds the pod's labels, read-only in the container, and follows a change of them in the API", async () => {
    const pod: Pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'podinfo', namespace: 'default', labels: { app: 'podinfo', tier: 'front' } },
      spec: {
        nodeName: NODE_NAME,
        hostNetwork: true,
        terminationGracePeriodSeconds: 1,
        volumes: [{ name: 'podinfo', downwardAPI: { items: [{ path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } }, { path: 'name', fieldRef: { fieldPath: 'metadata.name' } }] } }],
        containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'], volumeMounts: [{ name: 'podinfo', mountPath: '/etc/podinfo' }] }],
      },
    };
    await cluster.api.create<Pod>(PODS, pod);
    const id = await eventually(async () => (await getPod('podinfo'))?.status?.containerStatuses?.[0]?.containerID?.replace('containerd://', ''), 30_000);
    const inside = async (cmd: string) => {
      const r = await node.cri.execSync(id, ['sh', '-c', cmd], 10);
      return `${r.stdout.toString()}${r.stderr.toString()}`.trim();
    };
    expect(await inside('cat /etc/podinfo/name; echo; cat /etc/podinfo/labels')).toBe('podinfo\napp="podinfo"\ntier="front"');
    expect(await inside('touch /etc/podinfo/x 2>&1; ls -a /etc/podinfo | grep -c "^\\.\\.[0-9]"')).toMatch(/Read-only file system\n1$/);
    await cluster.api.patch(PODS, { namespace: 'default', name: 'podinfo' }, { metadata: { labels: { tier: 'back' } } }, { type: 'merge' });
    // Within a sync of the pod after the watch event (the kubelet: within its sync period, about a minute).
    const t0 = Date.now();
    await eventually(async () => (await inside('cat /etc/podinfo/labels')) === 'app="podinfo"\ntier="back"', 30_000);
    console.log(`downwardAPI volume updated in the container ${Date.now() - t0} ms after the label patch`);
    await cluster.api.delete(PODS, { namespace: 'default', name: 'podinfo' });
  });

  it('a readiness gate holds Ready False until its condition is patched True in the API', async () => {
    await cluster.api.create<Pod>(PODS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'gated', namespace: 'default' },
      spec: {
        nodeName: NODE_NAME,
        hostNetwork: true,
        terminationGracePeriodSeconds: 1,
        readinessGates: [{ conditionType: 'example.com/lb-ready' }],
        containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }],
      },
    });
    const readyOf = (p: Pod | undefined) => p?.status?.conditions?.find((c) => c.type === 'Ready');
    const held = await eventually(async () => {
      const p = await getPod('gated');
      return p?.status?.phase === 'Running' && readyOf(p)?.reason === 'ReadinessGatesNotReady' ? p : undefined;
    }, 30_000);
    expect(held.status!.conditions!.find((c) => c.type === 'ContainersReady')?.status).toBe('True');
    await cluster.api.patch(PODS, { namespace: 'default', name: 'gated' }, { status: { conditions: [{ type: 'example.com/lb-ready', status: 'True' }] } }, { type: 'strategic', subresource: 'status' });
    const opened = await eventually(async () => {
      const p = await getPod('gated');
      return readyOf(p)?.status === 'True' ? p : undefined;
    }, 30_000);
    // The gate's condition, set by another writer, is kept beside nodelet's own.
    expect(opened.status!.conditions!.find((c) => c.type === 'example.com/lb-ready')?.status).toBe('True');
    await cluster.api.delete(PODS, { namespace: 'default', name: 'gated' });
  });

  it('a static pod on containerd has a mirror pod in the API with its status', async () => {
    node.writeManifest('mirrored.yaml', busyboxPod('mirrored', 'sleep 3600'));
    const mirror = await eventually(async () => {
      const p = await getPod(`mirrored-${NODE_NAME}`);
      return p?.status?.phase === 'Running' ? p : undefined;
    }, 30_000);
    const local = await node.pod('mirrored');
    expect(mirror.metadata!.annotations!['kubernetes.io/config.mirror']).toBe(local!.metadata!.uid);
    expect(mirror.status!.containerStatuses![0]!.containerID).toBe(local!.status!.containerStatuses![0]!.containerID);
  });

  it('kubectl get node shows the images (largest first, with sizes), ephemeral-storage capacity of the root dir\'s filesystem and allocatable reduced by kubeReserved and evictionHard', async () => {
    const kubectl = async () => JSON.parse((await promisify(execFile)('/usr/bin/kubectl', ['--kubeconfig', path.join(cluster.dir, 'admin.kubeconfig'), 'get', 'node', NODE_NAME, '-o', 'json'])).stdout) as Node;
    const n = await eventually(async () => {
      const got = await kubectl();
      return got.status?.images?.length && got.status.capacity?.['ephemeral-storage'] ? got : undefined;
    }, 30_000);
    const runtimeImages = await node.cri.listImages();
    const names = n.status!.images!.flatMap((i) => i.names ?? []);
    expect(names).toEqual(expect.arrayContaining(['docker.io/local/busybox:latest', 'docker.io/local/pause:latest']));
    expect(n.status!.images!.length).toBe(runtimeImages.length);
    const sizes = n.status!.images!.map((i) => i.sizeBytes!);
    expect(sizes).toEqual([...sizes].sort((a, b) => b - a));
    expect(sizes.every((x) => x > 0)).toBe(true);
    const st = fs.statfsSync(node.rootDir);
    const capacity = st.blocks * st.bsize;
    expect(n.status!.capacity!['ephemeral-storage']).toBe(binaryQuantity(capacity));
    expect(n.status!.allocatable!['ephemeral-storage']).toBe(binaryQuantity(capacity - 1024 ** 3 - Math.floor(capacity * 0.1)));
  });
});
