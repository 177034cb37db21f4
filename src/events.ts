/**
 * Events, as `kubectl describe pod` shows them: core/v1 Events about pods (Pulled, Created,
 * Started, Killing, BackOff, Failed, FailedCreatePodSandBox) and the node (Starting,
 * NodeReady, NodeNotReady), from source `kubelet` on this host.
 *
 * Emitting never blocks or fails the caller: events go to a bounded queue, and one writer
 * sends them in order (their API client holds them to `eventRecordQPS`/`eventBurst`,
 * connected.ts). The same event again (same object, field path, type,
 * reason and message) within the aggregation window is a patch of the first one's `count`
 * and `lastTimestamp`, not a new object, as client-go's correlator does.
 *
 * As client-go's recorder: an event the server answered with an error (a 404 because its
 * namespace is gone, a 422, a 403) is dropped at once with a log line, never retried; a
 * write that got no answer (connection refused or reset, a timeout) or a 429/5xx with
 * Retry-After is retried with backoff, a few times, then dropped with a log line. Unlike
 * client-go's, whose sink sleeps between the tries of one event, an event waiting for its
 * retry waits aside: the events after it go on. Standalone, there is nowhere to send them:
 * `noEvents`.
 *
 * Every event taken is logged at debug (`Event occurred`, as the kubelet logs each event at
 * -v=3), and every event dropped is logged with the same fields (refused or after its
 * attempts at info; queue full or recorder stopped at debug), so what was meant to be sent
 * can be checked against what the API holds. A retried create keeps the event's name, and an
 * AlreadyExists answer means an earlier attempt got through (its answer was lost): the
 * event is then sent, not created twice.
 */
import type { Event as CoreEvent, ObjectReference } from 'kubernetes-types/core/v1.js';
import { backoffDelay, realClock, type Clock } from './clock.js';
import { errorMessage, isNodeletError, NodeletError } from './errors.js';
import type { Logger } from './log.js';

export type EventType = 'Normal' | 'Warning';

export interface EventSink {
  emit(ref: ObjectReference, type: EventType, reason: string, message: string): void;
}

export const noEvents: EventSink = { emit() {} };

export interface EventApi {
  create(event: CoreEvent): Promise<void>;
  /** JSON merge patch of `count` and `lastTimestamp`. */
  patch(namespace: string, name: string, patch: { count: number; lastTimestamp: string }): Promise<void>;
}

export interface EventRecorderOptions {
  api: EventApi;
  /** This node's name: `source.host` and `reportingInstance`. */
  host: string;
  logger: Logger;
  clock?: Clock;
  /** Events waiting to be sent before the oldest are dropped (default 1000). */
  maxQueue?: number;
  /** How long an event aggregates its repeats (default 10 min, client-go's). */
  aggregateWindowMs?: number;
  /** Attempts per event that got no answer (default 3; the kubelet's client-go: 12). */
  attempts?: number;
}

interface Pending {
  ref: ObjectReference;
  type: EventType;
  reason: string;
  message: string;
  at: number;
  tries: number;
  /** While waiting for a retry: when it may be tried again. */
  notBefore?: number;
  /** The Event object's name, fixed at the first create attempt so that a retry cannot make a second object. */
  name?: string;
}

interface Sent {
  namespace: string;
  name: string;
  count: number;
  first: number;
}

const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

export class ApiEventRecorder implements EventSink {
  readonly #o: Required<EventRecorderOptions>;
  /** Events not yet tried, in order. */
  readonly #queue: Pending[] = [];
  /** Events waiting out the backoff before their next try, in the order they failed. */
  readonly #retries: Pending[] = [];
  readonly #sent = new Map<string, Sent>();
  #flushing: Promise<void> | undefined;
  /** True from the start of a flush until it finds nothing left to send (set and cleared synchronously). */
  #running = false;
  /** Ends the flush's wait for a retry: a new event to send, or stop(). */
  #wake: AbortController | undefined;
  #dropped = 0;
  #seq = 0;
  #stopped = false;

  constructor(o: EventRecorderOptions) {
    this.#o = { clock: realClock, maxQueue: 1000, aggregateWindowMs: 600_000, attempts: 3, ...o };
  }

  emit(ref: ObjectReference, type: EventType, reason: string, message: string): void {
    const e: Pending = { ref, type, reason, message, at: this.#o.clock.now(), tries: 0 };
    this.#o.logger.debug(eventFields(e), 'Event occurred');
    if (this.#stopped) {
      this.#o.logger.debug(eventFields(e), 'event dropped: the recorder is stopped');
      return;
    }
    if (this.#queue.length + this.#retries.length >= this.#o.maxQueue) {
      // The oldest waiting: a retry (it failed before anything now queued was emitted), else the queue's head.
      const oldest = (this.#retries.length ? this.#retries : this.#queue).shift()!;
      if (this.#dropped++ === 0) this.#o.logger.warn({ maxQueue: this.#o.maxQueue }, 'event queue full: dropping the oldest events');
      this.#o.logger.debug(eventFields(oldest), 'event dropped: queue full');
    }
    this.#queue.push(e);
    // #running is cleared by the flush in the same turn as it finds nothing to send, so an
    // event queued at any later moment starts a new flush (a flag cleared in a `finally`
    // callback, a microtask later, left such an event waiting for the next emit).
    if (!this.#running) {
      this.#running = true;
      this.#flushing = this.#flush();
    } else this.#wake?.abort();
  }

  /** Resolves when nothing is left to send, retries included (tests, shutdown). */
  async flushed(): Promise<void> {
    while (this.#running) await this.#flushing;
  }

  /** Stops taking events; sends what is queued, for at most `deadlineMs`; retries still waiting are dropped. */
  async stop(deadlineMs = 2000): Promise<void> {
    this.#stopped = true;
    this.#wake?.abort();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.flushed(), new Promise<void>((r) => (timer = setTimeout(r, deadlineMs)))]);
    clearTimeout(timer);
  }

  async #flush(): Promise<void> {
    // Always called with an event queued, so the first await comes before #running is cleared.
    // The event in flight is off the queue, so a full queue drops the oldest waiting one, never it.
    for (;;) {
      const e = this.#queue.shift() ?? this.#dueRetry();
      if (e) {
        await this.#attempt(e);
        continue;
      }
      if (!this.#retries.length) break;
      if (this.#stopped) {
        for (const r of this.#retries.splice(0)) this.#o.logger.debug(eventFields(r), 'event dropped: the recorder is stopped');
        break;
      }
      const wake = (this.#wake = new AbortController());
      const due = Math.min(...this.#retries.map((r) => r.notBefore!));
      await this.#o.clock.sleep(Math.max(0, due - this.#o.clock.now()), wake.signal).catch(() => undefined);
      this.#wake = undefined;
    }
    this.#running = false;
    if (this.#dropped > 1) this.#o.logger.warn({ dropped: this.#dropped }, `${this.#dropped} events were dropped (queue full)`);
    this.#dropped = 0;
  }

  /** The first retry whose backoff is over, taken off the list. */
  #dueRetry(): Pending | undefined {
    const now = this.#o.clock.now();
    const i = this.#retries.findIndex((r) => r.notBefore! <= now);
    return i < 0 ? undefined : this.#retries.splice(i, 1)[0];
  }

  async #attempt(e: Pending): Promise<void> {
    try {
      await this.#send(e);
    } catch (err) {
      e.tries++;
      const msg = errorMessage(err);
      if (refusedByServer(err)) {
        this.#o.logger.info({ ...eventFields(e), err: msg }, `event dropped: refused by the server: ${msg}`);
      } else if (e.tries >= this.#o.attempts) {
        this.#o.logger.info({ ...eventFields(e), err: msg }, `event dropped after ${e.tries} attempts: ${msg}`);
      } else {
        const retryAfterMs = err instanceof NodeletError && typeof err.details.retryAfterSeconds === 'number' ? err.details.retryAfterSeconds * 1000 : 0;
        e.notBefore = this.#o.clock.now() + Math.max(retryAfterMs, backoffDelay(e.tries, 200, 5_000));
        this.#retries.push(e);
      }
    }
  }

  async #send(e: Pending): Promise<void> {
    const key = [e.ref.uid, e.ref.fieldPath ?? '', e.type, e.reason, e.message].join('\0');
    const prev = this.#sent.get(key);
    if (prev && e.at - prev.first < this.#o.aggregateWindowMs) {
      try {
        await this.#o.api.patch(prev.namespace, prev.name, { count: prev.count + 1, lastTimestamp: iso(e.at) });
        prev.count++;
        return;
      } catch (err) {
        // The first one is gone (events expire in the API): this one starts a new series.
        if (!(err instanceof NodeletError && err.code === 'NOT_FOUND')) throw err;
        this.#sent.delete(key);
      }
    }
    const namespace = e.ref.namespace || 'default';
    // client-go's naming: <object>.<unix nanos in hex>; the sequence keeps two in one millisecond apart.
    const name = (e.name ??= `${e.ref.name}.${(BigInt(e.at) * 1_000_000n + BigInt(this.#seq++ % 1_000_000)).toString(16)}`);
    await this.#create({
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name, namespace },
      involvedObject: e.ref,
      reason: e.reason,
      message: e.message,
      type: e.type,
      source: { component: 'kubelet', host: this.#o.host },
      firstTimestamp: iso(e.at),
      lastTimestamp: iso(e.at),
      count: 1,
      reportingComponent: 'kubelet',
      reportingInstance: this.#o.host,
    });
    this.#sent.set(key, { namespace, name, count: 1, first: e.at });
    // Forget aggregation keys past their window, so the map stays bounded by the event rate.
    if (this.#sent.size > 4096) for (const [k, s] of this.#sent) if (e.at - s.first >= this.#o.aggregateWindowMs) this.#sent.delete(k);
  }

  /** Creates the event; AlreadyExists means an earlier attempt with this name got through. */
  async #create(event: CoreEvent): Promise<void> {
    try {
      await this.#o.api.create(event);
    } catch (err) {
      if (!isNodeletError(err, 'ALREADY_EXISTS')) throw err;
    }
  }
}

/**
 * client-go's recorder drops, without retrying, an event whose write the server answered
 * with an error (a StatusError); its REST client has already retried a 429 or 5xx that
 * carried Retry-After, which nodelet's client does not, so those count as transient here.
 */
function refusedByServer(err: unknown): boolean {
  if (!(err instanceof NodeletError) || typeof err.details.status !== 'number') return false;
  const status = err.details.status;
  return !((status === 429 || status >= 500) && err.details.retryAfterSeconds !== undefined);
}

/** The fields an event's log lines carry (as the kubelet's `Event occurred`). */
function eventFields(e: Pending): Record<string, string | undefined> {
  return { object: `${e.ref.namespace ?? ''}/${e.ref.name}`, uid: e.ref.uid, fieldPath: e.ref.fieldPath, kind: e.ref.kind, apiVersion: e.ref.apiVersion, type: e.type, reason: e.reason, message: e.message };
}

/** The reference to a pod (and one of its containers) that events are about. */
export function podRef(pod: { metadata?: { name?: string; namespace?: string; uid?: string; resourceVersion?: string } }, container?: { name: string; init?: boolean; ephemeral?: boolean }): ObjectReference {
  const m = pod.metadata ?? {};
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    name: m.name ?? '',
    namespace: m.namespace ?? 'default',
    ...(m.uid ? { uid: m.uid } : {}),
    ...(container ? { fieldPath: `spec.${container.init ? 'initContainers' : container.ephemeral ? 'ephemeralContainers' : 'containers'}{${container.name}}` } : {}),
  };
}

/** The reference node events are about; as the kubelet's, its UID is the node's name. */
export function nodeRef(nodeName: string): ObjectReference {
  return { kind: 'Node', apiVersion: 'v1', name: nodeName, uid: nodeName };
}
