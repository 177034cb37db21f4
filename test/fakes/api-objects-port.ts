/**
 * An in-memory ApiObjects (src/pods/objects/objects.ts): ConfigMaps and Secrets a test puts
 * and edits (each edit told to the onChange listeners, as the watches would), token
 * requests answered from the injected clock, every call recorded, and `down` to make every
 * request fail as a control plane that does not answer.
 */
import type { ConfigMap, Pod, Secret, Service, ServiceAccount } from 'kubernetes-types/core/v1.js';
import type { Clock } from '../../src/clock.js';
import { NodeletError } from '../../src/errors.js';
import type { ApiObjects, IssuedToken, ObjectRef, TokenRequestSpec } from '../../src/pods/objects/objects.js';
import { podObjectReferences, refKey } from '../../src/pods/objects/references.js';

export class FakeApiObjects implements ApiObjects {
  readonly configMaps = new Map<string, ConfigMap>();
  readonly secrets = new Map<string, Secret>();
  readonly tokenRequests: { namespace: string; serviceAccount: string; spec: TokenRequestSpec; at: number }[] = [];
  readonly registered = new Map<string, string[]>();
  /** Every request fails UNAVAILABLE while true. */
  down = false;
  #listeners = new Set<(ref: ObjectRef) => void>();
  #n = 0;

  constructor(readonly clock: Clock) {}

  #check(): void {
    if (this.down) throw new NodeletError('UNAVAILABLE', 'connect ECONNREFUSED 127.0.0.1:6443');
  }

  putConfigMap(namespace: string, name: string, data: Record<string, string>, extra: Partial<ConfigMap> = {}): void {
    this.configMaps.set(`${namespace}/${name}`, { metadata: { namespace, name, resourceVersion: String(++this.#n) }, data, ...extra });
    this.#tell({ kind: 'ConfigMap', namespace, name });
  }

  putSecret(namespace: string, name: string, data: Record<string, string>, extra: Partial<Secret> = {}): void {
    const b64 = Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')]));
    this.secrets.set(`${namespace}/${name}`, { metadata: { namespace, name, resourceVersion: String(++this.#n) }, data: b64, ...extra });
    this.#tell({ kind: 'Secret', namespace, name });
  }

  #tell(ref: ObjectRef): void {
    for (const l of this.#listeners) l(ref);
  }

  async configMap(namespace: string, name: string): Promise<ConfigMap | undefined> {
    this.#check();
    return this.configMaps.get(`${namespace}/${name}`);
  }

  async secret(namespace: string, name: string): Promise<Secret | undefined> {
    this.#check();
    return this.secrets.get(`${namespace}/${name}`);
  }

  async serviceAccount(namespace: string, name: string): Promise<ServiceAccount | undefined> {
    this.#check();
    return { metadata: { namespace, name } };
  }

  async services(): Promise<Service[]> {
    this.#check();
    return [];
  }

  async requestToken(namespace: string, serviceAccount: string, spec: TokenRequestSpec): Promise<IssuedToken> {
    this.#check();
    const at = this.clock.now();
    this.tokenRequests.push({ namespace, serviceAccount, spec, at });
    return { token: `token-${this.tokenRequests.length}-${serviceAccount}-${spec.boundPod.uid}`, expirationTimestamp: new Date(at + spec.expirationSeconds * 1000).toISOString() };
  }

  registerPod(pod: Pod): void {
    this.registered.set(pod.metadata!.uid!, podObjectReferences(pod).map(refKey));
  }

  unregisterPod(uid: string): void {
    this.registered.delete(uid);
  }

  onChange(listener: (ref: ObjectRef) => void): () => void {
    this.#listeners.add(listener);
    return () => void this.#listeners.delete(listener);
  }
}
