/**
 * What kube-apiserver and kube-controller-manager do for a kubelet's TLS bootstrap (issue 29):
 * - bootstrap-token authentication: a bearer token `<id>.<secret>` matching a
 *   `bootstrap.kubernetes.io/token` Secret `kube-system/bootstrap-token-<id>` with
 *   `usage-bootstrap-authentication: "true"` and no past `expiration` is the user
 *   `system:bootstrap:<id>` in `system:bootstrappers`, its `auth-extra-groups` and
 *   `system:authenticated`;
 * - the `certificates.k8s.io/v1` CertificateSigningRequest strategies: create fills
 *   spec.username/groups/uid from the caller and checks the request; an update never changes
 *   the spec; `approval` sets only Approved/Denied, `status` only the certificate and other
 *   conditions;
 * - the csrapproving controller: approves node client requests (new ones by a bootstrapper,
 *   renewals by the node itself), never serving requests;
 * - the csrsigning controller: signs approved requests of the four kubernetes.io signers with
 *   the control plane's CA (`csrSigningDurationMs`, default one year, or the request's
 *   expirationSeconds when shorter), or marks them Failed when the signer refuses them.
 * Certificates are written with the DER writer of src/system/der.ts and signed by
 * node:crypto with the CA key; requests are read by the small DER reader below.
 */
import crypto, { X509Certificate, type KeyObject } from 'node:crypto';
import fs from 'node:fs';
import { OIDS, bitString, boolean, context, integer, octetString, oid, sequence, time } from '../../src/system/der.js';
import { signDer } from '../../src/system/pkcs10.js';
import type { Clock } from '../../src/clock.js';
import type { SchemaNode } from './ssa/schema-types.js';
import type { Obj, Store } from './store.js';

// ------------------------------------------------------------------ schema

const S: SchemaNode = { kind: 'scalar' };
const ANY: SchemaNode = { kind: 'struct', fields: {}, open: true };
const strings: SchemaNode = { kind: 'list', listType: 'atomic', items: S };
export const CSR_SCHEMA: SchemaNode = {
  kind: 'struct',
  fields: {
    apiVersion: S,
    kind: S,
    metadata: ANY,
    spec: { kind: 'struct', fields: { request: S, signerName: S, expirationSeconds: S, usages: strings, username: S, uid: S, groups: strings, extra: ANY } },
    status: {
      kind: 'struct',
      fields: {
        certificate: S,
        conditions: { kind: 'list', listType: 'map', keys: ['type'], items: { kind: 'struct', fields: { type: S, status: S, reason: S, message: S, lastUpdateTime: S, lastTransitionTime: S } } },
      },
    },
  },
};

// ------------------------------------------------------------------ bootstrap tokens

const TOKEN_RE = /^([a-z0-9]{6})\.([a-z0-9]{16})$/;

/** The caller a bootstrap token stands for, or undefined (kube-apiserver's bootstrap token authenticator). */
export function bootstrapTokenCaller(store: Store, token: string, now: number): { user: string; groups: string[] } | undefined {
  const m = TOKEN_RE.exec(token);
  if (!m) return undefined;
  const [, id, secret] = m;
  const s = store.get('secrets', 'kube-system', `bootstrap-token-${id}`);
  if (!s || s['type'] !== 'bootstrap.kubernetes.io/token' || s['metadata']?.['deletionTimestamp']) return undefined;
  const data = (k: string): string | undefined => {
    const v = s['data']?.[k];
    if (typeof v === 'string') return Buffer.from(v, 'base64').toString('utf8');
    const sv = s['stringData']?.[k];
    return typeof sv === 'string' ? sv : undefined;
  };
  if (data('token-id') !== id) return undefined;
  const want = Buffer.from(data('token-secret') ?? '');
  const got = Buffer.from(secret!);
  if (want.length !== got.length || !crypto.timingSafeEqual(want, got)) return undefined;
  if (data('usage-bootstrap-authentication') !== 'true') return undefined;
  const exp = data('expiration');
  if (exp !== undefined) {
    const t = Date.parse(exp);
    if (Number.isNaN(t) || now >= t) return undefined;
  }
  const extra = (data('auth-extra-groups') ?? '').split(',').map((g) => g.trim()).filter((g) => /^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$/.test(g));
  return { user: `system:bootstrap:${id}`, groups: ['system:bootstrappers', ...extra, 'system:authenticated'] };
}

// ------------------------------------------------------------------ DER reader

interface Tlv {
  tag: number;
  /** The whole encoding (tag, length, value). */
  raw: Buffer;
  value: Buffer;
}

function readTlv(b: Buffer, at: number): Tlv {
  if (at + 2 > b.length) throw new Error('truncated DER');
  const tag = b[at]!;
  let len = b[at + 1]!;
  let start = at + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    if (n === 0 || n > 4 || start + n > b.length) throw new Error('bad DER length');
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + b[start + i]!;
    start += n;
  }
  if (start + len > b.length) throw new Error('truncated DER');
  return { tag, raw: b.subarray(at, start + len), value: b.subarray(start, start + len) };
}

function children(t: Tlv): Tlv[] {
  const out: Tlv[] = [];
  for (let at = 0; at < t.value.length; ) {
    const c = readTlv(t.value, at);
    out.push(c);
    at += c.raw.length;
    if (out.length > 1000) throw new Error('too many DER elements');
  }
  return out;
}

const oidBytes = (dotted: string): Buffer => oid(dotted);

export interface ParsedCsr {
  commonName: string | undefined;
  organization: string[];
  subjectRaw: Buffer;
  spkiRaw: Buffer;
  publicKey: KeyObject;
  /** Raw DER of the requested subjectAltName extension (with its OID), if any. */
  sanExtension?: Buffer;
  dnsNames: number;
  ipAddresses: number;
  otherNames: number;
}

/** Reads and verifies a PEM `CERTIFICATE REQUEST`; throws with the reason. */
export function parseCsr(pem: string): ParsedCsr {
  const m = /-----BEGIN CERTIFICATE REQUEST-----([\s\S]+?)-----END CERTIFICATE REQUEST-----/.exec(pem);
  if (!m) throw new Error('PEM block type must be CERTIFICATE REQUEST');
  const der = Buffer.from(m[1]!.replace(/\s/g, ''), 'base64');
  const top = readTlv(der, 0);
  const [info, , sig] = children(top);
  if (!info || !sig || sig.tag !== 0x03) throw new Error('not a certificate request');
  const [, subject, spki, attrs] = children(info);
  if (!subject || !spki) throw new Error('not a certificate request');
  const publicKey = crypto.createPublicKey({ key: spki.raw, format: 'der', type: 'spki' });
  const signature = sig.value.subarray(1);
  const ok = crypto.verify('sha256', info.raw, publicKey.asymmetricKeyType === 'ec' ? { key: publicKey, dsaEncoding: 'der' } : publicKey, signature);
  if (!ok) throw new Error('x509: ECDSA verification failure');
  const out: ParsedCsr = { commonName: undefined, organization: [], subjectRaw: subject.raw, spkiRaw: spki.raw, publicKey, dnsNames: 0, ipAddresses: 0, otherNames: 0 };
  for (const rdn of children(subject)) {
    for (const atv of children(rdn)) {
      const [type, value] = children(atv);
      if (!type || !value) continue;
      const v = value.value.toString('utf8');
      if (type.raw.equals(oidBytes(OIDS.commonName))) out.commonName = v;
      else if (type.raw.equals(oidBytes(OIDS.organization))) out.organization.push(v);
    }
  }
  if (attrs && attrs.tag === 0xa0) {
    for (const attr of children(attrs)) {
      const [type, values] = children(attr);
      if (!type || !values || !type.raw.equals(oidBytes(OIDS.extensionRequest))) continue;
      for (const exts of children(values)) {
        for (const ext of children(exts)) {
          const parts = children(ext);
          if (!parts[0]?.raw.equals(oidBytes(OIDS.subjectAltName))) continue;
          out.sanExtension = ext.raw;
          const names = readTlv(parts[parts.length - 1]!.value, 0);
          for (const n of children(names)) {
            if (n.tag === 0x82) out.dnsNames++;
            else if (n.tag === 0x87) out.ipAddresses++;
            else out.otherNames++;
          }
        }
      }
    }
  }
  return out;
}

// ------------------------------------------------------------------ strategies

export type Cause = { field: string; message: string };

const KNOWN_USAGES = new Set(['signing', 'digital signature', 'content commitment', 'key encipherment', 'key agreement', 'data encipherment', 'cert sign', 'crl sign', 'encipher only', 'decipher only', 'any', 'server auth', 'client auth', 'code signing', 'email protection', 's/mime', 'ipsec end system', 'ipsec tunnel', 'ipsec user', 'timestamping', 'ocsp signing', 'microsoft sgc', 'netscape sgc']);
const SIGNER_RE = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?\/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

function pemOfRequest(spec: Obj): string {
  return typeof spec['request'] === 'string' ? Buffer.from(spec['request'], 'base64').toString('utf8') : '';
}

/** Create strategy: spec.username/uid/groups from the caller, status empty; returns the validation causes. */
export function prepareCsrCreate(obj: Obj, caller: { user: string; groups: string[] }): Cause[] {
  const spec: Obj = (obj['spec'] = obj['spec'] ?? {});
  spec['username'] = caller.user;
  spec['groups'] = [...caller.groups];
  delete spec['uid'];
  delete spec['extra'];
  obj['status'] = {};
  const causes: Cause[] = [];
  try {
    parseCsr(pemOfRequest(spec));
  } catch (err) {
    causes.push({ field: 'spec.request', message: `Invalid value: []byte{...}: ${(err as Error).message}` });
  }
  if (typeof spec['signerName'] !== 'string' || spec['signerName'] === '') causes.push({ field: 'spec.signerName', message: 'Required value' });
  else if (!SIGNER_RE.test(spec['signerName'])) causes.push({ field: 'spec.signerName', message: `Invalid value: "${spec['signerName']}": must be a fully qualified domain and path of the form 'example.com/signer-name'` });
  const usages = spec['usages'];
  if (!Array.isArray(usages) || usages.length === 0) causes.push({ field: 'spec.usages', message: 'Required value' });
  else
    usages.forEach((u, i) => {
      if (!KNOWN_USAGES.has(String(u))) causes.push({ field: `spec.usages[${i}]`, message: `Unsupported value: "${String(u)}"` });
      if (usages.indexOf(u) !== i) causes.push({ field: `spec.usages[${i}]`, message: `Duplicate value: "${String(u)}"` });
    });
  const es = spec['expirationSeconds'];
  if (es !== undefined && es !== null && (!Number.isInteger(es) || es < 600)) causes.push({ field: 'spec.expirationSeconds', message: `Invalid value: ${String(es)}: may not specify a duration less than 600 seconds (10 minutes)` });
  return causes;
}

const isDecision = (c: Obj): boolean => c['type'] === 'Approved' || c['type'] === 'Denied';

function stampConditions(conds: Obj[], old: Obj[], now: string): Obj[] {
  return conds.map((c) => {
    const was = old.find((o) => o['type'] === c['type']);
    const out: Obj = { ...c, status: c['status'] ?? 'True' };
    if (!out['lastUpdateTime']) out['lastUpdateTime'] = now;
    if (!out['lastTransitionTime']) out['lastTransitionTime'] = was && was['status'] === out['status'] ? (was['lastTransitionTime'] ?? now) : now;
    return out;
  });
}

/**
 * Update strategies: the spec never changes; the main resource keeps the status; `approval`
 * takes only the Approved/Denied conditions; `status` takes the certificate and the other
 * conditions. Returns the object to store, or the causes of a 422.
 */
export function csrUpdate(old: Obj, next: Obj, sub: string | undefined, now: string): { obj: Obj } | { causes: Cause[] } {
  const out: Obj = { ...next, spec: JSON.parse(JSON.stringify(old['spec'] ?? {})) };
  const oldStatus: Obj = old['status'] ?? {};
  const oldConds: Obj[] = Array.isArray(oldStatus['conditions']) ? oldStatus['conditions'] : [];
  const newConds: Obj[] = Array.isArray(next['status']?.['conditions']) ? next['status']['conditions'] : [];
  const causes: Cause[] = [];
  if (sub === 'approval') {
    const decisions = stampConditions(newConds.filter(isDecision), oldConds, now);
    for (const o of oldConds.filter(isDecision)) if (!decisions.some((d) => d['type'] === o['type'])) causes.push({ field: 'status.conditions', message: `Forbidden: updates may not remove a condition of type "${String(o['type'])}"` });
    out['status'] = { ...oldStatus, conditions: [...decisions, ...oldConds.filter((c) => !isDecision(c))] };
  } else if (sub === 'status') {
    const others = stampConditions(newConds.filter((c) => !isDecision(c)), oldConds, now);
    const status: Obj = { conditions: [...oldConds.filter(isDecision), ...others] };
    const cert = next['status']?.['certificate'];
    if (cert !== undefined && cert !== null && cert !== '') {
      if (oldStatus['certificate'] && oldStatus['certificate'] !== cert) causes.push({ field: 'status.certificate', message: 'Forbidden: updates may not modify existing certificate content' });
      if (!oldConds.some((c) => c['type'] === 'Approved')) causes.push({ field: 'status.certificate', message: 'Forbidden: certificate can only be set once approved' });
      try {
        new X509Certificate(Buffer.from(String(cert), 'base64').toString('utf8'));
      } catch {
        causes.push({ field: 'status.certificate', message: 'Invalid value: "<certificate data>": must contain at least one CERTIFICATE PEM block' });
      }
      status['certificate'] = cert;
    } else if (oldStatus['certificate']) status['certificate'] = oldStatus['certificate'];
    if (status['conditions'].length === 0) delete status['conditions'];
    out['status'] = status;
  } else out['status'] = oldStatus;
  const conds: Obj[] = out['status']['conditions'] ?? [];
  const types = conds.map((c) => c['type']);
  if (types.includes('Approved') && types.includes('Denied')) causes.push({ field: 'status.conditions', message: 'Invalid value: "Approved": Approved and Denied conditions are mutually exclusive' });
  if (new Set(types).size !== types.length) causes.push({ field: 'status.conditions', message: 'Duplicate value: conditions of one type' });
  return causes.length > 0 ? { causes } : { obj: out };
}

// ------------------------------------------------------------------ controllers

export const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';
export const KUBELET_SERVING_SIGNER = 'kubernetes.io/kubelet-serving';
const SIGNERS = new Set([KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, 'kubernetes.io/kube-apiserver-client', 'kubernetes.io/legacy-unknown']);

const sameSet = (a: string[], b: string[]): boolean => a.length === b.length && new Set(a).size === a.length && b.every((x) => a.includes(x));

/** IsKubeletClientCSR: why the request is not a node client certificate request ('' when it is). */
export function kubeletClientProblem(spec: Obj, csr: ParsedCsr): string {
  if (spec['signerName'] !== KUBELET_CLIENT_SIGNER) return `signerName must be ${KUBELET_CLIENT_SIGNER}`;
  if (csr.organization.length !== 1 || csr.organization[0] !== 'system:nodes') return 'subject organization is not system:nodes';
  if (!csr.commonName?.startsWith('system:node:')) return 'subject common name does not begin with system:node:';
  if (csr.sanExtension) return 'DNS, email, IP or URI subjectAltNames are not allowed';
  const usages = (spec['usages'] ?? []).map(String);
  if (!sameSet(usages, ['digital signature', 'client auth']) && !sameSet(usages, ['digital signature', 'key encipherment', 'client auth'])) return 'usages did not match [client auth digital signature] or [client auth digital signature key encipherment]';
  return '';
}

/** IsKubeletServingCSR ('' when it is one). */
function kubeletServingProblem(spec: Obj, csr: ParsedCsr): string {
  if (csr.organization.length !== 1 || csr.organization[0] !== 'system:nodes') return 'subject organization is not system:nodes';
  if (!csr.commonName?.startsWith('system:node:')) return 'subject common name does not begin with system:node:';
  if (csr.otherNames > 0) return 'email and URI subjectAltNames are not allowed';
  if (csr.dnsNames + csr.ipAddresses === 0) return 'DNS or IP subjectAltName is required';
  const usages = (spec['usages'] ?? []).map(String);
  if (!sameSet(usages, ['digital signature', 'server auth']) && !sameSet(usages, ['digital signature', 'key encipherment', 'server auth'])) return 'usages did not match [digital signature server auth] or [digital signature key encipherment server auth]';
  return '';
}

export interface CsrControllerOptions {
  store: Store;
  clock: Clock;
  caFile: string;
  caKeyFile: string;
  /** Lifetime of issued certificates (kube-controller-manager --cluster-signing-duration; default one year). */
  signingDurationMs?: number;
}

/**
 * The approving and signing controllers: each change of a CSR is looked at on the next turn
 * of the event loop (never inside the store's own write). Returns the stop function.
 */
export function startCsrControllers(o: CsrControllerOptions): () => void {
  const caCert = new X509Certificate(fs.readFileSync(o.caFile));
  const caKey = crypto.createPrivateKey(fs.readFileSync(o.caKeyFile));
  // The CA's subject, raw: the issuer of what it signs.
  const caTbs = children(readTlv(caCert.raw, 0))[0]!;
  const caParts = children(caTbs);
  const caSubject = caParts[caParts[0]!.tag === 0xa0 ? 5 : 4]!.raw;
  const signingMs = o.signingDurationMs ?? 365 * 24 * 3600_000;
  const pending = new Set<string>();
  let stopped = false;
  const iso = () => new Date(o.clock.now()).toISOString().replace(/\.\d{3}Z$/, 'Z');

  const write = (obj: Obj): void => {
    o.store.put('certificatesigningrequests', '', obj['metadata']['name'], obj);
  };

  const reconcile = (name: string): void => {
    const cur = o.store.get('certificatesigningrequests', '', name);
    if (!cur) return;
    const conds: Obj[] = cur['status']?.['conditions'] ?? [];
    const has = (t: string) => conds.some((c) => c['type'] === t && (c['status'] ?? 'True') === 'True');
    const spec: Obj = cur['spec'] ?? {};
    let csr: ParsedCsr;
    try {
      csr = parseCsr(pemOfRequest(spec));
    } catch {
      return;
    }
    if (!has('Approved') && !has('Denied')) {
      // csrapproving: node client certificates only; serving certificates wait for a person.
      if (kubeletClientProblem(spec, csr) !== '') return;
      const groups: string[] = spec['groups'] ?? [];
      const self = spec['username'] === csr.commonName && groups.includes('system:nodes');
      const bootstrapper = groups.includes('system:bootstrappers');
      if (!self && !bootstrapper) return;
      const next = JSON.parse(JSON.stringify(cur)) as Obj;
      next['status'] = { ...(next['status'] ?? {}), conditions: [...conds, { type: 'Approved', status: 'True', reason: 'AutoApproved', message: self ? 'Auto approving self kubelet client certificate after SubjectAccessReview.' : 'Auto approving kubelet client certificate after SubjectAccessReview.', lastUpdateTime: iso(), lastTransitionTime: iso() }] };
      write(next);
      return; // its own MODIFIED event brings it to the signer
    }
    if (!has('Approved') || has('Denied') || has('Failed') || cur['status']?.['certificate']) return;
    const signer = String(spec['signerName'] ?? '');
    if (!SIGNERS.has(signer)) return; // another signer's: not ours to sign
    const problem = signer === KUBELET_CLIENT_SIGNER ? kubeletClientProblem(spec, csr) : signer === KUBELET_SERVING_SIGNER ? kubeletServingProblem(spec, csr) : '';
    const next = JSON.parse(JSON.stringify(cur)) as Obj;
    if (problem !== '') {
      next['status'] = { ...(next['status'] ?? {}), conditions: [...conds, { type: 'Failed', status: 'True', reason: 'SignerValidationFailure', message: problem, lastUpdateTime: iso(), lastTransitionTime: iso() }] };
      write(next);
      return;
    }
    const es = spec['expirationSeconds'];
    const ttl = typeof es === 'number' && es > 0 ? Math.min(signingMs, es * 1000) : signingMs;
    const pem = signCertificate({ csr, usages: (spec['usages'] ?? []).map(String), caKey, caSubject, caNotAfter: Date.parse(caCert.validTo), now: o.clock.now(), ttlMs: ttl });
    next['status'] = { ...(next['status'] ?? {}), certificate: Buffer.from(pem).toString('base64') };
    write(next);
  };

  // The csrcleaner (kube-controller-manager's): a request whose issued certificate has expired
  // is deleted, so a node that bootstraps again with the same key (the kubelet reuses its
  // current pair's) makes a new request instead of finding the old one. Upstream sweeps every
  // hour (and also removes approved, denied and failed requests after an hour, pending ones
  // after a day); here every second, certificates only.
  const cleaner = setInterval(() => {
    for (const cur of o.store.list('certificatesigningrequests')) {
      const cert = cur['status']?.['certificate'];
      if (typeof cert !== 'string' || cert === '') continue;
      try {
        if (Date.parse(new X509Certificate(Buffer.from(cert, 'base64')).validTo) <= o.clock.now()) o.store.remove('certificatesigningrequests', '', cur['metadata']['name']);
      } catch {
        // not a certificate: left as it is
      }
    }
  }, 1000);
  cleaner.unref();

  const unsubscribe = o.store.subscribe((ev) => {
    if (ev.resource !== 'certificatesigningrequests' || ev.type === 'DELETED' || pending.has(ev.name)) return;
    pending.add(ev.name);
    setImmediate(() => {
      pending.delete(ev.name);
      if (!stopped) reconcile(ev.name);
    });
  });
  return () => {
    stopped = true;
    clearInterval(cleaner);
    unsubscribe();
  };
}

/**
 * An X.509 v3 certificate for the request's key and subject, issued by the CA: valid from 5
 * minutes before now (the signer's backdate, for clock skew) for `ttlMs`, never past the CA;
 * key usage, extended key usage, CA:FALSE and the requested subjectAltNames.
 */
export function signCertificate(o: { csr: ParsedCsr; usages: string[]; caKey: KeyObject; caSubject: Buffer; caNotAfter: number; now: number; ttlMs: number }): string {
  const notBefore = o.now - Math.min(5 * 60_000, o.ttlMs / 4);
  const notAfter = Math.min(o.now + o.ttlMs, o.caNotAfter);
  let ku = 0;
  if (o.usages.includes('digital signature')) ku |= 0x80;
  if (o.usages.includes('key encipherment')) ku |= 0x20;
  const kuBits = ku & 0x20 ? Buffer.from([0x03, 0x02, 0x05, ku]) : Buffer.from([0x03, 0x02, 0x07, ku]);
  const eku: Buffer[] = [];
  if (o.usages.includes('client auth')) eku.push(oid(OIDS.clientAuth));
  if (o.usages.includes('server auth')) eku.push(oid(OIDS.serverAuth));
  const exts: Buffer[] = [];
  if (ku !== 0) exts.push(sequence(oid(OIDS.keyUsage), boolean(true), octetString(kuBits)));
  if (eku.length > 0) exts.push(sequence(oid(OIDS.extKeyUsage), octetString(sequence(...eku))));
  exts.push(sequence(oid(OIDS.basicConstraints), boolean(true), octetString(sequence())));
  if (o.csr.sanExtension) exts.push(o.csr.sanExtension);
  const alg = sequence(oid(OIDS.ecdsaWithSha256));
  const serial = crypto.randomBytes(16);
  serial[0] = serial[0]! & 0x7f;
  const tbs = sequence(context(0, integer(2)), integer(serial), alg, o.caSubject, sequence(time(notBefore), time(notAfter)), o.csr.subjectRaw, o.csr.spkiRaw, context(3, sequence(...exts)));
  const der = sequence(tbs, alg, bitString(signDer(o.caKey, tbs)));
  const b64 = der.toString('base64').replace(/(.{64})/g, '$1\n').replace(/\n$/, '');
  return `-----BEGIN CERTIFICATE-----\n${b64}\n-----END CERTIFICATE-----\n`;
}
