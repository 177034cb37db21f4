/**
 * One lifetime, many holders: each long-lived part gets an AbortSignal of its own, and
 * `abort()` aborts them all.
 *
 * Why not one AbortSignal for all: every part adds an 'abort' listener to the signal it is
 * given (a Loop stops on it), and Node warns once a signal has more than 10 of them
 * (`MaxListenersExceededWarning: Possible EventTarget memory leak detected. 11 abort
 * listeners added to [AbortSignal]`), which a connected daemon reached with its 11th part.
 * Here the fan-out is a list of controllers, not listeners: each signal handed out carries
 * only its own holder's listeners, whatever the number of parts.
 */
export class Lifetime {
  readonly #children: AbortController[] = [];
  #aborted = false;
  #reason: unknown;

  get aborted(): boolean {
    return this.#aborted;
  }

  /** A new signal, aborted with the others (at once if the lifetime is already over). */
  signal(): AbortSignal {
    const c = new AbortController();
    if (this.#aborted) c.abort(this.#reason);
    else this.#children.push(c);
    return c.signal;
  }

  /** Aborts every signal handed out, and those asked for later. Idempotent. */
  abort(reason?: unknown): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#reason = reason;
    for (const c of this.#children.splice(0)) c.abort(reason);
  }
}
