/**
 * The root dir (`--root-dir`, /var/lib/kubelet) as other node software expects to find it:
 * the kubelet's directories with its modes, the device manager's checkpoint in its JSON
 * shape and checksum, and the image pull records. Device plugins, CSI drivers, monitoring
 * agents and `crictl`-era tooling read these paths; nodelet keeps them as the kubelet does.
 *
 * - ensureRootDirLayout(): called once at start, after the lock. Creates what is missing
 *   (idempotent); `checkpoints/` is tightened to 0700 if looser (its archives hold memory).
 * - writeFileAtomic(): every file nodelet writes here goes through it (temp file in the same
 *   directory, fsync, rename, fsync of the directory), so a crash leaves the old or the new
 *   content, never a torn one; removeLeftoverTempFiles() clears the temp files a crash left.
 * - A corrupt file found at start is logged and rebuilt, never fatal.
 *
 * Reserved, never created: `device-plugins/kubelet.sock` (the registration socket a
 * device plugin dials: nodelet serves no device-plugin registration, so nothing answers
 * there; a plugin sees the same as with a kubelet that has not started its device manager).
 */
import crypto from 'node:crypto';
import type { Dirent } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import { readBoundedText } from './safe-file.js';
import { fnv32a } from './fnv.js';

/** The kubelet's directories under the root dir, with the modes it creates them with. */
export const ROOT_DIR_LAYOUT: ReadonlyArray<{ dir: string; mode: number; enforce?: boolean }> = [
  { dir: 'pods', mode: 0o750 },
  { dir: 'plugins', mode: 0o750 },
  { dir: 'plugins_registry', mode: 0o750 },
  { dir: 'pod-resources', mode: 0o750 },
  // Checkpoint archives hold every memory page of a container, secrets included.
  { dir: 'checkpoints', mode: 0o700, enforce: true },
  // The device manager's checkpoint directory (checkpointmanager's file store: 0755).
  { dir: 'device-plugins', mode: 0o755 },
  { dir: 'seccomp', mode: 0o755 },
  { dir: 'pki', mode: 0o755 },
  // Pull records name images and credential hashes: root only.
  { dir: 'image_manager', mode: 0o700 },
  { dir: 'image_manager/pulling', mode: 0o700 },
  { dir: 'image_manager/pulled', mode: 0o700 },
];

export const DEVICE_CHECKPOINT_FILE = 'device-plugins/kubelet_internal_checkpoint';
/** Reserved for the device plugin registration server; never created by nodelet. */
export const DEVICE_PLUGIN_SOCKET = 'device-plugins/kubelet.sock';
const CHECKPOINT_MAX_BYTES = 16 * 1024 * 1024;
const RECORD_MAX_BYTES = 1024 * 1024;

/** The temp file writeFileAtomic writes `file` through: `.<name>.tmp` beside it. */
export function atomicTempPath(file: string): string {
  return path.join(path.dirname(file), `.${path.basename(file)}.tmp`);
}

/**
 * A temp file of writeFileAtomic (`.<name>.tmp`), or of the random-suffixed names earlier
 * versions used (`.<name>.tmp-<pid>-<hex>`, `<name>.<pid>.<hex>.tmp`): what a write a crash
 * cut short leaves. Never a record: readers open records by their exact names.
 */
export function isAtomicTempName(name: string): boolean {
  return /^\..+\.tmp(-\d+-[0-9a-f]+)?$/.test(name) || /^[^.].*\.\d+\.[0-9a-f]{8}\.tmp$/.test(name);
}

/** Writes in flight per target path: the one temp name per file is only ever used by one write at a time. */
const writing = new Map<string, Promise<void>>();

/**
 * Writes `data` to `file` so that readers see the old or the new content, never a part:
 * the temp file `.<name>.tmp` in the same directory (a leftover removed first, then created
 * O_EXCL with `mode`), fsync, rename over `file`, fsync of the directory. Writes of one path
 * are serialized in this process (the node lock keeps other nodelets out), so one fixed temp
 * name per file suffices: what a crash leaves is bounded and known (removeLeftoverTempFiles
 * at start), and a test can name it (strace -P, test/integration/daemon/crash-writes.test.ts).
 * The temp file is removed on failure.
 */
export async function writeFileAtomic(file: string, data: string | Uint8Array, mode = 0o600): Promise<void> {
  const key = path.resolve(file);
  const run = (writing.get(key) ?? Promise.resolve()).catch(() => undefined).then(() => writeOnce(file, data, mode));
  writing.set(key, run);
  try {
    await run;
  } finally {
    if (writing.get(key) === run) writing.delete(key);
  }
}

async function writeOnce(file: string, data: string | Uint8Array, mode: number): Promise<void> {
  const dir = path.dirname(file);
  const tmp = atomicTempPath(file);
  // A leftover of a crashed write (ours: the lock is held); O_EXCL then never follows a link.
  await fs.rm(tmp, { force: true });
  const h = await fs.open(tmp, 'wx', mode);
  try {
    try {
      await h.writeFile(data);
      await h.chmod(mode);
      await h.sync();
    } finally {
      await h.close();
    }
    await fs.rename(tmp, file);
  } catch (err) {
    await fs.rm(tmp, { force: true });
    throw err;
  }
  const d = await fs.open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

/**
 * At start, after the lock: removes the temp files (isAtomicTempName) that writes cut short
 * by a crash left in `dir` (not recursive), each logged with its path. Returns their paths.
 * A directory that cannot be read is skipped (the layout creates it next).
 */
export async function removeLeftoverTempFiles(dir: string, log: Logger): Promise<string[]> {
  let entries: Dirent[];
  try {
    entries = await fs.readdir(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const e of entries) {
    if (!e.isFile() || !isAtomicTempName(e.name)) continue;
    const file = path.join(dir, e.name);
    try {
      await fs.rm(file, { force: true });
      removed.push(file);
      log.warn({ file }, `removed ${file}: the temp file of a write that a crash cut short (the file it was for keeps its previous content)`);
    } catch (err) {
      log.warn({ file, err: errorMessage(err) }, `cannot remove the leftover temp file ${file}: ${errorMessage(err)}`);
    }
  }
  return removed;
}

/**
 * At start: the temp files writes cut short left where nodelet writes (the root dir,
 * `device-plugins/`, `pki/` and `extraDirs`, such as a `--cert-dir` elsewhere); image_manager's
 * go in ImagePullRecords.recover(). Returns the paths removed.
 */
export async function removeRootDirTempFiles(rootDir: string, log: Logger, extraDirs: readonly string[] = []): Promise<string[]> {
  const dirs = new Set([rootDir, path.join(rootDir, 'device-plugins'), path.join(rootDir, 'pki'), ...extraDirs].map((d) => path.resolve(d)));
  const removed: string[] = [];
  for (const dir of dirs) removed.push(...(await removeLeftoverTempFiles(dir, log)));
  return removed;
}

/** Creates the layout (missing directories only; `enforce` ones are tightened). Idempotent. */
export async function ensureRootDirLayout(rootDir: string): Promise<void> {
  await fs.mkdir(rootDir, { recursive: true, mode: 0o750 });
  for (const { dir, mode, enforce } of ROOT_DIR_LAYOUT) {
    const p = path.join(rootDir, dir);
    await fs.mkdir(p, { recursive: true, mode });
    if (enforce) {
      const st = await fs.lstat(p);
      if ((st.mode & 0o777) !== mode) await fs.chmod(p, mode);
    }
  }
}

// ------------------------------------------------------------------ device manager checkpoint

/** One device assignment, as the device manager's PodDevicesEntry (DevicesPerNUMA: NUMA node -> device IDs). */
export interface PodDevicesEntry {
  PodUID: string;
  ContainerName: string;
  ResourceName: string;
  DeviceIDs: Record<string, string[] | null> | null;
  /** base64 of the plugin's AllocateResponse (Go []byte); null when none. */
  AllocResp: string | null;
}

export interface DeviceCheckpointData {
  PodDeviceEntries: PodDevicesEntry[] | null;
  /** null: a Go nil map (JSON null), hashed differently from an empty one. */
  RegisteredDevices: Record<string, string[] | null> | null;
}

const strList = (l: readonly string[] | null | undefined): string => (l == null ? '<nil>' : `[${l.join(' ')}]`);

/**
 * The text the kubelet's checkpointmanager hashes: go-spew's `%#v` of the device manager's
 * `checkpoint.checkpointData` (DeepHashObject: SortKeys, DisableMethods, SpewKeys). Types
 * are printed for the top value and struct fields, not for slice and map elements; map keys
 * sorted (NUMA ids numerically); nil slices and maps are `<nil>`; []byte is its bytes in decimal.
 */
export function spewCheckpointData(d: DeviceCheckpointData): string {
  const entries =
    d.PodDeviceEntries === null
      ? '<nil>'
      : `[${d.PodDeviceEntries.map((e) => {
          const ids = e.DeviceIDs;
          const numa = Object.keys(ids ?? {})
            .map(Number)
            .sort((a, b) => a - b);
          const devs = ids == null ? '<nil>' : `map[${numa.map((n) => `${n}:${strList(ids[String(n)])}`).join(' ')}]`;
          const alloc = e.AllocResp == null ? '<nil>' : `[${[...Buffer.from(e.AllocResp, 'base64')].join(' ')}]`;
          return `{PodUID:(string)${e.PodUID} ContainerName:(string)${e.ContainerName} ResourceName:(string)${e.ResourceName} DeviceIDs:(checkpoint.DevicesPerNUMA)${devs} AllocResp:([]uint8)${alloc}}`;
        }).join(' ')}]`;
  const reg = d.RegisteredDevices;
  const keys = Object.keys(reg ?? {}).sort();
  const registered = reg == null ? '<nil>' : `map[${keys.map((k) => `${k}:${strList(reg[k])}`).join(' ')}]`;
  return `(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)${entries} RegisteredDevices:(map[string][]string)${registered}}`;
}

/** The checkpointmanager's checksum of the device manager's data (checksum.New(cp.Data)). */
export function deviceCheckpointChecksum(d: DeviceCheckpointData): number {
  return fnv32a(spewCheckpointData(d));
}

/** The file's JSON, as MarshalCheckpoint writes it. */
export function encodeDeviceCheckpoint(d: DeviceCheckpointData): string {
  return JSON.stringify({ Data: { PodDeviceEntries: d.PodDeviceEntries, RegisteredDevices: d.RegisteredDevices }, Checksum: deviceCheckpointChecksum(d) });
}

const isStrList = (v: unknown): boolean => v === null || (Array.isArray(v) && v.every((s) => typeof s === 'string'));
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses and verifies a checkpoint file's text; throws naming what is wrong. */
export function decodeDeviceCheckpoint(text: string): DeviceCheckpointData {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new Error(`not JSON: ${errorMessage(err)}`);
  }
  if (!isObj(doc) || !isObj(doc.Data)) throw new Error('no Data object');
  const { PodDeviceEntries: entries, RegisteredDevices: registered } = doc.Data;
  if (!(entries === null || entries === undefined || Array.isArray(entries))) throw new Error('Data.PodDeviceEntries is not a list');
  if (!(registered === null || registered === undefined || isObj(registered)) || (isObj(registered) && !Object.values(registered).every(isStrList))) {
    throw new Error('Data.RegisteredDevices is not a map of device lists');
  }
  for (const [i, e] of (entries ?? []).entries()) {
    if (!isObj(e) || !['PodUID', 'ContainerName', 'ResourceName'].every((k) => typeof e[k] === 'string') || !(e.DeviceIDs === null || (isObj(e.DeviceIDs) && Object.values(e.DeviceIDs).every(isStrList))) || !(e.AllocResp == null || typeof e.AllocResp === 'string')) {
      throw new Error(`Data.PodDeviceEntries[${i}] is not a device entry`);
    }
  }
  const data: DeviceCheckpointData = {
    // Go decodes an absent or null field as nil: spew prints <nil> for it.
    PodDeviceEntries: entries == null ? null : (entries as PodDevicesEntry[]).map((e) => ({ ...e, DeviceIDs: e.DeviceIDs ?? null, AllocResp: e.AllocResp ?? null })),
    RegisteredDevices: (registered as Record<string, string[] | null> | null | undefined) ?? null,
  };
  if (typeof doc.Checksum !== 'number') throw new Error('no Checksum');
  const want = deviceCheckpointChecksum(data);
  if (doc.Checksum !== want) throw new Error(`checksum mismatch: the file says ${doc.Checksum}, its data hash to ${want}`);
  return data;
}

/**
 * At start: keeps a valid `device-plugins/kubelet_internal_checkpoint` as it is (another
 * kubelet's device assignments stay readable to the tools that read them); writes an empty
 * one where there is none; a corrupt one is logged and rebuilt empty (as the device manager
 * does after "failed to read checkpoint"). Never throws for the file's content.
 */
export async function ensureDeviceCheckpoint(rootDir: string, log: Logger): Promise<'kept' | 'created' | 'rebuilt'> {
  const file = path.join(rootDir, DEVICE_CHECKPOINT_FILE);
  const empty = encodeDeviceCheckpoint({ PodDeviceEntries: null, RegisteredDevices: {} });
  let text: string;
  try {
    text = await readBoundedText(file, { what: 'device manager checkpoint', maxBytes: CHECKPOINT_MAX_BYTES, noFollow: true });
  } catch (err) {
    if ((err as { code?: string }).code === 'NOT_FOUND') {
      await writeFileAtomic(file, empty, 0o600);
      return 'created';
    }
    log.warn({ file, err: errorMessage(err) }, `device manager checkpoint ${file} cannot be read (${errorMessage(err)}); rebuilding it empty`);
    await fs.rm(file, { force: true, recursive: false }).catch(() => {});
    await writeFileAtomic(file, empty, 0o600);
    return 'rebuilt';
  }
  try {
    decodeDeviceCheckpoint(text);
    return 'kept';
  } catch (err) {
    log.warn({ file, err: errorMessage(err) }, `device manager checkpoint ${file} is corrupt (${errorMessage(err)}); rebuilding it empty`);
    await writeFileAtomic(file, empty, 0o600);
    return 'rebuilt';
  }
}

// ------------------------------------------------------------------ image pull records

const RECORDS_API_VERSION = 'kubelet.config.k8s.io/v1alpha1';

/** `sha256-<hex of sha256(key)>`: the record's file name (the pull manager's). */
export function recordFileName(key: string): string {
  return `sha256-${crypto.createHash('sha256').update(key).digest('hex')}`;
}

/** The image's repository without tag or digest: the key of its credential mapping. */
export function imageRepository(image: string): string {
  const at = image.indexOf('@');
  const noDigest = at >= 0 ? image.slice(0, at) : image;
  const slash = noDigest.lastIndexOf('/');
  const colon = noDigest.lastIndexOf(':');
  return colon > slash ? noDigest.slice(0, colon) : noDigest;
}

/** A Secret whose credentials pulled an image: its coordinates and the credential's hash, never the secret. */
export interface ImagePullSecretRecord {
  uid: string;
  namespace: string;
  name: string;
  credentialHash: string;
}

export interface ImagePullServiceAccountRecord {
  uid: string;
  namespace: string;
  name: string;
}

/** The kubelet's ImagePullCredentials: who may use an image pulled with them. */
export interface ImagePullCredentials {
  kubernetesSecrets?: ImagePullSecretRecord[];
  kubernetesServiceAccounts?: ImagePullServiceAccountRecord[];
  /** No credentials were needed (or node-wide ones): every pod on the node may use the image. */
  nodePodsAccessible?: boolean;
}

/** The kubelet's ImagePulledRecord (kubelet.config.k8s.io/v1alpha1). */
export interface ImagePulledRecord {
  kind: 'ImagePulledRecord';
  apiVersion: string;
  lastUpdatedTime: string;
  imageRef: string;
  /** Normalized repository (image-name.ts) -> the credentials it was pulled with. */
  credentialMapping?: Record<string, ImagePullCredentials>;
}

const secretOrder = (a: { namespace: string; name: string; uid: string }, b: { namespace: string; name: string; uid: string }) =>
  a.namespace < b.namespace ? -1 : a.namespace > b.namespace ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : a.uid < b.uid ? -1 : a.uid > b.uid ? 1 : 0;

/**
 * The kubelet's pulledRecordMergeNewCreds: `creds` merged into `record`'s mapping for
 * `repository`. Node-wide access absorbs everything; Secrets are kept unique by
 * namespace/name/uid (a newer hash replaces an older one), sorted. Returns the record
 * unchanged (same object) when nothing is new. Pure.
 */
export function mergePulledRecord(record: ImagePulledRecord, repository: string, creds: ImagePullCredentials | undefined, now: string): ImagePulledRecord {
  if (!creds) return record;
  const secrets = creds.kubernetesSecrets ?? [];
  const accounts = creds.kubernetesServiceAccounts ?? [];
  if (!creds.nodePodsAccessible && secrets.length === 0 && accounts.length === 0) return record;
  const mapping = record.credentialMapping ?? {};
  const selected = mapping[repository];
  const changed = (c: ImagePullCredentials): ImagePulledRecord => ({ ...record, lastUpdatedTime: now, credentialMapping: { ...mapping, [repository]: c } });
  if (!selected) return changed(structuredClone(creds));
  if (selected.nodePodsAccessible) return record;
  if (creds.nodePodsAccessible) return changed({ nodePodsAccessible: true });
  if (secrets.length > 0) {
    const byKey = new Map((selected.kubernetesSecrets ?? []).map((s) => [`${s.namespace}/${s.name}/${s.uid}`, s]));
    let dirty = false;
    for (const s of secrets) {
      const k = `${s.namespace}/${s.name}/${s.uid}`;
      if (byKey.get(k)?.credentialHash !== s.credentialHash) {
        byKey.set(k, { ...s });
        dirty = true;
      }
    }
    if (!dirty) return record;
    return changed({ ...selected, kubernetesSecrets: [...byKey.values()].sort(secretOrder) });
  }
  const have = new Set((selected.kubernetesServiceAccounts ?? []).map((a) => `${a.namespace}/${a.name}/${a.uid}`));
  const add = accounts.filter((a) => !have.has(`${a.namespace}/${a.name}/${a.uid}`));
  if (add.length === 0) return record;
  return changed({ ...selected, kubernetesServiceAccounts: [...(selected.kubernetesServiceAccounts ?? []), ...add].sort(secretOrder) });
}

/** A pulled record read back: its shape checked field by field (a hand-edited or foreign file is hostile). */
function validPulledRecord(doc: unknown): doc is ImagePulledRecord {
  if (!isObj(doc) || doc.kind !== 'ImagePulledRecord' || typeof doc.imageRef !== 'string') return false;
  if (doc.credentialMapping === undefined || doc.credentialMapping === null) return true;
  if (!isObj(doc.credentialMapping)) return false;
  const coords = (x: unknown, hash: boolean) => isObj(x) && ['uid', 'namespace', 'name', ...(hash ? ['credentialHash'] : [])].every((k) => x[k] === undefined || typeof x[k] === 'string');
  return Object.values(doc.credentialMapping).every(
    (c) =>
      isObj(c) &&
      (c.nodePodsAccessible === undefined || typeof c.nodePodsAccessible === 'boolean') &&
      (c.kubernetesSecrets === undefined || (Array.isArray(c.kubernetesSecrets) && c.kubernetesSecrets.every((x) => coords(x, true)))) &&
      (c.kubernetesServiceAccounts === undefined || (Array.isArray(c.kubernetesServiceAccounts) && c.kubernetesServiceAccounts.every((x) => coords(x, false)))),
  );
}

/**
 * The pull manager's records (KEP-2535, `KubeletEnsureSecretPulledImages`), in its file
 * format: `image_manager/pulling/<sha256-of-image>` (ImagePullIntent) while pulls of an
 * image are in flight, and `image_manager/pulled/<sha256-of-image-ref>` (ImagePulledRecord:
 * time, image ref, and per normalized repository the credentials it was pulled with: the
 * Secrets' namespace/name/uid and credential hash, or `nodePodsAccessible` when no
 * credentials were needed). A secret is never written. Records are merged, never
 * overwritten: a second pod pulling with other credentials adds them.
 *
 * An intent is kept until the last in-flight pull of its image ends (a count per image), and
 * at start an intent left by a crash is kept: it marks the image as pulled by the node agent
 * with unknown credentials, so a pod must prove its own before using it (the kubelet's
 * fail-safe). Writes are best effort (logged); reads of a corrupt record throw, and callers
 * then require a pull.
 */
export class ImagePullRecords {
  readonly #dir: string;
  readonly #log: Logger;
  readonly #now: () => Date;
  readonly #intents = new Map<string, number>();
  /** Per image ref: the read-modify-write in flight (records of one ref are merged one at a time). */
  readonly #locks = new Map<string, Promise<unknown>>();

  constructor(rootDir: string, log: Logger, now: () => Date = () => new Date()) {
    this.#dir = path.join(rootDir, 'image_manager');
    this.#log = log;
    this.#now = now;
  }

  #time(): string {
    return this.#now().toISOString().replace(/\.\d{3}Z$/, 'Z');
  }

  async #locked<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#locks.get(key) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.catch(() => undefined);
    this.#locks.set(key, tail);
    try {
      return await run;
    } finally {
      if (this.#locks.get(key) === tail) this.#locks.delete(key);
    }
  }

  /** Before PullImage. Best effort: a record that cannot be written is logged, never fails the pull. */
  async pulling(image: string): Promise<void> {
    this.#intents.set(image, (this.#intents.get(image) ?? 0) + 1);
    await this.#write(path.join(this.#dir, 'pulling', recordFileName(image)), { kind: 'ImagePullIntent', apiVersion: RECORDS_API_VERSION, image });
  }

  /**
   * After PullImage returned `imageRef`: `credentials` (what pulled it; default: none were
   * needed, so every pod may use it) merged into the record of `imageRef` under `repository`
   * (the normalized repository, image-name.ts; default: the image without tag or digest),
   * then the intent ends.
   */
  async pulled(image: string, imageRef: string, credentials: ImagePullCredentials = { nodePodsAccessible: true }, repository = imageRepository(image)): Promise<void> {
    const ref = imageRef || image;
    await this.#locked(ref, async () => {
      let record: ImagePulledRecord | undefined;
      try {
        record = await this.pulledRecord(ref);
      } catch (err) {
        this.#log.info({ imageRef: ref, err: errorMessage(err) }, 'unreadable image pulled record; writing a new one');
      }
      const now = this.#time();
      const next = record ? mergePulledRecord(record, repository, credentials, now) : { kind: 'ImagePulledRecord' as const, apiVersion: RECORDS_API_VERSION, lastUpdatedTime: now, imageRef: ref, credentialMapping: { [repository]: structuredClone(credentials) } };
      if (next !== record) await this.#write(path.join(this.#dir, 'pulled', recordFileName(ref)), next);
    });
    await this.failed(image);
  }

  /** Adds `credentials` to an existing record of `imageRef` (a pod proved other credentials that match); no record: nothing. */
  async addCredentials(imageRef: string, repository: string, credentials: ImagePullCredentials): Promise<void> {
    await this.#locked(imageRef, async () => {
      let record: ImagePulledRecord | undefined;
      try {
        record = await this.pulledRecord(imageRef);
      } catch {
        return;
      }
      if (!record) return;
      const next = mergePulledRecord(record, repository, credentials, this.#time());
      if (next !== record) await this.#write(path.join(this.#dir, 'pulled', recordFileName(imageRef)), next);
    });
  }

  /** A pull of `image` ended (failed, or after `pulled`): the intent goes with the last one in flight. */
  async failed(image: string): Promise<void> {
    const n = (this.#intents.get(image) ?? 0) - 1;
    if (n > 0) {
      this.#intents.set(image, n);
      return;
    }
    this.#intents.delete(image);
    await fs.rm(path.join(this.#dir, 'pulling', recordFileName(image)), { force: true }).catch((err) => this.#log.warn({ image, err: errorMessage(err) }, 'cannot remove an image pull intent'));
  }

  /** The pulled record of `imageRef`; undefined when there is none. Throws when it cannot be read or is corrupt. */
  async pulledRecord(imageRef: string): Promise<ImagePulledRecord | undefined> {
    const file = path.join(this.#dir, 'pulled', recordFileName(imageRef));
    let text: string;
    try {
      text = await readBoundedText(file, { what: 'image pull record', maxBytes: RECORD_MAX_BYTES, noFollow: true });
    } catch (err) {
      if ((err as { details?: { errno?: string } }).details?.errno === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
    const doc: unknown = JSON.parse(text);
    if (!validPulledRecord(doc)) throw new Error(`image pull record ${file} is corrupt`);
    return doc;
  }

  /** Whether a pull of `image` is in flight or was cut short by a crash (an intent exists). */
  async intentExists(image: string): Promise<boolean> {
    if ((this.#intents.get(image) ?? 0) > 0) return true;
    try {
      await fs.lstat(path.join(this.#dir, 'pulling', recordFileName(image)));
      return true;
    } catch {
      return false;
    }
  }

  async #write(file: string, doc: object): Promise<void> {
    try {
      await writeFileAtomic(file, JSON.stringify(doc), 0o600);
    } catch (err) {
      this.#log.warn({ file, err: errorMessage(err) }, `cannot write image pull record ${file}: ${errorMessage(err)}`);
    }
  }

  /**
   * At start: every intent left (a pull a crash interrupted) is logged with its image and
   * kept (the image counts as pulled by the node agent with unknown credentials until a pull
   * of it ends); a corrupt record is logged and removed. Returns the images of interrupted
   * pulls.
   */
  async recover(): Promise<string[]> {
    const interrupted: string[] = [];
    for (const sub of ['pulling', 'pulled'] as const) {
      const dir = path.join(this.#dir, sub);
      let names: string[];
      try {
        names = await fs.readdir(dir);
      } catch {
        continue;
      }
      for (const name of names) {
        const file = path.join(dir, name);
        if (name.startsWith('.')) {
          // A temp file of a write a crash cut short: never taken for a record.
          await fs.rm(file, { force: true });
          this.#log.warn({ file }, `removed ${file}: the temp file of a write that a crash cut short`);
          continue;
        }
        let doc: Record<string, unknown> | undefined;
        try {
          const parsed: unknown = JSON.parse(await readBoundedText(file, { what: 'image pull record', maxBytes: RECORD_MAX_BYTES, noFollow: true }));
          doc = isObj(parsed) ? parsed : undefined;
        } catch {
          doc = undefined;
        }
        const valid = doc !== undefined && (sub === 'pulling' ? doc.kind === 'ImagePullIntent' && typeof doc.image === 'string' : validPulledRecord(doc));
        if (!valid) {
          this.#log.warn({ file }, `image pull record ${file} is corrupt; removing it`);
          await fs.rm(file, { force: true });
          continue;
        }
        if (sub === 'pulling') {
          interrupted.push(doc!.image as string);
          this.#log.warn({ image: doc!.image, file }, `the pull of image ${String(doc!.image)} was interrupted (nodelet stopped during it); until it is pulled again, pods must prove their credentials to use it`);
        }
      }
    }
    return interrupted;
  }
}

/** The kubelet's termination-log file of a container: `pods/<uid>/containers/<name>/<id>`. */
export function terminationLogPath(rootDir: string, podUid: string, containerName: string, id: string): string {
  return path.join(rootDir, 'pods', podUid, 'containers', containerName, id);
}
