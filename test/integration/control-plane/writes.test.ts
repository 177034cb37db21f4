import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, pod, request, namespaces } from './helpers.js';

let cp: ControlPlane;
const freshNs = namespaces(() => cp, 'wr');
const APPLY = 'application/apply-patch+yaml';
beforeAll(async () => {
  cp = await startControlPlane({ nodeLifecycleIntervalMs: 0 });
  cp.addToken(TOKEN, 'admin');
});
afterAll(async () => {
  await cp.close();
});

describe('update (PUT)', () => {
  it('409 on a stale resourceVersion; current one succeeds and bumps it', async () => {
    const ns = await freshNs();
    const c = (await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') })).json;
    const upd = { ...c, metadata: { ...c.metadata, labels: { v: '1' } } };
    const ok = await request(cp, 'PUT', `/api/v1/namespaces/${ns}/pods/a`, { body: upd });
    expect(ok.status).toBe(200);
    expect(Number(ok.json.metadata.resourceVersion)).toBeGreaterThan(Number(c.metadata.resourceVersion));
    const stale = await request(cp, 'PUT', `/api/v1/namespaces/${ns}/pods/a`, { body: { ...upd, metadata: { ...upd.metadata, labels: { v: '2' } } } });
    expect(stale.status).toBe(409);
    expect(stale.json).toMatchObject({ kind: 'Status', reason: 'Conflict', code: 409 });
    expect(stale.json.message).toContain('the object has been modified');
  });

  it('PUT of a missing object creates it (201)', async () => {
    const ns = await freshNs();
    const r = await request(cp, 'PUT', `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases/l1`, { body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'l1' }, spec: { holderIdentity: 'x' } } });
    expect(r.status).toBe(201);
    expect(r.json.metadata.uid).toBeTruthy();
  });

  it('the main resource cannot change status and the status subresource cannot change spec', async () => {
    const ns = await freshNs();
    const c = (await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') })).json;
    const put = await request(cp, 'PUT', `/api/v1/namespaces/${ns}/pods/a`, { body: { ...c, status: { phase: 'Running' } } });
    expect(put.json.status.phase).toBe('Pending');
    const st = await request(cp, 'PUT', `/api/v1/namespaces/${ns}/pods/a/status`, { body: { ...put.json, spec: { ...put.json.spec, nodeName: 'zzz' }, status: { phase: 'Running' } } });
    expect(st.status).toBe(200);
    expect(st.json.status.phase).toBe('Running');
    expect(st.json.spec.nodeName).toBeUndefined();
    expect(st.json.metadata.managedFields.some((m: { subresource?: string }) => m.subresource === 'status')).toBe(true);
  });

  it('the manager comes from the User-Agent when fieldManager is absent', async () => {
    const ns = await freshNs();
    const r = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a'), headers: { 'User-Agent': 'nodelet/0.1.0 (linux)' } });
    expect(r.json.metadata.managedFields[0].manager).toBe('nodelet');
  });
});

describe('patch types', () => {
  let ns: string;
  beforeAll(async () => {
    ns = await freshNs();
    await request(cp, 'POST', '/api/v1/nodes', {
      body: {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: 'pn' },
        status: { conditions: [{ type: 'Ready', status: 'False' }, { type: 'DiskPressure', status: 'False' }], addresses: [{ type: 'InternalIP', address: '10.0.0.1' }, { type: 'Hostname', address: 'pn' }] },
      },
    });
  });

  it('JSON patch applies ops; a failing test op is 422 and changes nothing', async () => {
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('jp') });
    const ok = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/jp`, { contentType: 'application/json-patch+json', body: [{ op: 'test', path: '/metadata/name', value: 'jp' }, { op: 'add', path: '/metadata/labels', value: { a: 'b' } }] });
    expect(ok.status).toBe(200);
    expect(ok.json.metadata.labels).toEqual({ a: 'b' });
    const bad = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/jp`, { contentType: 'application/json-patch+json', body: [{ op: 'test', path: '/metadata/labels/a', value: 'zzz' }, { op: 'remove', path: '/metadata/labels' }] });
    expect(bad.status).toBe(422);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods/jp`)).json.metadata.labels).toEqual({ a: 'b' });
  });

  it('merge patch replaces lists and null deletes; a stale resourceVersion in the patch is 409', async () => {
    const r = await request(cp, 'PATCH', '/api/v1/nodes/pn/status', { contentType: 'application/merge-patch+json', body: { status: { conditions: [{ type: 'Ready', status: 'True' }] } } });
    expect(r.json.status.conditions).toEqual([{ type: 'Ready', status: 'True' }]);
    const stale = await request(cp, 'PATCH', '/api/v1/nodes/pn', { contentType: 'application/merge-patch+json', body: { metadata: { resourceVersion: '1', labels: { a: 'b' } } } });
    expect(stale.status).toBe(409);
  });

  it('strategic merge patch merges conditions and addresses by type and containers by name', async () => {
    await request(cp, 'PATCH', '/api/v1/nodes/pn/status', { contentType: 'application/merge-patch+json', body: { status: { conditions: [{ type: 'Ready', status: 'False' }, { type: 'DiskPressure', status: 'False' }] } } });
    const r = await request(cp, 'PATCH', '/api/v1/nodes/pn/status', { contentType: 'application/strategic-merge-patch+json', body: { status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady' }], addresses: [{ type: 'InternalIP', address: '10.0.0.2' }] } } });
    expect(r.json.status.conditions).toEqual([{ type: 'Ready', status: 'True', reason: 'KubeletReady' }, { type: 'DiskPressure', status: 'False' }]);
    expect(r.json.status.addresses).toEqual([{ type: 'InternalIP', address: '10.0.0.2' }, { type: 'Hostname', address: 'pn' }]);
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: { ...pod('smp'), spec: { automountServiceAccountToken: false, containers: [{ name: 'a', image: 'i1' }, { name: 'b', image: 'i2' }] } } });
    const p = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/smp`, { contentType: 'application/strategic-merge-patch+json', body: { spec: { containers: [{ name: 'b', image: 'i3' }] } } });
    expect(p.json.spec.containers).toEqual([{ name: 'a', image: 'i1' }, { name: 'b', image: 'i3' }]);
  });

  it('patching a missing object is 404; an unknown patch type is 415', async () => {
    expect((await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/none`, { contentType: 'application/merge-patch+json', body: {} })).status).toBe(404);
    expect((await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/jp`, { contentType: 'text/plain', body: '{}' })).status).toBe(415);
  });
});

describe('server-side apply', () => {
  const cm = (image: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'sa', ...extra }, spec: { containers: [{ name: 'c', image }] } });

  it('fieldManager is required', async () => {
    const ns = await freshNs();
    const r = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/sa`, { contentType: APPLY, body: cm('i1') });
    expect(r.status).toBe(422);
    expect(r.json.message).toContain('fieldManager');
  });

  it('table: create by apply, conflict for another manager, force takes over, same value shares', async () => {
    const ns = await freshNs();
    const path = `/api/v1/namespaces/${ns}/pods/sa`;
    const c = await request(cp, 'PATCH', `${path}?fieldManager=alice`, { contentType: APPLY, body: cm('i1') });
    expect(c.status).toBe(201);
    expect(c.json.metadata.managedFields).toEqual([expect.objectContaining({ manager: 'alice', operation: 'Apply', apiVersion: 'v1', fieldsType: 'FieldsV1', time: expect.any(String) })]);
    // B sets a different value without force: 409 naming the field and its manager; nothing changes.
    const conflict = await request(cp, 'PATCH', `${path}?fieldManager=bob`, { contentType: APPLY, body: cm('i2') });
    expect(conflict.status).toBe(409);
    expect(conflict.json.details.causes).toEqual([{ reason: 'FieldManagerConflict', message: 'conflict with "alice"', field: '.spec.containers[name="c"].image' }]);
    expect((await request(cp, 'GET', path)).json.spec.containers[0].image).toBe('i1');
    // Same value: shared owners.
    const shared = await request(cp, 'PATCH', `${path}?fieldManager=bob`, { contentType: APPLY, body: cm('i1') });
    expect(shared.status).toBe(200);
    expect(shared.json.metadata.managedFields.map((m: { manager: string }) => m.manager).sort()).toEqual(['alice', 'bob']);
    // Force: owned by the forcer only.
    const forced = await request(cp, 'PATCH', `${path}?fieldManager=carol&force=true`, { contentType: APPLY, body: cm('i3') });
    expect(forced.status).toBe(200);
    expect(forced.json.spec.containers[0].image).toBe('i3');
    const owners = forced.json.metadata.managedFields.filter((m: { fieldsV1: string }) => JSON.stringify(m.fieldsV1).includes('f:image'));
    expect(owners.map((m: { manager: string }) => m.manager)).toEqual(['carol']);
  });

  it('table: a field the only applier drops is removed; an update never conflicts and takes ownership', async () => {
    const ns = await freshNs();
    const path = `/api/v1/namespaces/${ns}/pods/sa`;
    await request(cp, 'PATCH', `${path}?fieldManager=alice`, { contentType: APPLY, body: cm('i1', { labels: { a: '1', b: '2' } }) });
    const dropped = await request(cp, 'PATCH', `${path}?fieldManager=alice`, { contentType: APPLY, body: cm('i1', { labels: { a: '1' } }) });
    expect(dropped.json.metadata.labels).toEqual({ a: '1' });
    const upd = await request(cp, 'PATCH', `${path}?fieldManager=dave`, { contentType: 'application/merge-patch+json', body: { metadata: { labels: { a: 'changed' } } } });
    expect(upd.status).toBe(200);
    const dave = upd.json.metadata.managedFields.find((m: { manager: string }) => m.manager === 'dave');
    expect(dave).toMatchObject({ operation: 'Update' });
    expect(JSON.stringify(dave.fieldsV1)).toContain('f:a');
  });

  it('table: owned by A and B, B applies without the field -> owned by A, value kept', async () => {
    const ns = await freshNs();
    const path = `/api/v1/namespaces/${ns}/pods/sa`;
    await request(cp, 'PATCH', `${path}?fieldManager=alice`, { contentType: APPLY, body: cm('i1', { labels: { l: 'v' } }) });
    await request(cp, 'PATCH', `${path}?fieldManager=bob`, { contentType: APPLY, body: cm('i1', { labels: { l: 'v' } }) });
    const r = await request(cp, 'PATCH', `${path}?fieldManager=bob`, { contentType: APPLY, body: cm('i1') });
    expect(r.json.metadata.labels).toEqual({ l: 'v' });
    const owners = r.json.metadata.managedFields.filter((m: { fieldsV1: object }) => JSON.stringify(m.fieldsV1).includes('f:l'));
    expect(owners.map((m: { manager: string }) => m.manager)).toEqual(['alice']);
  });

  it('managedFields [{}] through a merge patch resets ownership', async () => {
    const ns = await freshNs();
    const path = `/api/v1/namespaces/${ns}/pods/sa`;
    await request(cp, 'PATCH', `${path}?fieldManager=alice`, { contentType: APPLY, body: cm('i1') });
    const r = await request(cp, 'PATCH', `${path}?fieldManager=eve`, { contentType: 'application/merge-patch+json', body: { metadata: { managedFields: [{}] } } });
    expect(r.json.metadata.managedFields).toBeUndefined();
  });

  it('an apply carrying managedFields is rejected', async () => {
    const ns = await freshNs();
    const r = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/sa?fieldManager=a`, { contentType: APPLY, body: { ...cm('i1'), metadata: { name: 'sa', managedFields: [{ manager: 'x' }] } } });
    expect(r.status).toBe(422);
  });

  it('YAML apply bodies work', async () => {
    const ns = await freshNs();
    const yaml = 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: sa\nspec:\n  containers:\n  - name: c\n    image: y1\n';
    const r = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/sa?fieldManager=y`, { contentType: APPLY, body: yaml });
    expect(r.status).toBe(201);
    expect(r.json.spec.containers[0].image).toBe('y1');
  });
});

describe('dryRun=All', () => {
  it.each(['POST', 'PUT', 'PATCH', 'DELETE'])('%s runs everything but the store', async (method) => {
    const ns = await freshNs();
    const created = (await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('e') })).json;
    const rvBefore = (await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods`)).json.metadata.resourceVersion;
    let r;
    if (method === 'POST') r = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods?dryRun=All`, { body: pod('d') });
    else if (method === 'PUT') r = await request(cp, 'PUT', `/api/v1/namespaces/${ns}/pods/e?dryRun=All`, { body: { ...created, metadata: { ...created.metadata, labels: { d: '1' } } } });
    else if (method === 'PATCH') r = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/e?dryRun=All`, { contentType: 'application/merge-patch+json', body: { metadata: { labels: { d: '1' } } } });
    else r = await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/e?dryRun=All`);
    expect(r.status).toBe(method === 'POST' ? 201 : 200);
    const after = (await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods`)).json;
    expect(after.metadata.resourceVersion).toBe(rvBefore);
    expect(after.items.map((i: { metadata: { name: string; labels?: object } }) => [i.metadata.name, i.metadata.labels ?? null])).toEqual([['e', null]]);
  });

  it('a dry-run create still reports errors (AlreadyExists)', async () => {
    const ns = await freshNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('e') });
    expect((await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods?dryRun=All`, { body: pod('e') })).status).toBe(409);
    expect((await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods?dryRun=Bogus`, { body: pod('f') })).status).toBe(400);
  });
});

describe('fieldValidation', () => {
  const raw = (name: string): string => `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"${name}","name":"${name}"},"spec":{"bogus":1,"containers":[{"name":"c","image":"i","nope":true}]}}`;
  it.each([
    ['Ignore', 201, 0],
    ['Warn', 201, 3],
    ['', 201, 3],
    ['Strict', 400, 0],
  ])('%s', async (level, status, warnings) => {
    const ns = await freshNs();
    const r = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods${level ? `?fieldValidation=${level}` : ''}`, { body: raw('fv') });
    expect(r.status).toBe(status);
    const w = r.headers['warning'];
    const list = w === undefined ? [] : Array.isArray(w) ? w : String(w).split(/,(?=\s*299)/);
    expect(list).toHaveLength(warnings);
    if (level === 'Strict') {
      expect(r.json.message).toContain('duplicate field "metadata.name"');
      expect(r.json.message).toContain('unknown field "spec.bogus"');
      expect(r.json.message).toContain('unknown field "spec.containers[0].nope"');
    } else {
      expect(r.json.spec.bogus).toBeUndefined();
    }
  });

  it('a wrong type is reported alone whatever the level', async () => {
    const ns = await freshNs();
    const r = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods?fieldValidation=Ignore`, { body: '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"bogus":1,"containers":"oops"}}' });
    expect(r.status).toBe(400);
    expect(r.json.message).toContain('spec.containers');
    expect(r.json.message).not.toContain('bogus');
  });
});
