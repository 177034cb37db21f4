/**
 * Loading and merging a configuration of one `--config` file and 100 `*.conf` drop-ins,
 * against reading the same 101 files with `fs.readFile` (the floor: any loader reads them),
 * as nodelet pays it once at start: each measurement in a fresh child process (modules
 * already imported, so only the load is timed), the two sides in alternating order,
 * interleaved across children.
 *
 * Run: `npm run build && node dist/bench/config-dropins.js [children] [--quick]`.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/config/index.js';
import { benchArgs, machine, median, rows } from './agent.js';
import { writeSection } from './sections.js';

const DROP_INS = 100;

function writeFiles(dir: string): { main: string; confDir: string } {
  const main = path.join(dir, 'kubelet.yaml');
  fs.writeFileSync(main, 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nmaxPods: 110\nevictionHard: {memory.available: 100Mi}\n');
  const confDir = path.join(dir, 'kubelet.conf.d');
  fs.mkdirSync(confDir);
  for (let i = 0; i < DROP_INS; i++) {
    fs.writeFileSync(
      path.join(confDir, `${String(i).padStart(3, '0')}-bench.conf`),
      [
        'apiVersion: kubelet.config.k8s.io/v1beta1',
        'kind: KubeletConfiguration',
        `maxPods: ${100 + i}`,
        `eventRecordQPS: ${1 + (i % 50)}`,
        `nodeStatusUpdateFrequency: ${10 + (i % 5)}s`,
        'evictionHard:',
        `  nodefs.available: "${5 + (i % 10)}%"`,
        `  imagefs.available: "${10 + (i % 10)}%"`,
        'featureGates:',
        `  ContainerCheckpoint: ${i % 2 === 0}`,
        'systemReserved:',
        `  cpu: ${100 + i}m`,
        `  memory: ${200 + i}Mi`,
        '',
      ].join('\n'),
    );
  }
  return { main, confDir };
}

async function readAll(main: string, confDir: string): Promise<number> {
  const t0 = performance.now();
  const names = (await fsp.readdir(confDir)).filter((n) => n.endsWith('.conf')).sort();
  await fsp.readFile(main, 'utf8');
  for (const n of names) await fsp.readFile(path.join(confDir, n), 'utf8');
  return performance.now() - t0;
}

async function child(main: string, confDir: string, loadFirst: boolean): Promise<void> {
  let base = 0;
  let through = 0;
  const load = async () => {
    const t0 = performance.now();
    const loaded = await loadConfig({ configFile: main, configDir: confDir });
    through = performance.now() - t0;
    if (loaded.config.maxPods !== 100 + DROP_INS - 1) throw new Error(`merged maxPods is ${loaded.config.maxPods}`);
  };
  if (loadFirst) await load();
  base = await readAll(main, confDir);
  if (!loadFirst) await load();
  process.stdout.write(JSON.stringify({ base, through }));
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args[0] === '--child') return child(args[1]!, args[2]!, args[3] === 'load-first');
  const { quick, nums } = benchArgs();
  const children = quick ? 2 : Math.max(5, nums[0] ?? 30);
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-config-'));
  const { main: mainFile, confDir } = writeFiles(dir);
  const self = fileURLToPath(import.meta.url);
  const base: number[] = [];
  const through: number[] = [];
  try {
    for (let i = 0; i < children + 1; i++) {
      const r = JSON.parse(execFileSync(process.execPath, [self, '--child', mainFile, confDir, i % 2 ? 'load-first' : 'read-first'], { encoding: 'utf8' })) as { base: number; through: number };
      if (i === 0) continue; // warm-up (page cache)
      base.push(r.base);
      through.push(r.through);
    }
    const added = median(through) - median(base);
    const section = [
      '## Configuration with 100 drop-ins: load and merge (`bench/config-dropins.ts`)',
      '',
      `Run ${new Date().toISOString()} on ${machine()}; ${children} fresh processes after 1 warm-up, the two sides in alternating order.`,
      `Baseline = \`readdir\` + \`fs.readFile\` of the main file and the ${DROP_INS} drop-ins. Nodelet = \`loadConfig\` of the same (read, bounded YAML parse, JSON merge patch in lexical order, defaults, validation, origins), modules already imported, once per process as at start.`,
      '',
      '| | fs.readFile (ms) | loadConfig (ms) | ratio | added (ms) |',
      '|---|---|---|---|---|',
      ...rows('load', base, through, 2),
      '',
      `Target ≤ 20 ms added at the median: **+${added.toFixed(1)} ms — ${added <= 20 ? 'met' : 'missed'}**.`,
      '',
      'Reproduce: `npm run build && node dist/bench/config-dropins.js 30`.',
    ].join('\n');
    if (!quick) await writeSection('config-dropins', section);
    process.stdout.write(`${section}\n`);
  } finally {
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`config-dropins benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
