/**
 * The kubelet's records of pod resources, `<root-dir>/allocated_pods_state` (what each
 * admitted pod was allocated) and `<root-dir>/actuated_pods_state` (what the runtime was
 * given for each started container). With `InPlacePodVerticalScaling` (GA and locked on in
 * v1.35) a kubelet reads them at start; tools that inspect a node (and a kubelet taking the
 * node back from nodelet) find them in the kubelet's checkpoint shape:
 *
 *   {"data":"<JSON of {\"entries\":{<pod uid>:{\"ContainerResources\":{<name>:{\"limits\":…,\"requests\":…}}}}}>","checksum":N}
 *
 * where N is the checkpointmanager's checksum of the data string (FNV-1a 32 of the spew
 * dump `(string)<data>`), JSON written as Go's encoding/json writes it (map keys sorted,
 * struct fields in declaration order, empty lists left out). Quantities are kept as the pod
 * gave them (the API server has already canonicalized an API pod's; a static pod's stay as
 * written, which a kubelet parses just the same).
 *
 * Writes are atomic (root-dir.ts writeFileAtomic), serialized, and only when the content
 * changes. A missing file is created empty; a corrupt one is logged and rebuilt from what
 * runs, never fatal.
 */
import path from 'node:path';
import type { Container, Pod, ResourceRequirements as K8sResourceRequirements } from 'kubernetes-types/core/v1.js';
import { errorMessage } from '../../errors.js';
import type { Logger } from '../../log.js';
import { fnv32a } from '../../system/fnv.js';
import { writeFileAtomic } from '../../system/root-dir.js';
import { readBoundedText } from '../../system/safe-file.js';

export const ALLOCATED_PODS_STATE = 'allocated_pods_state';
export const ACTUATED_PODS_STATE = 'actuated_pods_state';
/** 110 pods of a few containers fit in a few tens of KiB; anything far larger is not ours. */
const STATE_MAX_BYTES = 8 * 1024 * 1024;

export type ResourceList = Readonly<Record<string, string>>;
export interface ResourceRequirements {
  readonly limits?: ResourceList;
  readonly requests?: ResourceList;
}
export interface PodResourceInfo {
  readonly ContainerResources: Readonly<Record<string, ResourceRequirements>>;
  /** Pod-level resources (`spec.resources`), when the pod sets them. */
  readonly PodLevelResources?: ResourceRequirements;
}
export type PodResourceInfoMap = Readonly<Record<string, PodResourceInfo>>;

const sortedKeys = (o: object): string[] => Object.keys(o).sort();

function resourceList(l: Readonly<Record<string, unknown>> | undefined): ResourceList | undefined {
  if (!l) return undefined;
  const out: Record<string, string> = {};
  for (const k of sortedKeys(l)) out[k] = String(l[k]);
  return Object.keys(out).length > 0 ? out : undefined;
}

function requirements(r: K8sResourceRequirements | undefined): ResourceRequirements {
  const limits = resourceList(r?.limits as Record<string, unknown> | undefined);
  const requests = resourceList(r?.requests as Record<string, unknown> | undefined);
  return { ...(limits ? { limits } : {}), ...(requests ? { requests } : {}) };
}

/** What the kubelet allocates to a pod at admission: every container's resources, init containers too. */
export function podResourceInfo(pod: Pod): PodResourceInfo {
  const containers: Record<string, ResourceRequirements> = {};
  for (const c of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]) containers[c.name] = requirements(c.resources);
  const podLevel = (pod.spec as { resources?: K8sResourceRequirements } | undefined)?.resources;
  return { ContainerResources: containers, ...(podLevel ? { PodLevelResources: requirements(podLevel) } : {}) };
}

/** What the runtime was given for one container (its declared resources). */
export function containerResources(c: Container): ResourceRequirements {
  return requirements(c.resources);
}

/** Go's encoding/json of the map: keys sorted at every level, fields in declaration order. */
function goJson(entries: PodResourceInfoMap): string {
  const req = (r: ResourceRequirements): Record<string, ResourceList> => {
    const limits = resourceList(r.limits);
    const requests = resourceList(r.requests);
    return { ...(limits ? { limits } : {}), ...(requests ? { requests } : {}) };
  };
  const out: Record<string, unknown> = {};
  for (const uid of sortedKeys(entries)) {
    const info = entries[uid]!;
    const containers: Record<string, unknown> = {};
    for (const name of sortedKeys(info.ContainerResources)) containers[name] = req(info.ContainerResources[name]!);
    out[uid] = { ContainerResources: containers, ...(info.PodLevelResources ? { PodLevelResources: req(info.PodLevelResources) } : {}) };
  }
  // `entries` is omitempty: an empty map is left out.
  return JSON.stringify(Object.keys(out).length > 0 ? { entries: out } : {});
}

/** The checkpointmanager's checksum of a string payload: FNV-1a 32 of spew's `(string)<data>`. */
export function allocationChecksum(data: string): number {
  return fnv32a(`(string)${data}`);
}

/** The file's content, as the kubelet's MarshalCheckpoint writes it. */
export function encodeAllocationCheckpoint(entries: PodResourceInfoMap): string {
  const data = goJson(entries);
  return JSON.stringify({ data, checksum: allocationChecksum(data) });
}

function checkList(l: unknown, where: string): void {
  if (l === undefined || l === null) return;
  if (typeof l !== 'object' || Array.isArray(l)) throw new Error(`${where} is not a map`);
  for (const [k, v] of Object.entries(l)) if (typeof v !== 'string') throw new Error(`${where}.${k} is not a quantity string`);
}

/** Parses and verifies a checkpoint; throws naming what is wrong (not JSON, no data, checksum, shape). */
export function decodeAllocationCheckpoint(text: string): PodResourceInfoMap {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new Error(`not JSON (${errorMessage(err)})`);
  }
  if (typeof doc !== 'object' || doc === null) throw new Error('not a JSON object');
  const { data, checksum } = doc as { data?: unknown; checksum?: unknown };
  if (typeof data !== 'string') throw new Error('no data');
  if (typeof checksum !== 'number') throw new Error('no checksum');
  const want = allocationChecksum(data);
  if (checksum !== want) throw new Error(`checksum mismatch: the file says ${checksum}, its data hash to ${want}`);
  let payload: unknown;
  try {
    payload = JSON.parse(data);
  } catch (err) {
    throw new Error(`data is not JSON (${errorMessage(err)})`);
  }
  const entries = (payload as { entries?: unknown } | null)?.entries ?? {};
  if (typeof entries !== 'object' || entries === null || Array.isArray(entries)) throw new Error('entries is not a map');
  for (const [uid, info] of Object.entries(entries)) {
    const cr = (info as { ContainerResources?: unknown } | null)?.ContainerResources ?? {};
    if (typeof cr !== 'object' || cr === null || Array.isArray(cr)) throw new Error(`entries.${uid}.ContainerResources is not a map`);
    for (const [name, r] of Object.entries(cr)) {
      checkList((r as ResourceRequirements | null)?.limits, `entries.${uid}.ContainerResources.${name}.limits`);
      checkList((r as ResourceRequirements | null)?.requests, `entries.${uid}.ContainerResources.${name}.requests`);
    }
  }
  return entries as PodResourceInfoMap;
}

const sameJson = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/**
 * Both records of a node. `allocated` is set when a pod is admitted (its first sandbox),
 * `actuated` per container when the runtime has started it with its resources; a pod's
 * entries go with its directories (CriPodRuntime.cleanupPod, housekeeping included).
 */
export interface AllocationRecords {
  readonly allocated: AllocationRecord;
  readonly actuated: AllocationRecord;
}

/** Reads (or creates) both files under the root dir; logs what it found. Never throws for content. */
export async function loadAllocationRecords(rootDir: string, log: Logger): Promise<AllocationRecords> {
  const allocated = new AllocationRecord(rootDir, ALLOCATED_PODS_STATE, log);
  const actuated = new AllocationRecord(rootDir, ACTUATED_PODS_STATE, log);
  for (const r of [allocated, actuated]) {
    const how = await r.load();
    log.debug({ file: r.file, pods: r.uids().length }, `pod resource record ${r.file}: ${how}`);
  }
  return { allocated, actuated };
}

/** One of the two records: in memory, mirrored to its file on every change. */
export class AllocationRecord {
  readonly file: string;
  #entries: Record<string, PodResourceInfo> = {};
  #writing: Promise<void> = Promise.resolve();

  constructor(
    rootDir: string,
    name: typeof ALLOCATED_PODS_STATE | typeof ACTUATED_PODS_STATE,
    private readonly log: Logger,
  ) {
    this.file = path.join(rootDir, name);
  }

  /**
   * At start: reads the file a previous run (nodelet's or a kubelet's) left. Missing: created
   * empty. Corrupt: logged, rebuilt empty (what runs fills it again). Never throws for content.
   */
  async load(): Promise<'kept' | 'created' | 'rebuilt'> {
    let text: string;
    try {
      text = await readBoundedText(this.file, { what: 'pod resource record', maxBytes: STATE_MAX_BYTES, noFollow: true });
    } catch (err) {
      if ((err as { code?: string }).code !== 'NOT_FOUND') {
        this.log.warn({ file: this.file, err: errorMessage(err) }, `pod resource record ${this.file} cannot be read (${errorMessage(err)}); rebuilding it`);
        await this.#write();
        return 'rebuilt';
      }
      await this.#write();
      return 'created';
    }
    try {
      this.#entries = { ...decodeAllocationCheckpoint(text) };
      return 'kept';
    } catch (err) {
      this.log.warn({ file: this.file, err: errorMessage(err) }, `pod resource record ${this.file} is corrupt (${errorMessage(err)}); rebuilding it`);
      this.#entries = {};
      await this.#write();
      return 'rebuilt';
    }
  }

  get(uid: string): PodResourceInfo | undefined {
    return this.#entries[uid];
  }

  uids(): string[] {
    return Object.keys(this.#entries);
  }

  /** Records a pod's resources; writes only when they changed. */
  async setPod(uid: string, info: PodResourceInfo): Promise<void> {
    if (sameJson(this.#entries[uid], info)) return;
    // A copy of its own: setContainer changes it in place.
    this.#entries[uid] = { ...info, ContainerResources: { ...info.ContainerResources } };
    await this.#write();
  }

  /** Records one container's resources within its pod's entry; writes only when they changed. */
  async setContainer(uid: string, name: string, r: ResourceRequirements): Promise<void> {
    const cur = this.#entries[uid];
    if (cur && sameJson(cur.ContainerResources[name], r)) return;
    // In place (the entry is this record's own copy): a copy of the pod's map per container
    // was quadratic over a pod's start (the API lets a pod have ~45,000 containers).
    if (cur) (cur.ContainerResources as Record<string, ResourceRequirements>)[name] = r;
    else this.#entries[uid] = { ContainerResources: { [name]: r } };
    await this.#write();
  }

  /** Forgets one pod (removed from the node); writes when it was recorded. */
  async removePod(uid: string): Promise<void> {
    if (!(uid in this.#entries)) return;
    delete this.#entries[uid];
    await this.#write();
  }

  /** Forgets every pod not in `keep` (the kubelet's RemoveOrphanedPods); writes when any went. */
  async retain(keep: ReadonlySet<string>): Promise<string[]> {
    const gone = Object.keys(this.#entries).filter((uid) => !keep.has(uid));
    if (gone.length === 0) return gone;
    for (const uid of gone) delete this.#entries[uid];
    await this.#write();
    return gone;
  }

  /** A write queued behind the one in flight, not started yet: it will write the latest content. */
  #queued: Promise<void> | undefined;

  /**
   * Serialized: a write starts after the previous one ended and writes the latest content.
   * Changes made while a write is queued join it (one encoding of the whole record, not one
   * per change).
   */
  #write(): Promise<void> {
    if (this.#queued) return this.#queued;
    const next = this.#writing.then(() => {
      this.#queued = undefined;
      return writeFileAtomic(this.file, encodeAllocationCheckpoint(this.#entries), 0o600);
    });
    this.#writing = this.#queued = next.catch((err: unknown) => {
      this.log.warn({ file: this.file, err: errorMessage(err) }, `cannot write pod resource record ${this.file}: ${errorMessage(err)}`);
    });
    return this.#writing;
  }
}
