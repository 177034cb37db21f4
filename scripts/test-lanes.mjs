#!/usr/bin/env node
// `npm test` after the build: every vitest project, in three phases.
//   1. `unit` alone (its files in parallel on vitest's workers);
//   2. the two integration lanes side by side, each its files one at a time, in two vitest
//      processes: vitest puts every project whose files run one at a time into one single
//      sequential group, so within one process the lanes ran one after the other (measured:
//      two projects of two 3 s files took 12 s);
//   3. `alone` (load-sensitive files: benchmarks, memory eviction, event-loop and leak
//      figures) and `faults`, one file at a time, with nothing else on the machine.
// Each lane's lines carry its name. Every phase runs even when an earlier one failed; the exit
// code is the first failure's. With arguments (files, filters, options) this is plain
// `vitest run <arguments>`.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const vitest = path.join(root, 'node_modules/vitest/vitest.mjs');

/** Runs vitest with `args`; with a `lane` name, prefixes each of its lines with it. */
function run(args, lane) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [vitest, 'run', ...args], { cwd: root, stdio: lane ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
    if (lane) for (const stream of [child.stdout, child.stderr]) prefixLines(stream, `[${lane}] `, stream === child.stdout ? process.stdout : process.stderr);
    child.on('error', (err) => {
      console.error(`${lane ?? 'vitest'}: ${err.message}`);
      resolve(1);
    });
    child.on('close', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}

function prefixLines(stream, prefix, out) {
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk) => {
    const lines = (rest + chunk).split('\n');
    rest = lines.pop() ?? '';
    if (lines.length) out.write(lines.map((l) => prefix + l).join('\n') + '\n');
  });
  stream.on('end', () => {
    if (rest) out.write(prefix + rest + '\n');
  });
}

const args = process.argv.slice(2);
if (args.length) process.exit(await run(args));

const t0 = Date.now();
const codes = [];
const phase = async (name, lanes) => {
  const t = Date.now();
  const results = await Promise.all(lanes.map(([projects, lane]) => run(projects.flatMap((p) => ['--project', p]), lane)));
  codes.push(...results);
  console.log(`nodelet tests: phase ${name} ${results.every((c) => c === 0) ? 'passed' : 'FAILED'} in ${Math.round((Date.now() - t) / 1000)} s`);
};
await phase('unit', [[['unit']]]);
await phase('integration', [
  [['integration'], 'integration'],
  [['integration-containerd'], 'containerd'],
]);
await phase('alone', [[['alone', 'faults']]]);
console.log(`nodelet tests: ${Math.round((Date.now() - t0) / 1000)} s in all`);
process.exit(codes.find((c) => c !== 0) ?? 0);
