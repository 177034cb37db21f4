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
import type { PodLookup } from '../pods/sources/lookup.js';

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
/**
 * A record's time as the runtime writes it (Go's RFC3339Nano: at most 9 digits of fraction),
 * with the field ranges Go's time.Parse checks (the kubelet skips a record it cannot parse):
 * its date and time of day to the second, then the fraction and zone. No space in it, so it
 * ends at the record's first space. Every time it admits is one Date.parse reads.
 */
const SECOND = String.raw`\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d`;
const SECOND_LENGTH = 'YYYY-MM-DDTHH:MM:SS'.length;
const AFTER_SECOND = String.raw`(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)`;
const RFC3339 = new RegExp(`^${SECOND}${AFTER_SECOND}$`);
/** What may follow the first tag (runtimes write `F` and `P` alone; more tags would follow a `:`). */
const TAGS_MORE = 64;
const MORE_TAGS = String.raw`(?::[^ \n]{0,${TAGS_MORE}})?`;
/** After the time: stream, then tags (the first F resp. P), ended by the space before the text or by the record's end (`\n`, `\r\n`). */
const AFTER_TIME = (tag: 'F' | 'P') => String.raw` std(?:out|err) ${tag}${MORE_TAGS}(?: |(?=\r?\n))`;
/**
 * A record's head up to its text, tested at the record's first byte (sticky): what
 * parseRecordHead accepts, as regular expressions. At most 110 chars (HEAD_MAX holds it).
 * CriLogLines runs one or two per record when it reads records one by one; the REST_ ones
 * from the time's SECOND_LENGTH-th char, for a record whose second is the one checked last
 * (most records: the runtime writes many a second).
 */
const HEAD_F = new RegExp(SECOND + AFTER_SECOND + AFTER_TIME('F'), 'y');
const HEAD_P = new RegExp(SECOND + AFTER_SECOND + AFTER_TIME('P'), 'y');
const REST_F = new RegExp(AFTER_SECOND + AFTER_TIME('F'), 'y');
const REST_P = new RegExp(AFTER_SECOND + AFTER_TIME('P'), 'y');
/** A record's text: up to its newline, but for one `\r` right before it. */
const TEXT = String.raw`[^\r\n]*(?:\r+[^\r\n]+)*(?:\r(?=\r))*`;
/**
 * Every record of a run of whole records, matched one after another (global and sticky),
 * for `replace(LINES, '$1$2$3')`: an F record becomes its text and a newline, a P record
 * its text, what is not a record nothing. One call turns a chunk's records into what a
 * client gets, with no JavaScript per record (CriLogLines, without timestamps or since).
 */
const LINES = new RegExp(String.raw`${SECOND}${AFTER_SECOND} std(?:out|err) (?:F${MORE_TAGS}(?: (${TEXT}))?\r?(\n)|P${MORE_TAGS}(?: (${TEXT}))?\r?\n)|[^\n]*\n`, 'gy');
/** LINES with timestamps, for a run without P records: an F record becomes its time, a space, its text and a newline. */
const STAMPED_LINES = new RegExp(String.raw`(${SECOND}${AFTER_SECOND} )std(?:out|err) F${MORE_TAGS}(?: (${TEXT}))?\r?(\n)|[^\n]*\n`, 'gy');

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
  // The tags: the first, then at most TAGS_MORE chars after a `:` (HEAD_F's MORE_TAGS).
  if (sp3 > HEAD_MAX || sp3 - sp2 - 1 > 2 + TAGS_MORE) return undefined;
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
  const statuses = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? []), ...(pod.status?.ephemeralContainerStatuses ?? [])];
  const known = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? []), ...(pod.spec?.ephemeralContainers ?? [])].some((c) => c.name === container);
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
    const s = [...(p?.status?.initContainerStatuses ?? []), ...(p?.status?.containerStatuses ?? []), ...(p?.status?.ephemeralContainerStatuses ?? [])].find((x) => x.name === container);
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

/** A string of its own, for a slice of a big one (V8 keeps the whole of what a slice is cut from). */
function own(s: string): string {
  return s.length === 0 ? s : Buffer.from(s, 'latin1').toString('latin1');
}

/** `\n` fed at the end of the input: the last record ends there, with or without its newline. */
const END_OF_INPUT: Buffer = Buffer.from('\n');

/**
 * What `kubectl logs` gets from the bytes of a CRI log: the text of each line (P records
 * joined up to their F), each ended by a newline; with `timestamps`, its first record's time
 * and a space before it; a line whose first record is older than `since` left out; at most
 * `limitBytes` bytes in all. The records and lines of CriLogDecoder (what is not a record is
 * skipped, `\r\n` ends a record like `\n`, a line still open at the end of the input ends
 * there), fed the log's chunks in order and holding at most a partial record head
 * (HEAD_MAX bytes) between them, never a record or a line, however long.
 *
 * Made for throughput: nodelet runs in V8's interpreter (the entry point's flags, docs/development.md),
 * where every JavaScript operation per record counts and built-in functions run at native
 * speed. So a chunk is read as one latin1 string (one char per byte: nothing decoded, nothing
 * lost); its whole records go through one `replace` with a regular expression (LINES) when
 * neither since nor (with P records) timestamps need them one by one, else a few built-in
 * calls each (indexOf, a sticky regular expression for the head, slice); what a chunk makes
 * goes out as one Buffer. A tenth of the CPU a record cost when decoded into pieces and
 * joined (CriLogDecoder and the writer before it; BENCHMARKS.md, `kubectl logs` throughput);
 * most of what is left is V8's regular-expression interpreter (`--regexp-interpret-all`).
 */
export class CriLogLines {
  #budget: number;
  readonly #timestamps: boolean;
  readonly #since: number | undefined;
  /** At a record's start, in the text of an accepted record, or skipping what is not a record up to its newline. */
  #state: 'head' | 'text' | 'skip' = 'head';
  /** The start of a record whose head the chunk ended in: at most HEAD_MAX chars, read again with the next chunk. */
  #carry = '';
  /** The record whose text is being read ends its line (an F). */
  #final = false;
  /** A `\r` ended the last chunk inside a text: text unless a `\n` comes next. */
  #pendingCR = false;
  /** The date and time to the second of the last record whose time was checked whole. */
  #second = '\n';
  /** The second of the last UTC time #before parsed (never matched before one: no record holds a newline), and its ms. */
  #sinceSecond = '\n';
  #sinceSecondMs = 0;
  /** A line has begun and its F has not come yet. */
  #open = false;
  /** The open line is older than `since`: its text is left out. */
  #dropped = false;

  constructor(o: Pick<LogOptions, 'timestamps' | 'since' | 'limitBytes'>) {
    this.#budget = o.limitBytes ?? Infinity;
    this.#timestamps = o.timestamps;
    this.#since = o.since;
  }

  /** limitBytes is spent: the answer is complete, nothing more comes out. */
  get done(): boolean {
    return this.#budget <= 0;
  }

  /** The output the next bytes of the log complete (often empty for a few bytes). */
  push(chunk: Buffer): Buffer {
    if (this.done) return EMPTY;
    const parts: string[] = [];
    this.#feed(chunk, parts);
    // What is kept for the next chunk are views into this one's string: kept as copies of
    // their own few bytes instead, so a follower between polls holds no chunk.
    this.#carry = own(this.#carry);
    this.#second = own(this.#second);
    this.#sinceSecond = own(this.#sinceSecond);
    return this.#out(parts);
  }

  /** The end of the input (the file, when nothing more will come): a record or a line left open ends there. */
  finish(): Buffer {
    if (this.done) return EMPTY;
    const parts: string[] = [];
    this.#feed(END_OF_INPUT, parts);
    if (this.#open && !this.#dropped) parts.push('\n');
    this.reset();
    return this.#out(parts);
  }

  /** Forgets the input read so far (the file was truncated under a follower); limitBytes stays spent as it is. */
  reset(): void {
    this.#state = 'head';
    this.#carry = '';
    this.#pendingCR = false;
    this.#open = false;
    this.#dropped = false;
  }

  #out(parts: string[]): Buffer {
    if (parts.length === 0) return EMPTY;
    let text = parts.length === 1 ? parts[0]! : parts.join('');
    if (text.length > this.#budget) text = text.slice(0, this.#budget);
    this.#budget -= text.length;
    return Buffer.from(text, 'latin1');
  }

  #feed(chunk: Buffer, parts: string[]): void {
    const s = this.#carry + chunk.toString('latin1');
    this.#carry = '';
    const n = s.length;
    let i = 0;
    if (this.#state !== 'head') {
      // The rest of a record begun in an earlier chunk.
      const nl = s.indexOf('\n');
      if (this.#state === 'text') this.#text(parts, s, 0, nl < 0 ? n : nl, nl >= 0);
      if (nl < 0) return;
      this.#state = 'head';
      i = nl + 1;
    }
    const last = s.lastIndexOf('\n');
    if (last >= i) i = this.#whole(parts, s, i, last + 1);
    if (i >= n) return;
    // A record the chunk ends in: its head decided now (its text so far goes out), or carried
    // to the next chunk while it may still become one, or skipped when it cannot.
    const head = this.#head(s, i);
    if (head !== 0) {
      if (!this.#open) {
        this.#open = true;
        this.#dropped = this.#begin(parts, s, i);
      }
      this.#final = head > 0;
      this.#state = 'text';
      this.#text(parts, s, Math.abs(head), n, false);
    } else if (n - i <= HEAD_MAX) this.#carry = s.slice(i);
    else this.#state = 'skip';
  }

  /**
   * The whole records `[i, end)` of `s` (`end` follows a newline), at a record's start;
   * returns `end`. Without timestamps or since, and with timestamps when no line is open and
   * no P record is among them, one `replace` does them all; otherwise one by one.
   */
  #whole(parts: string[], s: string, i: number, end: number): number {
    if (this.#since === undefined && (!this.#timestamps || !this.#open)) {
      const run = i === 0 && end === s.length ? s : s.slice(i, end);
      // A P record's head holds one of these (text may too: then one by one, as it must).
      if (!this.#timestamps) {
        parts.push(run.replace(LINES, '$1$2$3'));
        this.#open = this.#openAfter(s, i, end);
        return end;
      }
      if (!run.includes(' stdout P') && !run.includes(' stderr P')) {
        parts.push(run.replace(STAMPED_LINES, '$1$2$3'));
        return end;
      }
    }
    // Locals, not fields, in the loop: the interpreter reads them faster.
    const plain = !this.#timestamps && this.#since === undefined;
    const crs = s.indexOf('\r', i) >= 0;
    let open = this.#open;
    let dropped = this.#dropped;
    let second = this.#second;
    while (i < end) {
      const nl = s.indexOf('\n', i);
      // Its second is the last one checked whole: only what follows it is checked. (Never
      // true before one was: no record holds a newline.)
      const known = s.startsWith(second, i);
      const f = known ? REST_F : HEAD_F;
      const from = known ? i + SECOND_LENGTH : i;
      f.lastIndex = from;
      const final = f.test(s);
      let at: number;
      if (final) at = f.lastIndex;
      else {
        const p = known ? REST_P : HEAD_P;
        p.lastIndex = from;
        if (!p.test(s)) {
          i = nl + 1;
          continue;
        }
        at = p.lastIndex;
      }
      if (!known) second = s.slice(i, i + SECOND_LENGTH);
      let textEnd = nl;
      if (crs && s.charCodeAt(nl - 1) === CR) textEnd = Math.max(at, nl - 1);
      if (!open) {
        open = true;
        dropped = !plain && this.#begin(parts, s, i);
      }
      if (!dropped) {
        if (final && textEnd === nl) parts.push(s.slice(at, nl + 1));
        else {
          if (textEnd > at) parts.push(s.slice(at, textEnd));
          if (final) parts.push('\n');
        }
      }
      if (final) open = false;
      i = nl + 1;
    }
    this.#open = open;
    this.#dropped = dropped;
    this.#second = second;
    return end;
  }

  /** Whether a line is open after the whole records `[i, end)`: the last record among them that is one is a P (or none is, and one was open before). */
  #openAfter(s: string, i: number, end: number): boolean {
    for (let stop = end - 1; stop > i; ) {
      const start = Math.max(i, s.lastIndexOf('\n', stop - 1) + 1);
      const head = this.#head(s, start);
      if (head !== 0) return head < 0;
      stop = start - 1;
    }
    return this.#open;
  }

  /**
   * Where the text of the record at `i` starts when its head is one: positive for an F,
   * negative for a P; 0 when it is not one. The record or its head ends at the first `\n`
   * after `i`, or at the end of `s`.
   */
  #head(s: string, i: number): number {
    // As in #whole's loop.
    const known = s.startsWith(this.#second, i);
    const f = known ? REST_F : HEAD_F;
    const p = known ? REST_P : HEAD_P;
    f.lastIndex = p.lastIndex = known ? i + SECOND_LENGTH : i;
    let at: number;
    if (f.test(s)) at = f.lastIndex;
    else if (p.test(s)) at = -p.lastIndex;
    else return 0;
    if (!known) this.#second = s.slice(i, i + SECOND_LENGTH);
    return at;
  }

  /** A line begins with the record at `i`: whether `since` leaves it out; its time goes out with `timestamps`. */
  #begin(parts: string[], s: string, i: number): boolean {
    if (!this.#timestamps && this.#since === undefined) return false;
    const sp = s.indexOf(' ', i);
    if (this.#since !== undefined && this.#before(s, i, sp, this.#since)) return true;
    if (this.#timestamps) parts.push(s.slice(i, sp + 1));
    return false;
  }

  /**
   * Whether the time `[i, sp)` (a record's, checked) is before `since`. A UTC time in the
   * same second as the last one parsed is decided by that second when since is not inside
   * it: no Date.parse for most lines.
   */
  #before(s: string, i: number, sp: number, since: number): boolean {
    const utc = s.charCodeAt(sp - 1) === 0x5a; // Z
    if (utc && s.startsWith(this.#sinceSecond, i)) {
      if (this.#sinceSecondMs + 1000 <= since) return true;
      if (this.#sinceSecondMs >= since) return false;
    }
    const ms = Date.parse(s.slice(i, sp));
    if (utc) {
      this.#sinceSecond = s.slice(i, i + SECOND_LENGTH);
      this.#sinceSecondMs = Math.floor(ms / 1000) * 1000;
    }
    return ms < since;
  }

  /** Text `[from, to)` of the record being read; `last`: its newline is at `to`. */
  #text(parts: string[], s: string, from: number, to: number, last: boolean): void {
    const out = !this.#dropped;
    if (this.#pendingCR) {
      this.#pendingCR = false;
      if (out && !(last && from === to)) parts.push('\r');
    }
    let end = to;
    if (end > from && s.charCodeAt(end - 1) === CR) {
      end--;
      if (!last) this.#pendingCR = true;
    }
    if (out && end > from) parts.push(s.slice(from, end));
    if (last && this.#final) {
      if (out) parts.push('\n');
      this.#open = false;
    }
  }
}

/**
 * Reads [from, to) of the file forwards, LOG_CHUNK bytes at a time, through `lines` to
 * `write`; false when the answer is complete (limitBytes) or the client went.
 */
async function readForward(fh: fsp.FileHandle, from: number, to: number, lines: CriLogLines, write: (chunk: Buffer) => void | Promise<void>, signal: AbortSignal): Promise<{ pos: number; more: boolean }> {
  if (from >= to || signal.aborted) return { pos: from, more: !signal.aborted };
  // One buffer for the whole read: lines.push copies a chunk into a string at once, so the
  // next chunk is read into it while the client takes the last one (a read and a write in
  // flight, not one after the other: each waits on another thread or the client).
  const buf = Buffer.allocUnsafe(Math.min(LOG_CHUNK, to - from));
  let pos = from;
  let next: Promise<{ bytesRead: number }> | undefined = fh.read(buf, 0, Math.min(buf.length, to - pos), pos);
  try {
    while (next) {
      const { bytesRead } = await next;
      next = undefined;
      if (bytesRead === 0) break;
      pos += bytesRead;
      if (signal.aborted) break;
      const out = lines.push(buf.subarray(0, bytesRead));
      if (lines.done) {
        if (out.length > 0) await write(out);
        return { pos, more: false };
      }
      if (pos < to) next = fh.read(buf, 0, Math.min(buf.length, to - pos), pos);
      if (out.length > 0) await write(out);
    }
  } finally {
    // Never leave a read running into the buffer (or its failure unhandled) past this call.
    await next?.catch(() => undefined);
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
    const lines = new CriLogLines(o);
    const flush = async (b: Buffer): Promise<boolean> => {
      if (b.length > 0) await write(b);
      return !lines.done;
    };
    // What is there now: tailLines applies to it.
    const { size } = await fh.stat();
    const from = o.tailLines !== undefined ? await tailStart(fh, size, o.tailLines) : 0;
    let r = await readForward(fh, from, size, lines, write, signal);
    if (!r.more) return;
    if (!o.follow) {
      await flush(lines.finish());
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
        lines.reset();
        r = { pos: 0, more: true };
      }
      r = await readForward(cur, r.pos, st.size, lines, write, signal);
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
              r = await readForward(cur, r.pos, (await cur.stat()).size, lines, write, signal);
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
              await eachGunzipped(gz, async (c) => (more = (await flush(lines.push(c))) && !signal.aborted));
              if (!more) return;
            }
            if (!next) {
              await flush(lines.finish());
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
        await flush(lines.finish());
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
