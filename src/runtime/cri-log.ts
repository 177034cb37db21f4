/**
 * The CRI log format: what a container runtime writes for each container under `podLogsDir`
 * (`<RFC3339Nano time> <stdout|stderr> <tags> <text>` records, one a line; tags `F` for a
 * record that ends its line, `P` for a part of one, more after a `:`), and its readers:
 * CriLogLines turns a log's bytes into what `kubectl logs` gets (server/container-logs.ts),
 * CriLogDecoder into pieces of lines (the termination message's fallback to the log,
 * pods/logs/termination-message.ts), tailStart finds where the last lines begin.
 *
 * The runtime's floor (docs/architecture.md): the format is the runtime's, not the HTTP
 * server's, and pods read it too. Records and lines may be of any length (a runtime splits
 * long lines into P records, but a file is whatever was written to it): every reader here
 * streams, holding at most a partial record head between chunks, never a record or a line.
 */
import type fsp from 'node:fs/promises';

/** Bytes read at a time backwards (tailStart), and by the termination message's reader: what such a reader holds of a log file. */
export const LOG_CHUNK = 64 * 1024;
/** Longest `<time> <stream> <tags> ` head of a CRI record; a longer one is not a record. */
const HEAD_MAX = 128;
const NL = 0x0a;
const CR = 0x0d;
const SP = 0x20;
const EMPTY: Buffer = Buffer.alloc(0);
/** What may follow the first tag (runtimes write `F` and `P` alone; more tags would follow a `:`). */
const TAGS_MORE = 64;
/** `YYYY-MM-DDTHH:MM:SS`: a record time's date and time of day, to the second. */
const SECOND_LENGTH = 19;

/** The two ASCII digits at `at` as a number, or -1. */
function twoDigits(s: string, at: number): number {
  const a = s.charCodeAt(at) - 0x30;
  const b = s.charCodeAt(at + 1) - 0x30;
  return a >= 0 && a <= 9 && b >= 0 && b <= 9 ? a * 10 + b : -1;
}

/** `YYYY-MM-DDTHH:MM:SS` at `i`, each field in the range Go's time.Parse checks (any day 01 to 31). */
function isSecond(s: string, i: number): boolean {
  const month = twoDigits(s, i + 5);
  const day = twoDigits(s, i + 8);
  const hour = twoDigits(s, i + 11);
  const minute = twoDigits(s, i + 14);
  const second = twoDigits(s, i + 17);
  return (
    twoDigits(s, i) >= 0 && twoDigits(s, i + 2) >= 0 && s.charCodeAt(i + 4) === 0x2d && month >= 1 && month <= 12 && s.charCodeAt(i + 7) === 0x2d && day >= 1 && day <= 31 &&
    s.charCodeAt(i + 10) === 0x54 && hour >= 0 && hour <= 23 && s.charCodeAt(i + 13) === 0x3a && minute >= 0 && minute <= 59 && s.charCodeAt(i + 16) === 0x3a && second >= 0 && second <= 59
  );
}

/** `Z` or `±HH:MM` (hours 00 to 23, minutes 00 to 59), exactly `[i, to)`. */
function isZone(s: string, i: number, to: number): boolean {
  const c = s.charCodeAt(i);
  if (to - i === 1) return c === 0x5a;
  if (to - i !== 6 || (c !== 0x2b && c !== 0x2d) || s.charCodeAt(i + 3) !== 0x3a) return false;
  const hour = twoDigits(s, i + 1);
  const minute = twoDigits(s, i + 4);
  return hour >= 0 && hour <= 23 && minute >= 0 && minute <= 59;
}

/** Where the fraction (`.` and 1 to 9 digits) that may follow the second at `i` ends: `i`, with none; -1 when a `.` is not followed by 1 to 9 digits. */
function fractionEnd(s: string, i: number, to: number): number {
  if (s.charCodeAt(i) !== 0x2e) return i;
  let k = i + 1;
  while (k < to && k - i <= 10) {
    const c = s.charCodeAt(k);
    if (c < 0x30 || c > 0x39) break;
    k++;
  }
  const digits = k - i - 1;
  return digits >= 1 && digits <= 9 ? k : -1;
}

/**
 * Whether `s[from, to)` is a record time as the runtime writes it (Go's RFC3339Nano: at most
 * 9 digits of fraction, `Z` or a `±HH:MM` offset) with the field ranges Go's time.Parse
 * checks; the kubelet skips a record whose time it cannot parse. `s` holds one char a byte
 * (latin1). No regular expression: nodelet interprets them (`--regexp-interpret-all`), and
 * this runs for every record whose second was not the last one seen. Every time it admits
 * is one Date.parse reads.
 */
export function isCriTime(s: string, from: number, to: number): boolean {
  if (to - from < SECOND_LENGTH + 1 || !isSecond(s, from)) return false;
  const zone = fractionEnd(s, from + SECOND_LENGTH, to);
  return zone >= 0 && isZone(s, zone, to);
}

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
  // The tags: the first, then at most TAGS_MORE chars after a `:`.
  if (sp3 > HEAD_MAX || sp3 - sp2 - 1 > 2 + TAGS_MORE) return undefined;
  const ts = b.toString('latin1', 0, sp1);
  const stream = b.toString('latin1', sp1 + 1, sp2);
  const tag = b.toString('latin1', sp2 + 1, sp3).split(':')[0];
  if ((stream !== 'stdout' && stream !== 'stderr') || (tag !== 'F' && tag !== 'P') || !isCriTime(ts, 0, ts.length)) return undefined;
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

/** A string of its own, for a slice of a big one (V8 keeps the whole of what a slice is cut from). */
function own(s: string): string {
  return s.length === 0 ? s : Buffer.from(s, 'latin1').toString('latin1');
}

const NEWLINE: Buffer = Buffer.from('\n');
/** Bytes before a chunk's in its work buffer: room for a `\r` held from the chunk before. */
const FRONT = 2;
/** Bytes CriLogLines.pushInPlace needs free before a chunk: a carried record head and FRONT. */
export const IN_PLACE_FRONT = FRONT + HEAD_MAX;
/** #head's answer for a record head the bytes so far do not decide. */
const MORE = -1;
/** Per count of fraction digits (0 to 9): the masks of the digits among bytes 1-4 and 5-8 after the `.`, read as little-endian 32-bit words. */
const DIGITS_LO = [0, 0xff, 0xffff, 0xffffff, -1, -1, -1, -1, -1, -1];
const DIGITS_HI = [0, 0, 0, 0, 0, 0xff, 0xffff, 0xffffff, -1, -1];

/**
 * The layout of a record whose head was checked whole (CriLogLines.#head), which the records
 * after it are compared with (#whole): its date and time to the second (and the fraction's
 * `.`, if any), its count of fraction digits (0: no fraction), and what follows them up to
 * its text (`Z stdout F `: zone, stream, tag, spaces), with F and with P; then the masks of
 * its fraction digits (DIGITS_LO, DIGITS_HI) and the `0`s that fill the bytes past them.
 */
interface RecordLayout {
  second: string;
  fraction: number;
  headF: string;
  headP: string;
  lo: number;
  hi: number;
  loFill: number;
  hiFill: number;
}

/**
 * What a layout's strings are before any record was checked: never matched, a char no latin1
 * string (a chunk's) holds. (A newline would match an empty line: two of them before the
 * first record were taken for one.)
 */
const NEVER = '\u0100';

/** Sets `l` to the layout of a record (changed in place: the interpreter's loop reads one object of one shape). */
function setLayout(l: RecordLayout, second: string, fraction: number, zoneStream: string): void {
  l.second = second;
  l.fraction = fraction;
  l.headF = `${zoneStream}F `;
  l.headP = `${zoneStream}P `;
  l.lo = DIGITS_LO[fraction]!;
  l.hi = DIGITS_HI[fraction]!;
  l.loFill = 0x30303030 & ~l.lo;
  l.hiFill = 0x30303030 & ~l.hi;
}

export interface CriLogLinesOptions {
  /** Each line prefixed with its first record's time and a space. */
  timestamps: boolean;
  /** ms since the epoch: only lines whose first record is at or after it. */
  since?: number;
  /** At most this many bytes in all. */
  limitBytes?: number;
}

/**
 * What `kubectl logs` gets from the bytes of a CRI log: the text of each line (P records
 * joined up to their F), each ended by a newline; with `timestamps`, its first record's time
 * and a space before it; a line whose first record is older than `since` left out; at most
 * `limitBytes` bytes in all. The records and lines of CriLogDecoder (what is not a record is
 * skipped, `\r\n` ends a record like `\n`, a line still open at the end of the input ends
 * there), fed the log's chunks in order and holding at most a partial record head
 * (HEAD_MAX bytes) between them, never a record or a line, however long.
 *
 * Made for throughput in V8's interpreter (nodelet's entry point runs JavaScript without a
 * compiler and interprets regular expressions: docs/development.md), where each JavaScript
 * operation a record costs counts and V8's built-in functions run at native speed. A chunk
 * is decoded where it lies, and its buffer becomes the chunk's output: every record's text is
 * moved down over the heads in place (`copyWithin`, a memmove), so nothing is allocated per
 * record or line (push copies the chunk into a buffer of its own first; pushInPlace, for a
 * reader that reads each chunk into a new buffer, does not). The records are found in a
 * latin1 string of the chunk (one char a byte, made once per chunk) with V8's own string
 * search (`indexOf`, `startsWith`): Buffer's indexOf goes through Node's JavaScript wrapper,
 * 5 times slower than String's in the interpreter (measured). A record's time is checked
 * without a regular expression: in full (isCriTime) for the first record of a second, and
 * for the next records of that second (most: a runtime writes many a second) only what
 * differs, by comparison with the last layout seen (the second, the fraction's length, the
 * zone, stream and tag) and its fraction digits four at a time. What is left is 0.7 to 1.1 µs
 * of CPU a record in the interpreter (BENCHMARKS.md, `kubectl logs` throughput), about a fifth
 * of it the one `copyWithin` (a C++ built-in): short lines are bound by it, not by their bytes.
 */
export class CriLogLines {
  #budget: number;
  readonly #timestamps: boolean;
  readonly #since: number | undefined;
  /** At a record's start, in the text of an accepted record, or skipping what is not a record up to its newline. */
  #state: 'head' | 'text' | 'skip' = 'head';
  /** The start of a record whose head the chunk ended in: at most HEAD_MAX bytes, read again with the next chunk. */
  #carry: Buffer = EMPTY;
  /** The record whose text is being read ends its line (an F). */
  #final = false;
  /** A `\r` ended the last chunk inside a text: text unless a `\n` comes next. */
  #pendingCR = false;
  /** The layout of the last record whose head was checked whole. */
  readonly #layout: RecordLayout = { second: NEVER, fraction: 0, headF: NEVER, headP: NEVER, lo: 0, hi: 0, loFill: 0x30303030, hiFill: 0x30303030 };
  /** The second of the last UTC time #before parsed (never matched before one), and its ms. */
  #sinceSecond = '\n';
  #sinceSecondMs = 0;
  /** A line has begun and its F has not come yet. */
  #open = false;
  /** The open line is older than `since`: its text is left out. */
  #dropped = false;

  constructor(o: CriLogLinesOptions) {
    this.#budget = o.limitBytes ?? Infinity;
    this.#timestamps = o.timestamps;
    this.#since = o.since;
  }

  /** limitBytes is spent: the answer is complete, nothing more comes out. */
  get done(): boolean {
    return this.#budget <= 0;
  }

  /** The output the next bytes of the log complete (often empty for a few bytes): a buffer of its own, never a view into `chunk`. */
  push(chunk: Buffer): Buffer {
    if (this.done) return EMPTY;
    const at = FRONT + this.#carry.length;
    const buf = Buffer.allocUnsafe(at + chunk.length);
    buf.set(chunk, at);
    return this.#spend(this.#feed(buf, at, at + chunk.length));
  }

  /**
   * As push, for bytes the caller gives up: the next bytes of the log are `buf[from, to)`,
   * with at least IN_PLACE_FRONT bytes before `from` that are the decoder's to write too. They
   * are decoded where they are (no copy of the chunk): the output is a view into `buf`, which
   * the caller must not write again (a reader reads each chunk into a new buffer).
   */
  pushInPlace(buf: Buffer, from: number, to: number): Buffer {
    if (from < IN_PLACE_FRONT || to < from || to > buf.length) throw new RangeError(`pushInPlace: bytes [${from}, ${to}) of a ${buf.length}-byte buffer: they must lie in it, at least ${IN_PLACE_FRONT} bytes from its start`);
    if (this.done) return EMPTY;
    return this.#spend(this.#feed(buf, from, to));
  }

  /** The end of the input (the file, when nothing more will come): a record or a line left open ends there. */
  finish(): Buffer {
    if (this.done) return EMPTY;
    const at = FRONT + this.#carry.length;
    const buf = Buffer.allocUnsafe(at + 1);
    buf[at] = NL;
    let out = this.#feed(buf, at, at + 1);
    if (this.#open && !this.#dropped) out = Buffer.concat([out, NEWLINE]);
    this.reset();
    return this.#spend(out);
  }

  /** Forgets the input read so far (the file was truncated under a follower); limitBytes stays spent as it is. */
  reset(): void {
    this.#state = 'head';
    this.#carry = EMPTY;
    this.#pendingCR = false;
    this.#open = false;
    this.#dropped = false;
  }

  #spend(out: Buffer): Buffer {
    if (out.length > this.#budget) out = out.subarray(0, this.#budget);
    this.#budget -= out.length;
    return out;
  }

  /**
   * The output of the carried bytes and the chunk `buf[from, n)`, decoded in place: the
   * carried bytes go right before the chunk, the output starts FRONT bytes before them and is
   * a view into `buf`.
   */
  #feed(buf: Buffer, from: number, n: number): Buffer {
    const carry = this.#carry;
    this.#carry = EMPTY;
    let i = from - carry.length;
    if (carry.length > 0) buf.set(carry, i);
    // What the output moves over is read before (the output never overtakes the input: it is
    // the input less the heads, plus at most a held `\r`, which FRONT makes room for). The
    // string holds the bytes before the input too, so its indices are the buffer's: they are
    // zeroed, never taken for a newline.
    const base = i - FRONT;
    buf.fill(0, 0, i);
    const s = buf.toString('latin1', 0, n);
    let o = base;
    if (this.#state !== 'head') {
      // The rest of a record begun in an earlier chunk.
      const nl = s.indexOf('\n', i);
      if (this.#state === 'text') o = this.#text(buf, s, o, i, nl < 0 ? n : nl, nl >= 0);
      if (nl < 0) return buf.subarray(base, o);
      this.#state = 'head';
      i = nl + 1;
    }
    const last = s.lastIndexOf('\n');
    if (last >= i) {
      o = this.#whole(buf, s, o, i, last + 1);
      i = last + 1;
    }
    if (i < n) {
      // A record the chunk ends in: its head decided now (its text so far goes out), or
      // carried to the next chunk while it may still become one, or skipped when it cannot.
      const head = this.#head(s, i, n, false);
      if (head === MORE) this.#carry = Buffer.from(buf.subarray(i, n));
      else if (head === 0) this.#state = 'skip';
      else {
        if (!this.#open) o = this.#begin(buf, s, o, i, s.indexOf(' ', i));
        this.#final = head > 0;
        this.#state = 'text';
        o = this.#text(buf, s, o, Math.abs(head), n, false);
      }
    }
    // Kept for the next chunk: copies of their own few bytes, so a follower between polls holds no chunk.
    const l = this.#layout;
    if (l.second !== NEVER) {
      l.second = own(l.second);
      l.headF = own(l.headF);
      l.headP = own(l.headP);
    }
    this.#sinceSecond = own(this.#sinceSecond);
    return buf.subarray(base, o);
  }

  /**
   * The whole records `[i, end)` (`end` follows a newline), at a record's start, their
   * output moved down to `o`; returns the output's new end. The loop of every record: its
   * locals are what the interpreter reads fastest, so the layout is read into them (once a
   * chunk, and again after a head checked whole) and nothing in the loop is a call of ours
   * but the first record of a second (#head) and a line's time for `since` (#before).
   */
  #whole(buf: Buffer, s: string, o: number, i: number, end: number): number {
    const view = new DataView(buf.buffer, buf.byteOffset, buf.length);
    const crs = s.indexOf('\r', i) >= 0;
    const stamps = this.#timestamps;
    const since = this.#since;
    const plain = !stamps && since === undefined;
    let open = this.#open;
    let dropped = this.#dropped;
    let { second, fraction, headF, headP, lo, hi, loFill, hiFill } = this.#layout;
    while (i < end) {
      const nl = s.indexOf('\n', i);
      // The record without its line end (`\n`, or `\r\n`).
      const e = crs && nl > i && s.charCodeAt(nl - 1) === CR ? nl - 1 : nl;
      // Where its text starts: > 0 for an F, < 0 for a P, 0 while not known to be a record.
      let at = 0;
      let sp1 = 0;
      if (s.startsWith(second, i)) {
        // The second of the last record checked whole (and its `.`): the rest in the same layout?
        const zone = i + second.length + fraction;
        if (s.startsWith(headF, zone)) at = zone + headF.length;
        else if (s.startsWith(headP, zone)) at = -(zone + headP.length);
        if (at !== 0 && fraction > 0) {
          // Its fraction digits, four at a time (the head's 11+ chars follow them: the words are
          // in the buffer); the bytes past them count as `0`. A byte is a digit when neither
          // subtracting `0` nor adding 0x46 sets its high bit.
          const dot = i + SECOND_LENGTH;
          const w1 = (view.getUint32(dot + 1, true) & lo) | loFill;
          const w2 = (view.getUint32(dot + 5, true) & hi) | hiFill;
          const c9 = fraction === 9 ? buf[dot + 9]! : 0x30;
          if (((w1 - 0x30303030) | (w1 + 0x46464646) | (w2 - 0x30303030) | (w2 + 0x46464646)) & 0x80808080 || c9 < 0x30 || c9 > 0x39) at = 0;
        }
        sp1 = zone + headF.length - 10;
      }
      if (at === 0) {
        at = this.#head(s, i, e, true);
        if (at === 0) {
          i = nl + 1;
          continue;
        }
        ({ second, fraction, headF, headP, lo, hi, loFill, hiFill } = this.#layout);
        sp1 = s.indexOf(' ', i);
      }
      const final = at > 0;
      const text = final ? at : -at;
      if (!open) {
        open = true;
        dropped = false;
        if (!plain) {
          dropped = since !== undefined && this.#before(s, i, sp1, since);
          if (!dropped && stamps) {
            buf.copyWithin(o, i, sp1 + 1);
            o += sp1 + 1 - i;
          }
        }
      }
      if (!dropped) {
        if (final && e === nl) {
          buf.copyWithin(o, text, nl + 1);
          o += nl + 1 - text;
        } else {
          if (e > text) {
            buf.copyWithin(o, text, e);
            o += e - text;
          }
          if (final) buf[o++] = NL;
        }
      }
      if (final) open = false;
      i = nl + 1;
    }
    this.#open = open;
    this.#dropped = dropped;
    return o;
  }

  /**
   * The head of the record at `i` ending at `e` (`whole`: e is its end, without the line
   * end; else the bytes so far end there), as parseRecordHead reads it: where its text
   * starts, positive for an F, negative for a P; 0 when it is not a record; MORE while the
   * bytes so far do not decide. A record's layout is remembered for #whole.
   */
  #head(s: string, i: number, e: number, whole: boolean): number {
    const more = whole || e - i >= HEAD_MAX ? 0 : MORE;
    const sp1 = s.indexOf(' ', i);
    if (sp1 < 0 || sp1 >= e) return more;
    const sp2 = s.indexOf(' ', sp1 + 1);
    if (sp2 < 0 || sp2 >= e) return more;
    let sp3 = s.indexOf(' ', sp2 + 1);
    if (sp3 < 0 || sp3 >= e) {
      if (!whole) return more;
      sp3 = e;
    }
    if (sp3 - i > HEAD_MAX || sp3 - sp2 - 1 > 2 + TAGS_MORE) return 0;
    if (sp2 - sp1 !== 7 || (!s.startsWith('stdout', sp1 + 1) && !s.startsWith('stderr', sp1 + 1))) return 0;
    const tag = s.charCodeAt(sp2 + 1);
    if ((tag !== 0x46 && tag !== 0x50) || (sp3 > sp2 + 2 && s.charCodeAt(sp2 + 2) !== 0x3a)) return 0;
    if (!isCriTime(s, i, sp1)) return 0;
    const zone = fractionEnd(s, i + SECOND_LENGTH, sp1);
    // The second with the fraction's `.`, if any; then zone and stream (`Z stdout `), with each tag.
    const fraction = zone === i + SECOND_LENGTH ? 0 : zone - i - SECOND_LENGTH - 1;
    const zoneStream = s.slice(zone, sp2 + 1);
    setLayout(this.#layout, s.slice(i, fraction === 0 ? zone : i + SECOND_LENGTH + 1), fraction, zoneStream);
    const text = Math.min(sp3 + 1, e);
    return tag === 0x46 ? text : -text;
  }

  /** Text `[from, to)` of the record being read, moved down to `o`; `last`: its newline is at `to`. Returns the output's new end. */
  #text(buf: Buffer, s: string, o: number, from: number, to: number, last: boolean): number {
    const out = !this.#dropped;
    if (this.#pendingCR) {
      this.#pendingCR = false;
      if (out && !(last && from === to)) buf[o++] = CR;
    }
    let end = to;
    if (end > from && s.charCodeAt(end - 1) === CR) {
      end--;
      if (!last) this.#pendingCR = true;
    }
    if (out && end > from) {
      buf.copyWithin(o, from, end);
      o += end - from;
    }
    if (last && this.#final) {
      if (out) buf[o++] = NL;
      this.#open = false;
    }
    return o;
  }

  /** A line begins with the record at `i` (its time ends at `sp`): whether `since` leaves it out; its time goes out with `timestamps`. Returns the output's new end. */
  #begin(buf: Buffer, s: string, o: number, i: number, sp: number): number {
    this.#open = true;
    this.#dropped = this.#since !== undefined && this.#before(s, i, sp, this.#since);
    if (!this.#dropped && this.#timestamps) {
      buf.copyWithin(o, i, sp + 1);
      o += sp + 1 - i;
    }
    return o;
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
}
