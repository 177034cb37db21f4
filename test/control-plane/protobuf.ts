/**
 * Kubernetes' protobuf media type `application/vnd.kubernetes.protobuf` for the kinds kubectl
 * sends that way (issue 27): `kubectl create namespace|configmap|secret|serviceaccount|token`
 * post protobuf bodies, and a client that accepts nothing else gets protobuf answers.
 *
 * The wire format (k8s.io/apimachinery runtime/serializer/protobuf): the 4 bytes `k8s\0`, then
 * a runtime.Unknown message whose typeMeta names the apiVersion and kind and whose raw field
 * holds the object's own message (which carries no apiVersion/kind). The messages are in
 * proto/*.proto, parsed on first use.
 *
 * The conversion follows what Go does on each side, so an object means the same as its JSON:
 * - decoding: a field Go writes whatever its value (a non-pointer one) is dropped when it is
 *   empty, as Go's JSON `omitempty` would; a pointer field (marked `[(pointer) = true]`) is kept
 *   whatever it holds; bytes become base64 strings; Time becomes RFC 3339 (an empty Time is
 *   unset); FieldsV1 is its JSON text parsed.
 * - encoding: the reverse, writing every non-pointer field (empty ones too) as Go does, so an
 *   object kubectl sent and this server re-encodes is byte for byte what kubectl sent.
 * Fields of the JSON object that have no number here are not sent in protobuf.
 */
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as Protobuf from 'protobufjs';
import { DecodeError } from './decode.js';
import type { Obj } from './store.js';

const require = createRequire(import.meta.url);

export const PROTOBUF_MEDIA_TYPE = 'application/vnd.kubernetes.protobuf';
const MAGIC = Buffer.from([0x6b, 0x38, 0x73, 0x00]);

/** A protobuf body of a kind this server has no message for (the server answers 415). */
export class ProtobufKindError extends Error {
  constructor(
    readonly apiVersion: string,
    readonly kind: string,
  ) {
    super(`no protobuf serialization for kind "${kind}" in version "${apiVersion}" - send it as application/json`);
  }
}

const META = 'k8s.io.apimachinery.pkg.apis.meta.v1';
const CORE = 'k8s.io.api.core.v1';

/** apiVersion/kind -> message, for request bodies and responses. */
const KINDS: Record<string, string> = {
  'v1/Namespace': `${CORE}.Namespace`,
  'v1/NamespaceList': `${CORE}.NamespaceList`,
  'v1/ConfigMap': `${CORE}.ConfigMap`,
  'v1/ConfigMapList': `${CORE}.ConfigMapList`,
  'v1/Secret': `${CORE}.Secret`,
  'v1/SecretList': `${CORE}.SecretList`,
  'v1/ServiceAccount': `${CORE}.ServiceAccount`,
  'v1/ServiceAccountList': `${CORE}.ServiceAccountList`,
  'v1/Status': `${META}.Status`,
  'authentication.k8s.io/v1/TokenRequest': 'k8s.io.api.authentication.v1.TokenRequest',
  // `kubectl certificate approve|deny` (issue 29).
  'certificates.k8s.io/v1/CertificateSigningRequest': 'k8s.io.api.certificates.v1.CertificateSigningRequest',
  'certificates.k8s.io/v1/CertificateSigningRequestList': 'k8s.io.api.certificates.v1.CertificateSigningRequestList',
};

/** Whether `application/vnd.kubernetes.protobuf` is the media type of a Content-Type header. */
export function isProtobufContentType(contentType: string): boolean {
  return contentType.split(';')[0]!.trim().toLowerCase() === PROTOBUF_MEDIA_TYPE;
}

/** The kinds read and written in protobuf, sorted (for error messages). */
export function protobufKinds(): string[] {
  return Object.keys(KINDS)
    .map((k) => k.slice(k.lastIndexOf('/') + 1))
    .filter((k) => !k.endsWith('List') && k !== 'Status')
    .sort();
}

/** Whether objects of this kind (and its list) can be answered in protobuf. */
export function servesProtobuf(apiVersion: string, kind: string): boolean {
  return KINDS[`${apiVersion}/${kind}`] !== undefined && KINDS[`${apiVersion}/${kind}List`] !== undefined;
}

let root: Protobuf.Root | undefined;

/** The messages of proto/*.proto (parsed once; from src or dist the source tree's files are found above). */
function messages(): Protobuf.Root {
  if (root) return root;
  const protobuf = require('protobufjs') as typeof Protobuf;
  let dir = path.dirname(fileURLToPath(import.meta.url));
  const rel = path.join('test', 'control-plane', 'proto', 'k8s.proto');
  while (!fs.existsSync(path.join(dir, rel))) {
    if (path.dirname(dir) === dir) throw new Error(`${rel} not found above ${path.dirname(fileURLToPath(import.meta.url))}`);
    dir = path.dirname(dir);
  }
  const protoDir = path.join(dir, 'test', 'control-plane', 'proto');
  const r = new protobuf.Root();
  r.loadSync(['k8s.proto', 'meta.proto', 'core.proto', 'authentication.proto', 'certificates.proto'].map((f) => path.join(protoDir, f)), { keepCase: true });
  r.resolveAll();
  root = r;
  return r;
}

const isPointer = (f: Protobuf.Field): boolean => f.options?.['(pointer)'] === true;
const has = (o: object, k: string): boolean => Object.prototype.hasOwnProperty.call(o, k);
const join = (p: string, k: string): string => (p === '' ? k : `${p}.${k}`);

// ------------------------------------------------------------------ decoding (wire -> JSON shape)

function int64Out(v: unknown, p: string): number {
  const s = typeof v === 'number' ? String(v) : String((v as { toString(): string }).toString());
  const n = Number(s);
  if (!Number.isSafeInteger(n)) throw new DecodeError(`${p}: integer ${s} is out of range`);
  return n;
}

function scalarOut(f: Protobuf.Field, v: unknown, p: string): unknown {
  if (f.type === 'bytes') return Buffer.from(v as Uint8Array).toString('base64');
  if (f.type === 'int64') return int64Out(v, p);
  return v;
}

/** RFC 3339 in UTC at second precision (Go's metav1.Time JSON). */
function timeOut(v: { seconds?: unknown; nanos?: number }, p: string): string | undefined {
  if (!has(v, 'seconds') && !has(v, 'nanos')) return undefined; // the zero Time
  const ms = int64Out(v.seconds ?? 0, `${p}.seconds`) * 1000;
  const d = new Date(ms);
  if (Number.isNaN(d.getTime()) || d.getUTCFullYear() < 1 || d.getUTCFullYear() > 9999) throw new DecodeError(`${p}: time out of range`);
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function messageOut(t: Protobuf.Type, v: Obj, p: string): unknown {
  if (t.fullName === `.${META}.Time`) return timeOut(v, p);
  if (t.fullName === `.${META}.FieldsV1`) {
    if (!has(v, 'Raw')) return {};
    try {
      return JSON.parse(Buffer.from(v['Raw'] as Uint8Array).toString('utf8'));
    } catch {
      throw new DecodeError(`${p}: not JSON`);
    }
  }
  return fieldsOut(t, v, p);
}

/** The message type of a field, null for a scalar (the .proto files have no enums). */
const messageType = (f: Protobuf.Field): Protobuf.Type | null => f.resolvedType as Protobuf.Type | null;

function valueOut(f: Protobuf.Field, v: unknown, p: string): unknown {
  const t = messageType(f);
  return t ? messageOut(t, v as Obj, p) : scalarOut(f, v, p);
}

function isZero(v: unknown): boolean {
  return v === '' || v === 0 || v === false;
}

function fieldsOut(t: Protobuf.Type, msg: Obj, path: string): Obj {
  const out: Obj = {};
  for (const f of t.fieldsArray) {
    if (!has(msg, f.name)) continue;
    const v = msg[f.name];
    const p = join(path, f.name);
    if (f.map) {
      const keys = Object.keys(v as object);
      if (keys.length === 0) continue;
      const m: Obj = {};
      for (const k of keys) m[k] = valueOut(f, (v as Obj)[k], `${p}[${JSON.stringify(k)}]`);
      out[f.name] = m;
    } else if (f.repeated) {
      const a = v as unknown[];
      if (a.length > 0) out[f.name] = a.map((x, i) => valueOut(f, x, `${p}[${i}]`));
    } else {
      const x = valueOut(f, v, p);
      if (x === undefined || (!isPointer(f) && isZero(x))) continue;
      out[f.name] = x;
    }
  }
  return out;
}

/**
 * A protobuf request body as the JSON-shaped object (apiVersion and kind from the envelope).
 * Throws DecodeError for bytes that are not this format, ProtobufKindError for a kind with no
 * message here.
 */
export function decodeProtobuf(body: Uint8Array): Obj {
  if (body.length < MAGIC.length || !MAGIC.equals(Buffer.from(body.subarray(0, MAGIC.length)))) throw new DecodeError('protobuf body does not start with the magic "k8s\\x00"');
  const r = messages();
  let unknown: Obj;
  try {
    unknown = r.lookupType('k8s.io.apimachinery.pkg.runtime.Unknown').decode(body.subarray(MAGIC.length)) as unknown as Obj;
  } catch (err) {
    throw new DecodeError(`invalid protobuf envelope: ${(err as Error).message}`);
  }
  const apiVersion = String(unknown['typeMeta']?.['apiVersion'] ?? '');
  const kind = String(unknown['typeMeta']?.['kind'] ?? '');
  if (kind === '') throw new DecodeError('protobuf envelope: typeMeta.kind: Required value');
  if (unknown['contentEncoding']) throw new DecodeError(`protobuf envelope: contentEncoding: Unsupported value: "${String(unknown['contentEncoding'])}"`);
  const name = KINDS[`${apiVersion}/${kind}`];
  if (!name) throw new ProtobufKindError(apiVersion, kind);
  const t = r.lookupType(name);
  let msg: Obj;
  try {
    msg = t.decode((unknown['raw'] as Uint8Array | undefined) ?? new Uint8Array()) as unknown as Obj;
  } catch (err) {
    throw new DecodeError(`invalid protobuf ${kind}: ${(err as Error).message}`);
  }
  return { apiVersion, kind, ...fieldsOut(t, msg, '') };
}

// ------------------------------------------------------------------ encoding (JSON shape -> wire)

function fail(p: string, what: string): never {
  throw new Error(`protobuf encoding: ${p}: ${what}`);
}

function timeIn(v: unknown, p: string): Obj {
  if (v === undefined || v === null) return {};
  const m = typeof v === 'string' ? /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/.exec(v) : null;
  if (!m) return fail(p, `not an RFC 3339 time: ${JSON.stringify(v)}`);
  const ms = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(ms)) return fail(p, `not an RFC 3339 time: ${JSON.stringify(v)}`);
  return { seconds: Math.floor(ms / 1000), nanos: Number((m[2] ?? '').padEnd(9, '0')) };
}

function scalarIn(f: Protobuf.Field, v: unknown, p: string): unknown {
  switch (f.type) {
    case 'string':
      return typeof v === 'string' ? v : fail(p, `expected a string, got ${typeof v}`);
    case 'bool':
      return typeof v === 'boolean' ? v : fail(p, `expected a boolean, got ${typeof v}`);
    case 'int32':
    case 'int64':
      return typeof v === 'number' && Number.isInteger(v) ? v : fail(p, `expected an integer, got ${JSON.stringify(v)}`);
    case 'bytes':
      return typeof v === 'string' ? Buffer.from(v, 'base64') : fail(p, `expected base64 text, got ${typeof v}`);
    default:
      return fail(p, `unsupported field type ${f.type}`);
  }
}

function messageIn(t: Protobuf.Type, v: unknown, p: string): Obj {
  if (t.fullName === `.${META}.Time`) return timeIn(v, p);
  if (t.fullName === `.${META}.FieldsV1`) return { Raw: Buffer.from(JSON.stringify(v ?? {})) };
  if (v !== undefined && v !== null && (typeof v !== 'object' || Array.isArray(v))) fail(p, 'expected an object');
  return fieldsIn(t, (v ?? {}) as Obj, p);
}

function valueIn(f: Protobuf.Field, v: unknown, p: string): unknown {
  const t = messageType(f);
  return t ? messageIn(t, v, p) : scalarIn(f, v, p);
}

const DEFAULTS: Record<string, unknown> = { string: '', bool: false, int32: 0, int64: 0 };

function fieldsIn(t: Protobuf.Type, o: Obj, path: string): Obj {
  const out: Obj = {};
  for (const f of t.fieldsArray) {
    const v = o[f.name];
    const p = join(path, f.name);
    if (f.map) {
      if (v === undefined || v === null) continue;
      if (typeof v !== 'object' || Array.isArray(v)) fail(p, 'expected an object');
      const m: Obj = {};
      for (const k of Object.keys(v).sort()) m[k] = valueIn(f, v[k], `${p}[${JSON.stringify(k)}]`);
      out[f.name] = m;
    } else if (f.repeated) {
      if (v === undefined || v === null) continue;
      if (!Array.isArray(v)) fail(p, 'expected an array');
      out[f.name] = v.map((x, i) => valueIn(f, x, `${p}[${i}]`));
    } else if (v === undefined || v === null) {
      // Go writes a non-pointer field whatever it holds; a nil pointer not at all.
      if (isPointer(f)) continue;
      const mt = messageType(f);
      if (mt) out[f.name] = messageIn(mt, undefined, p);
      else if (f.type in DEFAULTS) out[f.name] = DEFAULTS[f.type];
    } else out[f.name] = valueIn(f, v, p);
  }
  return out;
}

/** An object (kind and apiVersion set) as a protobuf body. Throws ProtobufKindError for a kind with no message here. */
export function encodeProtobuf(o: Obj): Buffer {
  const apiVersion = String(o['apiVersion'] ?? '');
  const kind = String(o['kind'] ?? '');
  const name = KINDS[`${apiVersion}/${kind}`];
  if (!name) throw new ProtobufKindError(apiVersion, kind);
  const r = messages();
  const t = r.lookupType(name);
  const raw = t.encode(fieldsIn(t, o, '')).finish();
  const envelope = r.lookupType('k8s.io.apimachinery.pkg.runtime.Unknown').encode({ typeMeta: { apiVersion, kind }, raw, contentEncoding: '', contentType: '' }).finish();
  return Buffer.concat([MAGIC, envelope]);
}
