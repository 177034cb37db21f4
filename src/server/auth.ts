/**
 * Authentication and authorization of the HTTPS server, as the kubelet does them.
 *
 * Authentication (first that applies wins, in the kubelet's order):
 * 1. a client certificate, when `authentication.x509.clientCAFile` is set: verified by TLS
 *    against that CA (the server asks for certificates but does not reject the handshake,
 *    so token and anonymous requests still get through); user = CN, groups = O. A
 *    certificate that does not verify, or whose extended key usage excludes clientAuth,
 *    is an error: 401 even with anonymous enabled (the kubelet's union "fails on error").
 * 2. a bearer token, when `authentication.webhook.enabled`: a TokenReview through the
 *    ReviewClient, answers cached for `cacheTTL` (errors are not cached). A token that is
 *    not authenticated is an error (401), as the kubelet's bearer-token authenticator.
 * 3. anonymous, when `authentication.anonymous.enabled`: `system:anonymous` in group
 *    `system:unauthenticated`, for authorization to decide.
 * Otherwise 401 `Unauthorized`. Authenticated users get group `system:authenticated`.
 *
 * Authorization: `AlwaysAllow`, or `Webhook` posting a SubjectAccessReview per attribute
 * set (allowed answers cached `cacheAuthorizedTTL`, denied ones `cacheUnauthorizedTTL`,
 * errors never). Attributes follow the kubelet's mapping (`requestAttributes`); a request
 * is allowed when any of its attribute sets is (the kubelet's fine-grained fallback, e.g.
 * nodes/healthz then nodes/proxy). Denied: 403 `Forbidden (user=..., verb=...,
 * resource=..., subresource(s)=[...])` plus the webhook's reason; error: 500.
 */
import crypto from 'node:crypto';
import { NodeletError, errorMessage } from '../errors.js';
import type { Clock } from '../clock.js';

export interface UserInfo {
  username: string;
  groups: string[];
  uid?: string;
}

/** The control plane's review APIs as the server needs them (the control-plane client implements it). */
export interface ReviewClient {
  /** Posts a TokenReview; answers its status. Throws on transport/HTTP failure. */
  tokenReview(token: string): Promise<{ authenticated: boolean; user?: { username: string; uid?: string; groups?: string[] }; error?: string }>;
  /** Posts a SubjectAccessReview with `spec`; answers its status. Throws on transport/HTTP failure. */
  subjectAccessReview(spec: SubjectAccessReviewSpec): Promise<{ allowed: boolean; denied?: boolean; reason?: string; evaluationError?: string }>;
}

/** authorization.k8s.io/v1 SubjectAccessReviewSpec, resource form. */
export interface SubjectAccessReviewSpec {
  user: string;
  groups: string[];
  uid?: string;
  resourceAttributes: ResourceAttributes;
}

export interface ResourceAttributes {
  verb: string;
  /** '' = core group. */
  group: string;
  version?: string;
  resource: string;
  subresource: string;
  /** The node name. */
  name: string;
  namespace: string;
}

export const ANONYMOUS_USER = 'system:anonymous';
export const UNAUTHENTICATED_GROUP = 'system:unauthenticated';
export const AUTHENTICATED_GROUP = 'system:authenticated';
const CLIENT_AUTH_EKU = '1.3.6.1.5.5.7.3.2';
const ANY_EKU = '2.5.29.37.0';

// ------------------------------------------------------------------ attributes

/** HTTP method -> verb, as the kubelet's auth filter maps it. */
export function verbForMethod(method: string): string {
  switch (method.toUpperCase()) {
    case 'POST':
      return 'create';
    case 'GET':
    case 'HEAD':
      return 'get';
    case 'PUT':
      return 'update';
    case 'PATCH':
      return 'patch';
    case 'DELETE':
      return 'delete';
    default:
      return '';
  }
}

/** True when `p` is `prefix` or below it (`/stats` covers `/stats/summary`, not `/statsx`). */
function isSubpath(p: string, prefix: string): boolean {
  return p === prefix || p.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`);
}

/**
 * Subresources to check for a request path, in order (any allowed -> allowed):
 * `/checkpoint/*` -> checkpoint; `/checkpoints` (nodelet's listing) -> checkpoint;
 * `/stats/*` -> stats; `/metrics/*` -> metrics; `/logs/*` -> log; `/healthz` -> healthz
 * then proxy; anything else (`/pods`, `/configz`) -> proxy.
 */
export function subresourcesForPath(rawPath: string): string[] {
  const p = rawPath.split('?')[0] ?? '';
  if (isSubpath(p, '/checkpoint') || p === '/checkpoints') return ['checkpoint'];
  if (isSubpath(p, '/stats')) return ['stats'];
  if (isSubpath(p, '/metrics')) return ['metrics'];
  if (isSubpath(p, '/logs')) return ['log'];
  if (isSubpath(p, '/healthz')) return ['healthz', 'proxy'];
  return ['proxy'];
}

/** Resource attributes of a request on the node `nodeName`, one set per subresource to try. */
export function requestAttributes(method: string, rawPath: string, nodeName: string): ResourceAttributes[] {
  const verb = verbForMethod(method);
  return subresourcesForPath(rawPath).map((subresource) => ({ verb, group: '', version: 'v1', resource: 'nodes', subresource, name: nodeName, namespace: '' }));
}

/** The kubelet's 403 text, with the authorizer's reason appended when it gave one. */
export function forbiddenMessage(user: UserInfo, attrs: readonly ResourceAttributes[], reason?: string): string {
  const first = attrs[0];
  const msg = `Forbidden (user=${user.username}, verb=${first?.verb ?? ''}, resource=${first?.resource ?? ''}, subresource(s)=[${attrs.map((a) => a.subresource).join(' ')}])`;
  return reason ? `${msg}: ${reason}` : msg;
}

// ------------------------------------------------------------------ authentication

/** What the TLS edge saw of the client's certificate. */
export interface PeerCertificate {
  /** TLS verified the chain against the client CA. */
  verified: boolean;
  /** OpenSSL's reason when not verified. */
  verifyError?: string;
  commonName: string;
  organizations: string[];
  /** OIDs of the extended key usage; undefined when the certificate has none (any usage). */
  extKeyUsage?: string[];
}

/** The credentials of one request. */
export interface Credentials {
  /** Present only when the client sent a certificate and x509 authentication is configured. */
  peerCertificate?: PeerCertificate;
  /** The raw `Authorization` header. */
  authorization?: string;
}

export interface AuthenticatorOptions {
  /** `authentication.x509.clientCAFile` is set (the TLS layer then requests certificates). */
  x509: boolean;
  /** `authentication.webhook.enabled` with its client and cacheTTL. */
  webhook?: { client: Pick<ReviewClient, 'tokenReview'>; cacheTtlMs: number };
  /** `authentication.anonymous.enabled`. */
  anonymous: boolean;
  clock: Clock;
  /** Most cached token answers kept (oldest evicted first). */
  maxCacheEntries?: number;
}

function unauthorized(why: string): NodeletError {
  // The client sees only `Unauthorized`, as from the kubelet; `why` goes to the log.
  return new NodeletError('UNAUTHENTICATED', 'Unauthorized', { why });
}

function withAuthenticatedGroup(u: UserInfo): UserInfo {
  return u.groups.includes(AUTHENTICATED_GROUP) ? u : { ...u, groups: [...u.groups, AUTHENTICATED_GROUP] };
}

/** A TTL cache with a size cap; time from the injected clock. */
class TtlCache<V> {
  readonly #entries = new Map<string, { value: V; expires: number }>();
  constructor(
    private readonly clock: Clock,
    private readonly max: number,
  ) {}
  get(key: string): V | undefined {
    const e = this.#entries.get(key);
    if (!e) return undefined;
    if (e.expires <= this.clock.now()) {
      this.#entries.delete(key);
      return undefined;
    }
    return e.value;
  }
  set(key: string, value: V, ttlMs: number): void {
    if (ttlMs <= 0) return;
    this.#entries.delete(key);
    if (this.#entries.size >= this.max) {
      const oldest = this.#entries.keys().next();
      if (!oldest.done) this.#entries.delete(oldest.value);
    }
    this.#entries.set(key, { value, expires: this.clock.now() + ttlMs });
  }
  get size(): number {
    return this.#entries.size;
  }
}

/** Authenticates requests; one instance per server, shared by all connections. */
export class Authenticator {
  readonly #tokens: TtlCache<{ ok: true; user: UserInfo } | { ok: false; why: string }>;
  constructor(private readonly o: AuthenticatorOptions) {
    this.#tokens = new TtlCache(o.clock, o.maxCacheEntries ?? 4096);
  }

  /** The request's user, or throws UNAUTHENTICATED (message `Unauthorized`, the reason in details.why). */
  async authenticate(c: Credentials): Promise<UserInfo> {
    const cert = this.o.x509 ? c.peerCertificate : undefined;
    if (cert) {
      if (!cert.verified) throw unauthorized(`client certificate not verified: ${cert.verifyError ?? 'unknown reason'}`);
      if (cert.extKeyUsage && !cert.extKeyUsage.includes(CLIENT_AUTH_EKU) && !cert.extKeyUsage.includes(ANY_EKU)) {
        throw unauthorized('client certificate is not valid for client authentication (extended key usage)');
      }
      if (!cert.commonName) throw unauthorized('client certificate has no common name');
      return withAuthenticatedGroup({ username: cert.commonName, groups: [...cert.organizations] });
    }
    const token = bearerToken(c.authorization);
    if (token !== undefined && this.o.webhook) {
      const r = await this.#reviewToken(token, this.o.webhook);
      if (!r.ok) throw unauthorized(r.why);
      return withAuthenticatedGroup(r.user);
    }
    if (this.o.anonymous) return { username: ANONYMOUS_USER, groups: [UNAUTHENTICATED_GROUP] };
    throw unauthorized(token !== undefined ? 'bearer token given but webhook authentication is disabled' : 'no credentials');
  }

  async #reviewToken(token: string, wh: NonNullable<AuthenticatorOptions['webhook']>): Promise<{ ok: true; user: UserInfo } | { ok: false; why: string }> {
    // Keyed by a hash: raw tokens are not kept in memory longer than the request.
    const key = crypto.createHash('sha256').update(token).digest('hex');
    const cached = this.#tokens.get(key);
    if (cached) return cached;
    let status: Awaited<ReturnType<ReviewClient['tokenReview']>>;
    try {
      status = await wh.client.tokenReview(token);
    } catch (err) {
      // Not cached: the next request asks again.
      return { ok: false, why: `token review failed: ${errorMessage(err)}` };
    }
    const r: { ok: true; user: UserInfo } | { ok: false; why: string } =
      status.authenticated && status.user?.username
        ? { ok: true, user: { username: status.user.username, groups: [...(status.user.groups ?? [])], ...(status.user.uid ? { uid: status.user.uid } : {}) } }
        : { ok: false, why: status.error ? `invalid bearer token: ${status.error}` : 'invalid bearer token' };
    this.#tokens.set(key, r, wh.cacheTtlMs);
    return r;
  }
}

/** The token of an `Authorization: Bearer <token>` header; undefined for anything else. */
export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header.trim());
  return m ? m[1] : undefined;
}

// ------------------------------------------------------------------ authorization

export interface Decision {
  allowed: boolean;
  reason?: string;
}

export interface Authorizer {
  /** Throws only for an authorizer failure (the server answers 500). */
  authorize(user: UserInfo, attrs: ResourceAttributes): Promise<Decision>;
}

/** authorization.mode AlwaysAllow. */
export const alwaysAllow: Authorizer = { authorize: async () => ({ allowed: true }) };

export interface WebhookAuthorizerOptions {
  client: Pick<ReviewClient, 'subjectAccessReview'>;
  cacheAuthorizedTtlMs: number;
  cacheUnauthorizedTtlMs: number;
  clock: Clock;
  maxCacheEntries?: number;
}

/** authorization.mode Webhook: one SubjectAccessReview per (user, attributes), cached. */
export class WebhookAuthorizer implements Authorizer {
  readonly #cache: TtlCache<Decision>;
  constructor(private readonly o: WebhookAuthorizerOptions) {
    this.#cache = new TtlCache(o.clock, o.maxCacheEntries ?? 8192);
  }

  async authorize(user: UserInfo, attrs: ResourceAttributes): Promise<Decision> {
    const spec: SubjectAccessReviewSpec = { user: user.username, groups: [...user.groups], ...(user.uid ? { uid: user.uid } : {}), resourceAttributes: { ...attrs } };
    const key = JSON.stringify(spec);
    const cached = this.#cache.get(key);
    if (cached) return cached;
    let status: Awaited<ReturnType<ReviewClient['subjectAccessReview']>>;
    try {
      status = await this.o.client.subjectAccessReview(spec);
    } catch (err) {
      throw new NodeletError('INTERNAL', `subject access review failed: ${errorMessage(err)}`, {}, { cause: err });
    }
    // Denied and "no opinion" both end as not allowed: the webhook is the only authorizer.
    const d: Decision = { allowed: status.allowed === true, ...(status.reason ? { reason: status.reason } : {}) };
    this.#cache.set(key, d, d.allowed ? this.o.cacheAuthorizedTtlMs : this.o.cacheUnauthorizedTtlMs);
    return d;
  }
}

/**
 * Authorizes one request: allowed when any attribute set is. Throws FORBIDDEN with the
 * kubelet's message (and the last reason given), or INTERNAL when the authorizer failed.
 */
export async function authorizeRequest(authz: Authorizer, user: UserInfo, attrs: readonly ResourceAttributes[]): Promise<void> {
  let reason: string | undefined;
  for (const a of attrs) {
    let d: Decision;
    try {
      d = await authz.authorize(user, a);
    } catch (err) {
      const first = attrs[0];
      throw new NodeletError(
        'INTERNAL',
        `Authorization error (user=${user.username}, verb=${first?.verb ?? ''}, resource=${first?.resource ?? ''}, subresource(s)=[${attrs.map((x) => x.subresource).join(' ')}])`,
        { why: errorMessage(err) },
        { cause: err },
      );
    }
    if (d.allowed) return;
    reason = d.reason ?? reason;
  }
  throw new NodeletError('FORBIDDEN', forbiddenMessage(user, attrs, reason), { user: user.username });
}
