/**
 * The node's heartbeat Lease (`coordination.k8s.io/v1`, `kube-node-lease/<node>`), renewed
 * as the kubelet does: every 0.25 × leaseDurationSeconds (10 s for the default 40) with a
 * little jitter; the cached lease is updated without a GET; a conflict or a missing lease
 * falls back to get-or-create; failures retry with backoff 200 ms doubling to 7 s. The
 * lease carries an ownerReference to the Node, so none is made before the Node exists.
 *
 * Contract: `syncOnce()` is one renewal (tests call it); `start`/`stop` run the loop. A
 * control-plane fault never throws out of the loop: it is logged and retried.
 */
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Node } from 'kubernetes-types/core/v1.js';
import { backoffDelay, type Clock } from '../clock.js';
import { LoopOwner } from '../loop.js';
import { NodeletError, errorMessage, UNANSWERED_RETRY_CAP_MS, unanswered } from '../errors.js';
import type { Logger } from '../log.js';

export const NODE_LEASE_NAMESPACE = 'kube-node-lease';

/** What the renewer needs of the control plane. CONFLICT (stale resourceVersion) and NOT_FOUND are NodeletErrors. */
export interface LeaseApi {
  getNode(name: string): Promise<Node | undefined>;
  getLease(namespace: string, name: string): Promise<Lease | undefined>;
  createLease(lease: Lease): Promise<Lease>;
  /** PUT with the lease's resourceVersion. */
  updateLease(lease: Lease): Promise<Lease>;
}

export interface LeaseRenewerOptions {
  api: LeaseApi;
  nodeName: string;
  leaseDurationSeconds: number;
  clock: Clock;
  logger: Logger;
  rand?: () => number;
  /** Told of every renewal attempt and whether it was accepted (metrics). */
  onRenew?: (ok: boolean) => void;
}

/** MicroTime: RFC 3339 with six fractional digits, as the API server writes it. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export class LeaseRenewer extends LoopOwner {
  readonly #o: LeaseRenewerOptions;
  #cached: Lease | undefined;
  #failures = 0;
  #lastRenew = 0;
  /** The last failure got no answer from the server at all (see nextDelayMs). */
  #unanswered = false;
  /** Clock time the next turn was planned for (0: none planned), to tell a late timer from a slow request. */
  #plannedAt = 0;
  /** The renew interval of the last plan (ms). */
  #plannedDelay = 0;

  constructor(o: LeaseRenewerOptions) {
    super({ name: 'lease', clock: o.clock, logger: o.logger });
    this.#o = o;
  }

  /** Clock time of the last successful renewal (0: never). */
  get lastRenew(): number {
    return this.#lastRenew;
  }

  /**
   * Delay before the next turn: the renew interval with ±4 % jitter, or the failure
   * backoff (the kubelet's 200 ms doubling to 7 s). A server that did not answer at all
   * (connection refused or reset: no HTTP status) is asked again within 1 s, since asking
   * costs it nothing; so the lease is renewed within a second of it answering again, while
   * a server that answers with errors (5xx, 429) or too slowly gets the whole backoff.
   */
  override nextDelayMs(): number {
    const ms =
      this.#failures > 0
        ? backoffDelay(this.#failures - 1, 200, this.#unanswered ? UNANSWERED_RETRY_CAP_MS : 7_000)
        : backoffDelay(0, this.#o.leaseDurationSeconds * 250, Number.MAX_SAFE_INTEGER, 0.04, this.#o.rand);
    this.#plannedAt = this.#o.clock.now() + ms;
    this.#plannedDelay = ms;
    return ms;
  }

  #spec(base: Lease): Lease {
    return {
      ...base,
      spec: { ...base.spec, holderIdentity: this.#o.nodeName, leaseDurationSeconds: this.#o.leaseDurationSeconds, renewTime: microTime(this.#o.clock.now()) },
    };
  }

  /** One renewal. Resolves true when the lease was written; never throws. */
  async syncOnce(): Promise<boolean> {
    const { api, nodeName } = this.#o;
    const log = this.#o.logger;
    this.#turnStart = this.#o.clock.now();
    try {
      if (this.#cached) {
        try {
          this.#cached = await api.updateLease(this.#spec(this.#cached));
          return this.#ok();
        } catch (err) {
          // Stale or gone: forget the cache and read again.
          if (!(err instanceof NodeletError) || (err.code !== 'CONFLICT' && err.code !== 'NOT_FOUND')) throw err;
          this.#cached = undefined;
        }
      }
      const existing = await api.getLease(NODE_LEASE_NAMESPACE, nodeName);
      if (existing) {
        this.#cached = await api.updateLease(this.#spec(existing));
        return this.#ok();
      }
      const node = await api.getNode(nodeName);
      if (!node?.metadata?.uid) throw new NodeletError('NOT_FOUND', `node ${nodeName} is not registered yet; the lease waits for it`);
      this.#cached = await api.createLease(
        this.#spec({
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: {
            name: nodeName,
            namespace: NODE_LEASE_NAMESPACE,
            ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: nodeName, uid: node.metadata.uid }],
          },
        }),
      );
      log.info({ lease: `${NODE_LEASE_NAMESPACE}/${nodeName}` }, 'created the node lease');
      return this.#ok();
    } catch (err) {
      this.#failures++;
      this.#o.onRenew?.(false);
      this.#unanswered = unanswered(err);
      if (this.#failures === 1 || this.#failures % 10 === 0) log.warn({ err: errorMessage(err), failures: this.#failures }, `cannot renew the node lease: ${errorMessage(err)}`);
      return false;
    }
  }

  #turnStart = 0;

  #ok(): true {
    if (this.#failures > 0) this.#o.logger.info({ after: this.#failures }, 'node lease renewed again');
    const now = this.#o.clock.now();
    // Late: more than a second past the renew interval. Say where the time went: the turn
    // starting late (the event loop was busy: the timer fired late) or the request.
    const interval = this.#o.leaseDurationSeconds * 250;
    if (this.#failures === 0 && this.#lastRenew > 0 && now - this.#lastRenew > interval + 1000) {
      const startedLateMs = this.#plannedAt > 0 ? Math.max(0, this.#turnStart - this.#plannedAt) : 0;
      this.#o.logger.warn(
        { sinceLastMs: now - this.#lastRenew, startedLateMs, requestMs: now - this.#turnStart, plannedDelayMs: this.#plannedDelay },
        `node lease renewed late: ${now - this.#lastRenew} ms after the last renewal (turn started ${startedLateMs} ms late, the request took ${now - this.#turnStart} ms)`,
      );
    }
    this.#failures = 0;
    this.#lastRenew = now;
    this.#o.onRenew?.(true);
    return true;
  }

}
