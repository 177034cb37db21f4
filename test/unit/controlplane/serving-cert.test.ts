/**
 * Serving certificates from the cluster (src/server/serving-cert.ts, `serverTLSBootstrap`):
 * the names a request asks for, the request itself (what openssl and the API server read),
 * when a certificate is renewed, and the manager's whole cycle on a virtual clock against a
 * signer of the test's own: request, store (files, link, modes), serve, renew between 70 %
 * and 90 % of the lifetime, reuse at restart, retry after a failure, and no certificate once
 * it has expired. The exchange with a control plane is
 * test/integration/connected/serving-cert.test.ts.
 */
import { spawnSync } from 'node:child_process';
import crypto, { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { name } from '../../../src/system/der.js';
import type { CertificateSigningRequest } from '../../../src/controlplane/csr.js';
import { createCsrPem, ipBytes } from '../../../src/system/pkcs10.js';
import { silentLogger } from '../../../src/log.js';
import { ServingCertificateManager, loadStoredServingPair, nextServingDeadline, servingTemplate, templateProblem, type CertificateRequester, type ServingPair } from '../../../src/controlplane/serving-cert.js';
import { parseCsr, signCertificate } from '../../control-plane/certificates.js';
import { VirtualClock, settle } from '../../helpers/clock.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-serving-unit-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const ca = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
const caSubject = name({ commonName: 'test-ca' });

/** The test's signer: a certificate for the request, valid from `now` for `ttlMs`. */
function sign(csrPem: string, now: number, ttlMs: number, usages = ['digital signature', 'server auth']): string {
  return signCertificate({ csr: parseCsr(csrPem), usages, caKey: ca.privateKey, caSubject, caNotAfter: now + 10 * 365 * 86_400_000, now, ttlMs });
}

/** A certificate for the template's names (or others), with its key. */
function certFor(names: { cn: string; dns: string[]; ips: string[] }, now: number, ttlMs: number): ServingPair {
  const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const cert = sign(createCsrPem(privateKey, { commonName: names.cn, organization: ['system:nodes'] }, { dnsNames: names.dns, ipAddresses: names.ips }), now, ttlMs);
  return { cert, key: privateKey.export({ type: 'sec1', format: 'pem' }) as string };
}

describe('what a serving certificate request names', () => {
  it.each([
    ['the hostname as a DNS name and every IP, sorted', 'n1', ['10.0.0.9', '10.0.0.10', '10.0.0.9'], false, { dnsNames: ['n1'], ipAddresses: ['10.0.0.10', '10.0.0.9'] }],
    ['a hostname that is an IP as an IP', '192.168.1.5', ['192.168.1.5', '10.1.1.1'], false, { dnsNames: [], ipAddresses: ['10.1.1.1', '192.168.1.5'] }],
    ['IPv6 addresses', 'n1', ['fd00::2'], false, { dnsNames: ['n1'], ipAddresses: ['fd00::2'] }],
    ['nothing without an IP', 'n1', [], false, undefined],
    ['the DNS name alone without an IP with AllowDNSOnlyNodeCSR', 'n1', [], true, { dnsNames: ['n1'], ipAddresses: [] }],
  ])('%s', (_what, hostname, ips, dnsOnly, want) => {
    const t = servingTemplate('n1', hostname, ips, dnsOnly);
    expect(t).toEqual(want && { commonName: 'system:node:n1', organization: ['system:nodes'], ...want });
  });

  it('is a request openssl verifies, with the subject and the subjectAltNames the API server reads', () => {
    const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const pem = createCsrPem(privateKey, { commonName: 'system:node:n1', organization: ['system:nodes'] }, { dnsNames: ['n1'], ipAddresses: ['10.0.0.1', 'fd00::1'] });
    const r = spawnSync('openssl', ['req', '-verify', '-noout', '-text', '-nameopt', 'RFC2253'], { input: pem, encoding: 'utf8' });
    expect(`${r.stderr}${r.stdout}`).toContain('verify OK');
    expect(r.stdout).toMatch(/Subject: CN=system:node:n1,O=system:nodes/);
    expect(r.stdout).toMatch(/DNS:n1, IP Address:10\.0\.0\.1, IP Address:FD00:0:0:0:0:0:0:1/);
    expect(parseCsr(pem)).toMatchObject({ commonName: 'system:node:n1', organization: ['system:nodes'], dnsNames: 1, ipAddresses: 2, otherNames: 0 });
  });

  it.each([
    ['10.0.0.1', '0a000001'],
    ['::1', '00000000000000000000000000000001'],
    ['fd00:1::2', 'fd000001000000000000000000000002'],
    ['::ffff:10.0.0.1', '0a000001'],
  ])('IP %s is written as %s (Go: IPv4 in 4 bytes)', (ip, hex) => expect(ipBytes(ip).toString('hex')).toBe(hex));
});

describe('when the serving certificate is renewed', () => {
  const now = Date.UTC(2026, 10, 27, 12, 0, 0);
  const t = servingTemplate('n1', 'n1', ['10.0.0.1'])!;
  const good = new X509Certificate(certFor({ cn: 'system:node:n1', dns: ['n1'], ips: ['10.0.0.1', '10.9.9.9'] }, now, 100 * 3600_000).cert);

  it('between 70 % and 90 % of its lifetime (from notBefore, which the signer backdates 5 minutes)', () => {
    const from = Date.parse(good.validFrom);
    const life = Date.parse(good.validTo) - from;
    expect(nextServingDeadline(good, t, now, 0)).toBe(from + 0.7 * life);
    expect(nextServingDeadline(good, t, now, 0.5)).toBe(from + 0.8 * life);
    expect(nextServingDeadline(good, t, now, 0.999999)).toBeCloseTo(from + 0.9 * life, -3);
    expect(templateProblem(good, t)).toBeUndefined();
  });

  it.each([
    ['there is none', undefined, undefined],
    ['it lacks an IP of the node', { cn: 'system:node:n1', dns: ['n1'], ips: ['10.0.0.2'] }, 'it lacks the IP addresses 10.0.0.1'],
    ['it lacks the hostname', { cn: 'system:node:n1', dns: ['other'], ips: ['10.0.0.1'] }, 'it lacks the DNS names n1'],
    ['it is for another node', { cn: 'system:node:n2', dns: ['n1'], ips: ['10.0.0.1'] }, 'its CN (system:node:n2) is not system:node:n1'],
  ])('at once when %s', (_what, names, problem) => {
    const cert = names && new X509Certificate(certFor(names, now, 100 * 3600_000).cert);
    expect(nextServingDeadline(cert, t, now, 0.5)).toBe(now);
    if (cert) expect(templateProblem(cert, t)).toBe(problem);
  });
});

/** A requester that records each CSR and answers when the test says. */
function signer(clock: VirtualClock, ttlMs: number) {
  const requests: Array<{ csr: CertificateSigningRequest; issue: () => void; fail: (err: Error) => void }> = [];
  let waiter: (() => void) | undefined;
  const request: CertificateRequester = (csr, signal) =>
    new Promise((resolve, reject) => {
      const name = `csr-${requests.length + 1}`;
      signal.addEventListener('abort', () => reject(new Error('cancelled')), { once: true });
      requests.push({ csr, issue: () => resolve({ name, certificate: sign(Buffer.from(csr.spec.request, 'base64').toString(), clock.now(), ttlMs) }), fail: reject });
      waiter?.();
    });
  const nextRequest = async (n: number) => {
    while (requests.length < n) await new Promise<void>((r) => (waiter = r));
    return requests[n - 1]!;
  };
  return { request, requests, nextRequest };
}

function changes(m: ServingCertificateManager) {
  const seen: Array<ServingPair | undefined> = [];
  let waiter: (() => void) | undefined;
  m.onChange((p) => {
    seen.push(p);
    waiter?.();
  });
  const next = async (n: number) => {
    while (seen.length < n) await new Promise<void>((r) => (waiter = r));
    return seen[n - 1];
  };
  return { seen, next };
}

const HOUR = 3600_000;

describe('the serving certificate manager', () => {
  it('requests at start, stores and serves the issued pair, renews it between 70 % and 90 % of its lifetime, and a restart reuses it', async () => {
    const certDir = path.join(dir, 'cycle');
    const clock = new VirtualClock(Date.UTC(2026, 10, 27, 12, 0, 0));
    const s = signer(clock, 10 * HOUR);
    const base = { nodeName: 'n1', hostname: 'n1', ips: ['10.0.0.1'], certDir, clock, logger: silentLogger(), random: () => 0.5 };
    const m = await ServingCertificateManager.load({ ...base, request: s.request });
    expect(m.current()).toBeUndefined();
    const seen = changes(m);
    m.start();
    const first = await s.nextRequest(1);
    expect(first.csr.metadata).toEqual({ generateName: 'csr-' });
    expect(first.csr.spec).toMatchObject({ signerName: 'kubernetes.io/kubelet-serving', usages: ['digital signature', 'server auth'] });
    expect(parseCsr(Buffer.from(first.csr.spec.request, 'base64').toString())).toMatchObject({ commonName: 'system:node:n1', organization: ['system:nodes'], dnsNames: 1, ipAddresses: 1 });
    first.issue();
    const served = (await seen.next(1))!;
    expect(m.current()).toEqual(served);
    const leaf = new X509Certificate(served.cert);
    expect(leaf.subjectAltName).toBe('DNS:n1, IP Address:10.0.0.1');
    expect(leaf.checkPrivateKey(crypto.createPrivateKey(served.key))).toBe(true);

    // The kubelet's file store: a dated pem (certificate then key, 0600) behind the current link.
    const current = path.join(certDir, 'kubelet-server-current.pem');
    expect(path.basename(fs.readlinkSync(current))).toMatch(/^kubelet-server-\d{4}(-\d{2}){5}\.pem$/);
    expect((fs.statSync(current).mode & 0o777).toString(8)).toBe('600');
    expect(fs.readFileSync(current, 'utf8')).toBe(`${served.cert.trimEnd()}\n${served.key.trimEnd()}\n`);

    // random 0.5: at 80 % of notBefore..notAfter; nothing before it.
    const renewAt = nextServingDeadline(leaf, m.template!, clock.now(), 0.5);
    await clock.advance(renewAt - 1000 - clock.now());
    expect(s.requests).toHaveLength(1);
    await clock.advance(1000);
    const second = await s.nextRequest(2);
    expect(clock.now()).toBe(renewAt);
    second.issue();
    const renewed = (await seen.next(2))!;
    expect(new X509Certificate(renewed.cert).serialNumber).not.toBe(leaf.serialNumber);
    expect(m.current()).toEqual(renewed);
    await m.stop();

    // A restart: the stored pair is served at once, and nothing is requested before its renewal point.
    const again = await ServingCertificateManager.load({ ...base, request: s.request });
    expect(again.current()).toEqual(renewed);
    again.start();
    await settle();
    expect(s.requests).toHaveLength(2);
    await again.stop();
  });

  it('asks again after a failed request (2 s backoff), and serves nothing once its certificate has expired', async () => {
    const certDir = path.join(dir, 'expiry');
    const clock = new VirtualClock(Date.UTC(2026, 10, 27, 12, 0, 0));
    const s = signer(clock, HOUR);
    const m = await ServingCertificateManager.load({ nodeName: 'n1', hostname: 'n1', ips: ['10.0.0.1'], certDir, clock, logger: silentLogger(), random: () => 0.5, request: s.request });
    const seen = changes(m);
    m.start();
    (await s.nextRequest(1)).fail(new Error('certificatesigningrequest csr-1 is denied, reason: KubectlDeny'));
    await clock.whenSleeping();
    expect(clock.sleeps.at(-1)).toBe(2000);
    await clock.advance(2000);
    (await s.nextRequest(2)).issue();
    const pair = await seen.next(1);
    const notAfter = Date.parse(new X509Certificate(pair!.cert).validTo);
    // The renewal is asked and never answered: at notAfter the certificate is dropped.
    await clock.advance(0.8 * HOUR);
    await s.nextRequest(3);
    await clock.advance(notAfter + 1000 - clock.now());
    expect(seen.seen).toHaveLength(2);
    expect(seen.seen[1]).toBeUndefined();
    expect(m.current()).toBeUndefined();
    expect(clock.now()).toBeGreaterThan(notAfter);
    await m.stop();
  });

  it('standalone serves a stored pair and requests nothing; a pair that does not match its key is not used', async () => {
    const certDir = path.join(dir, 'standalone');
    fs.mkdirSync(certDir);
    const clock = new VirtualClock(Date.UTC(2026, 10, 27, 12, 0, 0));
    const pair = certFor({ cn: 'system:node:n1', dns: ['n1'], ips: ['10.0.0.1'] }, clock.now(), HOUR);
    fs.writeFileSync(path.join(certDir, 'kubelet-server.crt'), pair.cert);
    fs.writeFileSync(path.join(certDir, 'kubelet-server.key'), pair.key);
    const m = await ServingCertificateManager.load({ nodeName: 'n1', hostname: 'n1', ips: ['10.0.0.1'], certDir, clock, logger: silentLogger() });
    expect(m.current()).toEqual(pair);
    m.start();
    await m.stop();

    const other = certFor({ cn: 'system:node:n1', dns: ['n1'], ips: ['10.0.0.1'] }, clock.now(), HOUR);
    fs.writeFileSync(path.join(certDir, 'kubelet-server.key'), other.key);
    expect(await loadStoredServingPair({ certDir, now: clock.now(), log: silentLogger() })).toBeUndefined();
  });
});
