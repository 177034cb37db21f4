/**
 * Label and field selectors (`labelSelector`, `fieldSelector` query parameters) as the
 * API server parses them: comma-separated requirements, all of which must hold.
 */
import type { Obj } from './store.js';

export type Requirement =
  | { key: string; op: 'eq' | 'neq'; value: string }
  | { key: string; op: 'in' | 'notin'; values: string[] }
  | { key: string; op: 'exists' | 'notexists' };

export class SelectorError extends Error {}

/** Splits on commas that are not inside parentheses. */
function splitTop(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of s) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur);
      cur = '';
    } else cur += ch;
  }
  out.push(cur);
  return out.map((x) => x.trim()).filter((x) => x !== '');
}

const KEY = /^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$/;

function checkKey(k: string, sel: string): string {
  if (!KEY.test(k)) throw new SelectorError(`unable to parse requirement: invalid label key "${k}" in selector "${sel}"`);
  return k;
}

export function parseLabelSelector(sel: string): Requirement[] {
  const reqs: Requirement[] = [];
  for (const part of splitTop(sel)) {
    let m: RegExpMatchArray | null;
    if ((m = part.match(/^(\S+?)\s+(in|notin)\s*\(([^)]*)\)$/))) {
      const values = m[3]!.split(',').map((v) => v.trim()).filter((v) => v !== '');
      reqs.push({ key: checkKey(m[1]!, sel), op: m[2] as 'in' | 'notin', values });
    } else if ((m = part.match(/^([^!=\s]+)\s*(==|=|!=)\s*(\S*)$/))) {
      reqs.push({ key: checkKey(m[1]!, sel), op: m[2] === '!=' ? 'neq' : 'eq', value: m[3]! });
    } else if ((m = part.match(/^!\s*(\S+)$/))) {
      reqs.push({ key: checkKey(m[1]!, sel), op: 'notexists' });
    } else if ((m = part.match(/^(\S+)$/))) {
      reqs.push({ key: checkKey(m[1]!, sel), op: 'exists' });
    } else throw new SelectorError(`unable to parse requirement: "${part}" in selector "${sel}"`);
  }
  return reqs;
}

function matches(reqs: Requirement[], get: (k: string) => string | undefined): boolean {
  for (const r of reqs) {
    const v = get(r.key);
    switch (r.op) {
      case 'eq':
        if (v !== r.value) return false;
        break;
      case 'neq':
        if (v === r.value) return false;
        break;
      case 'in':
        if (v === undefined || !r.values.includes(v)) return false;
        break;
      case 'notin':
        if (v !== undefined && r.values.includes(v)) return false;
        break;
      case 'exists':
        if (v === undefined) return false;
        break;
      case 'notexists':
        if (v !== undefined) return false;
        break;
    }
  }
  return true;
}

export function matchLabels(reqs: Requirement[], obj: Obj): boolean {
  const labels: Record<string, string> = obj['metadata']?.['labels'] ?? {};
  return matches(reqs, (k) => (Object.prototype.hasOwnProperty.call(labels, k) ? labels[k] : undefined));
}

/** Field paths each kind supports in fieldSelector (upstream: metadata.name and metadata.namespace for all, plus a few per kind). */
const FIELDS: Record<string, string[]> = {
  Pod: ['spec.nodeName', 'spec.restartPolicy', 'spec.schedulerName', 'spec.serviceAccountName', 'spec.hostNetwork', 'status.phase', 'status.podIP', 'status.nominatedNodeName'],
  Node: ['spec.unschedulable'],
  Namespace: ['status.phase'],
  Event: ['involvedObject.kind', 'involvedObject.namespace', 'involvedObject.name', 'involvedObject.uid', 'involvedObject.apiVersion', 'involvedObject.resourceVersion', 'involvedObject.fieldPath', 'reason', 'reportingComponent', 'source', 'type'],
  Lease: [],
};

export function parseFieldSelector(sel: string, kind: string): Requirement[] {
  const reqs: Requirement[] = [];
  for (const part of splitTop(sel)) {
    const m = part.match(/^([^!=\s]+)\s*(==|=|!=)\s*(.*)$/);
    if (!m) throw new SelectorError(`invalid selector: '${sel}'; can't understand '${part}'`);
    const field = m[1]!;
    if (field !== 'metadata.name' && field !== 'metadata.namespace' && !(FIELDS[kind] ?? []).includes(field)) {
      throw new SelectorError(`field label not supported: ${field}`);
    }
    reqs.push({ key: field, op: m[2] === '!=' ? 'neq' : 'eq', value: m[3]!.trim() });
  }
  return reqs;
}

function fieldValue(obj: Obj, path: string): string {
  if (path === 'source') return String(obj['source']?.['component'] ?? '');
  let cur: unknown = obj;
  for (const p of path.split('.')) cur = cur !== null && typeof cur === 'object' ? (cur as Obj)[p] : undefined;
  if (cur === undefined || cur === null) return '';
  return String(cur);
}

export function matchFields(reqs: Requirement[], obj: Obj): boolean {
  return matches(reqs, (k) => fieldValue(obj, k));
}
