/**
 * nodelet's control-plane client against the test control plane (test/control-plane/server.ts):
 * kubeconfigs with a client certificate and with a token, CRUD, 409 and retryOnConflict,
 * chunked lists, server-side apply as `nodelet`, and the reflector's resume after a dropped
 * watch and relist after 410. Every get and list here is answered gzip-compressed by the
 * server (the client always sends Accept-Encoding: gzip), so decompression is exercised too.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Node, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ControlPlaneClient, NAMESPACES, NODES, PODS, type KubeObject, type WatchOptions } from '../../../src/controlplane/client.js';
import { retryOnConflict } from '../../../src/controlplane/conflict.js';
import { loadKubeconfig } from '../../../src/controlplane/kubeconfig.js';
import { Reflector, objectKey, type ReflectorClient, type ReflectorEvent } from '../../../src/controlplane/reflector.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { VirtualClock } from '../../helpers/clock.js';

let cp: ControlPlane;
let dir: string;
let client: ControlPlaneClient;
let nsCount = 0;

beforeAll(async () => {
  cp = await startControlPlane({ bookmarkIntervalMs: 50 });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-cp-client-'));
  // An administrator's certificate: this file tests the client on every verb and resource, which
  // the Node authorizer would refuse a node (issue 27; node-authorizer.test.ts covers a node's rights).
  cp.writeKubeconfig(path.join(dir, 'cert.kubeconfig'), { user: 'admin', groups: ['system:masters'] });
  client = new ControlPlaneClient({ access: loadKubeconfig(path.join(dir, 'cert.kubeconfig')), timeoutMs: 10_000 });
});

afterAll(async () => {
  await client?.close();
  await cp?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function freshNamespace(): Promise<string> {
  const name = `t${++nsCount}-${process.pid}`;
  await client.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
  return name;
}

const pod = (namespace: string, name: string, labels: Record<string, string> = {}): Pod => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace, labels },
  spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'busybox' }] },
});

/** Waits (bounded, polling every 10 ms) for a condition driven by real network events. */
async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function crudRoundTrip(c: ControlPlaneClient): Promise<void> {
  const ns = await freshNamespace();
  const created = await c.create<Pod>(PODS, pod(ns, 'p1', { a: '1' }));
  expect(created.metadata?.uid).toBeTruthy();
  const got = await c.get<Pod>(PODS, { namespace: ns, name: 'p1' });
  expect(got.metadata?.resourceVersion).toBe(created.metadata?.resourceVersion);
  got.metadata!.labels = { a: '2' };
  const updated = await c.update<Pod>(PODS, got);
  expect(updated.metadata?.labels).toEqual({ a: '2' });
  const patched = await c.mergePatch<Pod>(PODS, { namespace: ns, name: 'p1' }, { metadata: { labels: { a: null, b: '3' } } });
  expect(patched.metadata?.labels).toEqual({ b: '3' });
  // Without fieldManager, the server names the manager after the User-Agent up to its "/".
  expect(patched.metadata?.managedFields?.map((m) => [m.manager, m.operation])).toContainEqual(['nodelet', 'Update']);
  await c.delete(PODS, { namespace: ns, name: 'p1' }, { body: { gracePeriodSeconds: 0 } });
  await expect(c.get(PODS, { namespace: ns, name: 'p1' })).rejects.toMatchObject({ code: 'NOT_FOUND', details: { status: 404, reason: 'NotFound' } });
  await expect(c.create(PODS, pod(ns, 'p2')).then(() => c.create(PODS, pod(ns, 'p2')))).rejects.toMatchObject({ code: 'ALREADY_EXISTS', details: { reason: 'AlreadyExists' } });
}

describe('ControlPlaneClient', () => {
  it('a too-large resourceVersion is UNAVAILABLE with Retry-After; list consistency options reach the server', async () => {
    const quick = await startControlPlane({ tooLargeResourceVersionWaitMs: 20 });
    const kc = path.join(dir, 'quick.kubeconfig');
    quick.writeKubeconfig(kc, { user: 'admin', groups: ['system:masters'] });
    const c = new ControlPlaneClient({ access: loadKubeconfig(kc) });
    try {
      const e = (await c.get(NAMESPACES, { name: 'default' }, { resourceVersion: '999999' }).then(() => undefined, (x: unknown) => x)) as NodeletError;
      expect(e).toMatchObject({ code: 'UNAVAILABLE', details: { status: 504 } });
      expect(e.message).toContain('Too large resource version');
      expect(typeof e.details.retryAfterSeconds).toBe('number');

      const first = await c.list(NAMESPACES);
      const exact = await c.list(NAMESPACES, { resourceVersion: first.metadata.resourceVersion, resourceVersionMatch: 'Exact' });
      expect(exact.metadata.resourceVersion).toBe(first.metadata.resourceVersion);
      const any = await c.list(NAMESPACES, { resourceVersion: '0', resourceVersionMatch: 'NotOlderThan' });
      expect(any.items.map((n) => n.metadata!.name).sort()).toEqual(first.items.map((n) => n.metadata!.name).sort());
      await c.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'later' } });
      quick.compactHistory();
      await expect(c.list(NAMESPACES, { resourceVersion: first.metadata.resourceVersion, resourceVersionMatch: 'Exact' })).rejects.toMatchObject({ code: 'GONE', details: { status: 410 } });
      await expect(c.list(NAMESPACES, { resourceVersionMatch: 'Exact' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    } finally {
      await c.close();
      await quick.close();
    }
  });

  it('writes the status subresource with update and with apply', async () => {
    const node: Node = { apiVersion: 'v1', kind: 'Node', metadata: { name: `node-${process.pid}` }, spec: {} };
    const created = await client.create<Node>(NODES, node);
    const withStatus: Node = { ...created, status: { conditions: [{ type: 'Ready', status: 'False', reason: 'KubeletNotReady', message: 'starting' }] } };
    const put = await client.update<Node>(NODES, withStatus, { subresource: 'status' });
    expect(put.status?.conditions?.[0]?.status).toBe('False');
    // Strategic merge patch: conditions merge by type, so a second condition joins Ready.
    const smp = await client.patch<Node>(NODES, { name: node.metadata!.name!, subresource: 'status' }, { status: { conditions: [{ type: 'MemoryPressure', status: 'False', reason: 'KubeletHasSufficientMemory' }] } }, { type: 'strategic', fieldManager: 'nodelet' });
    expect(smp.status?.conditions?.map((c) => c.type).sort()).toEqual(['MemoryPressure', 'Ready']);
    // A JSON patch whose test fails changes nothing and is rejected.
    await expect(client.patch(NODES, { name: node.metadata!.name! }, [{ op: 'test', path: '/metadata/name', value: 'other' }], { type: 'json' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', details: { status: 422, reason: 'Invalid' } });
    const applied = await client.apply<Node>(NODES, { apiVersion: 'v1', kind: 'Node', metadata: { name: node.metadata!.name! }, status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'kubelet is posting ready status' }] } } as KubeObject, { subresource: 'status' });
    expect(applied.status?.conditions?.find((c) => c.type === 'Ready')).toMatchObject({ status: 'True', reason: 'KubeletReady' });
    expect(applied.metadata?.managedFields?.find((m) => m.manager === 'nodelet' && m.operation === 'Apply')?.subresource).toBe('status');
  });

  it('CRUD round trip with a client-certificate kubeconfig', async () => {
    await crudRoundTrip(client);
  });

  it('CRUD round trip with a token kubeconfig; an unknown token is UNAUTHENTICATED', async () => {
    cp.addToken('tok-1', 'alice', ['system:masters']);
    const file = path.join(dir, 'token.kubeconfig');
    cp.writeKubeconfig(file, { token: 'tok-1' });
    const access = loadKubeconfig(file);
    expect(access.token).toBe('tok-1');
    const tc = new ControlPlaneClient({ access });
    const bad = new ControlPlaneClient({ access: { ...access, token: 'wrong' } });
    try {
      await crudRoundTrip(tc);
      await expect(bad.get(NAMESPACES, { name: 'default' })).rejects.toMatchObject({ code: 'UNAUTHENTICATED', details: { status: 401 } });
    } finally {
      await tc.close();
      await bad.close();
    }
  });

  it('a closed port is UNAVAILABLE; a deadline is DEADLINE_EXCEEDED; an abort is CANCELLED', async () => {
    const other = await startControlPlane();
    const access = { ...loadKubeconfig(path.join(dir, 'cert.kubeconfig')), server: other.url };
    await other.close();
    const c = new ControlPlaneClient({ access });
    try {
      await expect(c.get(NAMESPACES, { name: 'default' })).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    } finally {
      await c.close();
    }
    // A get at a resourceVersion far ahead makes the server wait (spec: Too large resource version).
    await expect(client.get(NAMESPACES, { name: 'default' }, { resourceVersion: '999999999', timeoutMs: 100 })).rejects.toMatchObject({ code: 'DEADLINE_EXCEEDED' });
    const ac = new AbortController();
    const p = client.get(NAMESPACES, { name: 'default' }, { resourceVersion: '999999999', signal: ac.signal });
    ac.abort();
    await expect(p).rejects.toMatchObject({ code: 'CANCELLED' });
  });

  it('a stale update is CONFLICT; retryOnConflict re-reads and succeeds', async () => {
    const ns = await freshNamespace();
    await client.create(PODS, pod(ns, 'p'));
    const stale = await client.get<Pod>(PODS, { namespace: ns, name: 'p' });
    await client.mergePatch(PODS, { namespace: ns, name: 'p' }, { metadata: { labels: { other: 'writer' } } });
    stale.metadata!.labels = { mine: 'x' };
    const err = await client.update(PODS, stale).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NodeletError);
    expect(err).toMatchObject({ code: 'CONFLICT', details: { status: 409, reason: 'Conflict' } });

    const attempts: number[] = [];
    const final = await retryOnConflict(async (n) => {
      attempts.push(n);
      const cur = await client.get<Pod>(PODS, { namespace: ns, name: 'p' });
      // Someone else writes between our read and our write, once.
      if (n === 1) await client.mergePatch(PODS, { namespace: ns, name: 'p' }, { metadata: { labels: { third: 'writer' } } });
      cur.metadata!.labels = { ...cur.metadata!.labels, mine: 'x' };
      return client.update<Pod>(PODS, cur);
    });
    expect(attempts).toEqual([1, 2]);
    expect(final.metadata?.labels).toEqual({ other: 'writer', third: 'writer', mine: 'x' });
  });

  it('a chunked list with a small limit gives every item at one resourceVersion', async () => {
    const ns = await freshNamespace();
    const names = Array.from({ length: 7 }, (_, i) => `p${i}`);
    for (const n of names) await client.create(PODS, pod(ns, n, { app: 'chunk' }));
    const first = await client.list(PODS, { namespace: ns, limit: 3 });
    expect(first.items).toHaveLength(3);
    expect(first.metadata.continue).toBeTruthy();
    expect(first.metadata.remainingItemCount).toBe(4);
    // A write between chunks is not in this snapshot.
    await client.create(PODS, pod(ns, 'late', { app: 'chunk' }));
    const pages = [first];
    while (pages.at(-1)!.metadata.continue) pages.push(await client.list(PODS, { namespace: ns, limit: 3, continue: pages.at(-1)!.metadata.continue! }));
    expect(pages.map((p) => p.items.length)).toEqual([3, 3, 1]);
    expect(new Set(pages.map((p) => p.metadata.resourceVersion)).size).toBe(1);
    expect(pages.flatMap((p) => p.items.map((i) => i.metadata!.name)).sort()).toEqual(names);
    const all = await client.listAll(PODS, { namespace: ns, limit: 2, labelSelector: 'app=chunk' });
    expect(all.items.map((i) => i.metadata!.name).sort()).toEqual([...names, 'late'].sort());
    const one = await client.listAll(PODS, { namespace: ns, fieldSelector: 'metadata.name=p3' });
    expect(one.items.map((i) => i.metadata!.name)).toEqual(['p3']);
  });

  it('server-side apply as fieldManager nodelet, forcing the fields nodelet owns', async () => {
    const ns = await freshNamespace();
    const intent = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'sa', namespace: ns, labels: { owner: 'nodelet' } }, spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'busybox' }] } };
    const created = await client.apply<Pod>(PODS, intent);
    expect(created.metadata?.managedFields?.map((m) => [m.manager, m.operation])).toEqual([['nodelet', 'Apply']]);
    // Another manager takes the label without force: conflict naming nodelet; with force it wins.
    const other = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'sa', namespace: ns, labels: { owner: 'other' } } };
    const conflict = await client.apply(PODS, other, { fieldManager: 'other', force: false }).catch((e: unknown) => e as NodeletError);
    expect(conflict).toMatchObject({ code: 'CONFLICT', details: { status: 409 } });
    expect(JSON.stringify((conflict as NodeletError).details.causes)).toContain('nodelet');
    await client.apply(PODS, other, { fieldManager: 'other', force: true });
    // nodelet applies again (force=true by default) and takes its field back.
    const back = await client.apply<Pod>(PODS, intent);
    expect(back.metadata?.labels).toEqual({ owner: 'nodelet' });
    expect(back.metadata?.managedFields?.find((m) => m.manager === 'nodelet')?.operation).toBe('Apply');
  });
});

/** The real client, with a gate on new watches: closing it is a network partition for the reflector. */
class GatedClient implements ReflectorClient {
  #open: Promise<void> = Promise.resolve();
  #release: () => void = () => undefined;
  watchFrom: string[] = [];
  constructor(private readonly c: ControlPlaneClient) {}
  close(): void {
    this.#open = new Promise((r) => (this.#release = r));
  }
  open(): void {
    this.#release();
  }
  listAll: ControlPlaneClient['listAll'] = (t, o) => this.c.listAll(t, o);
  watch: ControlPlaneClient['watch'] = async (t, o?: WatchOptions) => {
    await this.#open;
    this.watchFrom.push(o?.resourceVersion ?? '');
    return this.c.watch(t, o);
  };
}

/** A consumer that applies events to its own map and records what it was told. */
function consumer() {
  const state = new Map<string, KubeObject>();
  const delivered: string[] = [];
  const events: Array<ReflectorEvent<KubeObject>> = [];
  return {
    state,
    delivered,
    events,
    onEvent(e: ReflectorEvent<KubeObject>) {
      events.push(e);
      if (e.type === 'replace') {
        state.clear();
        for (const i of e.items) state.set(objectKey(i), i);
        return;
      }
      delivered.push(`${e.type}:${e.object.metadata!.name}@${e.object.metadata!.resourceVersion}`);
      if (e.type === 'delete') state.delete(objectKey(e.object));
      else state.set(objectKey(e.object), e.object);
    },
  };
}

const summary = (objs: Iterable<KubeObject>) => [...objs].map((o) => `${o.metadata!.name}@${o.metadata!.resourceVersion}`).sort();

/**
 * A reflector on pods a, b, c of a fresh namespace, through a GatedClient, chunks of 2.
 * Its backoff sleeps end on the next macrotask (autoAdvance): it retries at once, the test
 * never waits on a backoff timer.
 */
async function startedReflector() {
  const ns = await freshNamespace();
  const gated = new GatedClient(client);
  const c = consumer();
  const clock = new VirtualClock(Date.now(), { autoAdvance: true });
  const r = new Reflector({ client: gated, type: PODS, namespace: ns, limit: 2, clock, idleTimeoutMs: 0, logger: silentLogger(), onEvent: c.onEvent });
  for (const n of ['a', 'b', 'c']) await client.create(PODS, pod(ns, n));
  r.start();
  return { ns, gated, c, r };
}

describe('Reflector against the control plane', () => {
  it('resumes after the server drops the watch, losing and duplicating nothing written during the gap', async () => {
    const { ns, gated, c, r } = await startedReflector();
    try {
      await r.waitForSync();
      expect(c.events[0]).toMatchObject({ type: 'replace' });
      expect(summary(c.state.values())).toEqual(summary((await client.listAll(PODS, { namespace: ns })).items));
      const live = await client.create<KubeObject>(PODS, pod(ns, 'd'));
      await until(() => c.state.has(`${ns}/d`), 'the live add');

      gated.close();
      cp.dropWatches();
      await until(() => cp.openWatches === 0, 'the watch to drop');
      const gap: string[] = [];
      const u1 = await client.mergePatch<KubeObject>(PODS, { namespace: ns, name: 'a' }, { metadata: { labels: { n: '1' } } });
      const u2 = await client.mergePatch<KubeObject>(PODS, { namespace: ns, name: 'a' }, { metadata: { labels: { n: '2' } } });
      const e1 = await client.create<KubeObject>(PODS, pod(ns, 'e'));
      await client.delete(PODS, { namespace: ns, name: 'b' }, { body: { gracePeriodSeconds: 0 } });
      gap.push(`update:a@${u1.metadata!.resourceVersion}`, `update:a@${u2.metadata!.resourceVersion}`, `add:e@${e1.metadata!.resourceVersion}`);
      gated.open();

      await until(() => !c.state.has(`${ns}/b`) && c.state.has(`${ns}/e`), 'the gap writes');
      const final = await client.listAll(PODS, { namespace: ns });
      await until(() => JSON.stringify(summary(c.state.values())) === JSON.stringify(summary(final.items)), 'the consumer to match the server');
      expect(r.lists).toBe(1); // resumed, not relisted
      for (const g of gap) expect(c.delivered.filter((d) => d === g)).toEqual([g]);
      expect(c.delivered.filter((d) => d.startsWith('delete:b@'))).toHaveLength(1);
      expect(c.delivered).toContain(`add:d@${live.metadata!.resourceVersion}`);
      expect(new Set(c.delivered).size).toBe(c.delivered.length);
      expect(gated.watchFrom.length).toBeGreaterThanOrEqual(2);
      expect(r.healthy()).toBe(true);
      expect(r.lastSyncTime).toBeGreaterThan(0);
    } finally {
      gated.open();
      await r.stop();
    }
  });

  it('after compaction a dropped watch gets 410, relists, and the replace is the right final state', async () => {
    const { ns, gated, c, r } = await startedReflector();
    try {
      await r.waitForSync();
      gated.close();
      cp.dropWatches();
      await until(() => cp.openWatches === 0, 'the watch to drop');
      await client.delete(PODS, { namespace: ns, name: 'a' }, { body: { gracePeriodSeconds: 0 } });
      await client.mergePatch(PODS, { namespace: ns, name: 'b' }, { metadata: { labels: { gap: 'yes' } } });
      await client.create(PODS, pod(ns, 'd'));
      cp.compactHistory();
      const eventsBefore = c.events.length;
      gated.open();

      await until(() => r.lists === 2, 'the relist');
      const final = await client.listAll(PODS, { namespace: ns });
      const replace = c.events.slice(eventsBefore).find((e) => e.type === 'replace');
      expect(replace).toBeDefined();
      expect(summary((replace as { items: KubeObject[] }).items)).toEqual(summary(final.items));
      expect(summary(c.state.values())).toEqual(summary(final.items));
      expect(c.state.has(`${ns}/a`)).toBe(false);
      expect((c.state.get(`${ns}/b`) as Pod | undefined)?.metadata?.labels).toEqual({ gap: 'yes' });
      // The watch after the gap started from the old version; the one after the relist from the new list's.
      const newRv = (replace as { resourceVersion: string }).resourceVersion;
      expect(gated.watchFrom.at(-1)).toBe(newRv);
      expect(gated.watchFrom.at(-2)).not.toBe(newRv);

      // The reflector keeps going after the relist.
      await client.create(PODS, pod(ns, 'after'));
      await until(() => c.state.has(`${ns}/after`), 'an add after the relist');
      expect(r.healthy()).toBe(true);
    } finally {
      gated.open();
      await r.stop();
    }
  });
});
