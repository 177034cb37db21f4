/**
 * Reading checkpoint archives, always streaming: an archive holds every memory page of a
 * container and may be gigabytes, so nothing here loads one into memory. One pass over
 * the file computes its sha256 and walks its tar headers (tar-stream) at the same time.
 *
 * - verifyArchive: the endpoint's check after the runtime says it succeeded (regular
 *   file, not a symlink, read to its end as a whole tar archive) and its chmod 0600.
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
import fsp from 'node:fs/promises';
import path from 'node:path';
import tar from 'tar-stream';
import { NodeletError, errorMessage, isNodeletError } from '../errors.js';
import { openRegularFile } from '../system/safe-file.js';
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
  /** The file's last `keepTail` bytes (when asked). */
  tail?: Buffer;
}

/**
 * Opens a regular file without following a symlink and without blocking: a FIFO, socket
 * or device named like an archive is refused at once, never opened for reading (an open
 * of a FIFO would wait for a writer forever). Throws NOT_FOUND/INVALID_ARGUMENT naming it.
 */
async function openRegular(file: string): Promise<fsp.FileHandle> {
  try {
    return (await openRegularFile(file, { what: 'checkpoint archive', noFollow: true })).handle;
  } catch (err) {
    if (isNodeletError(err, 'NOT_FOUND')) throw new NodeletError('NOT_FOUND', `${file}: no such file`, { file });
    const kind = isNodeletError(err) ? err.details.kind : undefined;
    if (kind === 'a symbolic link') throw new NodeletError('INVALID_ARGUMENT', `${file} is a symbolic link, not an archive`, { file });
    if (typeof kind === 'string') throw new NodeletError('INVALID_ARGUMENT', `${file} is not a regular file: it is ${kind}`, { file, kind });
    throw new NodeletError('INVALID_ARGUMENT', isNodeletError(err) ? err.message : `${file}: ${errorMessage(err)}`, { file }, { cause: err });
  }
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
async function scan(fh: fsp.FileHandle, keepTail = 0): Promise<ScanResult> {
  const hash = crypto.createHash('sha256');
  const entries: ArchiveEntry[] = [];
  const hints: Hints = {};
  let size = 0;
  let tail: Buffer = Buffer.alloc(0);
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
    if (keepTail > 0) tail = chunk.length >= keepTail ? chunk.subarray(chunk.length - keepTail) : Buffer.concat([tail, chunk]).subarray(-keepTail);
    // Keep hashing past a tar error; feed the parser only while it is healthy.
    if (!parserDone && !extract.write(chunk)) await Promise.race([new Promise<void>((r) => extract.once('drain', () => r())), done]);
  }
  if (!parserDone) {
    extract.end(undefined);
    await done;
  }
  if (tarError === undefined && entries.length === 0) tarError = size === 0 ? 'empty file' : 'no entries';
  return { size, sha256: hash.digest('hex'), entries, hints, ...(tarError !== undefined ? { tarError } : {}), ...(keepTail > 0 ? { tail: Buffer.from(tail) } : {}) };
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
  const fh = await openRegular(abs);
  try {
    const r = await scan(fh);
    if (r.tarError !== undefined) throw new NodeletError('INVALID_ARGUMENT', `${abs} is not a readable tar archive: ${r.tarError}`, { file: abs });
    return { path: abs, ...identify(parseArchiveName(path.basename(abs)), r.hints), size: r.size, sha256: r.sha256, entries: r.entries };
  } finally {
    await fh.close();
  }
}

/** A tar archive ends with two 512-byte zero blocks (POSIX); Go's archive/tar and tar-stream write them. */
const END_OF_ARCHIVE = 1024;

/**
 * The endpoint's check of what the runtime left at `file`, before it is answered 200:
 * a regular file (not a symlink, opened by the safe reader), read to its end as a tar
 * archive: every header and every member's data present (a cut in the middle of a member
 * is "truncated"), at least one entry, whole 512-byte blocks and the end-of-archive
 * marker (two zero blocks) last, so a cut on a member boundary is refused too. Then made
 * 0600 through the open descriptor, so the mode lands on the file that was checked.
 * Streams the file once (archives may be gigabytes). Throws INTERNAL saying what is wrong;
 * the caller removes the file.
 */
export async function verifyArchive(file: string): Promise<void> {
  let fh: fsp.FileHandle;
  try {
    fh = await openRegular(file);
  } catch (err) {
    throw new NodeletError('INTERNAL', `the runtime reported success but left no archive at ${file}: ${errorMessage(err)}`, { file }, { cause: err });
  }
  try {
    await fh.chmod(0o600);
    const problem = await wholeArchiveProblem(fh);
    if (problem) throw new NodeletError('INTERNAL', `the runtime reported success but ${file} is not a readable tar archive: ${problem}`, { file, problem });
  } finally {
    await fh.close();
  }
}

/** Reads the whole file as a tar archive; undefined when it is whole, else why not. */
async function wholeArchiveProblem(fh: fsp.FileHandle): Promise<string | undefined> {
  const r = await scan(fh, END_OF_ARCHIVE);
  if (r.size === 0) return 'empty file';
  if (r.tarError === 'Unexpected end of data') return `truncated: the archive ends inside a member or block (${r.size} bytes)`;
  if (r.tarError !== undefined) return r.tarError;
  if (r.size % 512 !== 0) return `truncated: ${r.size} bytes is not a whole number of 512-byte tar blocks`;
  if (!r.tail || r.tail.length < END_OF_ARCHIVE || r.tail.some((b) => b !== 0)) return `truncated: no end-of-archive marker after the last member (${r.size} bytes)`;
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
      fh = await openRegular(file);
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
