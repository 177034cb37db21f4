/**
 * Connected mode on a real containerd: a pod the control plane binds to the node runs in
 * containerd, its status (containerd:// IDs, probe readiness) and events reach the API,
 * a static pod gets its mirror pod, and deleting the pod in the API removes it from
 * containerd. The control plane is the in-process test server.
 */
import type { Event as CoreEvent, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS, PODS } from '../../../src/controlplane/client.js';
import { eventually } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { busyboxPod, NODE_NAME, runtimePods, startPodNode, type PodNode } from './harness.js';

let cluster: TestCluster;
let node: PodNode;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-connected-containerd-' });
  node = await startPodNode({ kubeconfig: cluster.nodeKubeconfig(NODE_NAME), containerdDir: '/var/lib/nodelet-dev/containerd-connected' });
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
});
