import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LEASES, NODES, PODS, resourcePath, statusError } from '../../../src/kube/client.js';
import { loadKubeconfig } from '../../../src/kube/kubeconfig.js';

describe('resourcePath (the spec path table)', () => {
  it.each([
    [PODS, {}, '/api/v1/pods'],
    [PODS, { namespace: 'ns' }, '/api/v1/namespaces/ns/pods'],
    [PODS, { namespace: 'ns', name: 'p', subresource: 'status' }, '/api/v1/namespaces/ns/pods/p/status'],
    [NODES, { name: 'n1' }, '/api/v1/nodes/n1'],
    [LEASES, { namespace: 'kube-node-lease', name: 'n1' }, '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1'],
  ])('%j %j -> %s', (t, o, want) => {
    expect(resourcePath(t, o)).toBe(want);
  });
});

describe('statusError (the one table)', () => {
  it.each([
    [404, { reason: 'NotFound', message: 'pods "x" not found' }, 'NOT_FOUND'],
    [409, { reason: 'Conflict', message: 'the object has been modified' }, 'CONFLICT'],
    [409, { reason: 'AlreadyExists', message: 'exists' }, 'ALREADY_EXISTS'],
    [410, { reason: 'Expired', message: 'too old resource version' }, 'GONE'],
    [401, {}, 'UNAUTHENTICATED'],
    [403, { reason: 'Forbidden' }, 'FORBIDDEN'],
    [422, { reason: 'Invalid' }, 'INVALID_ARGUMENT'],
    [429, { reason: 'TooManyRequests' }, 'TOO_MANY_REQUESTS'],
    [500, {}, 'UNAVAILABLE'],
    [504, { message: 'Too large resource version' }, 'UNAVAILABLE'],
  ])('%i %j -> %s', (status, body, code) => {
    expect(statusError('GET', '/x', status, body).code).toBe(code);
  });

  it('keeps the message, reason, causes and Retry-After', () => {
    const e = statusError('PATCH', '/api/v1/nodes/n1', 409, { reason: 'Conflict', message: 'Apply failed with 1 conflict', details: { causes: [{ field: '.metadata.labels.a' }] } }, '3');
    expect(e.message).toBe('PATCH /api/v1/nodes/n1: Apply failed with 1 conflict');
    expect(e.details).toMatchObject({ status: 409, reason: 'Conflict', causes: [{ field: '.metadata.labels.a' }], retryAfterSeconds: 3 });
  });
});

describe('loadKubeconfig', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kubeconfig-'));
  const write = (name: string, text: string) => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, text);
    return f;
  };
  const base = (user: string) => `apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: k, user: u, namespace: team}}]
clusters: [{name: k, cluster: {server: "https://10.0.0.1:6443/", certificate-authority: pki/ca.crt}}]
users: [{name: u, user: ${user}}]
`;

  it('resolves files relative to the kubeconfig, reads -data as base64 and tokenFile', () => {
    fs.mkdirSync(path.join(dir, 'pki'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'pki/ca.crt'), 'CA PEM');
    fs.writeFileSync(path.join(dir, 'token'), 'secret\n');
    const a = loadKubeconfig(write('a.yaml', base(`{client-certificate-data: ${Buffer.from('CERT').toString('base64')}, client-key-data: ${Buffer.from('KEY').toString('base64')}}`)));
    expect(a).toMatchObject({ server: 'https://10.0.0.1:6443', ca: 'CA PEM', cert: 'CERT', key: 'KEY', namespace: 'team' });
    expect(loadKubeconfig(write('b.yaml', base('{tokenFile: token}'))).token).toBe('secret');
  });

  it.each([
    ['a certificate without its key', '{client-certificate-data: Q0VSVA==}', /users\[0\]\.user: client-certificate and client-key go together/],
    ['an unreadable token file', '{tokenFile: nope}', /users\[0\]\.user\.tokenFile: cannot read .*nope/],
  ])('%s: names the file and field', (_n, user, re) => {
    const f = write('bad.yaml', base(user));
    expect(() => loadKubeconfig(f)).toThrow(re);
    expect(() => loadKubeconfig(f)).toThrow(new RegExp(`^${f.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: `));
  });

  it('refuses insecure-skip-tls-verify', () => {
    const f = write('insecure.yaml', base('{}').replace('certificate-authority: pki/ca.crt', 'insecure-skip-tls-verify: true'));
    expect(() => loadKubeconfig(f)).toThrow(/insecure-skip-tls-verify/);
  });
});
