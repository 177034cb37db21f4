/**
 * The pod network scripts/containerd.sh sets up for one base directory (its CNI config),
 * and the removal of what pods left on the host: the bridge and the host-local IPAM state
 * outlive containerd and its sandboxes. Remove them only once the containerd has no
 * sandbox left (FACTS.md: a sandbox whose network is gone cannot be stopped).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Container, Node, Pod, PodSpec } from 'kubernetes-types/core/v1.js';
import { ControlPlaneClient, NODES, PODS } from '../../src/controlplane/client.js';
import { loadKubeconfig } from '../../src/controlplane/kubeconfig.js';
import { createCriClient, type CriClient } from '../../src/runtime/cri-client.js';
import { startControlPlane, type ControlPlane } from '../control-plane/server.js';
import { BUSYBOX_IMAGE, ensureContainerd } from './containerd.js';
import { eventually, freePort, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from './nodelet.js';

export interface PodNetwork {
  /** CNI network name: IPAM state lives in /var/lib/cni/networks/<name>. */
  name: string;
  bridge: string;
  /** The /24 pods get their IPs from. */
  subnet: string;
}

/** Reads `<dir>/cni/net.d/10-nodelet.conflist`; throws naming the file when it is not the script's. */
export function podNetwork(dir: string): PodNetwork {
  const file = path.join(dir, 'cni/net.d/10-nodelet.conflist');
  const conf = JSON.parse(fs.readFileSync(file, 'utf8')) as { name?: unknown; plugins?: { type?: string; bridge?: unknown; ipam?: { ranges?: { subnet?: unknown }[][] } }[] };
  const bridge = conf.plugins?.find((p) => p.type === 'bridge');
  const subnet = bridge?.ipam?.ranges?.[0]?.[0]?.subnet;
  if (typeof conf.name !== 'string' || !/^nodelet-\d+$/.test(conf.name) || typeof bridge?.bridge !== 'string' || typeof subnet !== 'string') {
    throw new Error(`${file}: not a conflist written by scripts/containerd.sh (name, bridge plugin, ipam range)`);
  }
  return { name: conf.name, bridge: bridge.bridge, subnet };
}

/** Deletes the bridge (when present) and the IPAM state of that network. */
export async function removePodNetwork(net: PodNetwork): Promise<void> {
  if (fs.existsSync(`/sys/class/net/${net.bridge}`)) {
    await new Promise<void>((resolve, reject) => execFile('ip', ['link', 'del', net.bridge], (err) => (err ? reject(err) : resolve())));
  }
  fs.rmSync(path.join('/var/lib/cni/networks', net.name), { recursive: true, force: true });
}

/**
 * Ends a connected node whose pods have their own network, in the order that leaves
 * nothing behind: the API's pods deleted first (their sandboxes need the CNI config to be
 * torn down), until the runtime holds none; then nodelet; then the bridge and IPAM state;
 * then the clients, the control plane and the folder. Every part may be missing (a
 * beforeAll that failed half way).
 */
export async function tearDownNetworkedNode(o: {
  api?: ControlPlaneClient;
  cri?: CriClient;
  nodelet?: NodeletProcess;
  net?: PodNetwork;
  cp?: ControlPlane;
  dir?: string;
}): Promise<void> {
  const { api, cri, nodelet, net, cp, dir } = o;
  if (api) {
    for (const p of (await api.listAll<Pod>(PODS, { namespace: 'default' }).catch(() => ({ items: [] as Pod[] }))).items) await api.delete(PODS, { namespace: 'default', name: p.metadata!.name! }).catch(() => {});
  }
  if (cri) await eventually(async () => (await cri.listPodSandbox()).filter((s) => s.labels['io.kubernetes.pod.uid']).length === 0, 60_000).catch(() => undefined);
  if (nodelet) {
    nodelet.kill('SIGTERM');
    await nodelet.exited;
  }
  if (cri && net && (await cri.listPodSandbox()).length === 0) await removePodNetwork(net);
  cri?.close();
  await api?.close();
  await cp?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
}

/** A connected node on a containerd of the test's own whose pods get their own network. */
export interface NetworkedNode {
  cp: ControlPlane;
  /** The admin's client (system:masters); its kubeconfig is `<dir>/admin.kubeconfig`. */
  api: ControlPlaneClient;
  cri: CriClient;
  net: PodNetwork;
  nodelet: NodeletProcess;
  /** The test's folder: kubeconfigs, kubelet.yaml, root dir, lock, `logs` (podLogsDir). */
  dir: string;
  /** ms from nodelet's start to its Node Ready. */
  readyAfterMs: number;
}

/**
 * Starts what a networked-node test stands on, in order: the containerd of `containerdDir`
 * (scripts/containerd.sh, with its CNI config), the test control plane allocating a /24 per
 * node from that network's range, a temp folder with the node's and the admin's
 * kubeconfigs, then the built nodelet (anonymous, AlwaysAllow, on 127.0.0.1 and a free
 * port, podLogsDir `<dir>/logs`; `config` adds or overrides fields, given the folder) and
 * waits for its Node to be Ready. Whatever was started is torn down if a step fails.
 */
export async function startNetworkedNode(o: {
  containerdDir: string;
  node: string;
  prefix: string;
  config?: (dir: string) => Record<string, string | number | boolean>;
  args?: string[];
}): Promise<NetworkedNode> {
  const { endpoint } = await ensureContainerd({ dir: o.containerdDir });
  const net = podNetwork(o.containerdDir);
  const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 10_000 });
  let cp: ControlPlane | undefined;
  let api: ControlPlaneClient | undefined;
  let nodelet: NodeletProcess | undefined;
  let dir: string | undefined;
  try {
    cp = await startControlPlane({ clusterCIDR: net.subnet, nodeCIDRMaskSize: 24 });
    dir = tempDir(o.prefix);
    cp.writeKubeconfig(path.join(dir, 'kubelet.kubeconfig'), { user: `system:node:${o.node}`, groups: ['system:nodes'] });
    cp.writeKubeconfig(path.join(dir, 'admin.kubeconfig'), { user: 'admin', groups: ['system:masters'] });
    api = new ControlPlaneClient({ access: loadKubeconfig(path.join(dir, 'admin.kubeconfig')) });
    const config = writeKubeletConfig(dir, {
      containerRuntimeEndpoint: endpoint,
      podLogsDir: path.join(dir, 'logs'),
      port: await freePort(),
      address: '127.0.0.1',
      healthzPort: 0,
      // The control plane presents its client certificate; without a client CA it is anonymous here.
      authentication: '{webhook: {enabled: false}, anonymous: {enabled: true}}',
      authorization: '{mode: AlwaysAllow}',
      ...o.config?.(dir),
    });
    const started = Date.now();
    nodelet = startNodelet(['--config', config, '--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'kubelet.lock'), '--hostname-override', o.node, '--kubeconfig', path.join(dir, 'kubelet.kubeconfig'), ...(o.args ?? [])]);
    const client = api;
    await eventually(async () => {
      const n = await client.get<Node>(NODES, { name: o.node }).catch(() => undefined);
      return n?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
    }, 20_000, 25);
    return { cp, api, cri, net, nodelet, dir, readyAfterMs: Date.now() - started };
  } catch (err) {
    await tearDownNetworkedNode({ api, cri, nodelet, net, cp, dir });
    throw err;
  }
}

/**
 * A pod of namespace `default` bound to `node`: one busybox container `main` running
 * `script` under `/bin/sh -c`, a 1 s grace period; `spec` and `container` add or override fields.
 */
export function busyboxPod(node: string, name: string, script: string, spec: Partial<PodSpec> = {}, container: Partial<Container> = {}): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default' },
    spec: {
      nodeName: node,
      terminationGracePeriodSeconds: 1,
      containers: [{ name: 'main', image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', script], ...container }],
      ...spec,
    },
  };
}
