/**
 * The docs a newcomer walks (README.md and docs/*.md) stay true to the tree and readable:
 * every repository path they name exists, every relative link (and its #anchor) resolves,
 * README.md stays short with the two commands first, prose lines stay within 120
 * characters (tables and code blocks excepted), and docs/architecture.md walks its four
 * flows through files that exist. Failures are listed all at once, each with file and line.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const DOC_FILES = [
  'README.md',
  ...fs
    .readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
];

type Kind = 'prose' | 'code' | 'table' | 'heading';
interface Block {
  file: string;
  /** 1-based line of the block's first line. */
  line: number;
  kind: Kind;
  lines: string[];
}

/** A markdown file as blocks: fenced code, table rows, headings, and prose paragraphs (joined lines). */
function blocks(file: string): Block[] {
  const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
  const out: Block[] = [];
  let cur: Block | undefined;
  let fence = false;
  text.split('\n').forEach((l, i) => {
    const n = i + 1;
    const s = l.trim();
    if (s.startsWith('```')) {
      if (!fence) out.push((cur = { file, line: n, kind: 'code', lines: [l] }));
      else cur!.lines.push(l);
      fence = !fence;
      if (!fence) cur = undefined;
      return;
    }
    if (fence) return void cur!.lines.push(l);
    if (!s) return void (cur = undefined);
    const kind: Kind = s.startsWith('|') ? 'table' : s.startsWith('#') ? 'heading' : 'prose';
    // A list item starts a new prose block, so that each item's spans pair within it.
    const newItem = kind === 'prose' && /^\s*([-*+]|\d+\.)\s/.test(l);
    if (cur && cur.kind === kind && kind === 'prose' && !newItem) cur.lines.push(l);
    else out.push((cur = { file, line: n, kind, lines: [l] }));
  });
  return out;
}

const ALL = new Map(DOC_FILES.map((f) => [f, blocks(f)]));

/** Repository paths in a text: `src/...`, `test/...`, `bench/...`, `scripts/...`, `proto/...`, `systemd/...` (not inside another path). */
const REPO_PATH = /(?<![\w./~-])((?:src|test|bench|scripts|proto|systemd)\/[\w./-]*)/g;

function pathsIn(text: string): { path: string; next: string }[] {
  return [...text.matchAll(REPO_PATH)].map((m) => ({ path: m[1]!.replace(/\.+$/, ''), next: text[m.index! + m[0].length] ?? '' }));
}

/** The texts a block names paths in: its code spans and link targets (prose, tables, headings), or its lines (code). */
function namingTexts(b: Block): string[] {
  if (b.kind === 'code') return b.lines;
  const text = b.lines.map((l) => l.trim()).join(' ');
  const spans = [...text.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
  const links = [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!);
  return [...spans, ...links];
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  const text = heading
    .replace(/^#+\s*/, '')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/`/g, '')
    .toLowerCase();
  return text.replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const b of ALL.get(file) ?? blocks(file)) {
    if (b.kind !== 'heading') continue;
    const s = slug(b.lines[0]!);
    const k = seen.get(s) ?? 0;
    seen.set(s, k + 1);
    out.add(k === 0 ? s : `${s}-${k}`);
  }
  return out;
}

describe('the docs a newcomer walks', () => {
  it('name only repository paths that exist (no globs, no placeholders)', () => {
    const problems: string[] = [];
    let named = 0;
    for (const [file, bs] of ALL) {
      for (const b of bs) {
        for (const text of namingTexts(b)) {
          for (const p of pathsIn(text)) {
            named++;
            if (p.next === '*' || p.next === '<' || p.next === '{') problems.push(`${file}:${b.line}: ${p.path}${p.next}...: a pattern, not a path: name the file`);
            else if (!fs.existsSync(path.join(ROOT, p.path))) problems.push(`${file}:${b.line}: ${p.path} does not exist`);
          }
        }
      }
    }
    expect(problems).toEqual([]);
    // The check itself found the paths (a broken pattern would pass vacuously).
    expect(named).toBeGreaterThan(100);
  });

  it('link only to files and headings that exist', () => {
    const problems: string[] = [];
    for (const [file, bs] of ALL) {
      for (const b of bs) {
        if (b.kind === 'code') continue;
        const text = b.lines.map((l) => l.trim()).join(' ');
        for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
          const target = m[1]!;
          if (/^[a-z]+:/i.test(target)) continue;
          const [rel, anchor] = target.split('#', 2) as [string, string | undefined];
          const to = rel === '' ? file : path.posix.normalize(path.posix.join(path.posix.dirname(file), rel));
          if (to.startsWith('..') || !fs.existsSync(path.join(ROOT, to))) {
            problems.push(`${file}:${b.line}: link to ${target}: ${to} does not exist`);
            continue;
          }
          if (anchor !== undefined && to.endsWith('.md') && !anchors(to).has(anchor)) problems.push(`${file}:${b.line}: link to ${target}: ${to} has no heading #${anchor}`);
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it('keep prose lines within 120 characters (tables and code blocks excepted)', () => {
    const long: string[] = [];
    for (const [file, bs] of ALL) {
      for (const b of bs) {
        if (b.kind === 'code' || b.kind === 'table') continue;
        b.lines.forEach((l, i) => {
          if (l.length > 120) long.push(`${file}:${b.line + i}: ${l.length} characters`);
        });
      }
    }
    expect(long).toEqual([]);
  });

  it('keep README.md at most 120 lines, its two commands first', () => {
    const text = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    expect(text.trimEnd().split('\n').length).toBeLessThanOrEqual(120);
    const first = ALL.get('README.md')!.find((b) => b.kind === 'code' || (b.kind === 'heading' && !b.lines[0]!.startsWith('# ')));
    expect(first?.kind).toBe('code');
    expect(first!.lines.map((l) => l.split(/\s+/)[0])).toEqual(['```sh', 'scripts/quickstart.sh', 'scripts/test.sh', '```']);
    // CI (.ci/run) runs the README's test command exactly.
    expect(fs.readFileSync(path.join(ROOT, '.ci/run'), 'utf8')).toMatch(/^scripts\/test\.sh$/m);
  });

  it('walk the static-pod, API-pod, checkpoint and node-status flows in docs/architecture.md through source files', () => {
    const bs = ALL.get('docs/architecture.md')!;
    const flows = ['Flow: a static pod', 'Flow: an API pod', 'Flow: a checkpoint request', 'Flow: node status and the Lease'];
    const files: Record<string, number> = {};
    for (const flow of flows) {
      const start = bs.findIndex((b) => b.kind === 'heading' && b.lines[0]!.includes(flow));
      expect(start, flow).toBeGreaterThan(-1);
      const end = bs.findIndex((b, i) => i > start && b.kind === 'heading');
      const named = new Set(bs.slice(start + 1, end === -1 ? undefined : end).flatMap((b) => namingTexts(b).flatMap((t) => pathsIn(t).map((p) => p.path))));
      files[flow] = [...named].filter((p) => p.startsWith('src/') && p.endsWith('.ts')).length;
    }
    // Each flow goes file by file: at least five source files named (their existence is checked above).
    for (const flow of flows) expect(files[flow], flow).toBeGreaterThanOrEqual(5);
  });
});
