/**
 * A reflector keeps a consumer in step with one resource type: it lists (in chunks of
 * `limit` with `continue`), hands the consumer the full set (`replace`), then watches from
 * the list's resourceVersion with bookmarks and hands on `add`/`update`/`delete`.
 *
 * - A broken or ended watch resumes from the last resourceVersion seen (bookmarks included).
 * - 410 Gone (history compacted, continue token expired) lists again and emits a `replace`
 *   whose items are the correct final state (objects deleted during the gap are absent).
 * - Events are deduplicated against the store (resourceVersions compared for equality only,
 *   as the spec requires): a replayed event the store already reflects is not passed on.
 * - Faults never escape: each is logged and retried after a bounded exponential backoff with
 *   jitter on the injected Clock (at least the server's Retry-After, capped by the maximum). A consumer that throws is logged; the reflector continues.
 * - An answer past the client's bounds (a list page, a watch event: client.ts BODY_LIMITS) is
 *   logged as an error naming the resource and the bound, and retried with the same backoff:
 *   the watch resumes, or the list is asked again, once the server behaves.
 *
 * Lifecycle: construct (starts nothing), `start()`, `stop()`. `healthy()` and
 * `lastSyncTime` serve health checks; `waitForSync()` resolves after the first replace.
 */
import { backoffDelay, realClock, type Clock } from '../clock.js';
import { Loop } from '../loop.js';
import { errorMessage, isNodeletError, UNANSWERED_RETRY_CAP_MS, unanswered } from '../errors.js';
import type { Logger } from '../log.js';
import { isTooLarge, type ControlPlaneClient, type KubeObject, type ResourceType, type WatchEvent } from './client.js';

export type ReflectorEvent<T> =
  | { type: 'replace'; items: T[]; resourceVersion: string }
  | { type: 'add'; object: T }
  | { type: 'update'; object: T; old: T }
  | { type: 'delete'; object: T };

export function objectKey(o: KubeObject): string {
  return `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;
}

/**
 * The pure part: the store and the decision what a watch event means for the consumer.
 * Pure and synchronous; tests drive it directly.
 */
export class ReflectorState<T extends KubeObject> {
  readonly #items = new Map<string, T>();
  readonly #transform: (o: T) => T;
  #rv = '';

  /** `transform`: applied to every object before it is stored and passed on (client-go's SetTransform), e.g. to drop fields nobody reads. */
  constructor(transform: (o: T) => T = (o) => o) {
    this.#transform = transform;
  }

  /** The resourceVersion to resume a watch from ('' before the first list). */
  get resourceVersion(): string {
    return this.#rv;
  }

  get size(): number {
    return this.#items.size;
  }

  items(): T[] {
    return [...this.#items.values()];
  }

  get(key: string): T | undefined {
    return this.#items.get(key);
  }

  /** A fresh list: the store becomes exactly `items` at `resourceVersion`. */
  replace(items: T[], resourceVersion: string): ReflectorEvent<T> {
    this.#items.clear();
    for (const it of items) this.#items.set(objectKey(it), this.#transform(it));
    this.#rv = resourceVersion;
    return { type: 'replace', items: this.items(), resourceVersion };
  }

  /**
   * One watch event -> the consumer's event, or undefined when there is nothing to tell
   * (a bookmark, or a replay of a change the store already holds). ERROR events are the
   * client's business (it throws them) and are ignored here.
   */
  apply(ev: WatchEvent<T>): ReflectorEvent<T> | undefined {
    const rv = ev.object?.metadata?.resourceVersion;
    if (ev.type === 'BOOKMARK') {
      if (rv) this.#rv = rv;
      return undefined;
    }
    if (ev.type !== 'ADDED' && ev.type !== 'MODIFIED' && ev.type !== 'DELETED') return undefined;
    const key = objectKey(ev.object);
    const cur = this.#items.get(key);
    if (rv) this.#rv = rv;
    if (ev.type === 'DELETED') {
      if (!cur) return undefined;
      this.#items.delete(key);
      return { type: 'delete', object: ev.object };
    }
    if (cur && rv !== undefined && cur.metadata?.resourceVersion === rv) return undefined;
    const object = this.#transform(ev.object);
    this.#items.set(key, object);
    return cur ? { type: 'update', object, old: cur } : { type: 'add', object };
  }
}

/** What the reflector needs of a client: ControlPlaneClient, or a fake with the same methods. */
export type ReflectorClient = Pick<ControlPlaneClient, 'listAll' | 'watch'>;

export interface ReflectorOptions<T extends KubeObject> {
  client: ReflectorClient;
  type: ResourceType;
  /** Receives every change, in order. Called synchronously from the loop. */
  onEvent: (ev: ReflectorEvent<T>) => void;
  logger: Logger;
  clock?: Clock;
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Page size of the list (default 500). */
  limit?: number;
  /** Backoff after failures: base doubling to max, +/-20 % jitter (default 200 ms .. 30 s). */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** A watch silent this long (no event, no bookmark) is restarted (default 5 min; 0: never). */
  idleTimeoutMs?: number;
  /** healthy() turns false after this many consecutive failures (default 3). */
  unhealthyAfterFailures?: number;
  /** Jitter source (tests). */
  random?: () => number;
  /** Applied to every listed or watched object before it is stored (see ReflectorState). */
  transform?: (o: T) => T;
}

/**
 * A transform that drops `metadata.managedFields` (server-side apply's record of who owns
 * which field: per writer a tree of every field it set, often larger than the object's
 * spec), which nodelet never reads. The object is the one just parsed: changed in place.
 */
export function dropManagedFields<T extends KubeObject>(o: T): T {
  const md = o.metadata as { managedFields?: unknown } | undefined;
  if (md?.managedFields !== undefined) delete md.managedFields;
  return o;
}

export class Reflector<T extends KubeObject = KubeObject> {
  readonly state: ReflectorState<T>;
  readonly #o: ReflectorOptions<T>;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #loop: Loop;
  #failures = 0;
  #needList = true;
  #gones = 0;
  #again = false;
  #retryAfterMs = 0;
  /** The last failure got no answer at all from the server (errors.ts unanswered). */
  #unanswered = false;
  #synced = false;
  #syncWaiters: Array<() => void> = [];
  /** Clock time of the last successful list, event or bookmark (0: never). */
  lastSyncTime = 0;
  /** Number of lists done (the first one and every relist). */
  lists = 0;
  /** Page size of the next list: the configured one, or smaller once a page was too large (client.ts listAll). */
  #limit: number;

  constructor(o: ReflectorOptions<T>) {
    this.#o = o;
    this.state = new ReflectorState<T>(o.transform);
    this.#limit = o.limit ?? 500;
    this.#clock = o.clock ?? realClock;
    this.#log = o.logger.child({ component: 'reflector', resource: o.type.resource });
    this.#loop = new Loop({ name: 'reflector', turn: (signal) => this.#turn(signal), delayMs: () => this.#nextDelayMs(), clock: this.#clock, logger: this.#log });
  }

  /** True after the first list was delivered and while failures stay below the threshold. */
  healthy(): boolean {
    return this.#synced && this.#failures < (this.#o.unhealthyAfterFailures ?? 3);
  }

  get hasSynced(): boolean {
    return this.#synced;
  }

  /** Consecutive failures since the last success. */
  get failures(): number {
    return this.#failures;
  }

  /** Resolves once the first replace was delivered. */
  waitForSync(): Promise<void> {
    if (this.#synced) return Promise.resolve();
    return new Promise((resolve) => this.#syncWaiters.push(resolve));
  }

  /** Starts the loop (it also ends when `signal` aborts); idempotent. */
  start(signal?: AbortSignal): void {
    this.#loop.start(signal);
  }

  /** Stops the loop and waits for it to end; idempotent. */
  stop(): Promise<void> {
    return this.#loop.stop();
  }

  #emit(ev: ReflectorEvent<T>): void {
    try {
      this.#o.onEvent(ev);
    } catch (err) {
      this.#log.error({ err: errorMessage(err), event: ev.type }, 'consumer failed on an event; continuing');
    }
  }

  async #list(signal: AbortSignal): Promise<void> {
    const { items, resourceVersion, limit } = await this.#o.client.listAll<T>(this.#o.type, {
      ...(this.#o.namespace ? { namespace: this.#o.namespace } : {}),
      ...(this.#o.labelSelector ? { labelSelector: this.#o.labelSelector } : {}),
      ...(this.#o.fieldSelector ? { fieldSelector: this.#o.fieldSelector } : {}),
      limit: this.#limit,
      signal,
    });
    // Pages were too large for the bound: the next lists ask for the smaller pages at once.
    if (limit !== undefined && limit < this.#limit) {
      this.#log.warn({ limit, was: this.#limit }, `pages of ${this.#limit} ${this.#o.type.resource} were larger than the bound of a list page; listing ${limit} a page from now on`);
      this.#limit = limit;
    }
    this.#emit(this.state.replace(items, resourceVersion));
    this.lists++;
    // One line per list: a relist after an outage (watch history lost) shows here, a resumed watch does not.
    this.#log.info({ lists: this.lists, items: items.length, resourceVersion }, `listed ${this.#o.type.resource} (list ${this.lists})`);
    this.#succeeded();
    if (!this.#synced) {
      this.#synced = true;
      for (const w of this.#syncWaiters.splice(0)) w();
    }
  }

  #succeeded(): void {
    this.#failures = 0;
    this.lastSyncTime = this.#clock.now();
  }

  /** Watches from the store's resourceVersion until the stream ends (returns) or fails (throws). Returns the number of events received. */
  async #watch(signal: AbortSignal): Promise<number> {
    const idleMs = this.#o.idleTimeoutMs ?? 300_000;
    // One controller that both stop() and the idle timer abort.
    const ctl = new AbortController();
    const both = ctl.signal;
    const onStop = () => ctl.abort(signal.reason);
    // stop() may have come while the list was in flight: an aborted signal fires no event.
    if (signal.aborted) onStop();
    else signal.addEventListener('abort', onStop, { once: true });
    let last = this.#clock.now();
    let idled = false;
    // Idle timer on the injected clock: restart a watch that has gone silent.
    const idle = (async () => {
      while (idleMs > 0 && !both.aborted) {
        const wait = last + idleMs - this.#clock.now();
        if (wait <= 0) {
          this.#log.info({ idleMs }, 'watch silent too long; restarting it');
          idled = true;
          ctl.abort();
          return;
        }
        await this.#clock.sleep(wait, both).catch(() => undefined);
      }
    })();
    let received = 0;
    try {
      const events = await this.#o.client.watch<T>(this.#o.type, {
        ...(this.#o.namespace ? { namespace: this.#o.namespace } : {}),
        ...(this.#o.labelSelector ? { labelSelector: this.#o.labelSelector } : {}),
        ...(this.#o.fieldSelector ? { fieldSelector: this.#o.fieldSelector } : {}),
        resourceVersion: this.state.resourceVersion,
        allowWatchBookmarks: true,
        signal: both,
      });
      for await (const ev of events) {
        received++;
        last = this.#clock.now();
        const out = this.state.apply(ev);
        this.#succeeded();
        if (out) this.#emit(out);
      }
    } catch (err) {
      if (idled && !signal.aborted) return received; // silent too long: resume
      throw err;
    } finally {
      signal.removeEventListener('abort', onStop);
      ctl.abort();
      await idle;
    }
    return received;
  }

  /**
   * One turn of the loop: a list when needed, then one watch until the server closes it.
   * Faults are logged and counted here; the loop's delay is the backoff they decide.
   */
  async #turn(signal: AbortSignal): Promise<void> {
    this.#retryAfterMs = 0;
    this.#again = false;
    this.#unanswered = false;
    try {
      if (this.#needList) {
        await this.#list(signal);
        this.#needList = false;
        if (signal.aborted) return;
      }
      const received = await this.#watch(signal);
      // The server closed the stream: resume from the last version seen. A stream that
      // closed without saying anything counts as a failure, so a server that keeps doing
      // that is not hammered.
      if (received > 0) {
        this.#gones = 0;
        this.#again = true;
        return;
      }
      if (signal.aborted) return;
      this.#failures++;
    } catch (err) {
      if (signal.aborted) return;
      if (isNodeletError(err, 'GONE')) {
        this.#log.info({ resourceVersion: this.state.resourceVersion, err: errorMessage(err) }, 'resourceVersion expired; listing again');
        this.#needList = true;
        // One relist at once; a server answering 410 again and again gets the backoff.
        if (++this.#gones === 1) {
          this.#again = true;
          return;
        }
      }
      this.#failures++;
      this.#unanswered = unanswered(err);
      // 429 and 504 carry Retry-After: wait at least that long (still capped by the maximum).
      const ra = isNodeletError(err) ? err.details.retryAfterSeconds : undefined;
      if (typeof ra === 'number') this.#retryAfterMs = ra * 1000;
      if (isTooLarge(err)) {
        // Not a passing fault: the server sends more than any real object or page can hold.
        // An error each time (the backoff spaces them), naming the resource and the bound.
        this.#log.error({ err: errorMessage(err), failures: this.#failures, limitBytes: err.details.limitBytes }, `answer too large: ${errorMessage(err)}; retrying`);
      } else if (this.#failures === 1 || this.#failures % 10 === 0) {
        this.#log.warn({ err: errorMessage(err), failures: this.#failures }, 'control plane fault; retrying');
      }
    }
  }

  /**
   * After a turn: 0 to go on at once, else the backoff (at least a Retry-After, capped);
   * a server that did not answer at all is asked again within a second.
   */
  #nextDelayMs(): number {
    if (this.#again) return 0;
    const maxMs = Math.min(this.#o.backoffMaxMs ?? 30_000, this.#unanswered ? UNANSWERED_RETRY_CAP_MS : Infinity);
    return Math.max(backoffDelay(this.#failures - 1, this.#o.backoffBaseMs ?? 200, maxMs, 0.2, this.#o.random), Math.min(this.#retryAfterMs, maxMs));
  }
}
