import { execFileSync } from 'node:child_process';
import { getEventListeners } from 'node:events';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Clock } from '../../../src/clock.js';
import { VirtualClock } from '../../helpers/clock.js';
import { compressLog } from '../../../src/pods/logs/log-rotation.js';
import { logTarget, openLog, parseLogOptions, ROTATION_GRACE_POLLS, streamLogs, type LogOptions } from '../../../src/server/container-logs.js';
import { CriLogDecoder, CriLogLines, LOG_CHUNK, parseRecordHead, tailStart, type LogPiece } from '../../../src/runtime/cri-log.js';


const q = (s: string) => new URLSearchParams(s);
const NOW = Date.parse('2026-11-23T06:00:00Z');

describe('parseLogOptions', () => {
  it('reads the kubelet parameters', () => {
    expect(parseLogOptions(q('timestamps=true&tailLines=5&limitBytes=100&previous=1&follow=false'), NOW)).toEqual({ previous: true, timestamps: true, follow: false, tailLines: 5, limitBytes: 100 });
    expect(parseLogOptions(q('sinceSeconds=60'), NOW).since).toBe(NOW - 60_000);
    expect(parseLogOptions(q('sinceTime=2026-11-23T05:00:00Z'), NOW).since).toBe(Date.parse('2026-11-23T05:00:00Z'));
  });
  it.each([
    ['tailLines=-1', 'query parameter tailLines: "-1" must be an integer >= 0'],
    ['limitBytes=0', 'query parameter limitBytes: "0" must be an integer >= 1'],
    ['sinceSeconds=abc', 'query parameter sinceSeconds: "abc" must be an integer >= 1'],
    ['sinceSeconds=5&sinceTime=2026-11-23T05:00:00Z', 'at most one of sinceTime or sinceSeconds may be specified'],
    ['sinceTime=yesterday', 'query parameter sinceTime: "yesterday" is not an RFC 3339 time'],
    ['follow=maybe', 'query parameter follow: "maybe" is not a boolean'],
  ])('%s -> 400 naming the parameter', (query, message) => {
    expect(() => parseLogOptions(q(query), NOW)).toThrow(message);
  });
});

const pod = (status: Pod['status']): Pod => ({ metadata: { name: 'web', namespace: 'ns', uid: 'u1' }, spec: { containers: [{ name: 'app', image: 'busybox' }] }, status });
const lookup = (p: Pod | undefined) => ({ getPod: () => p, listPods: () => (p ? [p] : []) });

describe('logTarget', () => {
  const running = pod({ containerStatuses: [{ name: 'app', ready: true, restartCount: 2, image: '', imageID: '', containerID: 'containerd://c3', state: { running: {} }, lastState: { terminated: { exitCode: 1, containerID: 'containerd://c2' } } }] });
  it('the current instance is <restartCount>.log, previous the one before', () => {
    expect(logTarget(lookup(running), '/logs', 'ns', 'web', 'app', false).file).toBe('/logs/ns_web_u1/app/2.log');
    expect(logTarget(lookup(running), '/logs', 'ns', 'web', 'app', true).file).toBe('/logs/ns_web_u1/app/1.log');
  });
  it('names what is missing', () => {
    expect(() => logTarget(lookup(undefined), '/logs', 'ns', 'web', 'app', false)).toThrow('pod "web" in namespace "ns" not found');
    expect(() => logTarget(lookup(running), '/logs', 'ns', 'web', 'db', false)).toThrow('container "db" not found in pod "web"');
    const waiting = pod({ containerStatuses: [{ name: 'app', ready: false, restartCount: 0, image: '', imageID: '', state: { waiting: { reason: 'ErrImagePull' } } }] });
    expect(() => logTarget(lookup(waiting), '/logs', 'ns', 'web', 'app', false)).toThrow('container "app" in pod "web" is waiting to start: ErrImagePull');
    expect(() => logTarget(lookup(waiting), '/logs', 'ns', 'web', 'app', true)).toThrow('previous terminated container "app" in pod "web" not found');
  });
});

/** Lines as a reader sees them: the text of each, joined over P records, with the first record's time. */
function render(pieces: LogPiece[]): string {
  return Buffer.concat(pieces.flatMap((p) => [Buffer.from(p.first ? `[${p.lineTs}]` : ''), p.text, Buffer.from(p.end ? '\n' : '')])).toString('utf8');
}

/** Feeds `data` to a fresh decoder in pieces cut at `cuts`, then finishes it. */
function decode(data: string | Buffer, cuts: number[] = []): string {
  const buf = Buffer.isBuffer(data) ? data : Buffer.from(data);
  const d = new CriLogDecoder();
  const out: LogPiece[] = [];
  let at = 0;
  for (const c of [...cuts, buf.length]) {
    out.push(...d.push(buf.subarray(at, c)));
    at = c;
  }
  out.push(...d.finish());
  return render(out);
}

describe('parseRecordHead', () => {
  it('reads time, stream and the first tag; text starts after the third space', () => {
    expect(parseRecordHead(Buffer.from('2026-11-23T06:00:00.123456789Z stdout F hi'), true)).toEqual({ ts: '2026-11-23T06:00:00.123456789Z', ms: Date.parse('2026-11-23T06:00:00.123Z'), tag: 'F', textStart: 40 });
    expect(parseRecordHead(Buffer.from('2026-11-23T06:00:00Z stderr P:x y'), true)).toMatchObject({ tag: 'P', textStart: 32 });
    expect(parseRecordHead(Buffer.from('2026-11-23T06:00:00+01:00 stdout F'), true)).toMatchObject({ tag: 'F', textStart: 34 });
  });
  it('waits for more while undecided, refuses what is not a record', () => {
    expect(parseRecordHead(Buffer.from('2026-11-23T06:00:00Z stdout F'), false)).toBe('more');
    expect(parseRecordHead(Buffer.from('2026-11-23T06:00:00Z'), false)).toBe('more');
    // Hour 24 and a second 60: Date.parse reads the one, Go's time.Parse (the kubelet) neither.
    for (const bad of ['garbage', '2026-11-23T06:00:00Z stdin F x', '2026-11-23T06:00:00Z stdout X x', 'yesterday stdout F x', '2026-13-45T99:00:00Z stdout F x', '2026-11-23T24:00:00Z stdout F x', '2026-11-23T23:59:60Z stdout F x', '2026-11-23T06:00:00+24:00 stdout F x', '2026-11-23T06:00:00.1234567891Z stdout F x', `2026-11-23T06:00:00Z stdout F:${'t'.repeat(65)} x`, '']) {
      expect(parseRecordHead(Buffer.from(bad), true)).toBeUndefined();
    }
    expect(parseRecordHead(Buffer.alloc(200, 'a'), false)).toBeUndefined();
  });
});

const T1 = '2026-11-23T06:00:01Z';
const T2 = '2026-11-23T06:00:02Z';
const T3 = '2026-11-23T06:00:03Z';

describe('CriLogDecoder', () => {
  const sample = [`${T1} stdout P hel`, `${T1} stdout P lo `, `${T2} stdout F world`, 'garbage line', `${T3} stderr F`, `${T3} stderr F ünïcødé`, ''].join('\n');
  const want = `[${T1}]hello world\n[${T3}]\n[${T3}]ünïcødé\n`;

  it('joins P records up to the F, with the first record\'s time; skips what is not CRI; keeps bytes as written', () => {
    expect(decode(sample)).toBe(want);
  });
  it('gives the same lines however the bytes are cut into chunks (every cut point, and byte by byte)', () => {
    const buf = Buffer.from(sample);
    for (let c = 0; c <= buf.length; c++) expect(decode(buf, [c])).toBe(want);
    expect(decode(buf, [...buf.keys()].slice(1))).toBe(want);
  });
  it('CRLF ends a record like LF; a lone CR is text', () => {
    const crlf = `${T1} stdout F one\r\n${T1} stdout P t\r\n${T2} stdout F wo\r\n${T2} stdout F a\rb\r\n`;
    const want2 = `[${T1}]one\n[${T1}]two\n[${T2}]a\rb\n`;
    expect(decode(crlf)).toBe(want2);
    const buf = Buffer.from(crlf);
    for (let c = 0; c <= buf.length; c++) expect(decode(buf, [c])).toBe(want2);
  });
  it('a file without a final newline: the last record and an open line end at the end', () => {
    expect(decode(`${T1} stdout F one\n${T2} stdout F two`)).toBe(`[${T1}]one\n[${T2}]two\n`);
    expect(decode(`${T1} stdout F one\n${T2} stdout P tw`)).toBe(`[${T1}]one\n[${T2}]tw\n`);
    expect(decode(`${T1} stdout F one\n${T2} stdout P two\n`)).toBe(`[${T1}]one\n[${T2}]two\n`);
    expect(decode(`${T1} stdout F`)).toBe(`[${T1}]\n`);
  });
  it('an empty input has no lines', () => {
    expect(decode('')).toBe('');
    expect(decode('\n\n')).toBe('');
  });
  it('holds no record in memory: a 1 MiB record comes out as pieces of the chunks fed', () => {
    const d = new CriLogDecoder();
    const first = d.push(Buffer.from(`${T1} stdout F `));
    const big = Buffer.alloc(1 << 20, 'x');
    const pieces = [...first, ...d.push(big), ...d.push(Buffer.from('\n'))];
    expect(pieces.reduce((n, p) => n + p.text.length, 0)).toBe(1 << 20);
    expect(pieces.filter((p) => p.end)).toHaveLength(1);
    // The big piece is a view of the fed chunk, not a copy.
    expect(pieces.find((p) => p.text.length === 1 << 20)?.text.buffer).toBe(big.buffer);
  });
});

/** Feeds `data` to a fresh CriLogLines in pieces cut at `cuts`, then finishes it: what the client gets. */
function lines(data: string | Buffer, o: ConstructorParameters<typeof CriLogLines>[0], cuts: number[] = []): string {
  const buf = Buffer.isBuffer(data) ? data : Buffer.from(data);
  const l = new CriLogLines(o);
  const out: Buffer[] = [];
  let at = 0;
  for (const c of [...cuts, buf.length]) {
    out.push(l.push(buf.subarray(at, c)));
    at = c;
  }
  out.push(l.finish());
  return Buffer.concat(out).toString('utf8');
}

/** What CriLogDecoder's pieces make for the client (the LineWriter rules): the other reading CriLogLines must agree with. */
function viaDecoder(data: string | Buffer, o: { timestamps: boolean; since?: number; limitBytes?: number }): string {
  const d = new CriLogDecoder();
  const buf = Buffer.isBuffer(data) ? data : Buffer.from(data);
  const parts: Buffer[] = [];
  let skipping = false;
  for (const p of [...d.push(buf), ...d.finish()]) {
    if (p.first) skipping = o.since !== undefined && p.lineMs < o.since;
    if (skipping) continue;
    if (p.first && o.timestamps) parts.push(Buffer.from(`${p.lineTs} `));
    parts.push(p.text);
    if (p.end) parts.push(Buffer.from('\n'));
  }
  const all = Buffer.concat(parts);
  return all.subarray(0, o.limitBytes ?? all.length).toString('utf8');
}

describe('CriLogLines', () => {
  const sample = [`${T1} stdout P hel`, `${T1} stdout P lo `, `${T2} stdout F world`, 'garbage line', `${T3} stderr F`, `${T3} stderr F ünïcødé`, `${T3} stdout F a\rb\r`, `${T3} stdout P x\r`, `${T3} stdout F \r`, `${T3} stdout F y\r\r`, ''].join('\n');

  it('the lines of CriLogDecoder, with and without timestamps, however the bytes are cut (every cut point, and byte by byte)', () => {
    const buf = Buffer.from(sample);
    const plain = 'hello world\n\nünïcødé\na\rb\nx\ny\r\n';
    const stamped = `${T1} hello world\n${T3} \n${T3} ünïcødé\n${T3} a\rb\n${T3} x\n${T3} y\r\n`;
    expect(viaDecoder(buf, { timestamps: false })).toBe(plain);
    expect(viaDecoder(buf, { timestamps: true })).toBe(stamped);
    for (let c = 0; c <= buf.length; c++) {
      expect(lines(buf, { timestamps: false }, [c])).toBe(plain);
      expect(lines(buf, { timestamps: true }, [c])).toBe(stamped);
    }
    expect(lines(buf, { timestamps: true }, [...buf.keys()].slice(1))).toBe(stamped);
  });

  it('since leaves out the lines whose first record is older; limitBytes cuts the answer and then nothing more comes', () => {
    expect(lines(sample, { timestamps: false, since: Date.parse(T2) })).toBe('\nünïcødé\na\rb\nx\ny\r\n');
    expect(lines(sample, { timestamps: true, since: Date.parse(T3) })).toBe(`${T3} \n${T3} ünïcødé\n${T3} a\rb\n${T3} x\n${T3} y\r\n`);
    const l = new CriLogLines({ timestamps: false, limitBytes: 8 });
    expect(l.push(Buffer.from(sample)).toString()).toBe('hello wo');
    expect(l.done).toBe(true);
    expect(l.push(Buffer.from(`${T3} stdout F more\n`)).length).toBe(0);
    expect(l.finish().length).toBe(0);
  });

  it('since compares each line\'s exact time, whatever the order and zone of the lines in a second', () => {
    const T = '2026-11-23T06:00:01';
    const log = [`${T}.400Z stdout F a`, `${T}.100Z stdout F b`, `${T}.500Z stdout F c`, `${T}.999999999Z stdout F d`, '2026-11-23T06:00:02Z stdout F e', '2026-11-23T07:00:01.6+01:00 stdout F f', ''].join('\n');
    const since = (t: string) => lines(log, { timestamps: false, since: Date.parse(t) });
    expect(since(`${T}.300Z`)).toBe('a\nc\nd\ne\nf\n');
    expect(since(`${T}.500Z`)).toBe('c\nd\ne\nf\n');
    expect(since(`${T}Z`)).toBe('a\nb\nc\nd\ne\nf\n');
    expect(since('2026-11-23T06:00:02Z')).toBe('e\n');
  });

  it('a record without a newline at the end of the input ends there, a line left open too', () => {
    expect(lines(`${T1} stdout F one\n${T2} stdout F two`, { timestamps: false })).toBe('one\ntwo\n');
    expect(lines(`${T1} stdout F one\n${T2} stdout P tw`, { timestamps: false }, [20, 40])).toBe('one\ntw\n');
    expect(lines(`${T1} stdout F`, { timestamps: true })).toBe(`${T1} \n`);
    expect(lines('', { timestamps: false })).toBe('');
  });

  it('timestamps: chunks without P records at once, others one by one; a text that looks like a P head changes nothing', () => {
    const recs = [`${T1} stdout F a stdout P b`, `${T2} stderr F c`, `${T2} stdout P d`, `${T3} stdout F e`, `${T3} stdout F f`, ''].join('\n');
    const want = `${T1} a stdout P b\n${T2} c\n${T2} de\n${T3} f\n`;
    const buf = Buffer.from(recs);
    for (let c = 0; c <= buf.length; c++) expect(lines(buf, { timestamps: true }, [c])).toBe(want);
  });

  it('a head longer than HEAD_MAX is not a record, whole in a chunk or cut anywhere; a long text is', () => {
    const long = `${T1} stdout F:${'t'.repeat(200)} x\n${T2} stdout F ok\n`;
    const buf = Buffer.from(long);
    for (const c of [0, 10, 100, 150, 210, 229, buf.length]) expect(lines(buf, { timestamps: false }, [c])).toBe('ok\n');
    const text = 'y'.repeat(3 * LOG_CHUNK);
    const big = Buffer.from(`${T1} stdout F ${text}\r\n${T2} stdout F end\n`);
    expect(lines(big, { timestamps: false }, [LOG_CHUNK, 2 * LOG_CHUNK, 3 * LOG_CHUNK, 3 * LOG_CHUNK + 22])).toBe(`${text}\nend\n`);
  });

  it.each([1, 2, 3, 4])('a generated log (seed %i) cut at random points: every mode equals the reference reading', (seed) => {
    const content = Buffer.from(generatedLog(seed, 400, seed % 2 === 0));
    const ref = referenceLines(content.toString('utf8'));
    let x = seed;
    const cuts = Array.from({ length: 60 }, () => ((x = (x * 1103515245 + 12345) % 2 ** 31), x % content.length)).sort((a, b) => a - b);
    const since = Date.parse(ref[Math.floor(ref.length / 2)]!.ts);
    const plain = ref.map((l) => `${l.text}\n`).join('');
    // Without timestamps or since a chunk's whole records go through one replace; since reads them one by one.
    expect(lines(content, { timestamps: false }, cuts)).toBe(plain);
    expect(lines(content, { timestamps: false, since: 0 }, cuts)).toBe(plain);
    expect(lines(content, { timestamps: true }, cuts)).toBe(ref.map((l) => `${l.ts} ${l.text}\n`).join(''));
    expect(lines(content, { timestamps: false, since }, cuts)).toBe(ref.filter((l) => Date.parse(l.ts) >= since).map((l) => `${l.text}\n`).join(''));
    const limit = Math.floor(Buffer.byteLength(plain) / 3);
    expect(lines(content, { timestamps: false, limitBytes: limit }, cuts)).toBe(Buffer.from(plain).subarray(0, limit).toString('utf8'));
    expect(lines(content, { timestamps: true, since }, cuts)).toBe(viaDecoder(content, { timestamps: true, since }));
  });
});

/** An independent, whole-file reading of a CRI log: the reference the streaming reader must match. */
function referenceLines(content: string): { ts: string; text: string }[] {
  const records = content.split('\n');
  if (records[records.length - 1] === '') records.pop();
  const lines: { ts: string; text: string }[] = [];
  let open: { ts: string; text: string } | undefined;
  for (const raw of records) {
    const r = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (stdout|stderr) ([^ ]*)(?: (.*))?$/s.exec(r);
    const tag = m?.[3]!.split(':')[0];
    if (!m || (tag !== 'F' && tag !== 'P')) continue;
    open ??= { ts: m[1]!, text: '' };
    open.text += m[4] ?? '';
    if (tag === 'F') {
      lines.push(open);
      open = undefined;
    }
  }
  if (open) lines.push(open);
  return lines;
}

/** A deterministic pseudo-random log: long and short records, P runs, CRLF, garbage, spanning many chunks. */
function generatedLog(seed: number, records: number, finalNewline: boolean): string {
  let x = seed;
  const rnd = (n: number) => ((x = (x * 1103515245 + 12345) % 2 ** 31), x % n);
  const out: string[] = [];
  for (let i = 0; i < records; i++) {
    const ts = new Date(Date.UTC(2026, 10, 23, 6, 0, 0) + i * 10).toISOString();
    const kind = rnd(10);
    const len = rnd(4) === 0 ? rnd(20_000) : rnd(80);
    const text = `r${i}-${'abcdefghij'.repeat(Math.ceil(len / 10)).slice(0, len)}`;
    if (kind === 0) out.push(`not a record ${text}`);
    else out.push(`${ts} ${rnd(2) ? 'stdout' : 'stderr'} ${kind < 3 ? 'P' : 'F'} ${text}${kind === 9 ? '\r' : ''}`);
  }
  return out.join('\n') + (finalNewline ? '\n' : '');
}

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-logs-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const opts = (o: Partial<LogOptions> = {}): LogOptions => ({ previous: false, timestamps: false, follow: false, ...o });

/** Runs streamLogs over `content` (a file of its own) and returns what the client got. */
async function readLog(content: string | Buffer, o: Partial<LogOptions>, extra: { running?: () => boolean; signal?: AbortSignal; clock?: Pick<Clock, 'sleep'>; during?: (file: string) => Promise<void> } = {}): Promise<string> {
  const file = path.join(dir, `${Math.random()}.log`);
  await fsp.writeFile(file, content);
  const target = { file, running: extra.running ?? (() => false) };
  const chunks: Buffer[] = [];
  const done = streamLogs(await openLog(target, 'app'), target, opts(o), (b) => void chunks.push(Buffer.from(b)), extra.signal ?? new AbortController().signal, { pollMs: 1, ...(extra.clock ? { clock: extra.clock } : {}) });
  await extra.during?.(file);
  await done;
  await fsp.rm(file);
  return Buffer.concat(chunks).toString('utf8');
}

describe('streamLogs', () => {
  const lines = ['2026-11-23T05:59:00Z stdout F one', '2026-11-23T05:59:30Z stdout P tw', '2026-11-23T05:59:30Z stdout F o', '2026-11-23T05:59:50Z stderr F three', ''].join('\n');
  it('whole lines, with timestamps, tail, since and a byte limit', async () => {
    expect(await readLog(lines, {})).toBe('one\ntwo\nthree\n');
    expect(await readLog(lines, { timestamps: true, tailLines: 2 })).toBe('2026-11-23T05:59:30Z two\n2026-11-23T05:59:50Z three\n');
    expect(await readLog(lines, { tailLines: 0 })).toBe('');
    expect(await readLog(lines, { tailLines: 10 })).toBe('one\ntwo\nthree\n');
    expect(await readLog(lines, { since: Date.parse('2026-11-23T05:59:30Z') })).toBe('two\nthree\n');
    expect(await readLog(lines, { limitBytes: 6 })).toBe('one\ntw');
    expect(await readLog(lines, { timestamps: true, limitBytes: 25 })).toBe('2026-11-23T05:59:00Z one\n');
    expect(await readLog(lines, { tailLines: 1, limitBytes: 3 })).toBe('thr');
  });

  it('an empty file and a file of garbage answer nothing', async () => {
    expect(await readLog('', {})).toBe('');
    expect(await readLog('', { tailLines: 5 })).toBe('');
    expect(await readLog('no\ncri\nhere', { tailLines: 1 })).toBe('');
  });

  it.each([
    ['ending with a newline', 1, true],
    ['without a final newline', 2, false],
    ['another mix', 3, true],
  ])('tailLines over many chunks (%s) equals the last lines of a whole-file reading', async (_name, seed, finalNewline) => {
    const content = generatedLog(seed, 300, finalNewline);
    expect(Buffer.byteLength(content)).toBeGreaterThan(4 * LOG_CHUNK);
    const ref = referenceLines(content);
    expect(await readLog(content, {})).toBe(ref.map((l) => `${l.text}\n`).join(''));
    for (const n of [1, 2, 7, 50, ref.length - 1, ref.length, ref.length + 5]) {
      expect(await readLog(content, { tailLines: n, timestamps: true })).toBe(ref.slice(-n).map((l) => `${l.ts} ${l.text}\n`).join(''));
    }
  });

  it('tailLines where a record straddles a chunk boundary exactly at its head', async () => {
    // Records laid out so a chunk boundary (counted from the end) falls inside the next record's head.
    const last = `${T3} stdout F last\n`;
    for (const shift of [0, 1, 5, 20, 25, 30]) {
      const fillerLen = LOG_CHUNK - Buffer.byteLength(last) - shift - `${T2} stdout F \n`.length;
      const content = `${T1} stdout F first\n${T2} stdout F ${'y'.repeat(fillerLen)}\n${last}`;
      expect(await readLog(content, { tailLines: 1 })).toBe('last\n');
      expect((await readLog(content, { tailLines: 2 })).length).toBe(fillerLen + 1 + 5);
      expect(await readLog(content, { tailLines: 3 })).toMatch(/^first\ny+\nlast\n$/);
    }
  });

  it('tailStart reads only the tail: a file of 64 chunks is read back a chunk or two', async () => {
    const file = path.join(dir, 'big.log');
    const rec = Buffer.from(`${T1} stdout F ${'z'.repeat(100)}\n`);
    await fsp.writeFile(file, Buffer.concat(Array.from({ length: Math.ceil((64 * LOG_CHUNK) / rec.length) }, () => rec)));
    const fh = await fsp.open(file, 'r');
    const size = (await fh.stat()).size;
    let read = 0;
    // tailStart only reads: count the bytes it asks for.
    const counting = { read: (buf: Buffer, off: number, len: number, pos: number) => ((read += len), fh.read(buf, off, len, pos)) } as unknown as fsp.FileHandle;
    expect(await tailStart(counting, size, 3)).toBe(size - 3 * rec.length);
    expect(read).toBeLessThanOrEqual(2 * LOG_CHUNK);
    await fh.close();
  });

  it('follow: one abort listener for its whole life, however many polls; it is removed when the follower ends', async () => {
    const ac = new AbortController();
    // The follower reads the file (real IO), then sleeps on the clock: the test wakes it.
    const clock = new VirtualClock();
    let alive = true;
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const out = await readLog(lines, { follow: true }, {
        running: () => alive,
        signal: ac.signal,
        clock,
        during: async (file) => {
          for (let i = 0; i < 40; i++) {
            await clock.whenSleeping();
            expect(getEventListeners(ac.signal, 'abort')).toHaveLength(1);
            if (i === 10) await fsp.appendFile(file, '2026-11-23T06:00:01Z stdout F four\n');
            if (i === 20) await fsp.appendFile(file, '2026-11-23T06:00:02Z stdout P fi');
            if (i === 30) await fsp.appendFile(file, '\n2026-11-23T06:00:02Z stdout F ve\n');
            await clock.advanceToNext();
          }
          await clock.whenSleeping();
          alive = false;
          await clock.advanceToNext();
        },
      });
      expect(out).toBe('one\ntwo\nthree\nfour\nfive\n');
      expect(clock.sleeps).toHaveLength(41);
      expect(getEventListeners(ac.signal, 'abort')).toHaveLength(0);
      // A client that goes away ends a follower at once, even mid-sleep.
      const ac2 = new AbortController();
      const idle = new VirtualClock();
      const gone = readLog(lines, { follow: true }, { running: () => true, signal: ac2.signal, clock: idle, during: async () => {
          await idle.whenSleeping();
          ac2.abort();
        },
      });
      await expect(gone).resolves.toBe('one\ntwo\nthree\n');
      expect(getEventListeners(ac2.signal, 'abort')).toHaveLength(0);
      expect(warnings).not.toContain('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('waits for the writer: each write is awaited before the next chunk is read', async () => {
    const content = generatedLog(9, 300, true);
    const file = path.join(dir, 'slow.log');
    await fsp.writeFile(file, content);
    const target = { file, running: () => false };
    let pending = 0;
    let maxPending = 0;
    const chunks: Buffer[] = [];
    await streamLogs(await openLog(target, 'app'), target, opts(), async (b) => {
      pending++;
      maxPending = Math.max(maxPending, pending);
      chunks.push(Buffer.from(b));
      await Promise.resolve();
      pending--;
    }, new AbortController().signal);
    expect(maxPending).toBe(1);
    expect(Buffer.concat(chunks).toString()).toBe(referenceLines(content).map((l) => `${l.text}\n`).join(''));
  });
});

describe('openLog', () => {
  it('a missing file is a 404 naming the container', async () => {
    await expect(openLog({ file: path.join(dir, 'none/0.log'), running: () => false }, 'app')).rejects.toThrow(expect.objectContaining({ code: 'NOT_FOUND', message: 'container "app" has no log file 0.log' }));
  });
  it('refuses a FIFO at once (never waits for a writer), a symbolic link, a directory and a device', async () => {
    const fifo = path.join(dir, 'fifo.log');
    execFileSync('mkfifo', [fifo]);
    await expect(openLog({ file: fifo, running: () => true }, 'app')).rejects.toThrow(expect.objectContaining({ code: 'INTERNAL', message: 'log file fifo.log of container "app" is a FIFO, not a regular file: refused without reading it' }));
    const real = path.join(dir, 'real.log');
    fs.writeFileSync(real, `${T1} stdout F secret\n`);
    const link = path.join(dir, 'link.log');
    fs.symlinkSync(real, link);
    await expect(openLog({ file: link, running: () => true }, 'app')).rejects.toThrow('log file link.log of container "app" is a symbolic link, not a regular file');
    await expect(openLog({ file: dir, running: () => true }, 'app')).rejects.toThrow('is a directory, expected a file');
    await expect(openLog({ file: '/dev/null', running: () => true }, 'app')).rejects.toThrow('log file null of container "app" is a character device, not a regular file');
  });
});

describe('follow across a rotation', () => {
  const rec = (i: number) => `2026-11-23T06:00:${String(i % 60).padStart(2, '0')}Z stdout F n${i}\n`;
  const recs = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, k) => rec(from + k)).join('');
  const want = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, k) => `n${from + k}\n`).join('');

  /** A log `0.log` holding `content`, in a directory of its own (its rotated files go beside it). */
  async function newLog(content: string): Promise<string> {
    const file = path.join(await fsp.mkdtemp(path.join(dir, 'rot-')), '0.log');
    await fsp.writeFile(file, content);
    return file;
  }

  /**
   * The runtime's rotation: `file` renamed to `<file>.<stamp>`, where its writer still appends
   * `late` until it reopens `file` (created with `reopened`, when given).
   */
  async function rotate(file: string, stamp: string, o: { late?: string; reopened?: string }): Promise<void> {
    await fsp.rename(file, `${file}.${stamp}`);
    if (o.late !== undefined) await fsp.appendFile(`${file}.${stamp}`, o.late);
    if (o.reopened !== undefined) await fsp.writeFile(file, o.reopened);
  }

  /**
   * Follows `file` from its start; `script(step, sofar)` runs at each poll (the clock's sleep),
   * with what the client got so far, until it returns false.
   */
  async function follow(file: string, script: (step: number, sofar: string) => Promise<boolean>): Promise<string> {
    const clock = new VirtualClock();
    let alive = true;
    const target = { file, running: () => alive };
    const chunks: Buffer[] = [];
    const done = streamLogs(await openLog(target, 'app'), target, opts({ follow: true }), (b) => void chunks.push(Buffer.from(b)), new AbortController().signal, { pollMs: 250, clock });
    for (let step = 0; ; step++) {
      await clock.whenSleeping();
      if (!(await script(step, Buffer.concat(chunks).toString('utf8')))) break;
      await clock.advanceToNext();
    }
    alive = false;
    await clock.advanceToNext();
    await done;
    return Buffer.concat(chunks).toString('utf8');
  }

  it('finishes the renamed file (late writes included), then reads the new one from its start: no line lost or repeated', async () => {
    const file = await newLog(recs(1, 3));
    const out = await follow(file, async (step) => {
      if (step === 1) await fsp.appendFile(file, recs(4, 5));
      // The rotation: renamed, the runtime's writer still appends to the old file; it reopens only at the next poll.
      if (step === 2) await rotate(file, '20261123-060000', { late: recs(6, 7) });
      if (step === 3) await fsp.writeFile(file, ''); // reopened, nothing written yet
      if (step === 4) {
        await fsp.appendFile(file, recs(9, 10));
        // The old writer flushes its last line just after the new one wrote its first (the
        // runtime swaps its writers, then closes the old one): the follower waited a poll for it.
        await fsp.appendFile(`${file}.20261123-060000`, rec(8));
      }
      if (step === 6) await fsp.appendFile(file, recs(11, 12));
      return step < 8;
    });
    expect(out).toBe(want(1, 12));
  });

  it('a follower two rotations behind reads the file rotated in between too', async () => {
    const file = await newLog(recs(1, 2));
    const out = await follow(file, async (step) => {
      if (step === 1) {
        // Two rotations within one poll (a follower stalled by a slow client).
        await rotate(file, '20261123-060000', { late: rec(3), reopened: recs(4, 5) });
        await rotate(file, '20261123-060010', { reopened: recs(6, 7) });
        // An older rotated file of the same log is not re-read.
        await fsp.writeFile(`${file}.20261123-050000`, recs(90, 91));
        await fsp.utimes(`${file}.20261123-050000`, new Date(2020, 0, 1), new Date(2020, 0, 1));
      }
      if (step === 4) await fsp.appendFile(file, rec(8));
      return step < 6;
    });
    expect(out).toBe(want(1, 8));
  });

  it('a container that stops right after a rotation: the new file is read even if empty, then the follower ends', async () => {
    const file = await newLog(recs(1, 2));
    const out = await follow(file, async (step) => {
      if (step === 1) await rotate(file, '20261123-060000', { late: rec(3), reopened: '' });
      return step < 1;
    });
    expect(out).toBe(want(1, 3));
  });
  /** The files under `dir` this process holds open now (`/proc/self/fd`), a removed one ending ` (deleted)`. */
  function openFiles(under: string): string[] {
    const out: string[] = [];
    for (const fd of fs.readdirSync('/proc/self/fd')) {
      const to = (() => {
        try {
          return fs.readlinkSync(`/proc/self/fd/${fd}`);
        } catch {
          return '';
        }
      })();
      if (to.startsWith(under + path.sep)) out.push(path.basename(to));
    }
    return out.sort();
  }

  /** `n` records of ~1 KiB each from `from`, then `DONE`: what the container wrote last before it went quiet. */
  const bulk = (from: number, n: number) => Array.from({ length: n }, (_, k) => `2026-11-23T06:01:00.${String(from + k).padStart(9, '0')}Z stdout F b${from + k} ${'x'.repeat(1000)}\n`).join('');
  const bulkWant = (from: number, n: number) => Array.from({ length: n }, (_, k) => `b${from + k} ${'x'.repeat(1000)}\n`).join('');
  const DONE = '2026-11-23T06:02:00Z stdout F DONE\n';

  it('the issue: a follower whose file was renamed reads it to DONE and moves to the new empty live file within a second, with no further write, closing the old one', async () => {
    const file = await newLog(recs(1, 2));
    const stamp = '20261123-060100';
    let rotatedAt = -1;
    let closedAt = -1;
    let doneAt = -1;
    const out = await follow(file, async (step, sofar) => {
      if (step === 1) {
        // The writer appends 2 MiB and DONE to the renamed file, then the runtime opens an empty live file; nothing more is written.
        await rotate(file, stamp, { late: bulk(0, 2000) + DONE, reopened: '' });
        rotatedAt = step;
        expect(openFiles(path.dirname(file))).toEqual(['0.log.' + stamp]);
      }
      if (rotatedAt >= 0 && doneAt < 0 && sofar.endsWith('DONE\n')) doneAt = step;
      if (rotatedAt >= 0 && closedAt < 0 && !openFiles(path.dirname(file)).includes('0.log.' + stamp)) {
        closedAt = step;
        // It holds the live file now, and reads what comes next from its start.
        expect(openFiles(path.dirname(file))).toEqual(['0.log']);
        await fsp.appendFile(file, rec(3));
      }
      return step < 12;
    });
    expect(out).toBe(want(1, 2) + bulkWant(0, 2000) + 'DONE\nn3\n');
    // Polls are 250 ms apart: DONE at the first poll after the rotation, the old file closed at the second (500 ms).
    expect((doneAt - rotatedAt) * 250).toBeLessThanOrEqual(250);
    expect(closedAt - rotatedAt).toBe(ROTATION_GRACE_POLLS);
    expect((closedAt - rotatedAt) * 250).toBeLessThanOrEqual(500);
    expect(openFiles(path.dirname(file))).toEqual([]);
  });

  /**
   * A follower held back by a slow client (its writes wait on `gate`) while `rotations` runs;
   * then the client reads freely. Returns the output and the polls it took, after the client
   * came back, to deliver DONE and to leave every old file.
   */
  async function behind(file: string, rotations: () => Promise<void>, after: (sofar: string) => Promise<void> = async () => {}): Promise<{ out: string; donePolls: number; closedPolls: number }> {
    const clock = new VirtualClock();
    let alive = true;
    const target = { file, running: () => alive };
    const chunks: Buffer[] = [];
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let blocked!: () => void;
    const firstWrite = new Promise<void>((resolve) => (blocked = resolve));
    const done = streamLogs(await openLog(target, 'app'), target, opts({ follow: true }), async (b) => {
      chunks.push(Buffer.from(b));
      blocked();
      await gate;
    }, new AbortController().signal, { pollMs: 250, clock });
    await firstWrite; // the follower is stuck on its first write
    await rotations();
    open();
    const sofar = () => Buffer.concat(chunks).toString('utf8');
    let donePolls = -1;
    let closedPolls = -1;
    for (let poll = 0; poll < 12; poll++) {
      await clock.whenSleeping();
      if (donePolls < 0 && sofar().endsWith('DONE\n')) donePolls = poll;
      if (closedPolls < 0 && openFiles(path.dirname(file)).every((n) => n === '0.log')) closedPolls = poll;
      await clock.advanceToNext();
    }
    await clock.whenSleeping();
    await after(sofar());
    await clock.advanceToNext();
    await clock.whenSleeping();
    alive = false;
    await clock.advanceToNext();
    await done;
    expect(openFiles(path.dirname(file))).toEqual([]);
    return { out: sofar(), donePolls, closedPolls };
  }

  it('the issue, two rotations behind: its file compressed and removed, the newer rotated file (ending in DONE) is read, then the empty live file, without a write', async () => {
    const file = await newLog(recs(1, 2));
    const r = await behind(
      file,
      async () => {
        // While the client is stuck: 1 MiB more, rotated; a new file of 2 MiB and DONE; the
        // next turn compresses the first rotated file (removing it: the follower holds it) and
        // rotates the second; the live file stays empty.
        await fsp.appendFile(file, bulk(0, 1000));
        await rotate(file, '20261123-060100', { reopened: bulk(1000, 2000) + DONE });
        await compressLog(`${file}.20261123-060100`);
        await rotate(file, '20261123-060110', { reopened: '' });
        expect(fs.readdirSync(path.dirname(file)).sort()).toEqual(['0.log', '0.log.20261123-060100.gz', '0.log.20261123-060110']);
        expect(openFiles(path.dirname(file))).toEqual(['0.log.20261123-060100 (deleted)']);
      },
      async () => void (await fsp.appendFile(file, rec(3))),
    );
    expect(r.out).toBe(want(1, 2) + bulkWant(0, 3000) + 'DONE\nn3\n');
    // DONE before the first poll once the client reads again; both old files left within the grace polls.
    expect(r.donePolls).toBe(0);
    expect(r.closedPolls).toBeGreaterThanOrEqual(0);
    expect(r.closedPolls).toBeLessThanOrEqual(ROTATION_GRACE_POLLS);
  });

  it('three rotations behind: a newer file already gzipped is read decompressed, in order; older files and planted non-files are not read', async () => {
    const file = await newLog(recs(1, 2));
    const dirOf = path.dirname(file);
    const r = await behind(file, async () => {
      // Older rotated files of the same log (before the follower's): never re-read.
      await fsp.writeFile(`${file}.20261123-050000`, recs(90, 91));
      await fsp.writeFile(`${file}.20261123-050010.gz`, '');
      await fsp.appendFile(file, bulk(0, 300));
      await rotate(file, '20261123-060100', { reopened: bulk(300, 300) });
      await compressLog(`${file}.20261123-060100`);
      await rotate(file, '20261123-060110', { reopened: bulk(600, 300) + DONE });
      await compressLog(`${file}.20261123-060110`);
      await rotate(file, '20261123-060120', { reopened: '' });
      // A FIFO and a link named like newer rotated files: refused without blocking, skipped.
      execFileSync('mkfifo', [`${file}.20261123-060105`]);
      fs.symlinkSync('/etc/hostname', `${file}.20261123-060106`);
      fs.symlinkSync('/etc/hostname', `${file}.20261123-060107.gz`);
      expect(fs.readdirSync(dirOf).filter((n) => n.endsWith('.gz')).sort()).toEqual(['0.log.20261123-050010.gz', '0.log.20261123-060100.gz', '0.log.20261123-060107.gz', '0.log.20261123-060110.gz']);
    });
    expect(r.out).toBe(want(1, 2) + bulkWant(0, 900) + 'DONE\n');
    expect(r.donePolls).toBe(0);
    expect(r.closedPolls).toBeLessThanOrEqual(ROTATION_GRACE_POLLS);
  });

  it('a rotation the runtime refused (renamed back) is not taken for one: nothing is read twice', async () => {
    const file = await newLog(recs(1, 2));
    const out = await follow(file, async (step) => {
      if (step === 1) await fsp.rename(file, `${file}.20261123-060000`); // renamed; the reopen fails
      if (step === 3) await fsp.rename(`${file}.20261123-060000`, file); // renamed back
      if (step === 4) await fsp.appendFile(file, recs(3, 4));
      if (step === 5) await rotate(file, '20261123-060010', { late: rec(5), reopened: '' });
      if (step === 10) await fsp.appendFile(file, rec(6));
      return step < 12;
    });
    expect(out).toBe(want(1, 6));
  });
});
