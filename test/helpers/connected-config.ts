/**
 * What every connected test node on the test CRI server is started with, written once: its
 * KubeletConfiguration and its flags, and the teardown of such a test. Each test adds only
 * what it is about (a field, a bootstrap kubeconfig, kubeadm's flags).
 */
import path from 'node:path';
import type { FakeRuntime } from '../cri/fake-runtime.js';
import { removeDir } from './cleanup.js';
import { freePort, writeKubeletConfig, type NodeletProcess } from './nodelet.js';
import type { TestCluster } from './test-cluster.js';

export interface ConnectedConfig {
  /** `<dir>/kubelet.yaml`. */
  config: string;
  ports: { https: number; healthz: number };
}

/**
 * Writes `<dir>/kubelet.yaml` for a connected node on the CRI server at `socketPath`: pod logs
 * in `<dir>/logs`, HTTPS and healthz on loopback and free ports, no read-only port, anonymous
 * requests allowed (AlwaysAllow) unless `webhook` (then the v1beta1 defaults, TokenReview and
 * SubjectAccessReview), a 4 s lease and 1 s status updates (tests wait on them); `fields`
 * add to or override these, a field given as undefined is left out (nodelet's default).
 */
export async function writeConnectedConfig(dir: string, socketPath: string, o: { webhook?: boolean; fields?: Record<string, string | number | boolean | undefined> } = {}): Promise<ConnectedConfig> {
  const ports = { https: await freePort(), healthz: await freePort() };
  const fields: Record<string, string | number | boolean | undefined> = {
    containerRuntimeEndpoint: `unix://${socketPath}`,
    podLogsDir: path.join(dir, 'logs'),
    address: '127.0.0.1',
    port: ports.https,
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort: ports.healthz,
    ...(o.webhook ? {} : { authentication: '{anonymous: {enabled: true}, webhook: {enabled: false}}', authorization: '{mode: AlwaysAllow}' }),
    nodeLeaseDurationSeconds: 4,
    nodeStatusUpdateFrequency: '1s',
    ...o.fields,
  };
  const config = writeKubeletConfig(dir, Object.fromEntries(Object.entries(fields).filter((e): e is [string, string | number | boolean] => e[1] !== undefined)));
  return { config, ports };
}

/** nodelet's flags for node `node` in `dir` (its kubelet.yaml, root dir and lock file there) with `kubeconfig`; `more` after them. */
export function connectedArgs(dir: string, node: string, kubeconfig: string, more: string[] = []): string[] {
  return ['--config', path.join(dir, 'kubelet.yaml'), '--kubeconfig', kubeconfig, '--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'lock'), '--hostname-override', node, ...more];
}

/**
 * A connected node test's teardown: deletes every pod in the API while its nodelets still
 * run, stops them (SIGTERM, waiting for each), the CRI server and the control plane, and
 * removes the test's folder (nodelet leaves pods' volumes mounted, as the kubelet: removeDir
 * unmounts them). What a failed beforeAll never started is skipped.
 */
export async function tearDownConnected(o: { cluster: TestCluster | undefined; cri: FakeRuntime | undefined; nodelets: Array<NodeletProcess | undefined> }): Promise<void> {
  await o.cluster?.deletePods();
  for (const n of o.nodelets) {
    n?.kill('SIGTERM');
    await n?.exited;
  }
  await o.cri?.stop();
  await o.cluster?.close();
  if (o.cluster) removeDir(o.cluster.dir);
}
