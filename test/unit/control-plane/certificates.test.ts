/**
 * The test control plane's part of the TLS bootstrap (test/control-plane/certificates.ts):
 * bootstrap-token authentication, the CSR strategies, the approving controller's rules and
 * the signer's certificates, as kube-apiserver and kube-controller-manager have them.
 */
import { execFileSync } from 'node:child_process';
import crypto, { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createCsrPem } from '../../../src/system/pkcs10.js';
import { bootstrapTokenCaller, csrUpdate, kubeletClientProblem, parseCsr, prepareCsrCreate, signCertificate, startCsrControllers } from '../../control-plane/certificates.js';
import { Store, type Obj } from '../../control-plane/store.js';
import { settle } from '../../helpers/clock.js';

const NOW = Date.UTC(2026, 10, 27, 12, 0, 0);
const clock = { now: () => NOW, sleep: () => Promise.resolve() };
const b64 = (s: string) => Buffer.from(s).toString('base64');
const nodeSubject = { commonName: 'system:node:n1', organization: ['system:nodes'] };
const request = (subject = nodeSubject) => b64(createCsrPem(crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey, subject));

function tokenStore(data: Record<string, string>, type = 'bootstrap.kubernetes.io/token'): Store {
  const s = new Store(clock, 60_000);
  const enc: Record<string, string> = {};
  for (const [k, v] of Object.entries(data)) enc[k] = b64(v);
  s.put('secrets', 'kube-system', 'bootstrap-token-abcdef', { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'bootstrap-token-abcdef', namespace: 'kube-system' }, type, data: enc });
  return s;
}

describe('bootstrap tokens', () => {
  const valid = { 'token-id': 'abcdef', 'token-secret': '0123456789abcdef', 'usage-bootstrap-authentication': 'true' };
  it('a token matching its secret is system:bootstrap:<id> in system:bootstrappers, the extra groups and system:authenticated', () => {
    const s = tokenStore({ ...valid, 'auth-extra-groups': 'system:bootstrappers:kubeadm:default-node-token,not-allowed', expiration: '2026-11-28T00:00:00Z' });
    expect(bootstrapTokenCaller(s, 'abcdef.0123456789abcdef', NOW)).toEqual({ user: 'system:bootstrap:abcdef', groups: ['system:bootstrappers', 'system:bootstrappers:kubeadm:default-node-token', 'system:authenticated'] });
  });
  it.each([
    ['a wrong secret', valid, 'abcdef.0123456789abcdee'],
    ['a malformed token', valid, 'abcdef:0123456789abcdef'],
    ['an expired token', { ...valid, expiration: '2026-11-27T11:59:59Z' }, 'abcdef.0123456789abcdef'],
    ['a token not for authentication', { ...valid, 'usage-bootstrap-authentication': 'false' }, 'abcdef.0123456789abcdef'],
    ['a secret of another token id', { ...valid, 'token-id': 'zzzzzz' }, 'abcdef.0123456789abcdef'],
  ])('%s authenticates nobody', (_what, data, token) => {
    expect(bootstrapTokenCaller(tokenStore(data), token, NOW)).toBeUndefined();
  });
  it('a secret of another type authenticates nobody', () => {
    expect(bootstrapTokenCaller(tokenStore(valid, 'Opaque'), 'abcdef.0123456789abcdef', NOW)).toBeUndefined();
  });
});

describe('CertificateSigningRequest strategies', () => {
  it('create takes the requester from the caller, whatever the body says, and checks the request', () => {
    const obj: Obj = { metadata: { name: 'x' }, spec: { request: request(), signerName: 'kubernetes.io/kube-apiserver-client-kubelet', usages: ['digital signature', 'client auth'], username: 'someone-else', groups: ['system:masters'] }, status: { certificate: 'Zm9v' } };
    expect(prepareCsrCreate(obj, { user: 'system:bootstrap:abcdef', groups: ['system:bootstrappers'] })).toEqual([]);
    expect(obj['spec']).toMatchObject({ username: 'system:bootstrap:abcdef', groups: ['system:bootstrappers'] });
    expect(obj['status']).toEqual({});
    const bad: Obj = { metadata: { name: 'y' }, spec: { request: b64('not a csr'), usages: ['client auth', 'flying'], expirationSeconds: 60 } };
    expect(prepareCsrCreate(bad, { user: 'u', groups: [] }).map((c) => c.field)).toEqual(['spec.request', 'spec.signerName', 'spec.usages[1]', 'spec.expirationSeconds']);
  });

  const old: Obj = { metadata: { name: 'x' }, spec: { request: 'r', signerName: 's', usages: ['client auth'], username: 'u' }, status: {} };
  it('approval sets Approved or Denied, never both, never removes one, and the spec never changes', () => {
    const r = csrUpdate(old, { ...old, spec: { ...old['spec'], username: 'admin' }, status: { conditions: [{ type: 'Approved', status: 'True', reason: 'KubectlApprove' }], certificate: 'Zm9v' } }, 'approval', '2026-11-27T12:00:00Z');
    expect(r).toEqual({ obj: { ...old, status: { conditions: [{ type: 'Approved', status: 'True', reason: 'KubectlApprove', lastUpdateTime: '2026-11-27T12:00:00Z', lastTransitionTime: '2026-11-27T12:00:00Z' }] } } });
    const approved = (r as { obj: Obj }).obj;
    expect(csrUpdate(approved, { ...approved, status: { conditions: [...approved['status']['conditions'], { type: 'Denied' }] } }, 'approval', 'now')).toEqual({ causes: [expect.objectContaining({ message: expect.stringMatching(/mutually exclusive/) })] });
    expect(csrUpdate(approved, { ...approved, status: { conditions: [] } }, 'approval', 'now')).toEqual({ causes: [expect.objectContaining({ message: expect.stringMatching(/may not remove a condition of type "Approved"/) })] });
  });

  it('status takes the certificate only once approved, and never another one after', () => {
    expect(csrUpdate(old, { ...old, status: { certificate: b64('x') } }, 'status', 'now')).toEqual({ causes: [expect.objectContaining({ message: expect.stringMatching(/only be set once approved/) }), expect.objectContaining({ field: 'status.certificate' })] });
  });
});

describe('approving and signing', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-csr-unit-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const caKeyFile = path.join(dir, 'ca.key');
  const caFile = path.join(dir, 'ca.crt');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', caKeyFile, '-out', caFile, '-days', '3650', '-subj', '/CN=unit-ca'], { stdio: 'ignore' });
  const ca = new X509Certificate(fs.readFileSync(caFile));

  it.each([
    ['a node client request', nodeSubject, ['digital signature', 'client auth'], ''],
    ['with key encipherment', nodeSubject, ['digital signature', 'key encipherment', 'client auth'], ''],
    ['another organization', { commonName: 'system:node:n1', organization: ['system:masters'] }, ['digital signature', 'client auth'], 'subject organization is not system:nodes'],
    ['a user, not a node', { commonName: 'alice', organization: ['system:nodes'] }, ['digital signature', 'client auth'], 'subject common name does not begin with system:node:'],
    ['server auth', nodeSubject, ['digital signature', 'server auth'], 'usages did not match [client auth digital signature] or [client auth digital signature key encipherment]'],
  ])('kubelet client rules: %s', (_what, subject, usages, problem) => {
    const spec = { signerName: 'kubernetes.io/kube-apiserver-client-kubelet', usages };
    expect(kubeletClientProblem(spec, parseCsr(Buffer.from(request(subject), 'base64').toString()))).toBe(problem);
  });

  it('signs a certificate for the requested key and subject, backdated 5 minutes, for the lifetime asked, that the CA verifies', () => {
    const csr = parseCsr(Buffer.from(request(), 'base64').toString());
    const pem = signCertificate({ csr, usages: ['digital signature', 'client auth'], caKey: crypto.createPrivateKey(fs.readFileSync(caKeyFile)), caSubject: issuerOf(ca), caNotAfter: Date.parse(ca.validTo), now: NOW, ttlMs: 3600_000 });
    const cert = new X509Certificate(pem);
    expect(cert.verify(ca.publicKey)).toBe(true);
    expect(cert.checkIssued(ca)).toBe(true);
    expect([cert.subject.split('\n').sort(), Date.parse(cert.validFrom), Date.parse(cert.validTo)]).toEqual([['CN=system:node:n1', 'O=system:nodes'], NOW - 300_000, NOW + 3600_000]);
    expect(cert.keyUsage).toEqual(['1.3.6.1.5.5.7.3.2']);
    expect(cert.ca).toBe(false);
    expect(cert.publicKey.export({ type: 'spki', format: 'der' }).equals(csr.spkiRaw)).toBe(true);
  });

  it('approves a bootstrapper\'s node client request and a node\'s own renewal, issues both; leaves a serving request and a stranger\'s alone', async () => {
    const store = new Store(clock, 60_000);
    const stop = startCsrControllers({ store, clock, caFile, caKeyFile, signingDurationMs: 600_000 });
    const put = (name: string, spec: Obj) => store.put('certificatesigningrequests', '', name, { apiVersion: 'certificates.k8s.io/v1', kind: 'CertificateSigningRequest', metadata: { name }, spec, status: {} });
    const client = { signerName: 'kubernetes.io/kube-apiserver-client-kubelet', usages: ['digital signature', 'client auth'] };
    put('bootstrap', { ...client, request: request(), username: 'system:bootstrap:abcdef', groups: ['system:bootstrappers', 'system:authenticated'] });
    put('renewal', { ...client, request: request(), username: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] });
    put('other-node', { ...client, request: request(), username: 'system:node:n2', groups: ['system:nodes', 'system:authenticated'] });
    put('stranger', { ...client, request: request(), username: 'alice', groups: ['system:authenticated'] });
    put('serving', { signerName: 'kubernetes.io/kubelet-serving', usages: ['digital signature', 'server auth'], request: request(), username: 'system:node:n1', groups: ['system:nodes'] });
    for (let i = 0; i < 4; i++) await settle();
    const state = (name: string) => {
      const o = store.get('certificatesigningrequests', '', name)!;
      return [(o['status']['conditions'] ?? []).map((c: Obj) => `${c['type']}:${c['reason']}:${c['message']}`), o['status']['certificate'] ? 'issued' : 'none'];
    };
    expect(state('bootstrap')).toEqual([['Approved:AutoApproved:Auto approving kubelet client certificate after SubjectAccessReview.'], 'issued']);
    expect(state('renewal')).toEqual([['Approved:AutoApproved:Auto approving self kubelet client certificate after SubjectAccessReview.'], 'issued']);
    expect(state('other-node')).toEqual([[], 'none']);
    expect(state('stranger')).toEqual([[], 'none']);
    expect(state('serving')).toEqual([[], 'none']);
    const issued = new X509Certificate(Buffer.from(store.get('certificatesigningrequests', '', 'bootstrap')!['status']['certificate'], 'base64'));
    // The configured lifetime (10 minutes), backdated by a quarter of it when that is less than 5 minutes.
    expect(Date.parse(issued.validTo) - Date.parse(issued.validFrom)).toBe(600_000 + 150_000);
    stop();
  });
});

/** The CA's subject DER, read from its certificate (the controller does the same). */
function issuerOf(ca: X509Certificate): Buffer {
  const der = ca.raw;
  const hdr = (at: number) => {
    let len = der[at + 1]!;
    let start = at + 2;
    if (len & 0x80) {
      const n = len & 0x7f;
      len = 0;
      for (let i = 0; i < n; i++) len = len * 256 + der[start + i]!;
      start += n;
    }
    return { start, end: start + len };
  };
  const tbs = hdr(hdr(0).start);
  let at = tbs.start;
  const skip = () => {
    const h = hdr(at);
    const from = at;
    at = h.end;
    return der.subarray(from, h.end);
  };
  if (der[at] === 0xa0) skip();
  skip(); // serial
  skip(); // algorithm
  skip(); // issuer
  skip(); // validity
  return skip(); // subject
}
