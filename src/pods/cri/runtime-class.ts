/**
 * A pod's `runtimeClassName` to the CRI `runtime_handler` of its sandbox (issue 28), as the
 * kubelet's runtimeclass manager (LookupRuntimeHandler) answers it when a sandbox is created:
 *
 * - no class (unset or ""): the runtime's default handler, "";
 * - a class that exists: its `handler`;
 * - a class the API does not have: refused with the API's NotFound text
 *   (`runtimeclasses.node.k8s.io "<name>" not found`), so the pod waits with
 *   `FailedCreatePodSandBox` naming it and is retried with the sandbox backoff;
 * - no control plane (a standalone node): the default handler, as the kubelet, which only
 *   builds its runtimeclass manager with an API client; the caller logs that it is ignored.
 *
 * Called once per sandbox creation (not per sync); never blocks on anything but the read.
 */
import type { Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError, errorMessage } from '../../errors.js';
import type { ApiObjects } from '../objects/objects.js';
import { isDnsLabel, isDnsSubdomain } from '../sources/pod-validation.js';

const REASON = 'CreatePodSandboxError';

export type RuntimeHandlerLookup = { handler: string; ignored?: string };

/** The handler for `pod`'s sandbox; throws a NodeletError (reason CreatePodSandboxError) naming the class. */
export async function lookupRuntimeHandler(pod: Pod, objects: ApiObjects | undefined): Promise<RuntimeHandlerLookup> {
  const name: unknown = pod.spec?.runtimeClassName;
  if (name === undefined || name === null || name === '') return { handler: '' };
  if (!isDnsSubdomain(name)) {
    throw new NodeletError('INVALID_ARGUMENT', `spec.runtimeClassName: Invalid value: ${JSON.stringify(String(name)).slice(0, 300)}: a RuntimeClass name must be a lowercase RFC 1123 subdomain`, { reason: REASON });
  }
  if (!objects) return { handler: '', ignored: `runtimeClassName "${name}" is ignored: a node without a control plane cannot look up RuntimeClasses (the runtime's default handler is used, as the kubelet)` };
  if (!objects.runtimeClass) throw new NodeletError('UNIMPLEMENTED', `failed to lookup RuntimeClass ${name}: this node's API access cannot read RuntimeClasses`, { reason: REASON });
  let rc;
  try {
    rc = await objects.runtimeClass(name);
  } catch (err) {
    const code = err instanceof NodeletError ? err.code : 'INTERNAL';
    throw new NodeletError(code, `failed to lookup RuntimeClass ${name}: ${errorMessage(err)}`, { reason: REASON }, { cause: err });
  }
  if (!rc) throw new NodeletError('NOT_FOUND', `runtimeclasses.node.k8s.io "${name}" not found`, { reason: REASON, runtimeClassName: name });
  const handler: unknown = rc.handler;
  // The API validates it; a hostile or broken answer still never reaches the runtime.
  if (!isDnsLabel(handler)) throw new NodeletError('INTERNAL', `RuntimeClass "${name}" has an invalid handler ${JSON.stringify(handler)?.slice(0, 100)}: must be a DNS label`, { reason: REASON });
  return { handler };
}
