/**
 * The pod network scripts/containerd.sh sets up for one base directory (its CNI config),
 * and the removal of what pods left on the host: the bridge and the host-local IPAM state
 * outlive containerd and its sandboxes. Remove them only once the containerd has no
 * sandbox left (FACTS.md: a sandbox whose network is gone cannot be stopped).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { PODS, type ControlPlaneClient } from '../../src/controlplane/client.js';
import type { CriClient } from '../../src/runtime/cri-client.js';
import type { ControlPlane } from '../control-plane/server.js';
import { eventually, type NodeletProcess } from './nodelet.js';

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
