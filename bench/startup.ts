/**
 * Process start -> `/healthz` 200, against `node -e` printing a line (process start -> the
 * line read from its stdout), interleaved in the same run. nodelet runs standalone on the
 * benchmark containerd with an empty static pod dir; /healthz is polled every 2 ms from the
 * spawn (a refused connection costs microseconds). Each nodelet is stopped (SIGTERM) before
 * the next run; the stop is not timed. Also reports each side's peak RSS at the end of the
 * run (the cost of what is loaded at start).
 *
 * Run: `npm run build && node dist/bench/startup.js [iterations] [--quick]` (root).
 */
import { spawn } from 'node:child_process';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../test/helpers/nodelet.js';
import { benchArgs, httpStatus, machine, mb, median, rows, rssBytes, sleep, startAgent } from './agent.js';
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

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const iterations = quick ? 2 : Math.max(5, nums[0] ?? 30);
  const warmup = quick ? 0 : 3;
  const endpoint = benchContainerd();
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-startup-'));
  const base: number[] = [];
  const through: number[] = [];
  const rss: number[] = [];
  try {
    for (let i = 0; i < warmup + iterations; i++) {
      const b = await nodeLine();
      const port = await freePort();
      const httpsPort = await freePort();
      const t0 = performance.now();
      const agent = await startAgent({ dir, endpoint, healthzPort: port, port: httpsPort });
      let n: number;
      for (;;) {
        if ((await httpStatus(port, '/healthz')) === 200) {
          n = performance.now() - t0;
          break;
        }
        if (agent.child.exitCode !== null) throw new Error(`nodelet exited with ${agent.child.exitCode}`);
        if (performance.now() - t0 > 30_000) throw new Error('no /healthz 200 within 30 s');
        await sleep(2);
      }
      rss.push(rssBytes(agent.pid));
      await agent.stop();
      if (i < warmup) continue;
      base.push(b);
      through.push(n);
    }
    const added = median(through) - median(base);
    const section = [
      '## Process start → `/healthz` 200 (`bench/startup.ts`)',
      '',
      `Run ${new Date().toISOString()} on ${machine()}; ${iterations} iterations after ${warmup} warm-up, interleaved.`,
      'Baseline = `node -e \'console.log("up")\'`, spawn → the line read. Nodelet = spawn of the built nodelet (standalone, benchmark containerd, empty static pod dir) → first `GET /healthz` answering 200 (polled every 2 ms).',
      '',
      '| | node -e (ms) | nodelet (ms) | ratio | added (ms) |',
      '|---|---|---|---|---|',
      ...rows('start', base, through),
      '',
      `RSS of nodelet at its first 200: median ${mb(median(rss))} MB.`,
      '',
      `Target ≤ 250 ms added at the median: **+${added.toFixed(0)} ms — ${added <= 250 ? 'met' : 'missed'}**.`,
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
