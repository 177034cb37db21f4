/**
 * Deliveries of a changing set, coalesced and spaced (connected mode's pods: a burst of
 * watch events becomes a few deliveries of the full set, src/controlplane/adapter.ts).
 */
/** Runs `fn` after `ms` (0: on the next turn of the event loop, after the I/O in hand); returns its cancel. */
export type Schedule = (fn: () => void, ms: number) => () => void;

const realSchedule: Schedule = (fn, ms) => {
  if (ms <= 0) {
    const h = setImmediate(fn);
    return () => clearImmediate(h);
  }
  const h = setTimeout(fn, ms);
  return () => clearTimeout(h);
};

/**
 * Coalesces requests into deliveries: a request after a quiet spell is delivered on the next
 * turn (the rest of the chunk in hand joins it); requests within `gapMs` of the last delivery
 * wait for the gap to end, all of them one delivery. At most one delivery is pending.
 */
export class ThrottledDelivery {
  readonly #deliver: () => void;
  readonly #gapMs: number;
  readonly #now: () => number;
  readonly #schedule: Schedule;
  #cancel: (() => void) | undefined;
  #last = -Infinity;

  constructor(deliver: () => void, o: { gapMs: number; now?: () => number; schedule?: Schedule }) {
    this.#deliver = deliver;
    this.#gapMs = o.gapMs;
    this.#now = o.now ?? (() => performance.now());
    this.#schedule = o.schedule ?? realSchedule;
  }

  get pending(): boolean {
    return this.#cancel !== undefined;
  }

  request(): void {
    if (this.#cancel) return;
    this.#cancel = this.#schedule(() => this.flush(), this.#last + this.#gapMs - this.#now());
  }

  /** Delivers now (a pending delivery is cancelled: this is it). */
  flush(): void {
    this.cancel();
    this.#last = this.#now();
    this.#deliver();
  }

  cancel(): void {
    this.#cancel?.();
    this.#cancel = undefined;
  }
}
