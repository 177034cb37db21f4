/**
 * The image manager: the node's image list (for the Node's `status.images`) and image
 * garbage collection, as the kubelet's image GC manager (pkg/kubelet/images).
 *
 * Every 30 s the runtime's images are listed (CRI ListImages) and kept, largest first, for
 * the node status. Every 5 min (the kubelet's ImageGCPeriod; the first turn at start):
 *
 * 1. detection: each image present gets a record (`firstDetected` when first seen,
 *    `lastUsed` = now while a container of the runtime, in any state, uses it: its
 *    `image_ref` or image names one of the image's ID, tags or digests; the sandbox image
 *    the runtime names (containerd: `sandboxImage` of CRI Status' verbose config) counts as
 *    in use; records of images gone are dropped;
 * 2. `imageMaximumGCAge` (0 = off): every unused, unpinned image not used for longer
 *    (never used: since it was first detected) is removed;
 * 3. space: the image filesystem (the mountpoint CRI ImageFsInfo names, else the root
 *    dir's; statfs) used at `imageGCHighThresholdPercent` or more (100 − available × 100 /
 *    capacity, integer, as the kubelet) frees `capacity × (100 − low) / 100 − available`
 *    bytes: unused, unpinned images at least `imageMinimumGCAge` old (since first detected)
 *    are removed least recently used first (ties: first detected first), by their reported
 *    size, until that much is freed. A removal that fails is skipped (the next is tried);
 *    freeing less than asked is a `FreeDiskSpaceFailed` warning, capacity 0
 *    `InvalidDiskCapacity`, a turn failing twice in a row `ImageGCFailed` (the kubelet's events).
 *
 * With `imageGCHighThresholdPercent: 100` and no maximum age, collection is off (the kubelet's stub).
 *
 * Where nodelet goes beyond the kubelet: the records (first detected, last used) are kept in
 * `<root-dir>/image_manager/nodelet_image_records` (JSON, written atomically when they
 * change), so ages survive a restart; the kubelet keeps them in memory and, after a
 * restart, waits `imageMaximumGCAge` from its start before removing by age. An image with
 * no record (first run, lost file) counts from its first detection, which gives the
 * kubelet's behaviour. A corrupt file is logged and started afresh, never fatal.
 */
import fs from 'node:fs/promises';
import type { StatsFs } from 'node:fs';
import path from 'node:path';
import type { Clock } from '../../clock.js';
import { errorMessage, NodeletError } from '../../errors.js';
import { nodeRef, type EventSink } from '../../events.js';
import type { Logger } from '../../log.js';
import { Loop } from '../../loop.js';
import type { Container, Image, RuntimeStatusInfo } from '../../runtime/types.js';
import { readBoundedText } from '../../system/safe-file.js';
import { writeFileAtomic } from '../../system/root-dir.js';

/** The kubelet's periods: image GC (ImageGCPeriod) and the image list cache. */
export const IMAGE_GC_PERIOD_MS = 5 * 60_000;
export const IMAGE_LIST_PERIOD_MS = 30_000;
/** The records file under the root dir. */
export const IMAGE_RECORDS_FILE = 'image_manager/nodelet_image_records';
const RECORDS_KIND = 'NodeletImageRecords';
const RECORDS_MAX_BYTES = 16 * 1024 * 1024;
const MAX_ID_LENGTH = 1024;

export interface ImageGcPolicy {
  /** Usage (percent of the image filesystem) at or above which space is freed. */
  highThresholdPercent: number;
  /** Usage space collection frees down to. */
  lowThresholdPercent: number;
  /** Images younger than this (since first detected) are never removed for space. */
  minAgeMs: number;
  /** Unused images older than this (since last used) are removed; 0 = off. */
  maxAgeMs: number;
}

/** What nodelet knows of one image between turns. */
export interface ImageRecord {
  /** When first seen (ms since the epoch). */
  firstDetected: number;
  /** When last seen in use; undefined: never (the kubelet's zero time). */
  lastUsed: number | undefined;
  size: number;
  pinned: boolean;
}

/** An image the collector may remove, in eviction order. */
export interface Candidate extends ImageRecord {
  id: string;
}

/**
 * The IDs of `images` in use: those whose ID, a tag or a digest is among `refs` (the
 * containers' image refs and names, the sandbox image).
 */
export function imagesInUse(images: readonly Image[], refs: Iterable<string>): Set<string> {
  const wanted = new Set<string>();
  for (const r of refs) if (r) wanted.add(r);
  const out = new Set<string>();
  for (const img of images) {
    if (wanted.has(img.id) || img.repoTags.some((t) => wanted.has(t)) || img.repoDigests.some((d) => wanted.has(d))) out.add(img.id);
  }
  return out;
}

/** Every image ref a container names (CRI `image_ref`, `image_id`, its image spec). */
export function containerImageRefs(containers: readonly Container[]): string[] {
  return containers.flatMap((c) => [c.imageRef, c.imageId, c.image?.image ?? ''].filter((r): r is string => typeof r === 'string' && r !== ''));
}

/**
 * Detection (pure, the kubelet's detectImages): the records after seeing `images` at `now`
 * with `inUse` (image IDs): new images first detected now, used ones last used now, sizes
 * and pins as the runtime reports them, images gone dropped.
 */
export function detectImages(prev: ReadonlyMap<string, ImageRecord>, images: readonly Image[], inUse: ReadonlySet<string>, now: number): Map<string, ImageRecord> {
  const next = new Map<string, ImageRecord>();
  for (const img of images) {
    if (!img.id) continue;
    const old = prev.get(img.id);
    next.set(img.id, {
      firstDetected: old?.firstDetected ?? now,
      lastUsed: inUse.has(img.id) ? now : old?.lastUsed,
      size: Number.isFinite(img.size) && img.size > 0 ? img.size : 0,
      pinned: img.pinned === true,
    });
  }
  return next;
}

/**
 * The images the collector may consider (pure, the kubelet's imagesInEvictionOrder): not
 * in use, not pinned, least recently used first (never used first of all), ties broken by
 * first detection, then by ID (a stable order).
 */
export function evictionOrder(records: ReadonlyMap<string, ImageRecord>, inUse: ReadonlySet<string>): Candidate[] {
  const out: Candidate[] = [];
  for (const [id, r] of records) if (!inUse.has(id) && !r.pinned) out.push({ id, ...r });
  return out.sort((a, b) => (a.lastUsed ?? 0) - (b.lastUsed ?? 0) || a.firstDetected - b.firstDetected || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** Usage of the image filesystem (statfs): bytes. */
export interface FsUsage {
  capacityBytes: number;
  availableBytes: number;
}

/**
 * How much the space pass must free (pure, the kubelet's GarbageCollect): undefined below
 * the high threshold; otherwise the usage and the bytes down to the low threshold. Throws
 * for a capacity of 0 (the kubelet's InvalidDiskCapacity).
 */
export function spaceToFree(fs: FsUsage, policy: Pick<ImageGcPolicy, 'highThresholdPercent' | 'lowThresholdPercent'>): { usagePercent: number; bytesToFree: number } | undefined {
  const capacity = BigInt(Math.max(0, Math.floor(fs.capacityBytes)));
  if (capacity === 0n) throw new NodeletError('INTERNAL', 'invalid capacity 0 on image filesystem', { reason: 'InvalidDiskCapacity' });
  let available = BigInt(Math.max(0, Math.floor(fs.availableBytes)));
  if (available > capacity) available = capacity;
  const usagePercent = 100 - Number((available * 100n) / capacity);
  if (usagePercent < policy.highThresholdPercent) return undefined;
  const bytesToFree = Number((capacity * BigInt(100 - policy.lowThresholdPercent)) / 100n - available);
  return { usagePercent, bytesToFree };
}

/**
 * What a collection removes (pure), given the candidates in eviction order at `now`:
 * `byAge` the unused images past `maxAgeMs` (none when 0), then `forSpace` the rest that
 * may go for space (at least `minAgeMs` old, not used at or after `now`), in the order they
 * are tried; with `bytesToFree`, `forSpace` stops at the first image that brings the sum of
 * sizes to it (assuming every removal succeeds; the collector goes on past a failed one).
 */
export function imagesToRemove(candidates: readonly Candidate[], now: number, policy: Pick<ImageGcPolicy, 'minAgeMs' | 'maxAgeMs'>, bytesToFree?: number): { byAge: Candidate[]; forSpace: Candidate[] } {
  const byAge = policy.maxAgeMs > 0 ? candidates.filter((c) => now - (c.lastUsed ?? c.firstDetected) > policy.maxAgeMs) : [];
  const gone = new Set(byAge.map((c) => c.id));
  const eligible = candidates.filter((c) => !gone.has(c.id) && !(c.lastUsed !== undefined && c.lastUsed >= now) && now - c.firstDetected >= policy.minAgeMs);
  if (bytesToFree === undefined) return { byAge, forSpace: eligible };
  const forSpace: Candidate[] = [];
  let freed = 0;
  for (const c of eligible) {
    if (freed >= bytesToFree) break;
    forSpace.push(c);
    freed += c.size;
  }
  return { byAge, forSpace };
}

/** The policy from the configuration (validated: 0 ≤ low < high ≤ 100; maxAge 0 or > minAge). */
export function imageGcPolicy(cfg: { imageGCHighThresholdPercent: number; imageGCLowThresholdPercent: number; imageMinimumGCAge: string; imageMaximumGCAge?: string | undefined }, parseDuration: (s: string) => number): ImageGcPolicy {
  return {
    highThresholdPercent: cfg.imageGCHighThresholdPercent,
    lowThresholdPercent: cfg.imageGCLowThresholdPercent,
    minAgeMs: parseDuration(cfg.imageMinimumGCAge),
    maxAgeMs: cfg.imageMaximumGCAge ? parseDuration(cfg.imageMaximumGCAge) : 0,
  };
}

/** The kubelet stubs its image GC when nothing can trigger it. */
export function imageGcEnabled(p: ImageGcPolicy): boolean {
  return p.highThresholdPercent < 100 || p.maxAgeMs > 0;
}

/** The images largest first, ties by ID descending (the kubelet's image cache order, ByImageSize). */
export function sortBySize(images: readonly Image[]): Image[] {
  return [...images].sort((a, b) => b.size - a.size || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
}

// ------------------------------------------------------------------ records file

/** The records as written: ID -> RFC 3339 times. */
export function encodeRecords(records: ReadonlyMap<string, ImageRecord>): string {
  const images: Record<string, { firstDetected: string; lastUsed?: string }> = {};
  for (const id of [...records.keys()].sort()) {
    const r = records.get(id)!;
    images[id] = { firstDetected: new Date(r.firstDetected).toISOString(), ...(r.lastUsed !== undefined ? { lastUsed: new Date(r.lastUsed).toISOString() } : {}) };
  }
  return JSON.stringify({ kind: RECORDS_KIND, images });
}

/** Parses the records file; throws a NodeletError naming what is wrong. Size and pin come from the runtime. */
export function decodeRecords(text: string): Map<string, Pick<ImageRecord, 'firstDetected' | 'lastUsed'>> {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new NodeletError('INVALID_ARGUMENT', `not JSON: ${errorMessage(err)}`);
  }
  const obj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (!obj(doc) || doc.kind !== RECORDS_KIND || !obj(doc.images)) throw new NodeletError('INVALID_ARGUMENT', `expected {"kind":"${RECORDS_KIND}","images":{...}}`);
  const time = (v: unknown, what: string): number => {
    const t = typeof v === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/.test(v) ? Date.parse(v) : NaN;
    if (!Number.isFinite(t)) throw new NodeletError('INVALID_ARGUMENT', `${what}: not an RFC 3339 UTC time: ${JSON.stringify(v)?.slice(0, 64)}`);
    return t;
  };
  const out = new Map<string, Pick<ImageRecord, 'firstDetected' | 'lastUsed'>>();
  for (const [id, r] of Object.entries(doc.images)) {
    if (id === '' || id.length > MAX_ID_LENGTH) throw new NodeletError('INVALID_ARGUMENT', `image ID of ${id.length} characters`);
    if (!obj(r)) throw new NodeletError('INVALID_ARGUMENT', `images[${JSON.stringify(id)}]: not an object`);
    out.set(id, { firstDetected: time(r.firstDetected, `images[${JSON.stringify(id)}].firstDetected`), lastUsed: r.lastUsed === undefined ? undefined : time(r.lastUsed, `images[${JSON.stringify(id)}].lastUsed`) });
  }
  return out;
}

// ------------------------------------------------------------------ the manager

/** What the image manager needs of the runtime (the CRI client). */
export interface ImageGcRuntime {
  listImages(): Promise<Image[]>;
  removeImage(image: string): Promise<void>;
  listContainers(): Promise<Container[]>;
  imageStatus(image: string): Promise<Image | undefined>;
  status(verbose?: boolean): Promise<RuntimeStatusInfo>;
  imageFsInfo?(): Promise<string[]>;
}

export interface ImageManagerOptions {
  runtime: ImageGcRuntime;
  policy: ImageGcPolicy;
  /** `--root-dir`: the records file, and the image filesystem when the runtime names none. */
  rootDir: string;
  clock: Clock;
  logger: Logger;
  events: EventSink;
  nodeName: string;
  /** Period of the collection (default 5 min) and of the image list (default 30 s). */
  gcPeriodMs?: number;
  listPeriodMs?: number;
  /** statfs(2) (tests give their own). */
  statfs?: (dir: string) => Promise<Pick<StatsFs, 'bavail' | 'bsize' | 'blocks'>>;
  /** Deadline of a statfs (a hung filesystem): default 10 s. */
  statfsTimeoutMs?: number;
}

/** What one collection did (tests and logs). */
export interface GcOutcome {
  removed: { id: string; reason: 'age' | 'space'; size: number }[];
  /** Set when the space pass ran: usage found and bytes it had to free. */
  space?: { usagePercent: number; bytesToFree: number; freed: number };
  error?: string;
}

export class ImageManager {
  readonly #o: ImageManagerOptions;
  readonly #log: Logger;
  readonly #file: string;
  readonly #gcLoop: Loop;
  readonly #listLoop: Loop;
  #records = new Map<string, ImageRecord>();
  #loaded: Map<string, Pick<ImageRecord, 'firstDetected' | 'lastUsed'>> | undefined;
  #written = '';
  #images: Image[] = [];
  #failedBefore = false;
  #detected = false;
  #disabledSaid = false;

  constructor(o: ImageManagerOptions) {
    this.#o = o;
    this.#log = o.logger;
    this.#file = path.join(o.rootDir, IMAGE_RECORDS_FILE);
    this.#gcLoop = new Loop({ name: 'image-gc', turn: () => this.syncOnce(), delayMs: () => o.gcPeriodMs ?? IMAGE_GC_PERIOD_MS, clock: o.clock, logger: o.logger });
    this.#listLoop = new Loop({ name: 'image-list', turn: () => this.refreshList(), delayMs: () => o.listPeriodMs ?? IMAGE_LIST_PERIOD_MS, clock: o.clock, logger: o.logger });
  }

  /** The runtime's images as last listed, largest first (the Node's status.images). */
  images(): readonly Image[] {
    return this.#images;
  }

  /** The records as they stand (tests). */
  records(): ReadonlyMap<string, ImageRecord> {
    return this.#records;
  }

  /** Reads the records file (once; later calls do nothing). A missing file is a first run; a corrupt one is logged and ignored. */
  async load(): Promise<void> {
    if (this.#loaded) return;
    this.#loaded = new Map();
    let text: string;
    try {
      text = await readBoundedText(this.#file, { what: 'image records', maxBytes: RECORDS_MAX_BYTES, noFollow: true });
    } catch (err) {
      if ((err as { code?: string }).code === 'NOT_FOUND' || /ENOENT|no such file/i.test(errorMessage(err))) return;
      this.#log.warn({ file: this.#file, err: errorMessage(err) }, `cannot read the image records ${this.#file}: ${errorMessage(err)}; image ages start afresh`);
      return;
    }
    try {
      this.#loaded = decodeRecords(text);
      this.#written = text;
      this.#log.info({ file: this.#file, images: this.#loaded.size }, `image records: ${this.#loaded.size} images with their first detection and last use`);
    } catch (err) {
      this.#log.warn({ file: this.#file, err: errorMessage(err) }, `the image records ${this.#file} are corrupt (${errorMessage(err)}); image ages start afresh`);
    }
  }

  /** Lists the runtime's images for the node status (every 30 s). Never throws: a failure keeps the last list. */
  async refreshList(): Promise<void> {
    try {
      this.#images = sortBySize(await this.#o.runtime.listImages());
    } catch (err) {
      this.#log.debug({ err: errorMessage(err) }, `cannot list images: ${errorMessage(err)}`);
    }
  }

  /** One collection (detection, age, space). Never throws: failures are logged, evented and returned. */
  async syncOnce(): Promise<GcOutcome> {
    const out: GcOutcome = { removed: [] };
    try {
      await this.load();
      const { images, inUse } = await this.#detect();
      this.#images = sortBySize(images);
      if (!imageGcEnabled(this.#o.policy)) {
        if (!this.#disabledSaid) this.#log.info('image garbage collection is off: imageGCHighThresholdPercent is 100 and imageMaximumGCAge is 0');
        this.#disabledSaid = true;
        return out;
      }
      await this.#collect(inUse, out);
      this.#failedBefore = false;
    } catch (err) {
      out.error = errorMessage(err);
      const reason = (err as NodeletError).details?.reason;
      if (reason === 'InvalidDiskCapacity' || reason === 'FreeDiskSpaceFailed') this.#o.events.emit(nodeRef(this.#o.nodeName), 'Warning', reason, out.error);
      if (this.#failedBefore) {
        this.#log.error({ err: out.error }, `image garbage collection failed multiple times in a row: ${out.error}`);
        this.#o.events.emit(nodeRef(this.#o.nodeName), 'Warning', 'ImageGCFailed', out.error);
      } else {
        this.#log.warn({ err: out.error }, `image garbage collection failed: ${out.error}`);
      }
      this.#failedBefore = true;
    } finally {
      await this.#save();
    }
    return out;
  }

  /**
   * The eviction manager's node-level reclaim under disk pressure (the kubelet's
   * DeleteUnusedImages): every unused, unpinned image at least `imageMinimumGCAge` old (the
   * sandbox image counts as used) is removed, least recently used first, whatever the
   * thresholds. Never throws: a failed removal is skipped and reported in `error`.
   */
  async deleteUnusedImages(): Promise<GcOutcome> {
    const out: GcOutcome = { removed: [] };
    try {
      await this.load();
      const { inUse } = await this.#detect();
      const { forSpace } = imagesToRemove(evictionOrder(this.#records, inUse), this.#o.clock.now(), { minAgeMs: this.#o.policy.minAgeMs, maxAgeMs: 0 });
      const errors: string[] = [];
      for (const c of forSpace) {
        if (await this.#remove(c, 'space', 'to relieve disk pressure (eviction manager)', errors)) out.removed.push({ id: c.id, reason: 'space', size: c.size });
      }
      if (errors.length) out.error = errors.join('; ');
    } catch (err) {
      out.error = errorMessage(err);
    } finally {
      await this.#save();
    }
    return out;
  }

  start(signal?: AbortSignal): void {
    this.#gcLoop.start(signal);
    // The first list comes with the first collection; then every 30 s.
    void this.#o.clock
      .sleep(this.#o.listPeriodMs ?? IMAGE_LIST_PERIOD_MS, signal)
      .then(() => this.#listLoop.start(signal))
      .catch(() => undefined);
  }

  async stop(): Promise<void> {
    await Promise.all([this.#gcLoop.stop(), this.#listLoop.stop()]);
  }

  /** Lists images and containers, marks what is in use, updates the records. */
  async #detect(): Promise<{ images: Image[]; inUse: Set<string> }> {
    const rt = this.#o.runtime;
    const [images, containers, sandboxImage] = await Promise.all([rt.listImages(), rt.listContainers(), this.#sandboxImage()]);
    const refs = containerImageRefs(containers);
    if (sandboxImage) refs.push(sandboxImage);
    const inUse = imagesInUse(images, refs);
    const now = this.#o.clock.now();
    // Records from the file seed the first detection only.
    const seed = this.#detected ? undefined : this.#loaded;
    const prev = seed ? new Map([...seed].map(([id, r]) => [id, { ...r, size: 0, pinned: false }])) : this.#records;
    this.#records = detectImages(prev, images, inUse, now);
    this.#detected = true;
    return { images, inUse };
  }

  /**
   * The sandbox image the runtime uses (containerd: `sandboxImage` in CRI Status' verbose
   * `config`), resolved to its ID; '' when the runtime does not say (CRI-O pins it instead).
   */
  async #sandboxImage(): Promise<string> {
    try {
      const cfg = (await this.#o.runtime.status(true)).info['config'];
      if (!cfg || cfg.length > 1024 * 1024) return '';
      const name = (JSON.parse(cfg) as { sandboxImage?: unknown }).sandboxImage;
      if (typeof name !== 'string' || name === '') return '';
      return (await this.#o.runtime.imageStatus(name))?.id ?? name;
    } catch {
      return '';
    }
  }

  async #collect(inUse: Set<string>, out: GcOutcome): Promise<void> {
    const policy = this.#o.policy;
    const now = this.#o.clock.now();
    const errors: string[] = [];
    const candidates = evictionOrder(this.#records, inUse);
    const { byAge } = imagesToRemove(candidates, now, policy);
    for (const c of byAge) {
      if (await this.#remove(c, 'age', `unused for more than imageMaximumGCAge (${Math.round((now - (c.lastUsed ?? c.firstDetected)) / 1000)} s)`, errors)) out.removed.push({ id: c.id, reason: 'age', size: c.size });
    }
    if (errors.length) throw new NodeletError('INTERNAL', `wanted to free images older than ${policy.maxAgeMs / 1000} s, encountered errors in image deletion: ${errors.join('; ')}`);
    if (policy.highThresholdPercent >= 100) return;
    const fsUsage = await this.#fsUsage();
    const need = spaceToFree(fsUsage, policy);
    if (!need) return;
    this.#log.info({ usagePercent: need.usagePercent, highThreshold: policy.highThresholdPercent, lowThreshold: policy.lowThresholdPercent, bytesToFree: need.bytesToFree }, `image filesystem usage ${need.usagePercent}% is at or over the high threshold (${policy.highThresholdPercent}%): trying to free ${need.bytesToFree} bytes down to the low threshold (${policy.lowThresholdPercent}%)`);
    const left = evictionOrder(this.#records, inUse);
    const { forSpace } = imagesToRemove(left, now, { minAgeMs: policy.minAgeMs, maxAgeMs: 0 });
    let freed = 0;
    for (const c of forSpace) {
      if (freed >= need.bytesToFree) break;
      if (await this.#remove(c, 'space', 'to free space on the image filesystem', errors)) {
        freed += c.size;
        out.removed.push({ id: c.id, reason: 'space', size: c.size });
      }
    }
    out.space = { ...need, freed };
    if (errors.length) throw new NodeletError('INTERNAL', `wanted to free ${need.bytesToFree} bytes, but freed ${freed} bytes space with errors in image deletion: ${errors.join('; ')}`);
    if (freed < need.bytesToFree) {
      throw new NodeletError('INTERNAL', `Failed to garbage collect required amount of images. Attempted to free ${need.bytesToFree} bytes, but only found ${freed} bytes eligible to free.`, { reason: 'FreeDiskSpaceFailed' });
    }
  }

  async #remove(c: Candidate, reason: 'age' | 'space', why: string, errors: string[]): Promise<boolean> {
    try {
      await this.#o.runtime.removeImage(c.id);
    } catch (err) {
      errors.push(`${c.id}: ${errorMessage(err)}`);
      return false;
    }
    this.#records.delete(c.id);
    this.#images = this.#images.filter((i) => i.id !== c.id);
    this.#log.info({ imageID: c.id, size: c.size, reason }, `removed image ${c.id} (${c.size} bytes): ${why}`);
    return true;
  }

  /** statfs of the image filesystem: the runtime's mountpoint, else the root dir's. */
  async #fsUsage(): Promise<FsUsage> {
    const mounts = await this.#o.runtime.imageFsInfo?.().catch(() => [] as string[]);
    const dir = mounts?.[0] || this.#o.rootDir;
    const statfs = this.#o.statfs ?? ((d: string) => fs.statfs(d));
    const timeoutMs = this.#o.statfsTimeoutMs ?? 10_000;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new NodeletError('DEADLINE_EXCEEDED', `statfs ${dir}: no answer within ${timeoutMs} ms`)), timeoutMs);
      timer.unref();
    });
    try {
      const s = await Promise.race([statfs(dir), late]);
      return { capacityBytes: s.blocks * s.bsize, availableBytes: s.bavail * s.bsize };
    } finally {
      clearTimeout(timer);
    }
  }

  async #save(): Promise<void> {
    if (this.#records.size === 0 && this.#written === '') return;
    const text = encodeRecords(this.#records);
    if (text === this.#written) return;
    try {
      await writeFileAtomic(this.#file, text, 0o600);
      this.#written = text;
    } catch (err) {
      this.#log.warn({ file: this.#file, err: errorMessage(err) }, `cannot write the image records ${this.#file}: ${errorMessage(err)}`);
    }
  }
}
