/**
 * Issue 27: ConfigMaps, Secrets, ServiceAccounts and Services as kube-apiserver serves them,
 * and what the controller manager makes in every namespace (the `default` ServiceAccount,
 * the `kube-root-ca.crt` ConfigMap, the `kubernetes` Service). In-process control plane.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, namespaces, request } from './helpers.js';

let cp: ControlPlane;
let dir: string;
const b64 = (s: string | Buffer): string => Buffer.from(s).toString('base64');

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cp-cm-'));
  cp = await startControlPlane({ nodeLifecycleIntervalMs: 0, pkiDir: path.join(dir, 'pki') });
  cp.addToken(TOKEN, 'admin', ['system:masters']);
});
afterAll(async () => {
  await cp.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const newNs = namespaces(() => cp, 'cms');

/** Polls until `fn` answers a truthy value (the controllers act after the change they follow). */
async function eventually<T>(fn: () => Promise<T | undefined>, ms = 3000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('condition not reached');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('configmaps', () => {
  it('stores data and binaryData and lists them', async () => {
    const ns = await newNs();
    const c = await request(cp, 'POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'app' }, data: { 'app.conf': 'x=1\n', KEY_2: 'v' }, binaryData: { 'blob.bin': b64(Buffer.from([0, 1, 255])) } } });
    expect(c.status).toBe(201);
    const g = await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps/app`);
    expect(g.json.data).toEqual({ 'app.conf': 'x=1\n', KEY_2: 'v' });
    expect(Buffer.from(g.json.binaryData['blob.bin'], 'base64')).toEqual(Buffer.from([0, 1, 255]));
    const l = await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps`);
    expect(l.json.kind).toBe('ConfigMapList');
    expect(l.json.items.map((i: { metadata: { name: string } }) => i.metadata.name)).toEqual(['app', 'kube-root-ca.crt']);
  });

  it.each([
    ['a/b', "data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.'"],
    ['..', "data[..]: Invalid value: \"..\": must not be '..'"],
    ['k'.repeat(254), `data[${'k'.repeat(254)}]: Too long: must be no more than 253 characters`],
  ])('refuses the key %s with 422 naming it', async (key, msg) => {
    const ns = await newNs();
    const r = await request(cp, 'POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { metadata: { name: 'bad' }, data: { [key]: 'v' } } });
    expect(r.status).toBe(422);
    expect(r.json.reason).toBe('Invalid');
    expect(r.json.message).toContain(msg);
  });

  it('refuses more than 1 MiB of data with upstream\'s message; exactly 1 MiB is stored', async () => {
    const ns = await newNs();
    const over = await request(cp, 'POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { metadata: { name: 'big' }, data: { a: 'x'.repeat(1024 * 1024), b: 'y' } } });
    expect(over.status).toBe(422);
    expect(over.json.message).toBe('ConfigMap "big" is invalid: : Too long: must have at most 1048576 bytes');
    const at = await request(cp, 'POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { metadata: { name: 'big' }, data: { a: 'x'.repeat(1024 * 1024 - 1), b: 'y' } } });
    expect(at.status).toBe(201);
  });

  it('immutable: later data changes are refused with 422, metadata changes and deletion are not', async () => {
    const ns = await newNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { metadata: { name: 'frozen' }, data: { a: '1' }, immutable: true } });
    const r = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/configmaps/frozen`, { contentType: 'application/merge-patch+json', body: { data: { a: '2' } } });
    expect(r.status).toBe(422);
    expect(r.json.message).toBe('ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set');
    expect(r.json.details.causes).toEqual([{ reason: 'FieldValueForbidden', message: 'Forbidden: field is immutable when `immutable` is set', field: 'data' }]);
    const unset = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/configmaps/frozen`, { contentType: 'application/merge-patch+json', body: { immutable: false } });
    expect(unset.status).toBe(422);
    expect(unset.json.message).toContain('immutable: Forbidden: field is immutable when `immutable` is set');
    const label = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/configmaps/frozen`, { contentType: 'application/merge-patch+json', body: { metadata: { labels: { a: 'b' } } } });
    expect(label.status).toBe(200);
    expect((await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/configmaps/frozen`)).status).toBe(200);
  });
});

describe('secrets', () => {
  it('folds stringData into data (base64) and never returns it; type defaults to Opaque', async () => {
    const ns = await newNs();
    const c = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 's' }, data: { a: b64('old'), keep: b64('k') }, stringData: { a: 'new', 'pass.txt': 'hunter2' } } });
    expect(c.status).toBe(201);
    expect(c.json.stringData).toBeUndefined();
    expect(c.json.type).toBe('Opaque');
    expect(c.json.data).toEqual({ a: b64('new'), keep: b64('k'), 'pass.txt': b64('hunter2') });
    const u = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/secrets/s`, { contentType: 'application/merge-patch+json', body: { stringData: { keep: 'changed' } } });
    expect(u.status).toBe(200);
    expect(u.json.data.keep).toBe(b64('changed'));
    expect(u.json.stringData).toBeUndefined();
    const g = await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets/s`);
    expect(g.json.stringData).toBeUndefined();
    expect(g.json.data.keep).toBe(b64('changed'));
  });

  it('refuses data that is not base64 with 400', async () => {
    const ns = await newNs();
    const r = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 's' }, data: { a: 'not base64!' } } });
    expect(r.status).toBe(400);
    expect(r.json.message).toBe('Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3');
  });

  it('kubernetes.io/dockerconfigjson needs a .dockerconfigjson key holding JSON', async () => {
    const ns = await newNs();
    const missing = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 'reg' }, type: 'kubernetes.io/dockerconfigjson', data: { other: b64('{}') } } });
    expect(missing.status).toBe(422);
    expect(missing.json.message).toBe('Secret "reg" is invalid: data[.dockerconfigjson]: Required value');
    const notJson = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 'reg' }, type: 'kubernetes.io/dockerconfigjson', data: { '.dockerconfigjson': b64('{not json') } } });
    expect(notJson.status).toBe(422);
    expect(notJson.json.message).toContain('data[.dockerconfigjson]: Invalid value: "<secret contents redacted>": ');
    const ok = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 'reg' }, type: 'kubernetes.io/dockerconfigjson', stringData: { '.dockerconfigjson': '{"auths":{"r.example":{"auth":"dTpw"}}}' } } });
    expect(ok.status).toBe(201);
    const cfg = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 'old' }, type: 'kubernetes.io/dockercfg', data: {} } });
    expect(cfg.json.message).toBe('Secret "old" is invalid: data[.dockercfg]: Required value');
  });

  it('service-account-token secrets name their account; bootstrap tokens are accepted', async () => {
    const ns = await newNs();
    const sat = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 't' }, type: 'kubernetes.io/service-account-token' } });
    expect(sat.status).toBe(422);
    expect(sat.json.message).toBe('Secret "t" is invalid: metadata.annotations[kubernetes.io/service-account.name]: Required value');
    const ok = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 't', annotations: { 'kubernetes.io/service-account.name': 'default' } }, type: 'kubernetes.io/service-account-token' } });
    expect(ok.status).toBe(201);
    const bt = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 'bootstrap-token-abcdef' }, type: 'bootstrap.kubernetes.io/token', stringData: { 'token-id': 'abcdef', 'token-secret': '0123456789abcdef' } } });
    expect(bt.status).toBe(201);
  });

  it('immutable secrets and the type refuse changes; over 1 MiB decoded is refused', async () => {
    const ns = await newNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 'f' }, immutable: true, stringData: { a: '1' } } });
    const r = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/secrets/f`, { contentType: 'application/merge-patch+json', body: { stringData: { a: '2' } } });
    expect(r.status).toBe(422);
    expect(r.json.message).toBe('Secret "f" is invalid: data: Forbidden: field is immutable when `immutable` is set');
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 'typed' }, stringData: { a: '1' } } });
    const t = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/secrets/typed`, { contentType: 'application/merge-patch+json', body: { type: 'kubernetes.io/tls' } });
    expect(t.status).toBe(422);
    expect(t.json.message).toContain('type: Invalid value: "kubernetes.io/tls": field is immutable');
    const big = await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: 'big' }, data: { a: b64(Buffer.alloc(1024 * 1024 + 1)) } } });
    expect(big.status).toBe(422);
    expect(big.json.message).toBe('Secret "big" is invalid: data: Too long: must have at most 1048576 bytes');
  });
});

describe('what the controllers make', () => {
  it('every namespace has a default ServiceAccount and kube-root-ca.crt holding the CA, from the start', async () => {
    const ca = fs.readFileSync(cp.caFile, 'utf8');
    for (const ns of ['default', 'kube-system', 'kube-public', 'kube-node-lease', await newNs()]) {
      const sa = await request(cp, 'GET', `/api/v1/namespaces/${ns}/serviceaccounts/default`);
      expect(sa.status).toBe(200);
      const cm = await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps/kube-root-ca.crt`);
      expect(cm.json.data).toEqual({ 'ca.crt': ca });
    }
  });

  it('makes them again once deleted', async () => {
    const ns = await newNs();
    const before = (await request(cp, 'GET', `/api/v1/namespaces/${ns}/serviceaccounts/default`)).json.metadata.uid;
    expect((await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/serviceaccounts/default`)).status).toBe(200);
    expect((await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/configmaps/kube-root-ca.crt`)).status).toBe(200);
    const after = await eventually(async () => (await request(cp, 'GET', `/api/v1/namespaces/${ns}/serviceaccounts/default`)).json.metadata?.uid);
    expect(after).not.toBe(before);
    await eventually(async () => (await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps/kube-root-ca.crt`)).status === 200);
  });

  it('a deleted namespace goes with its ServiceAccount and ConfigMap', async () => {
    const ns = await newNs();
    expect((await request(cp, 'DELETE', `/api/v1/namespaces/${ns}`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 20));
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}`)).status).toBe(404);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/serviceaccounts/default`)).status).toBe(404);
  });

  it('default/kubernetes: the first address of the range, 443 (https) to the control plane\'s port', async () => {
    const s = await request(cp, 'GET', '/api/v1/namespaces/default/services/kubernetes');
    expect(s.json.spec.clusterIP).toBe('10.96.0.1');
    expect(s.json.spec.clusterIPs).toEqual(['10.96.0.1']);
    expect(s.json.spec.ports).toEqual([{ name: 'https', port: 443, protocol: 'TCP', targetPort: Number(new URL(cp.url).port) }]);
  });
});

describe('services and serviceaccounts', () => {
  it('allocates distinct cluster IPs from the range, refuses taken and foreign ones, frees them on delete', async () => {
    const ns = await newNs();
    const svc = (name: string, spec: object = {}) => ({ metadata: { name }, spec: { selector: { app: name }, ports: [{ port: 80, targetPort: 8080 }], ...spec } });
    const a = await request(cp, 'POST', `/api/v1/namespaces/${ns}/services`, { body: svc('a') });
    expect(a.status).toBe(201);
    expect(a.json.spec).toMatchObject({ type: 'ClusterIP', sessionAffinity: 'None', ipFamilies: ['IPv4'], ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }] });
    const ip = a.json.spec.clusterIP as string;
    expect(ip).toMatch(/^10\.(9[6-9]|10[0-9]|11[01])\.\d+\.\d+$/);
    expect(ip).not.toBe('10.96.0.1');
    const taken = await request(cp, 'POST', `/api/v1/namespaces/${ns}/services`, { body: svc('b', { clusterIP: ip }) });
    expect(taken.status).toBe(422);
    expect(taken.json.message).toBe(`Service "b" is invalid: spec.clusterIPs[0]: Invalid value: "${ip}": failed to allocate IP ${ip}: provided IP is already allocated`);
    const foreign = await request(cp, 'POST', `/api/v1/namespaces/${ns}/services`, { body: svc('b', { clusterIP: '192.168.0.10' }) });
    expect(foreign.json.message).toContain('The range of valid IPs is 10.96.0.0/12');
    const change = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/services/a`, { contentType: 'application/merge-patch+json', body: { spec: { clusterIP: '10.96.9.9' } } });
    expect(change.status).toBe(422);
    expect(change.json.message).toContain('may not change once set');
    const noPort = await request(cp, 'POST', `/api/v1/namespaces/${ns}/services`, { body: { metadata: { name: 'np' }, spec: { ports: [{ port: 0 }] } } });
    expect(noPort.json.message).toContain('spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive');
    const two = await request(cp, 'POST', `/api/v1/namespaces/${ns}/services`, { body: { metadata: { name: 'two' }, spec: { ports: [{ name: 'http', port: 80 }, { port: 81 }] } } });
    expect(two.json.message).toContain('spec.ports[1].name: Required value');
    expect((await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/services/a`)).status).toBe(200);
    const again = await request(cp, 'POST', `/api/v1/namespaces/${ns}/services`, { body: svc('b', { clusterIP: ip }) });
    expect(again.status).toBe(201);
  });

  it('the service range is an option', async () => {
    const other = await startControlPlane({ nodeLifecycleIntervalMs: 0, pkiDir: path.join(dir, 'pki2'), serviceClusterIPRange: '10.0.0.0/24' });
    try {
      other.addToken(TOKEN, 'admin', ['system:masters']);
      expect((await request(other, 'GET', '/api/v1/namespaces/default/services/kubernetes')).json.spec.clusterIP).toBe('10.0.0.1');
      const s = await request(other, 'POST', '/api/v1/namespaces/default/services', { body: { metadata: { name: 'x' }, spec: { ports: [{ port: 53, protocol: 'UDP' }] } } });
      expect(s.json.spec.clusterIP).toBe('10.0.0.2');
    } finally {
      await other.close();
    }
  });

  it('serviceaccounts keep secrets, imagePullSecrets and automountServiceAccountToken', async () => {
    const ns = await newNs();
    const r = await request(cp, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { metadata: { name: 'builder' }, secrets: [{ name: 'tok' }], imagePullSecrets: [{ name: 'reg' }], automountServiceAccountToken: false } });
    expect(r.status).toBe(201);
    const g = await request(cp, 'GET', `/api/v1/namespaces/${ns}/serviceaccounts/builder`);
    expect(g.json).toMatchObject({ secrets: [{ name: 'tok' }], imagePullSecrets: [{ name: 'reg' }], automountServiceAccountToken: false });
    const bad = await request(cp, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { metadata: { name: 'b2' }, imagePullSecrets: [{}] } });
    expect(bad.json.message).toBe('ServiceAccount "b2" is invalid: imagePullSecrets[0].name: Required value');
  });
});
