/**
 * nodelet's HTTPS client of the control plane: undici with keep-alive and the kubeconfig's
 * TLS, `Accept-Encoding: gzip`, `User-Agent: nodelet/<version>`, per-request deadlines.
 * Every failure becomes a NodeletError through one table (statusError): Status bodies keep
 * their reason, message and causes; 429 keeps Retry-After.
 */
import { Readable } from 'node:stream';
import zlib from 'node:zlib';
import { Agent, request, type Dispatcher } from 'undici';
import { NodeletError, errorMessage, type ErrorCode } from '../errors.js';
import { VERSION } from '../version.js';
import type { ClusterAccess } from './kubeconfig.js';

/** Where a resource lives: core (`group` '') or a named group, namespaced or not. */
export interface ResourceType {
  group: string;
  version: string;
  resource: string;
  namespaced: boolean;
}

export const PODS: ResourceType = { group: '', version: 'v1', resource: 'pods', namespaced: true };
export const NODES: ResourceType = { group: '', version: 'v1', resource: 'nodes', namespaced: false };
export const LEASES: ResourceType = { group: 'coordination.k8s.io', version: 'v1', resource: 'leases', namespaced: true };
export const TOKEN_REVIEWS: ResourceType = { group: 'authentication.k8s.io', version: 'v1', resource: 'tokenreviews', namespaced: false };
export const SUBJECT_ACCESS_REVIEWS: ResourceType = { group: 'authorization.k8s.io', version: 'v1', resource: 'subjectaccessreviews', namespaced: false };

/** The spec's path table: /api/v1 or /apis/<group>/<version>, then namespaces/<ns>, resource, name, subresource. */
export function resourcePath(t: ResourceType, o: { namespace?: string; name?: string; subresource?: string } = {}): string {
  let p = t.group ? `/apis/${t.group}/${t.version}` : `/api/${t.version}`;
  if (t.namespaced && o.namespace) p += `/namespaces/${encodeURIComponent(o.namespace)}`;
  p += `/${t.resource}`;
  if (o.name) p += `/${encodeURIComponent(o.name)}`;
  if (o.subresource) p += `/${o.subresource}`;
  return p;
}

const CODE_FOR_STATUS: Record<number, ErrorCode> = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  409: 'CONFLICT',
  410: 'GONE',
  415: 'INVALID_ARGUMENT',
  422: 'INVALID_ARGUMENT',
  429: 'TOO_MANY_REQUESTS',
};

/** HTTP status + Status body -> NodeletError (the one table). */
export function statusError(method: string, path: string, status: number, body: unknown, retryAfter?: string): NodeletError {
  const st = (body && typeof body === 'object' ? body : {}) as { reason?: string; message?: string; details?: { causes?: unknown[] } };
  let code: ErrorCode = CODE_FOR_STATUS[status] ?? (status >= 500 ? 'UNAVAILABLE' : 'INTERNAL');
  if (status === 409 && st.reason === 'AlreadyExists') code = 'ALREADY_EXISTS';
  const message = st.message || `HTTP ${status}`;
  return new NodeletError(code, `${method} ${path}: ${message}`, {
    status,
    ...(st.reason ? { reason: st.reason } : {}),
    ...(st.details?.causes ? { causes: st.details.causes } : {}),
    ...(retryAfter !== undefined && Number.isFinite(Number(retryAfter)) ? { retryAfterSeconds: Number(retryAfter) } : {}),
  });
}

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  contentType?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface KubeClientOptions {
  access: ClusterAccess;
  /** Deadline of ordinary requests (default 30 s). */
  timeoutMs?: number;
}

export class KubeClient {
  readonly server: string;
  readonly #agent: Agent;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;

  constructor(o: KubeClientOptions) {
    this.server = o.access.server;
    this.#timeoutMs = o.timeoutMs ?? 30_000;
    this.#agent = new Agent({
      keepAliveTimeout: 30_000,
      connect: { ...(o.access.ca ? { ca: o.access.ca } : {}), ...(o.access.cert ? { cert: o.access.cert, key: o.access.key } : {}) },
    });
    this.#headers = {
      'user-agent': `nodelet/${VERSION}`,
      accept: 'application/json',
      'accept-encoding': 'gzip',
      ...(o.access.token ? { authorization: `Bearer ${o.access.token}` } : {}),
    };
  }

  #url(path: string, query?: RequestOptions['query']): string {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) q.set(k, String(v));
    const s = q.toString();
    return `${this.server}${path}${s ? `?${s}` : ''}`;
  }

  async #send(method: Dispatcher.HttpMethod, path: string, o: RequestOptions, stream: boolean): Promise<Dispatcher.ResponseData> {
    const signals = [o.signal, stream ? undefined : AbortSignal.timeout(o.timeoutMs ?? this.#timeoutMs)].filter((s): s is AbortSignal => !!s);
    try {
      return await request(this.#url(path, o.query), {
        method,
        dispatcher: this.#agent,
        headers: { ...this.#headers, ...(o.body !== undefined ? { 'content-type': o.contentType ?? 'application/json' } : {}) },
        ...(o.body !== undefined ? { body: typeof o.body === 'string' ? o.body : JSON.stringify(o.body) } : {}),
        ...(signals.length ? { signal: AbortSignal.any(signals) } : {}),
        // A watch is quiet for long stretches: no body timeout (the reflector has its own).
        ...(stream ? { bodyTimeout: 0 } : {}),
      });
    } catch (err) {
      if (o.signal?.aborted) throw new NodeletError('CANCELLED', `${method} ${path}: cancelled`, {}, { cause: err });
      const timedOut = (err as Error).name === 'TimeoutError' || (err as Error).name === 'AbortError';
      throw new NodeletError(timedOut ? 'DEADLINE_EXCEEDED' : 'UNAVAILABLE', `${method} ${path}: ${errorMessage(err)}`, {}, { cause: err });
    }
  }

  static #decoded(res: Dispatcher.ResponseData): Readable {
    return res.headers['content-encoding'] === 'gzip' ? (res.body as Readable).pipe(zlib.createGunzip()) : (res.body as Readable);
  }

  /** One request, answered as JSON; a non-2xx status throws the mapped NodeletError. */
  async do<T = unknown>(method: Dispatcher.HttpMethod, path: string, o: RequestOptions = {}): Promise<T> {
    const res = await this.#send(method, path, o, false);
    let text = '';
    try {
      for await (const chunk of KubeClient.#decoded(res)) text += chunk;
    } catch (err) {
      throw new NodeletError('UNAVAILABLE', `${method} ${path}: reading the answer: ${errorMessage(err)}`, {}, { cause: err });
    }
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = { message: text.slice(0, 500) };
    }
    if (res.statusCode >= 300) throw statusError(method, path, res.statusCode, body, res.headers['retry-after'] as string | undefined);
    return body as T;
  }

  /** A watch: resolves with the event stream (one JSON document a line) once the server answered 2xx. */
  async stream(path: string, o: RequestOptions = {}): Promise<AsyncIterable<WatchEvent>> {
    const res = await this.#send('GET', path, o, true);
    if (res.statusCode >= 300) {
      let text = '';
      for await (const chunk of KubeClient.#decoded(res)) text += chunk;
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        body = { message: text.slice(0, 500) };
      }
      throw statusError('GET', path, res.statusCode, body, res.headers['retry-after'] as string | undefined);
    }
    const body = KubeClient.#decoded(res);
    return (async function* () {
      let buf = '';
      for await (const chunk of body) {
        buf += chunk;
        let i: number;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (line) yield JSON.parse(line) as WatchEvent;
        }
      }
      if (buf.trim()) yield JSON.parse(buf) as WatchEvent;
    })();
  }

  async close(): Promise<void> {
    await this.#agent.close();
  }
}

export interface WatchEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: { metadata?: { name?: string; namespace?: string; resourceVersion?: string }; [k: string]: unknown };
}

/** Server-side apply of `obj` (a partial object with apiVersion/kind/metadata.name) as field manager `nodelet`, forcing the fields nodelet owns. */
export function apply<T>(client: KubeClient, t: ResourceType, obj: { metadata?: { name?: string; namespace?: string } }, o: { subresource?: string; force?: boolean } = {}): Promise<T> {
  return client.do<T>('PATCH', resourcePath(t, { ...(obj.metadata?.namespace ? { namespace: obj.metadata.namespace } : {}), name: obj.metadata!.name!, ...(o.subresource ? { subresource: o.subresource } : {}) }), {
    body: obj,
    contentType: 'application/apply-patch+yaml',
    query: { fieldManager: 'nodelet', force: o.force ?? true },
  });
}

/**
 * Runs `fn` (which reads, changes and writes) again when the write answers CONFLICT (a
 * stale resourceVersion), up to `attempts` times; other errors and the last conflict are thrown.
 */
export async function retryOnConflict<T>(fn: () => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      if (!(err instanceof NodeletError && err.code === 'CONFLICT') || i >= attempts) throw err;
    }
  }
}
