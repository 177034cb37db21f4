/**
 * Service-account tokens for projected `serviceAccountToken` sources, as the kubelet's token
 * manager (pkg/kubelet/token/token_manager.go):
 *
 * - one token per (service account, namespace, audiences, expirationSeconds, bound pod UID),
 *   kept in memory only (a token never touches the node's disk outside its tmpfs volume);
 * - renewed when it is older than 80 % of its lifetime (the one granted, which the API server
 *   may cap below the one asked) or than 24 h, whichever comes first,
 *   each less a jitter of up to 10 s (so the pods of a node do not all renew at once);
 * - when a renewal fails and the cached token has not expired, the cached one is used (a
 *   control-plane outage never takes a working token away), and the renewal is tried again
 *   at the next use;
 * - a pod's tokens are forgotten with it (`forgetPod`), expired ones at each `get`.
 *
 * Time is the injected Clock's. `refreshAt` tells when a token must be fetched again, for
 * the caller to rewrite its volume then rather than at the pod's next periodic sync.
 */
import { realClock, type Clock } from '../../clock.js';
import type { ApiObjects, IssuedToken, TokenRequestSpec } from '../objects/objects.js';

/** The kubelet's maxTTL: a token is renewed at least once a day. */
export const MAX_TOKEN_AGE_MS = 24 * 3600 * 1000;
/** The kubelet's maxJitter. */
const MAX_JITTER_MS = 10_000;

interface Cached {
  token: string;
  /** ms since the epoch */
  expiresAt: number;
  /** ms since the epoch: when it must be renewed (80 % of its TTL or 24 h, less the jitter). */
  refreshAt: number;
  podUid: string;
}

export interface TokenManagerOptions {
  request: ApiObjects['requestToken'];
  clock?: Clock;
  /** In [0, 1): the jitter's draw (default Math.random). */
  random?: () => number;
}

/** When a token issued now must be renewed: as the kubelet's requiresRefresh, from its expiry and lifetime. */
export function tokenRefreshAt(expiresAt: number, expirationSeconds: number, jitterMs: number): number {
  const issuedAt = expiresAt - expirationSeconds * 1000;
  const byAge = issuedAt + MAX_TOKEN_AGE_MS - jitterMs;
  const byTtl = expiresAt - Math.floor((expirationSeconds * 20) / 100) * 1000 - jitterMs;
  return Math.min(byAge, byTtl);
}

export class TokenManager {
  readonly #o: TokenManagerOptions;
  readonly #clock: Clock;
  readonly #cache = new Map<string, Cached>();

  constructor(o: TokenManagerOptions) {
    this.#o = o;
    this.#clock = o.clock ?? realClock;
  }

  static key(namespace: string, serviceAccount: string, spec: TokenRequestSpec): string {
    return JSON.stringify([serviceAccount, namespace, spec.audiences, spec.expirationSeconds, spec.boundPod.uid, spec.boundPod.name]);
  }

  /**
   * The token for the pod's source: the cached one while it is fresh, else a new one
   * (TokenRequest). Throws (the error of the request) only when no unexpired token is cached.
   */
  async get(namespace: string, serviceAccount: string, spec: TokenRequestSpec): Promise<{ token: string; refreshAt: number }> {
    const now = this.#clock.now();
    this.#dropExpired(now);
    const key = TokenManager.key(namespace, serviceAccount, spec);
    const cached = this.#cache.get(key);
    if (cached && now < cached.refreshAt) return { token: cached.token, refreshAt: cached.refreshAt };
    let issued: IssuedToken;
    try {
      issued = await this.#o.request(namespace, serviceAccount, spec);
    } catch (err) {
      // As the kubelet: a renewal that fails keeps the token while it is valid.
      if (cached && this.#clock.now() < cached.expiresAt) return { token: cached.token, refreshAt: cached.refreshAt };
      throw err;
    }
    const expiresAt = Date.parse(issued.expirationTimestamp);
    const jitter = Math.floor((this.#o.random ?? Math.random)() * (MAX_JITTER_MS / 1000)) * 1000;
    // As the kubelet, by the lifetime granted (the answer's spec.expirationSeconds), which a
    // capped API server makes shorter than asked: by the asked one, a 20 s token asked as 600 s
    // would be "due" at once and fetched again at every use.
    const lifetime = issued.expirationSeconds ?? spec.expirationSeconds;
    const entry: Cached = { token: issued.token, expiresAt, refreshAt: tokenRefreshAt(expiresAt, lifetime, jitter), podUid: spec.boundPod.uid };
    this.#cache.set(key, entry);
    return { token: entry.token, refreshAt: entry.refreshAt };
  }

  /** Forgets the tokens bound to the pod (it is gone). */
  forgetPod(uid: string): void {
    for (const [k, c] of this.#cache) if (c.podUid === uid) this.#cache.delete(k);
  }

  /** How many tokens are cached (tests). */
  get size(): number {
    return this.#cache.size;
  }

  #dropExpired(now: number): void {
    for (const [k, c] of this.#cache) if (now >= c.expiresAt) this.#cache.delete(k);
  }
}
