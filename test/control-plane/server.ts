/**
 * The test control plane (issue 5): an in-memory HTTPS server implementing the spec's
 * resource API (Resources, Endpoints, States and transitions, Events, Errors, Limits) for
 * namespaces, nodes, pods, events, leases and the virtual token/subject access reviews.
 * A second, honest implementation of the spec that nodelet's client and kubectl are tested
 * against. startControlPlane() is the contract tests code against.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import type http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { TLSSocket } from 'node:tls';
import zlib from 'node:zlib';
import YAML from 'yaml';
import { realClock, type Clock } from '../../src/clock.js';
import { DecodeError, checkFields, parseJsonStrict, parseYamlStrict } from './decode.js';
import { PROTOBUF_MEDIA_TYPE, ProtobufKindError, decodeProtobuf, encodeProtobuf, isProtobufContentType, protobufKinds, servesProtobuf } from './protobuf.js';
import { injectFault } from './faults.js';
import { SERVER_VERSION, apiGroup, apiGroupList, apiResourceList, apiVersions, openApiDocument, openApiIndex } from './discovery.js';
import { NodeCidrAllocator } from './cidr.js';
import { columnsFor } from './columns.js';
import { nodeLifecycle } from './lifecycle.js';
import { PatchError, applyJsonPatch, applyMergePatch, applyStrategicMergePatch } from './patch.js';
import { Pki } from './pki.js';
import { bootstrapTokenCaller, csrUpdate, prepareCsrCreate, startCsrControllers } from './certificates.js';
import { NODE_PROXY_PATH, proxyToNode, setNodeProxyPki } from './node-proxy.js';
import { POD_SUBRESOURCE_PATH, closePodSubresourceSessions, ephemeralContainersOnCreate, ephemeralContainersUpdate, podSubresource, setPodSubresourcesPki, upgradePodSubresource } from './pod-subresources.js';
import { RESOURCES, apiVersionOf, findResource, type ResourceDef } from './resources.js';
import { SelectorError, matchFields, matchLabels, parseFieldSelector, parseLabelSelector, type Requirement } from './selectors.js';
import { ApplyConflictError, ApplyInvalidError, applyObject, recordUpdate } from './ssa/index.js';
import { GoneError, Store, encodeJson, encodeListItem, sortKey, type Obj, type StoreEvent } from './store.js';
import { ETCD_MAX_REQUEST_BYTES, MAX_REQUEST_BODY_BYTES, etcdRequestSize } from './limits.js';
import { ServiceRange, admitCoreWrite } from './core-objects.js';
import { admitNodeRequest, authorizeNode, fieldEquals, forbiddenRequest, nodeIdentity, requestVerb, type Attributes } from './node-authorizer.js';
import { ServiceAccounts } from './service-accounts.js';
import { StatusError } from './status-error.js';
import { admitPodRuntimeClass, admitRuntimeClass } from './runtime-classes.js';

export interface ControlPlaneOptions {
  host?: string; // default 127.0.0.1
  port?: number; // 0 (default) = ephemeral
  clock?: Clock; // default realClock
  watchHistoryWindowMs?: number; // default 300_000; older resourceVersions -> 410 Gone
  continueTokenTtlMs?: number; // default 300_000; expired continue token -> 410
  nodeMonitorGracePeriodMs?: number; // default 50_000
  pkiDir?: string; // where ca.crt etc. are written; default a fresh mkdtemp dir
  /** How long a get/list for a resourceVersion newer than the store waits before 504 (default 3000). */
  tooLargeResourceVersionWaitMs?: number;
  /** Interval of BOOKMARK events on watches with allowWatchBookmarks (default 60_000). */
  bookmarkIntervalMs?: number;
  /** How often the node lifecycle check runs on real timers (default 1000; 0 = only through syncNodeLifecycle()). */
  nodeLifecycleIntervalMs?: number;
  /**
   * The controller manager's `--allocate-node-cidrs --cluster-cidr`: each new Node gets a
   * block of this IPv4 range in spec.podCIDR/podCIDRs, freed when it is deleted. Unset: none.
   */
  clusterCIDR?: string;
  /** `--node-cidr-mask-size`: the size of each node's block (default 24). */
  nodeCIDRMaskSize?: number;
  /** `--service-cluster-ip-range`: where Services get their cluster IP; the first address is the `kubernetes` Service's (default 10.96.0.0/12). */
  serviceClusterIPRange?: string;
  /** `--disable-admission-plugins=ServiceAccount`: pods are stored without the default service account and its token volume. */
  disableServiceAccountAdmission?: boolean;
  /** Lifetime of the certificates the CSR signer issues (kube-controller-manager `--cluster-signing-duration`; default one year). */
  csrSigningDurationMs?: number;
  /**
   * Longest service-account token lifetime in seconds (kube-apiserver's `--service-account-max-token-expiration`,
   * which may not be under 1 h; here any positive integer): a TokenRequest asking more gets this. Unset: as asked.
   */
  serviceAccountTokenMaxSeconds?: number;
}

export interface AccessAttributes {
  user: string;
  groups: string[];
  verb: string;
  resource?: string;
  subresource?: string;
  name?: string;
  namespace?: string;
  path?: string;
}

export interface ControlPlane {
  readonly url: string; // https://127.0.0.1:<port>
  readonly caFile: string;
  issueClientCert(user: string, groups?: string[]): { certFile: string; keyFile: string };
  addToken(token: string, user: string, groups?: string[]): void;
  writeKubeconfig(path: string, auth: { user: string; groups?: string[] } | { token: string }): void;
  /** Rules that answer SubjectAccessReviews (and nothing else); default: deny all with reason "no rule". */
  setAccessRules(decide: (attrs: AccessAttributes) => { allowed: boolean; reason?: string }): void;
  /** Close every open watch connection now. */
  dropWatches(): void;
  /** Forget all watch history up to now (older resourceVersions answer 410). */
  compactHistory(): void;
  /** Runs the node lifecycle check once at the clock's current time (tests with a manual clock). */
  syncNodeLifecycle(): void;
  /** Marks a stored object unreadable (spec: deletion table, `ignoreStoreReadErrorWithClusterBreakingPotential`). */
  corruptObject(resource: string, namespace: string, name: string): void;
  /** Number of open watch connections. */
  readonly openWatches: number;
  close(): Promise<void>;
}

// ------------------------------------------------------------------ errors

export class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: Obj,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

function statusBody(e: ApiError): Obj {
  // An error that is not a Status upstream (etcd's) has no reason: Go omits the empty field.
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: e.message, ...(e.reason !== '' ? { reason: e.reason } : {}), ...(e.details ? { details: e.details } : {}), code: e.code };
}

const badRequest = (msg: string): ApiError => new ApiError(400, 'BadRequest', msg);
const notFound = (def: ResourceDef, name: string): ApiError => new ApiError(404, 'NotFound', `${def.resource} "${name}" not found`, { name, group: def.group, kind: def.resource });
const gone = (msg: string): ApiError => new ApiError(410, 'Expired', msg);
const invalid = (def: ResourceDef, name: string, causes: Array<{ field: string; message: string }>): ApiError =>
  new ApiError(422, 'Invalid', `${def.kind} "${name}" is invalid: ${causes.map((c) => `${c.field}: ${c.message}`).join(', ')}`, {
    name,
    group: def.group,
    kind: def.kind,
    causes: causes.map((c) => ({ reason: 'FieldValueInvalid', message: c.message, field: c.field })),
  });
const conflict = (def: ResourceDef, name: string, msg: string): ApiError =>
  new ApiError(409, 'Conflict', `Operation cannot be fulfilled on ${def.resource}${def.group ? `.${def.group}` : ''} "${name}": ${msg}`, { name, group: def.group, kind: def.resource });

// ------------------------------------------------------------------ negotiation

interface Negotiated {
  yaml: boolean;
  table: boolean;
  /** Protobuf (protobuf.ts): only when the client accepts neither JSON nor YAML. */
  protobuf?: boolean;
}

/**
 * Picks the first Accept entry this server serves; undefined means 406. With `allowProtobuf`
 * (the kind has a protobuf message), `application/vnd.kubernetes.protobuf` is answered when
 * nothing else listed is.
 */
export function negotiate(accept: string | undefined, allowTable: boolean, allowProtobuf = false): Negotiated | undefined {
  if (!accept || accept.trim() === '') return { yaml: false, table: false };
  let protobuf = false;
  for (const entry of accept.split(',')) {
    const [typeRaw, ...paramParts] = entry.split(';');
    const type = typeRaw!.trim().toLowerCase();
    const params: Record<string, string> = {};
    for (const p of paramParts) {
      const [k, v] = p.split('=');
      if (k && v !== undefined) params[k.trim()] = v.trim();
    }
    if (params['q'] === '0') continue;
    const as = params['as'];
    if (as !== undefined) {
      if (as === 'Table' && allowTable && params['g'] === 'meta.k8s.io' && (params['v'] === 'v1' || params['v'] === 'v1beta1') && (type === 'application/json' || type === 'application/yaml')) {
        return { yaml: type === 'application/yaml', table: true };
      }
      continue;
    }
    if (type === 'application/json' || type === '*/*' || type === 'application/*' || type === 'application/json-patch+json' || type === 'application/merge-patch+json') return { yaml: false, table: false };
    if (type === 'application/yaml') return { yaml: true, table: false };
    if (type === PROTOBUF_MEDIA_TYPE && allowProtobuf) protobuf = true;
  }
  return protobuf ? { yaml: false, table: false, protobuf: true } : undefined;
}

// ------------------------------------------------------------------ helpers

function isoNow(clock: Clock): string {
  return new Date(clock.now()).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function randomSuffix(): string {
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
  let s = '';
  for (const b of crypto.randomBytes(5)) s += alphabet[b % alphabet.length];
  return s;
}

function deepEqual(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** A shallow view without metadata.resourceVersion (for comparing versions; never mutated). */
function withoutRv(o: Obj): Obj {
  if (!o['metadata']) return o;
  return { ...o, metadata: { ...o['metadata'], resourceVersion: undefined } };
}

/** A deep copy of a JSON object (several times faster than structuredClone on large objects). */
function copy<T>(o: T): T {
  return JSON.parse(JSON.stringify(o)) as T;
}

const NAME_RE = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

interface Target {
  def: ResourceDef;
  namespace: string | undefined; // undefined: cluster-scoped or across all namespaces
  name?: string;
  subresource?: string;
}

interface Caller {
  user: string;
  groups: string[];
}

interface ContinueToken {
  rv: number;
  start: string;
  issued: number;
}

interface Watcher {
  res: http.ServerResponse;
  close(): void;
}

// ------------------------------------------------------------------ server

class Server {
  readonly store: Store;
  readonly clock: Clock;
  private tokens = new Map<string, Caller>();
  private rules: (a: AccessAttributes) => { allowed: boolean; reason?: string } = () => ({ allowed: false, reason: 'no rule' });
  private watchers = new Set<Watcher>();
  private corrupt = new Set<string>();
  private readonly historyWindowMs: number;
  private readonly continueTtlMs: number;
  readonly graceMs: number;
  private readonly tooLargeWaitMs: number;
  private readonly bookmarkMs: number;
  private readonly cidrs: NodeCidrAllocator | undefined;
  readonly serviceRange: ServiceRange;
  /** Service accounts, tokens and their admission (issue 27); set by initServiceAccounts before the server listens. */
  sa!: ServiceAccounts;
  private readonly noSaAdmission: boolean;
  private readonly maxTokenSeconds: number | undefined;
  url = '';

  constructor(opts: ControlPlaneOptions) {
    this.clock = opts.clock ?? realClock;
    this.historyWindowMs = opts.watchHistoryWindowMs ?? 300_000;
    this.continueTtlMs = opts.continueTokenTtlMs ?? 300_000;
    this.graceMs = opts.nodeMonitorGracePeriodMs ?? 50_000;
    this.tooLargeWaitMs = opts.tooLargeResourceVersionWaitMs ?? 3000;
    this.bookmarkMs = opts.bookmarkIntervalMs ?? 60_000;
    this.store = new Store(this.clock, this.historyWindowMs);
    this.cidrs = opts.clusterCIDR !== undefined ? new NodeCidrAllocator(opts.clusterCIDR, opts.nodeCIDRMaskSize) : undefined;
    this.serviceRange = new ServiceRange(opts.serviceClusterIPRange ?? '10.96.0.0/12');
    this.noSaAdmission = opts.disableServiceAccountAdmission === true;
    const maxTok = opts.serviceAccountTokenMaxSeconds;
    if (maxTok !== undefined && (!Number.isInteger(maxTok) || maxTok <= 0)) throw new Error(`serviceAccountTokenMaxSeconds: must be a positive integer, got ${String(maxTok)}`);
    this.maxTokenSeconds = maxTok;
    // A deleted node's pod CIDR is free again.
    if (this.cidrs) {
      this.store.subscribe((ev) => {
        if (ev.resource === 'nodes' && ev.type === 'DELETED' && typeof ev.object['spec']?.['podCIDR'] === 'string') this.cidrs!.release(ev.name, ev.object['spec']['podCIDR']);
      });
    }
    for (const ns of ['default', 'kube-system', 'kube-public', 'kube-node-lease']) {
      this.store.put('namespaces', '', ns, this.newMeta(findResource('', 'v1', 'namespaces')!, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns }, spec: {}, status: { phase: 'Active' } }));
    }
  }

  addToken(token: string, user: string, groups: string[]): void {
    this.tokens.set(token, { user, groups });
  }
  setRules(fn: (a: AccessAttributes) => { allowed: boolean; reason?: string }): void {
    this.rules = fn;
  }
  dropWatches(): void {
    for (const w of [...this.watchers]) w.close();
  }
  get openWatches(): number {
    return this.watchers.size;
  }
  markCorrupt(resource: string, ns: string, name: string): void {
    this.corrupt.add(`${resource}/${ns}/${name}`);
  }

  private newMeta(_def: ResourceDef, o: Obj): Obj {
    o['metadata'] = { ...o['metadata'], uid: crypto.randomUUID(), creationTimestamp: isoNow(this.clock) };
    return o;
  }

  // ---------------------------------------------------------------- entry

  async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const u = new URL(req.url ?? '/', 'https://x');
    try {
      const caller = this.authenticate(req);
      if (!caller) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
      await this.route(req, res, u, caller);
    } catch (err) {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      const e = err instanceof ApiError ? err : err instanceof StatusError ? new ApiError(err.code, err.reason, err.message, err.details) : new ApiError(500, 'InternalError', `Internal error occurred: ${(err as Error).message}`);
      this.sendStatus(res, e, negotiate(req.headers['accept'], false, true)?.protobuf === true);
    }
  }

  private authenticate(req: http.IncomingMessage): Caller | undefined {
    const auth = req.headers['authorization'];
    if (typeof auth === 'string' && /^bearer /i.test(auth)) {
      const token = auth.slice(7).trim();
      return this.tokens.get(token) ?? bootstrapTokenCaller(this.store, token, this.clock.now()) ?? this.serviceAccountCaller(token);
    }
    const sock = req.socket as TLSSocket;
    if (sock.authorized) {
      const cert = sock.getPeerCertificate();
      const cn = cert.subject?.CN;
      const o = cert.subject?.O;
      if (typeof cn === 'string' && cn !== '') return { user: cn, groups: o === undefined ? [] : Array.isArray(o) ? o : [o] };
    }
    return undefined;
  }

  private sendStatus(res: http.ServerResponse, e: ApiError, protobuf = false): void {
    const body = protobuf ? encodeProtobuf(statusBody(e)) : JSON.stringify(statusBody(e));
    res.writeHead(e.code, { 'Content-Type': protobuf ? PROTOBUF_MEDIA_TYPE : 'application/json', 'Content-Length': Buffer.byteLength(body), ...e.headers });
    res.end(body);
  }

  /**
   * Writes a response. `body` may be the JSON text already made (lists of stored objects
   * reuse each object's encoding). Compression runs on libuv's thread pool, so a 40 MB list
   * does not hold the event loop while it is gzipped.
   */
  private send(req: http.IncomingMessage, res: http.ServerResponse, code: number, body: Obj | string, neg: Negotiated, extra: Record<string, string | string[]> = {}, compressible = false): void {
    const headers: Record<string, string | string[]> = { 'Content-Type': neg.protobuf ? PROTOBUF_MEDIA_TYPE : neg.yaml ? 'application/yaml' : 'application/json', ...extra };
    const payload: Buffer = neg.protobuf
      ? encodeProtobuf(typeof body === 'string' ? (JSON.parse(body) as Obj) : body)
      : Buffer.from(typeof body === 'string' ? body : neg.yaml ? YAML.stringify(body) : encodeJson(body));
    const finish = (out: Buffer): void => {
      headers['Content-Length'] = String(out.length);
      res.writeHead(code, headers);
      res.end(out);
    };
    const ae = String(req.headers['accept-encoding'] ?? '');
    if (!compressible || !/\bgzip\b/.test(ae)) return finish(payload);
    headers['Content-Encoding'] = 'gzip';
    headers['Vary'] = 'Accept-Encoding';
    zlib.gzip(payload, (err, gz) => {
      if (res.destroyed) return;
      if (err) res.destroy(err);
      else finish(gz);
    });
  }

  private async route(req: http.IncomingMessage, res: http.ServerResponse, u: URL, caller: Caller): Promise<void> {
    const p = u.pathname.replace(/\/+$/, '') || '/';
    const method = req.method ?? 'GET';
    const accept = req.headers['accept'];
    const simple = (body: Obj | undefined): void => {
      if (!body) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
      const neg = negotiate(accept, false);
      if (!neg) throw new ApiError(406, 'NotAcceptable', `only the following media types are accepted: application/json, application/yaml`);
      this.send(req, res, 200, body, neg);
    };
    if (method === 'GET') {
      if (p === '/version') return simple(SERVER_VERSION);
      if (p === '/healthz' || p === '/livez' || p === '/readyz') {
        res.writeHead(200, { 'Content-Type': 'text/plain' });
        res.end('ok');
        return;
      }
      if (p === '/api') return simple(apiVersions(this.url.replace(/^https:\/\//, '')));
      if (p === '/apis') return simple(apiGroupList());
      if (p === '/api/v1') return simple(apiResourceList('', 'v1'));
      if (p === '/openapi/v3') return simple(openApiIndex());
      if (p.startsWith('/openapi/v3/')) return simple(openApiDocument(p.slice('/openapi/v3/'.length)));
      const g = /^\/apis\/([^/]+)$/.exec(p);
      if (g) return simple(apiGroup(g[1]!));
      const gv = /^\/apis\/([^/]+)\/([^/]+)$/.exec(p);
      if (gv) return simple(apiResourceList(gv[1]!, gv[2]!));
    }
    this.authorizeNodePath(u.pathname, method, caller);
    if (NODE_PROXY_PATH.test(u.pathname)) return proxyToNode(req, res, u, this.store);
    if (POD_SUBRESOURCE_PATH.test(u.pathname)) return podSubresource(req, res, u, this.store);
    const target = this.parsePath(p);
    if (!target) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    await this.dispatch(req, res, u, target, method, caller);
  }

  private parsePath(p: string): Target | undefined {
    const segs = p.split('/').filter((s) => s !== '').map(decodeURIComponent);
    let group = '';
    let version: string;
    let rest: string[];
    if (segs[0] === 'api' && segs.length >= 3) {
      version = segs[1]!;
      rest = segs.slice(2);
    } else if (segs[0] === 'apis' && segs.length >= 4) {
      group = segs[1]!;
      version = segs[2]!;
      rest = segs.slice(3);
    } else return undefined;
    if (rest[0] === 'namespaces' && rest.length >= 3) {
      const def = findResource(group, version, rest[2]!);
      if (def && def.namespaced && rest.length <= 5) {
        const t: Target = { def, namespace: rest[1]! };
        if (rest[3] !== undefined) t.name = rest[3];
        if (rest[4] !== undefined) {
          if (!def.subresources.includes(rest[4])) return undefined;
          t.subresource = rest[4];
        }
        return t;
      }
    }
    const def = findResource(group, version, rest[0]!);
    if (!def || rest.length > 3) return undefined;
    if (def.namespaced && rest.length > 1) return undefined;
    const t: Target = { def, namespace: undefined };
    if (rest[1] !== undefined) t.name = rest[1];
    if (rest[2] !== undefined) {
      if (!def.subresources.includes(rest[2])) return undefined;
      t.subresource = rest[2];
    }
    return t;
  }

  private async dispatch(req: http.IncomingMessage, res: http.ServerResponse, u: URL, t: Target, method: string, caller: Caller): Promise<void> {
    const q = u.searchParams;
    const isWrite = method !== 'GET';
    const watching = q.has('watch') && ['', 'true', '1'].includes(q.get('watch')!);
    const neg = negotiate(req.headers['accept'], method === 'GET', !watching && servesProtobuf(apiVersionOf(t.def), t.def.kind));
    if (!neg) throw new ApiError(406, 'NotAcceptable', 'only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io');
    this.authorizeNodeRequest(t, method, q, caller);
    if (t.subresource === 'token') return this.tokenRequest(req, res, t, method, caller, neg);
    if (t.def.virtual) {
      if (method !== 'POST' || t.name !== undefined) throw new ApiError(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`);
      const body = await this.readObject(req, t, q);
      return this.send(req, res, 201, this.review(t.def, body.obj), neg);
    }
    if (method === 'GET') {
      if (q.has('watch') && ['', 'true', '1'].includes(q.get('watch')!)) return this.watch(req, res, q, t, neg);
      if (t.name === undefined) return this.list(req, res, q, t, neg);
      return this.get(req, res, q, t, neg);
    }
    if (!isWrite) return;
    if (method !== 'POST') this.admitNode(caller, method === 'DELETE' ? 'delete' : 'update', t);
    const dryRun = this.dryRun(q);
    if (method === 'POST' && t.name === undefined) {
      if (t.def.namespaced && t.namespace === undefined) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
      const body = await this.readObject(req, t, q);
      if (t.def.kind === 'CertificateSigningRequest') {
        const causes = prepareCsrCreate(body.obj, caller);
        if (causes.length > 0) throw invalid(t.def, String(body.obj['metadata']?.['name'] ?? ''), causes);
      }
      this.admitNode(caller, 'create', t, body.obj);
      const out = this.create(t, body.obj, this.manager(req, q, false), dryRun);
      return this.send(req, res, 201, out, neg, body.warnings);
    }
    if (method === 'PUT' && t.name !== undefined) {
      const body = await this.readObject(req, t, q);
      const r = this.update(t, body.obj, this.manager(req, q, false), dryRun);
      return this.send(req, res, r.created ? 201 : 200, r.obj, neg, body.warnings);
    }
    if (method === 'PATCH' && t.name !== undefined) {
      const r = await this.patch(req, q, t, dryRun);
      return this.send(req, res, r.created ? 201 : 200, r.obj, neg, r.warnings);
    }
    if (method === 'DELETE') {
      const opts = await this.deleteOptions(req, q);
      if (t.name === undefined) {
        if (!t.def.verbs.includes('deletecollection')) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
        return this.send(req, res, 200, this.deleteCollection(q, t, opts), neg);
      }
      if (t.subresource) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
      return this.send(req, res, 200, this.delete(t, t.name, opts), neg);
    }
    throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
  }

  // ---------------------------------------------------------------- reads

  private nsKey(t: Target): string {
    return t.def.namespaced ? (t.namespace ?? '') : '';
  }

  private readable(def: ResourceDef, ns: string, name: string): Obj | undefined {
    const o = this.store.get(def.resource, ns, name);
    if (o && this.corrupt.has(`${def.resource}/${ns}/${name}`)) {
      throw new ApiError(500, 'InternalError', `Internal error occurred: failed to decode ${def.resource} "${name}": object is unreadable (corrupted in storage)`);
    }
    return o;
  }

  private parseRv(v: string, param = 'resourceVersion'): number {
    if (!/^[0-9]+$/.test(v)) throw badRequest(`${param}: Invalid value: "${v}": must be a valid resource version`);
    return Number(v);
  }

  /** A resourceVersion newer than the store: wait briefly, then 504 with Retry-After (spec: consistency semantics). */
  private async waitForRv(rv: number): Promise<void> {
    if (rv <= this.store.currentRv) return;
    if (await this.store.waitFor(rv, this.tooLargeWaitMs)) return;
    throw new ApiError(504, 'Timeout', `Timeout: Too large resource version: ${rv}, current: ${this.store.currentRv}`, { causes: [{ reason: 'ResourceVersionTooLarge', message: `Too large resource version: ${rv}, current: ${this.store.currentRv}` }], retryAfterSeconds: 1 }, { 'Retry-After': '1' });
  }

  private async get(req: http.IncomingMessage, res: http.ServerResponse, q: URLSearchParams, t: Target, neg: Negotiated): Promise<void> {
    const rv = q.get('resourceVersion');
    if (rv !== null && rv !== '' && rv !== '0') await this.waitForRv(this.parseRv(rv));
    const o = this.readable(t.def, this.nsKey(t), t.name!);
    if (!o) throw notFound(t.def, t.name!);
    const body = neg.table ? this.table(t.def.kind, [o], { resourceVersion: o['metadata']['resourceVersion'] }) : o;
    this.send(req, res, 200, body, neg, {}, true);
  }

  private selectors(q: URLSearchParams, def: ResourceDef): { labels: Requirement[]; fields: Requirement[] } {
    try {
      return { labels: parseLabelSelector(q.get('labelSelector') ?? ''), fields: parseFieldSelector(q.get('fieldSelector') ?? '', def.kind) };
    } catch (err) {
      if (err instanceof SelectorError) throw badRequest(err.message);
      throw err;
    }
  }

  private decodeContinue(token: string): ContinueToken {
    try {
      const v = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as ContinueToken;
      if (typeof v.rv !== 'number' || typeof v.start !== 'string' || typeof v.issued !== 'number') throw new Error('shape');
      return v;
    } catch {
      throw badRequest(`continue: Invalid value: "${token}": continue key is not valid`);
    }
  }

  private async list(req: http.IncomingMessage, res: http.ServerResponse, q: URLSearchParams, t: Target, neg: Negotiated): Promise<void> {
    const rvParam = q.get('resourceVersion') ?? '';
    const match = q.get('resourceVersionMatch') ?? '';
    const cont = q.get('continue') ?? '';
    const limitRaw = q.get('limit') ?? '';
    const limit = limitRaw === '' ? 0 : Number(limitRaw);
    if (!Number.isInteger(limit) || limit < 0) throw badRequest(`limit: Invalid value: "${limitRaw}": must be a non-negative integer`);
    if (match !== '' && match !== 'Exact' && match !== 'NotOlderThan') throw badRequest(`resourceVersionMatch: Unsupported value: "${match}": supported values: "Exact", "NotOlderThan"`);
    if (match !== '' && rvParam === '') throw badRequest('resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided');
    if (match !== '' && cont !== '') throw badRequest('resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided');
    if (match === 'Exact' && rvParam === '0') throw badRequest('resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"');
    if (cont !== '' && rvParam !== '' && rvParam !== '0') throw badRequest('resourceVersion: Forbidden: specifying resource version is not allowed when using continue');

    let at: number;
    let start = '';
    const current = this.store.currentRv;
    if (cont !== '') {
      const tok = this.decodeContinue(cont);
      if (this.clock.now() - tok.issued > this.continueTtlMs) throw gone('The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.');
      at = tok.rv;
      start = tok.start;
    } else if (rvParam === '' || rvParam === '0') {
      at = current;
    } else {
      const rv = this.parseRv(rvParam);
      const exact = match === 'Exact' || (match === '' && limit > 0);
      await this.waitForRv(rv);
      at = exact ? rv : this.store.currentRv;
    }
    let items: Obj[];
    try {
      items = this.store.listAt(t.def.resource, t.def.namespaced ? t.namespace : undefined, at);
    } catch (err) {
      if (err instanceof GoneError) {
        if (cont !== '') throw gone('The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.');
        throw gone(`The resourceVersion for the provided list is too old. (requested ${at}, oldest ${err.oldest})`);
      }
      throw err;
    }
    const sel = this.selectors(q, t.def);
    const filtered = items.filter((o) => sortKey(o) > start || start === '').filter((o) => matchLabels(sel.labels, o) && matchFields(sel.fields, o));
    const meta: Obj = { resourceVersion: String(at) };
    let page = filtered;
    if (limit > 0 && filtered.length > limit) {
      page = filtered.slice(0, limit);
      const tok: ContinueToken = { rv: at, start: sortKey(page[page.length - 1]!), issued: cont !== '' ? this.decodeContinue(cont).issued : this.clock.now() };
      meta['continue'] = Buffer.from(JSON.stringify(tok)).toString('base64url');
      if (sel.labels.length === 0 && sel.fields.length === 0) meta['remainingItemCount'] = filtered.length - limit;
    }
    let body: Obj | string;
    if (neg.table) body = this.table(t.def.kind, page, meta);
    else if (neg.yaml) body = { kind: `${t.def.kind}List`, apiVersion: apiVersionOf(t.def), metadata: meta, items: page.map(stripTypeMeta) };
    // The same bytes as JSON.stringify of the list, from each item's encoding made once.
    else body = `{"kind":${JSON.stringify(`${t.def.kind}List`)},"apiVersion":${JSON.stringify(apiVersionOf(t.def))},"metadata":${JSON.stringify(meta)},"items":[${page.map(encodeListItem).join(',')}]}`;
    this.send(req, res, 200, body, neg, {}, true);
  }

  private table(kind: string, objs: Obj[], meta: Obj): Obj {
    const now = this.clock.now();
    return {
      kind: 'Table',
      apiVersion: 'meta.k8s.io/v1',
      metadata: meta,
      columnDefinitions: columnsFor(kind, {}, now).columns,
      rows: objs.map((o) => ({
        cells: columnsFor(kind, o, now).cells,
        object: { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: withoutManaged(o['metadata'] ?? {}) },
      })),
    };
  }

  // ---------------------------------------------------------------- watch

  private async watch(req: http.IncomingMessage, res: http.ServerResponse, q: URLSearchParams, t: Target, neg: Negotiated): Promise<void> {
    const rvParam = q.get('resourceVersion') ?? '';
    const match = q.get('resourceVersionMatch') ?? '';
    const sendInitial = q.get('sendInitialEvents') === 'true';
    const bookmarks = q.get('allowWatchBookmarks') === 'true';
    if (q.has('sendInitialEvents') && match !== 'NotOlderThan') throw badRequest('sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to "NotOlderThan"');
    if (match !== '' && !q.has('sendInitialEvents')) throw badRequest('resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided');
    if (match !== '' && match !== 'NotOlderThan') throw badRequest(`resourceVersionMatch: Unsupported value: "${match}"`);
    const sel = this.selectors(q, t.def);
    const nameSel: Requirement[] = t.name !== undefined ? [{ key: 'metadata.name', op: 'eq', value: t.name }] : [];
    const ns = t.def.namespaced ? t.namespace : undefined;
    const matches = (o: Obj | undefined): boolean =>
      o !== undefined && (ns === undefined || o['metadata']?.['namespace'] === ns) && matchLabels(sel.labels, o) && matchFields(sel.fields, o) && matchFields(nameSel, o);

    let initial: Obj[] | undefined;
    let from: number;
    if (sendInitial) {
      if (rvParam !== '' && rvParam !== '0') await this.waitForRv(this.parseRv(rvParam));
      from = this.store.currentRv;
      initial = this.store.list(t.def.resource, ns).filter(matches);
    } else if (rvParam === '' || rvParam === '0') {
      from = this.store.currentRv;
      initial = this.store.list(t.def.resource, ns).filter(matches);
    } else {
      from = this.parseRv(rvParam);
    }
    let backlog: StoreEvent[] = [];
    if (from <= this.store.currentRv) {
      try {
        backlog = this.store.eventsAfter(from);
      } catch (err) {
        if (err instanceof GoneError) throw gone(`too old resource version: ${from} (${err.oldest})`);
        throw err;
      }
    }
    res.writeHead(200, { 'Content-Type': neg.yaml ? 'application/yaml' : 'application/json', 'Transfer-Encoding': 'chunked', 'Cache-Control': 'no-cache, private' });
    res.flushHeaders();
    const render = (o: Obj): Obj => (neg.table ? this.table(t.def.kind, [o], { resourceVersion: o['metadata']?.['resourceVersion'] }) : o);
    const write = (type: string, o: Obj): void => {
      if (!neg.yaml && !neg.table) {
        // The stored object's encoding, made once for every watcher.
        res.write(`{"type":${JSON.stringify(type)},"object":${encodeJson(o)}}\n`);
        return;
      }
      const ev = { type, object: render(o) };
      res.write(neg.yaml ? `---\n${YAML.stringify(ev)}` : `${JSON.stringify(ev)}\n`);
    };
    let lastRv = from;
    const deliver = (ev: StoreEvent): void => {
      if (ev.rv <= lastRv || ev.resource !== t.def.resource) return;
      lastRv = ev.rv;
      const now = ev.type === 'DELETED' ? undefined : ev.object;
      const was = matches(ev.prev);
      const is = matches(now);
      if (ev.type === 'DELETED') {
        if (was) write('DELETED', ev.object);
      } else if (is && !was) write('ADDED', ev.object);
      else if (is && was) write('MODIFIED', ev.object);
      else if (was && !is) write('DELETED', ev.object);
    };
    const bookmark = (annotations?: Record<string, string>): void => {
      write('BOOKMARK', { kind: t.def.kind, apiVersion: apiVersionOf(t.def), metadata: { resourceVersion: String(Math.max(lastRv, from)), ...(annotations ? { annotations } : {}) } });
    };
    for (const o of initial ?? []) write('ADDED', o);
    if (sendInitial && bookmarks) bookmark({ 'k8s.io/initial-events-end': 'true' });
    for (const ev of backlog) deliver(ev);
    const off = this.store.subscribe(deliver);
    const timers: NodeJS.Timeout[] = [];
    if (bookmarks) timers.push(setInterval(() => bookmark(), this.bookmarkMs));
    const timeoutSeconds = Number(q.get('timeoutSeconds') ?? '0');
    let closed = false;
    const watcher: Watcher = {
      res,
      close: () => {
        if (closed) return;
        closed = true;
        off();
        for (const x of timers) clearInterval(x);
        this.watchers.delete(watcher);
        if (!res.writableEnded) res.end();
      },
    };
    if (timeoutSeconds > 0) timers.push(setTimeout(() => watcher.close(), timeoutSeconds * 1000));
    this.watchers.add(watcher);
    res.on('close', () => watcher.close());
  }

  // ---------------------------------------------------------------- bodies

  private dryRun(q: URLSearchParams): boolean {
    const v = q.getAll('dryRun');
    if (v.length === 0) return false;
    for (const x of v) if (x !== 'All') throw badRequest(`dryRun: Unsupported value: "${x}": supported values: "All"`);
    return true;
  }

  private fieldValidation(q: URLSearchParams): 'Ignore' | 'Warn' | 'Strict' {
    const v = q.get('fieldValidation') ?? 'Warn';
    if (v === '') return 'Warn';
    if (v !== 'Ignore' && v !== 'Warn' && v !== 'Strict') throw badRequest(`fieldValidation: Unsupported value: "${v}": supported values: "Ignore", "Strict", "Warn"`);
    return v;
  }

  /** The manager of a write: fieldManager, else the User-Agent up to its first "/" (spec: Headers). */
  private manager(req: http.IncomingMessage, q: URLSearchParams, apply: boolean): string {
    const fm = q.get('fieldManager');
    if (fm !== null && fm !== '') {
      if (fm.length > 128) throw badRequest('fieldManager: Too long: may not be more than 128 bytes');
      return fm;
    }
    if (apply) throw new ApiError(422, 'Invalid', 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch', { group: 'meta.k8s.io', kind: 'PatchOptions', causes: [{ reason: 'FieldValueRequired', message: 'Required value: is required for apply patch', field: 'fieldManager' }] });
    const ua = String(req.headers['user-agent'] ?? '');
    return ua === '' ? 'unknown' : ua.split('/')[0]!.slice(0, 128);
  }

  /**
   * The request body, at most MAX_REQUEST_BODY_BYTES (kube-apiserver's limitedReadBody): one
   * byte more is a 413 before anything is decoded. The rest of such a body is read and
   * dropped until the response is out, then the connection is closed.
   */
  private async readText(req: http.IncomingMessage): Promise<string> {
    return (await this.readBytes(req)).toString('utf8');
  }

  private readBytes(req: http.IncomingMessage): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let over = false;
      req.on('data', (c: Buffer) => {
        if (over) return;
        size += c.length;
        if (size > MAX_REQUEST_BODY_BYTES) {
          over = true;
          chunks.length = 0;
          reject(new ApiError(413, 'RequestEntityTooLarge', `Request entity too large: limit is ${MAX_REQUEST_BODY_BYTES}`, undefined, { Connection: 'close' }));
          return;
        }
        chunks.push(c);
      });
      req.on('end', () => {
        if (!over) resolve(Buffer.concat(chunks));
      });
      req.on('error', reject);
    });
  }

  /**
   * etcd's request limit on a write (limits.ts): over it, the error etcd gives, passed on as
   * kube-apiserver does (500, no reason). Dry runs never reach storage and are not checked.
   */
  private checkStorable(def: ResourceDef, ns: string, name: string, o: Obj): void {
    const key = `/registry/${def.resource}/${def.namespaced ? `${ns}/` : ''}${name}`;
    if (etcdRequestSize(key, apiVersionOf(def), def.kind, o, def.schema) > ETCD_MAX_REQUEST_BYTES) throw new ApiError(500, '', 'etcdserver: request is too large');
  }

  private decodeBody(text: string, contentType: string): { value: unknown; duplicates: string[] } {
    const ct = contentType.split(';')[0]!.trim().toLowerCase();
    try {
      if (ct === 'application/yaml' || ct === 'application/apply-patch+yaml') return parseYamlStrict(text);
      if (ct === 'application/json' || ct === '' || ct === 'application/json-patch+json' || ct === 'application/merge-patch+json' || ct === 'application/strategic-merge-patch+json') return parseJsonStrict(text);
    } catch (err) {
      if (err instanceof DecodeError) throw badRequest(err.message);
      throw err;
    }
    throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json, application/yaml`);
  }

  /** A protobuf body (protobuf.ts); a kind with no protobuf message here is 415, naming it. */
  private decodeProtobufBody(bytes: Buffer): { value: unknown; duplicates: string[] } {
    try {
      return { value: decodeProtobuf(bytes), duplicates: [] };
    } catch (err) {
      if (err instanceof DecodeError) throw badRequest(err.message);
      if (err instanceof ProtobufKindError) {
        throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json, application/yaml; ${PROTOBUF_MEDIA_TYPE} only for ${protobufKinds().join(', ')}, not kind "${err.kind}" in version "${err.apiVersion}"`);
      }
      throw err;
    }
  }

  /**
   * Checks a full object body against the kind's schema: the first wrong type is a 400 at any
   * level; unknown and duplicate fields follow fieldValidation (spec "Field validation").
   */
  private validateFields(def: ResourceDef, value: unknown, duplicates: string[], level: 'Ignore' | 'Warn' | 'Strict'): Record<string, string[]> {
    const report = checkFields(value, def.schema);
    const what = `${def.kind} in version "${def.version}" cannot be handled as a ${def.kind}`;
    if (report.typeError) throw badRequest(`${what}: ${report.typeError}`);
    const problems = [...duplicates.map((d) => `duplicate field "${d}"`), ...report.unknown.map((f) => `unknown field "${f}"`)];
    if (problems.length === 0 || level === 'Ignore') return {};
    if (level === 'Strict') throw badRequest(`${what}: strict decoding error: ${problems.join(', ')}`);
    return { Warning: problems.map((p) => `299 - ${JSON.stringify(p)}`) };
  }

  private async readObject(req: http.IncomingMessage, t: Target, q: URLSearchParams): Promise<{ obj: Obj; warnings: Record<string, string[]> }> {
    const level = this.fieldValidation(q);
    const ct = String(req.headers['content-type'] ?? 'application/json');
    const d = isProtobufContentType(ct) ? this.decodeProtobufBody(await this.readBytes(req)) : this.decodeBody(await this.readText(req), ct);
    if (d.value === null || typeof d.value !== 'object' || Array.isArray(d.value)) throw badRequest(`${t.def.kind} in version "${t.def.version}" cannot be handled as a ${t.def.kind}: body must be an object`);
    const obj = d.value as Obj;
    const av = obj['apiVersion'];
    const kind = obj['kind'];
    if ((av !== undefined && av !== apiVersionOf(t.def)) || (kind !== undefined && kind !== t.def.kind)) {
      throw badRequest(`the API version in the data (${String(av)}) does not match the expected API version (${apiVersionOf(t.def)})${kind !== t.def.kind ? ` or kind (${String(kind)} vs ${t.def.kind})` : ''}`);
    }
    const warnings = this.validateFields(t.def, obj, d.duplicates, level);
    return { obj, warnings };
  }

  // ---------------------------------------------------------------- writes

  private requireNamespace(t: Target, creating: boolean): void {
    if (!t.def.namespaced) return;
    const ns = this.store.get('namespaces', '', t.namespace!);
    if (!ns) throw new ApiError(404, 'NotFound', `namespaces "${t.namespace}" not found`, { name: t.namespace, kind: 'namespaces' });
    if (creating && ns['metadata']['deletionTimestamp']) {
      throw new ApiError(403, 'Forbidden', `${t.def.resource} "${t.name ?? ''}" is forbidden: unable to create new content in namespace ${t.namespace} because it is being terminated`, { name: t.name ?? '', kind: t.def.resource, causes: [{ reason: 'NamespaceTerminating', message: `namespace ${t.namespace} is being terminated`, field: 'metadata.namespace' }] });
    }
  }

  /** Required fields and name checks (422 Invalid). */
  private validateObject(def: ResourceDef, o: Obj): void {
    const name = String(o['metadata']?.['name'] ?? '');
    const causes: Array<{ field: string; message: string }> = [];
    // A CSR's name is only a path segment (ValidateCertificateRequestName): the kubelet's `node-csr-<base64url>` has capitals and `_`.
    if (def.kind === 'CertificateSigningRequest') {
      if (name === '' || name === '.' || name === '..' || /[/%]/.test(name)) causes.push({ field: 'metadata.name', message: `Invalid value: "${name}": may not be '.' or '..' and may not contain '/' or '%'` });
    } else if (!NAME_RE.test(name) || name.length > 253) causes.push({ field: 'metadata.name', message: `Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'` });
    if (def.kind === 'Pod') {
      const cs = o['spec']?.['containers'];
      if (!Array.isArray(cs) || cs.length === 0) causes.push({ field: 'spec.containers', message: 'Required value' });
      else
        cs.forEach((c: Obj, i: number) => {
          if (!c?.['name']) causes.push({ field: `spec.containers[${i}].name`, message: 'Required value' });
          if (!c?.['image']) causes.push({ field: `spec.containers[${i}].image`, message: 'Required value' });
        });
    }
    if (def.kind === 'Event' && !o['involvedObject']) causes.push({ field: 'involvedObject', message: 'Required value' });
    if (causes.length > 0) throw invalid(def, name, causes);
  }

  private ignoredFields(def: ResourceDef, sub: string | undefined): string[][] | undefined {
    if (!def.subresources.includes('status')) return undefined;
    return sub === 'status' ? [['spec']] : [['status']];
  }

  create(t: Target, body: Obj, manager: string, dryRun: boolean): Obj {
    const def = t.def;
    const meta: Obj = { ...(body['metadata'] ?? {}) };
    if (def.namespaced) {
      if (meta['namespace'] !== undefined && meta['namespace'] !== '' && meta['namespace'] !== t.namespace) throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
      meta['namespace'] = t.namespace;
    } else delete meta['namespace'];
    if (!meta['name']) {
      if (!meta['generateName']) throw invalid(def, '', [{ field: 'metadata.name', message: 'Required value: name or generateName is required' }]);
      meta['name'] = `${meta['generateName']}${randomSuffix()}`;
    }
    const name = String(meta['name']);
    const tt: Target = { ...t, name };
    this.requireNamespace(tt, true);
    for (const k of ['uid', 'resourceVersion', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'selfLink']) delete meta[k];
    meta['uid'] = crypto.randomUUID();
    meta['creationTimestamp'] = isoNow(this.clock);
    const obj: Obj = { ...body, apiVersion: apiVersionOf(def), kind: def.kind, metadata: meta };
    if (def.kind === 'Pod') obj['status'] = { phase: 'Pending', ...(obj['status']?.['qosClass'] ? {} : {}) };
    if (def.kind === 'Namespace') {
      obj['spec'] = obj['spec'] ?? {};
      obj['status'] = { phase: 'Active' };
    }
    // Admission sees the name asked for (generateName before a name is made of it).
    if (def.kind === 'Pod' && !this.noSaAdmission) this.sa.admitPod(obj, t.namespace ?? '', String(body['metadata']?.['name'] || body['metadata']?.['generateName'] || 'Unknown'));
    if (def.kind === 'Pod') admitPodRuntimeClass(obj, (n) => this.store.get('runtimeclasses', '', n));
    this.admitCore(def, obj, undefined);
    this.validateObject(def, obj);
    const ec = def.kind === 'Pod' ? ephemeralContainersOnCreate(obj) : undefined;
    if (ec) throw new ApiError(ec.code, ec.reason, ec.message, ec.details);
    if (this.store.get(def.resource, this.nsKey(tt), name)) {
      throw new ApiError(409, 'AlreadyExists', `${def.resource}${def.group ? `.${def.group}` : ''} "${name}" already exists`, { name, group: def.group, kind: def.resource });
    }
    if (def.kind === 'Node' && !dryRun) this.assignPodCIDR(obj, name);
    const managed = recordUpdate({ before: undefined, after: obj, manager, apiVersion: apiVersionOf(def), kind: def.kind, now: isoNow(this.clock), schema: def.schema }) as Obj;
    if (dryRun) return managed;
    try {
      this.checkStorable(def, this.nsKey(tt), name, managed);
    } catch (err) {
      if (def.kind === 'Node' && typeof obj['spec']?.['podCIDR'] === 'string') this.cidrs?.release(name, obj['spec']['podCIDR']);
      throw err;
    }
    return this.store.put(def.resource, this.nsKey(tt), name, managed);
  }

  /**
   * The node IPAM controller's part of a node's creation: a node without spec.podCIDR gets
   * the lowest free block (none when the range is full, as the controller then only
   * reports CIDRNotAvailable); one that brings its own has it recorded.
   */
  private assignPodCIDR(node: Obj, name: string): void {
    if (!this.cidrs) return;
    const spec: Obj = (node['spec'] = node['spec'] ?? {});
    if (typeof spec['podCIDR'] === 'string' && spec['podCIDR'] !== '') {
      this.cidrs.occupy(name, spec['podCIDR']);
      return;
    }
    try {
      const cidr = this.cidrs.allocate(name);
      spec['podCIDR'] = cidr;
      spec['podCIDRs'] = [cidr];
    } catch {
      // Range full: the node stays without a pod CIDR.
    }
  }

  /** Server-owned parts of an update: identity and deletion fields come from the stored object; the other half of a status split is kept. */
  private carryOver(def: ResourceDef, old: Obj, next: Obj, sub: string | undefined): Obj {
    const out = copy(next);
    out['apiVersion'] = apiVersionOf(def);
    out['kind'] = def.kind;
    const m: Obj = { ...(out['metadata'] ?? {}) };
    for (const k of ['uid', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'namespace', 'name']) {
      if (old['metadata'][k] === undefined) delete m[k];
      else m[k] = old['metadata'][k];
    }
    out['metadata'] = m;
    if (def.kind === 'CertificateSigningRequest') {
      const r = csrUpdate(old, out, sub, isoNow(this.clock));
      if ('causes' in r) throw invalid(def, String(m['name'] ?? ''), r.causes);
      return r.obj;
    }
    if (def.kind === 'Pod' && sub === 'ephemeralcontainers') {
      const r = ephemeralContainersUpdate(old, out);
      if ('failure' in r) throw new ApiError(r.failure.code, r.failure.reason, r.failure.message, r.failure.details);
      return r.pod;
    }
    if (def.subresources.includes('status')) {
      if (sub === 'status') {
        const keepMeta = out['metadata'];
        const st = out['status'];
        const r: Obj = copy(old);
        r['metadata'] = { ...old['metadata'], managedFields: keepMeta['managedFields'] };
        if (keepMeta['managedFields'] === undefined) delete r['metadata']['managedFields'];
        if (st === undefined) delete r['status'];
        else r['status'] = st;
        return r;
      }
      if (old['status'] === undefined) delete out['status'];
      else out['status'] = old['status'];
    }
    return out;
  }

  /** Stores a changed object, or removes it when it is terminating and lost its last finalizer (deletion table). */
  private commit(def: ResourceDef, ns: string, name: string, old: Obj, next: Obj, dryRun: boolean): Obj {
    if (deepEqual(withoutRv(old), withoutRv(next))) return old;
    const fin = next['metadata']?.['finalizers'];
    const finalized = next['metadata']?.['deletionTimestamp'] && (!Array.isArray(fin) || fin.length === 0);
    if (dryRun) return next;
    this.checkStorable(def, ns, name, next);
    if (finalized) {
      this.store.put(def.resource, ns, name, next);
      const removed = this.store.remove(def.resource, ns, name)!;
      this.corrupt.delete(`${def.resource}/${ns}/${name}`);
      if (def.namespaced) this.finishNamespace(ns);
      return removed;
    }
    return this.store.put(def.resource, ns, name, next);
  }

  update(t: Target, body: Obj, manager: string, dryRun: boolean): { obj: Obj; created: boolean } {
    const def = t.def;
    const ns = this.nsKey(t);
    const name = t.name!;
    const meta = body['metadata'] ?? {};
    if (meta['name'] !== undefined && meta['name'] !== name) throw badRequest(`the name of the object (${String(meta['name'])}) does not match the name on the URL (${name})`);
    if (def.namespaced && meta['namespace'] !== undefined && meta['namespace'] !== '' && meta['namespace'] !== t.namespace) throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
    this.requireNamespace(t, false);
    const old = this.readable(def, ns, name);
    if (!old) {
      // Spec, Operations note 2: PUT of a missing object is classified as a create.
      if (t.subresource) throw notFound(def, name);
      if (meta['resourceVersion']) throw conflict(def, name, 'the object has been modified; please apply your changes to the latest version and try again');
      return { obj: this.create(t, { ...body, metadata: { ...meta, name } }, manager, dryRun), created: true };
    }
    const rv = meta['resourceVersion'];
    if (rv !== undefined && rv !== '' && rv !== old['metadata']['resourceVersion']) throw conflict(def, name, 'the object has been modified; please apply your changes to the latest version and try again');
    if (meta['uid'] !== undefined && meta['uid'] !== '' && meta['uid'] !== old['metadata']['uid']) throw conflict(def, name, `Precondition failed: UID in precondition: ${String(meta['uid'])}, UID in object meta: ${String(old['metadata']['uid'])}`);
    const next = this.carryOver(def, old, body, t.subresource);
    this.admitCore(def, next, old);
    this.validateObject(def, next);
    const managed = recordUpdate({ before: old, after: next, manager, apiVersion: apiVersionOf(def), kind: def.kind, now: isoNow(this.clock), schema: def.schema, ...(t.subresource ? { subresource: t.subresource } : {}) }) as Obj;
    return { obj: this.commit(def, ns, name, old, managed, dryRun), created: false };
  }

  private async patch(req: http.IncomingMessage, q: URLSearchParams, t: Target, dryRun: boolean): Promise<{ obj: Obj; created: boolean; warnings: Record<string, string[]> }> {
    const def = t.def;
    const ns = this.nsKey(t);
    const name = t.name!;
    const ct = String(req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    const isApply = ct === 'application/apply-patch+yaml';
    const known = ['application/json-patch+json', 'application/merge-patch+json', 'application/strategic-merge-patch+json'];
    if (!isApply && !known.includes(ct)) throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: ${[...known, 'application/apply-patch+yaml'].join(', ')}`);
    const level = this.fieldValidation(q);
    const forceRaw = q.get('force');
    if (forceRaw !== null && !isApply) throw new ApiError(422, 'Invalid', 'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch', { group: 'meta.k8s.io', kind: 'PatchOptions', causes: [{ reason: 'FieldValueForbidden', message: 'Forbidden: may not be specified for non-apply patch', field: 'force' }] });
    const manager = this.manager(req, q, isApply);
    const text = await this.readText(req);
    const d = this.decodeBody(text, ct);
    this.requireNamespace(t, false);
    const old = this.readable(def, ns, name);
    const now = isoNow(this.clock);
    const sub = t.subresource ? { subresource: t.subresource } : {};
    const ignoredFields = this.ignoredFields(def, t.subresource);

    if (isApply) {
      if (d.value === null || typeof d.value !== 'object' || Array.isArray(d.value)) throw badRequest('apply patch must be an object');
      const applied = d.value as Obj;
      const warnings = this.validateFields(def, applied, d.duplicates, level);
      const am = applied['metadata'] ?? {};
      if (am['name'] !== undefined && am['name'] !== name) throw badRequest(`the name of the object (${String(am['name'])}) does not match the name on the URL (${name})`);
      if (def.namespaced && am['namespace'] !== undefined && am['namespace'] !== t.namespace) throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
      if (applied['apiVersion'] === undefined || applied['kind'] === undefined) throw badRequest('apiVersion and kind must be set in an apply patch');
      if (old && am['resourceVersion'] !== undefined && am['resourceVersion'] !== old['metadata']['resourceVersion']) throw conflict(def, name, 'the object has been modified; please apply your changes to the latest version and try again');
      if (!old && t.subresource) throw notFound(def, name);
      const force = forceRaw === 'true';
      let result: Obj;
      try {
        result = applyObject({ live: old, applied, manager, force, apiVersion: apiVersionOf(def), kind: def.kind, now, schema: def.schema, ...sub, ...(ignoredFields ? { ignoredFields } : {}) }) as Obj;
      } catch (err) {
        if (err instanceof ApplyConflictError) {
          throw new ApiError(409, 'Conflict', err.message, { causes: err.conflicts.map((c) => ({ reason: 'FieldManagerConflict', message: c.message, field: c.field })) });
        }
        if (err instanceof ApplyInvalidError) throw new ApiError(422, 'Invalid', `${def.kind} "${name}" is invalid: ${err.message}`, { name, kind: def.kind, causes: [{ reason: 'FieldValueInvalid', message: err.message, field: String(err.details?.['field'] ?? '') }] });
        throw err;
      }
      if (!old) {
        const created = this.create({ ...t, name: undefined } as Target, { ...result, metadata: { ...result['metadata'], name } }, manager, true);
        // create() recorded an Update entry; the apply's entries stand instead.
        created['metadata']['managedFields'] = result['metadata']['managedFields'];
        if (dryRun) return { obj: created, created: true, warnings };
        this.checkStorable(def, ns, name, created);
        if (def.kind === 'Node') this.assignPodCIDR(created, name);
        return { obj: this.store.put(def.resource, ns, name, created), created: true, warnings };
      }
      const next = this.carryOver(def, old, result, t.subresource);
      this.admitCore(def, next, old);
      next['metadata']['managedFields'] = result['metadata']['managedFields'];
      this.validateObject(def, next);
      return { obj: this.commit(def, ns, name, old, next, dryRun), created: false, warnings };
    }

    if (!old) throw notFound(def, name);
    let patched: unknown;
    try {
      if (ct === 'application/json-patch+json') patched = applyJsonPatch(old, d.value);
      else if (ct === 'application/merge-patch+json') patched = applyMergePatch(old, d.value);
      else patched = applyStrategicMergePatch(old, d.value, def.schema);
    } catch (err) {
      if (err instanceof PatchError) {
        if (err.status === 422) throw new ApiError(422, 'Invalid', `the server rejected our request due to an error in our request: ${err.message}`);
        throw badRequest(err.message);
      }
      throw err;
    }
    if (patched === null || typeof patched !== 'object' || Array.isArray(patched)) throw badRequest('the patched document is not an object');
    const p = patched as Obj;
    const warnings = this.validateFields(def, p, d.duplicates, level);
    const rv = p['metadata']?.['resourceVersion'];
    if (rv !== undefined && rv !== old['metadata']['resourceVersion']) throw conflict(def, name, 'the object has been modified; please apply your changes to the latest version and try again');
    if (p['metadata']?.['uid'] !== undefined && p['metadata']['uid'] !== old['metadata']['uid']) throw conflict(def, name, 'Precondition failed: UID in precondition does not match');
    const next = this.carryOver(def, old, p, t.subresource);
    this.admitCore(def, next, old);
    this.validateObject(def, next);
    const managed = recordUpdate({ before: old, after: next, manager, apiVersion: apiVersionOf(def), kind: def.kind, now, schema: def.schema, ...sub }) as Obj;
    return { obj: this.commit(def, ns, name, old, managed, dryRun), created: false, warnings };
  }

  // ---------------------------------------------------------------- deletion

  private async deleteOptions(req: http.IncomingMessage, q: URLSearchParams): Promise<Obj> {
    const text = (await this.readText(req)).trim();
    let opts: Obj = {};
    if (text !== '') {
      const d = this.decodeBody(text, String(req.headers['content-type'] ?? 'application/json'));
      if (d.value === null || typeof d.value !== 'object' || Array.isArray(d.value)) throw badRequest('DeleteOptions must be an object');
      opts = d.value as Obj;
    }
    if (q.has('gracePeriodSeconds')) opts['gracePeriodSeconds'] = Number(q.get('gracePeriodSeconds'));
    if (q.has('propagationPolicy')) opts['propagationPolicy'] = q.get('propagationPolicy');
    if (q.has('orphanDependents')) opts['orphanDependents'] = q.get('orphanDependents') === 'true';
    if (q.has('dryRun')) opts['dryRun'] = q.getAll('dryRun');
    if (q.has('ignoreStoreReadErrorWithClusterBreakingPotential')) opts['ignoreStoreReadErrorWithClusterBreakingPotential'] = q.get('ignoreStoreReadErrorWithClusterBreakingPotential') === 'true';
    validateDeleteOptions(opts);
    return opts;
  }

  delete(t: Target, name: string, opts: Obj): Obj {
    const def = t.def;
    const ns = this.nsKey(t);
    const dryRun = Array.isArray(opts['dryRun']) ? opts['dryRun'].includes('All') : opts['dryRun'] === 'All';
    const unsafe = opts['ignoreStoreReadErrorWithClusterBreakingPotential'] === true;
    const ckey = `${def.resource}/${ns}/${name}`;
    const stored = this.store.get(def.resource, ns, name);
    if (!stored) throw notFound(def, name);
    if (unsafe) {
      if (!this.corrupt.has(ckey)) throw badRequest(`ignoreStoreReadErrorWithClusterBreakingPotential: Invalid value: true: is exclusively meant to delete corrupt objects with unsafe deletion; ${def.resource} "${name}" can be read normally`);
      // Unreadable object: removed at once, finalizers and preconditions ignored.
      this.corrupt.delete(ckey);
      const removed = this.store.remove(def.resource, ns, name)!;
      if (def.namespaced) this.finishNamespace(ns);
      return removed;
    }
    const old = this.readable(def, ns, name)!;
    const pre = opts['preconditions'] ?? {};
    if (pre['uid'] !== undefined && pre['uid'] !== old['metadata']['uid']) throw conflict(def, name, `Precondition failed: UID in precondition: ${String(pre['uid'])}, UID in object meta: ${String(old['metadata']['uid'])}`);
    if (pre['resourceVersion'] !== undefined && pre['resourceVersion'] !== old['metadata']['resourceVersion']) throw conflict(def, name, `Precondition failed: ResourceVersion in precondition: ${String(pre['resourceVersion'])}, ResourceVersion in object meta: ${String(old['metadata']['resourceVersion'])}`);
    const fin = old['metadata']['finalizers'];
    const hasFinalizers = Array.isArray(fin) && fin.length > 0;
    if (def.kind === 'Namespace') return this.deleteNamespace(old, dryRun);
    if (!hasFinalizers) {
      if (dryRun) return old;
      const removed = this.store.remove(def.resource, ns, name)!;
      if (def.namespaced) this.finishNamespace(ns);
      return removed;
    }
    if (old['metadata']['deletionTimestamp']) return old;
    const next = copy(old);
    next['metadata']['deletionTimestamp'] = isoNow(this.clock);
    next['metadata']['deletionGracePeriodSeconds'] = 0;
    if (dryRun) return next;
    return this.store.put(def.resource, ns, name, next);
  }

  /** Namespace deletion: terminating, its contents deleted (each by the deletion rules), removed once empty and unfinalized. */
  private deleteNamespace(old: Obj, dryRun: boolean): Obj {
    const name = old['metadata']['name'] as string;
    if (dryRun) {
      const n = copy(old);
      n['metadata']['deletionTimestamp'] = n['metadata']['deletionTimestamp'] ?? isoNow(this.clock);
      n['status'] = { ...(n['status'] ?? {}), phase: 'Terminating' };
      return n;
    }
    let current = old;
    if (!old['metadata']['deletionTimestamp']) {
      const n = copy(old);
      n['metadata']['deletionTimestamp'] = isoNow(this.clock);
      n['metadata']['deletionGracePeriodSeconds'] = 0;
      n['status'] = { ...(n['status'] ?? {}), phase: 'Terminating' };
      current = this.store.put('namespaces', '', name, n);
    }
    for (const def of RESOURCES.filter((r) => r.namespaced && !r.virtual)) {
      for (const o of this.store.list(def.resource, name)) {
        const t: Target = { def, namespace: name, name: o['metadata']['name'] };
        if (this.corrupt.has(`${def.resource}/${name}/${o['metadata']['name']}`)) continue;
        this.delete(t, o['metadata']['name'], {});
      }
    }
    return this.finishNamespace(name) ?? current;
  }

  /** Removes a terminating namespace once nothing is left in it and it has no finalizers; returns the final state. */
  private finishNamespace(name: string): Obj | undefined {
    const ns = this.store.get('namespaces', '', name);
    if (!ns || !ns['metadata']['deletionTimestamp']) return undefined;
    for (const def of RESOURCES.filter((r) => r.namespaced && !r.virtual)) if (this.store.list(def.resource, name).length > 0) return ns;
    const fin = ns['metadata']['finalizers'];
    if (Array.isArray(fin) && fin.length > 0) return ns;
    return this.store.remove('namespaces', '', name);
  }

  private deleteCollection(q: URLSearchParams, t: Target, opts: Obj): Obj {
    const sel = this.selectors(q, t.def);
    const ns = t.def.namespaced ? t.namespace : undefined;
    const items: Obj[] = [];
    for (const o of this.store.list(t.def.resource, ns)) {
      if (!matchLabels(sel.labels, o) || !matchFields(sel.fields, o)) continue;
      const tt: Target = { def: t.def, namespace: o['metadata']['namespace'], name: o['metadata']['name'] };
      items.push(this.delete(tt, o['metadata']['name'], opts));
    }
    return { kind: `${t.def.kind}List`, apiVersion: apiVersionOf(t.def), metadata: { resourceVersion: String(this.store.currentRv) }, items: items.map(stripTypeMeta) };
  }

  // ---------------------------------------------------------------- virtual

  private review(def: ResourceDef, body: Obj): Obj {
    const spec = body['spec'] ?? {};
    const out: Obj = { apiVersion: apiVersionOf(def), kind: def.kind, metadata: { creationTimestamp: null }, spec };
    if (def.kind === 'TokenReview') {
      const jwt = typeof spec['token'] === 'string' && !this.tokens.has(spec['token']) ? this.sa.validate(spec['token'], Array.isArray(spec['audiences']) ? spec['audiences'].map(String) : []) : undefined;
      if (jwt !== undefined) {
        out['status'] = 'error' in jwt ? { user: {}, error: jwt.error } : { authenticated: true, user: { username: jwt.identity.user, uid: jwt.identity.uid, groups: jwt.identity.groups, extra: jwt.identity.extra }, audiences: jwt.audiences };
        return out;
      }
      const who = typeof spec['token'] === 'string' ? this.tokens.get(spec['token']) : undefined;
      out['status'] = who ? { authenticated: true, user: { username: who.user, groups: who.groups } } : { user: {}, error: 'invalid bearer token' };
      return out;
    }
    const ra = spec['resourceAttributes'];
    const nra = spec['nonResourceAttributes'];
    const attrs: AccessAttributes = { user: String(spec['user'] ?? ''), groups: Array.isArray(spec['groups']) ? spec['groups'].map(String) : [], verb: String(ra?.['verb'] ?? nra?.['verb'] ?? '') };
    if (ra) {
      for (const k of ['resource', 'subresource', 'name', 'namespace'] as const) if (typeof ra[k] === 'string' && ra[k] !== '') attrs[k] = ra[k];
    } else if (nra && typeof nra['path'] === 'string') attrs.path = nra['path'];
    const d = this.rules(attrs);
    out['status'] = { allowed: d.allowed, ...(d.allowed ? {} : { denied: false }), ...(d.reason ? { reason: d.reason } : {}) };
    return out;
  }

  // ---------------------------------------------------------------- service accounts, node access (issue 27)

  initServiceAccounts(caPem: string): void {
    const kubernetesServiceIp = this.serviceRange.first;
    this.sa = new ServiceAccounts({
      store: this.store,
      clock: this.clock,
      caPem,
      kubernetesServiceIp,
      ...(this.maxTokenSeconds !== undefined ? { maxTokenSeconds: this.maxTokenSeconds } : {}),
      create: (resource, namespace, body) => {
        const def = RESOURCES.find((r) => r.group === '' && r.resource === resource)!;
        this.create({ def, namespace }, body, 'kube-controller-manager', false);
      },
    });
  }

  private serviceAccountCaller(token: string): Caller | undefined {
    const v = this.sa.validate(token, []);
    return v !== undefined && !('error' in v) ? { user: v.identity.user, groups: v.identity.groups } : undefined;
  }

  /** The strategy of a ConfigMap, Secret, ServiceAccount or Service write (core-objects.ts). */
  private admitCore(def: ResourceDef, o: Obj, old: Obj | undefined): void {
    if (def.kind === 'RuntimeClass') admitRuntimeClass(o, old);
    if (def.group !== '') return;
    admitCoreWrite(def.kind, o, old, {
      serviceRange: this.serviceRange,
      usedServiceIps: () => new Set(this.store.list('services').map((s) => String(s['spec']?.['clusterIP'] ?? '')).filter((ip) => ip !== '' && ip !== 'None')),
    });
  }

  /** The Node authorizer on node proxy and pod exec/attach/log/port-forward: nodes have none of them. */
  private authorizeNodePath(p: string, method: string, caller: Caller): void {
    const node = nodeIdentity(caller.user, caller.groups);
    if (node === undefined) return;
    const m = /^\/api\/v1\/(?:namespaces\/([^/]+)\/)?(pods|nodes)\/([^/]+)\/([^/]+)/.exec(p);
    if (!m || !(NODE_PROXY_PATH.test(p) || POD_SUBRESOURCE_PATH.test(p))) return;
    const a: Attributes = { user: caller.user, verb: requestVerb(method, true, false), group: '', resource: m[2]!, subresource: m[4]!, namespace: m[1] ?? '', name: m[3]!, fieldEquals: [] };
    const d = authorizeNode(this.store, node, a);
    if (!d.allowed) throw forbiddenRequest(a, d.reason);
  }

  /** The Node authorizer for a node caller's resource request (other callers: full access, no RBAC here). */
  private authorizeNodeRequest(t: Target, method: string, q: URLSearchParams, caller: Caller): void {
    const node = nodeIdentity(caller.user, caller.groups);
    if (node === undefined) return;
    const watch = method === 'GET' && q.has('watch') && ['', 'true', '1'].includes(q.get('watch')!);
    const a: Attributes = {
      user: caller.user,
      verb: requestVerb(method, t.name !== undefined, watch),
      group: t.def.group,
      resource: t.def.resource,
      subresource: t.subresource ?? '',
      namespace: t.def.namespaced ? (t.namespace ?? '') : '',
      name: t.name ?? '',
      fieldEquals: fieldEquals(q.get('fieldSelector') ?? ''),
    };
    if (a.name === '' && (a.verb === 'list' || a.verb === 'watch')) a.name = a.fieldEquals.find((f) => f.field === 'metadata.name')?.value ?? '';
    const d = authorizeNode(this.store, node, a);
    if (!d.allowed) throw forbiddenRequest(a, d.reason);
  }

  /** NodeRestriction admission for a node caller's write (after the ServiceAccount plugin's mirror-pod checks, as upstream orders them). */
  private admitNode(caller: Caller, operation: 'create' | 'update' | 'delete', t: Target, object?: Obj): void {
    const node = nodeIdentity(caller.user, caller.groups);
    if (node === undefined) return;
    if (operation === 'create' && t.def.kind === 'Pod' && object && !this.noSaAdmission) this.sa.admitPod(copy(object), t.namespace ?? '');
    admitNodeRequest(this.store, node, { operation, group: t.def.group, resource: t.def.resource, subresource: t.subresource ?? '', namespace: t.namespace ?? '', name: t.name ?? '', ...(object ? { object } : {}) });
  }

  /** POST .../serviceaccounts/<name>/token (TokenRequest); JSON, YAML or protobuf bodies. */
  private async tokenRequest(req: http.IncomingMessage, res: http.ServerResponse, t: Target, method: string, caller: Caller, neg: Negotiated): Promise<void> {
    if (method !== 'POST' || t.name === undefined) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
    const ct = String(req.headers['content-type'] ?? 'application/json');
    const d = isProtobufContentType(ct) ? this.decodeProtobufBody(await this.readBytes(req)) : this.decodeBody(await this.readText(req), ct);
    const body = d.value !== null && typeof d.value === 'object' && !Array.isArray(d.value) ? (d.value as Obj) : undefined;
    this.requireNamespace(t, false);
    this.admitNode(caller, 'create', t, body);
    this.send(req, res, 201, this.sa.tokenRequest(t.namespace ?? '', t.name, d.value), neg);
  }

  // ---------------------------------------------------------------- lifecycle

  syncNodeLifecycle(): void {
    const now = this.clock.now();
    const def = findResource('', 'v1', 'nodes')!;
    for (const node of this.store.list('nodes')) {
      const name = node['metadata']['name'] as string;
      const lease = this.store.get('leases', 'kube-node-lease', name);
      const next = nodeLifecycle(node, lease, now, this.graceMs);
      if (!next) continue;
      const managed = recordUpdate({ before: node, after: next, manager: 'node-controller', apiVersion: 'v1', kind: 'Node', now: isoNow(this.clock), schema: def.schema }) as Obj;
      this.store.put('nodes', '', name, managed);
    }
  }
}

function withoutManaged(meta: Obj): Obj {
  const m = { ...meta };
  delete m['managedFields'];
  return m;
}

function stripTypeMeta(o: Obj): Obj {
  const c: Obj = {};
  for (const [k, v] of Object.entries(o)) if (k !== 'apiVersion' && k !== 'kind' && v !== undefined) c[k] = v;
  return c;
}

/** DeleteOptions validation (spec: Delete options table). Throws a 400 naming the field. */
export function validateDeleteOptions(opts: Obj): void {
  const dr = opts['dryRun'];
  const drList = dr === undefined ? [] : Array.isArray(dr) ? dr : [dr];
  for (const v of drList) if (v !== 'All') throw badRequest(`dryRun: Unsupported value: "${String(v)}": supported values: "All"`);
  const gp = opts['gracePeriodSeconds'];
  if (gp !== undefined && gp !== null && (!Number.isInteger(gp) || gp < 0)) throw badRequest(`gracePeriodSeconds: Invalid value: ${String(gp)}: must be a non-negative integer`);
  const pp = opts['propagationPolicy'];
  if (pp !== undefined && pp !== null && !['Orphan', 'Background', 'Foreground'].includes(pp)) throw badRequest(`propagationPolicy: Unsupported value: "${String(pp)}": supported values: "Foreground", "Background", "Orphan"`);
  if (opts['orphanDependents'] !== undefined && opts['orphanDependents'] !== null && pp !== undefined && pp !== null) throw badRequest('propagationPolicy: Invalid value: both orphanDependents and propagationPolicy may not be set');
  if (opts['ignoreStoreReadErrorWithClusterBreakingPotential'] === true) {
    for (const f of ['dryRun', 'gracePeriodSeconds', 'orphanDependents', 'preconditions', 'propagationPolicy']) {
      const v = opts[f];
      if (v !== undefined && v !== null && !(Array.isArray(v) && v.length === 0)) throw badRequest(`${f}: Invalid value: must not be set when ignoreStoreReadErrorWithClusterBreakingPotential is true`);
    }
  }
}

// ------------------------------------------------------------------ start

function kubeconfigYaml(cp: { url: string; caFile: string }, user: Obj): string {
  return YAML.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'test-control-plane', cluster: { server: cp.url, 'certificate-authority': cp.caFile } }],
    users: [{ name: 'test-user', user }],
    contexts: [{ name: 'test', context: { cluster: 'test-control-plane', user: 'test-user', namespace: 'default' } }],
    'current-context': 'test',
    preferences: {},
  });
}

export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const pkiDir = opts.pkiDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-cp-'));
  const pki = new Pki(pkiDir);
  const server = new Server(opts);
  setNodeProxyPki(server.store, pki);
  setPodSubresourcesPki(server.store, pki);
  server.initServiceAccounts(fs.readFileSync(pki.caFile, 'utf8'));
  const stopCsrControllers = startCsrControllers({ store: server.store, clock: server.clock, caFile: pki.caFile, caKeyFile: pki.caKeyFile, ...(opts.csrSigningDurationMs !== undefined ? { signingDurationMs: opts.csrSigningDurationMs } : {}) });
  const ca = fs.readFileSync(pki.caFile);
  const httpsServer = https.createServer(
    { key: fs.readFileSync(pki.serverKeyFile), cert: fs.readFileSync(pki.serverCertFile), ca, requestCert: true, rejectUnauthorized: false },
    (req, res) => {
      if (injectFault(req, res)) return; // test/faults: rules a test added (none by default)
      void server.handle(req, res);
    },
  );
  // The kube-apiserver keeps an idle connection 90 s (secure_serving.go IdleTimeout, "matches
  // http.DefaultTransport keep-alive timeout"); Node's default 5 s closed each client's
  // connection between two Lease renewals (10 s), so every renewal paid a new TLS handshake.
  httpsServer.keepAliveTimeout = 90_000;
  httpsServer.on('upgrade', (req, socket, head) => upgradePodSubresource(req, socket, head, server.store, (r) => server['authenticate'](r) !== undefined));
  const host = opts.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    httpsServer.once('error', reject);
    httpsServer.listen(opts.port ?? 0, host, () => resolve());
  });
  const addr = httpsServer.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  const url = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  server.url = url;
  server.sa.start(port);
  const intervalMs = opts.nodeLifecycleIntervalMs ?? 1000;
  const lifecycleTimer = intervalMs > 0 ? setInterval(() => server.syncNodeLifecycle(), intervalMs) : undefined;
  lifecycleTimer?.unref();
  const cp: ControlPlane = {
    url,
    caFile: pki.caFile,
    issueClientCert: (user, groups = []) => pki.issueClient(user, groups),
    addToken: (token, user, groups = []) => server.addToken(token, user, groups),
    writeKubeconfig(file, auth) {
      let user: Obj;
      if ('token' in auth) user = { token: auth.token };
      else {
        const c = pki.issueClient(auth.user, auth.groups ?? []);
        user = { 'client-certificate': c.certFile, 'client-key': c.keyFile };
      }
      fs.writeFileSync(file, kubeconfigYaml({ url, caFile: pki.caFile }, user), { mode: 0o600 });
    },
    setAccessRules: (fn) => server.setRules(fn),
    dropWatches: () => server.dropWatches(),
    compactHistory: () => server.store.compact(),
    syncNodeLifecycle: () => server.syncNodeLifecycle(),
    corruptObject: (resource, namespace, name) => server.markCorrupt(resource, namespace, name),
    get openWatches() {
      return server.openWatches;
    },
    async close() {
      if (lifecycleTimer) clearInterval(lifecycleTimer);
      server.sa.stop();
      stopCsrControllers();
      server.dropWatches();
      closePodSubresourceSessions(server.store);
      await new Promise<void>((resolve) => {
        httpsServer.close(() => resolve());
        httpsServer.closeAllConnections();
      });
      if (opts.pkiDir === undefined) fs.rmSync(pkiDir, { recursive: true, force: true });
    },
  };
  return cp;
}
