/**
 * A connected node for the fault suite: the test control plane (in this process), the test
 * CRI server, and the built nodelet registered as node n1, reaching the control plane
 * through a TcpProxy the test controls (or directly). An admin client talks to the control
 * plane directly. Options choose the server's authentication/authorization (the test
 * defaults: anonymous and AlwaysAllow; `webhook: true`: the v1beta1 defaults, TokenReview and
 * SubjectAccessReview) and extra config fields.
 */
import fs from 'node:fs';
import path from 'node:path';
import { ControlPlaneClient } from '../../src/controlplane/client.js';
import { loadKubeconfig } from '../../src/controlplane/kubeconfig.js';
import { startFakeRuntime, type FakeRuntime } from '../cri/fake-runtime.js';
import { controlPlaneFaults, type ControlPlaneFaults } from '../control-plane/faults.js';
import { startControlPlane, type ControlPlane } from '../control-plane/server.js';
import { freePort, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from '../helpers/nodelet.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

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

export async function startConnectedNode(o: { prefix: string; proxy?: boolean; webhook?: boolean; config?: Record<string, string | number | boolean> }): Promise<ConnectedNode> {
  const cp = await startControlPlane();
  const cri = await startFakeRuntime();
  const proxy = o.proxy ? await TcpProxy.start(cp.url) : undefined;
  const dir = tempDir(o.prefix);
  cp.writeKubeconfig(path.join(dir, 'admin.kubeconfig'), { user: 'admin', groups: ['system:masters'] });
  const api = new ControlPlaneClient({ access: loadKubeconfig(path.join(dir, 'admin.kubeconfig')) });
  const kc = path.join(dir, 'kubelet.kubeconfig');
  cp.writeKubeconfig(kc, { user: 'system:node:n1', groups: ['system:nodes'] });
  if (proxy) fs.writeFileSync(kc, fs.readFileSync(kc, 'utf8').split(cp.url).join(proxy.url));
  const ports = { https: await freePort(), healthz: await freePort() };
  writeKubeletConfig(dir, {
    containerRuntimeEndpoint: `unix://${cri.socketPath}`,
    podLogsDir: path.join(dir, 'logs'),
    address: '127.0.0.1',
    port: ports.https,
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort: ports.healthz,
    ...(o.webhook ? {} : { authentication: '{anonymous: {enabled: true}, webhook: {enabled: false}}', authorization: '{mode: AlwaysAllow}' }),
    nodeLeaseDurationSeconds: 4,
    nodeStatusUpdateFrequency: '1s',
    ...o.config,
  });
  const nodelet = startNodelet(['--config', path.join(dir, 'kubelet.yaml'), '--kubeconfig', kc, '--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'lock'), '--hostname-override', 'n1']);
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
      await api.close();
      await proxy?.close();
      await cri.stop();
      await cp.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
