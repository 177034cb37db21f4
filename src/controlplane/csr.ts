/**
 * CertificateSigningRequests (`certificates.k8s.io/v1`) as client-go's
 * util/certificate/csr does them for a kubelet: create the request under a name derived
 * from what it asks for (so a retry with the same key finds its earlier request instead of
 * making a second), then wait on a watch of that one name until it is Approved and carries
 * `status.certificate`, or is Denied or Failed.
 *
 * Called by the TLS bootstrap (bootstrap.ts) once per attempt; no retry in here: an error
 * goes back to the caller's loop, each naming the request.
 */
import crypto, { type KeyObject } from 'node:crypto';
import { NodeletError, isNodeletError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { ControlPlaneClient, KubeObject, ResourceType } from './client.js';

export const CSRS: ResourceType = { group: 'certificates.k8s.io', version: 'v1', resource: 'certificatesigningrequests', namespaced: false };

export const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';

export interface CsrCondition {
  type: string;
  status?: string;
  reason?: string;
  message?: string;
}

export interface CertificateSigningRequest extends KubeObject {
  spec: { request: string; signerName: string; usages?: string[]; expirationSeconds?: number; username?: string; groups?: string[] };
  status?: { conditions?: CsrCondition[]; certificate?: string };
}

/**
 * The request's name as the kubelet's digestedName makes it: `node-csr-` + base64url of
 * SHA-512/256 over the public key (PKIX DER), the CN, each O and each usage, each written
 * as its base64url and a `|`.
 */
export function digestedName(publicKey: KeyObject, subject: { commonName: string; organization?: readonly string[] }, usages: readonly string[]): string {
  const h = crypto.createHash('sha512-256');
  const write = (b: Buffer) => {
    h.update(b.toString('base64url'));
    h.update('|');
  };
  write(publicKey.export({ type: 'spki', format: 'der' }));
  write(Buffer.from(subject.commonName));
  for (const o of subject.organization ?? []) write(Buffer.from(o));
  for (const u of usages) write(Buffer.from(u));
  return `node-csr-${h.digest('base64url')}`;
}

/** The outcome a request's conditions say: issued (PEM), refused (with why), or still waiting. */
export type CsrOutcome = { state: 'issued'; certificate: string } | { state: 'denied' | 'failed'; reason: string; message: string } | { state: 'pending' };

/** Pure: what `csr`'s status means for its requester (client-go's WaitForCertificate conditions). */
export function csrOutcome(csr: CertificateSigningRequest): CsrOutcome {
  let approved = false;
  for (const c of csr.status?.conditions ?? []) {
    if (c.status !== undefined && c.status !== 'True') continue;
    if (c.type === 'Denied') return { state: 'denied', reason: c.reason ?? '', message: c.message ?? '' };
    if (c.type === 'Failed') return { state: 'failed', reason: c.reason ?? '', message: c.message ?? '' };
    if (c.type === 'Approved') approved = true;
  }
  const cert = csr.status?.certificate;
  if (approved && typeof cert === 'string' && cert !== '') return { state: 'issued', certificate: Buffer.from(cert, 'base64').toString('utf8') };
  return { state: 'pending' };
}

/**
 * Creates the request, or takes the existing one of that name when it asks for the same
 * thing (same request, signer and usages); another with the name is an error. Returns its
 * name and uid.
 */
export async function createCsr(api: ControlPlaneClient, csr: CertificateSigningRequest, signal?: AbortSignal): Promise<{ name: string; uid: string }> {
  const name = csr.metadata?.name ?? '';
  try {
    const made = await api.create<CertificateSigningRequest>(CSRS, csr, signal ? { signal } : {});
    return { name: made.metadata?.name ?? name, uid: made.metadata?.uid ?? '' };
  } catch (err) {
    if (!isNodeletError(err, 'ALREADY_EXISTS')) throw err;
  }
  const old = await api.get<CertificateSigningRequest>(CSRS, { name }, signal ? { signal } : {});
  const same = old.spec?.request === csr.spec.request || sameKeyAndSubject(old.spec?.request, csr.spec.request);
  if (!same || old.spec?.signerName !== csr.spec.signerName || JSON.stringify([...(old.spec?.usages ?? [])].sort()) !== JSON.stringify([...(csr.spec.usages ?? [])].sort())) {
    throw new NodeletError('CONFLICT', `certificatesigningrequest ${name} already exists and asks for something else (request, signerName or usages differ)`, { csr: name });
  }
  return { name, uid: old.metadata?.uid ?? '' };
}

/** Two base64 PEM requests with the same public key and subject (a retry signs anew: the ECDSA signatures differ). */
function sameKeyAndSubject(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b) return false;
  const body = (s: string) => {
    const der = Buffer.from(Buffer.from(s, 'base64').toString('utf8').replace(/-----[^-]+-----|\s/g, ''), 'base64');
    // CertificationRequest ::= SEQUENCE { info, alg, sig }: compare the info (subject, key) bytes.
    return infoOf(der);
  };
  const ia = body(a);
  const ib = body(b);
  return ia !== undefined && ib !== undefined && ia.equals(ib);
}

/** The first element (CertificationRequestInfo) of a DER SEQUENCE, or undefined when it does not read as one. */
function infoOf(der: Buffer): Buffer | undefined {
  const hdr = (b: Buffer, at: number): { start: number; end: number } | undefined => {
    if (at + 2 > b.length) return undefined;
    let len = b[at + 1]!;
    let start = at + 2;
    if (len & 0x80) {
      const n = len & 0x7f;
      if (n === 0 || n > 4 || start + n > b.length) return undefined;
      len = 0;
      for (let i = 0; i < n; i++) len = len * 256 + b[start + i]!;
      start += n;
    }
    return start + len <= b.length ? { start, end: start + len } : undefined;
  };
  if (der[0] !== 0x30) return undefined;
  const outer = hdr(der, 0);
  if (!outer || der[outer.start] !== 0x30) return undefined;
  const inner = hdr(der, outer.start);
  return inner ? der.subarray(outer.start, inner.end) : undefined;
}

export interface WaitOptions {
  signal: AbortSignal;
  clock: Clock;
  /** How long to wait in all (the kubelet's: 3600 s). */
  timeoutMs: number;
  /** Told once when the request is seen approved but has no certificate yet. */
  onApproved?: () => void;
}

/**
 * Waits for `name` (with `uid`) to be issued: a watch of that name from its current
 * version, reopened when the server ends it; resolves with the certificate PEM. Denied or
 * Failed reject with FORBIDDEN naming the request and the reason, as client-go words it; a
 * request replaced under the same name (another uid) or deleted rejects NOT_FOUND; the
 * deadline rejects DEADLINE_EXCEEDED.
 */
export async function waitForCertificate(api: ControlPlaneClient, name: string, uid: string, o: WaitOptions): Promise<string> {
  const ctl = new AbortController();
  const onAbort = () => ctl.abort();
  o.signal.addEventListener('abort', onAbort, { once: true });
  // The deadline on the injected clock; its sleep ends (rejected) when the wait is over.
  void o.clock.sleep(o.timeoutMs, ctl.signal).then(
    () => ctl.abort(),
    () => {},
  );
  let toldApproved = false;
  const judge = (csr: CertificateSigningRequest): string | undefined => {
    if (uid !== '' && csr.metadata?.uid !== undefined && csr.metadata.uid !== uid) {
      throw new NodeletError('NOT_FOUND', `certificatesigningrequest ${name} was replaced (uid ${csr.metadata.uid}, not ${uid})`, { csr: name });
    }
    const out = csrOutcome(csr);
    if (out.state === 'issued') return out.certificate;
    if (out.state === 'denied') throw new NodeletError('FORBIDDEN', `certificatesigningrequest ${name} is denied, reason: ${out.reason}, message: ${out.message}`, { csr: name, reason: out.reason });
    if (out.state === 'failed') throw new NodeletError('FORBIDDEN', `certificatesigningrequest ${name} failed, reason: ${out.reason}, message: ${out.message}`, { csr: name, reason: out.reason });
    if (!toldApproved && (csr.status?.conditions ?? []).some((c) => c.type === 'Approved')) {
      toldApproved = true;
      o.onApproved?.();
    }
    return undefined;
  };
  try {
    for (;;) {
      if (ctl.signal.aborted) break;
      const list = await api.list<CertificateSigningRequest>(CSRS, { fieldSelector: `metadata.name=${name}`, signal: ctl.signal });
      const current = list.items[0];
      if (!current) throw new NodeletError('NOT_FOUND', `certificatesigningrequest ${name} was deleted before it was issued`, { csr: name });
      const got = judge(current);
      if (got !== undefined) return got;
      const events = await api.watch<CertificateSigningRequest>(CSRS, { fieldSelector: `metadata.name=${name}`, resourceVersion: list.metadata.resourceVersion, signal: ctl.signal });
      for await (const ev of events) {
        if (ev.type === 'DELETED') throw new NodeletError('NOT_FOUND', `certificatesigningrequest ${name} was deleted before it was issued`, { csr: name });
        if (ev.type !== 'ADDED' && ev.type !== 'MODIFIED') continue;
        const cert = judge(ev.object);
        if (cert !== undefined) return cert;
      }
      // The server ended the watch: list again and watch on.
    }
  } catch (err) {
    if (!ctl.signal.aborted || o.signal.aborted) throw err;
  } finally {
    o.signal.removeEventListener('abort', onAbort);
    ctl.abort();
  }
  if (o.signal.aborted) throw new NodeletError('CANCELLED', `waiting for certificatesigningrequest ${name}: cancelled`, { csr: name });
  throw new NodeletError('DEADLINE_EXCEEDED', `certificatesigningrequest ${name} was not issued within ${Math.round(o.timeoutMs / 1000)} s (no signer answered, or nobody approved it)`, { csr: name });
}


