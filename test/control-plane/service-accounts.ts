/**
 * Service accounts as kube-apiserver and kube-controller-manager serve them (issue 27):
 *
 * - controllers: every namespace gets a `default` ServiceAccount (serviceaccounts-controller)
 *   and a `kube-root-ca.crt` ConfigMap holding the control plane's CA (root-ca-cert-publisher),
 *   both made again when deleted; `default/kubernetes` is the API's Service, on the first
 *   address of the service range, port 443 `https` to the control plane's port.
 * - the `token` subresource (TokenRequest, authentication.k8s.io/v1): a JWT signed ES256 with
 *   a P-256 key made at start (node:crypto only), claims as kube-apiserver's, optionally bound
 *   to a Pod (the pod's Node is then named in the token too).
 * - validation of those JWTs for TokenReview and for Bearer authentication: signature,
 *   exp/nbf on the control plane's clock (go-jose's 60 s leeway), audiences, and the bound
 *   pod and the service account still existing with the same uid.
 * - the ServiceAccount admission plugin on pod create: default service account, its
 *   existence, the `kube-api-access-<5>` projected volume and its mounts, the service
 *   account's imagePullSecrets, and what mirror pods may not reference.
 */
import crypto from 'node:crypto';
import type { Clock } from '../../src/clock.js';
import { badRequestError, cause, conflictError, forbidden, invalidError, notFoundError } from './status-error.js';
import type { Obj, Store } from './store.js';

export const API_ISSUER = 'https://kubernetes.default.svc.cluster.local';
/** `--api-audiences` defaults to the issuer. */
export const API_AUDIENCES = [API_ISSUER];
export const ROOT_CA_CONFIGMAP = 'kube-root-ca.crt';
export const TOKEN_MOUNT_PATH = '/var/run/secrets/kubernetes.io/serviceaccount';
/** The expiry of the projected token the admission plugin injects (WarnOnlyBoundTokenExpirationSeconds). */
const INJECTED_TOKEN_SECONDS = 3607;
/** --service-account-extend-token-expiration: such a token bound to a pod is valid a year (warnafter at its nominal expiry). */
const EXTENDED_SECONDS = 365 * 24 * 3600;
const LEEWAY_S = 60;
const MIRROR_ANNOTATION = 'kubernetes.io/config.mirror';

export interface Identity {
  user: string;
  uid?: string;
  groups: string[];
  extra?: Record<string, string[]>;
}

const b64u = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

function isMap(v: unknown): v is Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** Signs and verifies the service-account JWTs with one P-256 key made at start. */
export class TokenSigner {
  readonly #key: crypto.KeyObject;
  readonly #pub: crypto.KeyObject;
  readonly kid: string;

  constructor() {
    const { privateKey, publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    this.#key = privateKey;
    this.#pub = publicKey;
    this.kid = b64u(crypto.createHash('sha256').update(publicKey.export({ type: 'spki', format: 'der' })).digest());
  }

  /** The public key (PEM), as `--service-account-key-file` would hold it. */
  get publicKeyPem(): string {
    return String(this.#pub.export({ type: 'spki', format: 'pem' }));
  }

  sign(claims: Obj): string {
    const head = b64u(JSON.stringify({ alg: 'ES256', kid: this.kid }));
    const body = b64u(JSON.stringify(claims));
    const sig = crypto.sign('sha256', Buffer.from(`${head}.${body}`), { key: this.#key, dsaEncoding: 'ieee-p1363' });
    return `${head}.${body}.${b64u(sig)}`;
  }

  /** The claims of a token this signer made, or an error text (bad shape, algorithm, key or signature). */
  verify(token: string): { claims: Obj } | { error: string } {
    if (token.length > 16384) return { error: 'token too long' };
    const parts = token.split('.');
    if (parts.length !== 3 || parts.some((p) => !/^[A-Za-z0-9_-]*$/.test(p))) return { error: 'not a compact JWS' };
    let head: unknown;
    let claims: unknown;
    try {
      head = JSON.parse(Buffer.from(parts[0]!, 'base64url').toString('utf8'));
      claims = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8'));
    } catch {
      return { error: 'malformed JWT' };
    }
    if (!isMap(head) || head['alg'] !== 'ES256') return { error: 'unsupported signing algorithm' };
    if (head['kid'] !== undefined && head['kid'] !== this.kid) return { error: 'unknown key id' };
    const sig = Buffer.from(parts[2]!, 'base64url');
    if (sig.length !== 64 || !crypto.verify('sha256', Buffer.from(`${parts[0]}.${parts[1]}`), { key: this.#pub, dsaEncoding: 'ieee-p1363' }, sig)) return { error: 'square/go-jose: error in cryptographic primitive' };
    if (!isMap(claims)) return { error: 'malformed JWT' };
    return { claims };
  }
}

export interface ServiceAccountsDeps {
  store: Store;
  clock: Clock;
  caPem: string;
  /** Creates an object as a controller would (server's create path: validation, managedFields). */
  create(resource: string, namespace: string, body: Obj): void;
  /** The first address of the service range (the `kubernetes` Service's). */
  kubernetesServiceIp: string;
  /**
   * Longest lifetime of an issued token in seconds (kube-apiserver's
   * `--service-account-max-token-expiration`, without its 1 h floor, so tests see renewals):
   * a longer request is shortened, in `spec.expirationSeconds`, `status.expirationTimestamp`
   * and the JWT's `exp`, and is then never extended. Unset: as asked.
   */
  maxTokenSeconds?: number;
}

function suffix(n: number): string {
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
  let s = '';
  for (const b of crypto.randomBytes(n)) s += alphabet[b % alphabet.length];
  return s;
}

export class ServiceAccounts {
  readonly signer = new TokenSigner();
  #port = 0;
  #off: (() => void) | undefined;

  constructor(private readonly d: ServiceAccountsDeps) {}

  // ---------------------------------------------------------------- controllers

  /** Reconciles every namespace now, then follows the store (after each change, never inside it). */
  start(apiPort: number): void {
    this.#port = apiPort;
    for (const ns of this.d.store.list('namespaces')) this.#reconcileNamespace(String(ns['metadata']['name']));
    this.#reconcileKubernetesService();
    this.#off = this.d.store.subscribe((ev) => {
      const wanted =
        (ev.resource === 'namespaces' && ev.type === 'ADDED') ||
        (ev.type === 'DELETED' && ((ev.resource === 'serviceaccounts' && ev.name === 'default') || (ev.resource === 'configmaps' && ev.name === ROOT_CA_CONFIGMAP) || (ev.resource === 'services' && ev.namespace === 'default' && ev.name === 'kubernetes')));
      if (!wanted) return;
      // A write from inside a store listener would reach other listeners (watches) before
      // the change that caused it: run once this one is delivered.
      const ns = ev.resource === 'namespaces' ? ev.name : ev.namespace;
      queueMicrotask(() => {
        if (ev.resource === 'services') this.#reconcileKubernetesService();
        else this.#reconcileNamespace(ns);
      });
    });
  }

  stop(): void {
    this.#off?.();
  }

  #active(ns: string): boolean {
    const o = this.d.store.get('namespaces', '', ns);
    return o !== undefined && !o['metadata']['deletionTimestamp'];
  }

  #reconcileNamespace(ns: string): void {
    if (!this.#active(ns)) return;
    try {
      if (!this.d.store.get('serviceaccounts', ns, 'default')) this.d.create('serviceaccounts', ns, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default', namespace: ns } });
      if (!this.d.store.get('configmaps', ns, ROOT_CA_CONFIGMAP)) {
        this.d.create('configmaps', ns, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: ROOT_CA_CONFIGMAP, namespace: ns, annotations: { 'kubernetes.io/description': 'Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.' } }, data: { 'ca.crt': this.d.caPem } });
      }
    } catch {
      // Lost a race with a namespace deletion: nothing to keep.
    }
  }

  #reconcileKubernetesService(): void {
    if (!this.#active('default') || this.d.store.get('services', 'default', 'kubernetes')) return;
    try {
      this.d.create('services', 'default', {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'kubernetes', namespace: 'default', labels: { component: 'apiserver', provider: 'kubernetes' } },
        spec: { type: 'ClusterIP', clusterIP: this.d.kubernetesServiceIp, ports: [{ name: 'https', port: 443, protocol: 'TCP', targetPort: this.#port }], sessionAffinity: 'None' },
      });
    } catch {
      // The address is held by another Service: as upstream, the kubernetes Service waits.
    }
  }

  // ---------------------------------------------------------------- TokenRequest

  /** POST .../serviceaccounts/<name>/token: the answered TokenRequest (201). */
  tokenRequest(ns: string, saName: string, body: unknown): Obj {
    if (!isMap(body)) throw badRequestError('TokenRequest in version "v1" cannot be handled as a TokenRequest: body must be an object');
    if ((body['apiVersion'] !== undefined && body['apiVersion'] !== 'authentication.k8s.io/v1') || (body['kind'] !== undefined && body['kind'] !== 'TokenRequest')) {
      throw badRequestError(`the API version in the data (${String(body['apiVersion'])}) does not match the expected API version (authentication.k8s.io/v1)`);
    }
    const spec: Obj = isMap(body['spec']) ? { ...body['spec'] } : {};
    const causes = [];
    const exp = spec['expirationSeconds'] ?? 3600;
    if (!Number.isInteger(exp)) throw badRequestError('TokenRequest in version "v1" cannot be handled as a TokenRequest: spec.expirationSeconds must be an integer');
    if (exp < 600) causes.push(cause('FieldValueInvalid', 'spec.expirationSeconds', `Invalid value: ${exp}: may not specify a duration less than 10 minutes`));
    if (exp > 2 ** 32) causes.push(cause('FieldValueInvalid', 'spec.expirationSeconds', `Invalid value: ${exp}: may not specify a duration larger than 2^32 seconds`));
    const auds = spec['audiences'];
    if (auds !== undefined && auds !== null && (!Array.isArray(auds) || !auds.every((a) => typeof a === 'string'))) throw badRequestError('TokenRequest in version "v1" cannot be handled as a TokenRequest: spec.audiences must be a list of strings');
    const ref = spec['boundObjectRef'];
    if (ref !== undefined && ref !== null) {
      if (!isMap(ref)) throw badRequestError('TokenRequest in version "v1" cannot be handled as a TokenRequest: spec.boundObjectRef must be an object');
      if (ref['kind'] !== 'Pod') causes.push(cause('FieldValueNotSupported', 'spec.boundObjectRef.kind', `Unsupported value: ${JSON.stringify(ref['kind'] ?? '')}: supported values: "Pod" (the test control plane binds tokens to pods only)`));
      else if (ref['apiVersion'] !== undefined && ref['apiVersion'] !== 'v1') causes.push(cause('FieldValueInvalid', 'spec.boundObjectRef.apiVersion', `Invalid value: ${JSON.stringify(ref['apiVersion'])}: must be v1 for kind Pod`));
      if (typeof ref['name'] !== 'string' || ref['name'] === '') causes.push(cause('FieldValueRequired', 'spec.boundObjectRef.name', 'Required value'));
    }
    if (causes.length > 0) throw invalidError('authentication.k8s.io', 'TokenRequest', saName, causes);
    const sa = this.d.store.get('serviceaccounts', ns, saName);
    if (!sa) throw notFoundError('', 'serviceaccounts', saName);
    const audiences: string[] = Array.isArray(auds) && auds.length > 0 ? [...auds] : [...API_AUDIENCES];
    const now = Math.floor(this.d.clock.now() / 1000);
    const priv: Obj = { namespace: ns, serviceaccount: { name: saName, uid: sa['metadata']['uid'] } };
    let outRef: Obj | undefined;
    if (isMap(ref)) {
      const pod = this.d.store.get('pods', ns, String(ref['name']));
      if (!pod) throw notFoundError('', 'pods', String(ref['name']));
      const uid = String(pod['metadata']['uid']);
      if (ref['uid'] !== undefined && ref['uid'] !== '' && ref['uid'] !== uid) throw conflictError('', 'Pod', String(ref['name']), `the UID in the bound object reference (${String(ref['uid'])}) does not match the UID in record. The object might have been deleted and then recreated`);
      if ((pod['spec']?.['serviceAccountName'] ?? 'default') !== saName) throw badRequestError(`cannot bind token for serviceaccount "${saName}" to pod running with different serviceaccount name.`);
      priv['pod'] = { name: pod['metadata']['name'], uid };
      const nodeName = pod['spec']?.['nodeName'];
      const node = typeof nodeName === 'string' && nodeName !== '' ? this.d.store.get('nodes', '', nodeName) : undefined;
      if (node) priv['node'] = { name: nodeName, uid: node['metadata']['uid'] };
      outRef = { kind: 'Pod', apiVersion: 'v1', name: pod['metadata']['name'], uid };
    }
    let granted = exp as number;
    const max = this.d.maxTokenSeconds;
    // As kube-apiserver: shortened before the extension is considered (a shortened 3607 is no longer extended).
    if (max !== undefined && max > 0 && granted > max) granted = max;
    let expSeconds = granted;
    if (outRef && granted === INJECTED_TOKEN_SECONDS) {
      priv['warnafter'] = now + granted;
      expSeconds = EXTENDED_SECONDS;
    }
    const claims = { aud: audiences, exp: now + expSeconds, iat: now, iss: API_ISSUER, jti: crypto.randomUUID(), 'kubernetes.io': priv, nbf: now, sub: `system:serviceaccount:${ns}:${saName}` };
    const token = this.signer.sign(claims);
    return {
      kind: 'TokenRequest',
      apiVersion: 'authentication.k8s.io/v1',
      metadata: { name: saName, namespace: ns, creationTimestamp: new Date(now * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z') },
      spec: { audiences, expirationSeconds: granted, ...(outRef ? { boundObjectRef: outRef } : {}) },
      status: { token, expirationTimestamp: new Date((now + granted) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z') },
    };
  }

  // ---------------------------------------------------------------- validation

  /**
   * Validates a service-account JWT for `audiences` (the API audiences when empty): the
   * identity and the audiences it was accepted for, or an error. Undefined: not one of ours.
   */
  validate(token: string, audiences: string[]): { identity: Identity; audiences: string[] } | { error: string } | undefined {
    const v = this.signer.verify(token);
    if ('error' in v) return token.split('.').length === 3 ? { error: `invalid bearer token, ${v.error}` } : undefined;
    const c = v.claims;
    if (c['iss'] !== API_ISSUER) return undefined;
    const now = this.d.clock.now() / 1000;
    if (typeof c['exp'] !== 'number' || now > c['exp'] + LEEWAY_S) return { error: 'invalid bearer token, square/go-jose/jwt: validation failed, token is expired (exp)' };
    if (typeof c['nbf'] === 'number' && now < c['nbf'] - LEEWAY_S) return { error: 'invalid bearer token, square/go-jose/jwt: validation failed, token not valid yet (nbf)' };
    const tokenAud: string[] = Array.isArray(c['aud']) ? c['aud'].map(String) : typeof c['aud'] === 'string' ? [c['aud']] : [];
    const want = audiences.length > 0 ? audiences : API_AUDIENCES;
    const accepted = want.filter((a) => tokenAud.includes(a));
    if (accepted.length === 0) return { error: 'invalid bearer token, token audiences ' + JSON.stringify(tokenAud) + ' is invalid for the target audiences ' + JSON.stringify(want) };
    const priv = c['kubernetes.io'];
    if (!isMap(priv) || typeof priv['namespace'] !== 'string' || !isMap(priv['serviceaccount'])) return { error: 'invalid bearer token, token lacks the kubernetes.io claims' };
    const ns = priv['namespace'];
    const saName = String(priv['serviceaccount']['name']);
    const sa = this.d.store.get('serviceaccounts', ns, saName);
    if (!sa || sa['metadata']['uid'] !== priv['serviceaccount']['uid'] || sa['metadata']['deletionTimestamp']) return { error: 'invalid bearer token, service account token has been invalidated' };
    const extra: Record<string, string[]> = {};
    if (isMap(priv['pod'])) {
      const pod = this.d.store.get('pods', ns, String(priv['pod']['name']));
      if (!pod || pod['metadata']['uid'] !== priv['pod']['uid']) return { error: 'invalid bearer token, service account token has been invalidated' };
      extra['authentication.kubernetes.io/pod-name'] = [String(priv['pod']['name'])];
      extra['authentication.kubernetes.io/pod-uid'] = [String(priv['pod']['uid'])];
    }
    if (isMap(priv['node'])) {
      extra['authentication.kubernetes.io/node-name'] = [String(priv['node']['name'])];
      extra['authentication.kubernetes.io/node-uid'] = [String(priv['node']['uid'])];
    }
    if (typeof c['jti'] === 'string') extra['authentication.kubernetes.io/credential-id'] = [`JTI=${c['jti']}`];
    return {
      identity: { user: `system:serviceaccount:${ns}:${saName}`, uid: String(sa['metadata']['uid']), groups: ['system:serviceaccounts', `system:serviceaccounts:${ns}`, 'system:authenticated'], extra },
      audiences: accepted,
    };
  }

  // ---------------------------------------------------------------- admission

  /** The ServiceAccount admission plugin on a pod create (mutates the pod; throws 403 naming `requestName`, else the pod's name). */
  admitPod(pod: Obj, ns: string, requestName?: string): void {
    const meta: Obj = pod['metadata'] ?? {};
    const who = requestName ?? String(meta['name'] || meta['generateName'] || 'Unknown');
    const spec: Obj = isMap(pod['spec']) ? pod['spec'] : (pod['spec'] = {});
    if (isMap(meta['annotations']) && meta['annotations'][MIRROR_ANNOTATION] !== undefined) {
      const refuse = (m: string): never => {
        throw forbidden('', 'pods', who, m);
      };
      if (typeof spec['serviceAccountName'] === 'string' && spec['serviceAccountName'] !== '') refuse('a mirror pod may not reference service accounts');
      const refs = podReferences(pod);
      if (refs.secrets.size > 0) refuse('a mirror pod may not reference secrets');
      for (const v of asList(spec['volumes'])) for (const s of asList(v?.['projected']?.['sources'])) if (s?.['serviceAccountToken']) refuse('a mirror pod may not use ServiceAccountToken volume projections');
      if (refs.configMaps.size > 0) refuse('a mirror pod may not reference configmaps');
      return;
    }
    if (spec['serviceAccountName'] === undefined || spec['serviceAccountName'] === '') spec['serviceAccountName'] = typeof spec['serviceAccount'] === 'string' && spec['serviceAccount'] !== '' ? spec['serviceAccount'] : 'default';
    const saName = String(spec['serviceAccountName']);
    const sa = this.d.store.get('serviceaccounts', ns, saName);
    if (!sa) throw forbidden('', 'pods', who, `error looking up service account ${ns}/${saName}: serviceaccount "${saName}" not found`);
    const automount = typeof spec['automountServiceAccountToken'] === 'boolean' ? spec['automountServiceAccountToken'] : typeof sa['automountServiceAccountToken'] === 'boolean' ? sa['automountServiceAccountToken'] : true;
    if (automount) this.#mountToken(spec);
    if (!Array.isArray(spec['imagePullSecrets']) || spec['imagePullSecrets'].length === 0) {
      const ips = asList(sa['imagePullSecrets']).filter((r) => isMap(r) && typeof r['name'] === 'string').map((r) => ({ name: r['name'] }));
      if (ips.length > 0) spec['imagePullSecrets'] = ips;
    }
  }

  #mountToken(spec: Obj): void {
    const names = new Set(asList(spec['volumes']).map((v) => v?.['name']));
    let volName = `kube-api-access-${suffix(5)}`;
    while (names.has(volName)) volName = `kube-api-access-${suffix(5)}`;
    let needed = false;
    for (const list of ['initContainers', 'containers']) {
      for (const c of asList(spec[list])) {
        if (!isMap(c)) continue;
        const mounts = asList(c['volumeMounts']);
        if (mounts.some((m) => m?.['mountPath'] === TOKEN_MOUNT_PATH)) continue;
        c['volumeMounts'] = [...mounts, { name: volName, readOnly: true, mountPath: TOKEN_MOUNT_PATH }];
        needed = true;
      }
    }
    if (!needed) return;
    spec['volumes'] = [
      ...asList(spec['volumes']),
      {
        name: volName,
        projected: {
          sources: [
            { serviceAccountToken: { expirationSeconds: INJECTED_TOKEN_SECONDS, path: 'token' } },
            { configMap: { name: ROOT_CA_CONFIGMAP, items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
            { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
          ],
          defaultMode: 420,
        },
      },
    ];
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function asList(v: unknown): any[] {
  return Array.isArray(v) ? v : [];
}

/** The secrets, configmaps and service account a pod refers to (podutil.VisitPodSecretNames/ConfigmapNames, all containers). */
export function podReferences(pod: Obj): { secrets: Set<string>; configMaps: Set<string>; serviceAccount: string | undefined } {
  const secrets = new Set<string>();
  const configMaps = new Set<string>();
  const spec: Obj = isMap(pod['spec']) ? pod['spec'] : {};
  const add = (set: Set<string>, v: unknown): void => {
    if (typeof v === 'string' && v !== '') set.add(v);
  };
  for (const r of asList(spec['imagePullSecrets'])) add(secrets, r?.['name']);
  for (const list of ['initContainers', 'containers', 'ephemeralContainers']) {
    for (const c of asList(spec[list])) {
      for (const e of asList(c?.['envFrom'])) {
        add(secrets, e?.['secretRef']?.['name']);
        add(configMaps, e?.['configMapRef']?.['name']);
      }
      for (const e of asList(c?.['env'])) {
        add(secrets, e?.['valueFrom']?.['secretKeyRef']?.['name']);
        add(configMaps, e?.['valueFrom']?.['configMapKeyRef']?.['name']);
      }
    }
  }
  for (const v of asList(spec['volumes'])) {
    if (!isMap(v)) continue;
    add(secrets, v['secret']?.['secretName']);
    add(configMaps, v['configMap']?.['name']);
    for (const s of asList(v['projected']?.['sources'])) {
      add(secrets, s?.['secret']?.['name']);
      add(configMaps, s?.['configMap']?.['name']);
    }
    add(secrets, v['azureFile']?.['secretName']);
    for (const k of ['cephfs', 'cinder', 'flexVolume', 'rbd', 'scaleIO', 'storageos']) add(secrets, v[k]?.['secretRef']?.['name']);
    add(secrets, v['iscsi']?.['secretRef']?.['name']);
    add(secrets, v['csi']?.['nodePublishSecretRef']?.['name']);
  }
  const sa = spec['serviceAccountName'];
  return { secrets, configMaps, serviceAccount: typeof sa === 'string' && sa !== '' ? sa : undefined };
}

