/**
 * BENCHMARKS.md holds one section per benchmark between `<!-- bench:<name>:start -->` and
 * `<!-- bench:<name>:end -->`; each run replaces its own section and leaves the others.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const BENCHMARKS_FILE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'BENCHMARKS.md');

/** Replaces (or appends) the section `name` of a BENCHMARKS.md text. Pure. */
export function replaceNamedSection(doc: string, name: string, section: string): string {
  const start = `<!-- bench:${name}:start -->`;
  const end = `<!-- bench:${name}:end -->`;
  const block = `${start}\n${section.trim()}\n${end}`;
  const s = doc.indexOf(start);
  const e = doc.indexOf(end);
  if (s >= 0 && e > s) return doc.slice(0, s) + block + doc.slice(e + end.length);
  const head = doc.trim() ? `${doc.trimEnd()}\n\n` : '# Benchmarks\n\n';
  return `${head}${block}\n`;
}

export async function writeSection(name: string, section: string): Promise<void> {
  const doc = fs.existsSync(BENCHMARKS_FILE) ? await fsp.readFile(BENCHMARKS_FILE, 'utf8') : '';
  await fsp.writeFile(BENCHMARKS_FILE, replaceNamedSection(doc, name, section));
}

/** Nearest-rank percentile of a sorted list. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

/**
 * The comparison table every benchmark prints: p50 and p99 of the baseline and of the path
 * through nodelet, their ratio and the added milliseconds.
 */
export function ratioTable(baseline: readonly number[], through: readonly number[], digits = 2): string[] {
  const a = [...baseline].sort((x, y) => x - y);
  const b = [...through].sort((x, y) => x - y);
  const row = (p: number) => {
    const d = percentile(a, p);
    const h = percentile(b, p);
    return `| p${p} | ${d.toFixed(digits)} | ${h.toFixed(digits)} | ${(h / d).toFixed(2)}× | ${h - d >= 0 ? '+' : '−'}${Math.abs(h - d).toFixed(digits)} |`;
  };
  return ['| | direct CRI (ms) | through nodelet (ms) | ratio | added (ms) |', '|---|---|---|---|---|', row(50), row(99)];
}
