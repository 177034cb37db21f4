/**
 * A pod from the API, as a cluster user sees it start, against the static pod start of the
 * same agent in the same run, interleaved (issue 17: API pod start ≤ 1.2× the static start
 * + 50 ms at the median), and the container status latency (the container running in the
 * runtime → `Running` in the pod's status in the API).
 *
 * The built nodelet, connected to the test control plane (in this process), on the benchmark
 * containerd. Each round:
 * - static: the manifest renamed into `staticPodPath` → its container seen running through
 *   CRI (ListContainers polled every 5 ms), as bench/static-start.ts;
 * - API: the Pod created in the API (bound to the node: `spec.nodeName`, as after the
 *   scheduler) → its container seen running through CRI (same poll), and → `status.phase:
 *   Running` seen in the API (GET polled every 5 ms, the admin's own connection).
 * Both pods are the same busybox sleeper (hostNetwork, IfNotPresent, grace 0); teardown (file
 * removed, pod deleted, nodelet removes the pod) is not timed.
 *
 * Run: `npm run build && node dist/bench/api-pod-start.js [iterations] [--quick]` (root).
 */
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { ControlPlaneClient, NAMESPACES, NODES, PODS } from '../src/controlplane/client.js';
import { loadKubeconfig } from '../src/controlplane/kubeconfig.js';
import { createCriClient, type CriClient } from '../src/runtime/cri-client.js';
import { startControlPlane } from '../test/control-plane/server.js';
import { freePort } from '../test/helpers/nodelet.js';
import { benchArgs, machine, median, rows, runningPods, stageManifest, startAgent, until, httpStatus, sleep, type Agent } from './agent.js';
import { benchContainerd, IMAGE } from './runtime.js';
import { percentile, writeSection } from './sections.js';
import { removeDir } from '../test/helpers/cleanup.js';

const NODE = 'bench';

function apiPod(name: string): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'bench' },
    spec: {
      nodeName: NODE,
      hostNetwork: true,
      terminationGracePeriodSeconds: 0,
      containers: [{ name: 'main', image: IMAGE, imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }],
    },
  };
}

async function gone(cri: CriClient): Promise<void> {
  await until(async () => (await cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.namespace': 'bench' } })).length === 0, performance.now(), 60_000, 'bench pods removed', 50);
}

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const iterations = quick ? 2 : Math.max(5, nums[0] ?? 30);
  const warmup = quick ? 0 : 3;
  const endpoint = benchContainerd();
  const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 60_000 });
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-api-'));
  const manifests = path.join(dir, 'manifests');
  const cp = await startControlPlane({});
  cp.writeKubeconfig(path.join(dir, 'admin.kubeconfig'), { user: 'admin', groups: ['system:masters'] });
  const api = new ControlPlaneClient({ access: loadKubeconfig(path.join(dir, 'admin.kubeconfig')) });
  const kubeconfig = path.join(dir, 'node.kubeconfig');
  cp.writeKubeconfig(kubeconfig, { user: `system:node:${NODE}`, groups: ['system:nodes'] });
  let agent: Agent | undefined;
  const times = { static: [] as number[], apiCri: [] as number[], apiStatus: [] as number[], statusLag: [] as number[] };
  try {
    await api.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bench' } });
    agent = await startAgent({ dir, endpoint, healthzPort: await freePort(), flags: ['--kubeconfig', kubeconfig] });
    const a = agent;
    await until(async () => (await httpStatus(a.healthzPort, '/healthz')) === 200, performance.now(), 30_000, 'nodelet /healthz', 50);
    await until(
      async () => {
        const node = await api.get<{ metadata: object; status?: { conditions?: { type: string; status: string }[] } }>(NODES, { name: NODE }).catch(() => undefined);
        return node?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
      },
      performance.now(),
      60_000,
      'node Ready',
      100,
    );
    await sleep(1000);
    for (let i = 0; i < warmup + iterations; i++) {
      // Static: the same agent, the same pod.
      const sname = `s${i}`;
      const place = await stageManifest(manifests, sname);
      let t0 = performance.now();
      await place();
      const s = await until(async () => (await runningPods(cri)).has(`${sname}-${NODE}`), t0, 60_000, `static pod ${sname}`);
      await fsp.rm(path.join(manifests, `${sname}.yaml`));
      await gone(cri);

      // From the API: created → running in the runtime → Running in the API.
      const aname = `a${i}`;
      t0 = performance.now();
      await api.create(PODS, apiPod(aname));
      let inCri: number | undefined;
      const st = await until(
        async () => {
          if (inCri === undefined && (await runningPods(cri)).has(aname)) inCri = performance.now() - t0;
          const p = await api.get<Pod>(PODS, { namespace: 'bench', name: aname });
          return p.status?.phase === 'Running';
        },
        t0,
        60_000,
        `API pod ${aname} Running`,
      );
      inCri ??= await until(async () => (await runningPods(cri)).has(aname), t0, 60_000, `API pod ${aname} in the runtime`);
      await api.delete(PODS, { namespace: 'bench', name: aname }, { body: { gracePeriodSeconds: 0 } });
      await gone(cri);
      await until(async () => (await api.list(PODS, { namespace: 'bench' })).items.length === 0, performance.now(), 60_000, 'API pods gone', 50);
      if (i < warmup) continue;
      times.static.push(s);
      times.apiCri.push(inCri);
      times.apiStatus.push(st);
      times.statusLag.push(st - inCri);
    }
    const version = await cri.version();
    const target = median(times.static) * 1.2 + 50;
    const met = median(times.apiStatus) <= target;
    const section = [
      '## A pod from the API: start and status latency (`bench/api-pod-start.ts`)',
      '',
      `Run ${new Date().toISOString()} on ${machine()}; ${version.runtimeName} ${version.runtimeVersion}; the built nodelet connected to the test control plane (in the benchmark's process); ${iterations} rounds after ${warmup} warm-up, interleaved.`,
      'Static = the manifest renamed into `staticPodPath` → the container running in CRI (polled every 5 ms). API = the Pod created in the API, bound to the node → the container running in CRI (same poll), and → `status.phase: Running` read back from the API (GET every 5 ms). Status latency = the second minus the first, per round. Same busybox sleeper (hostNetwork, grace 0), same agent.',
      '',
      '| figure (ms) | static pod (baseline) | API pod | ratio | added |',
      '|---|---|---|---|---|',
      ...rows('created → running in the runtime', times.static, times.apiCri),
      ...rows('created → Running in the API', times.static, times.apiStatus),
      '',
      `| container status latency (ms) | p50 ${median(times.statusLag).toFixed(1)} | p99 ${percentile([...times.statusLag].sort((x, y) => x - y), 99).toFixed(1)} | max ${Math.max(...times.statusLag).toFixed(1)} |`,
      '|---|---|---|---|',
      '',
      `Target: API pod start (→ Running in the API) ≤ 1.2× the static start + 50 ms at the median (${target.toFixed(1)} ms here): **${median(times.apiStatus).toFixed(1)} ms — ${met ? 'met' : 'missed'}**.`,
      '',
      'Reproduce: `npm run build && node dist/bench/api-pod-start.js 30` (as root).',
    ].join('\n');
    if (quick) process.stdout.write(`${section}\n`);
    else await writeSection('api-pod-start', section);
  } finally {
    await agent?.stop();
    await api.close().catch(() => undefined);
    await cp.close();
    removeDir(dir); // pods' volumes stay mounted when nodelet stops, as the kubelet's
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
