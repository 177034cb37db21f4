/**
 * Schema-aware walks over JSON objects, modelled on structured-merge-diff's `typed` package:
 * the field set an object specifies (ToFieldSet), the merge of an applied configuration into
 * the live object (Merge), the comparison of two objects (Compare), removal of a set of paths
 * (RemoveItems) and EnsureNamedFieldsAreMembers. All pure; inputs are never mutated.
 *
 * Bad list content (a map-list entry without a key field, a duplicate key in an applied
 * configuration, an object in a set list) raises SchemaValueError naming the path.
 */
import { type Json, type Path, type PathElement, FieldSet, fieldPE, keyPE, valuePE, peKey, pathString } from './fieldpath.js';
import type { SchemaNode } from './schema-types.js';

export class SchemaValueError extends Error {
  constructor(readonly path: string, message: string) {
    super(path ? `${path}: ${message}` : message);
    this.name = 'SchemaValueError';
  }
}

/** JSON object (not null, not an array). */
export type Obj = { [k: string]: Json };

export function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * Default values of map-list key fields, used when an entry omits a key (upstream reads them
 * from the OpenAPI defaults; our SchemaNode has none). `protocol` defaults to TCP in every core
 * list keyed by it (container ports, service ports).
 */
const KEY_DEFAULTS: Record<string, Json> = { protocol: 'TCP' };

type MapAtom = { t: 'map'; atomic: boolean; fields: Record<string, SchemaNode>; open: boolean; values: SchemaNode | undefined };
type ListAtom = { t: 'list'; rel: 'atomic' | 'set' | 'map'; keys: string[]; items: SchemaNode | undefined };
type Atom = { t: 'scalar' } | MapAtom | ListAtom;

const DEDUCED_MAP: MapAtom = { t: 'map', atomic: false, fields: {}, open: true, values: undefined };
const DEDUCED_LIST: ListAtom = { t: 'list', rel: 'atomic', keys: [], items: undefined };

/**
 * The shape to walk a value with. Unstructured (no node) follows the value: objects are
 * granular maps, arrays atomic lists. A value whose JSON type contradicts the schema is walked
 * as unstructured too (upstream rejects it earlier, in validation).
 */
function resolve(node: SchemaNode | undefined, v: Json | undefined): Atom {
  const vt = v === undefined || v === null ? 'none' : Array.isArray(v) ? 'list' : typeof v === 'object' ? 'map' : 'scalar';
  if (node) {
    if (node.kind === 'struct' && (vt === 'map' || vt === 'none')) {
      return { t: 'map', atomic: node.elementType === 'atomic', fields: node.fields, open: node.open === true, values: node.values };
    }
    if (node.kind === 'list' && (vt === 'list' || vt === 'none')) {
      return { t: 'list', rel: node.listType, keys: node.keys ?? [], items: node.items };
    }
    if (node.kind === 'scalar' && (vt === 'scalar' || vt === 'none')) return { t: 'scalar' };
  }
  if (vt === 'map') return DEDUCED_MAP;
  if (vt === 'list') return DEDUCED_LIST;
  return { t: 'scalar' };
}

/** Schema-only resolution (for walking sets): a missing node is the unstructured map. */
function resolveNode(node: SchemaNode | undefined): Atom {
  if (!node) return DEDUCED_MAP;
  return resolve(node, undefined);
}

/** Type of one key of a map/struct, and whether it is a named struct field. */
function fieldType(a: MapAtom, key: string): { node: SchemaNode | undefined; named: boolean } {
  if (Object.prototype.hasOwnProperty.call(a.fields, key)) return { node: a.fields[key], named: true };
  return { node: a.open ? a.values : undefined, named: false };
}

function childNode(a: Atom, pe: PathElement): SchemaNode | undefined {
  if (a.t === 'map' && pe.kind === 'field') return fieldType(a, pe.name).node;
  if (a.t === 'list') return a.items;
  return undefined;
}

/** The path element identifying one item of a set or map list. */
export function listItemPE(a: ListAtom, item: Json, path: Path): PathElement {
  if (a.rel === 'map' || a.keys.length > 0) {
    if (!isObj(item)) throw new SchemaValueError(pathString(path), 'associative list with keys may not have non-map elements');
    const fields: Array<[string, Json]> = [];
    for (const k of a.keys) {
      if (Object.prototype.hasOwnProperty.call(item, k)) fields.push([k, item[k]!]);
      else if (KEY_DEFAULTS[k] !== undefined) fields.push([k, KEY_DEFAULTS[k]]);
      else throw new SchemaValueError(pathString(path), `associative list with keys has an element that omits key field ${JSON.stringify(k)} (and doesn't have default value)`);
    }
    return keyPE(fields);
  }
  if (item === null) throw new SchemaValueError(pathString(path), "associative list without keys has an element that's an explicit null");
  if (typeof item === 'object') throw new SchemaValueError(pathString(path), 'associative list without keys has an element that is not a scalar');
  return valuePE(item);
}

// ---------------------------------------------------------------- ToFieldSet

/** The set of fields an object specifies (what an applied configuration claims). */
export function toFieldSet(v: Json | undefined, node: SchemaNode | undefined): FieldSet {
  const out = new FieldSet();
  if (v !== undefined) toSetInto(v, node, [], out);
  return out;
}

function toSetInto(v: Json, node: SchemaNode | undefined, path: PathElement[], out: FieldSet): void {
  const a = resolve(node, v);
  if (a.t === 'scalar') {
    out.insert(path);
    return;
  }
  if (a.t === 'list') {
    if (a.rel === 'atomic') {
      out.insert(path);
      return;
    }
    if (!Array.isArray(v)) return;
    for (const item of v) {
      const p = [...path, listItemPE(a, item, path)];
      toSetInto(item, a.items, p, out);
      out.insert(p);
    }
    return;
  }
  if (a.atomic) {
    out.insert(path);
    return;
  }
  if (!isObj(v)) return;
  for (const [k, val] of Object.entries(v)) {
    const ft = fieldType(a, k);
    const p = [...path, fieldPE(k)];
    toSetInto(val, ft.node, p, out);
    if (val === null || (isObj(val) && Object.keys(val).length === 0) || !ft.named) out.insert(p);
  }
}

// ---------------------------------------------------------------- Merge

/**
 * Merges rhs (an applied configuration) into lhs (the live object): rhs wins for scalars,
 * atomic lists and atomic structs; granular structs/maps merge key by key; set and map lists
 * merge item by item, keeping upstream's ordering rules. `undefined` means absent.
 */
export function merge(lhs: Json | undefined, rhs: Json | undefined, node: SchemaNode | undefined, path: PathElement[] = []): Json | undefined {
  if (rhs === undefined) return lhs;
  if (lhs === undefined) {
    validateDuplicates(rhs, node, path);
    return rhs;
  }
  const a = resolve(node, rhs);
  const al = resolve(node, lhs);
  if (a.t !== al.t || a.t === 'scalar') return rhs;
  if (a.t === 'map') {
    const lm = isObj(lhs) ? lhs : null;
    const rm = isObj(rhs) ? rhs : null;
    const empty = (!lm || Object.keys(lm).length === 0) && (!rm || Object.keys(rm).length === 0);
    if (a.atomic || empty) return rhs;
    const out: Obj = {};
    const keys = [...Object.keys(lm ?? {}), ...Object.keys(rm ?? {}).filter((k) => !lm || !Object.prototype.hasOwnProperty.call(lm, k))];
    for (const k of keys) {
      const m = merge(lm?.[k], rm?.[k], fieldType(a, k).node, [...path, fieldPE(k)]);
      if (m !== undefined) out[k] = m;
    }
    return out;
  }
  const ll = Array.isArray(lhs) ? lhs : null;
  const rl = Array.isArray(rhs) ? rhs : null;
  if (a.rel === 'atomic' || ((!ll || ll.length === 0) && (!rl || rl.length === 0))) return rhs;
  return mergeListItems(a as ListAtom, ll ?? [], rl ?? [], path);
}

/** An applied configuration may not repeat a key of a set or map list (upstream: "duplicate entries for key"). */
function validateDuplicates(v: Json, node: SchemaNode | undefined, path: PathElement[]): void {
  const a = resolve(node, v);
  if (a.t === 'map' && !a.atomic && isObj(v)) {
    for (const [k, val] of Object.entries(v)) validateDuplicates(val, fieldType(a, k).node, [...path, fieldPE(k)]);
  } else if (a.t === 'list' && a.rel !== 'atomic' && Array.isArray(v)) {
    const seen = new Set<string>();
    for (const item of v) {
      const pe = listItemPE(a, item, path);
      const k = peKey(pe);
      if (seen.has(k)) throw new SchemaValueError(pathString(path), `duplicate entries for key ${pathString([pe])}`);
      seen.add(k);
      validateDuplicates(item, a.items, [...path, pe]);
    }
  }
}

function mergeListItems(a: ListAtom, lhs: Json[], rhs: Json[], path: PathElement[]): Json[] {
  const rhsPEs = rhs.map((item) => listItemPE(a, item, path));
  const observedRHS = new Map<string, Json>();
  rhsPEs.forEach((pe, i) => {
    const k = peKey(pe);
    if (observedRHS.has(k)) throw new SchemaValueError(pathString(path), `duplicate entries for key ${pathString([pe])}`);
    observedRHS.set(k, rhs[i]!);
  });
  const lhsPEs = lhs.map((item) => listItemPE(a, item, path));
  // Live duplicates are tolerated: such an entry merges as if absent from lhs.
  const observedLHS = new Map<string, Json | undefined>();
  lhsPEs.forEach((pe, i) => {
    const k = peKey(pe);
    observedLHS.set(k, observedLHS.has(k) ? undefined : lhs[i]!);
  });

  const rk = rhsPEs.map(peKey);
  const lk = lhsPEs.map(peKey);
  const sharedOrder = rk.filter((k) => observedLHS.has(k));
  let nextShared: string | undefined = sharedOrder.shift();
  const mergedRHS = new Set<string>();
  const out: Json[] = [];
  const mergeItem = (pe: PathElement, l: Json | undefined, r: Json | undefined): void => {
    const m = merge(l, r, a.items, [...path, pe]);
    if (m !== undefined) out.push(m);
  };
  let lI = 0;
  let rI = 0;
  while (lI < lk.length || rI < rk.length) {
    if (lI < lk.length && rI < rk.length) {
      const k = lk[lI]!;
      if (k === rk[rI]) {
        mergedRHS.add(k);
        mergeItem(lhsPEs[lI]!, observedLHS.get(k), observedRHS.get(k));
        lI++;
        rI++;
        nextShared = sharedOrder.shift();
        continue;
      }
      if (observedRHS.has(k) && nextShared !== undefined && nextShared !== k) {
        lI++;
        continue;
      }
    }
    if (lI < lk.length) {
      const k = lk[lI]!;
      if (!observedRHS.has(k)) {
        mergeItem(lhsPEs[lI]!, lhs[lI]!, undefined);
        lI++;
        continue;
      } else if (mergedRHS.has(k)) {
        lI++;
        continue;
      }
    }
    if (rI < rk.length) {
      const k = rk[rI]!;
      mergedRHS.add(k);
      mergeItem(rhsPEs[rI]!, observedLHS.get(k), observedRHS.get(k));
      rI++;
      if (nextShared !== undefined && nextShared === k) nextShared = sharedOrder.shift();
    }
  }
  return out;
}

// ---------------------------------------------------------------- Compare

export interface Comparison {
  modified: FieldSet;
  added: FieldSet;
  removed: FieldSet;
}

/** Which fields changed value, appeared or disappeared between two objects (upstream Compare). */
export function compare(lhs: Json | undefined, rhs: Json | undefined, node: SchemaNode | undefined): Comparison {
  const c: Comparison = { modified: new FieldSet(), added: new FieldSet(), removed: new FieldSet() };
  if (lhs !== undefined || rhs !== undefined) compareInto(lhs, rhs, node, [], c);
  return c;
}

export function deepEqual(a: Json | undefined, b: Json | undefined): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined || a === null || b === null) return false;
  if (typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bl = b as Json[];
    return a.length === bl.length && a.every((x, i) => deepEqual(x, bl[i]));
  }
  const ao = a as Obj;
  const bo = b as Obj;
  const ka = Object.keys(ao);
  if (ka.length !== Object.keys(bo).length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(bo, k) && deepEqual(ao[k], bo[k]));
}

function compareInto(lhs: Json | undefined, rhs: Json | undefined, node: SchemaNode | undefined, path: PathElement[], c: Comparison): void {
  const leaf = (): void => {
    if (lhs === undefined) c.added.insert(path);
    else if (rhs === undefined) c.removed.insert(path);
    else if (!deepEqual(lhs, rhs)) c.modified.insert(path);
  };
  const al = lhs === undefined ? undefined : resolve(node, lhs);
  const ar = rhs === undefined ? undefined : resolve(node, rhs);
  const a = (ar ?? al)!;
  if ((al && ar && al.t !== ar.t) || a.t === 'scalar') return leaf();
  if (a.t === 'map') {
    const lm = isObj(lhs) ? lhs : null;
    const rm = isObj(rhs) ? rhs : null;
    const empty = (!lm || Object.keys(lm).length === 0) && (!rm || Object.keys(rm).length === 0);
    if (a.atomic || empty) return leaf();
    const keys = new Set([...Object.keys(lm ?? {}), ...Object.keys(rm ?? {})]);
    for (const k of keys) {
      const lv = lm && Object.prototype.hasOwnProperty.call(lm, k) ? lm[k] : undefined;
      const rv = rm && Object.prototype.hasOwnProperty.call(rm, k) ? rm[k] : undefined;
      compareInto(lv, rv, fieldType(a, k).node, [...path, fieldPE(k)], c);
    }
  } else {
    const ll = Array.isArray(lhs) ? lhs : null;
    const rl = Array.isArray(rhs) ? rhs : null;
    if (a.rel === 'atomic' || ((!ll || ll.length === 0) && (!rl || rl.length === 0))) return leaf();
    compareListItems(a, ll ?? [], rl ?? [], path, c);
  }
  if (lhs === undefined) c.added.insert(path);
  else if (rhs === undefined) c.removed.insert(path);
}

function compareListItems(a: ListAtom, lhs: Json[], rhs: Json[], path: PathElement[], c: Comparison): void {
  // First-seen order of the keys of both sides; a Map keeps it in O(1) per item (a list of
  // 10,000 env entries must not cost 10,000² key renderings).
  const order = new Map<string, PathElement>();
  const index = (items: Json[]): Map<string, Json[]> => {
    const m = new Map<string, Json[]>();
    for (const item of items) {
      const pe = listItemPE(a, item, path);
      const k = peKey(pe);
      const list = m.get(k);
      if (list) list.push(item);
      else {
        m.set(k, [item]);
        if (!order.has(k)) order.set(k, pe);
      }
    }
    return m;
  };
  const lv = index(lhs);
  const rv = index(rhs);
  for (const [k, pe] of order) {
    const l = lv.get(k) ?? [];
    const r = rv.get(k) ?? [];
    const p = [...path, pe];
    if (l.length <= 1 && r.length <= 1) compareInto(l[0], r[0], a.items, p, c);
    else if (l.length >= 2 && r.length >= 2) {
      if (!deepEqual(l, r)) c.modified.insert(p);
    } else if (l.length >= 2) {
      if (r.length !== 0) compareInto(undefined, r[0], a.items, p, c);
      c.removed.insert(p);
    } else {
      if (l.length !== 0) compareInto(l[0], undefined, a.items, p, c);
      c.added.insert(p);
    }
  }
}

/** Drops the ignored paths (and everything below them) from a comparison (upstream ExcludeFields). */
export function excludeFields(c: Comparison, ignored: FieldSet | undefined): Comparison {
  if (!ignored || ignored.empty()) return c;
  return {
    modified: c.modified.recursiveDifference(ignored),
    added: c.added.recursiveDifference(ignored),
    removed: c.removed.recursiveDifference(ignored),
  };
}

// ---------------------------------------------------------------- RemoveItems

/**
 * Removes the paths of `toRemove` from a value. A member path removes the field, entry or item
 * with everything below it; children descend. Atomic lists and structs are never entered.
 *
 * `emptied`: what a map or list that ends up with nothing becomes. Upstream yields null
 * ('null', used for the intermediate objects of pruning so that their field sets match
 * upstream's); the object we return drops it instead ('drop'), as a typed object would.
 */
export function removeItems(v: Json | undefined, toRemove: FieldSet, node: SchemaNode | undefined, emptied: 'null' | 'drop'): Json | undefined {
  if (v === undefined) return undefined;
  return removeWalk(v, toRemove, node, emptied, []);
}

function removeWalk(v: Json, toRemove: FieldSet, node: SchemaNode | undefined, emptied: 'null' | 'drop', path: PathElement[]): Json | undefined {
  const a = resolve(node, v);
  if (a.t === 'scalar') return v;
  const nothing = (): Json | undefined => (emptied === 'null' ? null : undefined);
  if (a.t === 'list') {
    if (!Array.isArray(v) || v.length === 0) return emptied === 'null' ? null : v;
    if (a.rel === 'atomic') return emptied === 'null' ? null : v;
    const items: Json[] = [];
    for (const item of v) {
      const pe = listItemPE(a, item, path);
      if (toRemove.has([pe])) continue;
      const sub = toRemove.withPrefix(pe);
      if (sub.empty()) {
        items.push(item);
        continue;
      }
      const r = removeWalk(item, sub, a.items, emptied, [...path, pe]);
      if (r !== undefined) items.push(r);
    }
    return items.length > 0 ? items : nothing();
  }
  if (!isObj(v) || Object.keys(v).length === 0) return emptied === 'null' ? null : v;
  if (a.atomic) return emptied === 'null' ? null : v;
  const out: Obj = {};
  for (const [k, val] of Object.entries(v)) {
    const pe = fieldPE(k);
    if (toRemove.has([pe])) continue;
    const sub = toRemove.withPrefix(pe);
    if (sub.empty()) {
      out[k] = val;
      continue;
    }
    const r = removeWalk(val, sub, fieldType(a, k).node, emptied, [...path, pe]);
    if (r !== undefined) out[k] = r;
  }
  return Object.keys(out).length > 0 ? out : nothing();
}

// ---------------------------------------------------------------- EnsureNamedFieldsAreMembers

/**
 * Adds, as members, the named struct fields that only appear as parents in the set: owning
 * `spec.replicas` then also means owning the `spec` field itself, but owning `labels.app` does
 * not mean owning each map key's parent map entry. Used by pruning, as upstream.
 */
export function ensureNamedFieldsAreMembers(s: FieldSet, node: SchemaNode | undefined): FieldSet {
  const out = new FieldSet();
  const a = resolveNode(node);
  for (const [k, pe] of s.members) out.members.set(k, pe);
  for (const [k, c] of s.children) {
    if (pe_isNamed(a, c.pe)) out.members.set(k, c.pe);
    out.children.set(k, { pe: c.pe, set: ensureNamedFieldsAreMembers(c.set, childNode(a, c.pe)) });
  }
  return out;
}

function pe_isNamed(a: Atom, pe: PathElement): boolean {
  return a.t === 'map' && pe.kind === 'field' && Object.prototype.hasOwnProperty.call(a.fields, pe.name);
}
