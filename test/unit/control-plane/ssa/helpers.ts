/** Small drivers for the SSA engine tests: apply/update with a fixed kind, clock and schema. */
import { applyObject, recordUpdate, ApplyConflictError, type ManagedFieldsEntry } from '../../../control-plane/ssa/index.js';
import { podSchema } from './pod-schema.js';

export type Obj = Record<string, any>;

export const T0 = '2024-05-01T10:00:00Z';

/** Seconds after T0 as an RFC 3339 time. */
export function at(seconds: number): string {
  return new Date(Date.parse(T0) + seconds * 1000).toISOString().replace('.000Z', 'Z');
}

/** A Pod manifest; without `spec` when none is given (an applied `spec: {}` would own spec itself). */
export function pod(spec?: Obj, metadata: Obj = {}): Obj {
  const o: Obj = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'default', ...metadata } };
  if (spec) o['spec'] = spec;
  return o;
}

export function apply(live: Obj | undefined, applied: Obj, manager: string, opts: { force?: boolean; now?: string; subresource?: string; ignoredFields?: string[][] } = {}): Obj {
  return applyObject({
    live,
    applied,
    manager,
    force: opts.force ?? false,
    apiVersion: 'v1',
    kind: 'Pod',
    now: opts.now ?? T0,
    schema: podSchema,
    ...(opts.subresource ? { subresource: opts.subresource } : {}),
    ...(opts.ignoredFields ? { ignoredFields: opts.ignoredFields } : {}),
  }) as Obj;
}

export function update(before: Obj | undefined, after: Obj, manager: string, opts: { now?: string; subresource?: string } = {}): Obj {
  return recordUpdate({
    before,
    after,
    manager,
    apiVersion: 'v1',
    kind: 'Pod',
    now: opts.now ?? T0,
    schema: podSchema,
    ...(opts.subresource ? { subresource: opts.subresource } : {}),
  }) as Obj;
}

/** The object with a change made by a client (deep copy, then mutate). */
export function edit(o: Obj, change: (c: Obj) => void): Obj {
  const c = structuredClone(o);
  change(c);
  return c;
}

export function entries(o: Obj): ManagedFieldsEntry[] {
  return (o['metadata']?.['managedFields'] ?? []) as ManagedFieldsEntry[];
}

/** manager/operation -> fieldsV1, for whole-table comparisons. */
export function owners(o: Obj): Record<string, object> {
  const out: Record<string, object> = {};
  for (const e of entries(o)) out[`${e.manager}/${e.operation}${e.subresource ? `/${e.subresource}` : ''}`] = e.fieldsV1;
  return out;
}

/** The object without managedFields. */
export function body(o: Obj): Obj {
  const c = structuredClone(o);
  delete c['metadata']['managedFields'];
  return c;
}

export function conflictOf(fn: () => unknown): ApplyConflictError {
  try {
    fn();
  } catch (err) {
    if (err instanceof ApplyConflictError) return err;
    throw err;
  }
  throw new Error('expected an ApplyConflictError, nothing was thrown');
}
