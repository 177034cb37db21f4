/**
 * A nodelet against a private containerd (its own base directory, so that tests may stop
 * and start it and nodelet's orphan removal touches nothing else), standalone or connected
 * to a control plane, with a static pod folder, a pod logs folder, a container log link
 * folder and the read-only port to read /pods.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Pod, PodList } from 'kubernetes-types/core/v1.js';
import { LABEL_NODELET_NODE } from '../../../src/pods/cri/labels.js';
import { readCgroupLayout } from '../../../src/pods/cgroups/pod-cgroups.js';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import type { ControlPlaneOptions } from '../../control-plane/server.js';
import { ensureContainerd } from '../../helpers/containerd.js';
import { eventually, freePort, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from '../../helpers/nodelet.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';

/** Base directory of the containerd the pod tests own. */
export const PODS_CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-pods';
export const NODE_NAME = 'testnode';

export interface PodNode {
  /** The node's name (`--hostname-override`). */
  name: string;
  dir: string;
  manifests: string;
  rootDir: string;
  logsDir: string;
  /** `--container-log-dir`: the `/var/log/containers`-style links. */
  containerLogDir: string;
  endpoint: string;
  readOnlyPort: number;
  /** The HTTPS port (anonymous, AlwaysAllow). */
  port: number;
  cri: CriClient;
  nodelet: NodeletProcess;
  /** Starts nodelet again with the same files and flags (after a kill). */
  restart(): Promise<void>;
  pods(): Promise<Pod[]>;
  pod(name: string): Promise<Pod | undefined>;
  writeManifest(file: string, pod: object): void;
  close(): Promise<void>;
}

/** What `beforeStart` gets: the node's folders and runtime, before its nodelet starts. */
export type PodNodePaths = Pick<PodNode, 'name' | 'dir' | 'manifests' | 'rootDir' | 'logsDir' | 'endpoint' | 'cri'>;

/**
 * `kubeconfig`: connected to that control plane (else standalone); `containerdDir`: a
 * containerd of the caller's own (default PODS_CONTAINERD_DIR); `name`: the node's name
 * (default NODE_NAME); `config`: more KubeletConfiguration fields (they win over the harness's);
 * `env`: more environment for nodelet; `args`: more command-line flags (`--node-ip 127.0.0.1`);
 * `beforeStart`: runs before nodelet starts (what another agent left on the node).
 */
export async function startPodNode(o: { kubeconfig?: string; containerdDir?: string; name?: string; config?: Record<string, string | number | boolean>; env?: NodeJS.ProcessEnv; args?: string[]; beforeStart?: (paths: PodNodePaths) => Promise<void> } = {}): Promise<PodNode> {
  const { endpoint } = await ensureContainerd({ dir: o.containerdDir ?? PODS_CONTAINERD_DIR });
  const name = o.name ?? NODE_NAME;
  const dir = tempDir('nodelet-pods-');
  const manifests = path.join(dir, 'manifests');
  const rootDir = path.join(dir, 'root');
  const logsDir = path.join(dir, 'logs');
  const containerLogDir = path.join(dir, 'containers');
  fs.mkdirSync(manifests);
  const readOnlyPort = await freePort();
  const port = await freePort();
  const config = writeKubeletConfig(dir, {
    staticPodPath: manifests,
    containerRuntimeEndpoint: endpoint,
    podLogsDir: logsDir,
    readOnlyPort,
    port,
    address: '127.0.0.1',
    healthzPort: 0,
    // Anonymous + AlwaysAllow on loopback: the tests read /containerLogs without credentials.
    authentication: '{webhook: {enabled: false}, anonymous: {enabled: true}}',
    authorization: '{mode: AlwaysAllow}',
    // A cgroupRoot of each node's own (removed at close): no test touches a real /kubepods, and
    // nodes side by side never see each other's pod cgroups.
    cgroupRoot: `/${path.basename(dir)}`,
    ...o.config,
  });
  const args = ['--config', config, '--root-dir', rootDir, '--lock-file', path.join(dir, 'kubelet.lock'), '--hostname-override', name, '--container-log-dir', containerLogDir, ...(o.kubeconfig ? ['--kubeconfig', o.kubeconfig] : []), ...(o.args ?? [])];
  const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 10_000 });
  try {
    await o.beforeStart?.({ name, dir, manifests, rootDir, logsDir, endpoint, cri });
  } catch (err) {
    cri.close();
    throw err;
  }
  const node: PodNode = {
    name,
    dir,
    manifests,
    rootDir,
    logsDir,
    containerLogDir,
    endpoint,
    readOnlyPort,
    port,
    cri,
    nodelet: startNodelet(args, o.env ? { env: o.env } : {}),
    async restart() {
      node.nodelet = startNodelet(args, o.env ? { env: o.env } : {});
      await node.nodelet.waitForMsg(/nodelet is ready/, 30_000);
    },
    async pods() {
      const res = await fetch(`http://127.0.0.1:${readOnlyPort}/pods`);
      if (res.status !== 200) throw new Error(`/pods answered ${res.status}`);
      return ((await res.json()) as PodList).items;
    },
    async pod(pod) {
      return (await node.pods()).find((p) => p.metadata?.name === `${pod}-${name}`);
    },
    writeManifest(file, pod) {
      // Write then rename, as an operator's tooling should: the watcher never sees half a file.
      const tmp = path.join(manifests, `.${file}.tmp`);
      fs.writeFileSync(tmp, JSON.stringify(pod, null, 2));
      fs.renameSync(tmp, path.join(manifests, file));
    },
    async close() {
      // Remove every pod this node ran, then stop nodelet. Only this node's: nodelet leaves
      // alone a runtime pod another node's agent made (one a killed agent left behind).
      for (const f of fs.readdirSync(manifests)) fs.rmSync(path.join(manifests, f));
      const ours = async () => (await runtimePods(cri)).filter((s) => s.labels[LABEL_NODELET_NODE] === name);
      await eventually(async () => (await node.pods()).length === 0 && (await ours()).length === 0, 60_000).catch(() => undefined);
      node.nodelet.kill('SIGTERM');
      await node.nodelet.exited;
      cri.close();
      if (o.config?.cgroupRoot === undefined) await removeCgroupTree(`/${path.basename(dir)}`);
    },
  };
  await node.nodelet.waitForMsg(/nodelet is ready/, 30_000);
  return node;
}

/** A pod node connected to a test control plane of its own (through a TcpProxy when asked). */
export interface ApiPodNode {
  cluster: TestCluster;
  node: PodNode;
  proxy: TcpProxy | undefined;
  /** Lets the proxy through again, deletes every pod in the API, closes the node, the proxy and the control plane. */
  close(): Promise<void>;
}

export interface ApiPodNodeOptions {
  prefix: string;
  name: string;
  containerdDir: string;
  proxy?: boolean;
  controlPlane?: ControlPlaneOptions;
  config?: Record<string, string | number | boolean>;
}

/**
 * Starts a test control plane (`prefix`: its folder; `controlPlane`: its options), the TcpProxy
 * nodelet reaches it through when `proxy`, then a pod node `name` on the containerd of
 * `containerdDir`, registered with the node's kubeconfig (`config`: more KubeletConfiguration
 * fields). What was started is closed again if a later step fails.
 */
export async function startApiPodNode(o: ApiPodNodeOptions & { proxy: true }): Promise<ApiPodNode & { proxy: TcpProxy }>;
export async function startApiPodNode(o: ApiPodNodeOptions): Promise<ApiPodNode>;
export async function startApiPodNode(o: ApiPodNodeOptions): Promise<ApiPodNode> {
  const cluster = await startTestCluster({ prefix: o.prefix, ...(o.controlPlane ? { controlPlane: o.controlPlane } : {}) });
  let proxy: TcpProxy | undefined;
  try {
    proxy = o.proxy ? await TcpProxy.start(cluster.cp.url) : undefined;
    const node = await startPodNode({ kubeconfig: cluster.nodeKubeconfig(o.name, { via: proxy }), containerdDir: o.containerdDir, name: o.name, ...(o.config ? { config: o.config } : {}) });
    const via = proxy;
    return {
      cluster,
      node,
      proxy: via,
      async close() {
        await via?.restore();
        await cluster.deletePods();
        await node.close();
        await via?.close();
        await cluster.close();
      },
    };
  } catch (err) {
    await proxy?.close();
    await cluster.close();
    throw err;
  }
}

/** Runs `cmd` under `sh -c` in container `id` (10 s at most): its stdout then stderr, trimmed. */
export async function shIn(cri: CriClient, id: string, cmd: string): Promise<string> {
  const r = await cri.execSync(id, ['sh', '-c', cmd], 10);
  return `${r.stdout.toString()}${r.stderr.toString()}`.trim();
}

/** Removes a cgroup tree (deepest first) from every cgroup hierarchy; a busy or missing cgroup is left. */
export async function removeCgroupTree(rel: string): Promise<void> {
  const layout = await readCgroupLayout().catch(() => undefined);
  for (const mount of layout?.mounts ?? []) {
    const walk = (dir: string): void => {
      if (!fs.existsSync(dir)) return;
      for (const e of fs.readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(path.join(dir, e.name));
      try {
        fs.rmdirSync(dir);
      } catch {
        // busy: a pod still runs there
      }
    };
    walk(path.join(mount, rel));
  }
}

/** Sandboxes in the runtime carrying the kubelet's pod UID label. */
export async function runtimePods(cri: CriClient) {
  return (await cri.listPodSandbox()).filter((s) => s.labels['io.kubernetes.pod.uid']);
}

/** Every container in the runtime (any state) of the pod with this UID. */
export async function podContainers(cri: CriClient, uid: string) {
  return cri.listContainers({ labelSelector: { 'io.kubernetes.pod.uid': uid } });
}

/** A busybox pod on the host network (where the network is not what a test is about). */
export function busyboxPod(name: string, script: string, extra: { restartPolicy?: string; container?: object; spec?: object } = {}): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { test: name } },
    spec: {
      hostNetwork: true,
      terminationGracePeriodSeconds: 2,
      ...(extra.restartPolicy ? { restartPolicy: extra.restartPolicy } : {}),
      containers: [
        {
          name: 'main',
          image: 'docker.io/local/busybox:latest',
          imagePullPolicy: 'IfNotPresent',
          command: ['/bin/sh', '-c', script],
          ...extra.container,
        },
      ],
      ...extra.spec,
    },
  };
}

/** The container log file nodelet asked the runtime to write, for restart `n`. */
export function containerLog(node: PodNode, pod: Pod, container: string, n = 0): string {
  const m = pod.metadata!;
  const file = path.join(node.logsDir, `${m.namespace}_${m.name}_${m.uid}`, container, `${n}.log`);
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
}

/** `busyboxPod` as the control plane holds it, bound to node `nodeName`: namespace `default`, `spec.nodeName`. */
export function boundPod(nodeName: string, name: string, script: string, extra: Parameters<typeof busyboxPod>[2] = {}): Pod {
  const p = busyboxPod(name, script, extra) as Pod;
  return { ...p, metadata: { ...p.metadata, namespace: 'default' }, spec: { ...p.spec!, nodeName } };
}

/** `kubelet_runtime_operations_total` of this node's nodelet process, by operation_type, from its read-only port. */
export async function runtimeOperations(node: Pick<PodNode, 'readOnlyPort'>): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${node.readOnlyPort}/metrics`)).text();
  const ops: Record<string, number> = {};
  for (const m of text.matchAll(/^kubelet_runtime_operations_total\{operation_type="([a-z_]+)"\} (\d+)$/gm)) ops[m[1]!] = Number(m[2]);
  return ops;
}
