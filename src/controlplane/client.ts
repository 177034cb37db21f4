/**
 * nodelet's HTTPS client of the control plane. One `node:https` Agent (keep-alive, TLS from
 * the kubeconfig) per client: Node's own HTTP/1.1 client, already loaded by the servers
 * (undici, used before, cost ~18 MB of resident memory for its modules alone). Every request
 * sends `User-Agent: nodelet/<version>` and `Accept-Encoding: gzip` and decompresses the answer. Each call has a deadline
 * (`timeoutMs`, default 30 s) and honours the caller's AbortSignal; a watch has no
 * deadline (the reflector keeps its own inactivity timer). Every failure is a NodeletError
 * from errors.ts. The client does not retry (retries live in loops: reflector,
 * retryOnConflict), but for one case: with a credential plugin (kubeconfig `exec`,
 * exec-credential.ts), a 401 runs the plugin again and the request is sent once more.
 *
 * Every answer is bounded as it is read, decompressed bytes counted (BODY_LIMITS): a body
 * past its bound is abandoned (its connection destroyed) with an error naming the request,
 * the resource and the bound. Each request first takes a token from the client's rate
 * limiter (client-go's token bucket, src/controlplane/rate-limit.ts; none by default).
 */
import http, { type IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import type { Readable } from 'node:stream';
import zlib from 'node:zlib';
import { NodeletError } from '../errors.js';
import { VERSION } from '../version.js';
import { decodeStatus, transportError } from './errors.js';
import { sharedExecCredentials, type Credential, type CredentialSource } from './exec-credential.js';
import type { ClusterAccess } from './kubeconfig.js';
import { noLimit, type RateLimiter } from './rate-limit.js';

const MiB = 1024 * 1024;

/**
 * The most one answer may hold, decompressed. etcd refuses a request over 1.5 MiB (its
 * `--max-request-bytes` default), so no stored object is larger in its protobuf form; the
 * API server takes JSON request bodies up to twice that (`MaxRequestBodyBytes`, 3 MiB) for
 * the same object. An object (a GET, a write's answer, a review, a Status) may therefore
 * take 4 MiB, and one watch event (the object in a `{"type":..,"object":..}` envelope) the
 * same. A list page holds up to `limit` objects: 8 MiB, two maximal objects or ~100 pods of
 * 80 KiB; a page over it is asked again with half the `limit` (listAll), down to one
 * object a page, so a list of legal objects can always be read while no answer costs more
 * than 8 MiB. A compressed body is counted as it is expanded.
 */
export const BODY_LIMITS = Object.freeze({ object: 4 * MiB, listPage: 8 * MiB, watchEvent: 4 * MiB });

/** What a bound applies to, for its error message. */
type BodyKind = 'object' | 'list page' | 'watch event';

/** `8 MiB`, `512 KiB`, `100 bytes`. */
function formatBytes(n: number): string {
  if (n >= MiB && n % (MiB / 4) === 0) return `${n / MiB} MiB`;
  if (n >= 1024 && n % 1024 === 0) return `${n / 1024} KiB`;
  return `${n} bytes`;
}

/**
 * An answer past its bound: UNAVAILABLE (the server misbehaves; a later try may do better),
 * details `reason: 'TooLarge'`, the resource, the bound and the HTTP status (so it never
 * counts as a server that did not answer, errors.ts unanswered).
 */
export function tooLargeError(c: { method: string; path: string; resource: string; kind: BodyKind; limitBytes: number; status: number }): NodeletError {
  const what = c.kind === 'object' ? `the answer (${c.resource})` : `a ${c.kind} of ${c.resource}`;
  return new NodeletError(
    'UNAVAILABLE',
    `${c.method} ${c.path}: ${what} is larger than ${formatBytes(c.limitBytes)}, nodelet's bound for ${c.kind === 'object' ? 'one object' : `a ${c.kind}`}; the rest was not read`,
    { status: c.status, reason: 'TooLarge', method: c.method, path: c.path, resource: c.resource, kind: c.kind, limitBytes: c.limitBytes },
  );
}

export function isTooLarge(err: unknown): err is NodeletError {
  return err instanceof NodeletError && err.details.reason === 'TooLarge';
}

/** Where a resource type lives: core (`group` '') or a named API group; namespaced or cluster-scoped. */
export interface ResourceType {
  group: string;
  version: string;
  resource: string;
  namespaced: boolean;
}

export const NAMESPACES: ResourceType = { group: '', version: 'v1', resource: 'namespaces', namespaced: false };
export const NODES: ResourceType = { group: '', version: 'v1', resource: 'nodes', namespaced: false };
export const PODS: ResourceType = { group: '', version: 'v1', resource: 'pods', namespaced: true };
export const EVENTS: ResourceType = { group: '', version: 'v1', resource: 'events', namespaced: true };
export const LEASES: ResourceType = { group: 'coordination.k8s.io', version: 'v1', resource: 'leases', namespaced: true };

export interface ObjectRef {
  namespace?: string;
  name?: string;
  subresource?: string;
}

/**
 * The spec's path table: `/api/v1` or `/apis/<group>/<version>`, then for a namespaced type
 * `namespaces/<ns>/` (omitted: across all namespaces), the type, the name, the subresource.
 */
export function resourcePath(t: ResourceType, ref: ObjectRef = {}): string {
  let p = t.group ? `/apis/${t.group}/${t.version}` : `/api/${t.version}`;
  if (t.namespaced && ref.namespace) p += `/namespaces/${encodeURIComponent(ref.namespace)}`;
  if (!t.namespaced && ref.namespace) throw new NodeletError('INVALID_ARGUMENT', `${t.resource} is cluster-scoped: no namespace allowed (got "${ref.namespace}")`);
  p += `/${t.resource}`;
  if (ref.name !== undefined) {
    if (!ref.name) throw new NodeletError('INVALID_ARGUMENT', `${t.resource}: empty name`);
    p += `/${encodeURIComponent(ref.name)}`;
  }
  if (ref.subresource) {
    if (ref.name === undefined) throw new NodeletError('INVALID_ARGUMENT', `${t.resource}: subresource "${ref.subresource}" needs a name`);
    p += `/${ref.subresource}`;
  }
  return p;
}

/** The least the client needs of an object; kubernetes-types objects (Pod, Node, Lease) fit. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; uid?: string };
}

export interface ListResult<T> {
  apiVersion?: string;
  kind?: string;
  metadata: { resourceVersion: string; continue?: string; remainingItemCount?: number };
  items: T[];
}

export interface WatchEvent<T = KubeObject> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

export interface CallOptions {
  /** Deadline of this call (default the client's). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface ListOptions extends CallOptions {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  continue?: string;
  resourceVersion?: string;
  resourceVersionMatch?: 'Exact' | 'NotOlderThan';
}

export interface WatchOptions {
  namespace?: string;
  name?: string;
  labelSelector?: string;
  fieldSelector?: string;
  resourceVersion?: string;
  allowWatchBookmarks?: boolean;
  signal?: AbortSignal;
}

export interface WriteOptions extends CallOptions {
  subresource?: string;
  fieldManager?: string;
  dryRun?: boolean;
}

export interface DeleteOptions extends CallOptions {
  /** Body: DeleteOptions (propagationPolicy, preconditions, gracePeriodSeconds, ...). */
  body?: Record<string, unknown>;
}

export interface ClientOptions {
  access: ClusterAccess;
  /** Default deadline of a call (default 30 s). */
  timeoutMs?: number;
  /** Version in the User-Agent (default src/version.ts, kept equal to package.json). */
  version?: string;
  /** Connections per origin (default 8). */
  connections?: number;
  /**
   * Taken once before every request, watches included (client-go's `rest.Config` QPS and
   * Burst: `clientGoLimit` in rate-limit.ts). Default: no limit.
   */
  limiter?: RateLimiter;
  /** Bounds of the answers (default BODY_LIMITS; tests use smaller ones). */
  bodyLimits?: Partial<typeof BODY_LIMITS>;
  /**
   * Where each request's credential comes from when the kubeconfig's user is a credential
   * plugin (default: the plugin shared by every client of `access.exec`).
   */
  credentials?: CredentialSource;
}

type Query = Record<string, string | number | boolean | undefined>;

type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** An answer: status, headers and the body still to read. */
interface Answer {
  statusCode: number;
  headers: IncomingHttpHeaders;
  body: Readable;
}

interface Req {
  method: HttpMethod;
  path: string;
  /** The resource, for the error when the answer is too large (default: the path's last segment). */
  resource?: string;
  /** What the answer is: an object (default) or a list page. */
  kind?: 'object' | 'list page';
  query?: Query;
  body?: unknown;
  contentType?: string;
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

const PATCH_TYPES = { merge: 'application/merge-patch+json', strategic: 'application/strategic-merge-patch+json', json: 'application/json-patch+json' } as const;

/**
 * Observers of every request's outcome (`rest_client_requests_total`): HTTP status code or
 * `<error>` when no answer came, method, and host:port, as client-go reports them. Process-wide
 * like client-go's metrics, so the composition root can count the requests of a client built
 * before it. Returns the unsubscribe. Observers must not throw.
 */
export type RequestObserver = (code: string, method: string, host: string) => void;
const requestObservers = new Set<RequestObserver>();
export function observeControlPlaneRequests(fn: RequestObserver): () => void {
  requestObservers.add(fn);
  return () => requestObservers.delete(fn);
}

/** The field manager nodelet writes as. */
export const FIELD_MANAGER = 'nodelet';

export class ControlPlaneClient {
  readonly server: string;
  readonly namespace: string;
  #agent: http.Agent;
  #agentOptions: https.AgentOptions;
  readonly #http: typeof http | typeof https;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;
  readonly #host: string;
  readonly #limiter: RateLimiter;
  readonly #limits: typeof BODY_LIMITS;
  readonly #credentials: CredentialSource | undefined;
  /** The client certificate of the plugin's credential the pool presents, to notice a new one. */
  #pluginCert: string | undefined;
  /** Requests not finished yet (their bodies not consumed), for close(). */
  readonly #inFlight = new Set<http.ClientRequest>();
  #idle: (() => void) | undefined;
  #closed = false;

  /** Builds the connection pool; opens nothing until the first call. */
  constructor(o: ClientOptions) {
    this.server = o.access.server;
    this.#host = URL.canParse(o.access.server) ? new URL(o.access.server).host : o.access.server;
    this.namespace = o.access.namespace;
    this.#timeoutMs = o.timeoutMs ?? 30_000;
    this.#limiter = o.limiter ?? noLimit;
    this.#limits = { ...BODY_LIMITS, ...o.bodyLimits };
    this.#credentials = o.credentials ?? (o.access.exec ? sharedExecCredentials(o.access.exec) : undefined);
    this.#http = this.server.startsWith('http:') ? http : https;
    this.#agentOptions = {
      keepAlive: true,
      // An idle pooled connection is closed after 30 s (a connection in use is not).
      timeout: 30_000,
      maxSockets: o.connections ?? 8,
      ...(o.access.ca ? { ca: o.access.ca } : {}),
      ...(o.access.cert && o.access.key ? { cert: o.access.cert, key: o.access.key } : {}),
      rejectUnauthorized: !o.access.insecureSkipTlsVerify,
    };
    this.#agent = new this.#http.Agent(this.#agentOptions);
    this.#headers = {
      'user-agent': `nodelet/${o.version ?? VERSION}`,
      accept: 'application/json',
      'accept-encoding': 'gzip',
      ...(o.access.token ? { authorization: `Bearer ${o.access.token}` } : {}),
    };
  }

  /**
   * Uses a new client certificate (a rotated one, src/controlplane/rotation.ts): requests from
   * now on go through a new connection pool presenting it, and the old pool's connections are
   * closed, those in use too (a watch: its reflector resumes on a new one), as the kubelet
   * closes its connections when its certificate changes, so nothing goes on authenticated by
   * the old certificate. A closed client ignores it.
   */
  setClientCertificate(cert: string, key: string): void {
    if (this.#closed) return;
    const old = this.#agent;
    this.#agentOptions = { ...this.#agentOptions, cert, key };
    this.#agent = new this.#http.Agent(this.#agentOptions);
    old.destroy();
  }

  #url(path: string, query: Query = {}): string {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') q.set(k, String(v));
    const s = q.toString();
    return `${this.server}${path}${s ? `?${s}` : ''}`;
  }

  /**
   * Sends one request; resolves with the answer (any status) and `done`, which the caller
   * calls once the body is consumed (the deadline and the caller's abort cover the body too).
   * A stream (watch) has no deadline and is aborted by the caller's signal alone.
   */
  /**
   * #send with the credential plugin's credential (none: the kubeconfig's, in the pool and the
   * headers). A 401 answered to a plugin's credential is retried once with a fresh one: the
   * API server authenticates before anything else, so the refused request did nothing.
   */
  async #exchange(r: Req, stream: boolean): Promise<{ res: Answer; done: () => void }> {
    if (!this.#credentials) return this.#send(r, stream);
    const first = await this.#sendWith(r, stream);
    if (first.answer.res.statusCode !== 401) return first.answer;
    first.answer.res.body.destroy();
    first.answer.done();
    this.#credentials.refresh(first.cred);
    return (await this.#sendWith(r, stream)).answer;
  }

  async #sendWith(r: Req, stream: boolean): Promise<{ cred: Credential; answer: { res: Answer; done: () => void } }> {
    let cred: Credential;
    try {
      cred = await this.#credentials!.get(r.signal);
    } catch (err) {
      throw transportError(err, { method: r.method, path: r.path, cancelled: !!r.signal?.aborted, timedOut: false });
    }
    // A new certificate from the plugin: a new pool presenting it (client-go closes its connections too).
    if (cred.cert && cred.key && cred.cert !== this.#pluginCert) {
      this.#pluginCert = cred.cert;
      this.setClientCertificate(cred.cert, cred.key);
    }
    return { cred, answer: await this.#send(r, stream, cred.token) };
  }

  async #send(r: Req, stream: boolean, token?: string): Promise<{ res: Answer; done: () => void }> {
    // The rate limiter's wait comes first and is not part of the deadline (client-go's
    // Timeout covers the HTTP exchange); the caller's abort ends it.
    try {
      await this.#limiter.take(r.signal);
    } catch (err) {
      throw transportError(err, { method: r.method, path: r.path, cancelled: !!r.signal?.aborted, timedOut: false });
    }
    // Own controller + timer (not AbortSignal.timeout) so that a deadline is told apart
    // from the caller's abort, and the deadline also covers reading the body.
    const ctl = new AbortController();
    let timedOut = false;
    const ms = r.timeoutMs ?? this.#timeoutMs;
    const timer = stream
      ? undefined
      : setTimeout(() => {
          timedOut = true;
          ctl.abort(new NodeletError('DEADLINE_EXCEEDED', `${r.method} ${r.path}: no answer within ${ms} ms`));
        }, ms);
    const onAbort = () => ctl.abort(r.signal?.reason);
    if (r.signal?.aborted) onAbort();
    else r.signal?.addEventListener('abort', onAbort, { once: true });
    let req: http.ClientRequest | undefined;
    const done = () => {
      clearTimeout(timer);
      r.signal?.removeEventListener('abort', onAbort);
      if (req && this.#inFlight.delete(req) && this.#inFlight.size === 0) this.#idle?.();
    };
    try {
      if (this.#closed) throw new Error('the client is closed');
      const body = r.body !== undefined ? Buffer.from(JSON.stringify(r.body)) : undefined;
      const res = await new Promise<Answer>((resolve, reject) => {
        req = this.#http.request(this.#url(r.path, r.query), {
          method: r.method,
          agent: this.#agent,
          headers: { ...this.#headers, ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { 'content-type': r.contentType ?? 'application/json', 'content-length': String(body.length) } : {}) },
          signal: ctl.signal,
        });
        this.#inFlight.add(req);
        req.once('response', (m) => resolve({ statusCode: m.statusCode ?? 0, headers: m.headers, body: m }));
        // Kept for the request's life: an error after the answer (a cut body) must not go unheard.
        req.on('error', reject);
        // A watch is quiet for long stretches: no idle timeout on its connection (the pool's
        // 30 s is for idle pooled connections; the reflector keeps its own inactivity timer).
        if (stream) req.setTimeout(0);
        req.end(body);
      });
      for (const o of requestObservers) o(String(res.statusCode), r.method, this.#host);
      return { res, done };
    } catch (err) {
      for (const o of requestObservers) o('<error>', r.method, this.#host);
      done();
      throw transportError(timedOut ? ctl.signal.reason : err, { method: r.method, path: r.path, cancelled: !!r.signal?.aborted, timedOut });
    }
  }

  /**
   * The decoded body: the answer itself, or its gzip expansion. With `rawLimit`, a compressed
   * body whose own bytes pass it is cut too (deflate can spin out empty blocks that expand
   * to nothing, forever).
   */
  static #body(res: Answer, rawLimit?: { bytes: number; error: () => Error }): Readable {
    const enc = res.headers['content-encoding'];
    if (enc !== 'gzip') return res.body;
    const gunzip = zlib.createGunzip();
    // pipe() does not pass errors on: a connection cut mid-body must end the reader too.
    res.body.on('error', (err) => gunzip.destroy(err));
    // Destroying the reader abandons the answer: its connection goes too (it still holds the rest).
    gunzip.once('close', () => res.body.destroy());
    if (rawLimit) {
      let raw = 0;
      res.body.on('data', (c: Buffer) => {
        raw += c.length;
        if (raw > rawLimit.bytes) gunzip.destroy(rawLimit.error());
      });
    }
    return res.body.pipe(gunzip);
  }

  /**
   * Reads a whole (non-watch) body, at most `limit` bytes decoded: past it, or when
   * Content-Length already says so, the answer is abandoned and `tooLarge()` thrown.
   */
  static async #text(res: Answer, limit: number, tooLarge: () => NodeletError): Promise<string> {
    const declared = Number(res.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit && res.headers['content-encoding'] !== 'gzip') {
      res.body.destroy();
      throw tooLarge();
    }
    // Framing of a gzip body: ~5 bytes a 64 KiB block at worst, plus its header.
    const body = ControlPlaneClient.#body(res, { bytes: limit + limit / 1024 + 1024, error: tooLarge });
    const chunks: Buffer[] = [];
    let n = 0;
    try {
      for await (const c of body) {
        const b = typeof c === 'string' ? Buffer.from(c) : (c as Buffer);
        n += b.length;
        if (n > limit) throw tooLarge();
        chunks.push(b);
      }
    } catch (err) {
      res.body.destroy();
      throw err;
    }
    return Buffer.concat(chunks, n).toString('utf8');
  }

  /** The bound of an answer and the error past it. */
  #bound(r: Req, status: number): { limit: number; tooLarge: () => NodeletError } {
    const kind = r.kind ?? 'object';
    const limit = kind === 'list page' ? this.#limits.listPage : this.#limits.object;
    const resource = r.resource ?? r.path.split('/').filter(Boolean).at(-1) ?? r.path;
    return { limit, tooLarge: () => tooLargeError({ method: r.method, path: r.path, resource, kind, limitBytes: limit, status }) };
  }

  static #parse(text: string): unknown {
    if (!text) return undefined;
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }

  /** One JSON request; 2xx -> the decoded body, otherwise the mapped NodeletError. */
  async request<T>(r: Req): Promise<T> {
    const { res, done } = await this.#exchange(r, false);
    let text: string;
    try {
      const b = this.#bound(r, res.statusCode);
      text = await ControlPlaneClient.#text(res, b.limit, b.tooLarge);
    } catch (err) {
      throw transportError(err, { method: r.method, path: r.path, cancelled: !!r.signal?.aborted, timedOut: false });
    } finally {
      done();
    }
    const body = ControlPlaneClient.#parse(text);
    if (res.statusCode < 200 || res.statusCode >= 300) throw decodeStatus(res.statusCode, body, { method: r.method, path: r.path, retryAfter: res.headers['retry-after'] });
    if (typeof body === 'string') throw new NodeletError('INTERNAL', `${r.method} ${r.path}: answer is not JSON: ${body.slice(0, 200)}`);
    return body as T;
  }

  get<T extends KubeObject>(t: ResourceType, ref: ObjectRef & { name: string }, o: CallOptions & { resourceVersion?: string } = {}): Promise<T> {
    return this.request<T>({ method: 'GET', path: resourcePath(t, ref), resource: resourceName(t, ref.subresource), query: { resourceVersion: o.resourceVersion }, timeoutMs: o.timeoutMs, signal: o.signal });
  }

  /** One page of a list (see listAll for every page). */
  list<T extends KubeObject>(t: ResourceType, o: ListOptions = {}): Promise<ListResult<T>> {
    return this.request<ListResult<T>>({
      method: 'GET',
      path: resourcePath(t, o.namespace ? { namespace: o.namespace } : {}),
      resource: t.resource,
      kind: 'list page',
      query: {
        labelSelector: o.labelSelector,
        fieldSelector: o.fieldSelector,
        limit: o.limit,
        continue: o.continue,
        resourceVersion: o.resourceVersion,
        resourceVersionMatch: o.resourceVersionMatch,
      },
      timeoutMs: o.timeoutMs,
      signal: o.signal,
    });
  }

  /**
   * Every page of a list (chunks of `limit`, default 500), one consistent snapshot: items and
   * the list's resourceVersion. A page past BODY_LIMITS.listPage is asked again (same
   * continue token) with half the limit, down to 1; `limit` is the page size it ended with,
   * for the caller's next list.
   */
  async listAll<T extends KubeObject>(t: ResourceType, o: Omit<ListOptions, 'continue'> = {}): Promise<{ items: T[]; resourceVersion: string; limit?: number }> {
    const items: T[] = [];
    let cont: string | undefined;
    let rv = '';
    let limit = Math.max(1, Math.floor(o.limit ?? 500));
    for (;;) {
      let page: ListResult<T>;
      try {
        page = await this.list<T>(t, { ...o, limit, ...(cont ? { continue: cont, resourceVersion: undefined, resourceVersionMatch: undefined } : {}) });
      } catch (err) {
        if (!isTooLarge(err) || limit <= 1) throw err;
        limit = Math.ceil(limit / 2);
        continue;
      }
      if (!page || typeof page !== 'object' || !Array.isArray(page.items)) throw new NodeletError('INTERNAL', `GET ${resourcePath(t, o.namespace ? { namespace: o.namespace } : {})}: the answer is not a list of ${t.resource}`);
      // Many items at once: a spread of 100,000 arguments would overflow the stack.
      for (const it of page.items) items.push(it);
      rv = page.metadata?.resourceVersion ?? '';
      cont = page.metadata?.continue || undefined;
      if (!cont) return { items, resourceVersion: rv, limit };
    }
  }

  create<T extends KubeObject>(t: ResourceType, obj: T, o: WriteOptions = {}): Promise<T> {
    const ns = t.namespaced ? (obj.metadata?.namespace ?? this.namespace) : undefined;
    return this.request<T>({ method: 'POST', path: resourcePath(t, ns ? { namespace: ns } : {}), resource: t.resource, query: writeQuery(o), body: obj, timeoutMs: o.timeoutMs, signal: o.signal });
  }

  /** PUT: replaces the object (or its subresource); a stale metadata.resourceVersion gives CONFLICT. */
  update<T extends KubeObject>(t: ResourceType, obj: T, o: WriteOptions = {}): Promise<T> {
    return this.request<T>({ method: 'PUT', path: resourcePath(t, refOf(t, obj, this.namespace, o.subresource)), resource: resourceName(t, o.subresource), query: writeQuery(o), body: obj, timeoutMs: o.timeoutMs, signal: o.signal });
  }

  /** JSON merge patch (RFC 7386): `null` removes a field, lists are replaced. */
  mergePatch<T extends KubeObject>(t: ResourceType, ref: ObjectRef & { name: string }, patch: Record<string, unknown>, o: WriteOptions = {}): Promise<T> {
    return this.request<T>({
      method: 'PATCH',
      path: resourcePath(t, { ...ref, ...(o.subresource ? { subresource: o.subresource } : {}) }),
      resource: resourceName(t, o.subresource),
      query: writeQuery(o),
      body: patch,
      contentType: 'application/merge-patch+json',
      timeoutMs: o.timeoutMs,
      signal: o.signal,
    });
  }

  /**
   * PATCH with the patch type chosen: `merge` (RFC 7386), `strategic` (lists merged by their
   * keys, e.g. conditions by `type`) or `json` (RFC 6902 operations, `test` included).
   */
  patch<T extends KubeObject>(t: ResourceType, ref: ObjectRef & { name: string }, patch: unknown, o: WriteOptions & { type: 'merge' | 'strategic' | 'json' }): Promise<T> {
    return this.request<T>({
      method: 'PATCH',
      path: resourcePath(t, { ...ref, ...(o.subresource ? { subresource: o.subresource } : {}) }),
      resource: resourceName(t, o.subresource),
      query: writeQuery(o),
      body: patch,
      contentType: PATCH_TYPES[o.type],
      timeoutMs: o.timeoutMs,
      signal: o.signal,
    });
  }

  /**
   * Server-side apply of `obj` (apiVersion, kind, metadata.name and the fields nodelet owns)
   * as field manager `nodelet` with `force=true`: nodelet takes the fields it declares.
   * JSON is valid YAML, so the body is sent as JSON under `application/apply-patch+yaml`.
   */
  apply<T extends KubeObject>(t: ResourceType, obj: KubeObject, o: WriteOptions & { force?: boolean } = {}): Promise<T> {
    return this.request<T>({
      method: 'PATCH',
      path: resourcePath(t, refOf(t, obj, this.namespace, o.subresource)),
      resource: resourceName(t, o.subresource),
      query: { ...writeQuery(o), fieldManager: o.fieldManager ?? FIELD_MANAGER, force: o.force ?? true },
      body: obj,
      contentType: 'application/apply-patch+yaml',
      timeoutMs: o.timeoutMs,
      signal: o.signal,
    });
  }

  /** DELETE with optional DeleteOptions; resolves with the server's answer (the object or a Status). */
  delete<T = unknown>(t: ResourceType, ref: ObjectRef & { name: string }, o: DeleteOptions = {}): Promise<T> {
    return this.request<T>({
      method: 'DELETE',
      path: resourcePath(t, ref),
      resource: resourceName(t, ref.subresource),
      ...(o.body ? { body: { apiVersion: 'v1', kind: 'DeleteOptions', ...o.body } } : {}),
      timeoutMs: o.timeoutMs,
      signal: o.signal,
    });
  }

  /**
   * Starts a watch. Resolves once the server answered 2xx, with the stream of events
   * (newline-delimited JSON documents). A non-2xx answer throws the mapped error; an
   * `ERROR` event is thrown from the iterator as the error its Status carries (410 -> GONE).
   * The iterator ends when the server closes the stream; abort `signal` to stop it.
   */
  async watch<T extends KubeObject>(t: ResourceType, o: WatchOptions = {}): Promise<AsyncIterable<WatchEvent<T>>> {
    const path = resourcePath(t, o.namespace ? { namespace: o.namespace } : {});
    const query: Query = {
      watch: 1,
      resourceVersion: o.resourceVersion,
      allowWatchBookmarks: o.allowWatchBookmarks ? true : undefined,
      labelSelector: o.labelSelector,
      fieldSelector: o.name ? [`metadata.name=${o.name}`, o.fieldSelector].filter(Boolean).join(',') : o.fieldSelector,
    };
    const { res, done } = await this.#exchange({ method: 'GET', path, query, signal: o.signal }, true);
    if (res.statusCode < 200 || res.statusCode >= 300) {
      const b = this.#bound({ method: 'GET', path, resource: t.resource }, res.statusCode);
      const text = await ControlPlaneClient.#text(res, b.limit, b.tooLarge).catch(() => '');
      done();
      throw decodeStatus(res.statusCode, ControlPlaneClient.#parse(text), { method: 'GET', path, retryAfter: res.headers['retry-after'] });
    }
    // No bound on the stream's own bytes (a watch is endless by design): each event is bounded,
    // and a stream that yields no event is restarted by the reflector's inactivity timer.
    const body = ControlPlaneClient.#body(res);
    const signal = o.signal;
    const limits = { maxEventBytes: this.#limits.watchEvent, resource: t.resource, status: res.statusCode };
    return (async function* () {
      try {
        yield* parseWatchStream<T>(body, path, limits);
      } catch (err) {
        if (err instanceof NodeletError) throw err;
        throw transportError(err, { method: 'WATCH', path, cancelled: !!signal?.aborted, timedOut: false });
      } finally {
        done();
        body.destroy();
      }
    })();
  }

  /**
   * Closes the connections: no new request is sent; requests in flight may finish for
   * `graceMs`, then whatever is still open (a watch nobody stopped) is destroyed, so closing
   * never hangs.
   */
  async close(graceMs = 1000): Promise<void> {
    this.#closed = true;
    if (this.#inFlight.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.#idle = resolve;
        timer = setTimeout(resolve, graceMs);
      });
      clearTimeout(timer);
      this.#idle = undefined;
      for (const req of this.#inFlight) req.destroy();
      this.#inFlight.clear();
    }
    this.#agent.destroy();
  }
}

/** `pods`, `pods/status`: the resource an answer is about, for messages. */
function resourceName(t: ResourceType, subresource?: string): string {
  return subresource ? `${t.resource}/${subresource}` : t.resource;
}

function writeQuery(o: WriteOptions): Query {
  return { fieldManager: o.fieldManager, dryRun: o.dryRun ? 'All' : undefined };
}

function refOf(t: ResourceType, obj: KubeObject, defaultNs: string, subresource?: string): ObjectRef & { name: string } {
  const name = obj.metadata?.name;
  if (!name) throw new NodeletError('INVALID_ARGUMENT', `${t.resource}: metadata.name is required`);
  const ns = t.namespaced ? (obj.metadata?.namespace ?? defaultNs) : undefined;
  return { name, ...(ns ? { namespace: ns } : {}), ...(subresource ? { subresource } : {}) };
}

/**
 * Splits a watch body (chunks cut anywhere, even inside a UTF-8 character) into events, one
 * JSON document a line. An `ERROR` event is thrown as the NodeletError its Status carries
 * (410 Expired -> GONE); a line that is not JSON is UNAVAILABLE (a broken stream); a line
 * longer than `maxEventBytes` (default BODY_LIMITS.watchEvent) is thrown as too large as
 * soon as it passes the bound, without waiting for its end. Lines are cut on the newline
 * byte (never part of a multi-byte UTF-8 character), each chunk scanned once.
 */
export async function* parseWatchStream<T = KubeObject>(
  chunks: AsyncIterable<Buffer | string>,
  path: string,
  o: { maxEventBytes?: number; resource?: string; status?: number } = {},
): AsyncGenerator<WatchEvent<T>> {
  const max = o.maxEventBytes ?? BODY_LIMITS.watchEvent;
  const tooLarge = () => tooLargeError({ method: 'WATCH', path, resource: o.resource ?? path.split('/').at(-1) ?? path, kind: 'watch event', limitBytes: max, status: o.status ?? 200 });
  const decodeLine = (bytes: Buffer): WatchEvent<T> | undefined => {
    const line = bytes.toString('utf8').trim();
    if (!line) return undefined;
    let ev: WatchEvent<T>;
    try {
      ev = JSON.parse(line) as WatchEvent<T>;
    } catch {
      throw new NodeletError('UNAVAILABLE', `WATCH ${path}: malformed event: ${line.slice(0, 200)}`);
    }
    if (ev?.type === 'ERROR') {
      const st = ev.object as unknown as { code?: number };
      throw decodeStatus(typeof st?.code === 'number' ? st.code : 500, st, { method: 'WATCH', path });
    }
    return ev;
  };
  // The part of the current line received so far.
  let parts: Buffer[] = [];
  let held = 0;
  for await (const chunk of chunks) {
    let b = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    let i: number;
    while ((i = b.indexOf(0x0a)) >= 0) {
      const piece = b.subarray(0, i);
      b = b.subarray(i + 1);
      if (held + piece.length > max) throw tooLarge();
      const ev = decodeLine(parts.length === 0 ? piece : Buffer.concat([...parts, piece]));
      parts = [];
      held = 0;
      if (ev) yield ev;
    }
    if (b.length > 0) {
      held += b.length;
      if (held > max) throw tooLarge();
      parts.push(b);
    }
  }
  const ev = decodeLine(Buffer.concat(parts));
  if (ev) yield ev;
}
