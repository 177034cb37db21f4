/**
 * Control-plane outages, with a TCP proxy the test controls between the built nodelet and
 * the test control plane (test CRI server as the runtime):
 * - every connection dropped at once: the watch resumes from its resourceVersion (no
 *   relist) and the Lease keeps being renewed;
 * - the server unreachable for 30 s (connects refused), then back: nodelet stays up (same
 *   process), its pods keep running, the Lease is renewed again within a second of the
 *   server answering (a server that does not answer at all is asked every second; one that
 *   answers with errors gets the kubelet's backoff to 7 s), a pod change made during the outage
 *   (a container that crashed and was restarted) reaches the API with its events, and the
 *   watch resumes without a relist (its resourceVersion is still in the server's history).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Event as CoreEvent, Node, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ControlPlaneClient, EVENTS, LEASES, NODES, PODS } from '../../../src/controlplane/client.js';
import { loadKubeconfig } from '../../../src/controlplane/kubeconfig.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { eventually, freePort, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from '../../helpers/nodelet.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';

const OUTAGE_MS = 30_000;
/** How soon after the server answers again the lease must be renewed. */
const LEASE_RENEW_BOUND_MS = 1_000;

let cp: ControlPlane;
let cri: FakeRuntime;
let proxy: TcpProxy;
let nodelet: NodeletProcess;
let api: ControlPlaneClient;
let dir: string;

beforeAll(async () => {
  cp = await startControlPlane();
  cri = await startFakeRuntime();
  proxy = await TcpProxy.start(cp.url);
  dir = tempDir('nodelet-outage-');
  cp.writeKubeconfig(path.join(dir, 'admin.kubeconfig'), { user: 'admin', groups: ['system:masters'] });
  api = new ControlPlaneClient({ access: loadKubeconfig(path.join(dir, 'admin.kubeconfig')) });
  // nodelet reaches the control plane only through the proxy.
  const kc = path.join(dir, 'kubelet.kubeconfig');
  cp.writeKubeconfig(kc, { user: 'system:node:n1', groups: ['system:nodes'] });
  fs.writeFileSync(kc, fs.readFileSync(kc, 'utf8').split(cp.url).join(proxy.url));
  writeKubeletConfig(dir, {
    containerRuntimeEndpoint: `unix://${cri.socketPath}`,
    podLogsDir: path.join(dir, 'logs'),
    address: '127.0.0.1',
    port: await freePort(),
    readOnlyPort: 0,
    healthzPort: 0,
    authentication: '{anonymous: {enabled: true}, webhook: {enabled: false}}',
    authorization: '{mode: AlwaysAllow}',
    nodeLeaseDurationSeconds: 4,
    nodeStatusUpdateFrequency: '1s',
  });
  nodelet = startNodelet(['--config', path.join(dir, 'kubelet.yaml'), '--kubeconfig', kc, '--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'lock'), '--hostname-override', 'n1']);
  await nodelet.waitForMsg(/nodelet is ready/, 30_000);
});

afterAll(async () => {
  nodelet?.kill('SIGTERM');
  await nodelet?.exited;
  await api?.close();
  await proxy?.close();
  await cri?.stop();
  await cp?.close();
});

const lease = () => api.get<Lease>(LEASES, { namespace: 'kube-node-lease', name: 'n1' });
const getPod = (name: string) => api.get<Pod>(PODS, { namespace: 'default', name });
const lists = () => nodelet.records.filter((r) => /^listed pods /.test(r.msg)).length;
const podSpec = (name: string): Pod => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default' },
  spec: { nodeName: 'n1', hostNetwork: true, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] },
});
const containersOf = (uid: string) => [...cri.containers.values()].filter((c) => c.config.labels?.['io.kubernetes.pod.uid'] === uid);

/** Resolves with the first renewTime after `after` (ms), polling every 50 ms. */
async function renewedAfter(after: number, timeoutMs: number): Promise<number> {
  return eventually(async () => {
    const t = Date.parse((await lease()).spec!.renewTime!);
    return t > after ? t : undefined;
  }, timeoutMs, 50);
}

describe('control-plane outages', () => {
  let steady: Pod;

  it('comes up through the proxy: Ready, lease, one pod running, one list', async () => {
    await eventually(async () => (await api.get<Node>(NODES, { name: 'n1' }).catch(() => undefined))?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True', 15_000);
    await eventually(() => lease().catch(() => undefined), 10_000);
    steady = await api.create<Pod>(PODS, podSpec('steady'));
    await eventually(async () => (await getPod('steady')).status?.phase === 'Running', 15_000);
    expect(lists()).toBe(1);
  });

  it('every connection dropped: the watch resumes without a relist, the lease goes on', async () => {
    const t0 = Date.now();
    proxy.dropAll();
    // The watch is back (a pod created now runs) and the lease was renewed after the drop.
    await api.create<Pod>(PODS, podSpec('after-drop'));
    await eventually(async () => (await getPod('after-drop')).status?.phase === 'Running', 15_000);
    const renewed = await renewedAfter(t0, 10_000);
    console.log(`connections dropped: lease renewed ${renewed - t0} ms later`);
    expect(lists()).toBe(1);
  });

  it(`unreachable for ${OUTAGE_MS / 1000} s, then back: same process, pods running, lease renewed within a second, status and events caught up, no relist`, async () => {
    const pid = nodelet.pid;
    const crasher = await api.create<Pod>(PODS, podSpec('crasher'));
    await eventually(async () => (await getPod('crasher')).status?.phase === 'Running', 15_000);
    const crasherFirst = containersOf(crasher.metadata!.uid!)[0]!.id;
    const steadyIds = containersOf(steady.metadata!.uid!).map((c) => c.id);
    expect(steadyIds).toHaveLength(1);
    const warnsBefore = nodelet.records.length;

    await proxy.refuse();
    const down = Date.now();
    // A pod change while the server cannot hear it: the container crashes, nodelet restarts it.
    cri.exitContainer(crasherFirst, 1);
    await eventually(() => containersOf(crasher.metadata!.uid!).some((c) => c.id !== crasherFirst && c.state === 'CONTAINER_RUNNING'), OUTAGE_MS - 2_000);
    await new Promise((r) => setTimeout(r, OUTAGE_MS - (Date.now() - down)));
    // nodelet noticed and said so, and kept running.
    expect(nodelet.records.slice(warnsBefore).some((r) => r.level === 'warn' && /cannot renew the node lease/.test(r.msg))).toBe(true);
    expect(nodelet.child.exitCode).toBeNull();
    await proxy.restore();
    const up = Date.now();

    // The lease: renewed within a second of the server answering.
    const renewed = await renewedAfter(up, 10_000);
    const leaseDelay = renewed - up;
    // Pod status: the restart made during the outage shows in the API.
    const crasherInApi = await eventually(async () => {
      const p = await getPod('crasher');
      return (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1 ? p : undefined;
    }, 20_000);
    const statusDelay = Date.now() - up;
    expect(crasherInApi.status!.containerStatuses![0]!.containerID).toMatch(new RegExp(`://${containersOf(crasher.metadata!.uid!).find((c) => c.state === 'CONTAINER_RUNNING')!.id}$`));
    // Events emitted during the outage were kept and sent: the second Started of the crasher.
    const started = await eventually(async () => {
      const { items } = await api.listAll<CoreEvent>(EVENTS, { namespace: 'default' });
      const e = items.filter((x) => x.involvedObject.uid === crasher.metadata!.uid && x.reason === 'Started');
      return e.reduce((n, x) => n + (x.count ?? 1), 0) >= 2 ? e : undefined;
    }, 45_000);
    const eventsDelay = Date.now() - up;
    // The watch: resumed from its resourceVersion (a pod created now runs), with no relist.
    await api.create<Pod>(PODS, podSpec('after-outage'));
    await eventually(async () => (await getPod('after-outage')).status?.phase === 'Running', 45_000);
    const watchDelay = Date.now() - up;
    console.log(
      `outage ${OUTAGE_MS} ms: lease renewed ${leaseDelay} ms after the server answered again; crasher status in API after ${statusDelay} ms; its events after ${eventsDelay} ms; watch resumed (new pod running) after ${watchDelay} ms; lists ${lists()}`,
    );
    expect(leaseDelay).toBeLessThanOrEqual(LEASE_RENEW_BOUND_MS + 250);
    expect(started.length).toBeGreaterThan(0);
    expect(lists()).toBe(1);
    // Same process throughout; the steady pod's container never touched.
    expect(nodelet.pid).toBe(pid);
    expect(nodelet.child.exitCode).toBeNull();
    expect(nodelet.records.filter((r) => /starting nodelet/.test(r.msg))).toHaveLength(1);
    expect(containersOf(steady.metadata!.uid!).map((c) => [c.id, c.state])).toEqual([[steadyIds[0], 'CONTAINER_RUNNING']]);
    expect(cri.calls.filter((c) => c.method === 'StopContainer' && (c.request as { containerId?: string }).containerId === steadyIds[0])).toEqual([]);
    // Ready all along: 30 s is inside the node monitor's 50 s grace.
    expect((await api.get<Node>(NODES, { name: 'n1' })).status!.conditions!.find((c) => c.type === 'Ready')!.status).toBe('True');
  });
});
