/**
 * The Node nodelet keeps in the cluster, against the test control plane and the test CRI
 * server, with the built nodelet:
 * - its pressure conditions come from what the machine has: thresholds set above it turn
 *   MemoryPressure, DiskPressure and PIDPressure True with the kubelet's reasons;
 * - what other managers wrote (a network plugin's condition, a label, an annotation)
 *   survives its status writes (many of them, with the report period shortened) and its
 *   restart;
 * - `kill -9` makes the node monitor turn the Node Ready=Unknown and taint it unreachable;
 *   nodelet started again clears both and adopts its pod's containers (same IDs).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Node, NodeCondition, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ControlPlaneClient, NODES, PODS } from '../../../src/controlplane/client.js';
import { loadKubeconfig } from '../../../src/controlplane/kubeconfig.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { eventually, freePort, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from '../../helpers/nodelet.js';

const GRACE_MS = 4000;

let cp: ControlPlane;
let cri: FakeRuntime;
let api: ControlPlaneClient;
let dir: string;
const started: NodeletProcess[] = [];

beforeAll(async () => {
  // The node monitor's grace period shortened from 50 s to 4 s, checked every 250 ms.
  cp = await startControlPlane({ nodeMonitorGracePeriodMs: GRACE_MS, nodeLifecycleIntervalMs: 250 });
  cri = await startFakeRuntime();
  dir = tempDir('nodelet-node-lifecycle-');
  cp.writeKubeconfig(path.join(dir, 'admin.kubeconfig'), { user: 'admin', groups: ['system:masters'] });
  api = new ControlPlaneClient({ access: loadKubeconfig(path.join(dir, 'admin.kubeconfig')) });
});

afterAll(async () => {
  for (const p of started) {
    p.kill('SIGTERM');
    await p.exited;
  }
  await api?.close();
  await cri?.stop();
  await cp?.close();
});

/** Starts the built nodelet for node `name` in `<dir>/<name>`, with these config fields. */
async function nodelet(name: string, fields: Record<string, string | number | boolean>): Promise<NodeletProcess> {
  const d = path.join(dir, name);
  fs.mkdirSync(d, { recursive: true });
  if (!fs.existsSync(path.join(d, 'kubelet.kubeconfig'))) cp.writeKubeconfig(path.join(d, 'kubelet.kubeconfig'), { user: `system:node:${name}`, groups: ['system:nodes'] });
  if (!fs.existsSync(path.join(d, 'kubelet.yaml'))) {
    writeKubeletConfig(d, {
      containerRuntimeEndpoint: `unix://${cri.socketPath}`,
      podLogsDir: path.join(d, 'logs'),
      address: '127.0.0.1',
      port: await freePort(),
      readOnlyPort: 0,
      healthzPort: 0,
      authentication: '{anonymous: {enabled: true}, webhook: {enabled: false}}',
      authorization: '{mode: AlwaysAllow}',
      ...fields,
    });
  }
  const p = startNodelet([
    '--config', path.join(d, 'kubelet.yaml'),
    '--kubeconfig', path.join(d, 'kubelet.kubeconfig'),
    '--root-dir', path.join(d, 'root'),
    '--lock-file', path.join(d, 'lock'),
    '--hostname-override', name,
  ]);
  started.push(p);
  await p.waitForMsg(/nodelet is ready/, 30_000);
  return p;
}

const cond = (n: Node | undefined, type: string) => n?.status?.conditions?.find((c) => c.type === type);
const getNode = (name: string) => api.get<Node>(NODES, { name }).catch(() => undefined);

describe('pressure conditions from the machine', () => {
  it('evictionHard thresholds above what the machine has: MemoryPressure, DiskPressure and PIDPressure True, with the kubelet reasons', async () => {
    const p = await nodelet('np', {
      // This machine has far less than 1 PiB of memory and of disk, and pid_max is at most 4194304.
      evictionHard: '{"memory.available": "1Pi", "nodefs.available": "1Pi", "pid.available": "5M"}',
      nodeStatusUpdateFrequency: '1s',
    });
    const node = await eventually(async () => {
      const n = await getNode('np');
      return n?.status?.conditions?.filter((c) => c.status === 'True').length === 4 ? n : undefined;
    }, 15_000);
    expect(node.status!.conditions!.map((c) => [c.type, c.status, c.reason, c.message])).toEqual([
      ['MemoryPressure', 'True', 'KubeletHasInsufficientMemory', 'kubelet has insufficient memory available'],
      ['DiskPressure', 'True', 'KubeletHasDiskPressure', 'kubelet has disk pressure'],
      ['PIDPressure', 'True', 'KubeletHasInsufficientPID', 'kubelet has insufficient PID available'],
      ['Ready', 'True', 'KubeletReady', 'kubelet is posting ready status'],
    ]);
    // What nodelet measured, as it logged it: real figures of this machine, below the thresholds.
    const logged = (type: string) => p.records.find((r) => r.condition === type && /eviction threshold met/.test(r.msg))!['signals'] as Record<string, { available: number; threshold: number }>;
    const memTotal = Number(/^MemTotal:\s+(\d+) kB/m.exec(fs.readFileSync('/proc/meminfo', 'utf8'))![1]) * 1024;
    const mem = logged('MemoryPressure')['memory.available']!;
    const disk = logged('DiskPressure')['nodefs.available']!;
    const pid = logged('PIDPressure')['pid.available']!;
    const st = fs.statfsSync(path.join(dir, 'np', 'root'));
    const pidMax = Number(fs.readFileSync('/proc/sys/kernel/pid_max', 'utf8'));
    expect(mem.available).toBeGreaterThan(0);
    expect(mem.available).toBeLessThanOrEqual(memTotal);
    expect(Math.abs(disk.available - st.bavail * st.bsize)).toBeLessThan(2 * 1024 ** 3);
    expect(pid.available).toBeGreaterThan(0);
    expect(pid.available).toBeLessThan(pidMax);
    console.log(`measured: memory.available ${(mem.available / 1024 ** 3).toFixed(2)} GiB of ${(memTotal / 1024 ** 3).toFixed(2)}; nodefs.available ${(disk.available / 1024 ** 3).toFixed(1)} GiB; pid.available ${pid.available} of ${pidMax}`);
    // Allocatable memory: capacity minus the memory.available threshold, floored at 0.
    expect(node.status!.allocatable!['memory']).toBe('0Ki');
    p.kill('SIGTERM');
    expect((await p.exited).code).toBe(0);
  });
});

describe('a Node that others write to, and that nodelet leaves', () => {
  const foreign: NodeCondition = {
    type: 'NetworkUnavailable',
    status: 'False',
    reason: 'RouteCreated',
    message: 'RouteController created a route',
    lastTransitionTime: '2026-01-02T03:04:05Z',
    lastHeartbeatTime: '2026-01-02T03:04:05Z',
  };
  let n1: NodeletProcess;
  let pod: Pod;

  /** Counts the Node's MODIFIED events for `ms`: every one in this window is a nodelet status write. */
  async function countWrites(name: string, ms: number): Promise<number> {
    const rv = (await api.get<Node>(NODES, { name })).metadata!.resourceVersion!;
    const ctl = new AbortController();
    let n = 0;
    const events = await api.watch<Node>(NODES, { name, resourceVersion: rv, signal: ctl.signal });
    const t = setTimeout(() => ctl.abort(), ms);
    try {
      for await (const ev of events) if (ev.type === 'MODIFIED') n++;
    } catch {
      /* aborted at the end of the window */
    } finally {
      clearTimeout(t);
    }
    return n;
  }

  async function expectForeignIntact(): Promise<void> {
    const node = (await getNode('n1'))!;
    expect(cond(node, 'NetworkUnavailable')).toEqual(foreign);
    expect(node.metadata!.labels).toMatchObject({ 'example.com/team': 'blue', 'kubernetes.io/hostname': 'n1' });
    expect(node.metadata!.annotations).toMatchObject({ 'example.com/note': 'added with kubectl' });
    expect(node.status!.conditions!.map((c) => c.type).sort()).toEqual(['DiskPressure', 'MemoryPressure', 'NetworkUnavailable', 'PIDPressure', 'Ready']);
  }

  it("a foreign condition, label and annotation survive many status writes (report period 200 ms: a minute's worth of writes in 6 s)", async () => {
    n1 = await nodelet('n1', { nodeStatusUpdateFrequency: '200ms', nodeStatusReportFrequency: '200ms', nodeLeaseDurationSeconds: 2 });
    await eventually(async () => cond(await getNode('n1'), 'Ready')?.status === 'True', 15_000);
    // As an operator and a network plugin would: kubectl label/annotate, a status patch.
    await api.patch(NODES, { name: 'n1' }, { metadata: { labels: { 'example.com/team': 'blue' }, annotations: { 'example.com/note': 'added with kubectl' } } }, { type: 'merge' });
    await api.patch(NODES, { name: 'n1' }, { status: { conditions: [foreign] } }, { type: 'strategic', subresource: 'status' });
    const writes = await countWrites('n1', 6_000);
    console.log(`node status writes observed in 6 s: ${writes}`);
    // nodelet patches every 200 ms; the server records a write only when it changes something,
    // and heartbeat times have a resolution of one second: about one recorded write a second,
    // as many as the default 10 s period makes in a minute.
    expect(writes).toBeGreaterThanOrEqual(5);
    await expectForeignIntact();
    // With the default thresholds on this machine, no pressure.
    const node = (await getNode('n1'))!;
    expect(['MemoryPressure', 'DiskPressure', 'PIDPressure'].map((t) => [t, cond(node, t)?.status])).toEqual([
      ['MemoryPressure', 'False'],
      ['DiskPressure', 'False'],
      ['PIDPressure', 'False'],
    ]);
  });

  it('kill -9: the node goes Ready=Unknown with the unreachable taint; started again, both clear, the pod keeps its containers, the foreign fields stay', async () => {
    pod = await api.create<Pod>(PODS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'survivor', namespace: 'default' },
      spec: { nodeName: 'n1', hostNetwork: true, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] },
    });
    await eventually(async () => (await api.get<Pod>(PODS, { namespace: 'default', name: 'survivor' })).status?.phase === 'Running', 15_000);
    const uid = pod.metadata!.uid!;
    const ours = () => [...cri.containers.values()].filter((c) => c.config.labels?.['io.kubernetes.pod.uid'] === uid);
    const before = ours().map((c) => c.id);
    expect(before).toHaveLength(1);
    const creates = () => cri.calls.filter((c) => (c.method === 'CreateContainer' || c.method === 'RunPodSandbox') && JSON.stringify(c.request).includes(uid)).length;
    const createsBefore = creates();

    const killedAt = Date.now();
    n1.kill('SIGKILL');
    await n1.exited;
    const unknown = await eventually(async () => {
      const n = await getNode('n1');
      return cond(n, 'Ready')?.status === 'Unknown' && n?.spec?.taints?.some((t) => t.key === 'node.kubernetes.io/unreachable') ? n : undefined;
    }, GRACE_MS + 10_000);
    const unknownAfter = Date.now() - killedAt;
    expect(cond(unknown, 'Ready')).toMatchObject({ reason: 'NodeStatusUnknown', message: 'Kubelet stopped posting node status.' });
    expect(unknown.spec!.taints).toContainEqual(expect.objectContaining({ key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' }));
    expect(cond(unknown, 'NetworkUnavailable')).toEqual(foreign);

    const restartedAt = Date.now();
    n1 = await nodelet('n1', {});
    await eventually(async () => {
      const n = await getNode('n1');
      return cond(n, 'Ready')?.status === 'True' && !n?.spec?.taints?.some((t) => t.key.startsWith('node.kubernetes.io/')) ? n : undefined;
    }, 15_000);
    const clearedAfter = Date.now() - restartedAt;
    console.log(`kill -9 -> Ready=Unknown + unreachable taint after ${unknownAfter} ms (grace ${GRACE_MS} ms); restart -> cleared after ${clearedAfter} ms`);
    // Adopted, not restarted: same container, nothing created for the pod since.
    await eventually(async () => (await api.get<Pod>(PODS, { namespace: 'default', name: 'survivor' })).status?.phase === 'Running', 10_000);
    expect(ours().map((c) => c.id)).toEqual(before);
    expect(ours()[0]!.state).toBe('CONTAINER_RUNNING');
    expect(creates()).toBe(createsBefore);
    const inApi = await api.get<Pod>(PODS, { namespace: 'default', name: 'survivor' });
    expect(inApi.status!.containerStatuses![0]!.containerID).toMatch(new RegExp(`://${before[0]}$`));
    // And after the restart's registration and writes, what others wrote is still there.
    expect(await countWrites('n1', 3_000)).toBeGreaterThanOrEqual(2);
    await expectForeignIntact();
  });
});
