/**
 * The runtime's own change events, so that the pod relist runs when something changed
 * instead of every second (the kubelet's Evented PLEG idea, for the runtimes nodelet meets).
 *
 * Two sources, tried in order on the runtime's socket:
 *   1. CRI `RuntimeService/GetContainerEvents` (server streaming; containerd >= 1.7, CRI-O);
 *   2. containerd's own event service, `containerd.services.events.v1.Events/Subscribe`
 *      (containerd 1.6 answers the first with UNIMPLEMENTED), filtered to the namespace of
 *      its CRI plugin (`k8s.io`).
 * Any event means "look again", and the relist reads what changed; of containerd's events,
 * a container's exit (and an OOM kill before it) is also handed to `onContainerEvent` first
 * (containerd-event.ts): its CRI plugin lists the container exited only once it deleted the
 * task, tens to hundreds of ms after the event, and the relist reads the exit from the event
 * meanwhile.
 *
 * A subscription counts as live once an event arrives, or, for containerd's event service
 * (which publishes every task and container change), once it has stayed open for `settleMs`
 * (a runtime without the method answers UNIMPLEMENTED at once; grpc-go sends no headers
 * before the first event). Going live, and losing the stream, each ask for one relist (what
 * changed meanwhile is not lost). Events are coalesced: the first at once, then at most one `onEvent` per `coalesceMs`. When
 * the runtime has neither source, nothing is live and the relist stays at 1 s; the sources
 * are asked again every `retryUnsupportedMs` (the runtime may have been upgraded).
 *
 * A quiet stream is normal (nothing changes on an idle node); a runtime that hangs with the
 * stream open is not: the channel (grpc-unary.ts) PINGs a connection silent for 5 min while
 * the stream is open and gives it up when the PING is not answered within 20 s, so the
 * stream fails UNAVAILABLE and is handled as any lost subscription here (a relist at once,
 * then a new subscription after the backoff).
 */
import type { Clock } from '../clock.js';
import { errorMessage, isNodeletError } from '../errors.js';
import type { Logger } from '../log.js';
import { Loop } from '../loop.js';
import { containerEvent, type ContainerEvent } from './containerd-event.js';
import { GrpcStatus } from './grpc-status.js';

/** CRI `rpc GetContainerEvents(GetEventsRequest) returns (stream ContainerEventResponse)`; GetEventsRequest is empty. */
export const CRI_EVENTS_PATH = '/runtime.v1.RuntimeService/GetContainerEvents';
/** containerd `rpc Subscribe(SubscribeRequest) returns (stream Envelope)`; SubscribeRequest: `repeated string filters = 1`. */
export const CONTAINERD_EVENTS_PATH = '/containerd.services.events.v1.Events/Subscribe';
/** The namespace containerd's CRI plugin keeps pods and containers in. */
export const CONTAINERD_CRI_NAMESPACE = 'k8s.io';

export type RuntimeEventSource = 'cri' | 'containerd';

/** A server-streaming call on the runtime's socket (CriClient.serverStream). */
export type EventStreamer = (path: string, body: Uint8Array, onMessage: (message: Buffer) => void, signal: AbortSignal) => Promise<void>;

export interface RuntimeEventsOptions {
  stream: EventStreamer;
  /** Something changed in the runtime (coalesced), or events may have been missed. Must not throw. */
  onEvent: () => void;
  /** A container's exit or OOM kill read from a containerd event, told before the onEvent it asks for. Must not throw. */
  onContainerEvent?: (e: ContainerEvent) => void;
  clock: Clock;
  logger: Logger;
  settleMs?: number;
  coalesceMs?: number;
  retryUnsupportedMs?: number;
  maxBackoffMs?: number;
}

/**
 * The SubscribeRequest asking for the CRI plugin's events only: field 1 (`filters`, a
 * string), whose length fits the one-byte varint written here (under 128).
 */
export const CONTAINERD_SUBSCRIBE_REQUEST = ((): Buffer => {
  const filter = Buffer.from(`namespace==${CONTAINERD_CRI_NAMESPACE}`);
  return Buffer.concat([Buffer.from([0x0a, filter.length]), filter]);
})();

const isUnimplemented = (err: unknown): boolean =>
  (err as { code?: unknown })?.code === GrpcStatus.UNIMPLEMENTED || isNodeletError(err, 'UNIMPLEMENTED');

export class RuntimeEvents {
  readonly #o: Required<RuntimeEventsOptions>;
  readonly #loop: Loop;
  #live = false;
  #source: RuntimeEventSource | undefined;
  #delayMs = 0;
  #failures = 0;
  #pending = false;
  /** Events came while a window was open: told at its end. */
  #again = false;
  #unsupportedLogged = false;

  constructor(o: RuntimeEventsOptions) {
    this.#o = { settleMs: 1000, coalesceMs: 200, retryUnsupportedMs: 5 * 60_000, maxBackoffMs: 30_000, onContainerEvent: () => {}, ...o };
    this.#loop = new Loop({ name: 'runtime-events', turn: (signal) => this.#turn(signal), delayMs: () => this.#delayMs, clock: o.clock, logger: o.logger });
  }

  /** Whether a subscription is open now: the relist may then wait for events. */
  get live(): boolean {
    return this.#live;
  }

  /** The source of the open subscription (or the last one). */
  get source(): RuntimeEventSource | undefined {
    return this.#source;
  }

  start(signal?: AbortSignal): void {
    this.#loop.start(signal);
  }

  stop(): Promise<void> {
    return this.#loop.stop();
  }

  /** One subscription, from the first source the runtime has, until it ends. */
  async #turn(signal: AbortSignal): Promise<void> {
    const sources: [RuntimeEventSource, string, Buffer][] = [
      ['cri', CRI_EVENTS_PATH, Buffer.alloc(0)],
      ['containerd', CONTAINERD_EVENTS_PATH, CONTAINERD_SUBSCRIBE_REQUEST],
    ];
    for (const [source, path, body] of sources) {
      try {
        await this.#subscribe(source, path, body, signal);
        // The runtime ended the stream cleanly (a restart): subscribe again soon.
        this.#failures = 0;
        this.#delayMs = this.#o.settleMs;
        return;
      } catch (err) {
        if (signal.aborted) return;
        if (isUnimplemented(err)) continue;
        this.#failures++;
        this.#delayMs = Math.min(this.#o.maxBackoffMs, this.#o.settleMs * 2 ** Math.min(this.#failures - 1, 10));
        this.#o.logger.debug({ source, err: errorMessage(err), retryInMs: this.#delayMs }, `runtime events: ${errorMessage(err)}`);
        return;
      }
    }
    if (!this.#unsupportedLogged) {
      this.#unsupportedLogged = true;
      this.#o.logger.info('runtime events: the runtime has neither CRI GetContainerEvents nor containerd events; the pod relist runs every second');
    }
    this.#delayMs = this.#o.retryUnsupportedMs;
  }

  async #subscribe(source: RuntimeEventSource, path: string, body: Buffer, signal: AbortSignal): Promise<void> {
    const settled = new AbortController();
    const onStop = () => settled.abort();
    signal.addEventListener('abort', onStop, { once: true });
    const goLive = () => {
      if (this.#live) return;
      this.#live = true;
      this.#failures = 0;
      this.#o.logger.info({ source }, `runtime events: subscribed to ${source === 'cri' ? 'CRI GetContainerEvents' : "containerd's event service"}; the pod relist runs on events`);
      this.#source = source;
      this.#changed(); // what changed before the subscription (opens a window: the events with it are told once more at its end)
    };
    // containerd's event service publishes every task and container change: open for a while
    // without a failure is enough. A CRI runtime may accept GetContainerEvents and never send
    // (CRI-O without --enable-pod-events): live at its first event only.
    if (source === 'containerd') void this.#o.clock.sleep(this.#o.settleMs, settled.signal).then(goLive, () => {});
    try {
      await this.#o.stream(path, body, (message) => {
        if (source === 'containerd') this.#containerEvent(message);
        goLive();
        this.#changed();
      }, signal);
    } finally {
      settled.abort();
      signal.removeEventListener('abort', onStop);
      if (this.#live) {
        this.#live = false;
        if (!signal.aborted) {
          this.#o.logger.info({ source }, 'runtime events: the subscription ended; the pod relist runs every second until it is back');
          this.#o.onEvent();
        }
      }
    }
  }

  /** A container's exit or OOM kill in a containerd event, handed on (a listener's failure is logged, never the stream's). */
  #containerEvent(message: Buffer): void {
    const e = containerEvent(message);
    if (!e) return;
    try {
      this.#o.onContainerEvent(e);
    } catch (err) {
      this.#o.logger.error({ err: errorMessage(err), containerId: e.containerId }, `runtime events: container event listener failed: ${errorMessage(err)}`);
    }
  }

  /**
   * The first event after a quiet spell is told at once (a container's exit reaches the pod's
   * status at the runtime's pace); the events that follow within coalesceMs are told once, at
   * its end, and open a new window: at most one onEvent per coalesceMs while events keep coming
   * (a pod start is a dozen events).
   */
  #changed(): void {
    if (this.#pending) {
      this.#again = true;
      return;
    }
    this.#pending = true;
    this.#o.onEvent();
    void this.#o.clock.sleep(this.#o.coalesceMs).then(
      () => {
        this.#pending = false;
        if (!this.#again) return;
        this.#again = false;
        this.#changed();
      },
      () => (this.#pending = false),
    );
  }
}
