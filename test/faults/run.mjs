#!/usr/bin/env node
// The fault, fuzz and access suite: `npm run test:faults` (short profile, CI) or
// `npm run test:faults -- --full` (the full profile RELIABILITY.md reports). Builds, runs the
// vitest project `faults` (extra arguments go to vitest, e.g. a file), then sums the counts
// each test file wrote into <report dir>/summary.json and prints them.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const args = process.argv.slice(2);
const full = args.includes('--full');
const noBuild = args.includes('--no-build');
const rest = args.filter((a) => a !== '--full' && a !== '--no-build');
const reportDir = process.env.NODELET_FAULTS_REPORT ?? path.join(os.tmpdir(), 'nodelet-faults-report');
const seed = process.env.NODELET_FAULTS_SEED ?? String(Date.now() % 2 ** 31);
fs.rmSync(reportDir, { recursive: true, force: true });
fs.mkdirSync(reportDir, { recursive: true });
const env = { ...process.env, NODELET_FAULTS_REPORT: reportDir, NODELET_FAULTS_SEED: seed, ...(full ? { NODELET_FAULTS_FULL: '1' } : {}) };
console.log(`nodelet faults: profile ${full ? 'full' : 'short'}, seed ${seed}, report ${reportDir}`);
if (!noBuild) {
  const b = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit', env });
  // tsc emits even with type errors elsewhere in the tree; the tests judge what was built.
  if (b.error) throw b.error;
}
const t0 = Date.now();
const r = spawnSync(process.execPath, [path.join(root, 'node_modules/vitest/vitest.mjs'), 'run', '--project', 'faults', ...rest], { cwd: root, stdio: 'inherit', env });
const summary = { profile: full ? 'full' : 'short', seed: Number(seed), date: new Date().toISOString(), seconds: Math.round((Date.now() - t0) / 1000), node: process.version, host: { cpus: os.cpus().length, model: os.cpus()[0]?.model, memGiB: Math.round(os.totalmem() / 2 ** 30), kernel: os.release() }, exitCode: r.status, categories: {} };
for (const f of fs.readdirSync(reportDir).filter((n) => n.endsWith('.json') && n !== 'summary.json').sort()) {
  const c = JSON.parse(fs.readFileSync(path.join(reportDir, f), 'utf8'));
  summary.categories[c.category] = c;
}
fs.writeFileSync(path.join(reportDir, 'summary.json'), `${JSON.stringify(summary, null, 2)}\n`);
for (const [name, c] of Object.entries(summary.categories)) console.log(`${name.padEnd(14)} ${c.seconds}s ${JSON.stringify(c.counts)}`);
process.exit(r.status ?? 1);
