/**
 * Process start -> `/healthz` 200, against `node -e` printing a line (process start -> the
 * line read from its stdout), interleaved in the same run. nodelet runs standalone on the
 * benchmark containerd with an empty static pod dir; /healthz is polled every 2 ms from the
 * spawn (a refused connection costs microseconds). Each nodelet is stopped (SIGTERM) before
 * the next run; the stop is not timed. Both builds `npm run build` makes are measured in
 * each round (the esbuild bundle that ships and tsc's output), which goes first alternating.
 * Also reports each one's RSS at its first 200 (the cost of what is loaded at start).
 *
 * Run: `npm run build && node dist/bench/startup.js [iterations] [--quick]` (root).
 */
import { spawn } from 'node:child_process';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../test/helpers/nodelet.js';
import { BUNDLE_MAIN, benchArgs, httpStatus, machine, mb, median, rows, rssBytes, sleep, startAgent, TSC_MAIN } from './agent.js';
import { benchContainerd } from './runtime.js';
import { writeSection } from './sections.js';

function nodeLine(): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, ['-e', 'console.log("up")'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let done = false;
    child.stdout.on('data', () => {
      if (!done) (done = true), resolve(performance.now() - t0);
    });
    child.on('error', reject);
  });
}

/** Spawn of one build -> its first `/healthz` 200, and its RSS then. */
async function nodeletStart(main: string, dir: string, endpoint: string): Promise<{ ms: number; rss: number }> {
  const port = await freePort();
  const httpsPort = await freePort();
  const t0 = performance.now();
  const agent = await startAgent({ dir, endpoint, healthzPort: port, port: httpsPort, main });
  try {
    for (;;) {
      if ((await httpStatus(port, '/healthz')) === 200) return { ms: performance.now() - t0, rss: rssBytes(agent.pid) };
      if (agent.child.exitCode !== null) throw new Error(`${main} exited with ${agent.child.exitCode}`);
      if (performance.now() - t0 > 30_000) throw new Error(`${main}: no /healthz 200 within 30 s`);
      await sleep(2);
    }
  } finally {
    await agent.stop();
  }
}

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const iterations = quick ? 2 : Math.max(5, nums[0] ?? 30);
  const warmup = quick ? 0 : 3;
  const endpoint = benchContainerd();
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-startup-'));
  const base: number[] = [];
  const builds = [
    { name: 'bundle', main: BUNDLE_MAIN, ms: [] as number[], rss: [] as number[] },
    { name: 'tsc', main: TSC_MAIN, ms: [] as number[], rss: [] as number[] },
  ];
  try {
    for (let i = 0; i < warmup + iterations; i++) {
      const b = await nodeLine();
      // Each round runs both builds, in turn first (the machine's load drifts).
      const order = i % 2 === 0 ? builds : [...builds].reverse();
      const got = [];
      for (const build of order) got.push({ build, ...(await nodeletStart(build.main, dir, endpoint)) });
      if (i < warmup) continue;
      base.push(b);
      for (const g of got) g.build.ms.push(g.ms), g.build.rss.push(g.rss);
    }
    const [bundle, tsc] = builds as [(typeof builds)[0], (typeof builds)[0]];
    const added = median(bundle.ms) - median(base);
    const addedTsc = median(tsc.ms) - median(base);
    const section = [
      '## Process start → `/healthz` 200 (`bench/startup.ts`)',
      '',
      `Run ${new Date().toISOString()} on ${machine()}; ${iterations} iterations after ${warmup} warm-up, interleaved.`,
      'Baseline = `node -e \'console.log("up")\'`, spawn → the line read. Nodelet = spawn of the built nodelet (standalone, benchmark containerd, empty static pod dir) → first `GET /healthz` answering 200 (polled every 2 ms). Both builds `npm run build` makes, in each round one after the other (which goes first alternates): the esbuild bundle `dist/nodelet/main.js` (shipped: `bin`, the systemd unit) and tsc\'s output `dist/src/main.js` (one file per module).',
      '',
      '| | node -e (ms) | nodelet (ms) | ratio | added (ms) |',
      '|---|---|---|---|---|',
      ...rows('bundle: start', base, bundle.ms),
      ...rows('tsc output: start', base, tsc.ms),
      '',
      `RSS at the first 200, median: bundle ${mb(median(bundle.rss))} MB, tsc output ${mb(median(tsc.rss))} MB.`,
      '',
      `Target ≤ 250 ms added at the median: bundle **+${added.toFixed(0)} ms — ${added <= 250 ? 'met' : 'missed'}** (tsc output +${addedTsc.toFixed(0)} ms).`,
      '',
      'Reproduce: `npm run build && node dist/bench/startup.js 30` (as root).',
    ].join('\n');
    if (!quick) await writeSection('startup', section);
    process.stdout.write(`${section}\n`);
  } finally {
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`startup benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
