/**
 * Container log rotation, as the kubelet's container log manager
 * (pkg/kubelet/logs/container_log_manager.go): every `containerLogMonitorInterval`, each
 * running container's CRI log file (ContainerStatus `log_path`) that has reached
 * `containerLogMaxSize` is rotated:
 *
 *   1. the leftovers of an earlier failed turn go: `*.tmp` files, and a plain rotated file
 *      whose `.gz` twin exists (compressed, but the plain one was not removed yet);
 *   2. the oldest rotated files go, so that at most `containerLogMaxFiles - 2` stay (the
 *      file rotated now and the new live file make `containerLogMaxFiles`);
 *   3. the rotated files still plain are gzipped to `<file>.gz` (through `<file>.tmp`);
 *      only the newest rotated file is ever plain, so a shipper can finish reading it;
 *   4. the live file is renamed `<log>.<YYYYMMDD-HHMMSS>` (local time, the kubelet's
 *      `20060102-150405`) and the runtime is told (CRI `ReopenContainerLog`), which opens a
 *      new file at the path. If the runtime refuses (containerd does for a container that
 *      stopped meanwhile: "container is not running"), the file is renamed back, so nothing
 *      is lost and the next turn tries again: the kubelet's order and recovery.
 *
 * A live log that is missing is reopened first (the runtime recreates it), as the kubelet.
 * A `containerLogMaxSize` below zero turns rotation off (the kubelet's stub manager).
 *
 * What is decided is pure (planLogRotation, over a directory listing and the limits); this
 * module's loop does the IO. Nothing blocks the event loop: gzip is streamed, at most
 * `containerLogMaxWorkers` containers are handled at once (default 1), and only regular
 * files are touched (a link or a FIFO planted in the log directory is never followed).
 */
import { constants as fsc, type Dirent } from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import type { Clock } from '../../clock.js';
import { parseQuantity } from '../../config/quantity.js';
import { errorMessage, isNodeletError } from '../../errors.js';
import { silentLogger, type Logger } from '../../log.js';
import { LoopOwner } from '../../loop.js';
import type { RuntimeService } from '../../runtime/types.js';
import { ifExists } from '../../system/fs-util.js';

/** The kubelet's suffixes: compressed rotated logs, and the temporary file a compression writes first. */
export const COMPRESS_SUFFIX = '.gz';
export const TMP_SUFFIX = '.tmp';

export interface LogRotationLimits {
  /** Bytes at which the live file is rotated; negative: never. */
  maxSize: number;
  /** Files kept per container log, the live one included (> 1). */
  maxFiles: number;
}

export interface LogRotationPlan {
  /** Names to delete, in this order (leftovers, then the oldest rotated files first). */
  remove: string[];
  /** Rotated names to gzip into `<name>.gz` (then deleted), oldest first. */
  compress: string[];
  /** The name the live file is renamed to; absent when it is not rotated this turn. */
  rotateTo?: string;
}

const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** The kubelet's rotated-file suffix for a time (`20060102-150405`, local time as Go's `time.Now()`). */
export function rotationTimestamp(ms: number): string {
  const d = new Date(ms);
  return `${d.getFullYear()}${pad(d.getMonth() + 1)}${pad(d.getDate())}-${pad(d.getHours())}${pad(d.getMinutes())}${pad(d.getSeconds())}`;
}

/**
 * What one turn does to one container log. `live` is the live file's name, `size` its size
 * now, `names` the names in its directory (any: those that are not `<live>.*` are ignored,
 * as the kubelet's glob). Pure.
 *
 * Rotated files sort oldest first by name (the timestamp precedes any `.gz`). Nothing
 * happens below `maxSize`. When the name to rotate to already exists (a second rotation
 * within one second), nothing is rotated this turn rather than overwrite it.
 */
export function planLogRotation(live: string, size: number, names: readonly string[], limits: LogRotationLimits, now: number): LogRotationPlan {
  const plan: LogRotationPlan = { remove: [], compress: [] };
  if (limits.maxSize < 0 || size < limits.maxSize) return plan;
  const prefix = `${live}.`;
  const rotated = names.filter((n) => n.startsWith(prefix) && n.length > prefix.length);
  const all = new Set(rotated);
  // 1. Unused: temporary files, and plain files already compressed.
  const inUse = (n: string) => !n.endsWith(TMP_SUFFIX) && (n.endsWith(COMPRESS_SUFFIX) || !all.has(n + COMPRESS_SUFFIX));
  plan.remove.push(...rotated.filter((n) => !inUse(n)));
  // 2. Excess: keep maxFiles - 2 rotated files, removing the oldest first (a reader of a newer one is never cut short).
  const kept = rotated.filter(inUse).sort();
  const keep = Math.max(0, limits.maxFiles - 2);
  const excess = Math.max(0, kept.length - keep);
  plan.remove.push(...kept.slice(0, excess));
  // 3. Compress what is still plain.
  plan.compress.push(...kept.slice(excess).filter((n) => !n.endsWith(COMPRESS_SUFFIX)));
  // 4. Rotate the live file, unless its new name is taken (then the next turn does it).
  const to = `${live}.${rotationTimestamp(now)}`;
  if (!all.has(to) && !all.has(to + COMPRESS_SUFFIX)) plan.rotateTo = to;
  return plan;
}

/** `containerLogMaxSize` in bytes (a quantity: `10Mi`, `64Ki`, `1G`); negative disables rotation. */
export function parseLogMaxSize(text: string): number {
  return Math.floor(parseQuantity(text).value);
}

/** The CRI calls rotation needs. */
/**
 * The kubelet's log manager `Clean`, run when a container is removed: its log file and every
 * rotated one (`<logPath>*`: `0.log`, `0.log.<time>`, `0.log.<time>.gz`), regular files and
 * links only (never a directory). An absent file is no error. Returns the paths removed.
 */
export async function removeContainerLogFiles(logPath: string): Promise<string[]> {
  if (!path.isAbsolute(logPath) || path.basename(logPath) === '' || logPath.endsWith('/')) return [];
  const dir = path.dirname(logPath);
  const base = path.basename(logPath);
  let names: string[];
  try {
    names = await fsp.readdir(dir);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    if (!name.startsWith(base)) continue;
    const file = path.join(dir, name);
    const st = await fsp.lstat(file).catch(() => undefined);
    if (!st || st.isDirectory()) continue;
    await fsp.rm(file, { force: true });
    removed.push(file);
  }
  return removed;
}

export type LogRotationRuntime = Pick<RuntimeService, 'listContainers' | 'recentContainers' | 'containerStatus' | 'reopenContainerLog'>;

export interface ContainerLogManagerOptions {
  runtime: LogRotationRuntime;
  limits: LogRotationLimits;
  /** containerLogMaxWorkers: containers handled at once. */
  maxWorkers: number;
  /** containerLogMonitorInterval in ms. */
  periodMs: number;
  clock: Clock;
  logger?: Logger;
  /**
   * The directory of the `<pod>_<ns>_<container>-<id>.log` links (log-symlinks.ts): dead
   * ones are swept at the first turn, then at the first turn at least LINK_SWEEP_MS later.
   */
  linkDir?: string;
}

/**
 * How often dead links are swept: the kubelet's container GC period (1 min), which is where
 * the kubelet removes them. Every turn (10 s) cost ~2 file stats per link: 220 at 110 pods.
 */
export const LINK_SWEEP_MS = 60_000;

/** What one turn did, for tests and the debug log. */
export interface RotationTurn {
  containers: number;
  rotated: string[];
  compressed: string[];
  removed: string[];
  errors: string[];
  /** Dead links removed from linkDir. */
  links?: string[];
}

/**
 * The loop that rotates container logs. One turn: ListContainers (the running ones are
 * handled: a stopped container writes nothing more, and the kubelet does not leave an empty latest
 * log behind it), then each container's log, `maxWorkers` at a time. Faults are logged per
 * container and retried next turn; a turn never throws. Not re-entrant (the loop runs one
 * turn at a time; tests call syncOnce between turns).
 */
export class ContainerLogManager extends LoopOwner {
  readonly #o: ContainerLogManagerOptions;
  readonly #log: Logger;
  /** log_path never changes for a container: asked once, forgotten with the container. */
  readonly #logPaths = new Map<string, string>();
  #lastSweep = -Infinity;

  constructor(o: ContainerLogManagerOptions) {
    super({ name: 'container-log-rotation', clock: o.clock, periodMs: o.periodMs, ...(o.logger ? { logger: o.logger } : {}) });
    this.#o = { ...o, maxWorkers: Math.max(1, Math.floor(o.maxWorkers)), limits: { ...o.limits, maxFiles: Math.max(2, o.limits.maxFiles) } };
    this.#log = o.logger ?? silentLogger();
  }

  async syncOnce(): Promise<RotationTurn> {
    const turn: RotationTurn = { containers: 0, rotated: [], compressed: [], removed: [], errors: [] };
    if (this.#o.limits.maxSize < 0) return turn;
    let ids: string[];
    try {
      // The pod relist's list when it is at most a period old (the relist runs at least every
      // 10 s): no second ListContainers every turn. Else the unfiltered list, as the relist
      // asks it: the CRI client decodes that one incrementally (list-decoder.ts), a filtered
      // answer in full each time.
      const list = this.#o.runtime.recentContainers?.(this.#o.periodMs) ?? (await this.#o.runtime.listContainers());
      ids = list.filter((c) => c.state === 'CONTAINER_RUNNING').map((c) => c.id);
    } catch (err) {
      this.#log.warn({ err: errorMessage(err) }, `log rotation: cannot list containers: ${errorMessage(err)}`);
      turn.errors.push(errorMessage(err));
      return turn;
    }
    const live = new Set(ids);
    for (const id of this.#logPaths.keys()) if (!live.has(id)) this.#logPaths.delete(id);
    turn.containers = ids.length;
    let next = 0;
    const worker = async () => {
      while (next < ids.length) {
        const id = ids[next++]!;
        try {
          await this.#container(id, turn);
        } catch (err) {
          turn.errors.push(`${id}: ${errorMessage(err)}`);
          this.#log.warn({ containerId: id, err: errorMessage(err) }, `log rotation of container ${id} failed: ${errorMessage(err)}`);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.#o.maxWorkers, ids.length) }, worker));
    if (this.#o.linkDir !== undefined && this.#o.clock.now() - this.#lastSweep >= LINK_SWEEP_MS) {
      this.#lastSweep = this.#o.clock.now();
      turn.links = await this.#sweepLinks(this.#o.linkDir, live).catch((err) => {
        turn.errors.push(`links: ${errorMessage(err)}`);
        return [];
      });
    }
    if (turn.rotated.length) this.#log.debug({ rotated: turn.rotated, compressed: turn.compressed, removed: turn.removed }, `rotated ${turn.rotated.length} container logs`);
    return turn;
  }

  async #logPath(id: string): Promise<string | undefined> {
    const known = this.#logPaths.get(id);
    if (known !== undefined) return known;
    let logPath: string;
    try {
      logPath = (await this.#o.runtime.containerStatus(id)).logPath;
    } catch (err) {
      if (isNodeletError(err, 'NOT_FOUND')) return undefined; // removed since the list
      throw err;
    }
    // A relative or empty log_path: the runtime writes no file nodelet can find.
    if (!logPath || !path.isAbsolute(logPath)) return undefined;
    this.#logPaths.set(id, logPath);
    return logPath;
  }

  async #container(id: string, turn: RotationTurn): Promise<void> {
    const log = await this.#logPath(id);
    if (!log) return;
    let st = await ifExists(fsp.lstat(log));
    if (!st) {
      // Missing (a failed reopen earlier, someone removed it): the runtime recreates it. A
      // container removed since the list has nothing to reopen.
      try {
        await this.#reopen(id);
      } catch (err) {
        if (isNodeletError(err, 'NOT_FOUND')) return;
        throw err;
      }
      st = await ifExists(fsp.lstat(log));
      if (!st) return;
    }
    if (!st.isFile()) return;
    const dir = path.dirname(log);
    const live = path.basename(log);
    const limits = this.#o.limits;
    if (limits.maxSize < 0 || st.size < limits.maxSize) return;
    const plan = planLogRotation(live, st.size, await fsp.readdir(dir), limits, this.#o.clock.now());
    for (const n of plan.remove) {
      await fsp.rm(path.join(dir, n), { force: true });
      turn.removed.push(path.join(dir, n));
    }
    for (const n of plan.compress) {
      await compressLog(path.join(dir, n));
      turn.compressed.push(path.join(dir, n));
    }
    if (!plan.rotateTo) return;
    const rotated = path.join(dir, plan.rotateTo);
    await fsp.rename(log, rotated);
    try {
      await this.#reopen(id);
    } catch (err) {
      // Renamed back so the next turn tries again (a nodelet killed right here leaves it rotated, as the kubelet).
      await fsp.rename(rotated, log).catch((e) => this.#log.error({ containerId: id, err: errorMessage(e) }, `cannot rename ${rotated} back to ${log}: ${errorMessage(e)}`));
      throw new Error(`failed to reopen container log ${id}: ${errorMessage(err)}`);
    }
    turn.rotated.push(rotated);
  }

  /**
   * Removes links whose target is gone, as the kubelet's container GC: unless the container
   * still runs (its log is between a rename and the reopen, or the runtime is recreating
   * it). What is left of containers removed with their sandbox, or while nodelet was down.
   */
  async #sweepLinks(dir: string, running: ReadonlySet<string>): Promise<string[]> {
    let entries: Dirent[];
    try {
      entries = await fsp.readdir(dir, { withFileTypes: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const removed: string[] = [];
    for (const e of entries) {
      const n = e.name;
      // The listing's type (d_type) says which entries are links: no lstat each.
      if (!n.endsWith('.log') || !e.isSymbolicLink()) continue;
      // A running container's link is kept whatever its target (between a rename and the
      // reopen it dangles): known from its name, no stat.
      const id = /-([0-9a-f]{64})\.log$/.exec(n)?.[1];
      if (id !== undefined && running.has(id)) continue;
      const link = path.join(dir, n);
      if (await fsp.stat(link).then(() => true, () => false)) continue; // alive
      await fsp.rm(link, { force: true });
      removed.push(link);
    }
    return removed;
  }

  async #reopen(id: string): Promise<void> {
    if (!this.#o.runtime.reopenContainerLog) throw new Error('the runtime client cannot reopen container logs');
    await this.#o.runtime.reopenContainerLog(id);
  }
}

/**
 * gzips `file` into `file.gz` (through `file.tmp`, same mode), then removes `file`: the
 * kubelet's compressLog. Streamed (a 64 KiB buffer at a time through zlib's thread pool);
 * the source is opened without following a link and must be a regular file. A failure
 * leaves at most the `.tmp`, which the next turn removes.
 */
export async function compressLog(file: string): Promise<void> {
  const tmp = file + TMP_SUFFIX;
  const src = await fsp.open(file, fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
  let dst: fsp.FileHandle;
  try {
    const st = await src.stat();
    if (!st.isFile()) throw new Error(`${file} is not a regular file`);
    dst = await fsp.open(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC | fsc.O_NOFOLLOW, st.mode & 0o777);
  } catch (err) {
    await src.close();
    throw err;
  }
  try {
    // The streams close their handles when they end or fail.
    await pipeline(src.createReadStream({ highWaterMark: 64 * 1024 }), createGzip(), dst.createWriteStream());
    await fsp.rename(tmp, file + COMPRESS_SUFFIX);
  } finally {
    await fsp.rm(tmp, { force: true });
  }
  await fsp.rm(file, { force: true });
}
