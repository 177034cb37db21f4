import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { capLine, createLogger, MAX_LINE } from '../../../src/log.js';

function capture() {
  const lines: string[] = [];
  const dest = new Writable({
    write(chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  return { lines, dest: dest as unknown as import('pino').DestinationStream };
}

describe('logger', () => {
  it('writes one JSON object a line with level name, ISO time, msg and one component', () => {
    const { lines, dest } = capture();
    const log = createLogger({ journal: false, destination: dest });
    log.child({ component: 'daemon' }).child({ component: 'lock' }).info({ lockFile: '/x' }, 'acquired');
    expect(lines).toHaveLength(1);
    const rec = JSON.parse(lines[0]!);
    expect(rec).toMatchObject({ level: 'info', msg: 'acquired', component: 'lock', lockFile: '/x' });
    expect(new Date(rec.time).toISOString()).toBe(rec.time);
    expect(lines[0]!.match(/"component"/g)).toHaveLength(1);
  });

  it('prefixes each line with its syslog priority for the journal', () => {
    const { lines, dest } = capture();
    const log = createLogger({ journal: true, level: 'debug', destination: dest });
    log.error('e');
    log.warn('w');
    log.info('i');
    log.debug('d');
    expect(lines.map((l) => l.slice(0, 3))).toEqual(['<3>', '<4>', '<6>', '<7>']);
    expect(JSON.parse(lines[1]!.slice(3)).msg).toBe('w');
  });

  it('keeps an over-long record one valid JSON line under the cap', () => {
    const { lines, dest } = capture();
    const log = createLogger({ journal: true, destination: dest });
    const field = 'x'.repeat(60_000);
    log.warn({ field }, `unknown field ${field}`);
    expect(lines).toHaveLength(1);
    expect(Buffer.byteLength(lines[0]!)).toBeLessThanOrEqual(MAX_LINE + 3);
    const rec = JSON.parse(lines[0]!.slice(3));
    expect(rec.level).toBe('warn');
    expect(rec.truncated).toBeGreaterThan(120_000);
    expect(rec.msg.startsWith('unknown field xxx')).toBe(true);
  });

  it('capLine leaves short lines alone', () => {
    const l = '{"level":"info","msg":"hi"}\n';
    expect(capLine(l)).toBe(l);
  });
});
