/**
 * `npm run bench`: every benchmark of what nodelet costs each node, one after the other (they
 * share the benchmark containerd, and two agents on one runtime would remove each other's
 * pods), each writing its own section of BENCHMARKS.md. Extra arguments (e.g. `--quick`)
 * are passed to each. Each also runs alone: `node dist/bench/<name>.js`.
 */
import { spawnSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const BENCHES = ['config-dropins', 'startup', 'static-start', 'api-pod-start', 'status-latency', 'footprint', 'exec-stream', 'watch-burst', 'checkpoint', 'log-throughput'] as const;

function main(): void {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const extra = process.argv.slice(2);
  const failed: string[] = [];
  for (const name of BENCHES) {
    process.stdout.write(`\n=== ${name} (load average ${os.loadavg()[0]!.toFixed(2)}) ===\n`);
    // One after another: they can share one containerd (each alone gets its own).
    const env = { ...process.env, NODELET_BENCH_CONTAINERD_DIR: process.env.NODELET_BENCH_CONTAINERD_DIR ?? '/var/lib/nodelet-dev/containerd-bench' };
    const r = spawnSync(process.execPath, [path.join(here, `${name}.js`), ...extra], { stdio: 'inherit', env });
    if (r.status !== 0) failed.push(name);
  }
  if (failed.length) {
    process.stderr.write(`benchmarks failed: ${failed.join(', ')}\n`);
    process.exit(1);
  }
}

main();
