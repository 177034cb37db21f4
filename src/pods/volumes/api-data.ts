/**
 * Volumes whose files nodelet writes from the pod and from the API, as the kubelet's
 * configmap, secret, downwardapi and projected volume plugins: `configMap`, `secret`,
 * `downwardAPI` and `projected` (its `configMap`, `secret`, `downwardAPI` and
 * `serviceAccountToken` sources), in the atomic writer's layout under
 * `<root-dir>/pods/<uid>/volumes/kubernetes.io~{configmap,secret,downward-api,projected}/<name>`,
 * the kubelet's paths. The container gets them read-only, as the kubelet mounts them.
 *
 * - configMap: every key of `data` and `binaryData` (or only `items`, key -> path), each
 *   file of the item's `mode`, else `defaultMode`, else 0644; secret the same from `data`.
 *   A missing object is an error (`configmap "x" not found`) unless `optional` (then the
 *   volume is empty); a missing key of `items` too (`configmap references non-existent
 *   config key: k`), unless `optional`.
 * - serviceAccountToken: a TokenRequest for the pod's service account (token-manager.ts),
 *   `audience` (none: the API server's), `expirationSeconds` (default 3600), bound to the pod.
 * - Secret and projected volumes live on a tmpfs (the kubelet mounts one for each): their
 *   directory is made a tmpfs before anything is written, and nothing is written unless it
 *   is one, so secret bytes and tokens never reach the node's disk.
 * - fsGroup: the written files get the group, as the kubelet's SetVolumeOwnership.
 *
 * Without the control plane (a standalone node, a static pod) a volume that needs an API
 * object is refused naming the volume and the source; an optional configMap or secret is
 * left out.
 *
 * Contents follow the pod and the objects: `refreshApiDataVolumes` rewrites the volumes a
 * container start set up (the pod's labels changed, an object changed, a token is due), and
 * writes nothing when nothing changed. A refresh that fails (the control plane is down, the
 * object went) leaves the volume as it is.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { ConfigMap, KeyToPath, Pod, Secret, ServiceAccountTokenProjection, Volume } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../errors.js';
import type { ApiObjects } from '../objects/objects.js';
import { isDnsLabel, isPodUid } from '../sources/pod-validation.js';
import { writeAtomically, type FileProjection } from './atomic-writer.js';
import { downwardApiPayload } from './downward-api.js';
import type { Mounter } from './subpath.js';
import type { TokenManager } from './token-manager.js';
import { setVolumeOwnership } from './volume-ownership.js';

const REASON = { reason: 'CreateContainerConfigError' } as const;
/** The API's default `defaultMode` of configMap, secret, downwardAPI and projected volumes (0644). */
const DEFAULT_MODE = 0o644;
/** The API's default `expirationSeconds` of a serviceAccountToken source. */
const DEFAULT_TOKEN_SECONDS = 3600;
/** statfs(2)'s f_type of a tmpfs. */
const TMPFS_MAGIC = 0x01021994;
type Quantity = (q: string | number) => number;

/** What writing the volumes needs besides the pod. */
export interface ApiDataContext {
  quantity: Quantity;
  /** The API objects (connected mode); unset: volumes that need them are refused. */
  objects?: ApiObjects;
  /** Service-account tokens (connected mode). */
  tokens?: TokenManager;
  /** Mounts the tmpfs of secret and projected volumes. */
  mounter?: Mounter;
}

/**
 * A volume that could not be set up because of what the API holds (an object or a key that
 * is missing, the control plane that does not answer): the kubelet's FailedMount, retried;
 * the pod stays ContainerCreating. `message` is the kubelet's error part (`configmap "y" not found`).
 */
export class MountFailure extends NodeletError {
  constructor(
    readonly volume: string,
    readonly detail: string,
  ) {
    super('UNAVAILABLE', `MountVolume.SetUp failed for volume "${volume}" : ${detail}`, { reason: 'ContainerCreating', failedMount: true });
  }
}

/** The volume kinds this module writes. */
export function isApiDataVolume(v: Volume): boolean {
  return !!(v.downwardAPI || v.projected || v.configMap || v.secret);
}

/** Secret and projected volumes are tmpfs, as the kubelet's (their content never reaches the disk). */
function inMemory(v: Volume): boolean {
  return !!(v.secret || v.projected);
}

function pluginDir(v: Volume): string {
  if (v.configMap) return 'kubernetes.io~configmap';
  if (v.secret) return 'kubernetes.io~secret';
  if (v.downwardAPI) return 'kubernetes.io~downward-api';
  return 'kubernetes.io~projected';
}

export function apiVolumeDir(rootDir: string, pod: Pod, v: Volume): string {
  const uid = pod.metadata?.uid ?? '';
  if (!isPodUid(uid) || !isDnsLabel(v.name)) throw new NodeletError('INVALID_ARGUMENT', `volume ${JSON.stringify(v.name)}: not a valid volume name (a DNS-1123 label)`, REASON);
  return path.join(rootDir, 'pods', uid, 'volumes', pluginDir(v), v.name);
}

function checkMode(mode: unknown, at: string): number | undefined {
  if (mode === undefined || mode === null) return undefined;
  if (!Number.isInteger(mode) || (mode as number) < 0 || (mode as number) > 0o777) throw new NodeletError('INVALID_ARGUMENT', `${at}: mode ${JSON.stringify(mode)} must be an integer between 0 and 0777 (511)`, REASON);
  return mode as number;
}

/**
 * The files of one configMap's or secret's data, as the kubelet's makePayload: all keys, or
 * the `items`; `kind` names the object in the errors (`configmap`, `secret`).
 */
export function keyedPayload(data: ReadonlyMap<string, Buffer>, items: readonly KeyToPath[] | undefined, defaultMode: number, optional: boolean, kind: 'configmap' | 'secret', at: string): Map<string, FileProjection> {
  const out = new Map<string, FileProjection>();
  if (!items || items.length === 0) {
    for (const [k, d] of data) out.set(k, { data: d, mode: defaultMode });
    return out;
  }
  for (const [i, it] of items.entries()) {
    const d = data.get(it.key);
    if (d === undefined) {
      if (optional) continue;
      throw new MountFailure(at, kind === 'configmap' ? `configmap references non-existent config key: ${it.key}` : `references non-existent secret key: ${it.key}`);
    }
    out.set(it.path, { data: d, mode: checkMode(it.mode, `volume "${at}" items[${i}] (${JSON.stringify(it.path)})`) ?? defaultMode });
  }
  return out;
}

function configMapData(cm: ConfigMap): Map<string, Buffer> {
  const m = new Map<string, Buffer>();
  for (const [k, s] of Object.entries(cm.data ?? {})) if (typeof s === 'string') m.set(k, Buffer.from(s));
  for (const [k, s] of Object.entries(cm.binaryData ?? {})) if (typeof s === 'string') m.set(k, Buffer.from(s, 'base64'));
  return m;
}

function secretData(s: Secret): Map<string, Buffer> {
  const m = new Map<string, Buffer>();
  for (const [k, v] of Object.entries(s.data ?? {})) if (typeof v === 'string') m.set(k, Buffer.from(v, 'base64'));
  return m;
}

function needsApi(volume: string, at: string, what: string): NodeletError {
  return new NodeletError('INVALID_ARGUMENT', `${at}: ${what} is an API object, which a pod without the control plane (a static pod, a standalone node) cannot refer to (volume "${volume}")`, REASON);
}

/** A ConfigMap or Secret read for a volume: a transport error becomes the kubelet's FailedMount. */
async function readObject<T>(volume: string, read: () => Promise<T | undefined>): Promise<T | undefined> {
  try {
    return await read();
  } catch (err) {
    throw new MountFailure(volume, (err as Error).message);
  }
}

async function configMapFiles(pod: Pod, volume: string, src: { name?: string; items?: KeyToPath[]; optional?: boolean }, defaultMode: number, ctx: ApiDataContext, at: string): Promise<Map<string, FileProjection>> {
  const name = src.name ?? '';
  if (!ctx.objects) {
    if (src.optional) return new Map();
    throw needsApi(volume, at, `configMap "${name}"`);
  }
  const ns = pod.metadata?.namespace ?? 'default';
  const cm = await readObject(volume, () => ctx.objects!.configMap(ns, name));
  if (!cm) {
    if (src.optional) return new Map();
    throw new MountFailure(volume, `configmap "${name}" not found`);
  }
  return keyedPayload(configMapData(cm), src.items, defaultMode, !!src.optional, 'configmap', volume);
}

async function secretFiles(pod: Pod, volume: string, name: string, src: { items?: KeyToPath[]; optional?: boolean }, defaultMode: number, ctx: ApiDataContext, at: string): Promise<Map<string, FileProjection>> {
  if (!ctx.objects) {
    if (src.optional) return new Map();
    throw needsApi(volume, at, `secret "${name}"`);
  }
  const ns = pod.metadata?.namespace ?? 'default';
  const s = await readObject(volume, () => ctx.objects!.secret(ns, name));
  if (!s) {
    if (src.optional) return new Map();
    throw new MountFailure(volume, `secret "${name}" not found`);
  }
  return keyedPayload(secretData(s), src.items, defaultMode, !!src.optional, 'secret', volume);
}

async function tokenFile(pod: Pod, volume: string, t: ServiceAccountTokenProjection, mode: number, ctx: ApiDataContext, at: string): Promise<{ path: string; file: FileProjection; refreshAt: number }> {
  if (!ctx.objects || !ctx.tokens) throw needsApi(volume, at, 'serviceAccountToken (a ServiceAccount\'s token)');
  const exp = t.expirationSeconds ?? DEFAULT_TOKEN_SECONDS;
  if (!Number.isInteger(exp) || exp < 1 || exp > 2 ** 32) throw new NodeletError('INVALID_ARGUMENT', `${at}: serviceAccountToken.expirationSeconds ${JSON.stringify(exp)} must be a positive integer`, REASON);
  const sa = pod.spec?.serviceAccountName || 'default';
  const ns = pod.metadata?.namespace ?? 'default';
  try {
    const { token, refreshAt } = await ctx.tokens.get(ns, sa, { audiences: t.audience ? [t.audience] : [], expirationSeconds: exp, boundPod: { name: pod.metadata?.name ?? '', uid: pod.metadata?.uid ?? '' } });
    return { path: t.path, file: { data: Buffer.from(token), mode }, refreshAt };
  } catch (err) {
    throw new MountFailure(volume, `failed to fetch token: ${(err as Error).message}`);
  }
}

/** The files of a volume, and when a token in it is due for renewal (Infinity: none). */
export async function apiDataPayload(pod: Pod, v: Volume, ctx: ApiDataContext): Promise<{ files: Map<string, FileProjection>; refreshAt: number }> {
  const where = `volume ${JSON.stringify(v.name)}`;
  const q = ctx.quantity;
  if (v.downwardAPI) return { files: downwardApiPayload(pod, v.downwardAPI.items ?? [], checkMode(v.downwardAPI.defaultMode, where), q, where), refreshAt: Infinity };
  if (v.configMap) return { files: await configMapFiles(pod, v.name, v.configMap, checkMode(v.configMap.defaultMode, where) ?? DEFAULT_MODE, ctx, where), refreshAt: Infinity };
  if (v.secret) return { files: await secretFiles(pod, v.name, v.secret.secretName ?? '', v.secret, checkMode(v.secret.defaultMode, where) ?? DEFAULT_MODE, ctx, where), refreshAt: Infinity };
  const out = new Map<string, FileProjection>();
  let refreshAt = Infinity;
  const mode = checkMode(v.projected?.defaultMode, where) ?? DEFAULT_MODE;
  // As the kubelet's projected volume: each source is tried, and the errors are reported together.
  const errors: string[] = [];
  let other: NodeletError | undefined;
  for (const [i, src] of (v.projected?.sources ?? []).entries()) {
    const at = `${where} sources[${i}]`;
    try {
      let files: Map<string, FileProjection>;
      if (src.downwardAPI) files = downwardApiPayload(pod, src.downwardAPI.items ?? [], mode, q, at);
      else if (src.configMap) files = await configMapFiles(pod, v.name, src.configMap, mode, ctx, at);
      else if (src.secret) files = await secretFiles(pod, v.name, src.secret.name ?? '', src.secret, mode, ctx, at);
      else if (src.serviceAccountToken) {
        // As the kubelet: with an fsGroup the token is 0600, and the group's read comes from the ownership (0640).
        const fsGroup = pod.spec?.securityContext?.fsGroup;
        const t = await tokenFile(pod, v.name, src.serviceAccountToken, fsGroup !== undefined && fsGroup !== null ? 0o600 : mode, ctx, at);
        files = new Map([[t.path, t.file]]);
        refreshAt = Math.min(refreshAt, t.refreshAt);
      } else {
        const kind = Object.keys(src)[0] ?? 'empty source';
        throw new NodeletError('UNIMPLEMENTED', `${at}: ${kind} is not supported by nodelet (configMap, secret, downwardAPI and serviceAccountToken are)`, REASON);
      }
      for (const [p, f] of files) out.set(p, f);
    } catch (err) {
      if (err instanceof MountFailure) errors.push(err.detail);
      else other ??= err instanceof NodeletError ? err : new NodeletError('INTERNAL', `${at}: ${(err as Error).message}`, REASON);
    }
  }
  if (other) throw other;
  if (errors.length) throw new MountFailure(v.name, errors.length === 1 ? errors[0]! : `[${errors.join(', ')}]`);
  return { files: out, refreshAt };
}

async function onTmpfs(dir: string): Promise<boolean> {
  return (await fs.statfs(dir)).type === TMPFS_MAGIC;
}

/** The volume's directory, a tmpfs for secret and projected volumes (mounted once). */
async function prepareDir(dir: string, v: Volume, ctx: ApiDataContext): Promise<void> {
  await fs.mkdir(dir, { recursive: true, mode: 0o755 });
  if (!inMemory(v) || (await onTmpfs(dir))) return;
  if (!ctx.mounter?.tmpfs) throw new NodeletError('UNIMPLEMENTED', `volume "${v.name}": a ${v.secret ? 'secret' : 'projected'} volume lives on a tmpfs, and no mounter mounts one`, REASON);
  await ctx.mounter.tmpfs(dir);
  if (!(await onTmpfs(dir))) throw new NodeletError('INTERNAL', `volume "${v.name}": ${dir} is not a tmpfs after mounting one; nothing written`, REASON);
}

function ownership(pod: Pod, v: Volume): ((tsDir: string) => Promise<void>) | undefined {
  const fsGroup = pod.spec?.securityContext?.fsGroup;
  if (fsGroup === undefined || fsGroup === null) return undefined;
  return (tsDir) => setVolumeOwnership(tsDir, fsGroup, v.name, true);
}

/**
 * Writes the volume's files (nothing when unchanged) and returns its directory and when a
 * token in it is due (Infinity: none). The payload is read before anything is touched: a
 * failure leaves the volume as it was.
 */
export async function setUpApiDataVolume(rootDir: string, pod: Pod, v: Volume, ctx: ApiDataContext): Promise<{ dir: string; refreshAt: number }> {
  const dir = apiVolumeDir(rootDir, pod, v);
  const { files, refreshAt } = await apiDataPayload(pod, v, ctx);
  await prepareDir(dir, v, ctx);
  const setPerms = ownership(pod, v);
  await writeAtomically(dir, files, setPerms ? { setPerms } : {});
  return { dir, refreshAt };
}

/**
 * Rewrites the API data volumes of `pod` that a container start has set up, from the pod
 * and the objects as they are now; a volume that fails is reported in the result (and left
 * as it was), the others still written. `refreshAt`: the earliest token renewal due.
 */
export async function refreshApiDataVolumes(rootDir: string, pod: Pod, ctx: ApiDataContext, only?: (v: Volume) => boolean): Promise<{ problems: string[]; refreshAt: number }> {
  const problems: string[] = [];
  let refreshAt = Infinity;
  for (const v of pod.spec?.volumes ?? []) {
    if (!isApiDataVolume(v) || (only && !only(v))) continue;
    try {
      const dir = apiVolumeDir(rootDir, pod, v);
      if (!(await fs.lstat(path.join(dir, '..data')).catch(() => undefined))) continue; // not set up (yet)
      // A secret or projected volume is rewritten only on its tmpfs (never onto the disk).
      if (inMemory(v) && !(await onTmpfs(dir))) throw new NodeletError('INTERNAL', `volume "${v.name}": ${dir} is no longer a tmpfs; not rewritten`);
      const { files, refreshAt: due } = await apiDataPayload(pod, v, ctx);
      refreshAt = Math.min(refreshAt, due);
      const setPerms = ownership(pod, v);
      await writeAtomically(dir, files, setPerms ? { setPerms } : {});
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  return { problems, refreshAt };
}
