/**
 * A list of listeners for one kind of news (a pod's status changed, the runtime changed):
 * what the composition root wires between services built in any order, instead of a
 * callback variable assigned later. `emit` tells every listener, in the order they
 * subscribed; a listener that throws is the emitter's caller's problem, as a direct call.
 */
export class Subscribers<T> {
  readonly #listeners: ((value: T) => void)[] = [];

  /** Adds a listener; returns its removal. */
  subscribe(listener: (value: T) => void): () => void {
    this.#listeners.push(listener);
    return () => {
      const i = this.#listeners.indexOf(listener);
      if (i >= 0) this.#listeners.splice(i, 1);
    };
  }

  emit(value: T): void {
    for (const l of this.#listeners) l(value);
  }
}
