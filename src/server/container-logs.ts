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
 * as streams, LOG_READ bytes at a time forwards (LOG_CHUNK backwards for `tailLines`), never
 * whole, with no limit on record or line length, and only a regular file is opened. The
 * records are decoded by the runtime floor's CRI log reader (runtime/cri-log.ts).
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import { createGunzip } from 'node:zlib';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { realClock, type Clock } from '../clock.js';
import { isNodeletError, NodeletError } from '../errors.js';
import { openRegularFile, readFailure } from '../system/safe-file.js';
import type { PodLookup } from '../pods/sources/lookup.js';
import { CriLogLines, IN_PLACE_FRONT, tailStart } from '../runtime/cri-log.js';

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

/**
 * Bytes read at a time forwards: large, so a follower behind a rotation (issue 26: a 212 MB
 * file) pays few reads, awaits and writes per MB; the output of one read is one write. But
 * each chunk's buffer (IN_PLACE_FRONT more) and its latin1 string (the decoder's, a 16-byte
 * header more) stay under 128 KiB: above, V8 puts the string in its large-object space and
 * glibc maps the buffer with mmap, each a fresh allocation that faults its pages in and is
 * unmapped when collected. Measured (2026-11-28, quiet machine, 212 MB of 1 KiB records
 * through `/containerLogs` over HTTPS to curl): 256 KiB took 1.56-2.21 s with nodelet at
 * 1.43-1.68 s of CPU; 124 KiB 0.85-1.16 s at 0.91-1.14 s. The decoder alone under nodelet's
 * flags: 780-870 ms against 370-430 ms. (At 1 MiB, dead chunks also piled up to ~65 MB of RSS
 * between collections: bench/log-follow.ts.)
 */
export const LOG_READ = 124 * 1024;

/**
 * Reads [from, to) of the file forwards, LOG_READ bytes at a time, through `lines` to
 * `write`; false when the answer is complete (limitBytes) or the client went. Each write
 * is awaited before the read after the next one (the response's backpressure: at most one
 * read and one chunk's output in flight, whatever the client's speed).
 */
async function readForward(fh: fsp.FileHandle, from: number, to: number, lines: CriLogLines, write: (chunk: Buffer) => void | Promise<void>, signal: AbortSignal): Promise<{ pos: number; more: boolean }> {
  if (from >= to || signal.aborted) return { pos: from, more: !signal.aborted };
  // Each chunk is read into a buffer of its own and decoded where it is (pushInPlace: no
  // copy; its output is a view into it that the client may hold until it is sent), so the
  // next chunk is read while the client takes the last one (a read and a write in flight,
  // not one after the other: each waits on another thread or the client). A new buffer's
  // pages are first touched by the read, on libuv's thread, not on the event loop.
  const size = Math.min(LOG_READ, to - from);
  const read = (at: number) => {
    const buf = Buffer.allocUnsafe(IN_PLACE_FRONT + size);
    return fh.read(buf, IN_PLACE_FRONT, Math.min(size, to - at), at);
  };
  let pos = from;
  let next: Promise<{ bytesRead: number; buffer: Buffer }> | undefined = read(pos);
  try {
    while (next) {
      const { bytesRead, buffer } = await next;
      next = undefined;
      if (bytesRead === 0) break;
      pos += bytesRead;
      if (signal.aborted) break;
      const out = lines.pushInPlace(buffer, IN_PLACE_FRONT, IN_PLACE_FRONT + bytesRead);
      if (lines.done) {
        if (out.length > 0) await write(out);
        return { pos, more: false };
      }
      if (pos < to) next = read(pos);
      if (out.length > 0) await write(out);
    }
  } finally {
    // Never leave a read running (or its failure unhandled) past this call.
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
 * Streams the decompressed bytes of a gzipped log through `each`, LOG_READ at a time, until
 * it returns false or the file ends. A corrupt or truncated file ends where it breaks.
 * Memory is the streams' buffers, whatever the file would expand to.
 */
async function eachGunzipped(file: string, each: (chunk: Buffer) => Promise<boolean> | boolean): Promise<void> {
  const f = await openQuietly(file);
  if (!f) return;
  const src = f.handle.createReadStream({ highWaterMark: LOG_READ, autoClose: false });
  const gunzip = createGunzip({ chunkSize: LOG_READ });
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
 * Memory is bounded by LOG_READ, not by the file: `tailLines` finds where the tail starts
 * reading backwards (tailStart), `since` and `limitBytes` stream forwards and stop as soon
 * as the answer is complete. A follower holds one abort listener for its whole life.
 */
export async function streamLogs(fh: fsp.FileHandle, target: LogTarget, o: LogOptions, write: (chunk: Buffer) => void | Promise<void>, signal: AbortSignal, f: FollowOptions = {}): Promise<void> {
  const follower = new LogFollower(fh, target, o, write, signal, f);
  const onAbort = () => follower.wake();
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    await follower.run();
  } finally {
    signal.removeEventListener('abort', onAbort);
    await follower.close();
  }
}

/** What a follower's poll decided about the file it holds: keep it, it moved on to the next one, or the answer is over. */
type Step = 'stay' | 'moved' | 'end';

/** The next file a follower reads after its own: a rotated plain file (with its stamp) or the live file. */
interface NextLog {
  handle: fsp.FileHandle;
  stamp?: string;
}

/**
 * One streamLogs answer (see there): the file it holds (`cur`) and where it is in it, the
 * decoder, and, while following, what it knows of cur's rotation. Each poll reads what cur
 * gained (#readCur), then asks whether cur is still the live file and may be left
 * (#checkRotation: the rotated file it is, those after it, the grace for the new live
 * file), and when so moves on (#moveOn: cur to its end, the compressed files between,
 * then the next file from its start), else sleeps until the next poll or an abort (#sleep).
 */
class LogFollower {
  readonly #target: LogTarget;
  readonly #o: LogOptions;
  readonly #write: (chunk: Buffer) => void | Promise<void>;
  readonly #signal: AbortSignal;
  readonly #pollMs: number;
  readonly #clock: Pick<Clock, 'sleep'>;
  readonly #lines: CriLogLines;
  /** The file read; closed when left (and by close()). */
  #cur: fsp.FileHandle;
  /** Where the next read in cur starts. */
  #pos = 0;
  /** cur's stamp once it is known to be a rotated file. */
  #curStamp: string | undefined;
  /** The new live file seen while cur is rotated: at how many polls in a row, and cur's size then. */
  #grace: { ino: number; polls: number; curSize: number } | undefined;
  /** Ends the current sleep (an abort). */
  #wake: (() => void) | undefined;

  constructor(fh: fsp.FileHandle, target: LogTarget, o: LogOptions, write: (chunk: Buffer) => void | Promise<void>, signal: AbortSignal, f: FollowOptions) {
    this.#cur = fh;
    this.#target = target;
    this.#o = o;
    this.#write = write;
    this.#signal = signal;
    this.#pollMs = f.pollMs ?? 250;
    this.#clock = f.clock ?? realClock;
    this.#lines = new CriLogLines(o);
  }

  wake(): void {
    this.#wake?.();
  }

  /** Closes the file held (again: a no-op when it was closed on leaving it). */
  close(): Promise<void> {
    return this.#cur.close();
  }

  /** What is there now (tailLines applies to it), then with follow what is appended, until the instance stops (then what is left) or the client goes. */
  async run(): Promise<void> {
    const fh = this.#cur;
    const { size } = await fh.stat();
    const from = this.#o.tailLines !== undefined ? await tailStart(fh, size, this.#o.tailLines) : 0;
    if (!(await this.#read(from, size))) return;
    if (!this.#o.follow) {
      await this.#flush(this.#lines.finish());
      return;
    }
    for (;;) {
      const done = !this.#target.running();
      if (!(await this.#readCur())) return;
      const step = await this.#checkRotation(done);
      if (step === 'end') return;
      if (step === 'moved') continue;
      if (done) {
        await this.#flush(this.#lines.finish());
        return;
      }
      if (!(await this.#sleep())) return;
    }
  }

  /** Writes `b` (the output writer: awaited, the response's backpressure); false when the answer is complete (limitBytes). */
  async #flush(b: Buffer): Promise<boolean> {
    if (b.length > 0) await this.#write(b);
    return !this.#lines.done;
  }

  /** Reads cur from `from` to `to` (readForward); false when the answer is over. */
  async #read(from: number, to: number): Promise<boolean> {
    const r = await readForward(this.#cur, from, to, this.#lines, this.#write, this.#signal);
    this.#pos = r.pos;
    return r.more;
  }

  /** Reads what cur gained since the last read, from its start again when it was truncated under us; false when the answer is over. */
  async #readCur(): Promise<boolean> {
    const st = await this.#cur.stat();
    if (st.size < this.#pos) {
      this.#lines.reset();
      this.#pos = 0;
    }
    return this.#read(this.#pos, st.size);
  }

  /** Is cur still the live file? If not, what comes after it, and may it be left now (then it is)? `done`: the container stopped before this poll's read. */
  async #checkRotation(done: boolean): Promise<Step> {
    const live = await fsp.lstat(this.#target.file).catch(() => undefined);
    const mine = await this.#cur.stat();
    if (live && live.ino === mine.ino && live.dev === mine.dev) {
      // The live file again (a rotation the runtime refused is renamed back): its stamp, if any, is gone.
      this.#grace = undefined;
      this.#curStamp = undefined;
      return 'stay';
    }
    const list = await listRotated(this.#target.file);
    this.#curStamp ??= await stampOf(list, this.#cur, mine);
    const newer = await rotatedAfter(list, this.#curStamp, mine);
    const liveFile = live?.isFile() ? live : undefined;
    if (liveFile && newer.length === 0) {
      const g = this.#grace;
      this.#grace = g?.ino === liveFile.ino && g.curSize === mine.size ? { ...g, polls: g.polls + 1 } : { ino: liveFile.ino, polls: 1, curSize: mine.size };
    } else this.#grace = undefined;
    if (newer.length === 0 && !done && (this.#grace?.polls ?? 0) < ROTATION_GRACE_POLLS) return 'stay';
    const next = await this.#openNext(newer, mine.ino, liveFile?.ino);
    if (next === 'confused' || (!next.log && !done)) return 'stay';
    return this.#moveOn(newer.slice(0, next.skip), next.log);
  }

  /**
   * The next file that may still grow, opened before cur is left (so a follower never holds
   * nothing): the oldest of `newer` with a plain file that opens, else the live file (inode
   * `liveIno`); `skip`, how many of `newer` come before it. 'confused' when one of them is
   * cur itself, renamed again since its stamp was taken: never read twice, it is placed anew
   * next poll.
   */
  async #openNext(newer: readonly RotatedLog[], mineIno: number, liveIno: number | undefined): Promise<{ log?: NextLog; skip: number } | 'confused'> {
    for (let i = 0; i < newer.length; i++) {
      const p = newer[i]!.plain && (await openQuietly(newer[i]!.plain!));
      if (p && p.ino === mineIno) {
        await p.handle.close();
        this.#curStamp = undefined;
        return 'confused';
      }
      if (p) return { log: { handle: p.handle, stamp: newer[i]!.stamp }, skip: i };
    }
    if (liveIno === undefined) return { skip: newer.length };
    const p = await openQuietly(this.#target.file);
    // Rotated again meanwhile: the file rotated in between would be skipped; look again next poll.
    if (p && p.ino !== liveIno) {
      await p.handle.close();
      return { skip: newer.length };
    }
    return p ? { log: { handle: p.handle }, skip: newer.length } : { skip: newer.length };
  }

  /**
   * Leaves cur for `next` (none: the container stopped): cur read to its end and closed, then
   * the compressed files `between` them, oldest first, then, from the next poll, next from its
   * start. Without a next file the answer ends (what is left of an open line with it).
   */
  async #moveOn(between: readonly RotatedLog[], next: NextLog | undefined): Promise<Step> {
    let more: boolean;
    try {
      more = await this.#read(this.#pos, (await this.#cur.stat()).size);
    } catch (err) {
      await next?.handle.close();
      throw err;
    }
    // Without a next file (the container stopped), cur stays closed: closing again is a no-op.
    await this.#cur.close();
    if (next) this.#cur = next.handle;
    if (!more) return 'end';
    if (!(await this.#readGzipped(between))) return 'end';
    if (!next) {
      await this.#flush(this.#lines.finish());
      return 'end';
    }
    this.#curStamp = next.stamp;
    this.#grace = undefined;
    this.#pos = 0;
    return 'moved';
  }

  /**
   * The rotated files `between`, decompressed, oldest first; a plain one that could not be
   * opened was compressed since the listing: its `.gz` (made before the plain one goes).
   * False when the answer is over.
   */
  async #readGzipped(between: readonly RotatedLog[]): Promise<boolean> {
    for (const r of between) {
      const gz = r.gz ?? `${r.plain}${COMPRESSED}`;
      let more = true;
      await eachGunzipped(gz, async (c) => (more = (await this.#flush(this.#lines.push(c))) && !this.#signal.aborted));
      if (!more) return false;
    }
    return true;
  }

  /** Waits for the next poll, or the client to go; false when it went. */
  async #sleep(): Promise<boolean> {
    await new Promise<void>((resolve) => {
      this.#wake = resolve;
      if (this.#signal.aborted) resolve();
      else void this.#clock.sleep(this.#pollMs).then(resolve, resolve);
    });
    this.#wake = undefined;
    return !this.#signal.aborted;
  }
}
