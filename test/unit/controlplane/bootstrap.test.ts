/**
 * The TLS bootstrap's decisions and files (src/controlplane/bootstrap.ts, csr.ts): when a
 * kubeconfig is still usable, the request's name, what a request's conditions mean, the
 * certificate store's files and link, and the flag errors. The whole exchange with a
 * control plane is test/integration/connected/bootstrap.test.ts.
 */
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bootstrappedKubeconfig, clientConfigStillValid, ensureClientCertificate, pemTimestamp, readCurrentPair, storeClientPair } from '../../../src/controlplane/bootstrap.js';
import { rotationDeadline } from '../../../src/controlplane/rotation.js';
import { csrOutcome, digestedName, type CertificateSigningRequest, type CsrCondition } from '../../../src/controlplane/csr.js';
import { loadKubeconfig } from '../../../src/controlplane/kubeconfig.js';
import { createLogger, silentLogger } from '../../../src/log.js';
import { ManualClock } from '../../helpers/clock.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-bootstrap-unit-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** A self-signed EC certificate and its key, valid for `days` from now. */
function cert(name: string, days: number): { cert: string; key: string } {
  const keyFile = path.join(dir, `${name}.key`);
  const certFile = path.join(dir, `${name}.crt`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', keyFile, '-out', certFile, '-days', String(days), '-subj', `/CN=${name}`], { stdio: 'ignore' });
  return { cert: fs.readFileSync(certFile, 'utf8'), key: fs.readFileSync(keyFile, 'utf8') };
}

function kubeconfig(name: string, user: Record<string, string>): string {
  const file = path.join(dir, `${name}.conf`);
  fs.writeFileSync(file, JSON.stringify({ apiVersion: 'v1', kind: 'Config', clusters: [{ name: 'c', cluster: { server: 'https://127.0.0.1:6443' } }], users: [{ name: 'u', user }], contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }], 'current-context': 'x' }));
  return file;
}

function recorder() {
  const records: Array<{ level: string; msg: string }> = [];
  const logger = createLogger({ journal: false, level: 'debug', destination: { write: (line: string) => void records.push(JSON.parse(line)) } });
  return { logger, records };
}

describe('whether the kubeconfig needs a bootstrap', () => {
  const now = Date.now();
  const good = cert('good', 30);
  it('a missing file does (silently), a valid client certificate does not', () => {
    expect(clientConfigStillValid(path.join(dir, 'missing.conf'), now, silentLogger())).toBe(false);
    const file = kubeconfig('good', { 'client-certificate-data': Buffer.from(good.cert).toString('base64'), 'client-key-data': Buffer.from(good.key).toString('base64') });
    expect(clientConfigStillValid(file, now, silentLogger())).toBe(true);
  });
  it.each([
    ['an expired certificate', (f: string) => f, 31 * 86_400_000, /expired at/],
    ['a kubeconfig without a certificate', () => kubeconfig('token', { token: 'abc' }), 0, /has no client certificate/],
    ['a kubeconfig that does not parse', () => (fs.writeFileSync(path.join(dir, 'bad.conf'), '{'), path.join(dir, 'bad.conf')), 0, /cannot be used/],
  ])('%s does, and says why', (_what, file, laterMs, why) => {
    const f = file(kubeconfig('good2', { 'client-certificate-data': Buffer.from(good.cert).toString('base64'), 'client-key-data': Buffer.from(good.key).toString('base64') }));
    const { logger, records } = recorder();
    expect(clientConfigStillValid(f, now + laterMs, logger)).toBe(false);
    expect(records.map((r) => [r.level, r.msg])).toEqual([['warn', expect.stringMatching(why)]]);
  });
});

describe('certificate signing requests', () => {
  const subject = { commonName: 'system:node:n1', organization: ['system:nodes'] };
  it('are named from key, subject and usages, as the kubelet names them', () => {
    const a = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey;
    const b = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey;
    const name = digestedName(a, subject, ['digital signature', 'client auth']);
    expect(name).toMatch(/^node-csr-[A-Za-z0-9_-]{43}$/);
    expect(digestedName(a, subject, ['digital signature', 'client auth'])).toBe(name);
    expect(new Set([name, digestedName(b, subject, ['digital signature', 'client auth']), digestedName(a, subject, ['client auth']), digestedName(a, { ...subject, commonName: 'system:node:n2' }, ['digital signature', 'client auth'])]).size).toBe(4);
  });

  const csr = (conditions: CsrCondition[], certificate?: string): CertificateSigningRequest => ({ spec: { request: '', signerName: 's' }, status: { conditions, ...(certificate ? { certificate } : {}) } });
  it.each([
    ['nothing yet', csr([]), { state: 'pending' }],
    ['approved, not issued', csr([{ type: 'Approved', status: 'True' }]), { state: 'pending' }],
    ['approved and issued', csr([{ type: 'Approved', status: 'True' }], Buffer.from('PEM').toString('base64')), { state: 'issued', certificate: 'PEM' }],
    ['denied', csr([{ type: 'Denied', status: 'True', reason: 'KubectlDeny', message: 'no' }]), { state: 'denied', reason: 'KubectlDeny', message: 'no' }],
    ['failed after approval', csr([{ type: 'Approved', status: 'True' }, { type: 'Failed', status: 'True', reason: 'SignerValidationFailure', message: 'bad' }]), { state: 'failed', reason: 'SignerValidationFailure', message: 'bad' }],
  ])('%s', (_what, c, outcome) => expect(csrOutcome(c)).toEqual(outcome));
});

describe('the client certificate store', () => {
  it('writes dated pems (0600) and moves kubelet-client-current.pem to the newest', async () => {
    const certDir = path.join(dir, 'pki');
    fs.mkdirSync(certDir);
    const t1 = new Date(2026, 10, 27, 8, 5, 9).getTime();
    const first = await storeClientPair(certDir, 'CERT1\n', 'KEY1\n', t1);
    expect(pemTimestamp(t1)).toBe('2026-11-27-08-05-09');
    expect(fs.readlinkSync(first)).toBe(path.join(certDir, 'kubelet-client-2026-11-27-08-05-09.pem'));
    await storeClientPair(certDir, 'CERT2', 'KEY2', t1 + 1000);
    expect(fs.readFileSync(first, 'utf8')).toBe('CERT2\nKEY2\n');
    expect(fs.readdirSync(certDir).sort()).toEqual(['kubelet-client-2026-11-27-08-05-09.pem', 'kubelet-client-2026-11-27-08-05-10.pem', 'kubelet-client-current.pem']);
    expect((fs.statSync(first).mode & 0o777).toString(8)).toBe('600');
  });

  it('the written kubeconfig reads back with the bootstrap\'s server and CA and the pem as certificate and key', async () => {
    const pair = cert('pair', 1);
    const pem = path.join(dir, 'pair.pem');
    fs.writeFileSync(pem, pair.cert + pair.key);
    const file = path.join(dir, 'written.conf');
    fs.writeFileSync(file, bootstrappedKubeconfig({ file: 'b', server: 'https://10.0.0.1:6443', ca: pair.cert, namespace: 'default', insecureSkipTlsVerify: false }, pem));
    expect(loadKubeconfig(file)).toMatchObject({ server: 'https://10.0.0.1:6443', ca: pair.cert, cert: pair.cert + pair.key, key: pair.cert + pair.key });
  });
});

describe('ensureClientCertificate', () => {
  const base = { certDir: path.join(dir, 'pki2'), nodeName: 'n1', clock: new ManualClock(), logger: silentLogger() };
  it('stops with CONFIG_INVALID naming --bootstrap-kubeconfig when it is needed and cannot be read', async () => {
    const err = await ensureClientCertificate({ ...base, kubeconfig: path.join(dir, 'none.conf'), bootstrapKubeconfig: path.join(dir, 'nope.conf'), signal: new AbortController().signal }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'CONFIG_INVALID', message: `--bootstrap-kubeconfig: ${path.join(dir, 'nope.conf')}: cannot read: ENOENT` });
    expect(fs.existsSync(path.join(dir, 'none.conf'))).toBe(false);
  });
  it('does not read the bootstrap kubeconfig when the kubeconfig is valid (kubeadm removes it after joining)', async () => {
    const good = cert('valid', 30);
    const file = kubeconfig('valid', { 'client-certificate-data': Buffer.from(good.cert).toString('base64'), 'client-key-data': Buffer.from(good.key).toString('base64') });
    await expect(ensureClientCertificate({ ...base, kubeconfig: file, bootstrapKubeconfig: path.join(dir, 'nope.conf'), signal: new AbortController().signal, clock: { now: () => Date.now(), sleep: () => Promise.resolve() } })).resolves.toBe(false);
  });
});

describe('rotation', () => {
  it.each([
    [0, 1000 + 700],
    [0.5, 1000 + 800],
    [0.999, 1000 + 899.8],
  ])('renews at 70 %% to 90 %% of the lifetime (random %f)', (rand, at) => {
    expect(rotationDeadline(1000, 2000, rand)).toBeCloseTo(at, 6);
  });

  it('starts from the current pair in --cert-dir while its certificate is valid, not after', async () => {
    const certDir = path.join(dir, 'pki3');
    fs.mkdirSync(certDir);
    const pair = cert('current', 1);
    await storeClientPair(certDir, pair.cert, pair.key, Date.now());
    expect(readCurrentPair(certDir, Date.now())).toEqual({ cert: pair.cert.trimEnd() + '\n', key: pair.key.trimEnd() + '\n' });
    expect(readCurrentPair(certDir, Date.now() + 2 * 86_400_000)).toBeUndefined();
    expect(readCurrentPair(path.join(dir, 'no-such-dir'), Date.now())).toBeUndefined();
  });
});
