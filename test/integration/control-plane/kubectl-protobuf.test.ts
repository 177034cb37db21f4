/**
 * kubectl 1.32 `create namespace|configmap|secret|serviceaccount|token` against the test
 * control plane (issue 27): kubectl sends these bodies as application/vnd.kubernetes.protobuf;
 * each object is read back as JSON to prove every field arrived. Also: a client that accepts
 * only protobuf gets protobuf objects and errors, and a protobuf body of a kind this server
 * has no message for is 415 naming the kind. (`kubectl run` sends JSON.)
 */
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeProtobuf, encodeProtobuf } from '../../control-plane/protobuf.js';
import type { ControlPlane } from '../../control-plane/server.js';
import { KUBECTL } from '../../helpers/kubectl.js';
import { startAdminControlPlane, type AdminControlPlane } from './helpers.js';

const PB = 'application/vnd.kubernetes.protobuf';
const TOKEN = 'pb-admin-token';
let plane: AdminControlPlane | undefined;
let cp: ControlPlane;
let dir: string;

const kubectl = (args: string[], input?: string) => plane!.kubectl(args, input);

/** `kubectl get <what> -o json` (the JSON read path), asserting it succeeded. */
async function getJson(...what: string[]): Promise<any> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const r = await kubectl(['get', ...what, '-o', 'json']);
  expect(r.stderr).toBe('');
  return JSON.parse(r.stdout);
}

/** One HTTPS request with binary bodies both ways. */
function raw(method: string, p: string, headers: Record<string, string>, body?: Buffer): Promise<{ status: number; type: string; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const h: Record<string, string> = { Authorization: `Bearer ${TOKEN}`, ...headers };
    if (body) h['Content-Length'] = String(body.length);
    const req = https.request(`${cp.url}${p}`, { method, ca: fs.readFileSync(cp.caFile), headers: h }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const b64 = (s: string | Buffer): string => Buffer.from(s).toString('base64');
/** Every byte value once: not UTF-8, so kubectl puts it in binaryData / sends it as is. */
const BINARY = Buffer.from(Array.from({ length: 256 }, (_, i) => 255 - i));

function jwtClaims(token: string): any { // eslint-disable-line @typescript-eslint/no-explicit-any
  const parts = token.trim().split('.');
  expect(parts).toHaveLength(3);
  return JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8'));
}

beforeAll(async () => {
  ({ cp, dir } = plane = await startAdminControlPlane('cp-kubectl-pb-', { token: TOKEN }));
  fs.writeFileSync(path.join(dir, 'blob.bin'), BINARY);
  fs.writeFileSync(path.join(dir, 'app.conf'), 'listen 80\nname "x"\n');
});
afterAll(() => plane?.close());

describe.runIf(fs.existsSync(KUBECTL))('kubectl create sends protobuf; the objects arrive whole', () => {
  it('create namespace', async () => {
    const r = await kubectl(['create', 'namespace', 'pbt', '-v=8']);
    expect(r.code).toBe(0);
    // What kubectl sent and got: a protobuf body, a JSON answer (it accepts JSON too).
    expect(r.stderr).toContain(`Content-Type: ${PB}`);
    expect(r.stderr).toContain(`Accept: ${PB},application/json`);
    expect(r.stdout).toBe('namespace/pbt created\n');
    const ns = await getJson('namespace', 'pbt');
    expect(ns.metadata.name).toBe('pbt');
    expect(ns.status.phase).toBe('Active');
    const again = await kubectl(['create', 'namespace', 'pbt']);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain('Error from server (AlreadyExists): namespaces "pbt" already exists');
  });

  it('create configmap from literals, a text file and a binary file', async () => {
    const r = await kubectl(['create', 'configmap', 'cfg', '-n', 'pbt', '--from-literal=a=b', '--from-literal=empty=', `--from-file=${path.join(dir, 'app.conf')}`, `--from-file=blob=${path.join(dir, 'blob.bin')}`]);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('configmap/cfg created\n');
    const cm = await getJson('configmap', 'cfg', '-n', 'pbt');
    expect(cm.data).toEqual({ a: 'b', empty: '', 'app.conf': 'listen 80\nname "x"\n' });
    expect(cm.binaryData).toEqual({ blob: b64(BINARY) });
    expect(cm.metadata.namespace).toBe('pbt');
    expect(cm.metadata.uid).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('create secret generic with binary data and a type', async () => {
    const r = await kubectl(['create', 'secret', 'generic', 'sec', '-n', 'pbt', '--from-literal=user=admin', `--from-file=key.bin=${path.join(dir, 'blob.bin')}`, '--type=example.com/custom']);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('secret/sec created\n');
    const s = await getJson('secret', 'sec', '-n', 'pbt');
    expect(s.type).toBe('example.com/custom');
    expect(s.data).toEqual({ user: b64('admin'), 'key.bin': b64(BINARY) });
  });

  it('create secret docker-registry', async () => {
    const r = await kubectl(['create', 'secret', 'docker-registry', 'reg', '-n', 'pbt', '--docker-server=registry.example:5000', '--docker-username=u', '--docker-password=p@ss', '--docker-email=e@example.com']);
    expect(r.stderr).toBe('');
    const s = await getJson('secret', 'reg', '-n', 'pbt');
    expect(s.type).toBe('kubernetes.io/dockerconfigjson');
    expect(Object.keys(s.data)).toEqual(['.dockerconfigjson']);
    expect(JSON.parse(Buffer.from(s.data['.dockerconfigjson'], 'base64').toString('utf8'))).toEqual({
      auths: { 'registry.example:5000': { username: 'u', password: 'p@ss', email: 'e@example.com', auth: b64('u:p@ss') } },
    });
  });

  it('create secret tls', async () => {
    const { certFile, keyFile } = cp.issueClientCert('tls-user');
    const r = await kubectl(['create', 'secret', 'tls', 'tls', '-n', 'pbt', `--cert=${certFile}`, `--key=${keyFile}`]);
    expect(r.stderr).toBe('');
    const s = await getJson('secret', 'tls', '-n', 'pbt');
    expect(s.type).toBe('kubernetes.io/tls');
    expect(s.data).toEqual({ 'tls.crt': b64(fs.readFileSync(certFile)), 'tls.key': b64(fs.readFileSync(keyFile)) });
  });

  it('create serviceaccount', async () => {
    const r = await kubectl(['create', 'serviceaccount', 'robot', '-n', 'pbt']);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('serviceaccount/robot created\n');
    const sa = await getJson('serviceaccount', 'robot', '-n', 'pbt');
    expect(sa.metadata.name).toBe('robot');
    expect(sa.metadata.namespace).toBe('pbt');
  });

  it('create token with audiences and a duration', async () => {
    const r = await kubectl(['create', 'token', 'robot', '-n', 'pbt', '--audience=api', '--audience=other', '--duration=10m']);
    expect(r.stderr).toBe('');
    const c = jwtClaims(r.stdout);
    expect(c.aud).toEqual(['api', 'other']);
    expect(c.exp - c.iat).toBe(600);
    expect(c.sub).toBe('system:serviceaccount:pbt:robot');
  });

  it('create token bound to a pod', async () => {
    const made = await kubectl(['create', '-f', '-', '-o', 'jsonpath={.metadata.uid}'], 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: pbt\nspec:\n  serviceAccountName: robot\n  containers:\n  - name: c\n    image: busybox\n');
    expect(made.stderr).toBe('');
    const uid = made.stdout;
    const r = await kubectl(['create', 'token', 'robot', '-n', 'pbt', '--duration=10m', '--bound-object-kind=Pod', '--bound-object-name=web', `--bound-object-uid=${uid}`]);
    expect(r.stderr).toBe('');
    const c = jwtClaims(r.stdout);
    expect(c['kubernetes.io'].pod).toEqual({ name: 'web', uid });
    expect(c['kubernetes.io'].serviceaccount.name).toBe('robot');
    const wrong = await kubectl(['create', 'token', 'robot', '-n', 'pbt', '--bound-object-kind=Pod', '--bound-object-name=web', '--bound-object-uid=not-the-uid']);
    expect(wrong.code).not.toBe(0);
  });

  it('a protobuf body of a kind with no message here is 415 naming the kind', async () => {
    // kubectl's own `create namespace` body with the envelope's kind changed to Pod.
    const ns = '6b3873000a0f0a02763112094e616d657370616365121b0a130a0370627412001a0022002a0032003800420012001a020a001a002200';
    const pod = Buffer.from(ns.replace('0a0f0a02763112094e616d657370616365', '0a090a0276311203506f64'), 'hex');
    const r = await raw('POST', '/api/v1/namespaces/pbt/pods', { 'Content-Type': PB, Accept: `${PB},application/json` }, pod);
    expect(r.status).toBe(415);
    const status = JSON.parse(r.body.toString('utf8'));
    expect(status.reason).toBe('UnsupportedMediaType');
    expect(status.message).toMatch(/^the body of the request was in an unknown format - accepted media types include: application\/json, application\/yaml; application\/vnd\.kubernetes\.protobuf only for .*ConfigMap, Namespace, Secret, ServiceAccount, TokenRequest, not kind "Pod" in version "v1"$/);
  });
});

describe('a client that accepts only protobuf', () => {
  it('gets protobuf objects, lists and Status errors; watches and other kinds are 406', async () => {
    await raw('POST', '/api/v1/namespaces', { 'Content-Type': 'application/json' }, Buffer.from('{"metadata":{"name":"pbonly"}}'));
    const body = encodeProtobuf({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c1', labels: { a: 'b' } }, data: { k: 'v' }, binaryData: { bin: b64(BINARY) } });
    const created = await raw('POST', '/api/v1/namespaces/pbonly/configmaps', { 'Content-Type': PB, Accept: PB }, body);
    expect(created.status).toBe(201);
    expect(created.type).toBe(PB);
    const asJson = await raw('GET', '/api/v1/namespaces/pbonly/configmaps/c1', { Accept: 'application/json' });
    const json = JSON.parse(asJson.body.toString('utf8'));
    expect(json.binaryData).toEqual({ bin: b64(BINARY) });
    // The protobuf answer means exactly what the JSON one does (managedFields included).
    expect(decodeProtobuf(created.body)).toEqual(json);
    const got = await raw('GET', '/api/v1/namespaces/pbonly/configmaps/c1', { Accept: PB });
    expect(got.type).toBe(PB);
    expect(decodeProtobuf(got.body)).toEqual(json);
    const list = await raw('GET', '/api/v1/namespaces/pbonly/configmaps', { Accept: PB });
    expect(list.status).toBe(200);
    const l = decodeProtobuf(list.body);
    expect(l['kind']).toBe('ConfigMapList');
    expect(l['items'].map((i: { metadata: { name: string } }) => i.metadata.name)).toContain('c1');

    await raw('POST', '/api/v1/namespaces/pbonly/serviceaccounts', { 'Content-Type': 'application/json' }, Buffer.from('{"metadata":{"name":"bot"}}'));
    const tr = encodeProtobuf({ apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { audiences: ['x'], expirationSeconds: 3600 } });
    const token = await raw('POST', '/api/v1/namespaces/pbonly/serviceaccounts/bot/token', { 'Content-Type': PB, Accept: PB }, tr);
    expect(token.status).toBe(201);
    expect(token.type).toBe(PB);
    const answer = decodeProtobuf(token.body);
    expect(answer['kind']).toBe('TokenRequest');
    expect(jwtClaims(answer['status']['token']).aud).toEqual(['x']);
    expect(answer['status']['expirationTimestamp']).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);

    const missing = await raw('GET', '/api/v1/namespaces/pbonly/configmaps/nope', { Accept: PB });
    expect(missing.status).toBe(404);
    expect(missing.type).toBe(PB);
    expect(decodeProtobuf(missing.body)).toEqual({ apiVersion: 'v1', kind: 'Status', metadata: {}, status: 'Failure', message: 'configmaps "nope" not found', reason: 'NotFound', details: { name: 'nope', kind: 'configmaps' }, code: 404 });

    const garbage = await raw('POST', '/api/v1/namespaces/pbonly/configmaps', { 'Content-Type': PB, Accept: PB }, Buffer.from('k8s\0\x0a\xff\xff'));
    expect(garbage.status).toBe(400);
    expect(decodeProtobuf(garbage.body)['message']).toMatch(/^invalid protobuf envelope/);

    for (const p of ['/api/v1/namespaces/pbonly/configmaps?watch=true', '/api/v1/nodes']) {
      const r = await raw('GET', p, { Accept: PB });
      expect(r.status).toBe(406);
    }
  });
});
