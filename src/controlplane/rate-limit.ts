/**
 * client-go's client-side rate limit (`flowcontrol.NewTokenBucketRateLimiter`, over
 * golang.org/x/time/rate): a bucket of `burst` tokens, full at the start, refilled at `qps`
 * a second; each request takes one, and a request that finds none waits for its own token,
 * in the order they asked (a reservation: the bucket may go below zero).
 *
 * The kubelet gives its API client `kubeAPIQPS`/`kubeAPIBurst` and its event client
 * `eventRecordQPS`/`eventBurst` this way. {@link clientGoLimit} reads those values as
 * client-go's `rest.Config` does: a QPS of 0 is client-go's default (5 a second) and a burst
 * of 0 its default (10); a negative QPS is no limit.
 */
import type { Clock } from '../clock.js';

export interface RateLimiter {
  /** Waits for this request's turn (at once when a token is there); rejects when `signal` aborts. */
  take(signal?: AbortSignal): Promise<void>;
}

export const noLimit: RateLimiter = { take: () => Promise.resolve() };

export class TokenBucket implements RateLimiter {
  readonly #qps: number;
  readonly #burst: number;
  readonly #clock: Clock;
  #tokens: number;
  #at: number;

  constructor(qps: number, burst: number, clock: Clock) {
    if (!(qps > 0) || !(burst >= 1)) throw new RangeError(`a token bucket needs qps > 0 and burst >= 1, got ${qps} and ${burst}`);
    this.#qps = qps;
    this.#burst = burst;
    this.#clock = clock;
    this.#tokens = burst;
    this.#at = clock.now();
  }

  /** Takes a token now, possibly one not yet refilled; returns how long to wait for it (ms). */
  reserve(): number {
    const now = this.#clock.now();
    this.#tokens = Math.min(this.#burst, this.#tokens + ((now - this.#at) * this.#qps) / 1000);
    this.#at = now;
    this.#tokens -= 1;
    return this.#tokens >= 0 ? 0 : Math.ceil((-this.#tokens * 1000) / this.#qps);
  }

  async take(signal?: AbortSignal): Promise<void> {
    const ms = this.reserve();
    if (ms <= 0) return;
    try {
      await this.#clock.sleep(ms, signal);
    } catch (err) {
      this.#tokens += 1; // a request that gave up gives its token back, as a cancelled reservation
      throw err;
    }
  }
}

/** client-go's defaults for a `rest.Config` whose QPS or Burst is 0. */
export const CLIENT_GO_DEFAULT_QPS = 5;
export const CLIENT_GO_DEFAULT_BURST = 10;

/** The limiter a kubelet's client gets from a QPS and burst setting (`kubeAPIQPS`, `eventRecordQPS`, ...). */
export function clientGoLimit(qps: number | undefined, burst: number | undefined, clock: Clock): RateLimiter {
  // Unset is 0, as in a rest.Config.
  if ((qps ?? 0) < 0) return noLimit;
  return new TokenBucket(qps || CLIENT_GO_DEFAULT_QPS, burst || CLIENT_GO_DEFAULT_BURST, clock);
}
