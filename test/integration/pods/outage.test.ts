/**
 * Control-plane outages, with a TCP proxy the test controls between the built nodelet and
 * the test control plane, the pods running on a containerd of this file's own
 * (scripts/containerd.sh):
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
import { EVENTS, LEASES, NODES, PODS } from '../../../src/controlplane/client.js';
import { eventually } from '../../helpers/nodelet.js';
import type { TcpProxy } from '../../helpers/tcp-proxy.js';
import type { TestCluster } from '../../helpers/test-cluster.js';
import { boundPod, podContainers, startApiPodNode, type ApiPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-outage';
const OUTAGE_MS = 30_000;
/** How soon after the server answers again the lease must be renewed. */
const LEASE_RENEW_BOUND_MS = 1_000;

let connected: ApiPodNode | undefined;
let cluster: TestCluster;
let proxy: TcpProxy;
let node: PodNode;

beforeAll(async () => {
  // nodelet reaches the control plane only through the proxy.
  ({ cluster, proxy, node } = connected = await startApiPodNode({ prefix: 'nodelet-outage-', name: 'n1', containerdDir: CONTAINERD_DIR, proxy: true, config: { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s' } }));
  fs.mkdirSync(path.join(node.dir, 'trigger'));
});

afterAll(() => connected?.close());

const lease = () => cluster.api.get<Lease>(LEASES, { namespace: 'kube-node-lease', name: 'n1' });
const getPod = (name: string) => cluster.api.get<Pod>(PODS, { namespace: 'default', name });
const lists = () => node.nodelet.records.filter((r) => /^listed pods /.test(r.msg)).length;
const running = (name: string) => eventually(async () => (await getPod(name)).status?.phase === 'Running', 60_000, 50);

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
    await eventually(async () => (await cluster.api.get<Node>(NODES, { name: 'n1' }).catch(() => undefined))?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True', 30_000);
    await eventually(() => lease().catch(() => undefined), 10_000);
    steady = await cluster.api.create<Pod>(PODS, boundPod('n1', 'steady', 'sleep 3600'));
    await running('steady');
    expect(lists()).toBe(1);
  });

  it('every connection dropped: the watch resumes without a relist, the lease goes on', async () => {
    const t0 = Date.now();
    proxy.dropAll();
    // The watch is back (a pod created now runs) and the lease was renewed after the drop.
    await cluster.api.create<Pod>(PODS, boundPod('n1', 'after-drop', 'sleep 3600'));
    await running('after-drop');
    const podMs = Date.now() - t0;
    const renewed = await renewedAfter(t0, 10_000);
    console.log(`measured: connections dropped: lease renewed ${renewed - t0} ms later, a pod created after the drop Running after ${podMs} ms; lists ${lists()}`);
    expect(lists()).toBe(1);
  });

  it(`unreachable for ${OUTAGE_MS / 1000} s, then back: same process, pods running, lease renewed within a second, status and events caught up, no relist`, async () => {
    const pid = node.nodelet.pid;
    // Waits for a file in the trigger folder, then exits 1: a crash the test sets off.
    const crasher = await cluster.api.create<Pod>(
      PODS,
      boundPod('n1', 'crasher', 'while [ ! -e /trigger/crash ]; do usleep 100000; done; rm -f /trigger/crash; exit 1', {
        container: { volumeMounts: [{ name: 'trigger', mountPath: '/trigger' }] },
        spec: { volumes: [{ name: 'trigger', hostPath: { path: path.join(node.dir, 'trigger'), type: 'Directory' } }] },
      }),
    );
    const crasherUid = crasher.metadata!.uid!;
    await running('crasher');
    const [crasherFirst] = (await podContainers(node.cri, crasherUid)).map((c) => c.id);
    const steadyBefore = await podContainers(node.cri, steady.metadata!.uid!);
    expect(steadyBefore.map((c) => c.state)).toEqual(['CONTAINER_RUNNING']);
    const steadyStartedAt = (await node.cri.containerStatus(steadyBefore[0]!.id)).startedAt;
    const warnsBefore = node.nodelet.records.length;

    await proxy.refuse();
    const down = Date.now();
    // A pod change while the server cannot hear it: the container crashes, nodelet restarts it.
    fs.writeFileSync(path.join(node.dir, 'trigger', 'crash'), '');
    await eventually(async () => (await podContainers(node.cri, crasherUid)).some((c) => c.id !== crasherFirst && c.state === 'CONTAINER_RUNNING'), OUTAGE_MS - 2_000, 50);
    const crashRestartMs = Date.now() - down;
    await new Promise((r) => setTimeout(r, OUTAGE_MS - (Date.now() - down)));
    // nodelet noticed and said so, and kept running.
    expect(node.nodelet.records.slice(warnsBefore).some((r) => r.level === 'warn' && /cannot renew the node lease/.test(r.msg))).toBe(true);
    expect(node.nodelet.child.exitCode).toBeNull();
    await proxy.restore();
    const up = Date.now();

    // The lease: renewed within a second of the server answering.
    const renewed = await renewedAfter(up, 10_000);
    const leaseDelay = renewed - up;
    // Pod status: the restart made during the outage shows in the API.
    const crasherInApi = await eventually(async () => {
      const p = await getPod('crasher');
      return (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1 ? p : undefined;
    }, 20_000, 50);
    const statusDelay = Date.now() - up;
    const crasherNow = (await podContainers(node.cri, crasherUid)).filter((c) => c.state === 'CONTAINER_RUNNING');
    expect(crasherNow).toHaveLength(1);
    expect(crasherInApi.status!.containerStatuses![0]!.containerID).toBe(`containerd://${crasherNow[0]!.id}`);
    expect(crasherInApi.status!.containerStatuses![0]!.lastState!.terminated).toMatchObject({ exitCode: 1, containerID: `containerd://${crasherFirst}` });
    // Events emitted during the outage were kept and sent: the second Started of the crasher.
    const started = await eventually(async () => {
      const { items } = await cluster.api.listAll<CoreEvent>(EVENTS, { namespace: 'default' });
      const e = items.filter((x) => x.involvedObject.uid === crasherUid && x.reason === 'Started');
      return e.reduce((n, x) => n + (x.count ?? 1), 0) >= 2 ? e : undefined;
    }, 45_000, 50);
    const eventsDelay = Date.now() - up;
    // The watch: resumed from its resourceVersion (a pod created now runs), with no relist.
    await cluster.api.create<Pod>(PODS, boundPod('n1', 'after-outage', 'sleep 3600'));
    await eventually(async () => (await getPod('after-outage')).status?.phase === 'Running', 45_000, 50);
    const watchDelay = Date.now() - up;
    const steadyAfter = await podContainers(node.cri, steady.metadata!.uid!);
    console.log(
      `measured: outage ${OUTAGE_MS} ms: crasher restarted in containerd ${crashRestartMs} ms into it; lease renewed ${leaseDelay} ms after the server answered again; crasher status in API after ${statusDelay} ms; its Started events (${started.reduce((n, x) => n + (x.count ?? 1), 0)}) after ${eventsDelay} ms; watch resumed (new pod running) after ${watchDelay} ms; lists ${lists()}; nodelet starts ${node.nodelet.records.filter((r) => /starting nodelet/.test(r.msg)).length}; steady containers ${steadyAfter.length}, same ID ${steadyAfter[0]?.id === steadyBefore[0]!.id}`,
    );
    expect(leaseDelay).toBeLessThanOrEqual(LEASE_RENEW_BOUND_MS + 250);
    expect(started.length).toBeGreaterThan(0);
    expect(lists()).toBe(1);
    // Same process throughout; the steady pod's container never touched (same ID, running since the same instant).
    expect(node.nodelet.pid).toBe(pid);
    expect(node.nodelet.child.exitCode).toBeNull();
    expect(node.nodelet.records.filter((r) => /starting nodelet/.test(r.msg))).toHaveLength(1);
    expect(steadyAfter.map((c) => [c.id, c.state])).toEqual([[steadyBefore[0]!.id, 'CONTAINER_RUNNING']]);
    expect((await node.cri.containerStatus(steadyBefore[0]!.id)).startedAt).toBe(steadyStartedAt);
    // Ready all along: 30 s is inside the node monitor's 50 s grace.
    expect((await cluster.api.get<Node>(NODES, { name: 'n1' })).status!.conditions!.find((c) => c.type === 'Ready')!.status).toBe('True');
  });
});
