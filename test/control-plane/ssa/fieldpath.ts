/**
 * Field paths and field sets, the vocabulary of managedFields (FieldsV1), modelled on
 * sigs.k8s.io/structured-merge-diff's `fieldpath` package so that what this server prints is
 * byte-for-byte what a real API server prints:
 *
 * - `f:<name>` a struct field or map key, `k:{"name":"a"}` a map-list entry (key fields sorted
 *   by name, compact JSON), `v:<json>` a set-list item, `i:<n>` a list index (only read, never
 *   produced here), `.` the element itself when it also has owned children; leaves are `{}`.
 * - A set holds "members" (paths owned as a whole) and "children" (sub-sets under a path
 *   element). Keys of a FieldsV1 object are emitted in upstream's path-element order.
 *
 * Pure data code; every function returns new sets and never mutates its arguments (except
 * `insert`, which mutates the receiver and is only used while building a set). A built set is
 * never changed again, so results share the sub-sets they take over unchanged (a union with
 * a set of 10,000 list entries does not copy them).
 */

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export type PathElement =
  | { kind: 'field'; name: string }
  | { kind: 'key'; fields: Array<[string, Json]> } // sorted by field name
  | { kind: 'value'; value: Json }
  | { kind: 'index'; index: number };

export type Path = readonly PathElement[];

export function fieldPE(name: string): PathElement {
  return { kind: 'field', name };
}

/** A map-list key element; fields are sorted by name as upstream's `KeyByFields` does. */
export function keyPE(fields: Array<[string, Json]>): PathElement {
  const sorted = [...fields].sort((a, b) => compareStrings(a[0], b[0]));
  return { kind: 'key', fields: sorted };
}

export function valuePE(value: Json): PathElement {
  return { kind: 'value', value };
}

/** Byte order of the UTF-8 encodings, as Go's strings.Compare (code point order). */
export function compareStrings(a: string, b: string): number {
  if (a === b) return 0;
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done) return y.done ? 0 : -1;
    if (y.done) return 1;
    const cx = x.value.codePointAt(0)!;
    const cy = y.value.codePointAt(0)!;
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
}

function typeRank(v: Json): number {
  // Upstream value.Compare orders: numbers, strings, bools, lists, maps, null.
  if (typeof v === 'number') return 0;
  if (typeof v === 'string') return 2;
  if (typeof v === 'boolean') return 3;
  if (Array.isArray(v)) return 4;
  if (v !== null && typeof v === 'object') return 5;
  return 6;
}

/** Total order of JSON values, as upstream's value.Compare. */
export function compareValues(a: Json, b: Json): number {
  const ra = typeRank(a);
  const rb = typeRank(b);
  if (ra !== rb) return ra < rb ? -1 : 1;
  if (typeof a === 'number' && typeof b === 'number') return a === b ? 0 : a < b ? -1 : 1;
  if (typeof a === 'string' && typeof b === 'string') return compareStrings(a, b);
  if (typeof a === 'boolean' && typeof b === 'boolean') return a === b ? 0 : a ? 1 : -1;
  if (Array.isArray(a) && Array.isArray(b)) {
    for (let i = 0; i < Math.min(a.length, b.length); i++) {
      const c = compareValues(a[i]!, b[i]!);
      if (c !== 0) return c;
    }
    return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
  }
  if (a !== null && b !== null && typeof a === 'object' && typeof b === 'object') {
    const ka = Object.keys(a).sort(compareStrings);
    const kb = Object.keys(b).sort(compareStrings);
    for (let i = 0; i < Math.min(ka.length, kb.length); i++) {
      const c = compareStrings(ka[i]!, kb[i]!);
      if (c !== 0) return c;
      const d = compareValues((a as Record<string, Json>)[ka[i]!]!, (b as Record<string, Json>)[kb[i]!]!);
      if (d !== 0) return d;
    }
    return ka.length === kb.length ? 0 : ka.length < kb.length ? -1 : 1;
  }
  return 0;
}

const PE_RANK = { field: 0, key: 1, value: 2, index: 3 } as const;

/** Upstream PathElement.Compare: fields < keys < values < indexes, then by content. */
export function comparePE(a: PathElement, b: PathElement): number {
  if (a.kind !== b.kind) return PE_RANK[a.kind] < PE_RANK[b.kind] ? -1 : 1;
  switch (a.kind) {
    case 'field':
      return compareStrings(a.name, (b as typeof a).name);
    case 'key': {
      const bf = (b as typeof a).fields;
      for (let i = 0; ; i++) {
        if (i >= a.fields.length && i >= bf.length) return 0;
        if (i >= a.fields.length) return -1;
        if (i >= bf.length) return 1;
        const c = compareStrings(a.fields[i]![0], bf[i]![0]);
        if (c !== 0) return c;
        const d = compareValues(a.fields[i]![1], bf[i]![1]);
        if (d !== 0) return d;
      }
    }
    case 'value':
      return compareValues(a.value, (b as typeof a).value);
    case 'index': {
      const bi = (b as typeof a).index;
      return a.index === bi ? 0 : a.index < bi ? -1 : 1;
    }
  }
}

/**
 * JSON as Go's encoding/json (and jsoniter's standard-compatible config) writes it: compact,
 * map keys sorted, and <, >, &, U+2028, U+2029 escaped.
 */
export function goJson(v: Json): string {
  if (v === null || typeof v !== 'object') return escapeGo(JSON.stringify(v));
  if (Array.isArray(v)) return `[${v.map(goJson).join(',')}]`;
  const keys = Object.keys(v).sort(compareStrings);
  return `{${keys.map((k) => `${escapeGo(JSON.stringify(k))}:${goJson(v[k]!)}`).join(',')}}`;
}

const GO_ESCAPED = /[<>&\u2028\u2029]/;

function escapeGo(s: string): string {
  if (!GO_ESCAPED.test(s)) return s;
  return s
    .replace(/</g, '\\u003c')
    .replace(/>/g, '\\u003e')
    .replace(/&/g, '\\u0026')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

/** The FieldsV1 key of a path element (`f:`, `k:`, `v:`, `i:`). Canonical: equal elements, equal strings. */
export function peKey(pe: PathElement): string {
  switch (pe.kind) {
    case 'field':
      return `f:${pe.name}`;
    case 'key': {
      // Rendering a key element is the costly part of every set operation; elements are never
      // mutated once made, so each one is rendered once.
      let k = keyCache.get(pe);
      if (k === undefined) {
        k = `k:{${pe.fields.map(([n, v]) => `${escapeGo(JSON.stringify(n))}:${goJson(v)}`).join(',')}}`;
        keyCache.set(pe, k);
      }
      return k;
    }
    case 'value':
      return `v:${goJson(pe.value)}`;
    case 'index':
      return `i:${pe.index}`;
  }
}

const keyCache = new WeakMap<PathElement, string>();

/** Parses a FieldsV1 key; throws on anything that is not `f:`, `k:`, `v:` or `i:`. */
export function parsePEKey(key: string): PathElement {
  const tag = key.slice(0, 2);
  const rest = key.slice(2);
  switch (tag) {
    case 'f:':
      return fieldPE(rest);
    case 'k:': {
      const obj = JSON.parse(rest) as unknown;
      if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw new Error(`invalid key element ${key}`);
      return keyPE(Object.entries(obj as Record<string, Json>));
    }
    case 'v:':
      return valuePE(JSON.parse(rest) as Json);
    case 'i:': {
      const n = Number(rest);
      if (!Number.isInteger(n)) throw new Error(`invalid index element ${key}`);
      return { kind: 'index', index: n };
    }
    default:
      throw new Error(`unknown path element ${JSON.stringify(key)}`);
  }
}

function valueToString(v: Json): string {
  // Upstream value.ToString: strings quoted (%q), numbers/bools bare, null as null.
  if (v === null) return 'null';
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return `[${v.map(valueToString).join(', ')}]`;
  return `{${Object.keys(v)
    .sort(compareStrings)
    .map((k) => `${k}=${valueToString(v[k]!)}`)
    .join(', ')}}`;
}

/** A path as kubectl prints it in conflicts: `.spec.containers[name="a"].image`, `.spec.finalizers[="x"]`. */
export function pathString(path: Path): string {
  return path
    .map((pe) => {
      switch (pe.kind) {
        case 'field':
          return `.${pe.name}`;
        case 'key':
          return `[${pe.fields.map(([n, v]) => `${n}=${valueToString(v)}`).join(',')}]`;
        case 'value':
          return `[=${valueToString(pe.value)}]`;
        case 'index':
          return `[${pe.index}]`;
      }
    })
    .join('');
}

interface ChildNode {
  pe: PathElement;
  set: FieldSet;
}

/** A set of field paths (upstream fieldpath.Set). */
export class FieldSet {
  readonly members = new Map<string, PathElement>();
  readonly children = new Map<string, ChildNode>();

  static of(...paths: Path[]): FieldSet {
    const s = new FieldSet();
    for (const p of paths) s.insert(p);
    return s;
  }

  /** Adds a path; the empty path (the whole object) is not tracked, as upstream. */
  insert(path: Path): void {
    if (path.length === 0) return;
    let cur: FieldSet = this;
    for (let i = 0; i < path.length - 1; i++) {
      const pe = path[i]!;
      const k = peKey(pe);
      let child = cur.children.get(k);
      if (!child) {
        child = { pe, set: new FieldSet() };
        cur.children.set(k, child);
      }
      cur = child.set;
    }
    const last = path[path.length - 1]!;
    cur.members.set(peKey(last), last);
  }

  has(path: Path): boolean {
    if (path.length === 0) return false;
    let cur: FieldSet = this;
    for (let i = 0; i < path.length - 1; i++) {
      const child = cur.children.get(peKey(path[i]!));
      if (!child) return false;
      cur = child.set;
    }
    return cur.members.has(peKey(path[path.length - 1]!));
  }

  empty(): boolean {
    if (this.members.size > 0) return false;
    for (const c of this.children.values()) if (!c.set.empty()) return false;
    return true;
  }

  /** The sub-set under one path element (empty when none). */
  withPrefix(pe: PathElement): FieldSet {
    return this.children.get(peKey(pe))?.set ?? new FieldSet();
  }

  union(other: FieldSet): FieldSet {
    const out = new FieldSet();
    for (const [k, pe] of this.members) out.members.set(k, pe);
    for (const [k, pe] of other.members) out.members.set(k, pe);
    for (const [k, c] of this.children) {
      const o = other.children.get(k);
      out.children.set(k, { pe: c.pe, set: o ? c.set.union(o.set) : c.set });
    }
    for (const [k, c] of other.children) if (!this.children.has(k)) out.children.set(k, { pe: c.pe, set: c.set });
    return out;
  }

  intersection(other: FieldSet): FieldSet {
    const out = new FieldSet();
    for (const [k, pe] of this.members) if (other.members.has(k)) out.members.set(k, pe);
    for (const [k, c] of this.children) {
      const o = other.children.get(k);
      if (!o) continue;
      const i = c.set.intersection(o.set);
      if (!i.empty()) out.children.set(k, { pe: c.pe, set: i });
    }
    return out;
  }

  /** Set difference: other = {a} does not remove a.b (upstream Difference). */
  difference(other: FieldSet): FieldSet {
    return this.without(other, false);
  }

  /** Removes every path of other and everything below it (upstream RecursiveDifference). */
  recursiveDifference(other: FieldSet): FieldSet {
    return this.without(other, true);
  }

  /** difference, or with `recursive` recursiveDifference: a member of other also removes the children below it. */
  private without(other: FieldSet, recursive: boolean): FieldSet {
    const out = new FieldSet();
    for (const [k, pe] of this.members) if (!other.members.has(k)) out.members.set(k, pe);
    for (const [k, c] of this.children) {
      if (recursive && other.members.has(k)) continue;
      const o = other.children.get(k);
      const d = o ? c.set.without(o.set, recursive) : c.set;
      if (!d.empty()) out.children.set(k, { pe: c.pe, set: d });
    }
    return out;
  }

  /** A deep copy (one that may be inserted into). */
  clone(): FieldSet {
    const out = new FieldSet();
    for (const [k, pe] of this.members) out.members.set(k, pe);
    for (const [k, c] of this.children) out.children.set(k, { pe: c.pe, set: c.set.clone() });
    return out;
  }

  equals(other: FieldSet): boolean {
    return this.difference(other).empty() && other.difference(this).empty();
  }

  /** Every member path, members before children at each level, in path-element order (upstream Iterate). */
  paths(): PathElement[][] {
    const out: PathElement[][] = [];
    const walk = (s: FieldSet, prefix: PathElement[]): void => {
      for (const pe of sortedPEs(s.members.values())) out.push([...prefix, pe]);
      for (const c of [...s.children.values()].sort((a, b) => comparePE(a.pe, b.pe))) walk(c.set, [...prefix, c.pe]);
    };
    walk(this, []);
    return out;
  }

  /** Serialises to the FieldsV1 object exactly as upstream orders and shapes it. */
  toFieldsV1(): Record<string, unknown> {
    return emit(this, false);
  }

  /** Parses a FieldsV1 object; throws with the offending key on malformed input. */
  static fromFieldsV1(obj: unknown): FieldSet {
    const out = new FieldSet();
    readInto(obj, out);
    return out;
  }
}

function sortedPEs(pes: Iterable<PathElement>): PathElement[] {
  return [...pes].sort(comparePE);
}

function emit(s: FieldSet, includeSelf: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (includeSelf && (s.members.size > 0 || s.children.size > 0)) out['.'] = {};
  const keys = new Map<string, PathElement>();
  for (const [k, pe] of s.members) keys.set(k, pe);
  for (const [k, c] of s.children) keys.set(k, c.pe);
  for (const pe of sortedPEs(keys.values())) {
    const k = peKey(pe);
    const child = s.children.get(k);
    if (!child || child.set.empty()) out[k] = {};
    else out[k] = emit(child.set, s.members.has(k));
  }
  return out;
}

function readInto(obj: unknown, into: FieldSet): void {
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw new Error('fieldsV1: expected an object');
  for (const [key, val] of Object.entries(obj as Record<string, unknown>)) {
    if (key === '.') continue;
    const pe = parsePEKey(key);
    const k = peKey(pe);
    if (val === null || typeof val !== 'object' || Array.isArray(val)) throw new Error(`fieldsV1: value of ${key} is not an object`);
    const entries = Object.keys(val as object);
    const isMember = entries.length === 0 || entries.includes('.');
    if (isMember) into.members.set(k, pe);
    if (entries.some((e) => e !== '.')) {
      const child = new FieldSet();
      readInto(val, child);
      if (!child.empty()) into.children.set(k, { pe, set: child });
    }
  }
}
