/**
 * The in-memory store: one global resourceVersion counter for every resource type, the
 * objects, and a history of changes kept for a time window. The history serves watches
 * from a past version and lists at an exact past version (the state at version R is the
 * current state with every later change undone); versions older than the window are gone
 * (410).
 *
 * Stored objects are deep-frozen and shared (issue 26): lists, watch events and `put`/`remove`
 * hand out the stored objects themselves, never copies, and each one's JSON encoding is made
 * once (`encodeJson`) and reused by every list and watch that sends it. A list of twenty 1 MB
 * pods thus costs no cloning at all. `get` returns a mutable copy for read-modify-write.
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

  /** A mutable copy of the stored object. */
  get(resource: string, namespace: string, name: string): Obj | undefined {
    const o = this.objects.get(key(resource, namespace, name));
    return o === undefined ? undefined : (JSON.parse(encodeJson(o)) as Obj);
  }

  /** Every object of a resource type (in a namespace when given) at the current version, sorted by namespace and name. Frozen, shared: never mutate. */
  list(resource: string, namespace?: string): Obj[] {
    const out: Obj[] = [];
    for (const [k, o] of this.objects) {
      const [r, ns] = k.split('\u0000');
      if (r === resource && (namespace === undefined || namespace === ns)) out.push(o);
    }
    return sortObjects(out);
  }

  /** The objects of a resource type as they were at version `at` (throws GoneError when that is older than the history). Frozen, shared. */
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
    return sortObjects(out);
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

  /**
   * Stores a copy of a new or changed object under a fresh version; returns the stored object
   * (frozen). The copy is made through its JSON encoding, which is kept as the object's.
   */
  put(resource: string, namespace: string, name: string, obj: Obj): Obj {
    const k = key(resource, namespace, name);
    const prev = this.objects.get(k);
    const rv = ++this.rv;
    // One stringify gives both encodings: the list item's (no apiVersion, kind) and, with them
    // put first, the object's; lists and watches then never encode a large object on demand.
    const { apiVersion, kind, ...rest } = obj;
    const item = JSON.stringify({ ...rest, metadata: { ...(obj['metadata'] ?? {}), resourceVersion: String(rv) } });
    const typeMeta = [apiVersion === undefined ? '' : `"apiVersion":${JSON.stringify(apiVersion)}`, kind === undefined ? '' : `"kind":${JSON.stringify(kind)}`].filter((x) => x !== '').join(',');
    const text = typeMeta === '' ? item : `{${typeMeta},${item.slice(1)}`;
    const stored = deepFreeze(JSON.parse(text) as Obj);
    encodings.set(stored, text);
    itemEncodings.set(stored, item);
    this.objects.set(k, stored);
    this.record({ rv, type: prev ? 'MODIFIED' : 'ADDED', resource, namespace, name, object: stored, prev, time: this.clock.now() });
    return stored;
  }

  /** Removes an object; the DELETED event carries its last state under the deletion's version (returned, frozen). */
  remove(resource: string, namespace: string, name: string): Obj | undefined {
    const k = key(resource, namespace, name);
    const prev = this.objects.get(k);
    if (!prev) return undefined;
    this.objects.delete(k);
    const rv = ++this.rv;
    // Shares everything but the top level and metadata with the (frozen) last state.
    const last = Object.freeze({ ...prev, metadata: Object.freeze({ ...prev['metadata'], resourceVersion: String(rv) }) });
    this.record({ rv, type: 'DELETED', resource, namespace, name, object: last, prev, time: this.clock.now() });
    return last;
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

/** Deep-freezes a JSON value in place (the stored objects: shared by every reader). */
function deepFreeze<T>(v: T): T {
  const stack: unknown[] = [v];
  while (stack.length > 0) {
    const x = stack.pop();
    if (x === null || typeof x !== 'object' || Object.isFrozen(x)) continue;
    Object.freeze(x);
    for (const c of Object.values(x as object)) if (c !== null && typeof c === 'object') stack.push(c);
  }
  return v;
}

const encodings = new WeakMap<object, string>();
const itemEncodings = new WeakMap<object, string>();

/** The compact JSON of an object, made once per stored object (a frozen object never changes). */
export function encodeJson(o: Obj): string {
  const cached = encodings.get(o);
  if (cached !== undefined) return cached;
  const text = JSON.stringify(o);
  if (Object.isFrozen(o)) encodings.set(o, text);
  return text;
}

/** The JSON of an object as a list item: without apiVersion and kind (upstream's list items carry none). Cached as encodeJson. */
export function encodeListItem(o: Obj): string {
  const cached = itemEncodings.get(o);
  if (cached !== undefined) return cached;
  const c: Obj = {};
  for (const [k, v] of Object.entries(o)) if (k !== 'apiVersion' && k !== 'kind' && v !== undefined) c[k] = v;
  const text = JSON.stringify(c);
  if (Object.isFrozen(o)) itemEncodings.set(o, text);
  return text;
}
