/**
 * What a pod refers to in the API besides itself: the ConfigMaps, Secrets, ServiceAccounts and
 * Services its volumes, env and image pulls read, and the service-account tokens it is given.
 * This is a port: the pods floor declares what it needs; connected mode implements it over the
 * control plane (`src/controlplane/`), and a standalone node has none, so a static pod that
 * refers to an API object is refused (static pods cannot refer to them, as the kubelet).
 *
 * Every read names the object it wanted in its error; "not found" is an answer (undefined), not
 * an error, so callers can tell `optional` references from broken ones.
 */
import type { ConfigMap, Pod, Secret, Service, ServiceAccount } from 'kubernetes-types/core/v1.js';
import type { RuntimeClass } from 'kubernetes-types/node/v1.js';

/** A TokenRequest for a pod's projected `serviceAccountToken` source. */
export interface TokenRequestSpec {
  /** The audiences of the token; empty: the API server's own. */
  audiences: string[];
  expirationSeconds: number;
  /** The pod the token is bound to (`boundObjectRef`). */
  boundPod: { name: string; uid: string };
}

export interface IssuedToken {
  token: string;
  /** RFC 3339, as the API answers `status.expirationTimestamp`. */
  expirationTimestamp: string;
  /** The answered `spec.expirationSeconds`: the lifetime granted, less than asked when the API server caps it. */
  expirationSeconds?: number;
}

export interface ApiObjects {
  /** The ConfigMap `namespace/name`, or undefined when the API says it does not exist. */
  configMap(namespace: string, name: string): Promise<ConfigMap | undefined>;
  /** The Secret `namespace/name`, or undefined when the API says it does not exist. */
  secret(namespace: string, name: string): Promise<Secret | undefined>;
  /** The ServiceAccount `namespace/name`, or undefined when the API says it does not exist. */
  serviceAccount(namespace: string, name: string): Promise<ServiceAccount | undefined>;
  /** The Services of a namespace (for the service environment variables). */
  services(namespace: string): Promise<Service[]>;
  /**
   * The RuntimeClass `name` (cluster-scoped), or undefined when the API says it does not exist:
   * read when a pod's sandbox is created (the kubelet's runtimeclass manager). Optional only so
   * an implementation that cannot read them says so: a pod naming a class is then refused.
   */
  runtimeClass?(name: string): Promise<RuntimeClass | undefined>;
  /** POST `serviceaccounts/<name>/token` in `namespace`. */
  requestToken(namespace: string, serviceAccount: string, spec: TokenRequestSpec): Promise<IssuedToken>;
  /**
   * Change detection, as the kubelet's watch-based ConfigMap and Secret managers (optional:
   * an implementation without it is read with a request each time). `registerPod` tells the
   * ConfigMaps and Secrets a pod refers to now (references.ts; called again when the pod
   * changes, idempotent); `unregisterPod` once the pod is gone. An object that no registered
   * pod refers to is no longer watched.
   */
  registerPod?(pod: Pod): void;
  unregisterPod?(uid: string): void;
  /** Tells `listener` of every change of a watched ConfigMap or Secret; returns the unsubscribe. */
  onChange?(listener: (ref: ObjectRef) => void): () => void;
}

/** A ConfigMap or a Secret a pod refers to. */
export interface ObjectRef {
  kind: 'ConfigMap' | 'Secret';
  namespace: string;
  name: string;
}
