/**
 * Volumes whose files nodelet writes from what it knows of the pod: `downwardAPI`, and a
 * `projected` volume's `downwardAPI` sources, in the atomic writer's layout under
 * `<root-dir>/pods/<uid>/volumes/kubernetes.io~downward-api/<name>` and
 * `.../kubernetes.io~projected/<name>`, the kubelet's paths. The container gets them
 * read-only, as the kubelet mounts every API data volume.
 *
 * A projected volume's `configMap`, `secret` and `serviceAccountToken` sources need the
 * control plane's objects, which nodelet does not read yet: an optional configMap or secret
 * is left out (as the kubelet leaves out an optional one that does not exist), anything
 * else is refused with CreateContainerConfigError naming the volume and the source.
 *
 * Contents follow the pod: `refreshApiDataVolumes` rewrites the volumes already set up
 * (a pod's labels or annotations changed), and writes nothing when nothing changed.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Pod, Volume } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../errors.js';
import { isDnsLabel, isPodUid } from '../sources/pod-validation.js';
import { writeAtomically, type FileProjection } from './atomic-writer.js';
import { downwardApiPayload } from './downward-api.js';

const REASON = { reason: 'CreateContainerConfigError' } as const;
type Quantity = (q: string | number) => number;

/** The volume kinds this module writes. */
export function isApiDataVolume(v: Volume): boolean {
  return !!(v.downwardAPI || v.projected);
}

function volumeDir(rootDir: string, pod: Pod, v: Volume): string {
  const uid = pod.metadata?.uid ?? '';
  if (!isPodUid(uid) || !isDnsLabel(v.name)) throw new NodeletError('INVALID_ARGUMENT', `volume ${JSON.stringify(v.name)}: not a valid volume name (a DNS-1123 label)`, REASON);
  return path.join(rootDir, 'pods', uid, 'volumes', v.downwardAPI ? 'kubernetes.io~downward-api' : 'kubernetes.io~projected', v.name);
}

/** The files of a downwardAPI or projected volume. */
export function apiDataPayload(pod: Pod, v: Volume, quantity: Quantity): Map<string, FileProjection> {
  const where = `volume ${JSON.stringify(v.name)}`;
  if (v.downwardAPI) return downwardApiPayload(pod, v.downwardAPI.items ?? [], v.downwardAPI.defaultMode, quantity, where);
  const out = new Map<string, FileProjection>();
  for (const [i, src] of (v.projected?.sources ?? []).entries()) {
    const at = `${where} sources[${i}]`;
    if (src.downwardAPI) {
      for (const [p, f] of downwardApiPayload(pod, src.downwardAPI.items ?? [], v.projected!.defaultMode, quantity, at)) out.set(p, f);
      continue;
    }
    const ref = src.configMap ?? src.secret;
    if (ref?.optional) continue;
    const kind = src.configMap ? `configMap ${JSON.stringify(ref!.name ?? '')}` : src.secret ? `secret ${JSON.stringify(ref!.name ?? '')}` : src.serviceAccountToken ? 'serviceAccountToken' : (Object.keys(src)[0] ?? 'empty source');
    throw new NodeletError('UNIMPLEMENTED', `${at}: ${kind} needs the control plane's objects, which nodelet does not read yet`, REASON);
  }
  return out;
}

/** Writes the volume's files (nothing when unchanged) and returns its directory. */
export async function setUpApiDataVolume(rootDir: string, pod: Pod, v: Volume, quantity: Quantity): Promise<string> {
  const dir = volumeDir(rootDir, pod, v);
  await writeAtomically(dir, apiDataPayload(pod, v, quantity));
  return dir;
}

/**
 * Rewrites the API data volumes of `pod` that a container start has set up, from the pod
 * as it is now; a volume that fails is reported in the result, the others still written.
 */
export async function refreshApiDataVolumes(rootDir: string, pod: Pod, quantity: Quantity): Promise<string[]> {
  const problems: string[] = [];
  for (const v of pod.spec?.volumes ?? []) {
    if (!isApiDataVolume(v)) continue;
    try {
      const dir = volumeDir(rootDir, pod, v);
      if (!(await fs.lstat(path.join(dir, '..data')).catch(() => undefined))) continue; // not set up (yet)
      await writeAtomically(dir, apiDataPayload(pod, v, quantity));
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  return problems;
}
