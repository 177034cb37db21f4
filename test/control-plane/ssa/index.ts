/**
 * Server-side apply and field ownership for the test control plane (spec: "Server-side apply:
 * ownership rules", "Field ownership" table, "Merge strategy markers"), following
 * structured-merge-diff and the apiserver's managedfields package where the spec is silent.
 *
 * The HTTP server calls:
 * - applyObject for an `application/apply-patch+yaml` PATCH (live undefined: create through
 *   apply). Returns the new object with metadata.managedFields; throws ApplyConflictError
 *   (409, causes = `conflicts`) or ApplyInvalidError (400).
 * - recordUpdate after it has computed the new object of a create, PUT or non-apply PATCH.
 *   Never throws and never conflicts (rule 4).
 *
 * Both are pure: no IO, the time of the change comes in as `now`, inputs are not mutated.
 * Left to the server: resourceVersion preconditions in an apply body, name/namespace checks
 * against the URL, defaulting, status/spec reset per subresource (pass `ignoredFields` so
 * ownership of reset fields is not recorded), and the manager name from User-Agent.
 */
import { NodeletError } from '../../../src/errors.js';
import { type Json, FieldSet, fieldPE, pathString, type PathElement } from './fieldpath.js';
import {
  type Managers,
  type ManagerState,
  type ManagedFieldsEntry,
  ManagedFieldsDecodeError,
  capUpdateManagers,
  decodeManagedFields,
  encodeManagedFields,
  isResetManagedFields,
  managerId,
  printManager,
} from './managed.js';
import type { SchemaNode } from './schema-types.js';
import { fieldSchema } from './schema-source.js';
import {
  type Comparison,
  type Obj,
  SchemaValueError,
  compare,
  deepEqual,
  ensureNamedFieldsAreMembers,
  excludeFields,
  isObj,
  merge,
  removeItems,
  toFieldSet,
} from './typed.js';

export type { ManagedFieldsEntry } from './managed.js';
export type { SchemaNode } from './schema-types.js';
export { FieldSet, pathString } from './fieldpath.js';
export { toFieldSet } from './typed.js';

export interface Conflict {
  /** The field as kubectl prints it, e.g. `.spec.containers[name="a"].image`. */
  field: string;
  /** The manager name (the entry's `manager`). */
  manager: string;
  /** Operation of the conflicting entry. */
  operation: 'Apply' | 'Update';
  /** Subresource of the conflicting entry, when it has one. */
  subresource?: string;
  /** The Status cause message upstream sends, e.g. `conflict with "m" using v1`. */
  message: string;
}

/** An apply would change fields other managers own (spec rule 2). Maps to 409 Conflict. */
export class ApplyConflictError extends NodeletError {
  readonly conflicts: Conflict[];
  constructor(conflicts: Conflict[], message: string) {
    super('CONFLICT', message, { conflicts });
    this.conflicts = conflicts;
  }
}

/** An apply body the engine cannot accept (managedFields set, duplicate list keys, ...). Maps to 400. */
export class ApplyInvalidError extends NodeletError {
  constructor(message: string, field?: string) {
    super('INVALID_ARGUMENT', message, field === undefined ? {} : { field });
  }
}

/** Paths (lists of field names) whose ownership is never recorded, e.g. [['status']] for the main resource of pods. */
export type IgnoredFields = string[][];

/** Manager that owns what existed before the first apply to an object without managedFields. */
export const BEFORE_FIRST_APPLY_MANAGER = 'before-first-apply';

// ------------------------------------------------------------------ schema

const SCALAR: SchemaNode = { kind: 'scalar' };
const STRING_MAP: SchemaNode = { kind: 'struct', fields: {}, open: true, values: SCALAR };

/** ObjectMeta markers (labels/annotations granular maps, finalizers a set, ownerReferences keyed by uid). */
export const OBJECT_META: SchemaNode = {
  kind: 'struct',
  fields: {
    name: SCALAR,
    generateName: SCALAR,
    namespace: SCALAR,
    selfLink: SCALAR,
    uid: SCALAR,
    resourceVersion: SCALAR,
    generation: SCALAR,
    creationTimestamp: SCALAR,
    deletionTimestamp: SCALAR,
    deletionGracePeriodSeconds: SCALAR,
    labels: STRING_MAP,
    annotations: STRING_MAP,
    finalizers: { kind: 'list', listType: 'set', items: SCALAR },
    ownerReferences: {
      kind: 'list',
      listType: 'map',
      keys: ['uid'],
      items: {
        kind: 'struct',
        fields: { apiVersion: SCALAR, kind: SCALAR, name: SCALAR, uid: SCALAR, controller: SCALAR, blockOwnerDeletion: SCALAR },
      },
    },
    managedFields: { kind: 'list', listType: 'atomic', items: { kind: 'struct', fields: {}, open: true } },
  },
};

/**
 * The schema used for an object: the given or registered one, with ObjectMeta's markers for
 * `metadata` when it does not describe metadata itself (unstructured kinds: custom resources
 * keep a typed metadata upstream too).
 */
function rootSchema(kind: string, given: SchemaNode | undefined): SchemaNode {
  const node = given ?? fieldSchema(kind);
  if (node && node.kind === 'struct' && node.fields['metadata']) return node;
  if (node && node.kind === 'struct') return { ...node, fields: { ...node.fields, metadata: OBJECT_META } };
  return { kind: 'struct', fields: { metadata: OBJECT_META }, open: true };
}

/**
 * The "empty object of the type" upstream compares a create against: Go's zero value keeps
 * non-pointer structs such as metadata, spec and status present (as `{}`), so they do not count
 * as added fields of the creator. Approximated as: every top-level field the schema declares
 * as a non-open struct.
 */
function zeroObject(node: SchemaNode): Obj {
  const out: Obj = { metadata: {} };
  if (node.kind === 'struct') {
    for (const [k, f] of Object.entries(node.fields)) if (f.kind === 'struct' && !f.open) out[k] = {};
  }
  return out;
}

/** Fields never recorded in managedFields (upstream stripMeta). Plain difference: `metadata` only as a leaf. */
const STRIP_SET = FieldSet.of(
  [fieldPE('apiVersion')],
  [fieldPE('kind')],
  [fieldPE('metadata')],
  ...['name', 'namespace', 'creationTimestamp', 'selfLink', 'uid', 'clusterName', 'generation', 'managedFields', 'resourceVersion'].map(
    (n): PathElement[] => [fieldPE('metadata'), fieldPE(n)],
  ),
);

function ignoredSet(ignored: IgnoredFields | undefined): FieldSet | undefined {
  if (!ignored || ignored.length === 0) return undefined;
  return FieldSet.of(...ignored.map((p) => p.map(fieldPE)));
}

// ------------------------------------------------------------------ helpers

/** A deep copy of a JSON value (JSON round trip: several times faster than structuredClone on large objects). */
function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/**
 * The object without metadata.managedFields (never part of any field set). Shallow: a new
 * top level and metadata, everything else shared (nothing here mutates values, and copying a
 * 1 MB object per write is what made large objects slow, issue 26).
 */
function withoutManagedFields(o: Obj): Obj {
  if (!isObj(o['metadata'])) return { ...o };
  const meta: Obj = { ...o['metadata'] };
  delete meta['managedFields'];
  return { ...o, metadata: meta };
}

/** The object with these entries as metadata.managedFields; shallow as withoutManagedFields. */
function withManagedFields(o: Obj, entries: ManagedFieldsEntry[]): Obj {
  const out: Obj = { ...o };
  const meta: Obj = isObj(out['metadata']) ? { ...out['metadata'] } : {};
  if (entries.length > 0) meta['managedFields'] = entries as unknown as Json;
  else delete meta['managedFields'];
  out['metadata'] = meta;
  return out;
}

function asObj(v: unknown, what: string): Obj {
  if (!isObj(v)) throw new ApplyInvalidError(`${what} must be an object`);
  return v;
}

/**
 * Upstream Updater.update: compares old and new; every other manager loses the fields that
 * were removed, and those whose value this request changed or added — which, without force,
 * is a conflict instead.
 */
function updateManagers(
  oldObj: Obj,
  newObj: Obj,
  managers: Managers,
  workflow: string,
  force: boolean,
  node: SchemaNode,
  ignored: FieldSet | undefined,
): { managers: Managers; comparison: Comparison; conflicts: Array<{ id: string; state: ManagerState; set: FieldSet }> } {
  const comparison = excludeFields(compare(oldObj, newObj, node), ignored);
  const changed = comparison.modified.union(comparison.added);
  const conflicts: Array<{ id: string; state: ManagerState; set: FieldSet }> = [];
  const out: Managers = new Map();
  for (const [id, s] of managers) {
    if (id === workflow) {
      out.set(id, s);
      continue;
    }
    const conflict = s.set.intersection(changed);
    if (!conflict.empty()) conflicts.push({ id, state: s, set: conflict });
    out.set(id, { ...s, set: s.set.difference(conflict).difference(comparison.removed) });
  }
  if (!force && conflicts.length > 0) return { managers, comparison, conflicts };
  for (const [id, s] of out) if (s.set.empty()) out.delete(id);
  return { managers: out, comparison, conflicts: [] };
}

function conflictError(conflicts: Array<{ id: string; state: ManagerState; set: FieldSet }>): ApplyConflictError {
  const sorted = [...conflicts].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const list: Conflict[] = [];
  for (const c of sorted) {
    for (const p of c.set.paths()) {
      const entry: Conflict = {
        field: pathString(p),
        manager: c.state.manager,
        operation: c.state.operation,
        message: `conflict with ${printManager(c.state)}`,
      };
      if (c.state.subresource) entry.subresource = c.state.subresource;
      list.push(entry);
    }
  }
  let message: string;
  if (list.length === 1) {
    message = `Apply failed with 1 conflict: ${list[0]!.message}: ${list[0]!.field}`;
  } else {
    const lines: string[] = [];
    for (const c of sorted) {
      lines.push(`conflicts with ${printManager(c.state)}:`);
      for (const p of c.set.paths()) lines.push(`- ${pathString(p)}`);
    }
    message = `Apply failed with ${list.length} conflicts: ${lines.join('\n')}`;
  }
  return new ApplyConflictError(list, message);
}

/**
 * Upstream prune: removes from the merged object what the applier owned in its previous apply,
 * no longer applies, and no manager (applier or updater, including the applier's new set) owns.
 */
function prune(merged: Obj, managers: Managers, lastSet: FieldSet | undefined, node: SchemaNode): Obj {
  if (!lastSet || lastSet.empty()) return merged;
  const ensure = (s: FieldSet): FieldSet => ensureNamedFieldsAreMembers(s, node);
  const last = ensure(lastSet);
  let managed = new FieldSet();
  for (const s of managers.values()) managed = managed.union(s.set);
  const mergedSet = ensure(toFieldSet(merged, node));
  // Step 1: drop everything the applier last owned; step 2: add back what anyone owns now.
  const pruned1 = removeItems(merged, last, node, 'null');
  const pruned1Set = ensure(toFieldSet(pruned1, node));
  const pruned2 = removeItems(merged, mergedSet.difference(pruned1Set.union(ensure(managed))), node, 'null');
  // Step 3: of what is still gone, only what the applier last owned is really removed.
  const pruned2Set = ensure(toFieldSet(pruned2, node));
  const toRemove = mergedSet.difference(pruned2Set).intersection(last).difference(STRIP_SET);
  const out = removeItems(merged, toRemove, node, 'drop');
  return isObj(out) ? out : {};
}

function reorderLike(template: Obj, o: Obj): Obj {
  const out: Obj = {};
  for (const k of Object.keys(template)) if (Object.prototype.hasOwnProperty.call(o, k)) out[k] = o[k]!;
  for (const k of Object.keys(o)) if (!Object.prototype.hasOwnProperty.call(out, k)) out[k] = o[k]!;
  return out;
}

function schemaError(err: unknown): never {
  if (err instanceof SchemaValueError) throw new ApplyInvalidError(err.message, err.path);
  throw err;
}

// ------------------------------------------------------------------ apply

/** Who writes, and how the object is read, for an apply or an update. */
interface ManagedWrite {
  manager: string;
  apiVersion: string;
  kind: string;
  now: string;
  subresource?: string;
  schema?: SchemaNode;
  ignoredFields?: IgnoredFields;
}

/**
 * Server-side apply of `applied` by `manager` onto `live` (undefined: the object does not exist
 * and apply creates it). Returns the object to store, including metadata.managedFields.
 * Idempotent: applying the same configuration again returns the same object and entries (the
 * entry's time only moves when the object or the manager's fields change).
 */
export function applyObject(args: ManagedWrite & { live: object | undefined; applied: object; force: boolean }): object {
  const node = rootSchema(args.kind, args.schema);
  const applied = asObj(args.applied, 'apply body');
  if (isObj(applied['metadata']) && applied['metadata']['managedFields'] !== undefined) {
    throw new ApplyInvalidError('metadata.managedFields must be nil', 'metadata.managedFields');
  }
  const ignored = ignoredSet(args.ignoredFields);
  const liveIn = args.live === undefined ? undefined : asObj(args.live, 'live object');
  let managers: Managers;
  try {
    managers = decodeManagedFields(liveIn && isObj(liveIn['metadata']) ? liveIn['metadata']['managedFields'] : undefined);
  } catch (err) {
    if (err instanceof ManagedFieldsDecodeError) managers = new Map();
    else throw err;
  }
  const live = liveIn ? withoutManagedFields(liveIn) : zeroObject(node);
  const config = clone(applied);

  try {
    // An existing object nobody owns anything of: its fields go to "before-first-apply",
    // so an apply cannot silently take over or delete what was there (spec rule 6).
    if (liveIn && managers.size === 0) {
      managers = recordChange(zeroObject(node), live, managers, BEFORE_FIRST_APPLY_MANAGER, args.apiVersion, undefined, args.now, node, ignored);
    }

    const id = managerId(args.manager, 'Apply', args.apiVersion, args.subresource);
    const previous = managers.get(id);
    const merged = merge(live, config, node) as Obj;
    let set = toFieldSet(config, node);
    if (ignored) set = set.recursiveDifference(ignored);
    const state: ManagerState = { manager: args.manager, operation: 'Apply', apiVersion: args.apiVersion, set };
    if (args.subresource) state.subresource = args.subresource;
    const withApplier: Managers = new Map(managers);
    withApplier.set(id, state);
    const result = prune(merged, withApplier, previous?.set, node);

    const upd = updateManagers(live, result, withApplier, id, args.force, node, ignored);
    if (upd.conflicts.length > 0) throw conflictError(upd.conflicts);
    const out = upd.managers;
    const mine = out.get(id)!;
    const stripped = mine.set.difference(STRIP_SET);
    const changed = !deepEqual(live, result) || !previous || !previous.set.equals(stripped) || previous.apiVersion !== args.apiVersion;
    const time = changed ? args.now : previous.time;
    if (stripped.empty()) out.delete(id);
    else out.set(id, { ...mine, set: stripped, ...(time === undefined ? {} : { time }) });
    // A created object keeps the applied configuration's key order (the zero object's empty
    // structs come last).
    const ordered = liveIn ? result : reorderLike(config, result);
    return withManagedFields(ordered, encodeManagedFields(out));
  } catch (err) {
    return schemaError(err);
  }
}

// ------------------------------------------------------------------ update

/**
 * Ownership after a non-apply change from `before` to `after` by `manager` (upstream Updater.Update
 * wrapped in managedFieldsUpdater): other managers lose the fields whose value changed or that
 * were removed; the manager's Update entry gains the changed and added fields and keeps what it
 * had. An entry's time moves only when it gained something.
 */
function recordChange(
  before: Obj,
  after: Obj,
  managers: Managers,
  manager: string,
  apiVersion: string,
  subresource: string | undefined,
  now: string,
  node: SchemaNode,
  ignored: FieldSet | undefined,
): Managers {
  const current = '\u0000current-operation';
  const upd = updateManagers(before, after, managers, current, true, node, ignored);
  const c = upd.comparison;
  let taken = c.modified.union(c.added).difference(c.removed);
  if (ignored) taken = taken.recursiveDifference(ignored);
  taken = taken.difference(STRIP_SET);
  const out = upd.managers;
  if (taken.empty()) return out;
  const id = managerId(manager, 'Update', apiVersion, subresource);
  const prev = out.get(id);
  const state: ManagerState = { manager, operation: 'Update', apiVersion, time: now, set: prev ? taken.union(prev.set) : taken };
  if (subresource) state.subresource = subresource;
  out.set(id, state);
  return capUpdateManagers(out);
}

/**
 * managedFields for a create (`before` undefined), update (PUT) or non-apply patch. `after` is
 * the object the server is about to store; when it carries `managedFields: [{}]` the table is
 * reset first and the requester then owns what the request changed (rule 9); when it carries a
 * non-empty valid list (and this is not a subresource) that list is taken as the starting point,
 * as upstream allows editing managedFields through an update; otherwise the stored ones are.
 * Never throws: on an object the schema cannot walk, managedFields are removed, as upstream.
 */
export function recordUpdate(args: ManagedWrite & { before: object | undefined; after: object }): object {
  const afterIn = args.after as Obj;
  try {
    const node = rootSchema(args.kind, args.schema);
    const beforeIn = args.before as Obj | undefined;
    const supplied = isObj(afterIn['metadata']) ? afterIn['metadata']['managedFields'] : undefined;
    const stored = (): Managers => {
      try {
        return decodeManagedFields(beforeIn && isObj(beforeIn['metadata']) ? beforeIn['metadata']['managedFields'] : undefined);
      } catch {
        return new Map();
      }
    };
    let managers: Managers;
    if (isResetManagedFields(supplied)) managers = new Map();
    else if (!args.subresource && Array.isArray(supplied) && supplied.length > 0) {
      try {
        managers = decodeManagedFields(supplied);
      } catch {
        managers = stored();
      }
    } else managers = stored();

    const before = beforeIn ? withoutManagedFields(beforeIn) : zeroObject(node);
    const after = withoutManagedFields(afterIn);
    const out = recordChange(before, after, managers, args.manager, args.apiVersion, args.subresource, args.now, node, ignoredSet(args.ignoredFields));
    return withManagedFields(after, encodeManagedFields(out));
  } catch {
    return withoutManagedFields(afterIn);
  }
}
