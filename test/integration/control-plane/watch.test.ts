import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, pod, request, watch, namespaces } from './helpers.js';

let cp: ControlPlane;
const freshNs = namespaces(() => cp, 'w');
beforeAll(async () => {
  cp = await startControlPlane({ nodeLifecycleIntervalMs: 0, bookmarkIntervalMs: 50 });
  cp.addToken(TOKEN, 'admin');
});
afterAll(async () => {
  await cp.close();
});

describe('watch (Events table, Watch behaviour)', () => {
  it.each([['unset', ''], ['0', '&resourceVersion=0']])('rv %s: synthetic ADDED for existing objects, then changes in order', async (_l, rv) => {
    const ns = await freshNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') });
    const w = await watch(cp, `/api/v1/namespaces/${ns}/pods?watch=true${rv}`);
    expect(w.status).toBe(200);
    await w.waitFor(1);
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('b') });
    await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/b`, { body: { metadata: { labels: { x: 'y' } } }, contentType: 'application/merge-patch+json' });
    await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/b`);
    const evs = await w.waitFor(4);
    expect(evs.map((e) => `${e.type}:${e.object.metadata.name}`)).toEqual(['ADDED:a', 'ADDED:b', 'MODIFIED:b', 'DELETED:b']);
    w.close();
  });

  it('non-zero rv: no synthetic events, starts exactly after that version (history replayed)', async () => {
    const ns = await freshNs();
    const a = (await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') })).json;
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('b') });
    const w = await watch(cp, `/api/v1/namespaces/${ns}/pods?watch=true&resourceVersion=${a.metadata.resourceVersion}`);
    const evs = await w.waitFor(1);
    expect(evs[0]).toMatchObject({ type: 'ADDED', object: { metadata: { name: 'b' } } });
    expect(w.body).toContain('\n');
    w.close();
  });

  it('sendInitialEvents=true with NotOlderThan: initial ADDED then a BOOKMARK marked initial-events-end', async () => {
    const ns = await freshNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') });
    const w = await watch(cp, `/api/v1/namespaces/${ns}/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`);
    const evs = await w.waitFor(2);
    expect(evs[0].type).toBe('ADDED');
    expect(evs[1].type).toBe('BOOKMARK');
    expect(evs[1].object.metadata.annotations['k8s.io/initial-events-end']).toBe('true');
    expect(Object.keys(evs[1].object.metadata).sort()).toEqual(['annotations', 'resourceVersion']);
    w.close();
  });

  it('sendInitialEvents without NotOlderThan is 400', async () => {
    const r = await request(cp, 'GET', '/api/v1/pods?watch=true&sendInitialEvents=true');
    expect(r.status).toBe(400);
  });

  it('allowWatchBookmarks sends BOOKMARK events carrying only the resourceVersion', async () => {
    const ns = await freshNs();
    const w = await watch(cp, `/api/v1/namespaces/${ns}/pods?watch=true&allowWatchBookmarks=true&resourceVersion=0`);
    const evs = await w.waitFor(1);
    expect(evs[0].type).toBe('BOOKMARK');
    expect(evs[0].object).toEqual({ kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion: expect.any(String) } });
    w.close();
  });

  it('a version older than the history answers 410; compactHistory forgets everything up to now', async () => {
    const ns = await freshNs();
    const a = (await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') })).json;
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('b') });
    cp.compactHistory();
    const r = await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods?watch=true&resourceVersion=${a.metadata.resourceVersion}`);
    expect(r.status).toBe(410);
    expect(r.json).toMatchObject({ kind: 'Status', reason: 'Expired', code: 410 });
  });

  it('history older than the window answers 410 (clock driven)', async () => {
    let now = Date.UTC(2026, 0, 1);
    const local = await startControlPlane({ clock: { now: () => now, sleep: () => Promise.resolve() }, watchHistoryWindowMs: 1000, nodeLifecycleIntervalMs: 0 });
    try {
      local.addToken(TOKEN, 'admin');
      const a = (await request(local, 'POST', '/api/v1/namespaces/default/pods', { body: pod('a') })).json;
      await request(local, 'POST', '/api/v1/namespaces/default/pods', { body: pod('b') });
      const ok = await watch(local, `/api/v1/pods?watch=true&resourceVersion=${a.metadata.resourceVersion}`);
      expect(ok.status).toBe(200);
      expect((await ok.waitFor(1))[0].object.metadata.name).toBe('b');
      ok.close();
      now += 1001;
      expect((await request(local, 'GET', `/api/v1/pods?watch=true&resourceVersion=${a.metadata.resourceVersion}`)).status).toBe(410);
    } finally {
      await local.close();
    }
  });

  it('dropWatches ends every open stream; a resumed watch from the last rv loses nothing', async () => {
    const ns = await freshNs();
    const w = await watch(cp, `/api/v1/namespaces/${ns}/pods?watch=true`);
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') });
    const [ev] = await w.waitFor(1);
    expect(cp.openWatches).toBeGreaterThan(0);
    cp.dropWatches();
    await w.ended;
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('b') });
    const w2 = await watch(cp, `/api/v1/namespaces/${ns}/pods?watch=true&resourceVersion=${ev.object.metadata.resourceVersion}`);
    const evs = await w2.waitFor(1);
    expect(evs.map((e) => `${e.type}:${e.object.metadata.name}`)).toEqual(['ADDED:b']);
    w2.close();
  });

  it('label selector: an object leaving the selection is DELETED for the watcher', async () => {
    const ns = await freshNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a', { metadata: { labels: { app: 'x' } } }) });
    const w = await watch(cp, `/api/v1/namespaces/${ns}/pods?watch=true&labelSelector=app%3Dx`);
    await w.waitFor(1);
    await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/a`, { body: { metadata: { labels: { app: 'y' } } }, contentType: 'application/merge-patch+json' });
    const evs = await w.waitFor(2);
    expect(evs[1].type).toBe('DELETED');
    w.close();
  });

  it('a watch on one object follows only it (fieldSelector metadata.name)', async () => {
    const ns = await freshNs();
    const w = await watch(cp, `/api/v1/namespaces/${ns}/pods?watch=true&fieldSelector=metadata.name%3Db`);
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('a') });
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('b') });
    const evs = await w.waitFor(1);
    expect(evs.map((e) => e.object.metadata.name)).toEqual(['b']);
    w.close();
  });
});
