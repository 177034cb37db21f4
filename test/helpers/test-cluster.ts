/**
 * The test control plane (in this process) with what every connected test needs around it:
 * a folder of its own, the admin's kubeconfig and client (straight to the control plane),
 * and kubeconfigs for nodes (`system:node:<name>` in `system:nodes`), optionally pointing
 * at a TcpProxy the test puts between the node and the server.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { ControlPlaneClient, PODS } from '../../src/controlplane/client.js';
import { SECRETS } from '../../src/controlplane/objects.js';
import { loadKubeconfig } from '../../src/controlplane/kubeconfig.js';
import { startControlPlane, type ControlPlane, type ControlPlaneOptions } from '../control-plane/server.js';
import { tempDir } from './nodelet.js';
import type { TcpProxy } from './tcp-proxy.js';

export interface TestCluster {
  cp: ControlPlane;
  /** The admin's client (system:masters), straight to the control plane. */
  api: ControlPlaneClient;
  /** A temp folder of the test's own; `admin.kubeconfig` is in it. */
  dir: string;
  /** Writes `<dir>/<node>.kubeconfig` for node `node`, reaching the server through `via` when given; returns its path. */
  nodeKubeconfig(node: string, o?: { via?: TcpProxy }): string;
  /** Deletes every pod in the API (what a node test's teardown does before its node goes). */
  deletePods(): Promise<void>;
  /**
   * Creates the bootstrap token `<id>.<secret>` (its `bootstrap-token-<id>` Secret in
   * kube-system, usable for authentication; `more`: further data fields, as text).
   */
  createBootstrapToken(id: string, secret: string, more?: Record<string, string>): Promise<void>;
  close(): Promise<void>;
}

export async function startTestCluster(o: { prefix: string; controlPlane?: ControlPlaneOptions }): Promise<TestCluster> {
  const cp = await startControlPlane(o.controlPlane);
  const dir = tempDir(o.prefix);
  cp.writeKubeconfig(path.join(dir, 'admin.kubeconfig'), { user: 'admin', groups: ['system:masters'] });
  const api = new ControlPlaneClient({ access: loadKubeconfig(path.join(dir, 'admin.kubeconfig')) });
  return {
    cp,
    api,
    dir,
    nodeKubeconfig(node, k = {}) {
      const file = path.join(dir, `${node}.kubeconfig`);
      cp.writeKubeconfig(file, { user: `system:node:${node}`, groups: ['system:nodes'] });
      if (k.via) fs.writeFileSync(file, fs.readFileSync(file, 'utf8').split(cp.url).join(k.via.url));
      return file;
    },
    async deletePods() {
      const { items } = await api.listAll<Pod>(PODS, {});
      for (const p of items) await api.delete(PODS, { namespace: p.metadata!.namespace!, name: p.metadata!.name! }).catch(() => undefined);
    },
    async createBootstrapToken(id, secret, more = {}) {
      const data = Object.fromEntries(Object.entries({ 'token-id': id, 'token-secret': secret, 'usage-bootstrap-authentication': 'true', ...more }).map(([k, v]) => [k, Buffer.from(v).toString('base64')]));
      await api.create(SECRETS, { apiVersion: 'v1', kind: 'Secret', metadata: { name: `bootstrap-token-${id}`, namespace: 'kube-system' }, type: 'bootstrap.kubernetes.io/token', data } as never);
    },
    async close() {
      await api.close();
      await cp.close();
    },
  };
}
