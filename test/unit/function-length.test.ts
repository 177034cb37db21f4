/**
 * No function in src/ longer than 80 lines (docs/development.md), a nested one counted inside
 * its parent too, as a reader meets it. The functions over it today are listed, each a debt:
 * a new long function fails here naming its file, line and length, and a listed one that got
 * short must leave the list. Parsed with oxc (vitest's bundler ships it as `rolldown/utils`).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseSync, Visitor } from 'rolldown/utils';
import { describe, expect, it } from 'vitest';

const src = path.resolve(import.meta.dirname, '../../src');
const MAX_LINES = 80;

/** `file:name` of the functions over the bound today (their names, not lines: lines move). */
const KNOWN = new Set<string>([]);

function files(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : []));
}

interface Long {
  where: string;
  key: string;
  lines: number;
}

type Node = { start: number; end: number; id?: { name?: string } | null; key?: { name?: string } | null; value?: Node };

function longFunctions(file: string): Long[] {
  const text = fs.readFileSync(file, 'utf8');
  const rel = path.relative(src, file);
  const { program, errors } = parseSync(file, text, { lang: 'ts' });
  if (errors.length) throw new Error(`${rel}: cannot parse: ${errors[0]!.message}`);
  const lineAt = (pos: number) => text.slice(0, pos).split('\n').length;
  const out: Long[] = [];
  const named = new Map<number, string>();
  const note = (n: Node, name: string | undefined) => {
    const lines = lineAt(n.end) - lineAt(n.start) + 1;
    if (lines > MAX_LINES) out.push({ where: `src/${rel}:${lineAt(n.start)}`, key: `${rel}:${name ?? named.get(n.start) ?? '(anonymous)'}`, lines });
  };
  new Visitor({
    // Methods and properties name the function they hold (visited before it).
    MethodDefinition: (n: Node) => void (n.value && named.set(n.value.start, n.key?.name ?? '')),
    PropertyDefinition: (n: Node) => void (n.value && named.set(n.value.start, n.key?.name ?? '')),
    Property: (n: Node) => void (n.value && named.set(n.value.start, n.key?.name ?? '')),
    VariableDeclarator: (n: Node & { init?: Node | null }) => void (n.init && named.set(n.init.start, n.id?.name ?? '')),
    FunctionDeclaration: (n: Node) => note(n, n.id?.name),
    FunctionExpression: (n: Node) => note(n, n.id?.name),
    ArrowFunctionExpression: (n: Node) => note(n, undefined),
  } as never).visit(program);
  return out;
}

describe('function length', () => {
  it(`no function under src/ is longer than ${MAX_LINES} lines but the listed ones`, () => {
    const long = files(src).flatMap(longFunctions);
    const unlisted = long.filter((l) => !KNOWN.has(l.key)).map((l) => `${l.where} ${l.key} (${l.lines} lines)`);
    expect(unlisted).toEqual([]);
    const fixed = [...KNOWN].filter((k) => !long.some((l) => l.key === k));
    expect(fixed, 'listed functions now short enough: take them off KNOWN').toEqual([]);
  });

  it('counts a long function it is shown', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fn-length-'));
    try {
      const f = path.join(dir, 'x.ts');
      fs.writeFileSync(f, `export function long(): number {\n${'  let a = 1;\n'.repeat(85)}  return 1;\n}\nconst short = () => 1;\n`);
      expect(longFunctions(f).map((l) => [l.key.split(':')[1], l.lines])).toEqual([['long', 88]]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
