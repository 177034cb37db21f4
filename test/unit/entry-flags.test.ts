import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot, shebangNodeFlags } from '../helpers/nodelet.js';

// The daemon's V8 flags live in one place, src/main.ts's shebang (the bundle keeps it):
// /usr/local/bin/nodelet, the unit and the quick start run with them, and so do the tests
// and benchmarks that spawn `node <entry>` (test/helpers/nodelet.ts).
describe("the entry point's node flags", () => {
  const flags = shebangNodeFlags(path.join(projectRoot, 'src/main.ts'));

  it('are accepted by this Node without a word on stderr (journald keeps only JSON lines from nodelet)', () => {
    const r = spawnSync(process.execPath, [...flags, '-e', 'process.stdout.write(String(1 + 1))'], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('2');
  });
});
