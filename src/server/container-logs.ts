/**
 * `GET /containerLogs/<namespace>/<pod>/<container>`: what `kubectl logs` reads from the
 * node agent, from the CRI log files the runtime writes under `podLogsDir`
 * (`<ns>_<pod>_<uid>/<container>/<restartCount>.log`, lines `<RFC3339Nano> <stream> <P|F> <text>`).
 *
 * Query parameters, as the kubelet's: `previous` (the instance before the current one),
 * `timestamps` (each line prefixed with its RFC 3339 time), `tailLines`, `limitBytes`,
 * `sinceSeconds` or `sinceTime` (not both), `follow` (keeps streaming what the container
 * writes until it stops or the client goes, across log rotations: see streamLogs). Partial
 * (`P`) lines are joined with the next until an `F`. A bad parameter is a 400 naming it; an
 * unknown pod or container a 404; a container that has no log yet (waiting), or no previous
 * instance, a 400 saying so.
 *
 * Log files can be huge and are written by whatever runs in the container: they are read
 * as streams, LOG_CHUNK bytes at a time (backwards for `tailLines`), never whole, with no
 * limit on record or line length, and only a regular file is opened.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import { createGunzip } from 'node:zlib';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { realClock, type Clock } from '../clock.js';
import { isNodeletError, NodeletError } from '../errors.js';
import { openRegularFile, readFailure } from '../system/safe-file.js';
import type { PodLookup } from '../pods/lookup.js';

export interface LogOptions {
  previous: boolean;
  timestamps: boolean;
  follow: boolean;
  tailLines?: number;
  limitBytes?: number;
  /** ms since the epoch: only lines at or after it. */
  since?: number;
}

function bool(q: URLSearchParams, name: string): boolean {
  const v = q.get(name);
  if (v === null || v === '' || v === 'false' || v === '0') return false;
  if (v === 'true' || v === '1') return true;
  throw new NodeletError('INVALID_ARGUMENT', `query parameter ${name}: ${JSON.stringify(v)} is not a boolean`, { param: name });
}

function int(q: URLSearchParams, name: string, min: number): number | undefined {
  const v = q.get(name);
  if (v === null) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || !Number.isSafeInteger(Number(v))) {
    throw new NodeletError('INVALID_ARGUMENT', `query parameter ${name}: ${JSON.stringify(v)} must be an integer >= ${min}`, { param: name });
  }
  return Number(v);
}

export function parseLogOptions(q: URLSearchParams, now: number): LogOptions {
  const sinceSeconds = int(q, 'sinceSeconds', 1);
  const sinceTime = q.get('sinceTime');
  if (sinceSeconds !== undefined && sinceTime !== null) throw new NodeletError('INVALID_ARGUMENT', 'at most one of sinceTime or sinceSeconds may be specified', { param: 'sinceTime' });
  let since: number | undefined;
  if (sinceSeconds !== undefined) since = now - sinceSeconds * 1000;
  if (sinceTime !== null) {
    since = Date.parse(sinceTime);
    if (!/^\d{4}-\d{2}-\d{2}T/.test(sinceTime) || Number.isNaN(since)) throw new NodeletError('INVALID_ARGUMENT', `query parameter sinceTime: ${JSON.stringify(sinceTime)} is not an RFC 3339 time`, { param: 'sinceTime' });
  }
  const tailLines = int(q, 'tailLines', 0);
  const limitBytes = int(q, 'limitBytes', 1);
  return {
    previous: bool(q, 'previous'),
    timestamps: bool(q, 'timestamps'),
    follow: bool(q, 'follow'),
    ...(tailLines !== undefined ? { tailLines } : {}),
    ...(limitBytes !== undefined ? { limitBytes } : {}),
    ...(since !== undefined ? { since } : {}),
  };
}

/** Bytes read at a time, forwards and backwards: what one reader holds of a log file. */
export const LOG_CHUNK = 64 * 1024;
/** Longest `<time> <stream> <tags> ` head of a CRI record; a longer one is not a record. */
const HEAD_MAX = 128;
const NL = 0x0a;
const CR = 0x0d;
const SP = 0x20;
const EMPTY: Buffer = Buffer.alloc(0);
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

interface RecordHead {
  ts: string;
  ms: number;
  /** F ends a line; P is a part of one. */
  tag: 'F' | 'P';
  /** Offset of the text within the record. */
  textStart: number;
}

/** A record without its `\r` line end. */
function stripCR(b: Buffer): Buffer {
  return b.length > 0 && b[b.length - 1] === CR ? b.subarray(0, -1) : b;
}

/**
 * The head of a CRI record (`<RFC3339Nano> <stdout|stderr> <tags>[ <text>]`, tags split on
 * `:`, the first P or F) from its first bytes. `whole`: `b` is the entire record (no more
 * bytes will come), so a head without text is complete. Returns 'more' while undecided,
 * undefined for what is not a record (skipped, as the kubelet does).
 */
export function parseRecordHead(b: Buffer, whole: boolean): RecordHead | 'more' | undefined {
  const more = () => (whole || b.length >= HEAD_MAX ? undefined : 'more');
  const sp1 = b.indexOf(SP);
  if (sp1 < 0) return more();
  const sp2 = b.indexOf(SP, sp1 + 1);
  if (sp2 < 0) return more();
  let sp3 = b.indexOf(SP, sp2 + 1);
  if (sp3 < 0) {
    if (!whole) return more();
    sp3 = b.length;
  }
  if (sp3 > HEAD_MAX) return undefined;
  const ts = b.toString('latin1', 0, sp1);
  const stream = b.toString('latin1', sp1 + 1, sp2);
  const tag = b.toString('latin1', sp2 + 1, sp3).split(':')[0];
  if ((stream !== 'stdout' && stream !== 'stderr') || (tag !== 'F' && tag !== 'P') || !RFC3339.test(ts)) return undefined;
  const ms = Date.parse(ts);
  if (Number.isNaN(ms)) return undefined;
  return { ts, ms, tag, textStart: Math.min(sp3 + 1, b.length) };
}

/** A piece of an output line: a line is one or more pieces, the last with `end`. */
export interface LogPiece {
  /** Time of the line's first record, as written and in ms (what `timestamps` prints and `since` compares). */
  lineTs: string;
  lineMs: number;
  /** First piece of its line. */
  first: boolean;
  /** Text bytes (a view into the chunk read). */
  text: Buffer;
  /** Ends the line: a newline follows. */
  end: boolean;
}

/**
 * Turns CRI log bytes into the pieces of whole lines, streaming: memory is one record head
 * (at most 128 bytes), never a record or a line, however long the runtime let them grow.
 * P records are joined with the following ones up to the F that ends the line. A record's
 * line end is `\n`; a `\r\n` ends it too (the `\r` is not text). What is not a CRI record
 * is skipped up to the next newline.
 */
export class CriLogDecoder {
  #state: 'head' | 'text' | 'skip' = 'head';
  #head: Buffer = EMPTY;
  #rec: RecordHead | undefined;
  /** The open line: its first record's time, and whether a piece of it went out. */
  #line: { ts: string; ms: number } | undefined;
  #lineStarted = false;
  /** A `\r` ended the last chunk inside a text: text unless a `\n` comes next. */
  #pendingCR = false;

  /** Feeds the next bytes; returns the pieces they complete. */
  push(chunk: Buffer): LogPiece[] {
    const out: LogPiece[] = [];
    let i = 0;
    while (i < chunk.length) {
      if (this.#state === 'skip') {
        const nl = chunk.indexOf(NL, i);
        if (nl < 0) return out;
        i = nl + 1;
        this.#state = 'head';
        continue;
      }
      if (this.#state === 'head') {
        const nl = chunk.indexOf(NL, i);
        const stop = nl < 0 ? chunk.length : nl;
        // At most HEAD_MAX + 1 bytes are kept: enough to tell a head from what is not one.
        const take = Math.min(stop - i, HEAD_MAX + 1 - this.#head.length);
        this.#head = this.#head.length === 0 ? chunk.subarray(i, i + take) : Buffer.concat([this.#head, chunk.subarray(i, i + take)]);
        if (nl >= 0 && i + take === nl) {
          // The whole record is in #head.
          const whole = stripCR(this.#head);
          this.#head = EMPTY;
          i = nl + 1;
          const h = parseRecordHead(whole, true);
          if (h && h !== 'more') this.#piece(out, h, whole.subarray(h.textStart), h.tag === 'F');
          continue;
        }
        i += take;
        const h = parseRecordHead(this.#head, false);
        // 'more' only when the chunk ran out first (a full HEAD_MAX decides): wait for the next.
        if (h === 'more') {
          // #head may be a view into the caller's chunk: keep a copy of these few bytes.
          this.#head = Buffer.from(this.#head);
          return out;
        }
        const text = h ? this.#head.subarray(h.textStart) : EMPTY;
        this.#head = EMPTY;
        if (!h) {
          this.#state = 'skip';
          continue;
        }
        this.#rec = h;
        this.#state = 'text';
        this.#textPiece(out, text, false);
        continue;
      }
      // text
      const nl = chunk.indexOf(NL, i);
      if (nl < 0) {
        this.#textPiece(out, chunk.subarray(i), false);
        return out;
      }
      this.#textPiece(out, chunk.subarray(i, nl), true);
      i = nl + 1;
      this.#state = 'head';
      this.#rec = undefined;
    }
    return out;
  }

  /** The end of the input (the file, when nothing more will come): a record or line left open ends there. */
  finish(): LogPiece[] {
    const out: LogPiece[] = [];
    if (this.#state === 'head' && this.#head.length > 0) {
      const whole = stripCR(this.#head);
      const h = parseRecordHead(whole, true);
      if (h && h !== 'more') this.#piece(out, h, whole.subarray(h.textStart), h.tag === 'F');
    }
    if (this.#line) this.#piece(out, this.#line, EMPTY, true);
    this.#state = 'head';
    this.#head = EMPTY;
    this.#rec = undefined;
    this.#pendingCR = false;
    return out;
  }

  /** Text of the current record; `last`: the record's newline follows it. */
  #textPiece(out: LogPiece[], text: Buffer, last: boolean): void {
    const rec = this.#rec!;
    if (this.#pendingCR) {
      this.#pendingCR = false;
      if (!(last && text.length === 0)) this.#piece(out, rec, Buffer.from([CR]), false);
    }
    if (last && text.length > 0 && text[text.length - 1] === CR) text = text.subarray(0, -1);
    else if (!last && text.length > 0 && text[text.length - 1] === CR) {
      text = text.subarray(0, -1);
      this.#pendingCR = true;
    }
    if (text.length > 0 || last) this.#piece(out, rec, text, last && rec.tag === 'F');
  }

  #piece(out: LogPiece[], rec: { ts: string; ms: number }, text: Buffer, end: boolean): void {
    this.#line ??= { ts: rec.ts, ms: rec.ms };
    out.push({ lineTs: this.#line.ts, lineMs: this.#line.ms, first: !this.#lineStarted, text, end });
    this.#lineStarted = !end;
    if (end) this.#line = undefined;
  }
}

/**
 * Where the last `lines` whole lines of the first `size` bytes of a CRI log begin, reading
 * backwards LOG_CHUNK bytes at a time until enough F records are found: what `tailLines`
 * reads is the tail, whatever the file's size. A line is the records up to and including
 * an F; a line still open at the end (P records, no F yet) counts as one.
 */
export async function tailStart(fh: fsp.FileHandle, size: number, lines: number): Promise<number> {
  if (lines <= 0) return size;
  let groups = 0;
  /** End (exclusive) of the record being delimited; the first bytes after the current chunk. */
  let recEnd = size;
  let after: Buffer = EMPTY;
  const classify = (head: Buffer): 'F' | 'P' | undefined => {
    const whole = head.length > 0 && head[head.length - 1] === NL ? head.subarray(0, head[head.length - 2] === CR ? -2 : -1) : head;
    const h = parseRecordHead(whole, true);
    return h && h !== 'more' ? h.tag : undefined;
  };
  // Returns the offset to start at when this record decides it, else undefined.
  const record = (start: number, head: Buffer): number | undefined => {
    if (start >= recEnd) return undefined;
    const tag = classify(head.subarray(0, Math.min(HEAD_MAX + 2, recEnd - start)));
    if (tag === 'F') {
      if (groups === lines) return recEnd;
      groups++;
    } else if (tag === 'P' && groups === 0) groups = 1;
    return undefined;
  };
  for (let end = size; end > 0; ) {
    const start = Math.max(0, end - LOG_CHUNK);
    const chunk = Buffer.allocUnsafe(end - start);
    const { bytesRead } = await fh.read(chunk, 0, chunk.length, start);
    if (bytesRead !== chunk.length) return 0; // the file shrank under us: read it all
    const tail = Buffer.concat([chunk, after]);
    for (let nl = chunk.lastIndexOf(NL); nl >= 0; nl = nl > 0 ? chunk.lastIndexOf(NL, nl - 1) : -1) {
      const at = record(start + nl + 1, tail.subarray(nl + 1, nl + 1 + HEAD_MAX + 2));
      if (at !== undefined) return at;
      recEnd = start + nl + 1;
    }
    if (start === 0) {
      const at = record(0, tail.subarray(0, HEAD_MAX + 2));
      return at ?? 0;
    }
    after = tail.subarray(0, HEAD_MAX + 2);
    end = start;
  }
  return 0;
}

export interface LogTarget {
  file: string;
  /** The container still runs this instance (follow keeps reading). */
  running: () => boolean;
}

/** Finds the log file of a container instance; the errors name what is missing. */
export function logTarget(pods: PodLookup, podLogsDir: string, namespace: string, name: string, container: string, previous: boolean): LogTarget {
  const pod = pods.getPod(namespace, name);
  if (!pod) throw new NodeletError('NOT_FOUND', `pod "${name}" in namespace "${namespace}" not found`, { param: 'pod' });
  const statuses = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
  const known = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].some((c) => c.name === container);
  const st = statuses.find((s) => s.name === container);
  if (!known) throw new NodeletError('NOT_FOUND', `container "${container}" not found in pod "${name}"`, { param: 'container' });
  const restarts = st?.restartCount ?? 0;
  const dir = path.join(podLogsDir, `${namespace}_${name}_${pod.metadata?.uid}`, container);
  if (previous) {
    if (restarts === 0 || !st?.lastState?.terminated) throw new NodeletError('INVALID_ARGUMENT', `previous terminated container "${container}" in pod "${name}" not found`, { param: 'previous' });
    return { file: path.join(dir, `${restarts - 1}.log`), running: () => false };
  }
  if (!st?.containerID) {
    const why = st?.state?.waiting?.reason;
    throw new NodeletError('INVALID_ARGUMENT', `container "${container}" in pod "${name}" is waiting to start${why ? `: ${why}` : ''}`, { param: 'container' });
  }
  const id = st.containerID;
  const stillRunning = (p: Pod | undefined) => {
    const s = [...(p?.status?.initContainerStatuses ?? []), ...(p?.status?.containerStatuses ?? [])].find((x) => x.name === container);
    return s?.containerID === id && !!s.state?.running;
  };
  return { file: path.join(dir, `${restarts}.log`), running: () => stillRunning(pods.getPod(namespace, name)) };
}

/**
 * Opens the target's log file. A missing one is a 404 naming the container. Only a regular
 * file is read: anything else planted at the path (a FIFO, a device, a symbolic link) is
 * refused at once, before or right after the open, which is non-blocking (opening a FIFO
 * never waits for a writer) and does not follow a link swapped in meanwhile.
 */
export async function openLog(target: LogTarget, container: string): Promise<fsp.FileHandle> {
  const name = path.basename(target.file);
  try {
    return (await openRegularFile(target.file, { what: 'log file', noFollow: true })).handle;
  } catch (err) {
    if (isNodeletError(err, 'NOT_FOUND')) throw new NodeletError('NOT_FOUND', `container "${container}" has no log file ${name}`, { param: 'container' });
    throw new NodeletError('INTERNAL', `log file ${name} of container "${container}" ${readFailure(err)}`, { param: 'container' });
  }
}

/** Writes the pieces of lines to the client: timestamps, the `since` filter, the byte budget. */
class LineWriter {
  #budget: number;
  /** The current line is filtered out by `since`. */
  #skipping = false;

  constructor(
    private readonly o: LogOptions,
    private readonly write: (chunk: Buffer) => void | Promise<void>,
  ) {
    this.#budget = o.limitBytes ?? Infinity;
  }

  /**
   * Writes the pieces, as one write (what one chunk read makes: a few hundred lines of a
   * 64 KiB chunk are one write, not three each); false once limitBytes is spent (the answer
   * is complete).
   */
  async pieces(pieces: readonly LogPiece[]): Promise<boolean> {
    const parts: Buffer[] = [];
    let more = true;
    for (const p of pieces) {
      if (p.first) this.#skipping = this.o.since !== undefined && p.lineMs < this.o.since;
      if (this.#skipping) continue;
      if (p.first && this.o.timestamps && !(more = this.#take(parts, Buffer.from(`${p.lineTs} `)))) break;
      if (p.text.length > 0 && !(more = this.#take(parts, p.text))) break;
      if (p.end && !(more = this.#take(parts, NEWLINE))) break;
    }
    if (parts.length > 0) await this.write(parts.length === 1 ? parts[0]! : Buffer.concat(parts));
    return more;
  }

  #take(parts: Buffer[], b: Buffer): boolean {
    const part = b.length > this.#budget ? b.subarray(0, this.#budget) : b;
    this.#budget -= part.length;
    if (part.length > 0) parts.push(part);
    return this.#budget > 0;
  }
}

const NEWLINE = Buffer.from('\n');

/** Reads [from, to) of the file forwards, LOG_CHUNK bytes at a time, through the decoder; false when the writer is done or the client went. */
async function readForward(fh: fsp.FileHandle, from: number, to: number, dec: CriLogDecoder, out: LineWriter, signal: AbortSignal): Promise<{ pos: number; more: boolean }> {
  let pos = from;
  while (pos < to && !signal.aborted) {
    // A fresh buffer each time: pieces are views into it, and the socket may still hold the last one.
    const buf = Buffer.allocUnsafe(Math.min(LOG_CHUNK, to - pos));
    const { bytesRead } = await fh.read(buf, 0, buf.length, pos);
    if (bytesRead === 0) break;
    pos += bytesRead;
    if (!(await out.pieces(dec.push(buf.subarray(0, bytesRead))))) return { pos, more: false };
  }
  return { pos, more: !signal.aborted };
}

/**
 * Polls at which a follower must have seen the new live file, its own (rotated) file not
 * growing in between, before it leaves its file for the next one: two, so one poll
 * interval (0.25 to 0.5 s after the rotation at the default 250 ms). Meanwhile the
 * runtime's old writer may still flush a last line into the old file: CRI
 * ReopenContainerLog creates the new file, swaps the writers, then closes the old one. No
 * write to the new file is waited for.
 */
export const ROTATION_GRACE_POLLS = 2;
/** Bytes of a follower's file compared with the start of a `.gz` to tell whether it is its compressed copy. */
const GZ_PROBE = 4096;
/** `<YYYYMMDD-HHMMSS>` (log-rotation.ts's rotationTimestamp), then `.gz` when compressed. */
const ROTATED_SUFFIX = /^(\d{8}-\d{6})(\.gz)?$/;
const COMPRESSED = '.gz';

/** One rotated file of a log (`<live>.<stamp>`), as the directory holds it: plain, gzipped, or both (mid-compression). */
interface RotatedLog {
  stamp: string;
  plain?: string;
  gz?: string;
}

/** The rotated files of the log `file`, oldest first (by their stamp); `.tmp` and other names are ignored. */
async function listRotated(file: string): Promise<RotatedLog[]> {
  const dir = path.dirname(file);
  const prefix = `${path.basename(file)}.`;
  let names: string[];
  try {
    names = await fsp.readdir(dir);
  } catch {
    return [];
  }
  const byStamp = new Map<string, RotatedLog>();
  for (const n of names) {
    const m = n.startsWith(prefix) ? ROTATED_SUFFIX.exec(n.slice(prefix.length)) : null;
    if (!m) continue;
    const r = byStamp.get(m[1]!) ?? { stamp: m[1]! };
    if (m[2]) r.gz = path.join(dir, n);
    else r.plain = path.join(dir, n);
    byStamp.set(r.stamp, r);
  }
  return [...byStamp.values()].sort((a, b) => (a.stamp < b.stamp ? -1 : a.stamp > b.stamp ? 1 : 0));
}

/** Opens a log file to read (regular file only, no link followed); undefined when it cannot be. */
async function openQuietly(file: string): Promise<{ handle: fsp.FileHandle; ino: number } | undefined> {
  try {
    const { handle, stats } = await openRegularFile(file, { what: 'log file', noFollow: true });
    return { handle, ino: stats.ino };
  } catch {
    return undefined;
  }
}

/**
 * Streams the decompressed bytes of a gzipped log through `each`, LOG_CHUNK at a time, until
 * it returns false or the file ends. A corrupt or truncated file ends where it breaks.
 * Memory is the streams' buffers, whatever the file would expand to.
 */
async function eachGunzipped(file: string, each: (chunk: Buffer) => Promise<boolean> | boolean): Promise<void> {
  const f = await openQuietly(file);
  if (!f) return;
  const src = f.handle.createReadStream({ highWaterMark: LOG_CHUNK, autoClose: false });
  const gunzip = createGunzip({ chunkSize: LOG_CHUNK });
  src.on('error', (err) => gunzip.destroy(err));
  src.pipe(gunzip);
  try {
    for await (const chunk of gunzip as AsyncIterable<Buffer>) if (!(await each(chunk))) return;
  } catch {
    // What was read stands.
  } finally {
    src.unpipe(gunzip);
    src.destroy();
    gunzip.destroy();
    await f.handle.close().catch(() => {});
  }
}

/**
 * The stamp of the rotated file `cur` is, if any: by inode among the plain files, else (it
 * was compressed, then removed, while the follower held it: a follower that fell behind)
 * the `.gz` whose content starts with cur's first bytes (CRI records start with their
 * nanosecond time, so two files never share them). undefined when it is not there.
 */
async function stampOf(list: readonly RotatedLog[], cur: fsp.FileHandle, mine: { ino: number; dev: number; size: number }): Promise<string | undefined> {
  for (const r of list) {
    if (!r.plain) continue;
    const st = await fsp.lstat(r.plain).catch(() => undefined);
    if (st?.isFile() && st.ino === mine.ino && st.dev === mine.dev) return r.stamp;
  }
  if (mine.size === 0) return undefined;
  const head = Buffer.alloc(Math.min(mine.size, GZ_PROBE));
  const { bytesRead } = await cur.read(head, 0, head.length, 0);
  const want = head.subarray(0, bytesRead);
  for (const r of [...list].reverse()) {
    if (!r.gz) continue;
    const got: Buffer[] = [];
    let n = 0;
    await eachGunzipped(r.gz, (c) => {
      got.push(c);
      n += c.length;
      return n < want.length;
    });
    if (n >= want.length && Buffer.concat(got).subarray(0, want.length).equals(want)) return r.stamp;
  }
  return undefined;
}

/**
 * The rotated files written after `cur`, oldest first. When cur's place is known (its stamp),
 * every later one, plain or gzipped; when it is not (cur was removed uncompressed), only the
 * plain ones last written at or after cur (a compressed file's time is when it was
 * compressed, which says nothing of its content).
 */
async function rotatedAfter(list: readonly RotatedLog[], stamp: string | undefined, mine: { ino: number; mtimeMs: number }): Promise<RotatedLog[]> {
  if (stamp !== undefined) return list.filter((r) => r.stamp > stamp);
  const out: RotatedLog[] = [];
  for (const r of list) {
    if (!r.plain) continue;
    const st = await fsp.lstat(r.plain).catch(() => undefined);
    if (st?.isFile() && st.ino !== mine.ino && st.mtimeMs >= mine.mtimeMs) out.push({ stamp: r.stamp, plain: r.plain });
  }
  return out;
}

export interface FollowOptions {
  /** How often a follower looks for more (default 250 ms). */
  pollMs?: number;
  /** Its sleeps (default the real clock). */
  clock?: Pick<Clock, 'sleep'>;
}

/**
 * Writes the selected lines of the open log to `write` (awaiting it: backpressure); with
 * follow, keeps going until the instance stops or `signal` aborts. Closes `fh`.
 *
 * Following reads by file handle, so a rotation (log-rotation.ts) loses nothing, and never
 * stalls: once the file it holds is no longer the one at the path (renamed
 * `<file>.<stamp>`), the follower reads it to its end, then every rotated file newer than
 * it, oldest first (a plain one from its start, a `.gz` one decompressed as a stream: a
 * follower that fell several rotations behind a slow client), then the live file from its
 * start, closing each file as it moves on. It moves on at once when a newer rotated file
 * exists (its own file is then finished for sure) or the container stopped; otherwise once
 * the new live file has been there ROTATION_GRACE_POLLS polls with its own file not
 * growing: no write to the new file is needed. The kubelet's ReadLogs instead reopens the
 * path on an fsnotify rename of the file it watches, skipping any file in between; one that
 * fell behind a rotation before it began watching watches the new file at the path and keeps
 * reading the old one until that new file is rotated in turn (the stall of issue 26).
 *
 * Memory is bounded by LOG_CHUNK, not by the file: `tailLines` finds where the tail starts
 * reading backwards (tailStart), `since` and `limitBytes` stream forwards and stop as soon
 * as the answer is complete. A follower holds one abort listener for its whole life.
 */
export async function streamLogs(fh: fsp.FileHandle, target: LogTarget, o: LogOptions, write: (chunk: Buffer) => void | Promise<void>, signal: AbortSignal, f: FollowOptions = {}): Promise<void> {
  let cur = fh;
  let wake: (() => void) | undefined;
  const onAbort = () => wake?.();
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    let dec = new CriLogDecoder();
    const out = new LineWriter(o, write);
    // What is there now: tailLines applies to it.
    const { size } = await fh.stat();
    const from = o.tailLines !== undefined ? await tailStart(fh, size, o.tailLines) : 0;
    let r = await readForward(fh, from, size, dec, out, signal);
    if (!r.more) return;
    if (!o.follow) {
      await out.pieces(dec.finish());
      return;
    }
    // Follow: what is appended, until the instance stops (then what is left) or the client goes.
    const pollMs = f.pollMs ?? 250;
    const clock = f.clock ?? realClock;
    /** cur's stamp once it is known to be a rotated file. */
    let curStamp: string | undefined;
    /** The new live file seen while cur is rotated: at how many polls in a row, and cur's size then. */
    let grace: { ino: number; polls: number; curSize: number } | undefined;
    for (;;) {
      const done = !target.running();
      const st = await cur.stat();
      if (st.size < r.pos) {
        // Truncated under us: start over from its beginning.
        dec = new CriLogDecoder();
        r = { pos: 0, more: true };
      }
      r = await readForward(cur, r.pos, st.size, dec, out, signal);
      if (!r.more) return;

      // Is cur still the live file? If not, what comes after it, and may it be left now?
      const live = await fsp.lstat(target.file).catch(() => undefined);
      const mine = await cur.stat();
      let moved = false;
      if (!live || live.ino !== mine.ino || live.dev !== mine.dev) {
        const list = await listRotated(target.file);
        curStamp ??= await stampOf(list, cur, mine);
        const newer = await rotatedAfter(list, curStamp, mine);
        const liveFile = live?.isFile() ? live : undefined;
        if (liveFile && newer.length === 0) {
          grace = grace?.ino === liveFile.ino && grace.curSize === mine.size ? { ...grace, polls: grace.polls + 1 } : { ino: liveFile.ino, polls: 1, curSize: mine.size };
        } else grace = undefined;
        if (newer.length > 0 || done || (grace?.polls ?? 0) >= ROTATION_GRACE_POLLS) {
          // The next file that may still grow: the oldest newer plain one, else the live one.
          // Opened before cur is left, so a follower never holds nothing.
          let next: { handle: fsp.FileHandle; stamp?: string } | undefined;
          let skip = newer.length;
          let confused = false;
          for (let i = 0; i < newer.length && !next && !confused; i++) {
            const p = newer[i]!.plain && (await openQuietly(newer[i]!.plain!));
            if (p && p.ino === mine.ino) {
              // cur itself, renamed again since its stamp was taken: never read twice; place it anew next poll.
              await p.handle.close();
              [confused, curStamp] = [true, undefined];
            } else if (p) [next, skip] = [{ handle: p.handle, stamp: newer[i]!.stamp }, i];
          }
          if (!next && liveFile && !confused) {
            const p = await openQuietly(target.file);
            // Rotated again meanwhile: the file rotated in between would be skipped; look again next poll.
            if (p && p.ino !== liveFile.ino) await p.handle.close();
            else if (p) next = { handle: p.handle };
          }
          if (confused) await next?.handle.close();
          else if (next || done) {
            try {
              r = await readForward(cur, r.pos, (await cur.stat()).size, dec, out, signal);
            } catch (err) {
              await next?.handle.close();
              throw err;
            }
            // Without a next file (the container stopped), cur stays closed: closing again is a no-op.
            await cur.close();
            if (next) cur = next.handle;
            if (!r.more) return;
            // The compressed files between the two, oldest first; a plain one that could not be
            // opened was compressed since the listing: its `.gz` (made before the plain one goes).
            for (const between of newer.slice(0, skip)) {
              const gz = between.gz ?? `${between.plain}${COMPRESSED}`;
              let more = true;
              await eachGunzipped(gz, async (c) => (more = (await out.pieces(dec.push(c))) && !signal.aborted));
              if (!more) return;
            }
            if (!next) {
              await out.pieces(dec.finish());
              return;
            }
            curStamp = next.stamp;
            grace = undefined;
            r = { pos: 0, more: true };
            moved = true;
          }
        }
      } else {
        // The live file again (a rotation the runtime refused is renamed back): its stamp, if any, is gone.
        grace = undefined;
        curStamp = undefined;
      }
      if (moved) continue;
      if (done) {
        await out.pieces(dec.finish());
        return;
      }
      await new Promise<void>((resolve) => {
        wake = resolve;
        if (signal.aborted) resolve();
        else void clock.sleep(pollMs).then(resolve, resolve);
      });
      wake = undefined;
      if (signal.aborted) return;
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
    await cur.close();
  }
}
