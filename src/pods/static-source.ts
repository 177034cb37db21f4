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
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { parse as parseYaml } from 'yaml';
import { NodeletError, errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import { validatePodManifest } from './pod-validation.js';

export const ANN_CONFIG_SOURCE = 'kubernetes.io/config.source';
export const ANN_CONFIG_HASH = 'kubernetes.io/config.hash';
export const ANN_CONFIG_SEEN = 'kubernetes.io/config.seen';

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
  let doc: unknown;
  try {
    // YAML is a superset of JSON: one parser for both.
    doc = parseYaml(text, { version: '1.1', prettyErrors: true, uniqueKeys: true });
  } catch (err) {
    throw new NodeletError('INVALID_ARGUMENT', `${file}: cannot parse: ${errorMessage(err).split('\n')[0]}`, { file });
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw new NodeletError('INVALID_ARGUMENT', `${file}: not a Pod manifest (a YAML or JSON object)`, { file });
  const problems = validatePodManifest(doc as Record<string, unknown>);
  if (problems.length) throw new NodeletError('INVALID_ARGUMENT', `${file}: ${problems.join('; ')}`, { file, problems });

  const manifest = doc as Pod;
  const hash = crypto.createHash('sha256').update(canonical(manifest)).update(`\0host:${nodeName}\0file:${file}`).digest('hex').slice(0, 32);
  const spec = manifest.spec!;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      ...manifest.metadata,
      name: `${manifest.metadata!.name}-${nodeName}`,
      namespace: manifest.metadata!.namespace ?? 'default',
      uid: hash,
      annotations: { ...(manifest.metadata!.annotations ?? {}), [ANN_CONFIG_SOURCE]: 'file', [ANN_CONFIG_HASH]: hash },
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
  key: string; // mtime, size, inode: re-read only when it changes
  pod?: Pod;
}

export class StaticPodSource {
  readonly #o: Required<StaticPodSourceOptions>;
  #files = new Map<string, FileState>();
  #current = '';
  #delivered = false;
  #dupLogged = new Set<string>();
  #pods: Pod[] = [];
  #timer: NodeJS.Timeout | undefined;
  #watcher: fs.FSWatcher | undefined;
  #scanning: Promise<void> | undefined;
  #again = false;
  #dirMissingLogged = false;
  #stopped = false;

  constructor(o: StaticPodSourceOptions) {
    this.#o = { rescanMs: 1000, ...o };
  }

  /** The current static pods. */
  pods(): Pod[] {
    return this.#pods;
  }

  /** First scan (its result is delivered before this resolves), then watch + rescan. */
  async start(): Promise<void> {
    await this.scan();
    this.#timer = setInterval(() => void this.scan(), this.#o.rescanMs);
    this.#timer.unref();
  }

  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
    this.#watcher?.close();
    this.#watcher = undefined;
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
      this.#watcher = fs.watch(this.#o.dir, { persistent: false }, () => void this.scan());
      this.#watcher.on('error', () => {
        this.#watcher?.close();
        this.#watcher = undefined;
      });
    } catch {
      // The periodic rescan covers it.
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
      const file = path.join(dir, name);
      let st: fs.Stats;
      try {
        st = await fsp.stat(file);
      } catch {
        continue; // removed between readdir and stat
      }
      if (!st.isFile()) continue;
      const key = `${st.mtimeMs}:${st.size}:${st.ino}`;
      const prev = this.#files.get(file);
      if (prev && prev.key === key) {
        next.set(file, prev);
        continue;
      }
      try {
        const pod = podFromManifest(await fsp.readFile(file, 'utf8'), file, this.#o.nodeName);
        next.set(file, { key, pod });
      } catch (err) {
        logger.warn({ file, err: errorMessage(err) }, `skipping static pod manifest: ${errorMessage(err)}`);
        next.set(file, { key });
      }
    }
    this.#files = next;

    // Two files with the same pod: the first in lexical order wins, as the kubelet keeps the first.
    const byName = new Map<string, Pod>();
    const dupLogged = new Set<string>();
    for (const [file, s] of next) {
      if (!s.pod) continue;
      const full = `${s.pod.metadata!.namespace}/${s.pod.metadata!.name}`;
      if (byName.has(full)) {
        const k = `${file}@${s.key}`;
        if (!this.#dupLogged.has(k)) logger.warn({ file, pod: full }, `skipping static pod manifest ${file}: pod ${full} is already defined by another file`);
        dupLogged.add(k);
        continue;
      }
      byName.set(full, s.pod);
    }
    this.#dupLogged = dupLogged;
    const pods = [...byName.values()];
    const ids = pods.map((p) => p.metadata!.uid).join(',');
    if (this.#delivered && ids === this.#current) return;
    this.#delivered = true;
    this.#current = ids;
    // config.seen: when nodelet first saw this version of the pod (not part of its UID).
    const seen = new Date().toISOString();
    this.#pods = pods.map((p) => (p.metadata!.annotations![ANN_CONFIG_SEEN] ? p : withSeen(p, seen)));
    for (const f of this.#files.values()) {
      const p = this.#pods.find((q) => q.metadata!.uid === f.pod?.metadata?.uid);
      if (p) f.pod = p;
    }
    this.#o.onChange(this.#pods);
  }
}

function withSeen(p: Pod, seen: string): Pod {
  return { ...p, metadata: { ...p.metadata, annotations: { ...p.metadata!.annotations, [ANN_CONFIG_SEEN]: seen } } };
}
