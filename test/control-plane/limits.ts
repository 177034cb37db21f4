/**
 * The size limits a real control plane puts on objects (issue 26), and the estimate this
 * server uses for the one it cannot measure exactly. Pure.
 *
 * - kube-apiserver reads at most `MaxRequestBodyBytes` (3 MiB, k8s.io/apiserver
 *   `server.NewConfig`) of a write's body; one byte more is 413 `RequestEntityTooLarge`
 *   "Request entity too large: limit is 3145728", before anything is decoded.
 * - etcd refuses a request over its `--max-request-bytes` (1.5 MiB by default) with
 *   "etcdserver: request is too large", which kube-apiserver passes on as a 500 with that
 *   message and no reason (kubernetes/kubernetes#112152). What etcd measures is the object's
 *   protobuf encoding inside a transaction; this server stores JSON, so it estimates that size
 *   from the JSON value and the kind's schema (`protobufSize`).
 */
import type { SchemaNode } from './ssa/schema-types.js';

export const MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024;
export const ETCD_MAX_REQUEST_BYTES = 1.5 * 1024 * 1024;

function varintSize(n: number): number {
  let size = 1;
  let v = Math.floor(Math.abs(n));
  while (v >= 128) {
    v = Math.floor(v / 128);
    size++;
  }
  return n < 0 ? 10 : size;
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/** A length-delimited field: tag, length, content. */
const delimited = (content: number): number => 1 + varintSize(content) + content;

/**
 * The size of a value's protobuf encoding as the generated Kubernetes types write it, one
 * field at a time: a 1-byte tag per field (upstream's field numbers above 15 take 2: an
 * underestimate of a few bytes per object), strings and bytes with a length prefix,
 * integers and booleans as varints, nested messages and the entries of string maps
 * (labels, annotations: key and value fields) length-prefixed, timestamps as a
 * seconds/nanos message, and `managedFields[].fieldsV1` as the raw JSON bytes upstream keeps.
 * Keys the schema does not name count as map entries. Never throws; bounded by the value's size.
 */
export function protobufSize(value: unknown, node: SchemaNode | undefined): number {
  return messageContent(value, node);
}

function fieldContent(v: unknown, node: SchemaNode | undefined, rawJson: boolean): number {
  if (rawJson) return Buffer.byteLength(JSON.stringify(v) ?? '');
  if (typeof v === 'string') return RFC3339.test(v) ? 8 : Buffer.byteLength(v);
  if (typeof v === 'number') return Number.isInteger(v) ? varintSize(v) : 8;
  if (typeof v === 'boolean') return 1;
  return messageContent(v, node);
}

/** One field (not repeated): its tag plus its encoded content; scalars are not length-prefixed. */
function field(v: unknown, node: SchemaNode | undefined, rawJson = false): number {
  if (v === null || v === undefined) return 0;
  if (Array.isArray(v)) {
    // A repeated field: every item is a field of its own.
    const items = node?.kind === 'list' ? node.items : undefined;
    let n = 0;
    for (const item of v) n += field(item, items, rawJson);
    return n;
  }
  const content = fieldContent(v, node, rawJson);
  if (typeof v === 'number' || typeof v === 'boolean') return 1 + content;
  return delimited(content);
}

function messageContent(v: unknown, node: SchemaNode | undefined): number {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return 0;
  const struct = node?.kind === 'struct' ? node : undefined;
  let n = 0;
  for (const [k, val] of Object.entries(v as Record<string, unknown>)) {
    if (k === 'fieldsV1') {
      n += field(val, undefined, true);
      continue;
    }
    if (struct !== undefined && Object.prototype.hasOwnProperty.call(struct.fields, k)) {
      n += field(val, struct.fields[k]);
      continue;
    }
    // A map entry: a message of the key field and the value field.
    const valueNode = struct?.open ? struct.values : undefined;
    const entry = delimited(Buffer.byteLength(k)) + (val === null || val === undefined ? 0 : Array.isArray(val) ? field(val, valueNode) : delimited(fieldContent(val, valueNode, false)));
    n += delimited(entry);
  }
  return n;
}

/**
 * What etcd counts for a write of one object: the stored value (the `k8s\0` magic and the
 * runtime.Unknown envelope with apiVersion and kind around the object) and the transaction
 * (the key, twice, with a few bytes of framing).
 */
export function etcdRequestSize(key: string, apiVersion: string, kind: string, object: unknown, node: SchemaNode | undefined): number {
  const envelope = 4 + delimited(delimited(Buffer.byteLength(apiVersion)) + delimited(Buffer.byteLength(kind)));
  const value = envelope + delimited(protobufSize(object, node)) + 2;
  return value + 2 * Buffer.byteLength(key) + 32;
}
