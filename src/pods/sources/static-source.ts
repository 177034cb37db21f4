/**
 * Static pods from `staticPodPath`: one Pod manifest (YAML or JSON) per file, dotfiles
 * and directories ignored. Each pod is named `<name>-<nodeName>` (namespace `default`
 * when unset) and gets a UID derived from its content, the node and the file, as the
 * kubelet does: an edited file is a new pod that replaces the old one, an unchanged file
 * keeps its UID across restarts (so a restarted nodelet adopts its containers).
 *
 * New, changed and removed files take effect within about a second: fs.watch (inotify)
 * triggers a rescan at once, and a periodic rescan catches what a watch can miss (the
 * directory created later, editors that replace files). A malformed manifest is logged
 * once per version of the file, with the file and the reason, and skipped; the other pods
 * keep running.
 *
 * Every file is hostile: a FIFO, socket or device is skipped without being opened for
 * reading, a symlink loop or unreadable file is logged once, a file over 1.5 MiB is
 * refused by its size, and parsing is bounded (safe-file.ts, bounded-parse.ts). Files are
 * handled one per turn of the event loop, and large ones parsed off the main thread, so
 * a directory full of hostile files never stalls /healthz.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError, errorMessage, isNodeletError } from '../../errors.js';
import type { Logger } from '../../log.js';
import { realClock } from '../../clock.js';
import { LoopOwner } from '../../loop.js';
import { parseYaml, parseYamlSync } from '../../system/bounded-parse.js';
import { FILE_LIMITS, fileKind, formatBytes, ioError, readBoundedText } from '../../system/safe-file.js';
import { validatePodManifest } from './pod-validation.js';

export const ANN_CONFIG_SOURCE = 'kubernetes.io/config.source';
export const ANN_CONFIG_HASH = 'kubernetes.io/config.hash';
export const ANN_CONFIG_SEEN = 'kubernetes.io/config.seen';

/** Each parsed static pod's content hash (the derived UID): tells an edit of a pod whose UID is declared. */
const versions = new WeakMap<Pod, string>();

/** The content hash of a pod podFromManifest made (what its UID is when none is declared); undefined for any other object. */
/** The kubelet's IsStaticPod: a pod whose source (`kubernetes.io/config.source`) is not the API server. */
export function isStaticPod(pod: Pod): boolean {
  const source = pod.metadata?.annotations?.[ANN_CONFIG_SOURCE];
  return source !== undefined && source !== 'api';
}

export function manifestVersion(pod: Pod): string | undefined {
  return versions.get(pod);
}

/** Stable JSON (sorted keys), so that the UID depends on content, not key order. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

function defaultPullPolicy(image: string): string {
  // The API server's default: Always for :latest or no tag, IfNotPresent otherwise.
  const last = image.split('/').pop() ?? image;
  if (last.includes('@')) return 'IfNotPresent';
  const tag = last.includes(':') ? last.slice(last.lastIndexOf(':') + 1) : '';
  return tag === '' || tag === 'latest' ? 'Always' : 'IfNotPresent';
}

function defaultContainer(c: Container): Container {
  return {
    ...c,
    imagePullPolicy: c.imagePullPolicy ?? defaultPullPolicy(c.image ?? ''),
    terminationMessagePath: c.terminationMessagePath ?? '/dev/termination-log',
    terminationMessagePolicy: c.terminationMessagePolicy ?? 'File',
  };
}

/**
 * One manifest file's text -> the static pod (pure). Throws INVALID_ARGUMENT whose
 * message lists every problem, each naming the field.
 */
export function podFromManifest(text: string, file: string, nodeName: string): Pod {
  let docs: unknown[];
  try {
    // YAML is a superset of JSON: one parser for both, bounded (see bounded-parse.ts).
    docs = parseYamlSync(text, { file, what: MANIFEST });
  } catch (err) {
    throw cannotParse(file, err);
  }
  return podFromDocuments(docs, file, nodeName);
}

const MANIFEST = 'static pod manifest';

function cannotParse(file: string, err: unknown): NodeletError {
  const reason = isNodeletError(err) && typeof err.details.reason === 'string' ? err.details.reason : errorMessage(err).split('\n')[0];
  return new NodeletError('INVALID_ARGUMENT', `${file}: cannot parse: ${reason}`, { file });
}

/** A manifest's text -> the static pod, parsed off the main thread when large (see bounded-parse.ts). */
export async function podFromManifestAsync(text: string, file: string, nodeName: string): Promise<Pod> {
  let docs: unknown[];
  try {
    docs = await parseYaml(text, { file, what: MANIFEST });
  } catch (err) {
    throw cannotParse(file, err);
  }
  return podFromDocuments(docs, file, nodeName);
}

/** The parsed documents of one manifest file -> the static pod (pure). */
function podFromDocuments(docs: unknown[], file: string, nodeName: string): Pod {
  if (docs.length > 1) throw new NodeletError('INVALID_ARGUMENT', `${file}: holds ${docs.length} YAML documents; a static pod manifest is one Pod`, { file });
  const doc = docs[0];
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw new NodeletError('INVALID_ARGUMENT', `${file}: not a Pod manifest (a YAML or JSON object)`, { file });
  const problems = validatePodManifest(doc as Record<string, unknown>);
  if (problems.length) throw new NodeletError('INVALID_ARGUMENT', `${file}: ${problems.join('; ')}`, { file, problems });

  const manifest = doc as Pod;
  const hash = crypto.createHash('sha256').update(canonical(manifest)).update(`\0host:${nodeName}\0file:${file}`).digest('hex').slice(0, 32);
  // The kubelet's applyDefaults: a UID the manifest declares is kept (config.hash is then that
  // UID too); only an unset or empty one is derived. An edited file with a declared UID is the
  // same pod, updated in place, so what changed is told by the content hash (podVersion).
  const uid = manifest.metadata!.uid ? manifest.metadata!.uid : hash;
  const spec = manifest.spec!;
  const pod: Pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      ...manifest.metadata,
      name: `${manifest.metadata!.name}-${nodeName}`,
      namespace: manifest.metadata!.namespace ?? 'default',
      uid,
      annotations: { ...(manifest.metadata!.annotations ?? {}), [ANN_CONFIG_SOURCE]: 'file', [ANN_CONFIG_HASH]: uid },
    },
    spec: {
      ...spec,
      nodeName,
      restartPolicy: spec.restartPolicy ?? 'Always',
      terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds ?? 30,
      dnsPolicy: spec.dnsPolicy ?? 'ClusterFirst',
      containers: spec.containers.map(defaultContainer),
      ...(spec.initContainers ? { initContainers: spec.initContainers.map(defaultContainer) } : {}),
    },
  };
  versions.set(pod, hash);
  return pod;
}

export interface StaticPodSourceOptions {
  dir: string;
  nodeName: string;
  logger: Logger;
  /** Called with the full set whenever it changes (and once after the first scan). */
  onChange: (pods: Pod[]) => void;
  /** Periodic rescan; default 1000 ms. */
  rescanMs?: number;
}

interface FileState {
  key: string; // device, inode, size, mtime, mode (or the stat error): re-read only when it changes
  pod?: Pod;
  /** The pod's content hash (manifestVersion): an edit of a pod with a declared UID keeps its UID, not this. */
  version?: string;
}

export class StaticPodSource extends LoopOwner {
  readonly #o: Required<StaticPodSourceOptions>;
  #files = new Map<string, FileState>();
  #current = '';
  #delivered = false;
  #dupLogged = new Set<string>();
  #pods: Pod[] = [];
  #watcher: fs.FSWatcher | undefined;
  #scanning: Promise<void> | undefined;
  #again = false;
  #dirMissingLogged = false;
  #stopped = false;

  constructor(o: StaticPodSourceOptions) {
    super({ name: 'static-pods', clock: realClock, logger: o.logger, periodMs: o.rescanMs ?? 1000 });
    this.#o = { rescanMs: 1000, ...o };
  }

  /** The current static pods. */
  pods(): Pod[] {
    return this.#pods;
  }

  /** First scan (its result is delivered before this resolves), then the loop: a rescan every rescanMs, at once on an inotify event. */
  override async start(signal?: AbortSignal): Promise<void> {
    await this.scan();
    super.start(signal);
  }

  override async stop(): Promise<void> {
    this.#stopped = true;
    this.#watcher?.close();
    this.#watcher = undefined;
    await super.stop();
  }

  /** The loop's turn: one scan. */
  syncOnce(): Promise<void> {
    return this.scan();
  }


  /** One scan; concurrent requests coalesce into one more run. */
  scan(): Promise<void> {
    if (this.#scanning) {
      this.#again = true;
      return this.#scanning;
    }
    this.#scanning = (async () => {
      try {
        do {
          this.#again = false;
          await this.#scanOnce();
        } while (this.#again && !this.#stopped);
      } finally {
        this.#scanning = undefined;
      }
    })();
    return this.#scanning;
  }

  #ensureWatch(): void {
    if (this.#watcher || this.#stopped) return;
    try {
      this.#watcher = fs.watch(this.#o.dir, { persistent: false }, () => this.wake());
      this.#watcher.on('error', () => {
        this.#watcher?.close();
        this.#watcher = undefined;
      });
    } catch {
      // The periodic rescan covers it.
    }
  }

  /**
   * One file's state: `prev` when its identity (device, inode, size, mtime) is unchanged,
   * so a refused file is neither read nor logged again until it changes; undefined when
   * it is gone or a directory. Only a regular file within the size limit is opened, and
   * only through readBoundedText (a FIFO swapped in meanwhile is refused, not read).
   */
  async #decide(file: string, prev: FileState | undefined): Promise<FileState | undefined> {
    const { logger, nodeName } = this.#o;
    const skip = (key: string, err: unknown): FileState => {
      logger.warn({ file, err: errorMessage(err) }, `skipping static pod manifest: ${errorMessage(err)}`);
      return { key };
    };
    let st: fs.Stats;
    try {
      st = await fsp.stat(file); // follows symlinks; opens nothing
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return undefined; // removed since readdir (or a dangling symlink)
      const key = `error:${code}`;
      return prev?.key === key ? prev : skip(key, ioError(file, MANIFEST, err));
    }
    if (st.isDirectory()) return undefined;
    const key = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.mode}`;
    if (prev && prev.key === key) return prev;
    if (!st.isFile()) return skip(key, new NodeletError('INVALID_ARGUMENT', `${MANIFEST} ${file} is ${fileKind(st)}, not a regular file: skipped without reading it`, { file }));
    if (st.size > FILE_LIMITS.staticPodManifest) {
      return skip(key, new NodeletError('INVALID_ARGUMENT', `${MANIFEST} ${file} is ${formatBytes(st.size)} (${st.size} bytes), over the ${formatBytes(FILE_LIMITS.staticPodManifest)} limit: skipped without reading it`, { file }));
    }
    try {
      const text = await readBoundedText(file, { maxBytes: FILE_LIMITS.staticPodManifest, what: MANIFEST });
      const pod = await podFromManifestAsync(text, file, nodeName);
      return { key, pod, version: manifestVersion(pod) ?? '' };
    } catch (err) {
      return skip(key, err);
    }
  }

  async #scanOnce(): Promise<void> {
    const { dir, logger } = this.#o;
    let names: string[];
    try {
      names = (await fsp.readdir(dir)).filter((n) => !n.startsWith('.')).sort();
      if (this.#dirMissingLogged) logger.info({ staticPodPath: dir }, `staticPodPath ${dir} exists now`);
      this.#dirMissingLogged = false;
      this.#ensureWatch();
    } catch (err) {
      if (!this.#dirMissingLogged) logger.warn({ staticPodPath: dir }, `cannot read staticPodPath ${dir}: ${errorMessage(err)}; no static pods until it can be read`);
      this.#dirMissingLogged = true;
      this.#watcher?.close();
      this.#watcher = undefined;
      names = [];
    }
    const next = new Map<string, FileState>();
    for (const name of names) {
      if (this.#stopped) return;
      const file = path.join(dir, name);
      const prev = this.#files.get(file);
      const decided = await this.#decide(file, prev);
      if (decided === undefined) continue;
      next.set(file, decided);
      // One file per turn of the event loop: 300 files never hold it for one long step.
      if (decided !== prev) await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.#files = next;

    // Two files with the same pod: the first in lexical order wins, as the kubelet keeps the first.
    // Likewise two files declaring the same UID (one UID is one pod).
    const byName = new Map<string, FileState & { pod: Pod }>();
    const uids = new Set<string>();
    const dupLogged = new Set<string>();
    for (const [file, s] of next) {
      if (!s.pod) continue;
      const full = `${s.pod.metadata!.namespace}/${s.pod.metadata!.name}`;
      const uid = s.pod.metadata!.uid!;
      if (byName.has(full) || uids.has(uid)) {
        const k = `${file}@${s.key}`;
        const what = byName.has(full) ? `pod ${full}` : `uid ${uid}`;
        if (!this.#dupLogged.has(k)) logger.warn({ file, pod: full }, `skipping static pod manifest ${file}: ${what} is already defined by another file`);
        dupLogged.add(k);
        continue;
      }
      byName.set(full, s as FileState & { pod: Pod });
      uids.add(uid);
    }
    this.#dupLogged = dupLogged;
    const pods = [...byName.values()].map((s) => s.pod);
    const ids = [...byName.values()].map((s) => `${s.pod.metadata!.uid}@${s.version}`).join(',');
    if (this.#delivered && ids === this.#current) return;
    this.#delivered = true;
    this.#current = ids;
    // config.seen: when nodelet first saw this version of the pod (not part of its UID).
    const seen = new Date().toISOString();
    this.#pods = pods.map((p) => (p.metadata!.annotations![ANN_CONFIG_SEEN] ? p : withSeen(p, seen)));
    // The files keep the pods as delivered (with config.seen): an unchanged file is not read again.
    [...byName.values()].forEach((f, i) => (f.pod = this.#pods[i]!));
    this.#o.onChange(this.#pods);
  }
}

function withSeen(p: Pod, seen: string): Pod {
  return { ...p, metadata: { ...p.metadata, annotations: { ...p.metadata!.annotations, [ANN_CONFIG_SEEN]: seen } } };
}
