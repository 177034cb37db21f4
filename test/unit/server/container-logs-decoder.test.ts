/**
 * The CRI log decoder (src/runtime/cri-log.ts): which record times it accepts, and its
 * in-place reading.
 *
 * Which record times it accepts: the kubelet parses a record's time with
 * Go's time.RFC3339Nano and skips a record it cannot parse. The table was written against
 * the regular-expression decoder this one replaced and passed there unchanged, so the
 * acceptance is the same to the byte (including its leniency on the day of the month:
 * `02-31` passes, as it did).
 */
import { describe, expect, it } from 'vitest';
import { CriLogDecoder, CriLogLines, IN_PLACE_FRONT, parseRecordHead } from '../../../src/runtime/cri-log.js';

const ACCEPTED = [
  '2026-11-23T06:00:00Z',
  '2026-11-23T06:00:00.1Z',
  '2026-11-23T06:00:00.12Z',
  '2026-11-23T06:00:00.123Z',
  '2026-11-23T06:00:00.1234Z',
  '2026-11-23T06:00:00.12345Z',
  '2026-11-23T06:00:00.123456Z',
  '2026-11-23T06:00:00.1234567Z',
  '2026-11-23T06:00:00.12345678Z',
  '2026-11-23T06:00:00.123456789Z',
  '2026-11-23T06:00:00.000000000Z',
  '2026-11-23T06:00:00+01:00',
  '2026-11-23T06:00:00-00:00',
  '2026-11-23T06:00:00.5+23:59',
  '2026-11-23T06:00:00.999999999-23:59',
  '0000-01-01T00:00:00Z',
  '9999-12-31T23:59:59.999999999Z',
  '2026-01-31T23:59:59Z',
  '2026-02-31T00:00:00Z',
  '2026-04-31T12:00:00Z',
  '2026-10-01T19:09:09Z',
  '2026-12-10T20:30:40Z',
];

const REFUSED = [
  '',
  'Z',
  '2026-11-23',
  '2026-11-23T06:00Z',
  '2026-11-23T06:00:00',
  '2026-11-23T06:00:00.Z',
  '2026-11-23T06:00:00.1234567890Z',
  '2026-11-23T06:00:00,1Z',
  '2026-11-23T06:00:00.1z',
  '2026-11-23t06:00:00Z',
  '2026-11-23 06:00:00Z',
  '2026-11-23T06:00:00ZZ',
  '2026-11-23T06:00:00.12a4Z',
  '2026-11-23T06:00:00.12:4Z',
  '2026-11-23T06:00:00.12/4Z',
  '2026-00-23T06:00:00Z',
  '2026-13-23T06:00:00Z',
  '2026-11-00T06:00:00Z',
  '2026-11-32T06:00:00Z',
  '2026-11-40T06:00:00Z',
  '2026-11-23T24:00:00Z',
  '2026-11-23T30:00:00Z',
  '2026-11-23T06:60:00Z',
  '2026-11-23T06:00:60Z',
  '2026-11-23T06:00:00+24:00',
  '2026-11-23T06:00:00+01:60',
  '2026-11-23T06:00:00+0100',
  '2026-11-23T06:00:00+1:00',
  '2026-11-23T06:00:00+01:00Z',
  '2026-11-23T06:00:00.1+01',
  '02026-11-23T06:00:00Z',
  '226-11-23T06:00:00Z',
  '2026-1-23T06:00:00Z',
  '2026-11-3T06:00:00Z',
  '2026-11-23T6:00:00Z',
  '2026/11/23T06:00:00Z',
  '2026-11-23T06-00-00Z',
  '+2026-11-23T06:00:00Z',
  '２026-11-23T06:00:00Z',
  '2026-11-23T06:00:00.１Z',
  '2026-11-23T06:00:00\u00e9Z',
  '2026-11-23T06:00:00.1\rZ',
  'x2026-11-23T06:00:00Z',
];

function viaLines(log: Buffer, timestamps: boolean, cut?: number): string {
  const l = new CriLogLines({ timestamps });
  const parts = cut === undefined ? [l.push(log)] : [l.push(log.subarray(0, cut)), l.push(log.subarray(cut))];
  return Buffer.concat([...parts, l.finish()]).toString('utf8');
}

function viaDecoder(log: Buffer): string {
  const d = new CriLogDecoder();
  return [...d.push(log), ...d.finish()].map((p) => `${p.text.toString('utf8')}${p.end ? '\n' : ''}`).join('');
}

describe('record times', () => {
  it.each(ACCEPTED)('accepts %j', (ts) => {
    const h = parseRecordHead(Buffer.from(`${ts} stdout F hi`), true);
    expect(h).toMatchObject({ ts, ms: Date.parse(ts), tag: 'F' });
    // Alone, after a record of another second, of the same second, and with the same second's other layouts.
    const before = ['', '2026-11-23T05:59:59Z stdout F a\n', `${ts.slice(0, 19)}Z stdout F a\n`, `${ts.slice(0, 19)}.123456789Z stdout F a\n`, `${ts.slice(0, 19)}.1+01:00 stderr F a\n`];
    for (const b of before) {
      const log = Buffer.from(`${b}${ts} stdout F hi\n${ts} stderr P p\n${ts} stdout F q\n`);
      const want = `${b ? 'a\n' : ''}hi\npq\n`;
      expect(viaLines(log, false)).toBe(want);
      expect(viaDecoder(log)).toBe(want);
      expect(viaLines(log, true)).toBe(`${b ? `${b.slice(0, b.indexOf(' '))} a\n` : ''}${ts} hi\n${ts} pq\n`);
      for (const cut of [b.length + 5, b.length + ts.length, b.length + ts.length + 3, log.length - 4]) expect(viaLines(log, false, cut)).toBe(want);
    }
  });

  it.each(REFUSED)('refuses %j', (ts) => {
    expect(parseRecordHead(Buffer.from(`${ts} stdout F hi`), true)).toBeUndefined();
    const before = ['', '2026-11-23T06:00:00Z stdout F a\n', '2026-11-23T06:00:00.123456789Z stdout F a\n', '2026-11-23T06:00:00.1+01:00 stdout F a\n'];
    for (const b of before) {
      const log = Buffer.from(`${b}${ts} stdout F hi\n${ts} stdout P p\n2026-11-23T06:00:01Z stdout F ok\n`);
      const want = `${b ? 'a\n' : ''}ok\n`;
      expect(viaLines(log, false)).toBe(want);
      expect(viaDecoder(log)).toBe(want);
      expect(viaLines(log, true)).toBe(`${b ? `${b.slice(0, b.indexOf(' '))} a\n` : ''}2026-11-23T06:00:01Z ok\n`);
      for (const cut of [b.length + 5, b.length + ts.length, log.length - 4]) expect(viaLines(log, false, cut)).toBe(want);
    }
  });

  it('after a record of one layout, a record of the same second with another fraction length, zone or stream is read for itself', () => {
    const s = '2026-11-23T06:00:00';
    const log = [`${s}.123456789Z stdout F a`, `${s}.12345678Z stdout F b`, `${s}.1234567890Z stdout F no`, `${s}Z stdout F c`, `${s}.1Z stderr F d`, `${s}.12+01:00 stdout F e`, `${s}.12+01:0x stdout F no`, `${s}.12 stdout F no`, `${s}.12Z stdout F:x:y f`, `${s}.12Z stdout F`, `${s}.12Z stdout FF no`, `${s}.12Z stdin F no`, ''].join('\n');
    expect(viaLines(Buffer.from(log), false)).toBe('a\nb\nc\nd\ne\nf\n\n');
  });

  it('empty lines are not records, before the first record too (two of them there were once taken for one, garbling the answer)', () => {
    const t = '2026-11-23T06:00:00.123Z';
    for (const b of ['\n\n', '\n\n\n\n', 'junk\n\n\n', '\r\n\n']) {
      const log = Buffer.from(`${b}${t} stdout F hi\n\n\n${t} stdout P p\n\n${t} stdout F q\n`);
      expect(viaLines(log, false)).toBe('hi\npq\n');
      expect(viaDecoder(log)).toBe('hi\npq\n');
      expect(viaLines(log, true)).toBe(`${t} hi\n${t} pq\n`);
      for (let cut = 0; cut <= log.length; cut++) expect(viaLines(log, false, cut)).toBe('hi\npq\n');
    }
    expect(viaLines(Buffer.from('\n\n\n\n'), true)).toBe('');
  });
});

describe('CriLogLines.pushInPlace', () => {
  const T = '2026-11-23T06:00:00.123456789Z';
  const log = Buffer.from([`${T} stdout P a`, `${T} stdout F b\r`, 'junk', `${T} stderr F ${'c'.repeat(300)}`, `${T} stdout F d\r\r`, `${T} stdout P e\r`, `${T} stdout F`, `2026-11-23T06:00:01Z stdout F f`, ''].join('\n'));

  /** `log` cut at `cuts`, each piece read where it stands in a buffer of its own (garbage before it, as a reader's buffers hold). */
  function inPlace(o: { timestamps: boolean; since?: number; limitBytes?: number }, cuts: number[]): string {
    const l = new CriLogLines(o);
    const out: Buffer[] = [];
    let p = 0;
    for (const c of [...cuts, log.length]) {
      const buf = Buffer.alloc(IN_PLACE_FRONT + (c - p) + 3, 0x0a);
      log.copy(buf, IN_PLACE_FRONT, p, c);
      out.push(Buffer.from(l.pushInPlace(buf, IN_PLACE_FRONT, IN_PLACE_FRONT + c - p)));
      p = c;
    }
    return Buffer.concat([...out, l.finish()]).toString('latin1');
  }
  function copied(o: { timestamps: boolean; since?: number; limitBytes?: number }): string {
    const l = new CriLogLines(o);
    return Buffer.concat([l.push(log), l.finish()]).toString('latin1');
  }

  it('gives what push gives, however the bytes are cut, in every mode', () => {
    const modes = [{ timestamps: false }, { timestamps: true }, { timestamps: false, since: Date.parse('2026-11-23T06:00:01Z') }, { timestamps: false, limitBytes: 7 }];
    expect(copied({ timestamps: false })).toBe(`ab\n${'c'.repeat(300)}\nd\r\ne\nf\n`);
    for (const o of modes) for (let c = 0; c <= log.length; c++) expect(inPlace(o, [c])).toBe(copied(o));
    expect(inPlace({ timestamps: true }, [...log.keys()].slice(1))).toBe(copied({ timestamps: true }));
  });

  it('refuses a buffer without room before the bytes', () => {
    const l = new CriLogLines({ timestamps: false });
    expect(() => l.pushInPlace(Buffer.alloc(200), IN_PLACE_FRONT - 1, 150)).toThrow(RangeError);
    expect(() => l.pushInPlace(Buffer.alloc(200), IN_PLACE_FRONT, 201)).toThrow(RangeError);
  });
});
