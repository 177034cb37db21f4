/**
 * Every benchmark of `npm run bench` runs once with `--quick` (tiny counts, nothing written
 * to BENCHMARKS.md), so none of them rots. Not a timed test: only that each completes and
 * prints its table. Needs the build (dist/bench) and root (the benchmark containerd).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../../helpers/nodelet.js';

/** Each with its share of a 3 min budget (ms); footprint and watch-burst took 27 and 19 s in CI on a quiet machine. */
const BENCHES: [string, number][] = [
  ['config-dropins', 7_000],
  ['startup', 10_000],
  ['static-start', 14_000],
  ['footprint', 60_000],
  ['api-pod-start', 30_000],
  ['status-latency', 30_000],
  ['exec-stream', 30_000],
  ['watch-burst', 60_000],
  ['checkpoint', 10_000],
  // Two 4 MB logs through the test CRI server's node: no containerd.
  ['log-throughput', 20_000],
];
/** One containerd for all of them (they run one after another): starting one per benchmark costs seconds each. */
const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-bench';

describe('benchmarks (--quick)', () => {
  for (const [name, budgetMs] of BENCHES) {
    it(`${name} runs`, () => {
      const file = path.join(projectRoot, 'dist/bench', `${name}.js`);
      expect(fs.existsSync(file), `${file}: run npm run build`).toBe(true);
      const before = fs.readFileSync(path.join(projectRoot, 'BENCHMARKS.md'), 'utf8');
      const r = spawnSync(process.execPath, [file, '--quick'], { encoding: 'utf8', timeout: budgetMs, env: { ...process.env, NODELET_BENCH_CONTAINERD_DIR: CONTAINERD_DIR } });
      expect(r.status, `${name}: ${r.stderr}`).toBe(0);
      expect(r.stdout).toMatch(/^## .*\(`bench\//m);
      expect(r.stdout).toMatch(/\| (ratio|target) \|/);
      // --quick never writes its figures.
      expect(fs.readFileSync(path.join(projectRoot, 'BENCHMARKS.md'), 'utf8')).toBe(before);
    }, budgetMs + 2_000);
  }
});
