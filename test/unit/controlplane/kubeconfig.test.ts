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
    ['exec without apiVersion', () => doc({}, { exec: { command: 'aws' } }), 'users[0].user.exec.apiVersion: missing'],
    ['exec without command', () => doc({}, { exec: { apiVersion: 'client.authentication.k8s.io/v1', interactiveMode: 'Never' } }), 'users[0].user.exec.command: missing'],
    ['exec v1alpha1 (removed in 1.24)', () => doc({}, { exec: { command: 'aws', apiVersion: 'client.authentication.k8s.io/v1alpha1' } }), 'users[0].user.exec.apiVersion: "client.authentication.k8s.io/v1alpha1" is not one of'],
    ['exec v1 without interactiveMode', () => doc({}, { exec: { command: 'aws', apiVersion: 'client.authentication.k8s.io/v1' } }), 'users[0].user.exec.interactiveMode: must be specified for client.authentication.k8s.io/v1'],
    ['exec interactiveMode Always', () => doc({}, { exec: { command: 'aws', apiVersion: 'client.authentication.k8s.io/v1', interactiveMode: 'Always' } }), 'users[0].user.exec.interactiveMode: Always needs a terminal, which nodelet never has'],
    ['exec env without a name', () => doc({}, { exec: { command: 'aws', apiVersion: 'client.authentication.k8s.io/v1beta1', env: [{ value: 'x' }] } }), 'users[0].user.exec.env[0].name: missing'],
    ['auth-provider', () => doc({}, { 'auth-provider': { name: 'gcp' } }), 'users[0].user.auth-provider: not supported (removed from client-go in 1.26'],
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

describe('loadKubeconfig: exec credential plugins', () => {
  const exec = { apiVersion: 'client.authentication.k8s.io/v1', command: 'aws', args: ['eks', 'get-token', '--cluster-name', 'c1'], env: [{ name: 'AWS_PROFILE', value: 'node' }], interactiveMode: 'Never', provideClusterInfo: true, installHint: 'install the aws cli' };

  it('reads exec with what the plugin is told of the cluster', () => {
    const f = write(doc({ 'certificate-authority-data': b64(CA), 'tls-server-name': 'api.internal', extensions: [{ name: 'client.authentication.k8s.io/exec', extension: { audience: 'sts' } }] }, { exec }));
    expect(loadKubeconfig(f).exec).toEqual({
      command: 'aws',
      args: ['eks', 'get-token', '--cluster-name', 'c1'],
      env: [{ name: 'AWS_PROFILE', value: 'node' }],
      apiVersion: 'client.authentication.k8s.io/v1',
      installHint: 'install the aws cli',
      provideClusterInfo: true,
      interactiveMode: 'Never',
      cluster: { server: 'https://127.0.0.1:6443', 'tls-server-name': 'api.internal', 'certificate-authority-data': b64(CA), config: { audience: 'sts' } },
      origin: `${f}: users[0].user.exec`,
    });
  });

  it('v1beta1 defaults interactiveMode to IfAvailable (run without a terminal all the same)', () => {
    const f = write(doc({}, { exec: { apiVersion: 'client.authentication.k8s.io/v1beta1', command: 'gke-gcloud-auth-plugin' } }));
    expect(loadKubeconfig(f).exec).toMatchObject({ interactiveMode: 'IfAvailable', provideClusterInfo: false, args: [], env: [] });
  });

  it('a static token wins over exec, as in client-go', () => {
    const f = write(doc({}, { token: 'static', exec }));
    const a = loadKubeconfig(f);
    expect([a.token, a.exec]).toEqual(['static', undefined]);
  });
});
