import { describe, expect, it } from 'vitest';
import { replaceSection } from '../../../bench/checkpoint.js';

describe('BENCHMARKS.md section of the checkpoint benchmark', () => {
  const S = '<!-- bench:checkpoint:start -->';
  const E = '<!-- bench:checkpoint:end -->';
  it('creates the file with a title, appends to other sections, and replaces only its own on later runs', () => {
    expect(replaceSection('', 'one')).toBe(`# Benchmarks\n\n${S}\none\n${E}\n`);
    const other = '# Benchmarks\n\n## Pods\nnumbers\n';
    const first = replaceSection(other, 'one');
    expect(first).toBe(`# Benchmarks\n\n## Pods\nnumbers\n\n${S}\none\n${E}\n`);
    const tail = `${first}\n## Later section\nkept\n`;
    expect(replaceSection(tail, 'two')).toBe(`# Benchmarks\n\n## Pods\nnumbers\n\n${S}\ntwo\n${E}\n\n## Later section\nkept\n`);
  });
});
