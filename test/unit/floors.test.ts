/**
 * The floors of docs/architecture.md, held: a file under src/ imports (statically, by
 * `import()`, or for types only) from its own floor or the floors below it, never above.
 * None goes up today (the last, pods/ reading the CRI log decoder from server/, ended when
 * the decoder moved to runtime/cri-log.ts); a new one fails here, naming the two files.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const src = path.resolve(import.meta.dirname, '../../src');

/** Floor by path under src/, top (1) to bottom (12), as docs/architecture.md's table. */
const FLOORS: [RegExp, number][] = [
  [/^main\.ts$/, 1],
  [/^(daemon\.ts|wiring\/|connected\.ts|kubelet-flags\.ts)/, 2],
  [/^controlplane\//, 3],
  [/^server\//, 4],
  [/^checkpoint\//, 5],
  [/^node\//, 6],
  [/^metrics\//, 7],
  [/^pods\//, 8],
  [/^runtime\//, 9],
  [/^config\//, 10],
  [/^(system\/|health\/|events\.ts|node-identity\.ts)/, 11],
  [/^(loop|clock|lifetime|subscribers|log|errors|version)\.ts$/, 12],
];


function floorOf(rel: string): number {
  const f = FLOORS.find(([re]) => re.test(rel));
  if (!f) throw new Error(`src/${rel} is on no floor: add it to docs/architecture.md and to FLOORS here`);
  return f[1];
}

function files(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : []));
}

describe('the floors', () => {
  it('no file under src/ imports from a floor above its own', () => {
    const up: string[] = [];
    let imports = 0;
    for (const file of files(src)) {
      const from = path.relative(src, file);
      const text = fs.readFileSync(file, 'utf8');
      for (const m of text.matchAll(/(?:from|import\()\s*'(\.{1,2}\/[^']+)\.js'/g)) {
        const to = path.relative(src, path.resolve(path.dirname(file), `${m[1]}.ts`));
        if (to.startsWith('..')) continue;
        imports++;
        if (floorOf(to) < floorOf(from)) up.push(`${from} -> ${to}`);
      }
    }
    expect(imports).toBeGreaterThan(300);
    expect(up).toEqual([]);
  });
});
