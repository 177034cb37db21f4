/**
 * metadata.managedFields <-> the engine's manager table, as the upstream apiserver's
 * managedfields package does it: one entry per manager identity (manager, operation,
 * subresource, plus apiVersion for Update entries), entries sorted Apply before Update, then
 * by time, manager, apiVersion, subresource; at most 10 Update entries, the oldest folded into
 * "ancient-changes".
 */
import { FieldSet } from './fieldpath.js';

export interface ManagedFieldsEntry {
  manager: string;
  operation: 'Apply' | 'Update';
  apiVersion: string;
  time: string;
  fieldsType: 'FieldsV1';
  fieldsV1: object;
  subresource?: string;
}

/** One manager's ownership while the engine works on it. */
export interface ManagerState {
  manager: string;
  operation: 'Apply' | 'Update';
  apiVersion: string;
  subresource?: string;
  time?: string;
  set: FieldSet;
}

export type Managers = Map<string, ManagerState>;

/**
 * Identity of a manager entry, as upstream's BuildManagerIdentifier: the JSON of the entry
 * without time and fields, and without apiVersion for appliers (an applier stays one entry
 * across versions; updaters have one entry per version).
 */
export function managerId(manager: string, operation: 'Apply' | 'Update', apiVersion: string, subresource?: string): string {
  const o: Record<string, string> = { manager, operation };
  if (operation === 'Update') o['apiVersion'] = apiVersion;
  if (subresource) o['subresource'] = subresource;
  return JSON.stringify(o);
}

export function idOf(s: ManagerState): string {
  return managerId(s.manager, s.operation, s.apiVersion, s.subresource);
}

/** How upstream names a manager in conflict messages: `"m"`, `"m" with subresource "status"`, `"m" using v1`. */
export function printManager(s: Pick<ManagerState, 'manager' | 'operation' | 'apiVersion' | 'subresource'>): string {
  let out = JSON.stringify(s.manager);
  if (s.subresource) out += ` with subresource ${JSON.stringify(s.subresource)}`;
  if (s.operation === 'Update') out += ` using ${s.apiVersion}`;
  return out;
}

export class ManagedFieldsDecodeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ManagedFieldsDecodeError';
  }
}

/** Decodes stored/supplied entries; throws ManagedFieldsDecodeError naming the bad entry. */
export function decodeManagedFields(entries: unknown): Managers {
  const out: Managers = new Map();
  if (entries === undefined || entries === null) return out;
  if (!Array.isArray(entries)) throw new ManagedFieldsDecodeError('metadata.managedFields must be a list');
  entries.forEach((e: unknown, i) => {
    const where = `metadata.managedFields[${i}]`;
    if (e === null || typeof e !== 'object' || Array.isArray(e)) throw new ManagedFieldsDecodeError(`${where}: must be an object`);
    const r = e as Record<string, unknown>;
    if (r['operation'] !== 'Apply' && r['operation'] !== 'Update') throw new ManagedFieldsDecodeError(`${where}.operation: must be \`Apply\` or \`Update\``);
    if (typeof r['apiVersion'] !== 'string' || r['apiVersion'] === '') throw new ManagedFieldsDecodeError(`${where}.apiVersion: must not be empty`);
    if (r['fieldsType'] !== 'FieldsV1') {
      throw new ManagedFieldsDecodeError(r['fieldsType'] === undefined || r['fieldsType'] === '' ? `${where}: missing fieldsType` : `${where}: invalid fieldsType ${JSON.stringify(r['fieldsType'])}`);
    }
    let set: FieldSet;
    try {
      set = r['fieldsV1'] === undefined ? new FieldSet() : FieldSet.fromFieldsV1(r['fieldsV1']);
    } catch (err) {
      throw new ManagedFieldsDecodeError(`${where}.fieldsV1: ${(err as Error).message}`);
    }
    const s: ManagerState = {
      manager: typeof r['manager'] === 'string' ? r['manager'] : '',
      operation: r['operation'],
      apiVersion: r['apiVersion'],
      set,
    };
    if (typeof r['subresource'] === 'string' && r['subresource'] !== '') s.subresource = r['subresource'];
    if (typeof r['time'] === 'string') s.time = r['time'];
    out.set(idOf(s), s);
  });
  return out;
}

/** `[{}]`: the request asks to clear managedFields (spec rule 9). An empty list does not. */
export function isResetManagedFields(v: unknown): boolean {
  return Array.isArray(v) && v.length === 1 && v[0] !== null && typeof v[0] === 'object' && !Array.isArray(v[0]) && Object.keys(v[0] as object).length === 0;
}

function seconds(t: string | undefined): number {
  if (t === undefined) return 0;
  const ms = Date.parse(t);
  return Number.isNaN(ms) ? 0 : Math.floor(ms / 1000);
}

function cmp(a: string, b: string): number {
  return a === b ? 0 : a < b ? -1 : 1;
}

/** Encodes the table into entries, dropping empty sets, in upstream's order. */
export function encodeManagedFields(managers: Managers): ManagedFieldsEntry[] {
  const states = [...managers.values()].filter((s) => !s.set.empty());
  states.sort(
    (p, q) =>
      cmp(p.operation, q.operation) ||
      seconds(p.time) - seconds(q.time) ||
      cmp(p.manager, q.manager) ||
      cmp(p.apiVersion, q.apiVersion) ||
      cmp(p.subresource ?? '', q.subresource ?? ''),
  );
  return states.map((s) => {
    // Key order as the apiserver serialises ManagedFieldsEntry.
    const e: Record<string, unknown> = { manager: s.manager, operation: s.operation, apiVersion: s.apiVersion };
    if (s.time !== undefined) e['time'] = s.time;
    e['fieldsType'] = 'FieldsV1';
    e['fieldsV1'] = s.set.toFieldsV1();
    if (s.subresource) e['subresource'] = s.subresource;
    return e as unknown as ManagedFieldsEntry;
  });
}

export const MAX_UPDATE_MANAGERS = 10;
export const ANCIENT_CHANGES_MANAGER = 'ancient-changes';

/**
 * Keeps at most `max` Update entries: the oldest are folded, per apiVersion, into an
 * "ancient-changes" entry carrying the union of their sets and the newest folded time
 * (upstream capManagersManager).
 */
export function capUpdateManagers(managers: Managers, max = MAX_UPDATE_MANAGERS): Managers {
  const updaters = [...managers.entries()].filter(([, s]) => s.operation === 'Update');
  if (updaters.length <= max) return managers;
  const out: Managers = new Map(managers);
  updaters.sort(([ia, a], [ib, b]) => seconds(a.time) - seconds(b.time) || cmp(ia, ib));
  const firstByVersion = new Map<string, string>();
  let length = updaters.length;
  for (let i = 0; i < updaters.length && length > max; i++) {
    const [id, s] = updaters[i]!;
    const bucket = managerId(ANCIENT_CHANGES_MANAGER, 'Update', s.apiVersion);
    const first = firstByVersion.get(s.apiVersion);
    if (first === undefined) {
      firstByVersion.set(s.apiVersion, id);
      continue;
    }
    if (!out.has(bucket)) {
      const f = out.get(first)!;
      out.delete(first);
      out.set(bucket, { ...f, manager: ANCIENT_CHANGES_MANAGER, subresource: undefined });
    }
    const b = out.get(bucket)!;
    out.set(bucket, { ...b, set: s.set.union(b.set), time: s.time });
    out.delete(id);
    length--;
  }
  return out;
}
