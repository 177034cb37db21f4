/**
 * A connected node for the fault suite: the test control plane (in this process), the test
 * CRI server, and the built nodelet registered as node n1, reaching the control plane
 * through a TcpProxy the test controls (or directly). An admin client talks to the control
 * plane directly. Options choose the server's authentication/authorization (the test
 * defaults: anonymous and AlwaysAllow; `webhook: true`: the v1beta1 defaults, TokenReview and
 * SubjectAccessReview), extra config fields, and static pod manifests (`manifests`: file
 * name -> content, written to `<dir>/manifests` before nodelet starts, its staticPodPath).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Pod, PodSpec } from 'kubernetes-types/core/v1.js';
import type { ControlPlaneClient } from '../../src/controlplane/client.js';
import { startFakeRuntime, type FakeRuntime } from '../cri/fake-runtime.js';
import { controlPlaneFaults, type ControlPlaneFaults } from '../control-plane/faults.js';
import type { ControlPlane } from '../control-plane/server.js';
import { connectedArgs, writeConnectedConfig } from '../helpers/connected-config.js';
import { startNodelet, type NodeletProcess } from '../helpers/nodelet.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { startTestCluster } from '../helpers/test-cluster.js';
import { removeDir } from '../helpers/cleanup.js';

export interface ConnectedNode {
  cp: ControlPlane;
  faults: ControlPlaneFaults;
  cri: FakeRuntime;
  proxy: TcpProxy | undefined;
  nodelet: NodeletProcess;
  /** The admin's client, straight to the control plane. */
  api: ControlPlaneClient;
  dir: string;
  ports: { https: number; healthz: number };
  /** nodelet's serving certificate (PEM). */
  servingCert(): string;
  close(): Promise<void>;
}

export async function startConnectedNode(o: {
  prefix: string;
  proxy?: boolean;
  webhook?: boolean;
  config?: Record<string, string | number | boolean>;
  manifests?: Record<string, string>;
}): Promise<ConnectedNode> {
  const cluster = await startTestCluster({ prefix: o.prefix });
  const { cp, api, dir } = cluster;
  const cri = await startFakeRuntime();
  const proxy = o.proxy ? await TcpProxy.start(cp.url) : undefined;
  const kc = cluster.nodeKubeconfig('n1', { via: proxy });
  if (o.manifests) {
    fs.mkdirSync(path.join(dir, 'manifests'));
    for (const [file, text] of Object.entries(o.manifests)) fs.writeFileSync(path.join(dir, 'manifests', file), text);
  }
  const { ports } = await writeConnectedConfig(dir, cri.socketPath, { webhook: o.webhook, fields: { ...(o.manifests ? { staticPodPath: path.join(dir, 'manifests') } : {}), ...o.config } });
  const nodelet = startNodelet(connectedArgs(dir, 'n1', kc));
  await nodelet.waitForMsg(/nodelet is ready/, 30_000);
  return {
    cp,
    faults: controlPlaneFaults(cp),
    cri,
    proxy,
    nodelet,
    api,
    dir,
    ports,
    servingCert: () => fs.readFileSync(path.join(dir, 'root', 'pki', 'kubelet.crt'), 'utf8'),
    async close() {
      controlPlaneFaults(cp).clear();
      nodelet.kill('SIGTERM');
      await nodelet.exited;
      await proxy?.close();
      await cri.stop();
      await cluster.close();
      removeDir(dir); // nodelet leaves pods' volumes mounted, as the kubelet
    },
  };
}

/**
 * A pod of namespace `default` bound to n1: one container `app` of `image` sleeping an hour,
 * on the host network, no grace period, no service-account token; `spec` adds or overrides fields.
 */
export function n1Pod(name: string, spec: Partial<PodSpec> = {}, image = 'docker.io/local/busybox:latest'): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default' },
    spec: {
      nodeName: 'n1',
      hostNetwork: true,
      terminationGracePeriodSeconds: 0,
      automountServiceAccountToken: false,
      containers: [{ name: 'app', image, imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }],
      ...spec,
    },
  };
}
