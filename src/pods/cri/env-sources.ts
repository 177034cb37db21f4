/**
 * Reads what a container's environment needs from the API, once per container start: each
 * ConfigMap and Secret its `env` and `envFrom` name (once per object however many keys refer
 * to it, all at once), the Service variables (service-env.ts) and, only when a
 * `resourceFieldRef` needs it, the node's allocatable. env.ts then builds the environment
 * from what was read, purely.
 *
 * A read that fails is kept as its error, not thrown here: env.ts processes references in
 * the kubelet's order (envFrom, then env) and reports the first problem in that order, as the
 * kubelet does. "Not found" is kept as undefined (an `optional` reference skips it).
 */
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import type { ApiObjects } from '../objects/objects.js';
import type { EnvObjects } from './env.js';
import type { ServiceEnvSource } from './service-env.js';

/** The names of the ConfigMaps and Secrets a container's env and envFrom refer to, in order, each once. */
export function envObjectNames(c: Container): { configMaps: string[]; secrets: string[] } {
  const configMaps = new Set<string>();
  const secrets = new Set<string>();
  for (const from of c.envFrom ?? []) {
    if (from?.configMapRef) configMaps.add(String(from.configMapRef.name ?? ''));
    else if (from?.secretRef) secrets.add(String(from.secretRef.name ?? ''));
  }
  for (const e of c.env ?? []) {
    const vf = e?.valueFrom;
    if (!vf || (e.value !== undefined && e.value !== '')) continue;
    if (vf.configMapKeyRef) configMaps.add(String(vf.configMapKeyRef.name ?? ''));
    else if (vf.secretKeyRef) secrets.add(String(vf.secretKeyRef.name ?? ''));
  }
  return { configMaps: [...configMaps], secrets: [...secrets] };
}

/** Whether a `resourceFieldRef` of the container may read a defaulted limit (so the node's allocatable is needed). */
export function needsAllocatable(c: Container): boolean {
  return (c.env ?? []).some((e) => typeof e?.valueFrom?.resourceFieldRef?.resource === 'string' && e.valueFrom.resourceFieldRef.resource.startsWith('limits.'));
}

async function settle<T>(read: () => Promise<T>): Promise<T | Error> {
  try {
    return await read();
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}

/**
 * The API objects a container's env refers to, for env.ts. `objects` unset (a standalone
 * node): undefined, and env.ts refuses any reference. Services are read only through
 * `services` (one per runtime: it keeps the last lists); its failure throws (a
 * CreateContainerConfigError naming it).
 */
export async function readEnvObjects(pod: Pod, c: Container, objects: ApiObjects | undefined, services: ServiceEnvSource | undefined): Promise<EnvObjects | undefined> {
  if (!objects) return undefined;
  const ns = pod.metadata?.namespace ?? 'default';
  const names = envObjectNames(c);
  const [configMaps, secrets, serviceEnv] = await Promise.all([
    Promise.all(names.configMaps.map(async (n) => [n, await settle(() => objects.configMap(ns, n))] as const)),
    Promise.all(names.secrets.map(async (n) => [n, await settle(() => objects.secret(ns, n))] as const)),
    services ? services.envFor(ns, pod.spec?.enableServiceLinks !== false) : Promise.resolve(new Map<string, string>()),
  ]);
  return { configMaps: new Map(configMaps), secrets: new Map(secrets), serviceEnv };
}
