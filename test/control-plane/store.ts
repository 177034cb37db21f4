/**
 * The in-memory store: one global resourceVersion counter for every resource type, the
 * objects, and a history of changes kept for a time window. The history serves watches
 * from a past version and lists at an exact past version (the state at version R is the
 * current state with every later change undone); versions older than the window are gone
 * (410).
 */
import type { Clock } from '../../src/clock.js';

export type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface StoreEvent {
  rv: number;
  type: EventType;
  resource: string;
  namespace: string;
  name: string;
  /** The object after the change (for DELETED: the last state, carrying the deletion's version). */
  object: Obj;
  /** The object before the change (undefined for ADDED). */
  prev: Obj | undefined;
  time: number;
}

/** Thrown when a version is older than the history kept. */
export class GoneError extends Error {
  constructor(readonly rv: number, readonly oldest: number) {
    super(`too old resource version: ${rv} (${oldest})`);
  }
}

function key(resource: string, namespace: string, name: string): string {
  return `${resource}\u0000${namespace}\u0000${name}`;
}

export class Store {
  private rv = 1;
  private readonly objects = new Map<string, Obj>();
  private history: StoreEvent[] = [];
  /** Versions below this are no longer answerable from history. */
  private compactedRv = 1;
  private readonly listeners = new Set<(ev: StoreEvent) => void>();

  constructor(
    private readonly clock: Clock,
    private readonly windowMs: number,
  ) {}

  get currentRv(): number {
    return this.rv;
  }

  get oldestRv(): number {
    this.prune();
    return this.compactedRv;
  }

  get(resource: string, namespace: string, name: string): Obj | undefined {
    const o = this.objects.get(key(resource, namespace, name));
    return o === undefined ? undefined : structuredClone(o);
  }

  /** Every object of a resource type (in a namespace when given) at the current version, sorted by namespace and name. */
  list(resource: string, namespace?: string): Obj[] {
    const out: Obj[] = [];
    for (const [k, o] of this.objects) {
      const [r, ns] = k.split('\u0000');
      if (r === resource && (namespace === undefined || namespace === ns)) out.push(o);
    }
    return sortObjects(out).map((o) => structuredClone(o));
  }

  /** The objects of a resource type as they were at version `at` (throws GoneError when that is older than the history). */
  listAt(resource: string, namespace: string | undefined, at: number): Obj[] {
    if (at >= this.rv) return this.list(resource, namespace);
    this.prune();
    if (at < this.compactedRv) throw new GoneError(at, this.compactedRv);
    const state = new Map<string, Obj>();
    for (const [k, o] of this.objects) state.set(k, o);
    for (let i = this.history.length - 1; i >= 0 && this.history[i]!.rv > at; i--) {
      const ev = this.history[i]!;
      const k = key(ev.resource, ev.namespace, ev.name);
      if (ev.prev === undefined) state.delete(k);
      else state.set(k, ev.prev);
    }
    const out: Obj[] = [];
    for (const [k, o] of state) {
      const [r, ns] = k.split('\u0000');
      if (r === resource && (namespace === undefined || namespace === ns)) out.push(o);
    }
    return sortObjects(out).map((o) => structuredClone(o));
  }

  /** Events after version `after`, oldest first (throws GoneError when some were already forgotten). */
  eventsAfter(after: number): StoreEvent[] {
    this.prune();
    if (after < this.compactedRv) throw new GoneError(after, this.compactedRv);
    const out: StoreEvent[] = [];
    for (const ev of this.history) if (ev.rv > after) out.push(ev);
    return out;
  }

  subscribe(fn: (ev: StoreEvent) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Stores a new or changed object under a fresh version; returns the stored copy. */
  put(resource: string, namespace: string, name: string, obj: Obj): Obj {
    const k = key(resource, namespace, name);
    const prev = this.objects.get(k);
    const rv = ++this.rv;
    const stored = structuredClone(obj);
    stored['metadata'] = { ...(stored['metadata'] ?? {}), resourceVersion: String(rv) };
    this.objects.set(k, stored);
    this.record({ rv, type: prev ? 'MODIFIED' : 'ADDED', resource, namespace, name, object: stored, prev, time: this.clock.now() });
    return structuredClone(stored);
  }

  /** Removes an object; the DELETED event carries its last state under the deletion's version. */
  remove(resource: string, namespace: string, name: string): Obj | undefined {
    const k = key(resource, namespace, name);
    const prev = this.objects.get(k);
    if (!prev) return undefined;
    this.objects.delete(k);
    const rv = ++this.rv;
    const last = structuredClone(prev);
    last['metadata'] = { ...last['metadata'], resourceVersion: String(rv) };
    this.record({ rv, type: 'DELETED', resource, namespace, name, object: last, prev, time: this.clock.now() });
    return structuredClone(last);
  }

  /** Forgets all history up to now: every version before the current one answers 410. */
  compact(): void {
    this.history = [];
    this.compactedRv = this.rv;
  }

  /** Resolves when the store has reached version `rv` or after `ms` (then false). */
  waitFor(rv: number, ms: number): Promise<boolean> {
    if (this.rv >= rv) return Promise.resolve(true);
    return new Promise((resolve) => {
      const off = this.subscribe(() => {
        if (this.rv >= rv) {
          clearTimeout(t);
          off();
          resolve(true);
        }
      });
      const t = setTimeout(() => {
        off();
        resolve(this.rv >= rv);
      }, ms);
    });
  }

  private record(ev: StoreEvent): void {
    this.history.push(ev);
    this.prune();
    for (const l of [...this.listeners]) l(ev);
  }

  private prune(): void {
    const cutoff = this.clock.now() - this.windowMs;
    let n = 0;
    while (n < this.history.length && this.history[n]!.time < cutoff) n++;
    if (n > 0) {
      this.compactedRv = Math.max(this.compactedRv, this.history[n - 1]!.rv);
      this.history = this.history.slice(n);
    }
  }
}

export function sortKey(o: Obj): string {
  return `${o['metadata']?.['namespace'] ?? ''}\u0000${o['metadata']?.['name'] ?? ''}`;
}

function sortObjects(objs: Obj[]): Obj[] {
  return objs.sort((a, b) => (sortKey(a) < sortKey(b) ? -1 : sortKey(a) > sortKey(b) ? 1 : 0));
}
