/**
 * The three non-apply patch types (spec "Media types"): JSON Patch (RFC 6902, with `test`),
 * JSON Merge Patch (RFC 7386) and strategic merge patch (merge keys from the schema's map
 * lists: conditions and addresses by type, containers by name, ...; `$patch: delete|replace`).
 * Pure functions; the input document is never mutated.
 */
import type { SchemaNode } from './ssa/schema-types.js';

type J = unknown;
type O = Record<string, J>;

export class PatchError extends Error {
  /** 422 for a failed `test` or a path that does not exist (upstream answers 422 Invalid); 400 for a malformed patch. */
  constructor(message: string, readonly status: 400 | 422) {
    super(message);
  }
}

const isObj = (v: J): v is O => v !== null && typeof v === 'object' && !Array.isArray(v);

function deepEqual(a: J, b: J): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  if (isObj(a) && isObj(b)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && deepEqual(a[k], b[k]));
  }
  return false;
}

function parsePointer(p: string): string[] {
  if (p === '') return [];
  if (!p.startsWith('/')) throw new PatchError(`invalid JSON pointer "${p}"`, 400);
  return p
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function resolveParent(doc: J, tokens: string[], path: string): { parent: O | J[]; last: string } {
  let cur: J = doc;
  for (const t of tokens.slice(0, -1)) {
    if (Array.isArray(cur)) cur = cur[Number(t)];
    else if (isObj(cur)) cur = cur[t];
    else cur = undefined;
    if (cur === undefined) throw new PatchError(`jsonpatch: path "${path}" does not exist`, 422);
  }
  if (!Array.isArray(cur) && !isObj(cur)) throw new PatchError(`jsonpatch: path "${path}" does not exist`, 422);
  return { parent: cur, last: tokens[tokens.length - 1]! };
}

function getAt(doc: J, path: string): J {
  let cur: J = doc;
  for (const t of parsePointer(path)) {
    if (Array.isArray(cur)) cur = cur[Number(t)];
    else if (isObj(cur)) cur = Object.prototype.hasOwnProperty.call(cur, t) ? cur[t] : undefined;
    else cur = undefined;
    if (cur === undefined) throw new PatchError(`jsonpatch: path "${path}" does not exist`, 422);
  }
  return cur;
}

function arrayIndex(arr: J[], last: string, path: string, forAdd: boolean): number {
  if (forAdd && last === '-') return arr.length;
  if (!/^(0|[1-9][0-9]*)$/.test(last)) throw new PatchError(`jsonpatch: invalid array index in "${path}"`, 422);
  const i = Number(last);
  if (i > arr.length || (!forAdd && i === arr.length)) throw new PatchError(`jsonpatch: index out of range in "${path}"`, 422);
  return i;
}

function add(doc: J, path: string, value: J): J {
  const tokens = parsePointer(path);
  if (tokens.length === 0) return structuredClone(value);
  const { parent, last } = resolveParent(doc, tokens, path);
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, last, path, true), 0, structuredClone(value));
  else parent[last] = structuredClone(value);
  return doc;
}

function remove(doc: J, path: string): J {
  const tokens = parsePointer(path);
  if (tokens.length === 0) throw new PatchError('jsonpatch: cannot remove the whole document', 422);
  const { parent, last } = resolveParent(doc, tokens, path);
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, last, path, false), 1);
  else {
    if (!Object.prototype.hasOwnProperty.call(parent, last)) throw new PatchError(`jsonpatch remove operation does not apply: doc is missing key: ${path}`, 422);
    delete parent[last];
  }
  return doc;
}

/** RFC 6902. A failed `test` or a missing path is a PatchError with status 422. */
export function applyJsonPatch(docIn: J, patch: J): J {
  if (!Array.isArray(patch)) throw new PatchError('json patch must be an array of operations', 400);
  let doc = structuredClone(docIn);
  for (const op of patch) {
    if (!isObj(op) || typeof op['op'] !== 'string' || typeof op['path'] !== 'string') throw new PatchError('json patch operation needs "op" and "path"', 400);
    const path = op['path'];
    switch (op['op']) {
      case 'add':
        doc = add(doc, path, op['value']);
        break;
      case 'remove':
        doc = remove(doc, path);
        break;
      case 'replace':
        getAt(doc, path);
        doc = remove(doc, path);
        doc = add(doc, path, op['value']);
        break;
      case 'move': {
        const v = getAt(doc, String(op['from']));
        doc = remove(doc, String(op['from']));
        doc = add(doc, path, v);
        break;
      }
      case 'copy':
        doc = add(doc, path, getAt(doc, String(op['from'])));
        break;
      case 'test':
        if (!deepEqual(getAt(doc, path), op['value'])) throw new PatchError(`testing value ${path} failed`, 422);
        break;
      default:
        throw new PatchError(`Unexpected kind: ${String(op['op'])}`, 400);
    }
  }
  return doc;
}

/** RFC 7386: objects merge recursively, null deletes, anything else replaces. */
export function applyMergePatch(target: J, patch: J): J {
  if (!isObj(patch)) return structuredClone(patch);
  const out: O = isObj(target) ? structuredClone(target) : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = applyMergePatch(out[k], v);
  }
  return out;
}

function child(node: SchemaNode | undefined, k: string): SchemaNode | undefined {
  if (!node || node.kind !== 'struct') return undefined;
  return node.fields[k] ?? (node.open ? node.values : undefined);
}

/**
 * Strategic merge patch: like a merge patch, except that lists the schema marks as map lists
 * merge entry by entry on their first key (the patchMergeKey), set lists merge as sets, and
 * `$patch: delete` / `$patch: replace` directives remove an entry or replace a map or list.
 */
export function applyStrategicMergePatch(target: J, patch: J, node: SchemaNode | undefined): J {
  if (!isObj(patch)) return structuredClone(patch);
  if (patch['$patch'] === 'replace') {
    const rest = { ...patch };
    delete rest['$patch'];
    return structuredClone(rest);
  }
  if (patch['$patch'] === 'delete') return undefined;
  const out: O = isObj(target) ? structuredClone(target) : {};
  for (const [k, v] of Object.entries(patch)) {
    if (k === '$patch' || k === '$retainKeys' || k.startsWith('$setElementOrder/') || k.startsWith('$deleteFromPrimitiveList/')) continue;
    const sub = child(node, k);
    if (v === null) delete out[k];
    else if (Array.isArray(v) && sub?.kind === 'list') out[k] = mergeList(out[k], v, sub);
    else if (isObj(v)) {
      const merged = applyStrategicMergePatch(out[k], v, sub);
      if (merged === undefined) delete out[k];
      else out[k] = merged;
    } else out[k] = structuredClone(v);
  }
  for (const [k, v] of Object.entries(patch)) {
    if (k.startsWith('$deleteFromPrimitiveList/') && Array.isArray(v)) {
      const f = k.slice('$deleteFromPrimitiveList/'.length);
      if (Array.isArray(out[f])) out[f] = (out[f] as J[]).filter((x) => !v.some((d) => deepEqual(d, x)));
    }
  }
  return out;
}

function mergeList(current: J, patch: J[], node: Extract<SchemaNode, { kind: 'list' }>): J[] {
  const cur = Array.isArray(current) ? structuredClone(current) : [];
  if (patch.some((e) => isObj(e) && e['$patch'] === 'replace')) return structuredClone(patch.filter((e) => !(isObj(e) && e['$patch'] === 'replace')));
  if (node.listType === 'set') {
    for (const e of patch) if (!cur.some((c) => deepEqual(c, e))) cur.push(structuredClone(e));
    return cur;
  }
  if (node.listType !== 'map' || !node.keys || node.keys.length === 0) return structuredClone(patch);
  const mk = node.keys[0]!;
  for (const e of patch) {
    if (!isObj(e)) continue;
    const i = cur.findIndex((c) => isObj(c) && deepEqual(c[mk], e[mk]));
    if (e['$patch'] === 'delete') {
      if (i >= 0) cur.splice(i, 1);
      continue;
    }
    if (i >= 0) cur[i] = applyStrategicMergePatch(cur[i], e, node.items);
    else cur.push(applyStrategicMergePatch({}, e, node.items));
  }
  return cur;
}
