import zlib from 'node:zlib';
import YAML from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, pod, request, watch, namespaces } from './helpers.js';

let cp: ControlPlane;
const freshNs = namespaces(() => cp, 'd');
beforeAll(async () => {
  cp = await startControlPlane({ nodeLifecycleIntervalMs: 0 });
  cp.addToken(TOKEN, 'admin', ['g1']);
});
afterAll(async () => {
  await cp.close();
});

describe('deletion table', () => {
  it('live -> removed when there are no finalizers; the name can be reused', async () => {
    const ns = await freshNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') });
    const d = await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/a`);
    expect(d.status).toBe(200);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods/a`)).status).toBe(404);
    expect((await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') })).status).toBe(201);
  });

  it('live -> terminating (deletionTimestamp set); finalizer removed with others left stays; last removed -> removed', async () => {
    const ns = await freshNs();
    const path = `/api/v1/namespaces/${ns}/pods/f`;
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('f', { metadata: { finalizers: ['x/a', 'x/b'] } }) });
    const w = await watch(cp, `/api/v1/namespaces/${ns}/pods?watch=true`);
    await w.waitFor(1);
    const d = await request(cp, 'DELETE', path);
    expect(d.status).toBe(200);
    expect(d.json.metadata.deletionTimestamp).toEqual(expect.any(String));
    const again = await request(cp, 'DELETE', path);
    expect(again.json.metadata.deletionTimestamp).toBe(d.json.metadata.deletionTimestamp);
    const one = await request(cp, 'PATCH', path, { contentType: 'application/json-patch+json', body: [{ op: 'remove', path: '/metadata/finalizers/0' }] });
    expect(one.json.metadata.finalizers).toEqual(['x/b']);
    expect((await request(cp, 'GET', path)).status).toBe(200);
    const last = await request(cp, 'PATCH', path, { contentType: 'application/merge-patch+json', body: { metadata: { finalizers: null } } });
    expect(last.status).toBe(200);
    expect((await request(cp, 'GET', path)).status).toBe(404);
    const evs = await w.waitFor(5);
    expect(evs.map((e) => e.type)).toEqual(['ADDED', 'MODIFIED', 'MODIFIED', 'MODIFIED', 'DELETED']);
    w.close();
  });

  it('delete of the namespace removes what it holds; finalized objects keep it terminating until they go', async () => {
    const ns = await freshNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('plain') });
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('held', { metadata: { finalizers: ['x/hold'] } }) });
    await request(cp, 'POST', `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`, { body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'l' } } });
    const d = await request(cp, 'DELETE', `/api/v1/namespaces/${ns}`);
    expect(d.status).toBe(200);
    expect(d.json.status.phase).toBe('Terminating');
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods/plain`)).status).toBe(404);
    expect((await request(cp, 'GET', `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases/l`)).status).toBe(404);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods/held`)).json.metadata.deletionTimestamp).toEqual(expect.any(String));
    const create = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('new') });
    expect(create.status).toBe(403);
    await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/held`, { contentType: 'application/merge-patch+json', body: { metadata: { finalizers: [] } } });
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}`)).status).toBe(404);
  });

  it('unreadable object: a normal delete fails; ignoreStoreReadErrorWithClusterBreakingPotential removes it ignoring finalizers', async () => {
    const ns = await freshNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('bad', { metadata: { finalizers: ['x/y'] } }) });
    cp.corruptObject('pods', ns, 'bad');
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods/bad`)).status).toBe(500);
    expect((await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/bad`)).status).toBe(500);
    const r = await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/bad`, { body: { ignoreStoreReadErrorWithClusterBreakingPotential: true } });
    expect(r.status).toBe(200);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods/bad`)).status).toBe(404);
  });

  it('deletecollection removes what the selector matches', async () => {
    const ns = await freshNs();
    for (const [name, app] of [['a', 'x'], ['b', 'x'], ['c', 'y']]) await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod(name!, { metadata: { labels: { app } } }) });
    const r = await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods?labelSelector=app%3Dx`);
    expect(r.status).toBe(200);
    expect(r.json.items).toHaveLength(2);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods`)).json.items.map((i: { metadata: { name: string } }) => i.metadata.name)).toEqual(['c']);
  });
});

describe('DeleteOptions validation', () => {
  it.each([
    [{ ignoreStoreReadErrorWithClusterBreakingPotential: true, gracePeriodSeconds: 0 }, 400, 'gracePeriodSeconds'],
    [{ ignoreStoreReadErrorWithClusterBreakingPotential: true, dryRun: ['All'] }, 400, 'dryRun'],
    [{ ignoreStoreReadErrorWithClusterBreakingPotential: true, orphanDependents: false }, 400, 'orphanDependents'],
    [{ ignoreStoreReadErrorWithClusterBreakingPotential: true, preconditions: { uid: 'x' } }, 400, 'preconditions'],
    [{ ignoreStoreReadErrorWithClusterBreakingPotential: true, propagationPolicy: 'Background' }, 400, 'propagationPolicy'],
    [{ ignoreStoreReadErrorWithClusterBreakingPotential: true }, 400, 'can be read normally'],
    [{ propagationPolicy: 'Sideways' }, 400, 'propagationPolicy'],
    [{ gracePeriodSeconds: -1 }, 400, 'gracePeriodSeconds'],
    [{ preconditions: { uid: 'not-the-uid' } }, 409, 'Precondition failed'],
    [{ propagationPolicy: 'Background', gracePeriodSeconds: 0 }, 200, ''],
  ] as Array<[object, number, string]>)('%j -> %i', async (opts, status, text) => {
    const ns = await freshNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('o') });
    const r = await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/o`, { body: { apiVersion: 'v1', kind: 'DeleteOptions', ...opts } });
    expect(r.status).toBe(status);
    if (text) expect(r.json.message).toContain(text);
  });
});

describe('encodings', () => {
  it('YAML in and out', async () => {
    const ns = await freshNs();
    const r = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { contentType: 'application/yaml', body: 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: y\nspec:\n  containers:\n  - {name: c, image: i}\n', headers: { Accept: 'application/yaml' } });
    expect(r.status).toBe(201);
    expect(r.headers['content-type']).toBe('application/yaml');
    expect(YAML.parse(r.text).metadata.name).toBe('y');
  });

  it('as=Table gives Name and Created At columns', async () => {
    const r = await request(cp, 'GET', '/api/v1/namespaces', { headers: { Accept: 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json' } });
    expect(r.json).toMatchObject({ kind: 'Table', apiVersion: 'meta.k8s.io/v1' });
    expect(r.json.columnDefinitions.map((c: { name: string; type: string }) => [c.name, c.type])).toEqual([
      ['Name', 'string'],
      ['Created At', 'date'],
    ]);
    expect(r.json.rows.map((x: { cells: string[] }) => x.cells[0])).toContain('default');
  });

  it('gzip when asked for get and list', async () => {
    const r = await request(cp, 'GET', '/api/v1/namespaces', { headers: { 'Accept-Encoding': 'gzip' } });
    expect(r.headers['content-encoding']).toBe('gzip');
    expect(JSON.parse(zlib.gunzipSync(r.raw).toString()).kind).toBe('NamespaceList');
  });

  it.each([
    ['application/vnd.kubernetes.protobuf', 200], // a Namespace in protobuf (kubectl-protobuf.test.ts); a Node would be 406
    ['application/cbor', 406],
    ['application/vnd.kubernetes.protobuf,application/json', 200],
    ['text/html', 406],
  ])('Accept %s -> %i', async (accept, status) => {
    const r = await request(cp, 'GET', '/api/v1/namespaces/default', { headers: { Accept: accept } });
    expect(r.status).toBe(status);
    if (status === 406) expect(r.json.reason).toBe('NotAcceptable');
  });
});

describe('virtual reviews', () => {
  it('tokenreviews answer from addToken', async () => {
    const ok = await request(cp, 'POST', '/apis/authentication.k8s.io/v1/tokenreviews', { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token: TOKEN } } });
    expect(ok.status).toBe(201);
    expect(ok.json.status).toEqual({ authenticated: true, user: { username: 'admin', groups: ['g1'] } });
    const bad = await request(cp, 'POST', '/apis/authentication.k8s.io/v1/tokenreviews', { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token: 'nope' } } });
    expect(bad.json.status.authenticated).toBeUndefined();
  });

  it('subjectaccessreviews deny by default with "no rule" and follow setAccessRules', async () => {
    const sar = { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', spec: { user: 'u', groups: ['g'], resourceAttributes: { verb: 'get', resource: 'nodes', subresource: 'proxy', name: 'n1' } } };
    const deny = await request(cp, 'POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', { body: sar });
    expect(deny.json.status).toMatchObject({ allowed: false, reason: 'no rule' });
    const seen: object[] = [];
    cp.setAccessRules((a) => {
      seen.push(a);
      return { allowed: a.user === 'u' && a.subresource === 'proxy', reason: 'rule' };
    });
    const allow = await request(cp, 'POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', { body: sar });
    expect(allow.json.status.allowed).toBe(true);
    expect(seen[0]).toEqual({ user: 'u', groups: ['g'], verb: 'get', resource: 'nodes', subresource: 'proxy', name: 'n1' });
  });

  it('client certificates authenticate (CN user)', async () => {
    const { certFile, keyFile } = cp.issueClientCert('cert-user', ['grp']);
    const https = await import('node:https');
    const fs = await import('node:fs');
    const status = await new Promise<number>((resolve, reject) => {
      https
        .get(`${cp.url}/api/v1/namespaces`, { ca: fs.readFileSync(cp.caFile), cert: fs.readFileSync(certFile), key: fs.readFileSync(keyFile) }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
        .on('error', reject);
    });
    expect(status).toBe(200);
  });
});
