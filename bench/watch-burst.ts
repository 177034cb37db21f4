/**
 * A burst of pod watch events against a connected nodelet (issue 17): does the Lease stay on
 * time while nodelet works through them, and does its heap come back to where it was?
 *
 * The built nodelet runs connected to the test control plane (in this process) on the test
 * CRI server, with `nodeLeaseDurationSeconds: 4` (a renewal every second, so a late one shows
 * within a second; the kubelet's default 40 s renews every 10 s) and the other frequencies at
 * the kubelet's defaults. `pods` pods are bound to it and running. Then, in the same run:
 *
 * 1. a quiet window (the baseline): nothing changes; the Lease PUTs the control plane
 *    receives and the gaps between them;
 * 2. the burst: `events` merge patches of an annotation of those pods, round-robin, 32 in
 *    flight (each is one MODIFIED event on nodelet's pod watch), then until nodelet's `/pods`
 *    shows every pod's last annotation (all events handled); the Lease PUTs during it;
 * 3. a quiet window again.
 *
 * A renewal's lateness = its gap to the previous one − the renew interval (1 s, ±4 % jitter),
 * as the control plane sees the PUTs; nodelet's own "node lease renewed late" warnings say
 * whether the turn started late (its event loop) or the request was slow. The verdict takes
 * the burst AND the quiet window after it (work queued during a burst and done later counts).
 * nodelet's event-loop delay seen from outside: a GET of its /healthz every 100 ms (plain
 * HTTP, a new connection each; its latency includes this process's own delays), per window;
 * nodelet's CPU time (/proc) and the ListPodSandbox calls it made (test CRI server) in each window
 * say what a burst costs. Live heap = the
 * total of a heap snapshot (`--heapsnapshot-signal`, which collects garbage first) before
 * the first window and after the last; RSS and `nodejs_heap_size_used_bytes` are sampled
 * too (those include garbage not yet collected).
 *
 * Run: `npm run build && node dist/bench/watch-burst.js [events] [pods] [--quick]`
 * (`NODELET_BENCH_MAIN=<main.js>` measures another build; `NODELET_BENCH_NODE_ARGS="--cpu-prof
 * --cpu-prof-dir=<dir>"` gives nodelet's Node more flags, to profile it).
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import { ControlPlaneClient, LEASES, PODS } from '../src/controlplane/client.js';
import { loadKubeconfig } from '../src/controlplane/kubeconfig.js';
import { startFakeRuntime } from '../test/cri/fake-runtime.js';
import { controlPlaneFaults } from '../test/control-plane/faults.js';
import { startControlPlane } from '../test/control-plane/server.js';
import { freePort } from '../test/helpers/nodelet.js';
import { benchArgs, cpuMs, machine, NODELET_MAIN, rssBytes, sleep, startAgent, type Agent } from './agent.js';
import { percentile, writeSection } from './sections.js';
import { removeDir } from '../test/helpers/cleanup.js';

const NODE = 'bench';
const LEASE_S = 4;
const INTERVAL_MS = LEASE_S * 250;
const LEASE_PATH = `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${NODE}`;

function get(port: number, p: string): Promise<string> {
  return new Promise((resolve, reject) => {
    https
      .get({ host: '127.0.0.1', port, path: p, rejectUnauthorized: false, agent: false, timeout: 30_000 }, (res) => {
        let s = '';
        res.setEncoding('utf8').on('data', (c: string) => (s += c));
        res.on('end', () => resolve(s));
      })
      .on('error', reject);
  });
}

async function metric(port: number, name: string): Promise<number> {
  const body = await get(port, '/metrics').catch(() => '');
  return Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(body)?.[1] ?? NaN);
}

/** Total self size of a heap snapshot (bytes): the live heap after the full GC the snapshot makes. */
function snapshotBytes(file: string): number {
  const snap = JSON.parse(fs.readFileSync(file, 'utf8')) as { snapshot: { meta: { node_fields: string[] } }; nodes: number[] };
  const fields = snap.snapshot.meta.node_fields;
  const n = fields.length;
  const at = fields.indexOf('self_size');
  let total = 0;
  for (let i = at; i < snap.nodes.length; i += n) total += snap.nodes[i]!;
  return total;
}

/** Sends SIGUSR2 and waits for the new snapshot in `dir`; returns its live heap bytes. */
async function heapSnapshot(agent: Agent, dir: string): Promise<number> {
  const before = new Set(fs.readdirSync(dir));
  agent.child.kill('SIGUSR2');
  for (let t = Date.now(); Date.now() - t < 300_000; await sleep(1000)) {
    const f = fs.readdirSync(dir).find((x) => x.endsWith('.heapsnapshot') && !before.has(x));
    if (!f) continue;
    const p = path.join(dir, f);
    let bytes: number;
    try {
      // Read once it is whole (it parses).
      bytes = snapshotBytes(p);
    } catch {
      continue;
    }
    fs.rmSync(p);
    return bytes;
  }
  throw new Error('no heap snapshot within 5 min');
}

/** Latency of one GET of nodelet's /healthz (ms; Infinity when it fails). */
function healthzMs(port: number): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/healthz', agent: false, timeout: 30_000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode === 200 ? performance.now() - t0 : Infinity));
    });
    req.on('error', () => resolve(Infinity));
    req.on('timeout', () => req.destroy());
  });
}

interface Window {
  renewals: number;
  gaps: number[];
}

function windowOf(writes: number[], from: number, to: number): Window {
  const w = writes.filter((t) => t >= from && t <= to);
  // The gap into the window's first renewal counts too: a burst that starts late is late.
  const prev = writes.filter((t) => t < from).at(-1);
  const all = prev !== undefined ? [prev, ...w] : w;
  return { renewals: w.length, gaps: all.slice(1).map((t, i) => t - all[i]!) };
}

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const events = quick ? 200 : Math.max(100, nums[0] ?? 5000);
  const pods = quick ? 10 : Math.max(1, nums[1] ?? 110);
  const quietMs = quick ? 3000 : 20_000;
  const cri = await startFakeRuntime();
  const cp = await startControlPlane({});
  const faults = controlPlaneFaults(cp);
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-watch-burst-'));
  const snaps = path.join(dir, 'snapshots');
  fs.mkdirSync(snaps);
  const leaseWrites: number[] = [];
  faults.observe = (q) => {
    if (q.user === `system:node:${NODE}` && q.method === 'PUT' && q.path === LEASE_PATH) leaseWrites.push(Date.now());
  };
  cp.writeKubeconfig(path.join(dir, 'admin.kubeconfig'), { user: 'admin', groups: ['system:masters'] });
  const api = new ControlPlaneClient({ access: loadKubeconfig(path.join(dir, 'admin.kubeconfig')), connections: 32 });
  const kubeconfig = path.join(dir, 'kubelet.kubeconfig');
  cp.writeKubeconfig(kubeconfig, { user: `system:node:${NODE}`, groups: ['system:nodes'] });
  const port = await freePort();
  const healthzPort = await freePort();
  let agent: Agent | undefined;
  let rssTimer: NodeJS.Timeout | undefined;
  try {
    agent = await startAgent({
      dir,
      endpoint: `unix://${cri.socketPath}`,
      healthzPort,
      port,
      config: { nodeLeaseDurationSeconds: LEASE_S },
      flags: ['--kubeconfig', kubeconfig],
      nodeArgs: ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${snaps}`, ...(process.env.NODELET_BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? [])],
    });
    // The Lease's renewTime as nodelet wrote it (its own clock, when it sent the PUT): the
    // renewals as nodelet made them, whatever delay this process adds in reading them.
    const renewTimes: number[] = [];
    const leaseWatch = new AbortController();
    void (async () => {
      for (;;) {
        try {
          const evs = await api.watch<Lease>(LEASES, { namespace: 'kube-node-lease', name: NODE, signal: leaseWatch.signal });
          for await (const ev of evs) {
            const t = Date.parse(ev.object.spec?.renewTime ?? '');
            if (Number.isFinite(t) && t !== renewTimes.at(-1)) renewTimes.push(t);
          }
        } catch {
          if (leaseWatch.signal.aborted) return;
        }
        await sleep(200);
      }
    })();
    const names = Array.from({ length: pods }, (_, i) => `burst-${i}`);
    for (const name of names) {
      await api.create<Pod>(PODS, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace: 'default' },
        spec: { nodeName: NODE, hostNetwork: true, terminationGracePeriodSeconds: 1, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] },
      });
    }
    for (let t = Date.now(); ; await sleep(1000)) {
      const { items } = await api.listAll<Pod>(PODS, { namespace: 'default' });
      if (items.length === pods && items.every((p) => p.status?.phase === 'Running')) break;
      if (Date.now() - t > 300_000) throw new Error(`the ${pods} pods were not Running within 5 min`);
    }
    // Past the start (events of the pods' start sent, the Node Ready), then the live heap.
    await sleep(quick ? 2000 : 15_000);
    const heapBefore = await heapSnapshot(agent, snaps);
    await sleep(2000);
    const sample = async () => ({ rss: rssBytes(agent!.pid), heapUsed: await metric(port, 'nodejs_heap_size_used_bytes') });
    const before: { rss: number; heapUsed: number }[] = [];
    // /healthz polled every 100 ms from the quiet window before to the end of the one after.
    const healthz: { t: number; ms: number }[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const t = Date.now();
        healthz.push({ t, ms: await healthzMs(healthzPort) });
        await sleep(Math.max(0, 100 - (Date.now() - t)));
      }
    })();
    const lists = () => cri.calls.filter((c) => c.method === 'ListPodSandbox').length;
    const cpu0 = cpuMs(agent.pid);
    const lists0 = lists();
    const q0 = Date.now();
    while (Date.now() - q0 < quietMs) {
      before.push(await sample());
      await sleep(1000);
    }
    const q1 = Date.now();
    const cpu1 = cpuMs(agent.pid);
    const lists1 = lists();
    // The burst.
    const b0 = Date.now();
    let next = 0;
    let peakRss = 0;
    // A nodelet that exits mid-burst (the failure is reported by the await below) reads as NaN here.
    rssTimer = setInterval(() => {
      try {
        peakRss = Math.max(peakRss, rssBytes(agent!.pid));
      } catch {
        // gone: the await below reports it
      }
    }, 250);
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        for (let i = next++; i < events; i = next++) {
          await api.mergePatch(PODS, { namespace: 'default', name: names[i % pods]! }, { metadata: { annotations: { 'bench.nodelet/burst': String(i) } } });
        }
      }),
    );
    const sent = Date.now();
    // The value each pod ended with, read back from the API: the 32 writers' patches are
    // concurrent, so the last one issued for a pod is not always the last one applied (a patch
    // waiting for its connection's TLS handshake lands after later ones). Handled when
    // nodelet's /pods shows all of them.
    const last = new Map<string, string>();
    for (const name of names) {
      const p = await api.get<Pod>(PODS, { namespace: 'default', name });
      last.set(name, p.metadata?.annotations?.['bench.nodelet/burst'] ?? '');
    }
    for (;;) {
      const body = await get(port, '/pods').catch(() => '');
      const items = (body ? (JSON.parse(body) as { items?: Pod[] }).items : undefined) ?? [];
      const seen = items.filter((p) => p.metadata?.namespace === 'default' && last.get(p.metadata.name ?? '') === p.metadata?.annotations?.['bench.nodelet/burst']).length;
      if (seen === pods) break;
      if (Date.now() - sent > 300_000) throw new Error(`nodelet's /pods did not show the burst's last values within 5 min (${seen} of ${pods})`);
      await sleep(100);
    }
    const b1 = Date.now();
    const cpu2 = cpuMs(agent.pid);
    const lists2 = lists();
    clearInterval(rssTimer);
    const lagMax = await metric(port, 'nodejs_eventloop_lag_max_seconds');
    const after: { rss: number; heapUsed: number }[] = [];
    const a0 = Date.now();
    while (Date.now() - a0 < quietMs) {
      after.push(await sample());
      await sleep(1000);
    }
    const a1 = Date.now();
    const cpu3 = cpuMs(agent.pid);
    const lists3 = lists();
    polling = false;
    await poller;
    const heapAfter = await heapSnapshot(agent, snaps);
    const log = fs.readFileSync(path.join(dir, 'nodelet.log'), 'utf8');
    const lateWarnings = log.split('\n').filter((l) => /node lease renewed late/.test(l)).map((l) => JSON.parse(l) as { time: string; sinceLastMs: number; startedLateMs: number; requestMs: number });
    const inBurst = lateWarnings.filter((w) => Date.parse(w.time) >= b0 && Date.parse(w.time) <= b1 + INTERVAL_MS);
    const warned = (ws: typeof lateWarnings) =>
      `${ws.length}${ws.length ? ` (worst: ${Math.max(...ws.map((w) => w.sinceLastMs))} ms since the last, turn started ${Math.max(...ws.map((w) => w.startedLateMs))} ms late, request up to ${Math.max(...ws.map((w) => w.requestMs))} ms)` : ''}`;
    const blocked = log.split('\n').filter((l) => /the event loop was blocked/.test(l)).map((l) => JSON.parse(l) as { time: string; maxDelayMs: number });

    leaseWatch.abort();
    const quiet = windowOf(leaseWrites, q0, q1);
    const burst = windowOf(leaseWrites, b0, b1 + INTERVAL_MS);
    const quietAfter = windowOf(leaseWrites, a0, a1);
    const rQuiet = windowOf(renewTimes, q0, q1);
    const rBurst = windowOf(renewTimes, b0, b1 + INTERVAL_MS);
    const rQuietAfter = windowOf(renewTimes, a0, a1);
    const med = (xs: number[]) => percentile([...xs].sort((a, b) => a - b), 50);
    const mib = (b: number) => (b / 2 ** 20).toFixed(1);
    const late = (w: Window) => Math.max(0, ...w.gaps.map((g) => g - INTERVAL_MS));
    const row = (label: string, w: Window) =>
      `| ${label} | ${w.renewals} | ${w.gaps.length ? med(w.gaps).toFixed(0) : '—'} | ${w.gaps.length ? Math.max(...w.gaps).toFixed(0) : '—'} | ${w.gaps.length ? late(w).toFixed(0) : '—'} |`;
    const hz = (from: number, to: number) => {
      const xs = healthz.filter((h) => h.t >= from && h.t <= to).map((h) => h.ms).sort((a, b) => a - b);
      return xs.length ? `${percentile(xs, 50).toFixed(1)} | ${percentile(xs, 99).toFixed(1)} | ${xs.at(-1)!.toFixed(1)} | ${xs.filter((x) => !Number.isFinite(x)).length}` : '— | — | — | —';
    };
    const costRow = (label: string, cpu: number, listCalls: number, ms: number, from: number, to: number) =>
      `| ${label} | ${hz(from, to)} | ${cpu.toFixed(0)} (${((cpu / ms) * 100).toFixed(1)} % of a core) | ${listCalls} (${((listCalls / ms) * 1000).toFixed(1)}/s) |`;
    const maxLate = late(rBurst);
    const maxLateAfter = late(rQuietAfter);
    const onTime = Math.max(maxLate, maxLateAfter) < 1000;
    const heapBack = heapAfter <= heapBefore * 1.1 + 2 * 2 ** 20;
    const mainNote = process.env.NODELET_BENCH_MAIN ? ` (build: \`${NODELET_MAIN}\`)` : '';
    const section = [
      '## A burst of pod watch events, connected (`bench/watch-burst.ts`)',
      '',
      `Run ${new Date().toISOString()} on ${machine()}${mainNote}; the built nodelet connected to the test control plane (in the bench process) on the test CRI server, ${pods} pods bound and running, \`nodeLeaseDurationSeconds: ${LEASE_S}\` (a renewal every ${INTERVAL_MS} ms ±4 %), other frequencies the kubelet's defaults.`,
      `Burst = ${events} merge patches of one annotation of those pods, round-robin, 32 in flight from an admin client: ${events} MODIFIED events on nodelet's pod watch. Sent in ${((sent - b0) / 1000).toFixed(1)} s; all handled (nodelet's \`/pods\` shows every pod's last value) ${((b1 - b0) / 1000).toFixed(1)} s after the first. Baseline = a quiet ${quietMs / 1000} s window just before, in the same run; then a quiet window again. Lateness of a renewal = its gap to the previous one (as the control plane receives the PUTs) − ${INTERVAL_MS} ms.`,
      '',
      'Renewals as nodelet made them (the `renewTime` it wrote, read from a watch of the Lease):',
      '',
      '| window | lease renewals | gap p50 (ms) | gap max (ms) | latest renewal, late by (ms) |',
      '|---|---|---|---|---|',
      row(`quiet before (baseline, ${quietMs / 1000} s)`, rQuiet),
      row(`burst (${((b1 - b0) / 1000).toFixed(1)} s + ${INTERVAL_MS} ms)`, rBurst),
      row(`quiet after (${quietMs / 1000} s)`, rQuietAfter),
      '',
      'The same PUTs as the control plane received them (in the bench process, which also sends the burst, so its own delays count here):',
      '',
      '| window | lease renewals | gap p50 (ms) | gap max (ms) | latest renewal, late by (ms) |',
      '|---|---|---|---|---|',
      row(`quiet before (baseline, ${quietMs / 1000} s)`, quiet),
      row(`burst (${((b1 - b0) / 1000).toFixed(1)} s + ${INTERVAL_MS} ms)`, burst),
      row(`quiet after (${quietMs / 1000} s)`, quietAfter),
      '',
      "nodelet's event-loop delay seen from outside (a GET of `/healthz` every 100 ms), its CPU time (/proc) and its `ListPodSandbox` calls (what the test CRI server received: the relists, and a pod's own look at the runtime when its sync has no fresh relist):",
      '',
      '| window | healthz p50 (ms) | p99 (ms) | max (ms) | failed | nodelet CPU (ms) | ListPodSandbox calls |',
      '|---|---|---|---|---|---|---|',
      costRow('quiet before', cpu1 - cpu0, lists1 - lists0, q1 - q0, q0, q1),
      costRow('burst', cpu2 - cpu1, lists2 - lists1, b1 - b0, b0, b1),
      costRow('quiet after', cpu3 - cpu2, lists3 - lists2, a1 - a0, a0, a1),
      '',
      `nodelet's "node lease renewed late" warnings (a renewal more than 1 s past its interval): quiet before ${warned(lateWarnings.filter((w) => Date.parse(w.time) >= q0 && Date.parse(w.time) <= q1))}, burst ${warned(inBurst)}, quiet after ${warned(lateWarnings.filter((w) => Date.parse(w.time) >= a0 && Date.parse(w.time) <= a1))}; "event loop was blocked" (≥ 1 s) warnings from the quiet window before to the end of the one after (the heap snapshots' own pauses are outside): ${blocked.filter((b) => Date.parse(b.time) >= q0 && Date.parse(b.time) <= a1).map((b) => `${b.maxDelayMs} ms at +${((Date.parse(b.time) - b0) / 1000).toFixed(1)} s`).join(', ') || 'none'}; event-loop lag max (\`nodejs_eventloop_lag_max_seconds\` after the burst): ${lagMax.toFixed(3)} s.`,
      '',
      '| memory | before | after | ratio |',
      '|---|---|---|---|',
      `| live heap (heap snapshot total, MiB) | ${mib(heapBefore)} | ${mib(heapAfter)} | ${(heapAfter / heapBefore).toFixed(2)}× |`,
      `| heap used incl. garbage, median of the window (MiB) | ${mib(med(before.map((s) => s.heapUsed)))} | ${mib(med(after.map((s) => s.heapUsed)))} | ${(med(after.map((s) => s.heapUsed)) / med(before.map((s) => s.heapUsed))).toFixed(2)}× |`,
      `| RSS, median of the window (MiB); peak during the burst ${mib(peakRss)} | ${mib(med(before.map((s) => s.rss)))} | ${mib(med(after.map((s) => s.rss)))} | ${(med(after.map((s) => s.rss)) / med(before.map((s) => s.rss))).toFixed(2)}× |`,
      '',
      `Targets: every renewal on time (< 1 s late, by the renewTime nodelet wrote) during the burst and in the ${quietMs / 1000} s after it: **${onTime ? 'met' : 'missed'}** (during: ${maxLate.toFixed(0)} ms at worst, as received ${late(burst).toFixed(0)} ms; after: ${maxLateAfter.toFixed(0)} ms, as received ${late(quietAfter).toFixed(0)} ms); live heap back to its level after (within 10 % + 2 MiB): **${heapBack ? 'met' : 'missed'}**.`,
      '',
      `Reproduce: \`npm run build && node dist/bench/watch-burst.js ${events} ${pods}\`.`,
    ].join('\n');
    if (!quick) await writeSection('watch-burst', section);
    process.stdout.write(`${section}\n`);
  } finally {
    clearInterval(rssTimer);
    await agent?.stop();
    await api.close();
    await cri.stop();
    await cp.close();
    removeDir(dir); // pods' volumes stay mounted when nodelet stops, as the kubelet's
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`watch-burst benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
