/**
 * A node for daemon tests: the built nodelet standalone on the test CRI server, in a
 * temporary folder (manifests, root dir, lock, pod logs), with its HTTPS, read-only and
 * healthz ports on loopback. What varies between tests (extra config fields, flags, static
 * pods) is an option; everything else is the same everywhere.
 */
import fs from 'node:fs';
import path from 'node:path';
import { startFakeRuntime, type FakeRuntime } from '../cri/fake-runtime.js';
import type { PodList } from 'kubernetes-types/core/v1.js';
import { request, type Reply } from '../integration/server/client.js';
import { createTestCa, type Issued } from '../integration/server/pki.js';
import { eventually, freePort, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from './nodelet.js';

/** A static pod running `sleep 3600` in busybox on the host network. */
export function sleeperManifest(name: string, namespace?: string, extra = ''): string {
  const ns = namespace ? `, namespace: ${namespace}` : '';
  return `apiVersion: v1\nkind: Pod\nmetadata: {name: ${name}${ns}}\nspec:\n  hostNetwork: true\n  containers:\n  - name: web\n    image: docker.io/local/busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [sleep, "3600"]\n${extra}`;
}

export interface FakeNodeOptions {
  /** Static pod manifests: file name -> text. */
  manifests?: Record<string, string>;
  /** More KubeletConfiguration fields (YAML flow text), over the defaults below. */
  config?: Record<string, string | number | boolean>;
  /** More nodelet flags. */
  args?: string[];
  /** Folder name prefix. */
  prefix?: string;
  /** Start nodelet at once and wait until it is ready (default true). */
  start?: boolean;
  /** A client CA (PEM): written to `<dir>/ca.crt`, client certificates required (no anonymous). */
  clientCA?: string;
  /** A test CA made here (the client CA, as above) and a client certificate it issues, used by https(). */
  client?: { cn: string; orgs?: string[] };
}

export interface FakeNode {
  cri: FakeRuntime;
  dir: string;
  manifests: string;
  rootDir: string;
  ports: { https: number; readOnly: number; healthz: number };
  /** The running nodelet (after start()). */
  nodelet: NodeletProcess;
  /** The command line nodelet runs with. */
  args: string[];
  /** Starts nodelet (again) and waits for `nodelet is ready`. */
  start(extraArgs?: string[]): Promise<NodeletProcess>;
  /** SIGTERM nodelet, wait for it, stop the CRI server, remove the folder. */
  close(): Promise<void>;
  /** The serving certificate nodelet generated (PEM), to trust it. */
  servingCert(): string;
  /** Resolves once `n` pods show a running container on the read-only port. */
  podsRunning(n: number, timeoutMs?: number): Promise<void>;
  /** The client certificate of `client` (when asked for). */
  client?: Issued;
  /** A request to nodelet's HTTPS port, trusting its serving certificate, with the client certificate when there is one. */
  https(path: string, o?: { method?: string; anonymous?: boolean }): Promise<Reply>;
}

export async function startFakeNode(o: FakeNodeOptions = {}): Promise<FakeNode> {
  let client: Issued | undefined;
  if (o.client) {
    const ca = await createTestCa();
    client = await ca.issue({ cn: o.client.cn, orgs: o.client.orgs ?? [] });
    o = { ...o, clientCA: ca.cert };
  }
  const cri = await startFakeRuntime();
  const dir = tempDir(o.prefix ?? 'nodelet-test-');
  const manifests = path.join(dir, 'manifests');
  const rootDir = path.join(dir, 'root');
  fs.mkdirSync(manifests);
  for (const [file, text] of Object.entries(o.manifests ?? {})) fs.writeFileSync(path.join(manifests, file), text);
  if (o.clientCA) fs.writeFileSync(path.join(dir, 'ca.crt'), o.clientCA);
  const authentication = o.clientCA
    ? `{anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: ${path.join(dir, 'ca.crt')}}}`
    : '{anonymous: {enabled: true}, webhook: {enabled: false}}';
  const ports = { https: await freePort(), readOnly: await freePort(), healthz: await freePort() };
  writeKubeletConfig(dir, {
    containerRuntimeEndpoint: cri.endpoint,
    staticPodPath: manifests,
    podLogsDir: path.join(dir, 'logs'),
    address: '127.0.0.1',
    port: ports.https,
    readOnlyPort: ports.readOnly,
    healthzBindAddress: '127.0.0.1',
    healthzPort: ports.healthz,
    authentication,
    authorization: '{mode: AlwaysAllow}',
    ...o.config,
  });
  const args = ['--config', path.join(dir, 'kubelet.yaml'), '--root-dir', rootDir, '--lock-file', path.join(dir, 'lock'), '--hostname-override', 'n1', '--container-log-dir', path.join(dir, 'containers'), ...(o.args ?? [])];
  const node: FakeNode = {
    cri,
    dir,
    manifests,
    rootDir,
    ports,
    nodelet: undefined as unknown as NodeletProcess,
    args,
    async start(extraArgs = []) {
      node.nodelet = startNodelet([...args, ...extraArgs]);
      await node.nodelet.waitForMsg(/nodelet is ready/, 60_000);
      return node.nodelet;
    },
    async close() {
      node.nodelet?.kill('SIGTERM');
      await node.nodelet?.exited;
      await cri.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
    servingCert: () => fs.readFileSync(path.join(rootDir, 'pki', 'kubelet.crt'), 'utf8'),
    ...(client ? { client } : {}),
    https(p, ro = {}) {
      const creds = client && !ro.anonymous ? { cert: client.cert, key: client.key } : {};
      return request(`https://127.0.0.1:${ports.https}${p}`, { ...(ro.method ? { method: ro.method } : {}), ca: node.servingCert(), ...creds });
    },
    async podsRunning(n, timeoutMs = 20_000) {
      await eventually(async () => {
        const res = await fetch(`http://127.0.0.1:${ports.readOnly}/pods`);
        return ((await res.json()) as PodList).items.filter((p) => p.status?.containerStatuses?.[0]?.state?.running).length >= n;
      }, timeoutMs);
    },
  };
  if (o.start ?? true) await node.start();
  return node;
}
