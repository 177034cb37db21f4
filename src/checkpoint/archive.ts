/**
 * Reading checkpoint archives: an archive holds every memory page of a container and may
 * be gigabytes, so nothing here loads one into memory.
 *
 * - verifyArchive: the endpoint's check after the runtime says it succeeded (regular
 *   file, not a symlink, a whole tar archive) and its chmod 0600. It walks the tar
 *   headers by their offsets and never reads the members' data (walkTar): its cost is
 *   per member, not per byte, because the endpoint answers only the archive's path.
 * - The two that report a sha256 (inspect, list) stream the file once, computing the
 *   hash and walking its tar headers (tar-stream) at the same time.
 * - inspectArchive: `nodelet checkpoint inspect <archive>`: identity, size, sha256, entries.
 * - ArchiveLister: `GET /checkpoints`: every archive in a directory, with a cache keyed by
 *   (inode, size, mtime) so that listing again does not hash again.
 *
 * Which pod/namespace/container an archive belongs to comes from its name; when the name
 * reads more than one way (see names.ts), the OCI spec annotations in the archive's
 * `spec.dump` (CRI-O: io.kubernetes.*, containerd: io.kubernetes.cri.*) or the
 * `config.dump` container name decide, then the caller's known pods, else the first
 * reading is reported with `ambiguous: true`.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import tar from 'tar-stream';
import { NodeletError, errorMessage, isNodeletError } from '../errors.js';
import { openRegularFile, openRegularFileSync } from '../system/safe-file.js';
import { compareNewestFirst, parseArchiveName, type ParsedArchiveName } from './names.js';

export interface ArchiveEntry {
  name: string;
  size: number;
  /** tar type: file, directory, symlink, ... */
  type: string;
}

export interface ArchiveInfo {
  /** Absolute path. */
  path: string;
  /** Absent when neither the name nor the archive's metadata tells. */
  pod?: string;
  namespace?: string;
  container?: string;
  /** RFC 3339, from the name (the time nodelet asked for the checkpoint). */
  time?: string;
  /** True when the name reads several ways and nothing decided between them. */
  ambiguous?: boolean;
  size: number;
  sha256: string;
  /** Set when the file is not a readable tar archive (it is listed anyway). */
  error?: string;
}

export interface ArchiveDetails extends ArchiveInfo {
  entries: ArchiveEntry[];
}

/** Hints about the owner read from inside an archive. */
interface Hints {
  pod?: string;
  namespace?: string;
  container?: string;
}

const DUMP_MAX = 4 * 1024 * 1024;

interface ScanResult {
  size: number;
  sha256: string;
  entries: ArchiveEntry[];
  hints: Hints;
  tarError?: string;
}

/**
 * Opens a regular file without following a symlink and without blocking: a FIFO, socket
 * or device named like an archive is refused at once, never opened for reading (an open
 * of a FIFO would wait for a writer forever). Throws NOT_FOUND/INVALID_ARGUMENT naming it.
 */
async function openRegular(file: string): Promise<{ handle: fsp.FileHandle; size: number }> {
  try {
    const { handle, stats } = await openRegularFile(file, { what: 'checkpoint archive', noFollow: true });
    return { handle, size: stats.size };
  } catch (err) {
    throw openFailure(file, err);
  }
}

/** openRegular's synchronous twin (verifyArchive: see there why). */
function openRegularSync(file: string): { fd: number; size: number } {
  try {
    const { fd, stats } = openRegularFileSync(file, { what: 'checkpoint archive', noFollow: true });
    return { fd, size: stats.size };
  } catch (err) {
    throw openFailure(file, err);
  }
}

/** The safe reader's refusal in an archive's words: NOT_FOUND or INVALID_ARGUMENT naming the file. */
function openFailure(file: string, err: unknown): NodeletError {
  if (isNodeletError(err, 'NOT_FOUND')) return new NodeletError('NOT_FOUND', `${file}: no such file`, { file });
  const kind = isNodeletError(err) ? err.details.kind : undefined;
  if (kind === 'a symbolic link') return new NodeletError('INVALID_ARGUMENT', `${file} is a symbolic link, not an archive`, { file });
  if (typeof kind === 'string') return new NodeletError('INVALID_ARGUMENT', `${file} is not a regular file: it is ${kind}`, { file, kind });
  return new NodeletError('INVALID_ARGUMENT', isNodeletError(err) ? err.message : `${file}: ${errorMessage(err)}`, { file }, { cause: err });
}

function hintsFromDump(name: string, data: Buffer, hints: Hints): void {
  let doc: unknown;
  try {
    doc = JSON.parse(data.toString('utf8'));
  } catch {
    return;
  }
  if (!doc || typeof doc !== 'object') return;
  const rec = doc as Record<string, unknown>;
  if (name === 'spec.dump') {
    const a = (rec.annotations ?? {}) as Record<string, unknown>;
    const pick = (...keys: string[]) => keys.map((k) => a[k]).find((v): v is string => typeof v === 'string' && v !== '');
    hints.namespace ??= pick('io.kubernetes.pod.namespace', 'io.kubernetes.cri.sandbox-namespace');
    hints.pod ??= pick('io.kubernetes.pod.name', 'io.kubernetes.cri.sandbox-name');
    hints.container ??= pick('io.kubernetes.container.name', 'io.kubernetes.cri.container-name');
  } else if (name === 'config.dump' && typeof rec.name === 'string') {
    // CRI-O writes its own long name (k8s_<container>_<pod>_...); only a plain name is a hint.
    if (/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(rec.name)) hints.container ??= rec.name;
  }
}

/** One streaming pass: sha256 + tar headers (+ the small metadata dumps). Never throws for bad tar data. */
async function scan(fh: fsp.FileHandle): Promise<ScanResult> {
  const hash = crypto.createHash('sha256');
  const entries: ArchiveEntry[] = [];
  const hints: Hints = {};
  let size = 0;
  let tarError: string | undefined;
  const extract = tar.extract();
  extract.on('entry', (header, stream, next) => {
    entries.push({ name: header.name, size: header.size ?? 0, type: header.type ?? 'file' });
    const base = path.posix.basename(header.name);
    const wanted = (base === 'spec.dump' || base === 'config.dump') && (header.size ?? 0) <= DUMP_MAX;
    const chunks: Buffer[] = [];
    stream.on('data', (c: unknown) => {
      if (wanted) chunks.push(c as Buffer);
    });
    stream.on('end', () => {
      if (wanted) hintsFromDump(base, Buffer.concat(chunks), hints);
      next();
    });
    stream.on('error', () => next());
  });
  let parserDone = false;
  const done = new Promise<void>((resolve) => {
    const finish = () => {
      parserDone = true;
      resolve();
    };
    extract.on('finish', finish);
    extract.on('close', finish);
    extract.on('error', (err: Error) => {
      tarError = err.message;
      finish();
    });
  });
  const rs = fh.createReadStream({ autoClose: false, highWaterMark: 1024 * 1024 });
  for await (const chunk of rs as AsyncIterable<Buffer>) {
    hash.update(chunk);
    size += chunk.length;
    // Keep hashing past a tar error; feed the parser only while it is healthy.
    if (!parserDone && !extract.write(chunk)) await Promise.race([new Promise<void>((r) => extract.once('drain', () => r())), done]);
  }
  if (!parserDone) {
    extract.end(undefined);
    await done;
  }
  if (tarError === undefined && entries.length === 0) tarError = size === 0 ? 'empty file' : 'no entries';
  return { size, sha256: hash.digest('hex'), entries, hints, ...(tarError !== undefined ? { tarError } : {}) };
}

/** Chooses the owner of an archive from its name, its hints and a caller's knowledge. */
function identify(parsed: ParsedArchiveName | undefined, hints: Hints, known?: (ns: string, pod: string, container: string) => boolean): Pick<ArchiveInfo, 'pod' | 'namespace' | 'container' | 'ambiguous' | 'time'> {
  if (!parsed) return { ...hints };
  let c = parsed.candidates;
  if (c.length > 1) {
    const byHints = c.filter((x) => (!hints.namespace || x.namespace === hints.namespace) && (!hints.container || x.container === hints.container));
    if (byHints.length > 0 && (hints.namespace || hints.container)) c = byHints;
  }
  if (c.length > 1 && known) {
    const byKnown = c.filter((x) => known(x.namespace, parsed.pod, x.container));
    if (byKnown.length > 0) c = byKnown;
  }
  const first = c[0]!;
  return { pod: parsed.pod, namespace: first.namespace, container: first.container, time: parsed.timestamp, ...(c.length > 1 ? { ambiguous: true } : {}) };
}

/**
 * `nodelet checkpoint inspect <archive>`: identity, size, sha256 and every entry of one
 * archive. Throws NOT_FOUND for a missing file and INVALID_ARGUMENT naming the file when
 * it is not a regular file or not a readable tar archive.
 */
export async function inspectArchive(file: string): Promise<ArchiveDetails> {
  const abs = path.resolve(file);
  const fh = (await openRegular(abs)).handle;
  try {
    const r = await scan(fh);
    if (r.tarError !== undefined) throw new NodeletError('INVALID_ARGUMENT', `${abs} is not a readable tar archive: ${r.tarError}`, { file: abs });
    return { path: abs, ...identify(parseArchiveName(path.basename(abs)), r.hints), size: r.size, sha256: r.sha256, entries: r.entries };
  } finally {
    await fh.close();
  }
}

/**
 * The endpoint's check of what the runtime left at `file`, before it is answered 200:
 * a regular file (not a symlink, opened by the safe reader), walked as a tar archive from
 * header to header (walkTar): every header valid, every member's data present (a cut in
 * the middle of a member is "truncated"), at least one entry, whole 512-byte blocks and
 * the end-of-archive marker (two zero blocks) last, so a cut on a member boundary is
 * refused too. Then made 0600 through the open descriptor, so the mode lands on the file
 * that was checked. Reads the headers only, never the members' data: an archive holds
 * every memory page of a container and may be gigabytes, and the endpoint answers only
 * its path. Throws INTERNAL saying what is wrong; the caller removes the file.
 *
 * Synchronous inside: a handful of syscalls per archive (the safe open's five, fchmod, a
 * read per 64 KiB window holding headers, close) on a file the runtime has just written
 * into nodelet's own 0700 directory. As thread-pool round trips they cost 0.1-0.4 ms each
 * on a loaded node (most of the endpoint's own time); as calls, microseconds each.
 */
export async function verifyArchive(file: string): Promise<void> {
  let opened: { fd: number; size: number };
  try {
    opened = openRegularSync(file);
  } catch (err) {
    throw new NodeletError('INTERNAL', `the runtime reported success but left no archive at ${file}: ${errorMessage(err)}`, { file }, { cause: err });
  }
  const { fd, size } = opened;
  try {
    fs.fchmodSync(fd, 0o600);
    const problem = walkTar((buf, position) => fs.readSync(fd, buf, 0, buf.length, position), size);
    if (problem) throw new NodeletError('INTERNAL', `the runtime reported success but ${file} is not a readable tar archive: ${problem}`, { file, problem });
  } finally {
    fs.closeSync(fd);
  }
}

/** Bytes read at a time by walkTar: the headers of a run of small members come from one read. */
const WALK_WINDOW = 64 * 1024;
/** Largest PAX or GNU long-name header read (tar-stream's limit). */
const LONG_HEADER_MAX = 4 * 1024 * 1024;
const BLOCK = 512;

/** Reads into `buf` from `position`; answers the bytes read (0 at the end). */
export type ReadAt = (buf: Buffer, position: number) => number;

/** Positional reads of a file of known size through one window of WALK_WINDOW bytes. */
class WindowReader {
  #buf = Buffer.alloc(0);
  #start = 0;
  constructor(
    private readonly readAt: ReadAt,
    private readonly size: number,
  ) {}

  /** `len` bytes at `off`, or undefined when the file ends (or shrank) before them. */
  read(off: number, len: number): Buffer | undefined {
    if (off >= this.#start && off + len <= this.#start + this.#buf.length) return this.#buf.subarray(off - this.#start, off - this.#start + len);
    const want = Math.min(Math.max(len, WALK_WINDOW), this.size - off);
    if (want < len) return undefined;
    const buf = Buffer.allocUnsafe(want);
    let got = 0;
    while (got < want) {
      const n = this.readAt(buf.subarray(got), off + got);
      if (n === 0) break;
      got += n;
    }
    this.#buf = buf.subarray(0, got);
    this.#start = off;
    return got >= len ? this.#buf.subarray(0, len) : undefined;
  }
}

/** The header checksum as tar computes it (the checksum field counted as spaces). */
function headerChecksum(h: Buffer): number {
  let sum = 8 * 32;
  for (let i = 0; i < 148; i++) sum += h[i]!;
  for (let i = 156; i < BLOCK; i++) sum += h[i]!;
  return sum;
}

/** A numeric header field: octal text (leading spaces or NULs, ended by space or NUL), or GNU base-256 (first byte 0x80). NaN when neither. */
function headerNumber(h: Buffer, off: number, len: number): number {
  const f = h.subarray(off, off + len);
  if (f[0] === 0x80) {
    let n = 0;
    for (let i = 1; i < f.length; i++) n = n * 256 + f[i]!;
    return n;
  }
  if (f[0]! & 0x80) return NaN; // negative base-256: no size or checksum is negative
  let i = 0;
  while (i < f.length && (f[i] === 0x20 || f[i] === 0)) i++;
  let end = i;
  while (end < f.length && f[end] !== 0x20 && f[end] !== 0) end++;
  if (end === i) return 0;
  const text = f.toString('latin1', i, end);
  return /^[0-7]+$/.test(text) ? parseInt(text, 8) : NaN;
}

/** The `key=value` records of a PAX extended header (`<len> key=value\n` each). */
function paxRecords(data: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let rest = data;
  while (rest.length > 0) {
    const sp = rest.indexOf(0x20);
    const len = sp > 0 ? parseInt(rest.toString('latin1', 0, sp), 10) : NaN;
    if (!(len > sp + 1) || len > rest.length) break;
    const rec = rest.toString('utf8', sp + 1, len - 1);
    const eq = rec.indexOf('=');
    if (eq < 0) break;
    out[rec.slice(0, eq)] = rec.slice(eq + 1);
    rest = rest.subarray(len);
  }
  return out;
}

const USTAR_MAGIC = Buffer.from('ustar\0', 'latin1');
const GNU_MAGIC = Buffer.from('ustar  \0', 'latin1');
const padded = (n: number) => Math.ceil(n / BLOCK) * BLOCK;

/**
 * Walks a tar archive of `size` bytes from header to header, reading the headers (and PAX
 * or GNU long-name headers, which may change the next member's size) and skipping every
 * member's data by its size. Judges what tar-stream's full read judged (valid checksums,
 * ustar or GNU headers, zero blocks skipped, a PAX `size` applied), plus the ends: every
 * member whole, at least one entry, the last two blocks zero. Undefined when the archive
 * is whole, else why not.
 */
export function walkTar(readAt: ReadAt, size: number): string | undefined {
  if (size === 0) return 'empty file';
  const r = new WindowReader(readAt, size);
  const truncated = `truncated: the archive ends inside a member or block (${size} bytes)`;
  let off = 0;
  let entries = 0;
  let zeroRun = 0;
  let paxGlobal: Record<string, string> = {};
  let pax: Record<string, string> | undefined;
  while (off < size) {
    const h = r.read(off, BLOCK);
    if (!h) return truncated;
    const at = off;
    off += BLOCK;
    const sum = headerChecksum(h);
    // Nothing but the checksum field set: an empty block (the end-of-archive marker is two).
    if (sum === 8 * 32) {
      zeroRun++;
      continue;
    }
    zeroRun = 0;
    if (sum !== headerNumber(h, 148, 8)) return `no valid tar header at byte ${at} (checksum mismatch)`;
    const magic = h.subarray(257, 265);
    if (!magic.subarray(0, 6).equals(USTAR_MAGIC) && !magic.equals(GNU_MAGIC)) return `no valid tar header at byte ${at} (unknown format)`;
    let memberSize = headerNumber(h, 124, 12);
    if (!(memberSize >= 0)) return `invalid member size in the tar header at byte ${at}`;
    const type = h[156]!;
    // x: PAX header, g: PAX global header, L/K: GNU long name/link name.
    if (type === 0x78 || type === 0x67 || type === 0x4c || type === 0x4b) {
      if (memberSize > LONG_HEADER_MAX) return `the extended header at byte ${at} is ${memberSize} bytes, over ${LONG_HEADER_MAX}`;
      const data = r.read(off, memberSize);
      if (!data) return truncated;
      if (type === 0x78) pax = { ...paxGlobal, ...paxRecords(data) };
      else if (type === 0x67) paxGlobal = paxRecords(data);
      off += padded(memberSize);
      continue;
    }
    entries++;
    if (pax?.size !== undefined) memberSize = /^[0-9]+$/.test(pax.size) ? Number(pax.size) : NaN;
    pax = undefined;
    if (!(memberSize >= 0)) return `invalid member size in the PAX header before byte ${at}`;
    const nameEnd = h.indexOf(0);
    const slashName = h[(nameEnd < 0 || nameEnd > 100 ? 100 : nameEnd) - 1] === 0x2f;
    // A directory's size is no data (as tar-stream reads it); old tars mark one by a trailing slash.
    const directory = type === 0x35 || ((type === 0 || type === 0x30) && slashName);
    if (!directory) off += padded(memberSize);
    if (off > size) return truncated;
  }
  if (entries === 0) return 'no entries';
  if (zeroRun < 2) return `truncated: no end-of-archive marker after the last member (${size} bytes)`;
  return undefined;
}

/** Archives listed in a directory, hashed once per (inode, size, mtime). One per directory. */
export class ArchiveLister {
  readonly #cache = new Map<string, { key: string; info: Omit<ArchiveInfo, 'pod' | 'namespace' | 'container' | 'ambiguous' | 'time'>; hints: Hints }>();

  constructor(readonly dir: string) {}

  /**
   * Every archive-named regular file in the directory, newest first. `skip` hides names
   * being written right now; `known` helps read ambiguous names. A missing directory lists
   * nothing. Files are hashed one at a time to bound the IO.
   */
  async list(o: { skip?: (name: string) => boolean; known?: (ns: string, pod: string, container: string) => boolean } = {}): Promise<ArchiveInfo[]> {
    let names: string[];
    try {
      names = await fsp.readdir(this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw new NodeletError('INTERNAL', `listing ${this.dir}: ${errorMessage(err)}`, { dir: this.dir }, { cause: err });
    }
    const out: { info: ArchiveInfo; parsed: ParsedArchiveName }[] = [];
    const seen = new Set<string>();
    for (const name of names) {
      const parsed = parseArchiveName(name);
      if (!parsed || o.skip?.(name)) continue;
      const file = path.join(this.dir, name);
      const info = await this.#describe(file, parsed, o.known);
      if (!info) continue;
      seen.add(file);
      out.push({ info, parsed });
    }
    for (const k of this.#cache.keys()) if (!seen.has(k)) this.#cache.delete(k);
    return out.sort((a, b) => compareNewestFirst(a.parsed, b.parsed)).map((x) => x.info);
  }

  async #describe(file: string, parsed: ParsedArchiveName, known?: (ns: string, pod: string, container: string) => boolean): Promise<ArchiveInfo | undefined> {
    let fh: fsp.FileHandle;
    try {
      fh = (await openRegular(file)).handle;
    } catch {
      return undefined; // vanished, a symlink or not a file: not an archive to list
    }
    try {
      const st = await fh.stat();
      const key = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
      let hit = this.#cache.get(file);
      if (!hit || hit.key !== key) {
        const r = await scan(fh);
        hit = { key, info: { path: file, size: r.size, sha256: r.sha256, ...(r.tarError !== undefined ? { error: r.tarError } : {}) }, hints: r.hints };
        this.#cache.set(file, hit);
      }
      return { path: file, ...identify(parsed, hit.hints, known), size: hit.info.size, sha256: hit.info.sha256, ...(hit.info.error !== undefined ? { error: hit.info.error } : {}) };
    } finally {
      await fh.close();
    }
  }
}
