import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, pod, request } from './helpers.js';

let cp: ControlPlane;
beforeAll(async () => {
  cp = await startControlPlane({ tooLargeResourceVersionWaitMs: 100, nodeLifecycleIntervalMs: 0 });
  cp.addToken(TOKEN, 'admin', ['system:masters']);
});
afterAll(async () => {
  await cp.close();
});

describe('authentication and discovery', () => {
  it('answers 401 with a Status body without credentials', async () => {
    const r = await request(cp, 'GET', '/api/v1/pods', { token: null });
    expect(r.status).toBe(401);
    expect(r.json).toMatchObject({ kind: 'Status', status: 'Failure', reason: 'Unauthorized', code: 401 });
  });

  it('serves /version, /api, /apis and the group-version lists with status subresources', async () => {
    expect((await request(cp, 'GET', '/version')).json.major).toBe('1');
    expect((await request(cp, 'GET', '/api')).json.versions).toEqual(['v1']);
    const apis = (await request(cp, 'GET', '/apis')).json;
    expect(apis.groups.map((g: { name: string }) => g.name)).toContain('coordination.k8s.io');
    const core = (await request(cp, 'GET', '/api/v1')).json;
    const names = core.resources.map((r: { name: string }) => r.name);
    expect(names).toEqual(expect.arrayContaining(['namespaces', 'nodes', 'nodes/status', 'pods', 'pods/status', 'events']));
    const leases = (await request(cp, 'GET', '/apis/coordination.k8s.io/v1')).json;
    expect(leases.resources[0]).toMatchObject({ name: 'leases', namespaced: true, kind: 'Lease' });
  });

  it('publishes an OpenAPI v3 index whose group-version documents list fieldValidation on PATCH', async () => {
    const idx = (await request(cp, 'GET', '/openapi/v3')).json;
    const url = idx.paths['api/v1'].serverRelativeURL as string;
    const doc = (await request(cp, 'GET', url)).json;
    const op = doc.paths['/api/v1/namespaces/{namespace}/pods/{name}'].patch;
    expect(op['x-kubernetes-group-version-kind']).toEqual({ group: '', version: 'v1', kind: 'Pod' });
    expect(op.parameters.map((p: { name: string }) => p.name)).toContain('fieldValidation');
  });
});

describe('CRUD and Status errors', () => {
  it('creates, gets, 404s and 409s AlreadyExists; generateName gives a unique name', async () => {
    const c = await request(cp, 'POST', '/api/v1/namespaces/default/pods', { body: pod('crud-a') });
    expect(c.status).toBe(201);
    expect(c.json.metadata).toMatchObject({ name: 'crud-a', namespace: 'default' });
    expect(c.json.metadata.uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(c.json.metadata.managedFields[0]).toMatchObject({ manager: 'unknown', operation: 'Update', apiVersion: 'v1', fieldsType: 'FieldsV1' });
    const g = await request(cp, 'GET', '/api/v1/namespaces/default/pods/crud-a');
    expect(g.json.metadata.resourceVersion).toBe(c.json.metadata.resourceVersion);
    const dup = await request(cp, 'POST', '/api/v1/namespaces/default/pods', { body: pod('crud-a') });
    expect(dup.status).toBe(409);
    expect(dup.json).toMatchObject({ kind: 'Status', reason: 'AlreadyExists', code: 409, details: { name: 'crud-a', kind: 'pods' } });
    const nf = await request(cp, 'GET', '/api/v1/namespaces/default/pods/nope');
    expect(nf.status).toBe(404);
    expect(nf.json).toMatchObject({ reason: 'NotFound', message: 'pods "nope" not found' });
    const gen = await request(cp, 'POST', '/api/v1/namespaces/default/pods', { body: { ...pod(''), metadata: { generateName: 'gen-' } } });
    expect(gen.status).toBe(201);
    expect(gen.json.metadata.name).toMatch(/^gen-[a-z0-9]{5}$/);
  });

  it('routes cluster and namespaced paths per the path table', async () => {
    expect((await request(cp, 'POST', '/api/v1/nodes', { body: { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } } })).status).toBe(201);
    expect((await request(cp, 'GET', '/api/v1/nodes/n1')).status).toBe(200);
    expect((await request(cp, 'GET', '/api/v1/namespaces/default/nodes/n1')).status).toBe(404);
    expect((await request(cp, 'GET', '/api/v1/namespaces/default')).json.status.phase).toBe('Active');
    const all = await request(cp, 'GET', '/api/v1/pods');
    expect(all.json.kind).toBe('PodList');
    expect((await request(cp, 'POST', '/api/v1/namespaces/missing/pods', { body: pod('x') })).status).toBe(404);
    const lease = await request(cp, 'POST', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', { body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'n1' }, spec: { holderIdentity: 'n1' } } });
    expect(lease.status).toBe(201);
    expect((await request(cp, 'GET', '/api/v1/nodes/n1/status')).json.metadata.name).toBe('n1');
  });

  it('rejects a pod without containers with 422 Invalid naming the field', async () => {
    const r = await request(cp, 'POST', '/api/v1/namespaces/default/pods', { body: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'bad' }, spec: {} } });
    expect(r.status).toBe(422);
    expect(r.json.details.causes[0].field).toBe('spec.containers');
  });
});

describe('consistency: get', () => {
  it.each([
    ['unset', '', 200],
    ['0', '0', 200],
    ['non-zero not older', 'CURRENT', 200],
  ])('rv %s answers the object', async (_l, rv, code) => {
    const c = (await request(cp, 'GET', '/api/v1/namespaces/default')).json;
    const v = rv === 'CURRENT' ? c.metadata.resourceVersion : rv;
    const r = await request(cp, 'GET', `/api/v1/namespaces/default${v === '' ? '' : `?resourceVersion=${v}`}`);
    expect(r.status).toBe(code);
    expect(r.json.metadata.name).toBe('default');
  });

  it('a too-large resourceVersion waits, then 504 with Retry-After and "Too large resource version"', async () => {
    const r = await request(cp, 'GET', '/api/v1/namespaces/default?resourceVersion=99999999');
    expect(r.status).toBe(504);
    expect(r.headers['retry-after']).toBe('1');
    expect(r.json.message).toContain('Too large resource version');
  });
});

describe('consistency: list table', () => {
  let rvBefore: string;
  let rvAfter: string;
  beforeAll(async () => {
    await request(cp, 'POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'lt' } } });
    rvBefore = (await request(cp, 'POST', '/api/v1/namespaces/lt/pods', { body: pod('p1') })).json.metadata.resourceVersion;
    rvAfter = (await request(cp, 'POST', '/api/v1/namespaces/lt/pods', { body: pod('p2') })).json.metadata.resourceVersion;
  });
  const names = (j: { items: Array<{ metadata: { name: string } }> }): string[] => j.items.map((i) => i.metadata.name);

  it.each([
    // [match, paging, rv, expected]
    ['', '', '', 'latest'],
    ['', '', '0', 'latest'],
    ['', '', 'before', 'notOlder'],
    ['', 'limit=5', '', 'latest'],
    ['', 'limit=5', '0', 'latest'],
    ['', 'limit=5', 'before', 'exact'],
    ['Exact', '', 'before', 'exact'],
    ['Exact', 'limit=5', 'before', 'exact'],
    ['NotOlderThan', '', '0', 'latest'],
    ['NotOlderThan', '', 'before', 'notOlder'],
    ['NotOlderThan', 'limit=5', '0', 'latest'],
    ['NotOlderThan', 'limit=5', 'before', 'notOlder'],
    ['Exact', '', '', 400],
    ['Exact', '', '0', 400],
    ['Exact', 'limit=5', '', 400],
    ['Exact', 'limit=5', '0', 400],
    ['NotOlderThan', '', '', 400],
    ['NotOlderThan', 'limit=5', '', 400],
  ] as Array<[string, string, string, string | number]>)('match=%s paging=%s rv=%s -> %s', async (match, paging, rv, expected) => {
    const qs = [paging, rv === '' ? '' : `resourceVersion=${rv === 'before' ? rvBefore : rv}`, match === '' ? '' : `resourceVersionMatch=${match}`].filter((x) => x !== '').join('&');
    const r = await request(cp, 'GET', `/api/v1/namespaces/lt/pods?${qs}`);
    if (typeof expected === 'number') {
      expect(r.status).toBe(expected);
      expect(r.json.kind).toBe('Status');
      return;
    }
    expect(r.status).toBe(200);
    if (expected === 'exact') {
      expect(r.json.metadata.resourceVersion).toBe(rvBefore);
      expect(names(r.json)).toEqual(['p1']);
    } else {
      expect(Number(r.json.metadata.resourceVersion)).toBeGreaterThanOrEqual(Number(rvAfter));
      expect(names(r.json)).toEqual(['p1', 'p2']);
    }
  });

  it('continue with non-zero rv is 400; continue with rv=0 is treated as continue', async () => {
    const first = await request(cp, 'GET', '/api/v1/namespaces/lt/pods?limit=1');
    const tok = encodeURIComponent(first.json.metadata.continue);
    expect((await request(cp, 'GET', `/api/v1/namespaces/lt/pods?limit=1&continue=${tok}&resourceVersion=${rvBefore}`)).status).toBe(400);
    const r = await request(cp, 'GET', `/api/v1/namespaces/lt/pods?limit=1&continue=${tok}&resourceVersion=0`);
    expect(r.status).toBe(200);
    expect(names(r.json)).toEqual(['p2']);
  });

  it('Exact at a version older than the history answers 410', async () => {
    const local = await startControlPlane({ watchHistoryWindowMs: 300_000, nodeLifecycleIntervalMs: 0 });
    try {
      local.addToken(TOKEN, 'admin');
      const c = await request(local, 'POST', '/api/v1/namespaces/default/pods', { body: pod('a') });
      await request(local, 'POST', '/api/v1/namespaces/default/pods', { body: pod('b') });
      local.compactHistory();
      const r = await request(local, 'GET', `/api/v1/namespaces/default/pods?resourceVersion=${c.json.metadata.resourceVersion}&resourceVersionMatch=Exact`);
      expect(r.status).toBe(410);
      expect(r.json.reason).toBe('Expired');
    } finally {
      await local.close();
    }
  });
});

describe('selectors', () => {
  beforeAll(async () => {
    await request(cp, 'POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'sel' } } });
    await request(cp, 'POST', '/api/v1/namespaces/sel/pods', { body: pod('s1', { metadata: { labels: { app: 'web', tier: 'a' } }, spec: { nodeName: 'n1' } }) });
    await request(cp, 'POST', '/api/v1/namespaces/sel/pods', { body: pod('s2', { metadata: { labels: { app: 'db' } }, spec: { nodeName: 'n2' } }) });
    await request(cp, 'POST', '/api/v1/namespaces/sel/pods', { body: pod('s3', { metadata: { labels: { app: 'web' } } }) });
  });
  it.each([
    ['labelSelector=app%3Dweb', ['s1', 's3']],
    ['labelSelector=app!%3Dweb', ['s2']],
    ['labelSelector=app%20in%20(db,x)', ['s2']],
    ['labelSelector=tier', ['s1']],
    ['labelSelector=!tier', ['s2', 's3']],
    ['fieldSelector=spec.nodeName%3Dn1', ['s1']],
    ['fieldSelector=spec.nodeName%3D', ['s3']],
    ['fieldSelector=metadata.name%3Ds2', ['s2']],
    ['fieldSelector=metadata.namespace%3Dsel,metadata.name!%3Ds2', ['s1', 's3']],
  ])('%s', async (qs, expected) => {
    const r = await request(cp, 'GET', `/api/v1/namespaces/sel/pods?${qs}`);
    expect(r.status).toBe(200);
    expect(r.json.items.map((i: { metadata: { name: string } }) => i.metadata.name)).toEqual(expected);
  });
  it('an unsupported field is 400', async () => {
    expect((await request(cp, 'GET', '/api/v1/namespaces/sel/pods?fieldSelector=spec.foo%3Dx')).status).toBe(400);
  });
});

describe('chunked lists', () => {
  beforeAll(async () => {
    await request(cp, 'POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'chunk' } } });
    for (const n of ['c1', 'c2', 'c3', 'c4', 'c5']) await request(cp, 'POST', '/api/v1/namespaces/chunk/pods', { body: pod(n) });
  });

  it('pages a consistent snapshot with remainingItemCount, unaffected by later writes', async () => {
    const p1 = (await request(cp, 'GET', '/api/v1/namespaces/chunk/pods?limit=2')).json;
    expect(p1.items).toHaveLength(2);
    expect(p1.metadata.remainingItemCount).toBe(3);
    await request(cp, 'POST', '/api/v1/namespaces/chunk/pods', { body: pod('c0') });
    await request(cp, 'DELETE', '/api/v1/namespaces/chunk/pods/c5');
    const p2 = (await request(cp, 'GET', `/api/v1/namespaces/chunk/pods?limit=2&continue=${encodeURIComponent(p1.metadata.continue)}`)).json;
    expect(p2.metadata.resourceVersion).toBe(p1.metadata.resourceVersion);
    expect(p2.metadata.remainingItemCount).toBe(1);
    const p3 = (await request(cp, 'GET', `/api/v1/namespaces/chunk/pods?limit=2&continue=${encodeURIComponent(p2.metadata.continue)}`)).json;
    expect(p3.metadata.continue ?? '').toBe('');
    expect(p3.metadata.remainingItemCount).toBeUndefined();
    const all = [...p1.items, ...p2.items, ...p3.items].map((i: { metadata: { name: string } }) => i.metadata.name);
    expect(all).toEqual(['c1', 'c2', 'c3', 'c4', 'c5']);
  });

  it('a continue token whose version left the history answers 410', async () => {
    const p1 = (await request(cp, 'GET', '/api/v1/namespaces/chunk/pods?limit=1')).json;
    await request(cp, 'POST', '/api/v1/namespaces/chunk/pods', { body: pod('c9') });
    cp.compactHistory();
    const r = await request(cp, 'GET', `/api/v1/namespaces/chunk/pods?limit=1&continue=${encodeURIComponent(p1.metadata.continue)}`);
    expect(r.status).toBe(410);
    expect(r.json.reason).toBe('Expired');
  });

  it('omits remainingItemCount with a selector', async () => {
    const r = (await request(cp, 'GET', '/api/v1/namespaces/chunk/pods?limit=1&labelSelector=!x')).json;
    expect(r.metadata.continue).not.toBe('');
    expect(r.metadata.remainingItemCount).toBeUndefined();
  });

  it('an expired continue token answers 410', async () => {
    let now = Date.UTC(2026, 0, 1);
    const clock = { now: () => now, sleep: () => Promise.resolve() };
    const local = await startControlPlane({ clock, continueTokenTtlMs: 1000, nodeLifecycleIntervalMs: 0 });
    try {
      local.addToken(TOKEN, 'admin');
      for (const n of ['a', 'b']) await request(local, 'POST', '/api/v1/namespaces/default/pods', { body: pod(n) });
      const p1 = (await request(local, 'GET', '/api/v1/namespaces/default/pods?limit=1')).json;
      now += 1001;
      const r = await request(local, 'GET', `/api/v1/namespaces/default/pods?limit=1&continue=${encodeURIComponent(p1.metadata.continue)}`);
      expect(r.status).toBe(410);
      expect(r.json).toMatchObject({ kind: 'Status', reason: 'Expired', code: 410 });
    } finally {
      await local.close();
    }
  });
});
