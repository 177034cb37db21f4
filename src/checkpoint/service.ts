/**
 * `POST /checkpoint/<namespace>/<pod>/<container>` and `GET /checkpoints`.
 *
 * The checkpoint, in order (each step answers before the next runs):
 * 1. path segments validated as names (400 naming the segment) and `timeout` parsed
 *    (400 naming `timeout`) before any lookup, so no request can name a path outside
 *    `<rootDir>/checkpoints`;
 * 2. the pod among the node's pods (404 `pods "<pod>" not found in namespace ...`), the
 *    container among its containers, init containers and ephemeral containers (404);
 * 3. per container (pod UID + name) one checkpoint at a time; different containers run
 *    in parallel;
 * 4. the running container's ID: the one the pod's status shows running (the pod
 *    manager's last look at the runtime, at most a relist old), else from the runtime by
 *    the kubelet's labels (not running: 500, as the kubelet). Taken from the status, it
 *    spares a CRI ListContainers per request; if the runtime then fails the checkpoint,
 *    the runtime is listed and, when it runs another container of that name now (a
 *    restart the status had not shown yet), the checkpoint is retried once with it;
 * 5. `<rootDir>/checkpoints` ensured a real directory with mode 0700 (created so, or
 *    tightened to 0700 with a log line: archives hold every memory page of a container);
 * 6. a name that exists neither on disk nor in flight (same second: `-1`, `-2`...), so
 *    the runtime is always told a path that does not exist yet and no archive is ever
 *    overwritten whether the runtime truncates, renames over, or refuses existing files.
 *    Within a second the suffix only grows, above both what the directory holds and what
 *    this process last issued for the container (retention may have deleted that), so each
 *    answer names a distinct path and the new archive always ranks newest of its second.
 *    One nodelet per root dir is guaranteed by the lock file, so the in-process
 *    reservation is enough;
 * 7. CRI CheckpointContainer with the timeout; the call's deadline is timeout + margin
 *    when a timeout is given, else runtimeRequestTimeout;
 * 8. the archive verified (regular file, a whole tar archive walked header by header
 *    without reading the members' data: a truncated, empty or non-tar file is 500 with
 *    the reason) and made 0600; only then 200 `{"items":["<path>"]}`. A failure removes
 *    what the runtime may have left there.
 * 9. retention (optional, keep the newest N of this container) after a success: the new
 *    archive and the newest N-1 others stay; the archive being answered is never removed.
 *
 * Runtime failures: every error from the runtime during a checkpoint becomes INTERNAL (500)
 * here, in `runtimeFailure`, with the kubelet's wording `checkpointing of ns/pod/container
 * failed (<runtime message>)`: the spec wants 500 for a failing or non-implementing
 * runtime, whatever its gRPC code. This is the only place that rule is applied.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError, errorMessage, isNodeletError } from '../errors.js';
import type { Clock } from '../clock.js';
import { silentLogger, type Logger } from '../log.js';
import type { RuntimeService } from '../runtime/types.js';
import { ArchiveLister, verifyArchive, type ArchiveInfo } from './archive.js';
import { archiveBelongsTo, archiveSecond, archivesBeyondRetentionAfter, chooseArchiveName, nextArchiveSeq, parseArchiveName, parseTimeoutParam, validateSegment, type IssuedSeq } from './names.js';
import { LABEL_CONTAINER_NAME, LABEL_POD_UID } from '../pods/cri/labels.js';
import type { PodLookup } from '../pods/sources/lookup.js';

export type { PodLookup } from '../pods/sources/lookup.js';

/** What the endpoint needs of the CRI runtime. */
export type CheckpointRuntime = Pick<RuntimeService, 'listContainers' | 'checkpointContainer'>;


/** Longest deadline a timer can hold (~24.8 days). */
const MAX_DEADLINE_MS = 2 ** 31 - 1;

export interface CheckpointServiceOptions {
  /** `--root-dir`; archives go to `<rootDir>/checkpoints`. */
  rootDir: string;
  runtime: CheckpointRuntime;
  pods: PodLookup;
  /** runtimeRequestTimeout in ms: the call's deadline when no timeout is asked. */
  runtimeRequestTimeoutMs: number;
  /** Added to a requested timeout for the call's deadline, so the runtime can report its own timeout. Default 5000. */
  deadlineMarginMs?: number;
  /** Keep the newest N archives per container (`--checkpoint-retention`); 0/undefined: keep all. */
  retention?: number;
  clock: Clock;
  logger?: Logger;
}

export interface CheckpointRequest {
  /** Raw (percent-encoded) path segments. */
  namespace: string | undefined;
  pod: string | undefined;
  container: string | undefined;
  /** Every value of the `timeout` query parameter. */
  timeout: string[];
  /** Who asked, for the log. */
  user?: string;
  /** The client's connection: its closing cancels the runtime calls (as the kubelet's request context). */
  signal?: AbortSignal;
}

/** The deadline of the CRI call for a requested timeout (seconds; 0 = runtime default). */
export function checkpointDeadlineMs(timeoutSec: number, runtimeRequestTimeoutMs: number, marginMs: number): number {
  return Math.min(MAX_DEADLINE_MS, timeoutSec > 0 ? timeoutSec * 1000 + marginMs : runtimeRequestTimeoutMs);
}

/** Finds a container by name in containers, then init containers, then ephemeral containers. */
export function podHasContainer(pod: Pod, name: string): boolean {
  const spec = pod.spec;
  return [spec?.containers ?? [], spec?.initContainers ?? [], spec?.ephemeralContainers ?? []].some((list) => list.some((c) => c.name === name));
}

/** The ID of the container `name` the pod's status shows running (`containerd://<id>`), or undefined. */
export function statusContainerId(pod: Pod, name: string): string | undefined {
  const st = pod.status;
  for (const list of [st?.containerStatuses, st?.initContainerStatuses, st?.ephemeralContainerStatuses]) {
    const c = list?.find((x) => x.name === name);
    if (c) return c.state?.running && c.containerID ? c.containerID.replace(/^[a-z0-9-]+:\/\//, '') || undefined : undefined;
  }
  return undefined;
}

/** True when anything (even a dangling symlink) has this name. */
function existsNoFollow(p: string): boolean {
  try {
    fs.lstatSync(p);
    return true;
  } catch {
    return false;
  }
}

/** lstat, or undefined when nothing has this name; other errors thrown. */
function lstatOrUndefined(p: string): fs.Stats | undefined {
  try {
    return fs.lstatSync(p);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** The spec's 500 for anything the runtime did wrong during a checkpoint (see the file comment). */
function runtimeFailure(ns: string, pod: string, container: string, err: unknown): NodeletError {
  const detail = errorMessage(err);
  const runtime = isNodeletError(err) ? err.details : {};
  return new NodeletError('INTERNAL', `checkpointing of ${ns}/${pod}/${container} failed (${detail})`, { ...runtime, runtimeCode: isNodeletError(err) ? err.code : undefined }, { cause: err });
}

/** The checkpoint endpoint's logic; the HTTPS server calls it. Built once by the composition root. */
export class CheckpointService {
  readonly dir: string;
  readonly #o: CheckpointServiceOptions;
  readonly #log: Logger;
  readonly #lister: ArchiveLister;
  /** Names handed to the runtime and not finished yet. */
  readonly #inFlight = new Set<string>();
  /** Per-container tail of the queue of checkpoints. */
  readonly #locks = new Map<string, Promise<void>>();
  /** Per container (pod UID/name + container), the last suffix issued; only this second's entries are kept. */
  readonly #issued = new Map<string, IssuedSeq>();

  constructor(o: CheckpointServiceOptions) {
    this.#o = o;
    this.dir = path.join(o.rootDir, 'checkpoints');
    this.#log = (o.logger ?? silentLogger()).child({ component: 'checkpoint' });
    this.#lister = new ArchiveLister(this.dir);
  }

  /** Handles one checkpoint request; resolves with the archive path or throws NodeletError. */
  async checkpoint(req: CheckpointRequest): Promise<{ items: string[] }> {
    const namespace = validateSegment('namespace', req.namespace);
    const podName = validateSegment('pod', req.pod);
    const containerName = validateSegment('container', req.container);
    const timeoutSec = parseTimeoutParam(req.timeout);

    const pod = this.#o.pods.getPod(namespace, podName);
    if (!pod) throw new NodeletError('NOT_FOUND', `pods "${podName}" not found in namespace "${namespace}"`, { namespace, pod: podName });
    if (!podHasContainer(pod, containerName)) {
      throw new NodeletError('NOT_FOUND', `container "${containerName}" not found in pod "${namespace}/${podName}"`, { namespace, pod: podName, container: containerName });
    }
    const uid = pod.metadata?.uid ?? '';
    const key = `${uid || `${namespace}/${podName}`}/${containerName}`;
    const known = uid ? statusContainerId(pod, containerName) : undefined;
    return this.#serialized(key, () => this.#run(key, namespace, podName, containerName, uid, known, timeoutSec, req.user, req.signal));
  }

  /** `GET /checkpoints`: archives newest first, without those being written right now. */
  async list(): Promise<ArchiveInfo[]> {
    const known = new Set(this.#o.pods.listPods().flatMap((p) => {
      const ns = p.metadata?.namespace ?? 'default';
      const name = p.metadata?.name ?? '';
      const s = p.spec;
      return [...(s?.containers ?? []), ...(s?.initContainers ?? []), ...(s?.ephemeralContainers ?? [])].map((c) => `${ns}/${name}/${c.name}`);
    }));
    return this.#lister.list({ skip: (n) => this.#inFlight.has(n), known: (ns, pod, c) => known.has(`${ns}/${pod}/${c}`) });
  }

  async #serialized<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#locks.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = prev.then(() => mine);
    this.#locks.set(key, tail);
    await prev;
    try {
      return await fn();
    } finally {
      release();
      if (this.#locks.get(key) === tail) this.#locks.delete(key);
    }
  }

  /** The newest running container of that name in the pod, as the runtime lists it now. */
  async #runningContainer(ns: string, podName: string, containerName: string, uid: string, signal: AbortSignal | undefined): Promise<string> {
    let running;
    try {
      running = uid ? await this.#o.runtime.listContainers({ state: 'CONTAINER_RUNNING', labelSelector: { [LABEL_POD_UID]: uid, [LABEL_CONTAINER_NAME]: containerName } }, signal ? { signal } : undefined) : [];
    } catch (err) {
      throw runtimeFailure(ns, podName, containerName, err);
    }
    const id = running.sort((a, b) => b.createdAt - a.createdAt)[0]?.id;
    if (!id) throw runtimeFailure(ns, podName, containerName, `container "${containerName}" of pod "${ns}/${podName}" is not running`);
    return id;
  }

  async #run(key: string, ns: string, podName: string, containerName: string, uid: string, known: string | undefined, timeoutSec: number, user: string | undefined, signal: AbortSignal | undefined): Promise<{ items: string[] }> {
    const started = this.#o.clock.now();
    // A client gone while this request waited for an earlier checkpoint of the container: nothing to do.
    if (signal?.aborted) throw new NodeletError('CANCELLED', 'the client closed the connection before the checkpoint started', {});
    let containerId = known ?? (await this.#runningContainer(ns, podName, containerName, uid, signal));

    this.#ensureDir();
    const { name, issued } = await this.#reserveName(key, podName, ns, containerName);
    const location = path.join(this.dir, name);
    const call = (id: string) =>
      this.#o.runtime.checkpointContainer(
        { containerId: id, location, timeoutSec },
        { deadlineMs: checkpointDeadlineMs(timeoutSec, this.#o.runtimeRequestTimeoutMs, this.#o.deadlineMarginMs ?? 5000), ...(signal ? { signal } : {}) },
      );
    try {
      try {
        await call(containerId);
      } catch (err) {
        // The status's ID may be a relist old: ask the runtime which container runs now.
        const now = known === undefined || signal?.aborted ? undefined : await this.#runningContainer(ns, podName, containerName, uid, signal).catch(() => undefined);
        if (now === undefined || now === containerId) throw runtimeFailure(ns, podName, containerName, err);
        this.#log.info({ namespace: ns, pod: podName, container: containerName, stale: containerId, containerId: now, err: errorMessage(err) }, 'checkpoint of the container the status showed failed; retrying with the one running now');
        // The runtime is told a path that does not exist, as for the first call.
        await fsp.rm(location, { force: true }).catch(() => {
          throw runtimeFailure(ns, podName, containerName, err);
        });
        containerId = now;
        try {
          await call(containerId);
        } catch (err2) {
          throw runtimeFailure(ns, podName, containerName, err2);
        }
      }
      await verifyArchive(location);
    } catch (err) {
      // Whatever the runtime left half-written holds memory pages: do not keep it.
      await fsp.rm(location, { force: true }).catch(() => undefined);
      this.#log.warn({ namespace: ns, pod: podName, container: containerName, user, err: errorMessage(err) }, 'checkpoint failed');
      throw err;
    } finally {
      this.#inFlight.delete(name);
    }
    // Only an archive that exists counts: a failed one's name was removed and may be used again.
    this.#issued.set(key, issued);
    this.#log.info({ namespace: ns, pod: podName, container: containerName, containerId, user, archive: location, ms: this.#o.clock.now() - started }, 'checkpoint written');
    await this.#applyRetention(podName, ns, containerName, name);
    return { items: [location] };
  }

  /** Picks the archive name (see step 6 of the file comment) and marks it in flight. */
  async #reserveName(key: string, podName: string, ns: string, containerName: string): Promise<{ name: string; issued: IssuedSeq }> {
    const ms = this.#o.clock.now();
    const second = archiveSecond(ms);
    // Only the current second's entries matter: older ones can never collide again.
    for (const [k, v] of this.#issued) if (v.second !== second) this.#issued.delete(k);
    const last = this.#issued.get(key);
    // The directory is read once per container and second: after this process issued a name
    // in this second, only it can have added names of this container and second (one
    // nodelet per root dir), and the issued suffix is above all of them. The probe below
    // still skips any name that exists.
    let existing: string[] = [];
    if (!last) {
      try {
        existing = await fsp.readdir(this.dir);
      } catch (err) {
        throw new NodeletError('INTERNAL', `checkpoint directory ${this.dir}: ${errorMessage(err)}`, { dir: this.dir }, { cause: err });
      }
    }
    const fromSeq = nextArchiveSeq([...existing, ...this.#inFlight], podName, ns, containerName, ms, last);
    const name = chooseArchiveName(podName, ns, containerName, ms, (n) => this.#inFlight.has(n) || existsNoFollow(path.join(this.dir, n)), fromSeq);
    this.#inFlight.add(name);
    return { name, issued: { second, seq: parseArchiveName(name)?.seq ?? fromSeq } };
  }

  /**
   * Synchronous, as the name probe and the archive check: one lstat of nodelet's own
   * directory when it exists (every request but the first), microseconds as a call against
   * a thread-pool round trip of 0.1-0.4 ms on a loaded node.
   */
  #ensureDir(): void {
    try {
      let st = lstatOrUndefined(this.dir);
      if (!st) {
        fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
        st = fs.lstatSync(this.dir);
      }
      if (!st.isDirectory()) throw new Error('exists and is not a directory');
      if ((st.mode & 0o077) !== 0) {
        fs.chmodSync(this.dir, 0o700);
        this.#log.warn({ dir: this.dir, mode: (st.mode & 0o777).toString(8) }, 'checkpoint directory was accessible to others; made it 0700');
      }
    } catch (err) {
      throw new NodeletError('INTERNAL', `checkpoint directory ${this.dir}: ${errorMessage(err)}`, { dir: this.dir }, { cause: err });
    }
  }

  /** Removes this container's archives beyond the newest N, never `written` (the one being answered). Failures are logged, never answered. */
  async #applyRetention(pod: string, ns: string, container: string, written: string): Promise<void> {
    const keep = this.#o.retention ?? 0;
    if (!(keep > 0)) return;
    try {
      const mine = (await fsp.readdir(this.dir))
        .filter((n) => !this.#inFlight.has(n))
        .map((n) => ({ n, p: parseArchiveName(n) }))
        .filter((x): x is { n: string; p: NonNullable<typeof x.p> } => !!x.p && archiveBelongsTo(x.p, pod, ns, container))
        .map((x) => ({ name: x.n, time: x.p.time, seq: x.p.seq }));
      for (const old of archivesBeyondRetentionAfter(mine, keep, written)) {
        await fsp.rm(path.join(this.dir, old.name), { force: true });
        this.#log.info({ archive: path.join(this.dir, old.name), keep }, 'checkpoint archive removed by retention');
      }
    } catch (err) {
      this.#log.warn({ dir: this.dir, err: errorMessage(err) }, 'checkpoint retention failed');
    }
  }
}
