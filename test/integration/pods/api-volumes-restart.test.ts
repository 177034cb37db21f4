/**
 * Issue 27: "nothing is lost across a nodelet restart" for the volumes that show API objects,
 * on a real containerd, nodelet connected to the test control plane through a TCP proxy the
 * test controls. A running pod with a configMap, a secret and a projected token volume keeps
 * its container and every file's content across a nodelet restart, with the control plane up
 * and with it refusing connections during the restart; once it is back, an edit arrives again.
 */
import type { ConfigMap, Pod, Secret } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS, type ResourceType } from '../../../src/controlplane/client.js';
import { eventually } from '../../helpers/nodelet.js';
import type { TcpProxy } from '../../helpers/tcp-proxy.js';
import type { TestCluster } from '../../helpers/test-cluster.js';
import { shIn, startApiPodNode, type ApiPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-api-volumes-restart';
const NODE = 'rsnode';
const CONFIGMAPS: ResourceType = { group: '', version: 'v1', resource: 'configmaps', namespaced: true };
const SECRETS: ResourceType = { group: '', version: 'v1', resource: 'secrets', namespaced: true };
const READ = 'cat /etc/config/app.conf /etc/creds/password; echo; cat /etc/bundle/token | cut -c1-20; ls -a /etc/config | grep -c "^\\.\\.[0-9]"';

let connected: ApiPodNode | undefined;
let cluster: TestCluster;
let proxy: TcpProxy;
let node: PodNode;

beforeAll(async () => {
  ({ cluster, proxy, node } = connected = await startApiPodNode({ prefix: 'nodelet-api-vol-restart-', name: NODE, containerdDir: CONTAINERD_DIR, proxy: true }));
}, 120_000);

afterAll(() => connected?.close());

const inside = (id: string, cmd: string) => shIn(node.cri, id, cmd);

async function restartNodelet(): Promise<void> {
  node.nodelet.kill('SIGTERM');
  await node.nodelet.exited;
  await node.restart();
}

describe('API volumes across a nodelet restart', () => {
  it('the container and its volumes stay as they were, with the control plane up and down during the restart', async () => {
    await cluster.api.create<ConfigMap>(CONFIGMAPS, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cfg', namespace: 'default' }, data: { 'app.conf': 'v1' } });
    await cluster.api.create<Secret>(SECRETS, { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'creds', namespace: 'default' }, data: { password: Buffer.from('pw').toString('base64') } });
    await cluster.api.create<Pod>(PODS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'keeps', namespace: 'default' },
      spec: {
        nodeName: NODE,
        hostNetwork: true,
        terminationGracePeriodSeconds: 1,
        automountServiceAccountToken: false,
        volumes: [
          { name: 'config', configMap: { name: 'cfg' } },
          { name: 'creds', secret: { secretName: 'creds' } },
          { name: 'bundle', projected: { sources: [{ serviceAccountToken: { path: 'token', expirationSeconds: 3600 } }] } },
        ],
        containers: [
          {
            name: 'app',
            image: 'docker.io/local/busybox:latest',
            imagePullPolicy: 'IfNotPresent',
            command: ['sleep', '3600'],
            volumeMounts: [
              { name: 'config', mountPath: '/etc/config' },
              { name: 'creds', mountPath: '/etc/creds' },
              { name: 'bundle', mountPath: '/etc/bundle' },
            ],
          },
        ],
      },
    });
    const id = await eventually(async () => {
      const p = await cluster.api.get<Pod>(PODS, { namespace: 'default', name: 'keeps' }).catch(() => undefined);
      const s = p?.status?.containerStatuses?.[0];
      return s?.state?.running ? s.containerID?.replace('containerd://', '') : undefined;
    }, 60_000);
    const before = await inside(id, READ);
    expect(before).toMatch(/^v1pw\neyJ.{17}\n1$/);

    // Restart with the control plane up: same container, same content.
    await restartNodelet();
    for (let i = 0; i < 3; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      expect(await inside(id, READ)).toBe(before);
    }

    // Restart while the control plane refuses connections: nothing is taken away.
    node.nodelet.kill('SIGTERM');
    await node.nodelet.exited;
    await proxy.refuse();
    await node.restart();
    for (let i = 0; i < 5; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      expect(await inside(id, READ)).toBe(before);
    }
    await proxy.restore();

    // Back: the same container, and an edit reaches it.
    const cm = await cluster.api.get<ConfigMap>(CONFIGMAPS, { namespace: 'default', name: 'cfg' });
    const t0 = Date.now();
    await cluster.api.update<ConfigMap>(CONFIGMAPS, { ...cm, data: { 'app.conf': 'v2' } });
    await eventually(async () => (await inside(id, 'cat /etc/config/app.conf')) === 'v2', 60_000, 50);
    console.log(`after a restart during an outage, a configMap edit reached the container in ${Date.now() - t0} ms`);
    const p = await cluster.api.get<Pod>(PODS, { namespace: 'default', name: 'keeps' });
    expect(p.status?.containerStatuses?.[0]?.containerID).toBe(`containerd://${id}`);
    expect(p.status?.containerStatuses?.[0]?.restartCount).toBe(0);
  }, 180_000);
});
