/**
 * The ApiObjects port (src/pods/objects/objects.ts) over the control plane, with the
 * kubelet's default change detection for ConfigMaps and Secrets
 * (`configMapAndSecretChangeDetectionStrategy: Watch`):
 *
 * - each ConfigMap or Secret a registered pod refers to (references.ts) is watched by itself
 *   (`fieldSelector=metadata.name=<name>` in its namespace: what the Node authorizer lets a
 *   node read), one reflector per object, however many pods use it; the reflector of an
 *   object no registered pod refers to any more is stopped;
 * - a read of a watched object answers from the reflector's store once it has listed, with
 *   no request; before that (or for an object no pod registered), a GET;
 * - an `immutable` object is not watched after it is read: kept as read for as long as
 *   pods refer to it (the kubelet's manager does the same);
 * - every change a watch sees is told to the `onChange` listeners, which rewrite the volumes
 *   that show the object (pods/volumes/api-volumes.ts): an edit reaches a running pod in the
 *   time of one watch event, not at its next periodic sync.
 *
 * A control plane that is down never empties anything: a reflector keeps its last store
 * while it retries (its own backoff), and the reads keep answering from it.
 *
 * All requests go through the node's main client (its kubeAPIQPS limiter). Errors name the
 * object they wanted; "not found" is undefined.
 */
import type { ConfigMap, Secret, Service, ServiceAccount } from 'kubernetes-types/core/v1.js';
import type { RuntimeClass } from 'kubernetes-types/node/v1.js';
import { realClock, type Clock } from '../clock.js';
import { errorMessage, NodeletError } from '../errors.js';
import type { Logger } from '../log.js';
import type { ApiObjects, IssuedToken, ObjectRef, TokenRequestSpec } from '../pods/objects/objects.js';
import { podObjectReferences, refKey } from '../pods/objects/references.js';
import { resourcePath, type ControlPlaneClient, type KubeObject, type ResourceType } from './client.js';
import { dropManagedFields, Reflector } from './reflector.js';

export const CONFIGMAPS: ResourceType = { group: '', version: 'v1', resource: 'configmaps', namespaced: true };
export const SECRETS: ResourceType = { group: '', version: 'v1', resource: 'secrets', namespaced: true };
export const SERVICEACCOUNTS: ResourceType = { group: '', version: 'v1', resource: 'serviceaccounts', namespaced: true };
export const SERVICES: ResourceType = { group: '', version: 'v1', resource: 'services', namespaced: true };
export const RUNTIMECLASSES: ResourceType = { group: 'node.k8s.io', version: 'v1', resource: 'runtimeclasses', namespaced: false };

/**
 * How long a RuntimeClass read (found or not) answers the next lookups of that name. It is
 * read once per sandbox creation, so pods started together share one GET, and a class
 * created or changed after a refusal is seen by the pod's next sandbox attempt.
 */
export const RUNTIME_CLASS_CACHE_MS = 5_000;

const TYPES: Record<ObjectRef['kind'], { type: ResourceType; what: string }> = {
  ConfigMap: { type: CONFIGMAPS, what: 'configmap' },
  Secret: { type: SECRETS, what: 'secret' },
};

export type ObjectsClient = Pick<ControlPlaneClient, 'get' | 'listAll' | 'watch' | 'request'>;

export interface ControlPlaneObjectsOptions {
  client: ObjectsClient;
  logger: Logger;
  clock?: Clock;
}

interface Watched {
  ref: ObjectRef;
  /** The pods (UIDs) that refer to the object. */
  users: Set<string>;
  reflector?: Reflector<KubeObject>;
  /** The reflector has listed: its store is the answer. */
  synced: boolean;
  /** The resourceVersion the watch last showed ('' absent): a relist that changed nothing tells nobody. */
  rv?: string;
  /** An immutable object, read once: the answer from now on, unwatched. */
  frozen?: KubeObject;
}

/** A DNS-1123 subdomain (ConfigMap and Secret names; namespaces are labels, a subset). */
const NAME_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const isImmutable = (o: KubeObject | undefined): boolean => (o as { immutable?: boolean } | undefined)?.immutable === true;

export class ControlPlaneObjects implements ApiObjects {
  readonly #o: ControlPlaneObjectsOptions;
  readonly #watched = new Map<string, Watched>();
  /** Each registered pod's references (keys of #watched). */
  readonly #pods = new Map<string, string[]>();
  readonly #listeners = new Set<(ref: ObjectRef) => void>();
  /** RuntimeClass reads by name (in flight or answered), each until `until`. */
  readonly #runtimeClasses = new Map<string, { until: number; read: Promise<RuntimeClass | undefined> }>();
  #closed = false;

  constructor(o: ControlPlaneObjectsOptions) {
    this.#o = o;
  }

  configMap(namespace: string, name: string): Promise<ConfigMap | undefined> {
    return this.#read({ kind: 'ConfigMap', namespace, name }) as Promise<ConfigMap | undefined>;
  }

  secret(namespace: string, name: string): Promise<Secret | undefined> {
    return this.#read({ kind: 'Secret', namespace, name }) as Promise<Secret | undefined>;
  }

  async serviceAccount(namespace: string, name: string): Promise<ServiceAccount | undefined> {
    return this.#get<ServiceAccount>(SERVICEACCOUNTS, 'serviceaccount', namespace, name);
  }

  /** A GET of `runtimeclasses/<name>`, shared for RUNTIME_CLASS_CACHE_MS (a failed read is not kept). */
  runtimeClass(name: string): Promise<RuntimeClass | undefined> {
    const now = (this.#o.clock ?? realClock).now();
    const hit = this.#runtimeClasses.get(name);
    if (hit && now < hit.until) return hit.read;
    for (const [k, v] of this.#runtimeClasses) if (now >= v.until) this.#runtimeClasses.delete(k);
    const read = this.#getCluster<RuntimeClass>(RUNTIMECLASSES, 'runtimeclass', name);
    this.#runtimeClasses.set(name, { until: now + RUNTIME_CLASS_CACHE_MS, read });
    read.catch(() => {
      if (this.#runtimeClasses.get(name)?.read === read) this.#runtimeClasses.delete(name);
    });
    return read;
  }

  async services(namespace: string): Promise<Service[]> {
    try {
      return (await this.#o.client.listAll<Service>(SERVICES, { namespace })).items;
    } catch (err) {
      throw named(err, `cannot list the services of namespace "${namespace}"`);
    }
  }

  async requestToken(namespace: string, serviceAccount: string, spec: TokenRequestSpec): Promise<IssuedToken> {
    const what = `cannot request a token for service account "${namespace}/${serviceAccount}"`;
    let r: { spec?: { expirationSeconds?: unknown }; status?: { token?: string; expirationTimestamp?: string } };
    try {
      r = await this.#o.client.request({
        method: 'POST',
        path: resourcePath(SERVICEACCOUNTS, { namespace, name: serviceAccount, subresource: 'token' }),
        resource: 'serviceaccounts/token',
        body: {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenRequest',
          spec: { audiences: spec.audiences, expirationSeconds: spec.expirationSeconds, boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: spec.boundPod.name, uid: spec.boundPod.uid } },
        },
      });
    } catch (err) {
      throw named(err, what);
    }
    const token = r?.status?.token;
    const exp = r?.status?.expirationTimestamp;
    if (typeof token !== 'string' || token === '' || typeof exp !== 'string' || !Number.isFinite(Date.parse(exp))) {
      throw new NodeletError('INTERNAL', `${what}: the answer has no status.token or no valid status.expirationTimestamp`);
    }
    const granted = r.spec?.expirationSeconds;
    return { token, expirationTimestamp: exp, ...(typeof granted === 'number' && Number.isInteger(granted) && granted > 0 ? { expirationSeconds: granted } : {}) };
  }

  registerPod(pod: Parameters<NonNullable<ApiObjects['registerPod']>>[0]): void {
    const uid = pod.metadata?.uid;
    if (!uid || this.#closed) return;
    // Only names the API allows become a field selector (a hostile name could widen it); others are read with a GET (and not found).
    const refs = podObjectReferences(pod).filter((r) => NAME_RE.test(r.name) && r.name.length <= 253 && NAME_RE.test(r.namespace) && r.namespace.length <= 63);
    const keys = refs.map(refKey);
    const before = this.#pods.get(uid) ?? [];
    this.#pods.set(uid, keys);
    refs.forEach((ref, i) => {
      const key = keys[i]!;
      let w = this.#watched.get(key);
      if (!w) this.#watched.set(key, (w = { ref, users: new Set(), synced: false }));
      w.users.add(uid);
      if (!w.reflector && !w.frozen) this.#watch(w);
    });
    const now = new Set(keys);
    for (const key of before) if (!now.has(key)) this.#release(key, uid);
  }

  unregisterPod(uid: string): void {
    for (const key of this.#pods.get(uid) ?? []) this.#release(key, uid);
    this.#pods.delete(uid);
  }

  onChange(listener: (ref: ObjectRef) => void): () => void {
    this.#listeners.add(listener);
    return () => void this.#listeners.delete(listener);
  }

  /** How many objects are watched now (reflectors running): for tests and metrics. */
  watchedCount(): number {
    let n = 0;
    for (const w of this.#watched.values()) if (w.reflector) n++;
    return n;
  }

  /** Stops every watch (the client closes after). */
  async close(): Promise<void> {
    this.#closed = true;
    const stops = [...this.#watched.values()].map((w) => w.reflector?.stop());
    this.#watched.clear();
    this.#pods.clear();
    await Promise.all(stops);
  }

  #release(key: string, uid: string): void {
    const w = this.#watched.get(key);
    if (!w) return;
    w.users.delete(uid);
    if (w.users.size > 0) return;
    this.#watched.delete(key);
    void w.reflector?.stop();
  }

  #watch(w: Watched): void {
    const { ref } = w;
    const reflector = new Reflector<KubeObject>({
      client: this.#o.client,
      type: TYPES[ref.kind].type,
      namespace: ref.namespace,
      fieldSelector: `metadata.name=${ref.name}`,
      logger: this.#o.logger,
      transform: dropManagedFields,
      ...(this.#o.clock ? { clock: this.#o.clock } : {}),
      onEvent: () => {
        if (this.#watched.get(refKey(ref)) !== w) return; // released meanwhile
        const now = reflector.state.get(`${ref.namespace}/${ref.name}`);
        const rv = now ? (now.metadata?.resourceVersion ?? '?') : '';
        const first = !w.synced;
        const changed = rv !== w.rv;
        w.synced = true;
        w.rv = rv;
        if (isImmutable(now)) this.#freeze(w, now!);
        // The first list is told too when it finds the object: a volume written from a GET
        // before the watch listed may already be behind it (a rewrite that changes nothing writes nothing).
        if (!changed || (first && !now)) return;
        for (const l of this.#listeners) {
          try {
            l(ref);
          } catch (err) {
            this.#o.logger.warn({ err: errorMessage(err) }, `a listener of ${TYPES[ref.kind].what} changes failed: ${errorMessage(err)}`);
          }
        }
      },
    });
    w.reflector = reflector;
    reflector.start();
  }

  /** An immutable object: kept as read, its watch stopped (it cannot change, only go). */
  #freeze(w: Watched, obj: KubeObject): void {
    w.frozen = obj;
    const r = w.reflector;
    w.reflector = undefined;
    void r?.stop();
  }

  async #read(ref: ObjectRef): Promise<KubeObject | undefined> {
    const w = this.#watched.get(refKey(ref));
    if (w?.frozen) return w.frozen;
    if (w?.reflector && w.synced) return w.reflector.state.get(`${ref.namespace}/${ref.name}`);
    const obj = await this.#get<KubeObject>(TYPES[ref.kind].type, TYPES[ref.kind].what, ref.namespace, ref.name);
    // Read before its watch listed: an immutable one needs no watch at all.
    if (w && this.#watched.get(refKey(ref)) === w && isImmutable(obj)) this.#freeze(w, obj!);
    return obj;
  }

  async #getCluster<T extends KubeObject>(type: ResourceType, what: string, name: string): Promise<T | undefined> {
    try {
      return await this.#o.client.get<T>(type, { name });
    } catch (err) {
      if (err instanceof NodeletError && err.code === 'NOT_FOUND') return undefined;
      throw named(err, `cannot get ${what} "${name}"`);
    }
  }

  async #get<T extends KubeObject>(type: ResourceType, what: string, namespace: string, name: string): Promise<T | undefined> {
    try {
      return await this.#o.client.get<T>(type, { namespace, name });
    } catch (err) {
      if (err instanceof NodeletError && err.code === 'NOT_FOUND') return undefined;
      throw named(err, `cannot get ${what} "${namespace}/${name}"`);
    }
  }
}

function named(err: unknown, what: string): NodeletError {
  const code = err instanceof NodeletError ? err.code : 'INTERNAL';
  const details = err instanceof NodeletError ? err.details : {};
  return new NodeletError(code, `${what}: ${errorMessage(err)}`, details, { cause: err });
}
