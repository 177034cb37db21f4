/**
 * What nodelet costs every node while nothing happens, and 110 pods (maxPods) from nothing,
 * on the benchmark containerd and the test control plane, against baselines taken in the
 * same run:
 *
 * 1. resident memory, idle standalone with one static pod, against a bare Node process
 *    (`node -e` with a timer) sampled at the same moments; for the shipped bundle, then for
 *    tsc's output on the same pod (the other build `npm run build` makes);
 * 2. 110 static pods from nothing: 110 manifests renamed into the static pod dir of a
 *    running, idle nodelet -> all 110 containers running (seen through CRI), against 110
 *    raw RunPodSandbox + CreateContainer + StartContainer chains started together (the same
 *    parallelism: one worker per pod);
 * 3. with the 110 pods running: resident memory, and CPU (utime + stime from /proc) over 60 s;
 * 4. the same node connected (`--kubeconfig`, the test control plane in this process; the
 *    restarted nodelet adopts the 110 running pods and keeps their mirror pods): resident
 *    memory, CPU, and every request the control plane receives over a steady minute, by
 *    verb and path, against the kubelet's steady traffic (6 lease updates, one node status
 *    report per 5 min, one pod watch).
 *
 * Run: `npm run build && node dist/bench/footprint.js [cpuWindowSeconds] [--quick]` (root).
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createCriClient, type CriClient } from '../src/runtime/cri-client.js';
import { startControlPlane } from '../test/control-plane/server.js';
import { freePort } from '../test/helpers/nodelet.js';
import { bareNode, benchArgs, cpuMs, httpStatus, machine, mb, median, NODELET_MAIN, rawStart, removeRaw, rssBytes, runningPods, sleep, stageManifest, startAgent, TSC_MAIN, until, type Agent } from './agent.js';
import { benchContainerd } from './runtime.js';
import { writeSection } from './sections.js';
import { removeDir } from '../test/helpers/cleanup.js';

const NODE = 'bench';
const PODS = 110;

/** Every request the in-process control plane receives: `VERB path` (query dropped, names kept). */
const requests: { at: number; what: string; watch: boolean }[] = [];
const emit = https.Server.prototype.emit;
https.Server.prototype.emit = function (this: https.Server, event: string | symbol, ...a: unknown[]): boolean {
  if (event === 'request') {
    const req = a[0] as IncomingMessage;
    const url = new URL(req.url ?? '/', 'https://x');
    requests.push({ at: performance.now(), what: `${req.method} ${url.pathname}`, watch: url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1' });
  }
  return (emit as (this: https.Server, e: string | symbol, ...r: unknown[]) => boolean).call(this, event, ...a);
};

/** Median RSS of `n` samples 500 ms apart, of nodelet and of a bare Node process side by side. */
async function rssSide(pid: number, n: number): Promise<{ nodelet: number; bare: number }> {
  const bare = bareNode();
  await sleep(1000);
  const a: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < n; i++) {
    a.push(rssBytes(pid));
    b.push(rssBytes(bare.pid));
    await sleep(500);
  }
  await bare.stop();
  return { nodelet: median(a), bare: median(b) };
}

async function sweep(cri: CriClient): Promise<void> {
  await removeRaw(cri);
  await Promise.all(
    (await cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.namespace': 'bench' } })).map(async (s) => {
      await cri.stopPodSandbox(s.id).catch(() => undefined);
      await cri.removePodSandbox(s.id).catch(() => undefined);
    }),
  );
}

async function healthy(agent: Agent): Promise<void> {
  await until(async () => (await httpStatus(agent.healthzPort, '/healthz')) === 200, performance.now(), 60_000, 'nodelet /healthz', 50);
}

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const cpuWindowS = quick ? 1 : Math.max(10, nums[0] ?? 60);
  const settleMs = quick ? 1000 : 10_000;
  const samples = quick ? 2 : 10;
  const pods = quick ? 2 : PODS;
  const endpoint = benchContainerd();
  // 10 min: on a machine shared under load 100-300, 110 raw RunPodSandbox calls at once took longer than 2 min each.
  const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 600_000 });
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-footprint-'));
  const manifests = path.join(dir, 'manifests');
  const cp = await startControlPlane({});
  let agent: Agent | undefined;
  const out: Record<string, number> = {};
  let traffic: string[] = [];
  try {
    await sweep(cri);
    // The serving certificate is generated on a node's first start only: one start before
    // the measured ones, as on every node after its first boot.
    agent = await startAgent({ dir, endpoint, healthzPort: await freePort() });
    await healthy(agent);
    // /healthz answers before the HTTPS server has written the pair: stopping at /healthz left
    // none, and the measured start generated it (a first boot's work, with @peculiar/x509
    // then: ~8 MB of modules kept for good), not a restart's.
    const certFile = path.join(dir, 'pki', 'kubelet.crt');
    await until(async () => fs.existsSync(certFile), performance.now(), 60_000, 'the serving certificate', 50);
    await agent.stop();
    // 1. Idle standalone with one pod.
    agent = await startAgent({ dir, endpoint, healthzPort: await freePort() });
    await healthy(agent);
    await (await stageManifest(manifests, 'idle'))();
    await until(async () => (await runningPods(cri)).has(`idle-${NODE}`), performance.now(), 60_000, 'the idle pod');
    await sleep(settleMs);
    const idle = await rssSide(agent.pid, samples);
    out.idleRss = idle.nodelet;
    out.idleBare = idle.bare;
    {
      const c0 = cpuMs(agent.pid);
      await sleep(cpuWindowS * 1000);
      out.idleOnePodCpu = (cpuMs(agent.pid) - c0) / (cpuWindowS * 1000);
    }
    // The same idle node on the other build `npm run build` makes (tsc's output, one file per
    // module), which adopts the running pod; then the measured build again.
    await agent.stop();
    agent = await startAgent({ dir, endpoint, healthzPort: await freePort(), main: TSC_MAIN });
    await healthy(agent);
    await sleep(settleMs);
    const idleTsc = await rssSide(agent.pid, samples);
    out.idleRssTsc = idleTsc.nodelet;
    out.idleBareTsc = idleTsc.bare;
    await agent.stop();
    agent = await startAgent({ dir, endpoint, healthzPort: await freePort() });
    await healthy(agent);
    await fsp.rm(path.join(manifests, 'idle.yaml'));
    await until(async () => (await runningPods(cri)).size === 0, performance.now(), 60_000, 'the idle pod removed', 50);

    // 2. 110 from nothing: raw chains first (then swept), then nodelet.
    let t0 = performance.now();
    await Promise.all(Array.from({ length: pods }, (_, j) => rawStart(cri, `max-${j}`, path.join(dir, 'direct'))));
    out.maxDirect = performance.now() - t0;
    await removeRaw(cri);
    const names = Array.from({ length: pods }, (_, j) => `m${j}`);
    const places = await Promise.all(names.map((n) => stageManifest(manifests, n)));
    t0 = performance.now();
    await Promise.all(places.map((p) => p()));
    out.maxNodelet = await until(async () => {
      const up = await runningPods(cri);
      return names.every((n) => up.has(`${n}-${NODE}`));
    }, t0, 600_000, `${pods} static pods`, 20);

    // 3. With 110 pods, standalone.
    await sleep(settleMs);
    const full = await rssSide(agent.pid, samples);
    out.fullRss = full.nodelet;
    out.fullBare = full.bare;
    let c0 = cpuMs(agent.pid);
    await sleep(cpuWindowS * 1000);
    out.fullCpu = (cpuMs(agent.pid) - c0) / (cpuWindowS * 1000);
    await agent.stop();

    // 4. Connected with the same 110 pods (adopted, mirror pods created).
    const kubeconfig = path.join(dir, 'kubeconfig');
    cp.writeKubeconfig(kubeconfig, { user: `system:node:${NODE}`, groups: ['system:nodes'] });
    const kc = { ca: fs.readFileSync(cp.caFile) };
    cp.addToken('bench-admin', 'admin', ['system:masters']);
    // The pods' namespace, as a cluster would have it (mirror pods are created in it).
    await new Promise<void>((resolve, reject) => {
      const req = https.request(`${cp.url}/api/v1/namespaces`, { method: 'POST', ca: kc.ca, headers: { authorization: 'Bearer bench-admin', 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 201 || res.statusCode === 409 ? resolve() : reject(new Error(`creating namespace bench: HTTP ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end(JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bench' } }));
    });
    agent = await startAgent({ dir, endpoint, healthzPort: await freePort(), flags: ['--kubeconfig', kubeconfig] });
    await healthy(agent);
    const mirrors = async () => {
      const body = await new Promise<string>((resolve, reject) => {
        https
          .get(`${cp.url}/api/v1/namespaces/bench/pods`, { ca: kc.ca, headers: { authorization: 'Bearer bench-admin' } }, (res) => {
            let s = '';
            res.setEncoding('utf8').on('data', (c: string) => (s += c));
            res.on('end', () => resolve(s));
          })
          .on('error', reject);
      });
      const list = JSON.parse(body) as { items?: { status?: { phase?: string } }[] };
      return (list.items ?? []).filter((p) => p.status?.phase === 'Running').length;
    };
    await until(async () => (await mirrors()) >= pods, performance.now(), quick ? 30_000 : 180_000, `${pods} mirror pods Running`, 500);
    // Steady: past the start-up writes (registration, fast status loop, mirror pods, their status).
    await sleep(quick ? 1000 : 20_000);
    const conn = await rssSide(agent.pid, samples);
    out.connRss = conn.nodelet;
    out.connBare = conn.bare;
    const r0 = requests.length;
    const w0 = performance.now();
    c0 = cpuMs(agent.pid);
    await sleep(cpuWindowS * 1000);
    out.connCpu = (cpuMs(agent.pid) - c0) / (cpuWindowS * 1000);
    const windowMin = (performance.now() - w0) / 60_000;
    // The admin client above stopped asking before the window: only nodelet's requests remain.
    const seen = requests.slice(r0);
    const by = new Map<string, number>();
    for (const r of seen) by.set(`${r.what}${r.watch ? ' (watch)' : ''}`, (by.get(`${r.what}${r.watch ? ' (watch)' : ''}`) ?? 0) + 1);
    out.perMinute = seen.length / windowMin;
    out.getsPerMinute = seen.filter((r) => r.what.startsWith('GET ') && !r.watch).length / windowMin;
    out.windowMin = windowMin;
    traffic = [...by].sort((a, b) => b[1] - a[1]).map(([k, v]) => `| \`${k}\` | ${v} | ${(v / windowMin).toFixed(1)} |`);
    await agent.stop();
    agent = undefined;

    const version = await cri.version();
    const kubeletPerMin = 6 + 1 / 5; // lease updates + status report every 5 min; the watch is one long request
    const t = (ok: boolean) => (ok ? 'met' : 'missed');
    const section = [
      '## Idle costs and 110 pods from nothing (`bench/footprint.ts`)',
      '',
      `Run ${new Date().toISOString()} on ${machine()}; ${version.runtimeName} ${version.runtimeVersion}; the built nodelet \`${path.relative(process.cwd(), NODELET_MAIN)}\` (standalone, then connected to the test control plane), ${pods} static pods.`,
      `The serving certificate exists (generated by a first start, which the bench lets write it before stopping, as after a node's first boot). Memory = VmRSS, median of ${samples} samples 0.5 s apart after ${settleMs / 1000} s idle, side by side with a bare Node process (\`node -e\` with a timer) sampled at the same moments. CPU = utime+stime from /proc over ${cpuWindowS} s (10 ms ticks). ${pods} from nothing = ${pods} manifests renamed at once into a running nodelet's static pod dir → all containers running (CRI polled every 20 ms), against ${pods} raw sandbox+create+start chains started together on the same containerd. Targets: issue 32's (≤ 50 MB idle with one pod; with 110 pods ≤ 70 MB and ≤ 0.5 % of a core, standalone and connected).`,
      '',
      '| figure | baseline | nodelet | ratio | added | target |',
      '|---|---|---|---|---|---|',
      `| RSS idle standalone, one pod (MB) | ${mb(out.idleBare!)} (bare Node) | ${mb(out.idleRss!)} | ${(out.idleRss! / out.idleBare!).toFixed(2)}× | +${mb(out.idleRss! - out.idleBare!)} | ≤ 50 MB: **${t(out.idleRss! <= 50 * 2 ** 20)}** |`,
      `| RSS idle standalone, one pod, tsc output \`dist/src/main.js\` (MB) | ${mb(out.idleBareTsc!)} (bare Node) | ${mb(out.idleRssTsc!)} | ${(out.idleRssTsc! / out.idleBareTsc!).toFixed(2)}× | +${mb(out.idleRssTsc! - out.idleBareTsc!)} | (the build not shipped) |`,
      `| RSS standalone, ${pods} pods (MB) | ${mb(out.fullBare!)} | ${mb(out.fullRss!)} | ${(out.fullRss! / out.fullBare!).toFixed(2)}× | +${mb(out.fullRss! - out.fullBare!)} | ≤ 70 MB: **${t(out.fullRss! <= 70 * 2 ** 20)}** |`,
      `| RSS connected, ${pods} pods (MB) | ${mb(out.connBare!)} | ${mb(out.connRss!)} | ${(out.connRss! / out.connBare!).toFixed(2)}× | +${mb(out.connRss! - out.connBare!)} | ≤ 70 MB: **${t(out.connRss! <= 70 * 2 ** 20)}** |`,
      `| CPU idle standalone, one pod (% of a core) | 0 | ${(out.idleOnePodCpu! * 100).toFixed(2)} | | | |`,
      `| CPU idle standalone, ${pods} pods (% of a core) | 0 | ${(out.fullCpu! * 100).toFixed(2)} | | | ≤ 0.5 %: **${t(out.fullCpu! <= 0.005)}** |`,
      `| CPU idle connected, ${pods} pods (% of a core) | 0 | ${(out.connCpu! * 100).toFixed(2)} | | | ≤ 0.5 %: **${t(out.connCpu! <= 0.005)}** |`,
      `| ${pods} pods from nothing, all running (ms) | ${out.maxDirect!.toFixed(0)} (straight) | ${out.maxNodelet!.toFixed(0)} | ${(out.maxNodelet! / out.maxDirect!).toFixed(2)}× | ${out.maxNodelet! >= out.maxDirect! ? '+' : '−'}${Math.abs(out.maxNodelet! - out.maxDirect!).toFixed(0)} | ≤ 1.5×: **${t(out.maxNodelet! / out.maxDirect! <= 1.5)}** |`,
      `| control-plane requests per minute, steady, connected | ${kubeletPerMin.toFixed(1)} (kubelet) | ${out.perMinute!.toFixed(1)} | ${(out.perMinute! / kubeletPerMin).toFixed(2)}× | | no more than the kubelet: **${t(out.perMinute! <= kubeletPerMin + 0.5)}**; GETs: ${out.getsPerMinute!.toFixed(1)}/min |`,
      '',
      `Requests the control plane received from nodelet over the steady ${(out.windowMin! * 60).toFixed(0)} s window (a watch counts once, when it is opened):`,
      '',
      '| request | count | per minute |',
      '|---|---|---|',
      ...(traffic.length ? traffic : ['| (none) | 0 | 0 |']),
      '',
      'Reproduce: `npm run build && node dist/bench/footprint.js 60` (as root).',
    ].join('\n');
    if (!quick) await writeSection('footprint', section);
    process.stdout.write(`${section}\n`);
  } finally {
    await agent?.stop();
    await sweep(cri).catch(() => undefined);
    cri.close();
    await cp.close();
    if (process.exitCode) process.stderr.write(`nodelet's log: ${await fsp.readFile(path.join(dir, 'nodelet.log'), 'utf8').catch(() => '')}`.slice(-4000));
    removeDir(dir); // pods' volumes stay mounted when nodelet stops, as the kubelet's
  }
}

main().catch((err: unknown) => {
  process.exitCode = 1;
  process.stderr.write(`footprint benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
