/**
 * Termination messages, as the kubelet makes them (kuberuntime makeMounts,
 * getTerminationMessage, readLastStringFromContainerLogs; the status manager's
 * normalizeStatus).
 *
 * Before each container is created, an empty file `<root-dir>/pods/<uid>/containers/<name>/<id>`
 * (`id` 8 random hex digits, a new file per instance) is made, mode 0666 whatever the umask
 * (a non-root container must be able to write it), and bind-mounted read-write at the
 * container's `terminationMessagePath` (default `/dev/termination-log`); no path, no file.
 * It goes with the pod's directory.
 *
 * When the container has exited, its message is read back through the runtime's record of
 * the container: the host path of the mount whose container path is the one in its
 * `io.kubernetes.container.terminationMessagePath` annotation. What is read is the last
 * 4096 bytes of that file (the kubelet's `MaxContainerTerminationMessageLength`, read from
 * the end as its `tail.ReadAtMost`), as a regular file only and never through a symbolic
 * link: the container wrote it and may have written anything. With
 * `terminationMessagePolicy: FallbackToLogsOnError`, a non-zero exit (not
 * `ContainerCannotRun`) and nothing in the file (or no file), the message is the end of the
 * container's log instead: its last 80 lines (stdout and stderr as the runtime interleaved
 * them in the file), at most the last 2048 bytes of their text.
 * The message follows the runtime's own message, if any, after `": "`.
 *
 * In the pod's status each terminated state's message is then cut to 12 KiB divided by the
 * number of containers (init and regular) of the pod, as the kubelet's status manager does
 * (cut here at a character boundary, where the kubelet cuts bytes and the API server then
 * replaces a split character by U+FFFD).
 */
import { randomBytes } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { ContainerState, Pod, PodStatus } from 'kubernetes-types/core/v1.js';
import { errorMessage, isNodeletError } from '../../errors.js';
import { CriLogDecoder, LOG_CHUNK, tailStart } from '../../runtime/cri-log.js';
import { openRegularFile, readFailure } from '../../system/safe-file.js';
import { terminationLogPath } from '../../system/root-dir.js';
import { podDir } from '../volumes/volumes.js';

/** The kubelet's limits (pkg/kubelet/container). */
export const MAX_CONTAINER_TERMINATION_MESSAGE_LENGTH = 4096;
export const MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH = 2048;
export const MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LINES = 80;
export const MAX_POD_TERMINATION_MESSAGE_LENGTH = 12 * 1024;

/** The API's default `terminationMessagePath`. */
export const DEFAULT_TERMINATION_MESSAGE_PATH = '/dev/termination-log';

/** At most this much of a log is decoded for the fallback: the last 80 lines, unless one line is longer than this. */
const LOG_TAIL_READ_MAX = 4 * 1024 * 1024;

/**
 * Makes the empty termination-log file of a container instance and returns its path:
 * `<root-dir>/pods/<uid>/containers/<name>/<8 hex digits>`, mode 0666. Never reuses a file
 * (O_EXCL, no symbolic link followed).
 */
export async function createTerminationLogFile(rootDir: string, podUid: string, containerName: string): Promise<string> {
  podDir(rootDir, podUid); // checks the UID (it becomes a path)
  const dir = path.dirname(terminationLogPath(rootDir, podUid, containerName, 'x'));
  await fsp.mkdir(dir, { recursive: true, mode: 0o750 });
  for (let attempt = 0; ; attempt++) {
    const file = terminationLogPath(rootDir, podUid, containerName, randomBytes(4).toString('hex'));
    let h: fsp.FileHandle;
    try {
      h = await fsp.open(file, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o666);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST' && attempt < 5) continue;
      throw err;
    }
    try {
      // The umask took bits off the mode open(2) was given: 0666 is what the container needs.
      await h.chmod(0o666);
    } finally {
      await h.close();
    }
    return file;
  }
}

/**
 * The last `maxBytes` of a file, read as a regular file without following a symbolic link;
 * an empty buffer for an empty file. Errors are NodeletErrors (NOT_FOUND when missing).
 */
export async function readTail(file: string, maxBytes: number, what: string): Promise<Buffer> {
  const { handle, stats } = await openRegularFile(file, { what, noFollow: true });
  try {
    const n = Math.min(stats.size, maxBytes);
    if (n <= 0) return Buffer.alloc(0);
    const buf = Buffer.alloc(n);
    let got = 0;
    while (got < n) {
      const { bytesRead } = await handle.read(buf, got, n - got, stats.size - n + got);
      if (bytesRead === 0) break; // shrank meanwhile
      got += bytesRead;
    }
    return buf.subarray(0, got);
  } finally {
    await handle.close();
  }
}

/**
 * The end of a container's CRI log as the kubelet's fallback reads it: the text of its last
 * 80 lines (a partial line joined with the rest of it, each line ending in a newline), of
 * which the last 2048 bytes. Read in chunks; only a regular file, no symbolic link.
 */
export async function readLogTail(logPath: string): Promise<string> {
  const { handle, stats } = await openRegularFile(logPath, { what: 'container log', noFollow: true });
  try {
    const size = stats.size;
    const start = Math.max(await tailStart(handle, size, MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LINES), size - LOG_TAIL_READ_MAX);
    const keep = new LastBytes(MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH);
    const dec = new CriLogDecoder();
    const take = (pieces: ReturnType<typeof dec.push>) => {
      for (const p of pieces) {
        keep.push(p.text);
        if (p.end) keep.push(NEWLINE);
      }
    };
    for (let pos = start; pos < size; ) {
      const buf = Buffer.allocUnsafe(Math.min(LOG_CHUNK, size - pos));
      const { bytesRead } = await handle.read(buf, 0, buf.length, pos);
      if (bytesRead === 0) break;
      pos += bytesRead;
      take(dec.push(buf.subarray(0, bytesRead)));
    }
    take(dec.finish());
    return keep.toString();
  } finally {
    await handle.close();
  }
}

const NEWLINE = Buffer.from('\n');

/** The last `max` bytes pushed (the kubelet's circbuf). */
class LastBytes {
  readonly #buf: Buffer;
  #len = 0;
  constructor(readonly max: number) {
    this.#buf = Buffer.alloc(max);
  }
  push(b: Buffer): void {
    if (b.length >= this.max) {
      b.copy(this.#buf, 0, b.length - this.max);
      this.#len = this.max;
      return;
    }
    const overflow = this.#len + b.length - this.max;
    if (overflow > 0) {
      this.#buf.copy(this.#buf, 0, overflow, this.#len);
      this.#len -= overflow;
    }
    b.copy(this.#buf, this.#len);
    this.#len += b.length;
  }
  toString(): string {
    return this.#buf.toString('utf8', 0, this.#len);
  }
}

/** What the message of an exited container is made from (its CRI ContainerStatus). */
export interface ExitedContainer {
  exitCode: number;
  /** The runtime's reason (`Completed`, `Error`, `OOMKilled`, `ContainerCannotRun`). */
  reason: string;
  /** The runtime's own message. */
  message: string;
  /** `io.kubernetes.container.terminationMessagePath` / `...Policy` annotations. */
  terminationMessagePath: string | undefined;
  terminationMessagePolicy: string | undefined;
  mounts: readonly { containerPath: string; hostPath: string }[];
  /** The container's CRI log file. */
  logPath: string;
}

/** How the files are read (tests replace it). */
export interface TerminationMessageIo {
  readFile(file: string): Promise<Buffer>;
  readLog(logPath: string): Promise<string>;
}

export const defaultTerminationMessageIo: TerminationMessageIo = {
  readFile: (file) => readTail(file, MAX_CONTAINER_TERMINATION_MESSAGE_LENGTH, 'termination log'),
  readLog: readLogTail,
};

/**
 * The message of an exited container: the runtime's message, then (after ": ") what the
 * container left in its termination-log file or, per FallbackToLogsOnError, its log's end.
 * Never throws: a file that cannot be read gives a message saying so, as the kubelet's.
 */
export async function terminationMessage(c: ExitedContainer, io: TerminationMessageIo = defaultTerminationMessageIo): Promise<string> {
  const fallback = c.terminationMessagePolicy === 'FallbackToLogsOnError' && c.exitCode !== 0 && c.reason !== 'ContainerCannotRun';
  let text = '';
  let checkLogs = fallback;
  const at = c.terminationMessagePath ?? '';
  const mount = at === '' ? undefined : c.mounts.find((m) => m.containerPath === at);
  if (mount) {
    try {
      text = (await io.readFile(mount.hostPath)).toString('utf8');
      checkLogs = fallback && text.length === 0;
    } catch (err) {
      if (!isNodeletError(err, 'NOT_FOUND')) {
        text = `Error on reading termination log ${mount.hostPath}: ${readFailure(err)}`;
        checkLogs = false;
      }
    }
  }
  if (checkLogs) {
    try {
      text = c.logPath ? await io.readLog(c.logPath) : '';
    } catch (err) {
      text = `Error on reading termination message from logs: ${isNodeletError(err) ? readFailure(err) : errorMessage(err)}`;
    }
  }
  if (text.length === 0) return c.message;
  return c.message ? `${c.message}: ${text}` : text;
}

/**
 * The status manager's cut: each terminated state's message (state and lastState, init,
 * regular and ephemeral containers) at most 12 KiB divided by the number of the pod's init
 * and regular containers,
 * in UTF-8 bytes. Changes `status` in place and returns it.
 */
export function limitTerminationMessages(pod: Pod, status: PodStatus): PodStatus {
  const n = (pod.spec?.containers?.length ?? 0) + (pod.spec?.initContainers?.length ?? 0);
  const perContainer = n > 0 ? Math.floor(MAX_POD_TERMINATION_MESSAGE_LENGTH / n) : MAX_POD_TERMINATION_MESSAGE_LENGTH;
  const cut = (s: ContainerState | undefined) => {
    const t = s?.terminated;
    if (t?.message !== undefined && Buffer.byteLength(t.message) > perContainer) t.message = utf8Prefix(t.message, perContainer);
  };
  // Ephemeral containers' too, though not counted in the share (the kubelet's normalizeStatus).
  for (const cs of [...(status.initContainerStatuses ?? []), ...(status.containerStatuses ?? []), ...(status.ephemeralContainerStatuses ?? [])]) {
    cut(cs.state);
    cut(cs.lastState);
  }
  return status;
}

/** The longest prefix of `s` of at most `maxBytes` UTF-8 bytes that ends on a character boundary. */
export function utf8Prefix(s: string, maxBytes: number): string {
  const b = Buffer.from(s, 'utf8');
  if (b.length <= maxBytes) return s;
  let end = maxBytes;
  // Back off continuation bytes (10xxxxxx) so no character is split.
  while (end > 0 && (b[end]! & 0xc0) === 0x80) end--;
  return b.toString('utf8', 0, end);
}
