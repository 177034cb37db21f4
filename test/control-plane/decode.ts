/**
 * Request bodies: JSON parsed by hand so duplicate fields are seen in the raw text (spec
 * "Field validation"), YAML through the yaml package with its duplicate-key errors turned
 * into the same report, then a walk over the kind's schema for unknown fields and wrong
 * types (the first wrong type is a fatal error at every level).
 */
import YAML from 'yaml';
import type { SchemaNode } from './ssa/schema-types.js';
import { isUndescribed } from './schema.js';

export class DecodeError extends Error {}

export interface Decoded {
  value: unknown;
  duplicates: string[];
}

function joinPath(path: string, k: string): string {
  return path === '' ? k : `${path}.${k}`;
}

/** A JSON parser that records duplicate object keys by their dotted path (the last value wins, as upstream). */
export function parseJsonStrict(text: string): Decoded {
  let i = 0;
  const duplicates: string[] = [];
  const ws = (): void => {
    while (i < text.length && ' \t\n\r'.includes(text[i]!)) i++;
  };
  const fail = (what: string): never => {
    throw new DecodeError(`invalid JSON at offset ${i}: ${what}`);
  };
  const str = (): string => {
    const start = i;
    i++;
    while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    if (i >= text.length) fail('unterminated string');
    i++;
    return JSON.parse(text.slice(start, i)) as string;
  };
  /** The members of an object or the items of an array, the opening bracket read: `item` for each, up to `close`. */
  const members = (close: '}' | ']', item: () => void): void => {
    ws();
    if (text[i] === close) {
      i++;
      return;
    }
    for (;;) {
      item();
      ws();
      if (text[i] === ',') {
        i++;
        continue;
      }
      if (text[i] === close) {
        i++;
        return;
      }
      fail(`expected "," or "${close}"`);
    }
  };
  const value = (path: string): unknown => {
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      const out: Record<string, unknown> = {};
      members('}', () => {
        ws();
        if (text[i] !== '"') fail('expected a string key');
        const k = str();
        ws();
        if (text[i] !== ':') fail('expected ":"');
        i++;
        const p = joinPath(path, k);
        if (Object.prototype.hasOwnProperty.call(out, k)) duplicates.push(p);
        out[k] = value(p);
      });
      return out;
    }
    if (c === '[') {
      i++;
      const out: unknown[] = [];
      members(']', () => {
        out.push(value(`${path}[${out.length}]`));
      });
      return out;
    }
    if (c === '"') return str();
    const m = /^(-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?|true|false|null)/.exec(text.slice(i, i + 64));
    if (!m) return fail('unexpected character');
    i += m[0].length;
    return JSON.parse(m[0]);
  };
  const v = value('');
  ws();
  if (i !== text.length) fail('trailing data');
  return { value: v, duplicates };
}

/** YAML (or JSON as YAML). Duplicate keys are reported like the JSON parser does. */
export function parseYamlStrict(text: string): Decoded {
  if (/^\s*[{[]/.test(text)) {
    try {
      return parseJsonStrict(text);
    } catch {
      // Not JSON after all: flow-style YAML.
    }
  }
  const duplicates: string[] = [];
  const doc = YAML.parseDocument(text, { uniqueKeys: false, version: '1.2' });
  if (doc.errors.length > 0) throw new DecodeError(`invalid YAML: ${doc.errors[0]!.message}`);
  const walk = (node: unknown, path: string): void => {
    if (YAML.isMap(node)) {
      const seen = new Set<string>();
      for (const pair of node.items) {
        const k = String(YAML.isScalar(pair.key) ? pair.key.value : pair.key);
        const p = joinPath(path, k);
        if (seen.has(k)) duplicates.push(p);
        seen.add(k);
        walk(pair.value, p);
      }
    } else if (YAML.isSeq(node)) node.items.forEach((n, idx) => walk(n, `${path}[${idx}]`));
  };
  walk(doc.contents, '');
  return { value: doc.toJS(), duplicates };
}

export interface FieldReport {
  unknown: string[];
  /** The first wrong type, as a message naming the field. */
  typeError?: string;
}

const kindOf = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

/**
 * Walks a value against a schema: collects unknown fields (dotted paths) and the first type
 * error. Unknown fields are removed from the value (they are dropped at every level).
 */
export function checkFields(value: unknown, node: SchemaNode, path = '', report: FieldReport = { unknown: [] }): FieldReport {
  if (value === null || value === undefined) return report;
  if (node.kind === 'scalar') {
    if (typeof value === 'object' && report.typeError === undefined) report.typeError = `${path}: expected a scalar, got ${kindOf(value)}`;
    return report;
  }
  if (node.kind === 'list') {
    if (!Array.isArray(value)) {
      if (report.typeError === undefined) report.typeError = `${path}: expected array, got ${kindOf(value)}`;
      return report;
    }
    value.forEach((v, i) => checkFields(v, node.items, `${path}[${i}]`, report));
    return report;
  }
  if (isUndescribed(node)) return report;
  if (typeof value !== 'object' || Array.isArray(value)) {
    if (report.typeError === undefined) report.typeError = `${path}: expected object, got ${kindOf(value)}`;
    return report;
  }
  const o = value as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    const p = joinPath(path, k);
    const f = node.fields[k] ?? (node.open ? (node.values ?? { kind: 'struct', fields: {}, open: true }) : undefined);
    if (!f) {
      report.unknown.push(p);
      delete o[k];
    } else checkFields(o[k], f, p, report);
  }
  return report;
}
