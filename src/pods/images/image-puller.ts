/**
 * Makes a container's image present for its pod, as the kubelet's image manager does
 * (pkg/kubelet/images/image_manager.go): by `imagePullPolicy`, with the pod's pull-secret
 * credentials (pull-secrets.ts, credentials.ts) passed as CRI AuthConfig, and, with
 * `KubeletEnsureSecretPulledImages`, only letting a pod use an image already on the node
 * when the verification policy and the pull records allow it (else it is pulled again with
 * the pod's own credentials).
 *
 * Called by CriPodRuntime.ensureImage for each container start that needs its image. The
 * credentials are looked up once per call and only when needed (a present image nobody has
 * to prove anything for reads no Secret). Every credential that matches the image is tried
 * in order until one pull succeeds; when all fail, the error lists every failure (the
 * kubelet's aggregate). Credentials never appear in logs, events or errors.
 *
 * Waiting reasons: ErrImagePull (a pull or a credential failed; a malformed pull secret is
 * named), ErrImageNeverPull (`Never` and absent, or present but not accessible to the pod:
 * the same words, so a pod cannot learn that an image it may not use is there),
 * InvalidImageName, CreateContainerConfigError (a static pod that names pull secrets).
 */
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError, errorMessage } from '../../errors.js';
import { podRef, type EventSink } from '../../events.js';
import type { Logger } from '../../log.js';
import type { AuthConfig, Image, PodSandboxConfig } from '../../runtime/types.js';
import type { ImagePullRecords } from '../../system/root-dir.js';
import type { ApiObjects } from '../objects/objects.js';
import type { TrackedCredential } from './credentials.js';
import { parseImageName } from './image-name.js';
import {
  decideAccess,
  failedPullSecretsMessage,
  fetchPullSecrets,
  keyringFromSecrets,
  podSecretRecords,
  pullSecretNames,
  recordCredentials,
  requiresVerification,
} from './pull-secrets.js';
import type { VerificationPolicy } from '../../config/image-pull-credentials.js';

export type PullRecordsPort = Pick<ImagePullRecords, 'pulling' | 'pulled' | 'failed' | 'pulledRecord' | 'intentExists' | 'addCredentials'>;

/** `imagePullCredentialsVerificationPolicy` and its allowlist; unset when `KubeletEnsureSecretPulledImages` is off. */
export interface CredentialVerification {
  policy: VerificationPolicy;
  allowlist: readonly string[];
}

export interface ImagePullerDeps {
  cri: {
    imageStatus(image: string): Promise<Image | undefined>;
    pullImage(image: string, sandboxConfig?: PodSandboxConfig, auth?: AuthConfig): Promise<string>;
  };
  /** Pull records under the root dir; unset: none kept, and present images are used as they are. */
  records?: Partial<PullRecordsPort> & Pick<PullRecordsPort, 'pulling' | 'pulled' | 'failed'>;
  /** Unset: standalone (no Secret can be read). */
  objects?: ApiObjects;
  verification?: CredentialVerification;
  events?: EventSink;
  log: Logger;
}

const ANN_CONFIG_SOURCE = 'kubernetes.io/config.source';

function reasoned(err: unknown, reason: string, prefix: string): NodeletError {
  if (err instanceof NodeletError && typeof err.details.reason === 'string') return err;
  const code = err instanceof NodeletError ? err.code : 'INTERNAL';
  return new NodeletError(code, `${prefix}: ${errorMessage(err)}`, { reason }, { cause: err });
}

/** Go's utilerrors.NewAggregate(...).Error(): one message, or `[a, b]` without repeats. */
function aggregate(errs: unknown[]): NodeletError {
  const msgs = [...new Set(errs.map(errorMessage))];
  const first = errs[0];
  const code = first instanceof NodeletError ? first.code : 'INTERNAL';
  return new NodeletError(code, msgs.length === 1 ? msgs[0]! : `[${msgs.join(', ')}]`, {}, { cause: first });
}

/** A static pod (config.source other than `api`): it cannot refer to API objects. */
function isStaticPod(pod: Pod): boolean {
  const source = pod.metadata?.annotations?.[ANN_CONFIG_SOURCE];
  return typeof source === 'string' && source !== 'api';
}

/** What ensurePodImage did: pulled, or found the image present (with its ImageStatus answer, which holds the image's user). */
export interface EnsuredImage {
  pulled: boolean;
  /** The status of the present image used as it is; unset after a pull. */
  present?: Image;
}

/**
 * Makes `c.image` present for `pod`. `gate` serializes or bounds the pulls
 * (serializeImagePulls, maxParallelImagePulls). Throws NodeletError with a waiting reason.
 */
export async function ensurePodImage(deps: ImagePullerDeps, pod: Pod, c: Container, gate: <T>(pull: () => Promise<T>) => Promise<T>): Promise<EnsuredImage> {
  const image = c.image!;
  const policy = c.imagePullPolicy ?? 'IfNotPresent';
  const names = pullSecretNames(pod);
  if (names.length > 0 && isStaticPod(pod)) {
    throw new NodeletError('INVALID_ARGUMENT', `spec.imagePullSecrets: a static pod cannot refer to Secrets (${names.map((n) => JSON.stringify(n)).join(', ')})`, {
      reason: 'CreateContainerConfigError',
      field: 'spec.imagePullSecrets',
    });
  }
  const repository = parseImageName(image).repository;
  const notPresent = () => new NodeletError('NOT_FOUND', `container image "${image}" is not present with pull policy of Never`, { reason: 'ErrImageNeverPull' });

  // The pod's credentials for this image: looked up at most once, and only when needed.
  let lookedUp: Promise<TrackedCredential[]> | undefined;
  const credentials = () => (lookedUp ??= lookupCredentials(deps, pod, names, repository));

  if (policy !== 'Always') {
    let present: Image | undefined;
    try {
      present = await deps.cri.imageStatus(image);
    } catch (err) {
      throw reasoned(err, 'ErrImagePull', `cannot check image "${image}"`);
    }
    if (present) {
      if (!(await mustPullPresent(deps, image, present.id, repository, credentials))) return { pulled: false, present };
      deps.log.info({ image, pod: pod.metadata?.name }, 'image present, but the pod has not proven it may use it: it must be pulled with the pod\'s credentials');
    }
    if (policy === 'Never') throw notPresent();
  }

  const list = await credentials();
  const records = deps.records;
  let started = false;
  let used: TrackedCredential | undefined;
  try {
    const ref = await gate(async () => {
      started = true;
      await records?.pulling(image);
      if (list.length === 0) return deps.cri.pullImage(image);
      const errs: unknown[] = [];
      for (const cred of list) {
        try {
          const r = await deps.cri.pullImage(image, undefined, { username: cred.auth.username, password: cred.auth.password });
          used = cred;
          return r;
        } catch (err) {
          errs.push(err);
        }
      }
      throw aggregate(errs);
    });
    await records?.pulled(image, ref, recordCredentials(used), repository);
  } catch (err) {
    if (started) await records?.failed(image);
    throw reasoned(err, 'ErrImagePull', `failed to pull image "${image}"`);
  }
  return { pulled: true };
}

/** The pod's pull-secret credentials matching `repository`, in the keyring's order. */
async function lookupCredentials(deps: ImagePullerDeps, pod: Pod, names: string[], repository: string): Promise<TrackedCredential[]> {
  if (names.length === 0) return [];
  let failed = names;
  let secrets: Awaited<ReturnType<typeof fetchPullSecrets>>['secrets'] = [];
  if (deps.objects) {
    const fetched = await fetchPullSecrets(pod, deps.objects);
    failed = fetched.failed;
    secrets = fetched.secrets;
    for (const name of failed) deps.log.info({ pod: pod.metadata?.name, namespace: pod.metadata?.namespace, secret: name, err: fetched.why.get(name) }, 'Unable to retrieve pull secret, the image pull may not succeed.');
  }
  if (failed.length > 0) deps.events?.emit(podRef(pod), 'Warning', 'FailedToRetrieveImagePullSecret', failedPullSecretsMessage(failed));
  const keyring = keyringFromSecrets(secrets, (secret, location) => deps.log.warn({ secret, location }, `entry ${JSON.stringify(location)} of image pull secret ${secret} is not a valid registry location; ignoring it`));
  return keyring.lookup(repository);
}

/**
 * Whether a present image must be pulled again before the pod may use it
 * (KubeletEnsureSecretPulledImages; the kubelet's MustAttemptImagePull). Records that cannot
 * be read require a pull.
 */
async function mustPullPresent(deps: ImagePullerDeps, image: string, imageRef: string, repository: string, credentials: () => Promise<TrackedCredential[]>): Promise<boolean> {
  const v = deps.verification;
  const records = deps.records;
  if (!v || !records?.pulledRecord || !records.intentExists || !imageRef) return false;
  let record;
  let pulledByNodeAgent: boolean;
  try {
    record = await records.pulledRecord(imageRef);
    pulledByNodeAgent = record !== undefined || (await records.intentExists(image));
  } catch (err) {
    deps.log.warn({ image, imageRef, err: errorMessage(err) }, 'Unable to access cache records about image pulls; the pod must pull the image with its credentials');
    return true;
  }
  // The allowlist is matched against the image as the pod wrote it, as the kubelet does.
  if (!requiresVerification(v.policy, v.allowlist, image, pulledByNodeAgent)) return false;
  const d = await decideAccess(record, repository, async () => podSecretRecords(await credentials()));
  if (!d.pull && d.remember) await records.addCredentials?.(imageRef, repository, { kubernetesSecrets: [d.remember] });
  return d.pull;
}
