/**
 * What one scrape of every observability endpoint costs nodelet, in CPU, with 110 pods (the
 * kubelet's default maxPods) on the test CRI server.
 *
 * The built nodelet runs standalone with 110 static pods (one container each) on the test
 * CRI server, HTTPS with anonymous AlwaysAllow (what a scrape costs, not what a webhook
 * review costs). Nodelet's CPU is read from /proc/<pid>/stat (utime + stime) over windows
 * of equal length, interleaved in the same run: idle windows (the baseline: the relist and
 * everything nodelet does anyway) and scrape windows that start with one round of
 * `/metrics`, `/metrics/resource`, `/stats/summary`, `/configz`, `/pods` on HTTPS. The
 * windows are longer than the stats cache (2 s), so every round pays a full collection
 * (the CRI calls, the host reads). Cost of a round = scrape window CPU − idle window CPU.
 *
 * Run: `npm run build && node dist/bench/scrape.js [rounds] [pods]`.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { startFakeRuntime } from '../test/cri/fake-runtime.js';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort, nodeletBin, shebangNodeFlags, tempDir, writeKubeletConfig } from '../test/helpers/nodelet.js';
import { percentile, writeSection } from './sections.js';

const TICK_MS = 1000 / 100; // USER_HZ
const WINDOW_MS = 2500;
const PATHS = ['/metrics', '/metrics/resource', '/stats/summary', '/configz', '/pods'];

function cpuMs(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

function get(port: number, p: string, agent: https.Agent): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    https
      .get({ host: '127.0.0.1', port, path: p, agent, rejectUnauthorized: false }, (res) => {
        let bytes = 0;
        res.on('data', (c: Buffer) => (bytes += c.length));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes }));
      })
      .on('error', reject);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const rounds = Math.max(3, Number(process.argv[2] ?? 12) || 12);
  const pods = Math.max(1, Number(process.argv[3] ?? 110) || 110);
  const cri = await startFakeRuntime();
  const dir = tempDir('nodelet-bench-scrape-');
  const manifests = path.join(dir, 'manifests');
  fs.mkdirSync(manifests);
  for (let i = 0; i < pods; i++) {
    fs.writeFileSync(
      path.join(manifests, `p${i}.yaml`),
      `apiVersion: v1\nkind: Pod\nmetadata: {name: p${i}, namespace: bench}\nspec:\n  hostNetwork: true\n  containers: [{name: c, image: docker.io/local/busybox:latest, imagePullPolicy: Never, command: [sleep, "3600"]}]\n`,
    );
  }
  const port = await freePort();
  writeKubeletConfig(dir, {
    containerRuntimeEndpoint: `unix://${cri.socketPath}`,
    podLogsDir: path.join(dir, 'logs'),
    address: '127.0.0.1',
    port,
    readOnlyPort: 0,
    healthzPort: 0,
    staticPodPath: manifests,
    authentication: '{anonymous: {enabled: true}, webhook: {enabled: false}}',
    authorization: '{mode: AlwaysAllow}',
  });
  // The built binary next to this file's build (dist/bench -> dist/src/main.js).
  const main = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'src', 'main.js');
  const child = spawn(process.execPath, [...shebangNodeFlags(nodeletBin), main, '--config', path.join(dir, 'kubelet.yaml'), '--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'lock'), '--hostname-override', 'bench', '--log-level', 'warn'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise((r) => child.once('exit', r));
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const pid = child.pid!;
    // Every pod running, as /metrics counts them.
    for (let t = Date.now(); ; await sleep(500)) {
      // Not listening yet, or starting its TLS: try again.
      const body = await new Promise<string>((resolve, reject) => {
        https.get({ host: '127.0.0.1', port, path: '/metrics', agent, rejectUnauthorized: false }, (res) => {
          let s = '';
          res.on('data', (c: Buffer) => (s += c.toString()));
          res.on('end', () => resolve(s));
        }).on('error', reject);
      }).catch(() => '');
      if (new RegExp(`^kubelet_running_containers\\{container_state="running"\\} ${pods}$`, 'm').test(body)) break;
      if (Date.now() - t > 180_000) throw new Error(`the ${pods} pods did not all run within 3 min`);
    }
    await sleep(3000);
    const idle: number[] = [];
    const scrape: number[] = [];
    const wall: number[] = [];
    let bytes = 0;
    for (let i = 0; i < rounds + 1; i++) {
      let c0 = cpuMs(pid);
      await sleep(WINDOW_MS);
      const idleMs = cpuMs(pid) - c0;
      c0 = cpuMs(pid);
      const t0 = performance.now();
      let b = 0;
      for (const p of PATHS) {
        const r = await get(port, p, agent);
        if (r.status !== 200) throw new Error(`${p}: HTTP ${r.status}`);
        b += r.bytes;
      }
      const w = performance.now() - t0;
      await sleep(Math.max(0, WINDOW_MS - w));
      const scrapeMs = cpuMs(pid) - c0;
      if (i === 0) continue; // warm-up
      idle.push(idleMs);
      scrape.push(scrapeMs);
      wall.push(w);
      bytes = b;
    }
    const sum = (a: number[]) => a.reduce((x, y) => x + y, 0);
    const perRound = (sum(scrape) - sum(idle)) / rounds;
    const sortedWall = [...wall].sort((a, b) => a - b);
    const section = [
      '## One scrape of every endpoint with 110 pods (`bench/scrape.ts`)',
      '',
      `Run ${new Date().toISOString()} on Node ${process.version}, ${os.cpus().length} CPUs; the built nodelet, ${pods} static pods on the test CRI server; ${rounds} rounds after 1 warm-up.`,
      `A round: ${PATHS.map((p) => `\`${p}\``).join(', ')} on HTTPS (one keep-alive connection, anonymous AlwaysAllow; ${bytes} bytes in all). Nodelet CPU (utime+stime from /proc, 10 ms ticks) over ${WINDOW_MS} ms windows, interleaved: idle windows (the baseline: relist and the rest) and windows starting with one round; each round pays a full stats collection (the windows outlast the 2 s stats cache).`,
      '',
      '| | nodelet CPU per window (ms) |',
      '|---|---|',
      `| idle window (baseline), mean | ${(sum(idle) / rounds).toFixed(1)} |`,
      `| window with one round, mean | ${(sum(scrape) / rounds).toFixed(1)} |`,
      `| **one round, added** | **${perRound.toFixed(1)}** (budget 50) |`,
      '',
      `Wall time of a round: p50 ${percentile(sortedWall, 50).toFixed(1)} ms, p99 ${percentile(sortedWall, 99).toFixed(1)} ms.`,
      '',
      'Reproduce: `npm run build && node dist/bench/scrape.js 12 110`.',
    ].join('\n');
    await writeSection('scrape', section);
    process.stdout.write(`${section}\n`);
  } finally {
    agent.destroy();
    child.kill('SIGTERM');
    await exited;
    await cri.stop();
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`scrape benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
