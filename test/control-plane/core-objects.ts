/**
 * The write strategies of ConfigMaps, Secrets, ServiceAccounts and Services (issue 27), as
 * kube-apiserver's registries apply them before storing: `stringData` folded into `data`,
 * defaults, the validation of keys, values, sizes, types and `immutable`, and a Service's
 * cluster IP allocated from the service range. One entry point, `admitCoreWrite`, called by
 * the server on create (old undefined) and on every update/patch/apply (old = stored state).
 * It mutates the object it is given and throws a StatusError (422 or 400) naming the fields.
 */
import { parseCidr } from './cidr.js';
import { badRequestError, cause, invalidError, type Cause } from './status-error.js';
import type { Obj } from './store.js';

/** corev1.MaxSecretSize: the total of a Secret's or ConfigMap's values. */
export const MAX_DATA_BYTES = 1024 * 1024;
const KEY_RE = /^[-._a-zA-Z0-9]+$/;
const IMMUTABLE_MSG = 'field is immutable when `immutable` is set';

/** validation.IsConfigMapKey: the problems of one data key (empty: valid). */
export function configKeyProblems(key: string): string[] {
  const out: string[] = [];
  if (key.length > 253) out.push('must be no more than 253 characters');
  if (!KEY_RE.test(key)) out.push("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')");
  if (key === '.') out.push("must not be '.'");
  else if (key === '..') out.push("must not be '..'");
  else if (key.startsWith('..')) out.push("must not start with '..'");
  return out;
}

const B64_RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Decoded length of a []byte field's base64 text; a 400 as Go's JSON decoding of []byte gives. */
function base64Bytes(kind: string, value: unknown): number {
  if (typeof value !== 'string') throw badRequestError(`${kind} in version "v1" cannot be handled as a ${kind}: json: cannot unmarshal ${typeof value} into Go value of type []uint8`);
  if (!B64_RE.test(value)) throw badRequestError(`${kind} in version "v1" cannot be handled as a ${kind}: illegal base64 data at input byte ${firstBadB64Byte(value)}`);
  return Buffer.from(value, 'base64').length;
}

function firstBadB64Byte(v: string): number {
  for (let i = 0; i < v.length; i++) if (!/[A-Za-z0-9+/=]/.test(v[i]!)) return i;
  return Math.max(0, v.length - (v.length % 4 || 4));
}

function isMap(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a ?? {}) === JSON.stringify(b ?? {});
}

function keyCauses(path: string, keys: Iterable<string>): Cause[] {
  const out: Cause[] = [];
  for (const k of keys) for (const p of configKeyProblems(k)) out.push(cause(p.startsWith('must be no more') ? 'FieldValueTooLong' : 'FieldValueInvalid', `${path}[${k}]`, p.startsWith('must be no more') ? `Too long: ${p}` : `Invalid value: ${JSON.stringify(k)}: ${p}`));
  return out;
}

function immutableCauses(old: Obj | undefined, next: Obj, fields: string[]): Cause[] {
  if (old?.['immutable'] !== true) return [];
  const out: Cause[] = [];
  if (next['immutable'] !== true) out.push(cause('FieldValueForbidden', 'immutable', `Forbidden: ${IMMUTABLE_MSG}`));
  for (const f of fields) if (!same(old[f], next[f])) out.push(cause('FieldValueForbidden', f, `Forbidden: ${IMMUTABLE_MSG}`));
  return out;
}

function name(o: Obj): string {
  return String(o['metadata']?.['name'] ?? '');
}

// ------------------------------------------------------------------ ConfigMap

function admitConfigMap(o: Obj, old: Obj | undefined): void {
  const causes: Cause[] = [];
  const data = o['data'];
  const bin = o['binaryData'];
  if (data !== undefined && data !== null && !isMap(data)) throw badRequestError('ConfigMap in version "v1" cannot be handled as a ConfigMap: data must be an object');
  if (bin !== undefined && bin !== null && !isMap(bin)) throw badRequestError('ConfigMap in version "v1" cannot be handled as a ConfigMap: binaryData must be an object');
  let total = 0;
  for (const [k, v] of Object.entries(data ?? {})) {
    if (typeof v !== 'string') throw badRequestError(`ConfigMap in version "v1" cannot be handled as a ConfigMap: data[${k}] must be a string`);
    total += Buffer.byteLength(v);
  }
  for (const v of Object.values(bin ?? {})) total += base64Bytes('ConfigMap', v);
  causes.push(...keyCauses('data', Object.keys(data ?? {})));
  causes.push(...keyCauses('binaryData', Object.keys(bin ?? {})));
  for (const k of Object.keys(bin ?? {})) if (isMap(data) && Object.prototype.hasOwnProperty.call(data, k)) causes.push(cause('FieldValueInvalid', `data[${k}]`, `Invalid value: ${JSON.stringify(k)}: duplicate of key present in binaryData`));
  if (total > MAX_DATA_BYTES) causes.push(cause('FieldValueTooLong', '', `Too long: must have at most ${MAX_DATA_BYTES} bytes`));
  causes.push(...immutableCauses(old, o, ['data', 'binaryData']));
  if (causes.length > 0) throw invalidError('', 'ConfigMap', name(o), causes);
}

// ------------------------------------------------------------------ Secret

const REDACTED = '"<secret contents redacted>"';

function admitSecret(o: Obj, old: Obj | undefined): void {
  // PrepareForCreate/Update: stringData is written over data, then dropped (never stored or returned).
  const sd = o['stringData'];
  if (sd !== undefined && sd !== null) {
    if (!isMap(sd)) throw badRequestError('Secret in version "v1" cannot be handled as a Secret: stringData must be an object');
    const data: Record<string, unknown> = isMap(o['data']) ? { ...o['data'] } : {};
    for (const [k, v] of Object.entries(sd)) {
      if (typeof v !== 'string') throw badRequestError(`Secret in version "v1" cannot be handled as a Secret: stringData[${k}] must be a string`);
      data[k] = Buffer.from(v, 'utf8').toString('base64');
    }
    o['data'] = data;
  }
  delete o['stringData'];
  if (o['type'] === undefined || o['type'] === '') o['type'] = 'Opaque';
  const type = String(o['type']);
  const data = o['data'];
  if (data !== undefined && data !== null && !isMap(data)) throw badRequestError('Secret in version "v1" cannot be handled as a Secret: data must be an object');
  const causes: Cause[] = [];
  let total = 0;
  for (const v of Object.values(data ?? {})) total += base64Bytes('Secret', v);
  causes.push(...keyCauses('data', Object.keys(data ?? {})));
  if (total > MAX_DATA_BYTES) causes.push(cause('FieldValueTooLong', 'data', `Too long: must have at most ${MAX_DATA_BYTES} bytes`));
  const d: Record<string, unknown> = isMap(data) ? data : {};
  const decoded = (k: string): string => Buffer.from(String(d[k]), 'base64').toString('utf8');
  const requireJson = (key: string): void => {
    if (!Object.prototype.hasOwnProperty.call(d, key)) {
      causes.push(cause('FieldValueRequired', `data[${key}]`, 'Required value'));
      return;
    }
    try {
      JSON.parse(decoded(key));
    } catch (err) {
      causes.push(cause('FieldValueInvalid', `data[${key}]`, `Invalid value: ${REDACTED}: ${(err as Error).message}`));
    }
  };
  switch (type) {
    case 'kubernetes.io/dockerconfigjson':
      requireJson('.dockerconfigjson');
      break;
    case 'kubernetes.io/dockercfg':
      requireJson('.dockercfg');
      break;
    case 'kubernetes.io/service-account-token':
      if (!o['metadata']?.['annotations']?.['kubernetes.io/service-account.name']) causes.push(cause('FieldValueRequired', 'metadata.annotations[kubernetes.io/service-account.name]', 'Required value'));
      break;
    case 'kubernetes.io/basic-auth':
      if (!('username' in d) && !('password' in d)) causes.push(cause('FieldValueRequired', 'data[username]', 'Required value'));
      break;
    case 'kubernetes.io/ssh-auth':
      if (!('ssh-privatekey' in d)) causes.push(cause('FieldValueRequired', 'data[ssh-privatekey]', 'Required value'));
      break;
    case 'kubernetes.io/tls':
      if (!('tls.crt' in d)) causes.push(cause('FieldValueRequired', 'data[tls.crt]', 'Required value'));
      if (!('tls.key' in d)) causes.push(cause('FieldValueRequired', 'data[tls.key]', 'Required value'));
      break;
    default:
      // Opaque, bootstrap.kubernetes.io/token and custom types: any keys.
      break;
  }
  if (old !== undefined && old['type'] !== o['type']) causes.push(cause('FieldValueInvalid', 'type', `Invalid value: ${JSON.stringify(o['type'])}: field is immutable`));
  causes.push(...immutableCauses(old, o, ['data']));
  if (causes.length > 0) throw invalidError('', 'Secret', name(o), causes);
}

// ------------------------------------------------------------------ ServiceAccount

function admitServiceAccount(o: Obj): void {
  const causes: Cause[] = [];
  for (const f of ['secrets', 'imagePullSecrets']) {
    const v = o[f];
    if (v === undefined || v === null) continue;
    if (!Array.isArray(v)) {
      causes.push(cause('FieldValueInvalid', f, 'Invalid value: must be a list'));
      continue;
    }
    v.forEach((r: unknown, i: number) => {
      if (!isMap(r) || typeof r['name'] !== 'string' || r['name'] === '') causes.push(cause('FieldValueRequired', `${f}[${i}].name`, 'Required value'));
    });
  }
  const am = o['automountServiceAccountToken'];
  if (am !== undefined && am !== null && typeof am !== 'boolean') throw badRequestError('ServiceAccount in version "v1" cannot be handled as a ServiceAccount: automountServiceAccountToken must be a boolean');
  if (causes.length > 0) throw invalidError('', 'ServiceAccount', name(o), causes);
}

// ------------------------------------------------------------------ Service

const ipToNum = (s: string): number | undefined => {
  const p = s.split('.');
  if (p.length !== 4 || !p.every((x) => /^\d{1,3}$/.test(x) && Number(x) <= 255)) return undefined;
  return p.reduce((n, x) => n * 256 + Number(x), 0);
};
const numToIp = (n: number): string => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');

/** The service IP range (`--service-cluster-ip-range`): the first address is the `kubernetes` Service's. */
export class ServiceRange {
  readonly base: number;
  readonly size: number;
  constructor(readonly cidr: string) {
    const c = parseCidr('service cluster IP range', cidr);
    this.base = c.base;
    this.size = 2 ** (32 - c.bits);
    if (this.size < 4) throw new Error(`service cluster IP range: "${cidr}" is too small`);
  }
  /** The first usable address (network + 1): the `kubernetes` Service's. */
  get first(): string {
    return numToIp(this.base + 1);
  }
  contains(ip: string): boolean {
    const n = ipToNum(ip);
    return n !== undefined && n > this.base && n < this.base + this.size - 1;
  }
  /** The lowest free address after the first (reserved for `kubernetes`), or undefined when full. */
  allocate(used: Set<string>, reserveFirst: boolean): string | undefined {
    for (let n = this.base + (reserveFirst ? 2 : 1); n < this.base + this.size - 1; n++) {
      const ip = numToIp(n);
      if (!used.has(ip)) return ip;
    }
    return undefined;
  }
}

function admitService(o: Obj, old: Obj | undefined, range: ServiceRange, usedIps: () => Set<string>): void {
  const spec: Obj = isMap(o['spec']) ? o['spec'] : (o['spec'] = {});
  const causes: Cause[] = [];
  spec['type'] = spec['type'] ?? 'ClusterIP';
  if (spec['type'] !== 'ClusterIP') causes.push(cause('FieldValueNotSupported', 'spec.type', `Unsupported value: ${JSON.stringify(spec['type'])}: supported values: "ClusterIP" (the test control plane serves ClusterIP Services only)`));
  spec['sessionAffinity'] = spec['sessionAffinity'] ?? 'None';
  spec['internalTrafficPolicy'] = spec['internalTrafficPolicy'] ?? 'Cluster';
  spec['ipFamilies'] = spec['ipFamilies'] ?? ['IPv4'];
  spec['ipFamilyPolicy'] = spec['ipFamilyPolicy'] ?? 'SingleStack';
  const ports = spec['ports'];
  const headless = spec['clusterIP'] === 'None';
  if (ports !== undefined && !Array.isArray(ports)) throw badRequestError('Service in version "v1" cannot be handled as a Service: spec.ports must be a list');
  if (!headless && (!Array.isArray(ports) || ports.length === 0)) causes.push(cause('FieldValueRequired', 'spec.ports', 'Required value'));
  const names = new Set<string>();
  (Array.isArray(ports) ? ports : []).forEach((p: unknown, i: number) => {
    const at = `spec.ports[${i}]`;
    if (!isMap(p)) {
      causes.push(cause('FieldValueInvalid', at, 'Invalid value: must be an object'));
      return;
    }
    p['protocol'] = p['protocol'] ?? 'TCP';
    if (!['TCP', 'UDP', 'SCTP'].includes(String(p['protocol']))) causes.push(cause('FieldValueNotSupported', `${at}.protocol`, `Unsupported value: ${JSON.stringify(p['protocol'])}: supported values: "SCTP", "TCP", "UDP"`));
    const port = p['port'];
    if (!Number.isInteger(port) || (port as number) < 1 || (port as number) > 65535) causes.push(cause('FieldValueInvalid', `${at}.port`, `Invalid value: ${JSON.stringify(port ?? 0)}: must be between 1 and 65535, inclusive`));
    if (p['targetPort'] === undefined || p['targetPort'] === 0 || p['targetPort'] === '') p['targetPort'] = port;
    const tp = p['targetPort'];
    if (typeof tp === 'number' ? !Number.isInteger(tp) || tp < 1 || tp > 65535 : !(typeof tp === 'string' && /^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$/.test(tp) && /[a-z]/.test(tp))) {
      causes.push(cause('FieldValueInvalid', `${at}.targetPort`, `Invalid value: ${JSON.stringify(tp)}: must be between 1 and 65535, inclusive, or an IANA_SVC_NAME`));
    }
    const n = p['name'];
    if ((n === undefined || n === '') && (ports as unknown[]).length > 1) causes.push(cause('FieldValueRequired', `${at}.name`, 'Required value'));
    else if (typeof n === 'string' && n !== '') {
      if (names.has(n)) causes.push(cause('FieldValueDuplicate', `${at}.name`, `Duplicate value: ${JSON.stringify(n)}`));
      names.add(n);
    }
  });
  // Cluster IP: kept from the stored object, checked when asked for, else allocated.
  const oldIp: unknown = old?.['spec']?.['clusterIP'];
  if (old !== undefined) {
    if (spec['clusterIP'] === undefined || spec['clusterIP'] === '') {
      spec['clusterIP'] = oldIp;
      spec['clusterIPs'] = old['spec']?.['clusterIPs'];
    } else if (spec['clusterIP'] !== oldIp) causes.push(cause('FieldValueInvalid', 'spec.clusterIPs[0]', `Invalid value: ${JSON.stringify(spec['clusterIP'])}: may not change once set`));
  } else if (causes.length === 0) {
    const asked = spec['clusterIP'] ?? (Array.isArray(spec['clusterIPs']) ? spec['clusterIPs'][0] : undefined);
    if (asked === 'None') spec['clusterIP'] = 'None';
    else if (asked !== undefined && asked !== '') {
      const ip = String(asked);
      if (ipToNum(ip) === undefined) causes.push(cause('FieldValueInvalid', 'spec.clusterIPs[0]', `Invalid value: ${JSON.stringify(ip)}: must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`));
      else if (!range.contains(ip)) causes.push(cause('FieldValueInvalid', 'spec.clusterIPs[0]', `Invalid value: ${JSON.stringify(ip)}: failed to allocate IP ${ip}: the provided IP (${ip}) is not in the valid range. The range of valid IPs is ${range.cidr}`));
      else if (usedIps().has(ip)) causes.push(cause('FieldValueInvalid', 'spec.clusterIPs[0]', `Invalid value: ${JSON.stringify(ip)}: failed to allocate IP ${ip}: provided IP is already allocated`));
      else spec['clusterIP'] = ip;
    } else {
      const ip = range.allocate(usedIps(), true);
      if (ip === undefined) causes.push(cause('FieldValueInvalid', 'spec.clusterIPs', 'Invalid value: []string(nil): failed to allocate IP: range is full'));
      else spec['clusterIP'] = ip;
    }
    if (causes.length === 0) spec['clusterIPs'] = [spec['clusterIP']];
  }
  if (causes.length > 0) throw invalidError('', 'Service', name(o), causes);
  if (old === undefined && o['status'] === undefined) o['status'] = { loadBalancer: {} };
}

export interface CoreWriteContext {
  serviceRange: ServiceRange;
  /** Cluster IPs held by stored Services. */
  usedServiceIps(): Set<string>;
}

/** The strategy of a write of one of these kinds (no-op for other kinds). Mutates `o`; throws StatusError. */
export function admitCoreWrite(kind: string, o: Obj, old: Obj | undefined, ctx: CoreWriteContext): void {
  if (kind === 'ConfigMap') admitConfigMap(o, old);
  else if (kind === 'Secret') admitSecret(o, old);
  else if (kind === 'ServiceAccount') admitServiceAccount(o);
  else if (kind === 'Service') admitService(o, old, ctx.serviceRange, () => ctx.usedServiceIps());
}
