/**
 * A pod's image pull credentials and who may use an image already on the node, as the
 * kubelet decides them (pkg/kubelet/kubelet_pods.go getPullSecretsForPod,
 * pkg/credentialprovider/secrets, pkg/kubelet/images/pullmanager).
 *
 * - Only the pod's own `spec.imagePullSecrets` are read: the ServiceAccount's are copied into
 *   the pod by the API server's ServiceAccount admission, not by the node. A Secret that
 *   cannot be read (absent, forbidden, the API down) is left out, and the pod gets one
 *   `FailedToRetrieveImagePullSecret` warning naming all of them; the pull goes on.
 * - Secrets of type `kubernetes.io/dockerconfigjson` (key `.dockerconfigjson`) and
 *   `kubernetes.io/dockercfg` (key `.dockercfg`) give credentials; other types, and these
 *   without their key or with it empty, are skipped. A malformed document fails the pull
 *   with an error naming the Secret (the kubelet fails it too, with the bare JSON error).
 * - `KubeletEnsureSecretPulledImages` (beta, on by default in v1.35): an image present on
 *   the node is used under `IfNotPresent`/`Never` only when the verification policy lets
 *   it: `NeverVerify` (always), `NeverVerifyPreloadedImages` (the default: images the node
 *   agent never pulled), `NeverVerifyAllowlistedImages` (images of
 *   `preloadedImagesVerificationAllowlist`, compared with the `image` field as written),
 *   `AlwaysVerify` (none). Otherwise the pull
 *   record must say the image needs no credentials (`nodePodsAccessible`), or list one of
 *   the pod's Secrets (same namespace/name/uid, or the same credential hash); else the
 *   image is pulled again with the pod's own credentials (`Never`: refused as not present).
 */
import type { Pod, Secret } from 'kubernetes-types/core/v1.js';
import { NodeletError, errorMessage } from '../../errors.js';
import type { VerificationPolicy } from '../../config/image-pull-credentials.js';
import type { ImagePullCredentials, ImagePullSecretRecord, ImagePulledRecord } from '../../system/root-dir.js';
import type { ApiObjects } from '../objects/objects.js';
import { DockerKeyring, parseDockercfg, parseDockerConfigJson, type DockerConfig, type TrackedCredential } from './credentials.js';

export const SECRET_TYPE_DOCKER_CONFIG_JSON = 'kubernetes.io/dockerconfigjson';
export const SECRET_TYPE_DOCKERCFG = 'kubernetes.io/dockercfg';
export const DOCKER_CONFIG_JSON_KEY = '.dockerconfigjson';
export const DOCKERCFG_KEY = '.dockercfg';

/** The names in `spec.imagePullSecrets`, in order (entries without a name skipped, as the kubelet does). */
export function pullSecretNames(pod: Pod): string[] {
  const refs = pod.spec?.imagePullSecrets;
  if (!Array.isArray(refs)) return [];
  return refs.map((r) => r?.name).filter((n): n is string => typeof n === 'string' && n !== '');
}

export interface FetchedPullSecrets {
  secrets: Secret[];
  /** Names that could not be read, in order. */
  failed: string[];
  /** Why each failed (absent, or the API's error). */
  why: Map<string, string>;
}

/** Reads the pod's pull secrets; never throws (a Secret that cannot be read is in `failed`). */
export async function fetchPullSecrets(pod: Pod, objects: ApiObjects): Promise<FetchedPullSecrets> {
  const namespace = pod.metadata?.namespace ?? 'default';
  const out: FetchedPullSecrets = { secrets: [], failed: [], why: new Map() };
  for (const name of pullSecretNames(pod)) {
    try {
      const s = await objects.secret(namespace, name);
      if (s) out.secrets.push(s);
      else {
        out.failed.push(name);
        out.why.set(name, `secret "${name}" not found`);
      }
    } catch (err) {
      out.failed.push(name);
      out.why.set(name, errorMessage(err));
    }
  }
  return out;
}

/** The kubelet's event text for pull secrets it could not read. */
export function failedPullSecretsMessage(failed: string[]): string {
  return `Unable to retrieve some image pull secrets (${failed.join(', ')}); attempting to pull the image may not succeed.`;
}

/** A Secret's value for `key`, decoded from the API's base64; undefined when absent or empty. */
function secretValue(s: Secret, key: string): string | undefined {
  const v = s.data?.[key];
  if (typeof v !== 'string' || v === '') return undefined;
  const bytes = Buffer.from(v, 'base64');
  return bytes.length > 0 ? bytes.toString('utf8') : undefined;
}

/**
 * The keyring of the pod's Secrets (MakeDockerKeyring). Throws INVALID_ARGUMENT (reason
 * ErrImagePull) naming the first Secret whose document is malformed.
 */
export function keyringFromSecrets(secrets: Secret[], onSkipped?: (secret: string, location: string) => void): DockerKeyring {
  const keyring = new DockerKeyring();
  for (const s of secrets) {
    const namespace = s.metadata?.namespace ?? '';
    const name = s.metadata?.name ?? '';
    let cfg: DockerConfig | undefined;
    let key = '';
    try {
      const json = s.type === SECRET_TYPE_DOCKER_CONFIG_JSON ? secretValue(s, DOCKER_CONFIG_JSON_KEY) : undefined;
      const cfgText = json === undefined && s.type === SECRET_TYPE_DOCKERCFG ? secretValue(s, DOCKERCFG_KEY) : undefined;
      if (json !== undefined) {
        key = DOCKER_CONFIG_JSON_KEY;
        cfg = parseDockerConfigJson(json);
      } else if (cfgText !== undefined) {
        key = DOCKERCFG_KEY;
        cfg = parseDockercfg(cfgText);
      }
    } catch (err) {
      throw new NodeletError('INVALID_ARGUMENT', `image pull secret "${namespace}/${name}" (${s.type}): its ${key} is malformed: ${errorMessage(err)}`, { reason: 'ErrImagePull', secret: `${namespace}/${name}` });
    }
    if (!cfg) continue;
    keyring.add({ uid: s.metadata?.uid ?? '', namespace, name }, cfg, (location) => onSkipped?.(`${namespace}/${name}`, location));
  }
  return keyring;
}

/** The pod's credentials for the pull records (secret-backed ones only: node-wide ones need no proof). */
export function podSecretRecords(creds: TrackedCredential[]): ImagePullSecretRecord[] {
  return creds.filter((c) => c.source).map((c) => ({ uid: c.source!.uid, namespace: c.source!.namespace, name: c.source!.name, credentialHash: c.hash }));
}

/** What the pull records keep for a successful pull with `used` (undefined: no credentials, so every pod may use the image). */
export function recordCredentials(used: TrackedCredential | undefined): ImagePullCredentials {
  if (!used?.source) return { nodePodsAccessible: true };
  return { kubernetesSecrets: [{ uid: used.source.uid, namespace: used.source.namespace, name: used.source.name, credentialHash: used.hash }] };
}

// ------------------------------------------------------------------ verification policy

/**
 * Whether the policy requires a pod to prove its credentials for an image present on the
 * node: `image` is the container's `image` field as written (the kubelet compares the
 * allowlist with it: an exact entry, which has no tag, matches only an image written
 * without one), `pulledByNodeAgent` whether a pull record or a pull intent exists for it.
 */
export function requiresVerification(policy: VerificationPolicy, allowlist: readonly string[], image: string, pulledByNodeAgent: boolean): boolean {
  switch (policy) {
    case 'NeverVerify':
      return false;
    case 'NeverVerifyPreloadedImages':
      return pulledByNodeAgent;
    case 'NeverVerifyAllowlistedImages':
      return !allowlist.some((p) => (p.endsWith('/*') ? image.startsWith(p.slice(0, -1)) : image === p));
    case 'AlwaysVerify':
      return true;
  }
}

export type AccessDecision =
  | { pull: false; why: 'policy' | 'nodePodsAccessible' | 'secret'; remember?: ImagePullSecretRecord }
  | { pull: true; why: 'noRecord' | 'noCredentialsForRepository' | 'noMatchingSecret' };

/**
 * Whether the pod may use the present image `record` describes, given the pod's secret
 * credentials (looked up only when the record lists Secrets). `remember`: a pod Secret that
 * matched by hash but not by coordinates (or the reverse), which the caller adds to the record
 * so the next check finds it directly (the kubelet does so while a mapping has under 100).
 */
export async function decideAccess(record: ImagePulledRecord | undefined, repository: string, podSecrets: () => Promise<ImagePullSecretRecord[]>): Promise<AccessDecision> {
  if (!record) return { pull: true, why: 'noRecord' };
  const cached = record.credentialMapping?.[repository];
  if (!cached) return { pull: true, why: 'noCredentialsForRepository' };
  if (cached.nodePodsAccessible) return { pull: false, why: 'nodePodsAccessible' };
  const known = cached.kubernetesSecrets ?? [];
  if (known.length === 0) return { pull: true, why: 'noMatchingSecret' };
  for (const mine of await podSecrets()) {
    for (const k of known) {
      const hashes = k.credentialHash.length > 0 && mine.credentialHash === k.credentialHash;
      const coords = mine.uid === k.uid && mine.namespace === k.namespace && mine.name === k.name;
      if (hashes) return !coords && known.length < 100 ? { pull: false, why: 'secret', remember: mine } : { pull: false, why: 'secret' };
      // Same Secret, changed content: accepted (and its new hash kept) while the mapping is small, as the kubelet.
      if (coords && known.length < 100) return { pull: false, why: 'secret', remember: mine };
    }
  }
  return { pull: true, why: 'noMatchingSecret' };
}
