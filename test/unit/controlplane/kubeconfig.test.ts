import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { NodeletError } from '../../../src/errors.js';
import { loadKubeconfig } from '../../../src/controlplane/kubeconfig.js';

const CA = '-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n';
const CERT = '-----BEGIN CERTIFICATE-----\nCERT\n-----END CERTIFICATE-----\n';
const KEY = '-----BEGIN EC PRIVATE KEY-----\nKEY\n-----END EC PRIVATE KEY-----\n';
const b64 = (s: string) => Buffer.from(s).toString('base64');

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-kc-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function doc(cluster: Record<string, unknown>, user: Record<string, unknown>, ctx: Record<string, unknown> = {}) {
  return {
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': 'c',
    contexts: [{ name: 'other', context: { cluster: 'x', user: 'x' } }, { name: 'c', context: { cluster: 'k', user: 'u', ...ctx } }],
    clusters: [{ name: 'k', cluster: { server: 'https://127.0.0.1:6443/', ...cluster } }],
    users: [{ name: 'u', user }],
  };
}

function write(d: unknown, sub = ''): string {
  const p = path.join(dir, sub, 'kubeconfig');
  fs.mkdirSync(path.dirname(p), { recursive: true });
  fs.writeFileSync(p, stringify(d));
  return p;
}

function errOf(f: () => unknown): NodeletError {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(NodeletError);
    return err as NodeletError;
  }
  throw new Error('expected an error');
}

describe('loadKubeconfig', () => {
  it('reads -data fields, strips the trailing slash, defaults the namespace', () => {
    const f = write(doc({ 'certificate-authority-data': b64(CA) }, { 'client-certificate-data': b64(CERT), 'client-key-data': b64(KEY) }));
    expect(loadKubeconfig(f)).toEqual({ file: f, server: 'https://127.0.0.1:6443', ca: CA, cert: CERT, key: KEY, namespace: 'default', insecureSkipTlsVerify: false });
  });

  it('reads files relative to the kubeconfig directory, and tokenFile (trimmed)', () => {
    fs.mkdirSync(path.join(dir, 'conf', 'pki'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'conf', 'pki', 'ca.crt'), CA);
    fs.writeFileSync(path.join(dir, 'conf', 'pki', 'c.crt'), CERT);
    fs.writeFileSync(path.join(dir, 'conf', 'pki', 'c.key'), KEY);
    fs.writeFileSync(path.join(dir, 'tok'), 'sekret\n');
    const f = write(doc({ 'certificate-authority': 'pki/ca.crt' }, { 'client-certificate': 'pki/c.crt', 'client-key': 'pki/c.key', tokenFile: '../tok' }, { namespace: 'ns1' }), 'conf');
    expect(loadKubeconfig(f)).toEqual({ file: f, server: 'https://127.0.0.1:6443', ca: CA, cert: CERT, key: KEY, token: 'sekret', namespace: 'ns1', insecureSkipTlsVerify: false });
  });

  it('prefers token over tokenFile, and -data over the file', () => {
    const f = write(doc({ 'certificate-authority-data': b64(CA), 'certificate-authority': '/nonexistent' }, { token: 't1', tokenFile: '/nonexistent' }));
    const a = loadKubeconfig(f);
    expect([a.ca, a.token]).toEqual([CA, 't1']);
  });

  const cases: Array<[string, () => unknown, string]> = [
    ['unreadable client certificate', () => doc({}, { 'client-certificate': 'missing.crt', 'client-key-data': b64(KEY) }), `users[0].user.client-certificate: cannot read ${'<dir>'}/missing.crt: ENOENT`],
    ['unreadable CA', () => doc({ 'certificate-authority': '/no/ca.crt' }, {}), 'clusters[0].cluster.certificate-authority: cannot read /no/ca.crt: ENOENT'],
    ['unreadable tokenFile', () => doc({}, { tokenFile: 'tok' }), 'users[0].user.tokenFile: cannot read <dir>/tok: ENOENT'],
    ['key without certificate', () => doc({}, { 'client-key-data': b64(KEY) }), 'users[0].user.client-certificate: missing (client-key is set)'],
    ['certificate without key', () => doc({}, { 'client-certificate-data': b64(CERT) }), 'users[0].user.client-key: missing (client-certificate is set)'],
    ['insecure-skip-tls-verify', () => doc({ 'insecure-skip-tls-verify': true }, {}), 'clusters[0].cluster.insecure-skip-tls-verify: refused'],
    ['http server', () => doc({ server: 'http://127.0.0.1:8080' }, {}), 'clusters[0].cluster.server: "http://127.0.0.1:8080" is not an https URL'],
    ['no current-context', () => ({ ...doc({}, {}), 'current-context': undefined }), 'current-context: missing'],
    ['unknown context', () => ({ ...doc({}, {}), 'current-context': 'nope' }), 'current-context: no contexts entry named "nope"'],
    ['unknown user', () => doc({}, {}, { user: 'ghost' }), 'contexts[1].context.user: no users entry named "ghost"'],
    ['bad -data', () => doc({ 'certificate-authority-data': b64('hello') }, {}), 'clusters[0].cluster.certificate-authority-data: not base64 of a PEM document'],
    ['exec credential plugin', () => doc({}, { exec: { command: 'aws' } }), 'users[0].user.exec: not supported by nodelet'],
    ['server not a string', () => doc({ server: 42 }, {}), 'clusters[0].cluster.server: must be a string'],
  ];
  it.each(cases)('%s: CONFIG_INVALID naming the file and the field', (_name, make, expected) => {
    const f = write(make());
    const e = errOf(() => loadKubeconfig(f));
    expect(e.code).toBe('CONFIG_INVALID');
    expect(e.message).toContain(`${f}: ${expected.replaceAll('<dir>', dir)}`);
  });

  it('accepts insecure-skip-tls-verify only when the caller allows it', () => {
    const f = write(doc({ 'insecure-skip-tls-verify': true }, { token: 't' }));
    expect(loadKubeconfig(f, { allowInsecure: true }).insecureSkipTlsVerify).toBe(true);
  });

  it('names the file when it is missing or not YAML', () => {
    const missing = path.join(dir, 'none');
    expect(errOf(() => loadKubeconfig(missing)).message).toBe(`${missing}: cannot read: ENOENT`);
    const f = path.join(dir, 'bad');
    fs.writeFileSync(f, 'a: [1,\n');
    expect(errOf(() => loadKubeconfig(f)).message).toMatch(new RegExp(`^${f}: not valid YAML`));
  });
});
