/**
 * Layering of configuration documents with provenance. Pure functions.
 *
 * Each layer is applied as an RFC 7386 JSON merge patch, which is exactly the spec's
 * merge rules and what the kubelet does with drop-ins:
 *   - a scalar replaces;
 *   - an object (nested structure or map) merges key by key, so siblings and other map
 *     keys stay;
 *   - a list replaces whole (an empty list too), including a list that is a map's value
 *     (staticPodURLHeader: the overridden key's list is replaced, other keys stay);
 *   - `null` removes the key, so the default (applied after merging) comes back.
 *
 * Provenance lives in an OriginTree mirroring the document: the layer that last set a
 * leaf owns it. A leaf is a scalar, a list (one leaf, owned by whoever set it whole) or an
 * empty object (owned by whoever made it empty).
 */

export type Json = null | boolean | number | string | Json[] | JsonObject;
export interface JsonObject {
  [key: string]: Json;
}

export interface OriginTree {
  /** Set on leaves: who set this value. */
  origin?: string;
  /** Set on objects: provenance of each key. */
  children?: Map<string, OriginTree>;
}

export function isJsonObject(v: unknown): v is JsonObject {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** A deep copy of a JSON value (so layers never share mutable structure). */
export function cloneJson<T extends Json>(v: T): T {
  return structuredClone(v);
}

/**
 * Applies `patch` onto `target` as a JSON merge patch and records `origin` for every leaf
 * the patch sets in `node`. Returns the merged value; never mutates `target` or `patch`.
 */
export function applyMergePatch(target: Json | undefined, patch: Json, origin: string, node: OriginTree): Json {
  if (!isJsonObject(patch)) {
    node.origin = origin;
    node.children = undefined;
    return cloneJson(patch);
  }
  const wasObject = isJsonObject(target);
  const wasEmpty = wasObject && Object.keys(target).length === 0;
  const result: JsonObject = wasObject ? { ...target } : {};
  if (!wasObject) {
    node.origin = undefined;
    node.children = new Map();
  }
  const children = (node.children ??= new Map());
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) {
      delete result[key];
      children.delete(key);
      continue;
    }
    let child = children.get(key);
    if (!child) {
      child = {};
      children.set(key, child);
    }
    result[key] = applyMergePatch(result[key], value, origin, child);
  }
  if (Object.keys(result).length === 0) {
    // An empty object is a leaf: keep who emptied it unless this patch changed nothing.
    if (!(wasEmpty && node.origin !== undefined)) node.origin = origin;
  } else {
    node.origin = undefined;
  }
  return result;
}

/** The provenance node at `path`, created on the way if missing. */
export function originNodeAt(root: OriginTree, path: readonly string[]): OriginTree {
  let node = root;
  for (const seg of path) {
    node.children ??= new Map();
    let child = node.children.get(seg);
    if (!child) {
      child = {};
      node.children.set(seg, child);
    }
    node = child;
  }
  return node;
}

/** Marks the value at `path` (and everything under it) as set by `origin`. */
export function setOrigin(root: OriginTree, path: readonly string[], origin: string): void {
  const node = originNodeAt(root, path);
  node.children = undefined;
  node.origin = origin;
}

/** The origin of a leaf, or undefined when nobody recorded one. */
export function originOf(root: OriginTree, path: readonly string[]): string | undefined {
  let node: OriginTree | undefined = root;
  for (const seg of path) {
    node = node?.children?.get(seg);
    if (!node) return undefined;
  }
  return node.origin;
}

/** Joins a field path for humans and for LoadedConfig.origins (`evictionHard.memory.available`). */
export function pathKey(path: readonly string[]): string {
  return path.join('.');
}

/**
 * Every leaf of `doc` with its origin, as dotted path -> origin. Leaves nobody recorded
 * (defaults filled without provenance) get `fallback`.
 */
export function flattenOrigins(doc: JsonObject, root: OriginTree, fallback = 'default'): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (value: Json, node: OriginTree | undefined, path: string[]) => {
    if (isJsonObject(value) && Object.keys(value).length > 0) {
      for (const [k, v] of Object.entries(value)) walk(v, node?.children?.get(k), [...path, k]);
      return;
    }
    out.set(pathKey(path), node?.origin ?? fallback);
  };
  for (const [k, v] of Object.entries(doc)) walk(v, root.children?.get(k), [k]);
  return out;
}
