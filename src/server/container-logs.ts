/**
 * `GET /containerLogs/<namespace>/<pod>/<container>`: what `kubectl logs` reads from the
 * node agent, from the CRI log files the runtime writes under `podLogsDir`
 * (`<ns>_<pod>_<uid>/<container>/<restartCount>.log`, lines `<RFC3339Nano> <stream> <P|F> <text>`).
 *
 * Query parameters, as the kubelet's: `previous` (the instance before the current one),
 * `timestamps` (each line prefixed with its RFC 3339 time), `tailLines`, `limitBytes`,
 * `sinceSeconds` or `sinceTime` (not both), `follow` (keeps streaming what the container
 * writes until it stops or the client goes). Partial (`P`) lines are joined with the next
 * until an `F`. A bad parameter is a 400 naming it; an unknown pod or container a 404; a
 * container that has no log yet (waiting), or no previous instance, a 400 saying so.
 *
 * Log files can be huge and are written by whatever runs in the container: they are read
 * as streams, LOG_CHUNK bytes at a time (backwards for `tailLines`), never whole, with no
 * limit on record or line length, and only a regular file is opened.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
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

  /** Writes the pieces; false once limitBytes is spent (the answer is complete). */
  async pieces(pieces: readonly LogPiece[]): Promise<boolean> {
    for (const p of pieces) {
      if (p.first) this.#skipping = this.o.since !== undefined && p.lineMs < this.o.since;
      if (this.#skipping) continue;
      if (p.first && this.o.timestamps && !(await this.#out(Buffer.from(`${p.lineTs} `)))) return false;
      if (p.text.length > 0 && !(await this.#out(p.text))) return false;
      if (p.end && !(await this.#out(NEWLINE))) return false;
    }
    return true;
  }

  async #out(b: Buffer): Promise<boolean> {
    const part = b.length > this.#budget ? b.subarray(0, this.#budget) : b;
    this.#budget -= part.length;
    if (part.length > 0) await this.write(part);
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
 * The file the runtime writes now, when it is no longer the one `cur` reads: the live log
 * was rotated (renamed `<file>.<time>`, and a new file made at the path by CRI
 * ReopenContainerLog). It is switched to only once the runtime has written to it (or the
 * container stopped) and it was seen so at the previous poll too (`seen`): until then the
 * runtime's old writer may still flush its last line into the old file. Only a regular
 * file is opened, without following a link. Returns undefined to stay on `cur`.
 */
async function rotatedLog(file: string, cur: fsp.FileHandle, done: boolean, seen: { ino?: number }): Promise<fsp.FileHandle | undefined> {
  let st: Awaited<ReturnType<typeof fsp.lstat>>;
  try {
    st = await fsp.lstat(file);
  } catch {
    seen.ino = undefined;
    return undefined; // renamed, not reopened yet
  }
  const mine = await cur.stat();
  if ((st.ino === mine.ino && st.dev === mine.dev) || !st.isFile() || (st.size === 0 && !done)) {
    seen.ino = undefined;
    return undefined;
  }
  if (seen.ino !== st.ino && !done) {
    seen.ino = st.ino;
    return undefined;
  }
  seen.ino = undefined;
  let next: fsp.FileHandle;
  try {
    next = (await openRegularFile(file, { what: 'log file', noFollow: true })).handle;
  } catch {
    return undefined;
  }
  if ((await next.stat()).ino !== st.ino) {
    await next.close();
    return undefined;
  }
  return next;
}

/**
 * Rotated files written after `cur`'s and before the live one, oldest first: what a
 * follower that fell a rotation or more behind (a slow client) must read before the live
 * file. Plain rotated files only (`<file>.<time>`): one already compressed is not read.
 */
async function rotatedBetween(file: string, cur: fsp.FileHandle, next: fsp.FileHandle): Promise<string[]> {
  const dir = path.dirname(file);
  const prefix = `${path.basename(file)}.`;
  const [mine, live] = await Promise.all([cur.stat(), next.stat()]);
  let names: string[];
  try {
    names = (await fsp.readdir(dir)).filter((n) => n.startsWith(prefix) && /^\d{8}-\d{6}$/.test(n.slice(prefix.length))).sort();
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const n of names) {
    const st = await fsp.lstat(path.join(dir, n)).catch(() => undefined);
    if (st?.isFile() && st.ino !== mine.ino && st.ino !== live.ino && st.mtimeMs >= mine.mtimeMs) out.push(path.join(dir, n));
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
 * Following reads by file handle, so a rotation (log-rotation.ts) loses nothing: when a
 * new file appears at the path, the old handle is read to its end, then any file rotated
 * in between (a follower more than one rotation behind), then the new file from its start,
 * as the kubelet's ReadLogs reopens the path on a rename.
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
    const seen: { ino?: number } = {};
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
      const next = await rotatedLog(target.file, cur, done, seen);
      if (next) {
        // Rotated: the old file to its end, the ones rotated since, then the new one from its start.
        const between = await rotatedBetween(target.file, cur, next).catch(() => []);
        r = await readForward(cur, r.pos, (await cur.stat()).size, dec, out, signal);
        await cur.close();
        cur = next;
        for (const file of between) {
          if (!r.more) return;
          const h = await openRegularFile(file, { what: 'log file', noFollow: true }).then((x) => x.handle, () => undefined);
          if (!h) continue; // compressed or removed meanwhile
          try {
            r = await readForward(h, 0, (await h.stat()).size, dec, out, signal);
          } finally {
            await h.close();
          }
        }
        if (!r.more) return;
        r = { pos: 0, more: true };
        continue;
      }
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
