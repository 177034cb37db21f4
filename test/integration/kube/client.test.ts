/**
 * nodelet's control-plane client against the test control plane (test/control-plane):
 * kubeconfigs with client certificates and tokens, CRUD, conflicts and their retry,
 * chunked lists, server-side apply, and the reflector's resume and relist.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { KubeClient, PODS, apply, resourcePath, retryOnConflict } from '../../../src/kube/client.js';
import { loadKubeconfig } from '../../../src/kube/kubeconfig.js';
import { Reflector } from '../../../src/kube/reflector.js';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { eventually, tempDir } from '../../helpers/nodelet.js';

let cp: ControlPlane;
let dir: string;
let client: KubeClient;

beforeAll(async () => {
  cp = await startControlPlane();
  dir = tempDir('nodelet-kube-');
  cp.writeKubeconfig(path.join(dir, 'cert.kubeconfig'), { user: 'system:node:n1', groups: ['system:nodes'] });
  client = new KubeClient({ access: loadKubeconfig(path.join(dir, 'cert.kubeconfig')) });
});

afterAll(async () => {
  await client?.close();
  await cp?.close();
});

const pod = (name: string, labels: Record<string, string> = {}): Pod => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default', labels },
  spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'busybox' }] },
});
const podPath = (name?: string) => resourcePath(PODS, { namespace: 'default', ...(name ? { name } : {}) });

describe('kubeconfig and requests', () => {
  it('CRUD with a client-certificate kubeconfig and with a token kubeconfig', async () => {
    const created = await client.do<Pod>('POST', podPath(), { body: pod('crud') });
    expect(created.metadata!.uid).toBeTruthy();
    cp.addToken('t-123', 'alice', ['ops']);
    cp.writeKubeconfig(path.join(dir, 'token.kubeconfig'), { token: 't-123' });
    const byToken = new KubeClient({ access: loadKubeconfig(path.join(dir, 'token.kubeconfig')) });
    try {
      const got = await byToken.do<Pod>('GET', podPath('crud'));
      expect(got.metadata!.uid).toBe(created.metadata!.uid);
      await byToken.do('DELETE', podPath('crud'));
      const err = await client.do('GET', podPath('crud')).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NodeletError);
      expect((err as NodeletError).code).toBe('NOT_FOUND');
    } finally {
      await byToken.close();
    }
  });

  it('no credentials: UNAUTHENTICATED; a bad kubeconfig names the file and field', async () => {
    const file = path.join(dir, 'none.kubeconfig');
    const kc = parse(fs.readFileSync(path.join(dir, 'cert.kubeconfig'), 'utf8'));
    kc.users[0].user = {};
    const doc = stringify(kc);
    fs.writeFileSync(file, doc);
    const anon = new KubeClient({ access: loadKubeconfig(file) });
    try {
      expect(((await anon.do('GET', podPath()).catch((e: unknown) => e)) as NodeletError).code).toBe('UNAUTHENTICATED');
    } finally {
      await anon.close();
    }
    const broken = path.join(dir, 'broken.kubeconfig');
    fs.writeFileSync(broken, doc.replace(/current-context: .*/, 'current-context: nope'));
    expect(() => loadKubeconfig(broken)).toThrow(new RegExp(`${broken}: contexts: no entry named "nope"`));
    const missingCa = path.join(dir, 'ca.kubeconfig');
    fs.writeFileSync(missingCa, fs.readFileSync(path.join(dir, 'cert.kubeconfig'), 'utf8').replace(/certificate-authority: .*/, 'certificate-authority: no-such-ca.crt'));
    expect(() => loadKubeconfig(missingCa)).toThrow(/clusters\[0\]\.cluster\.certificate-authority: cannot read .*no-such-ca\.crt/);
  });

  it('a stale update is CONFLICT, and retryOnConflict re-reads and succeeds', async () => {
    const p = await client.do<Pod>('POST', podPath(), { body: pod('stale') });
    await client.do('PUT', podPath('stale'), { body: { ...p, metadata: { ...p.metadata, labels: { by: 'someone-else' } } } });
    const err = (await client.do('PUT', podPath('stale'), { body: { ...p, metadata: { ...p.metadata, labels: { by: 'me' } } } }).catch((e: unknown) => e)) as NodeletError;
    expect(err.code).toBe('CONFLICT');
    let reads = 0;
    const done = await retryOnConflict(async () => {
      const cur = reads++ === 0 ? p : await client.do<Pod>('GET', podPath('stale'));
      return client.do<Pod>('PUT', podPath('stale'), { body: { ...cur, metadata: { ...cur.metadata, labels: { ...cur.metadata!.labels, by: 'me' } } } });
    });
    expect(reads).toBe(2);
    expect(done.metadata!.labels).toEqual({ by: 'me' });
  });

  it('server-side apply as field manager nodelet', async () => {
    await client.do('POST', podPath(), { body: pod('ssa') });
    const applied = await apply<Pod>(client, PODS, { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'ssa', namespace: 'default', labels: { owner: 'nodelet' } } } as never);
    expect(applied.metadata!.labels).toMatchObject({ owner: 'nodelet' });
    expect(applied.metadata!.managedFields!.some((m) => m.manager === 'nodelet' && m.operation === 'Apply')).toBe(true);
  });
});

describe('reflector', () => {
  it('lists in chunks and gives every item', async () => {
    for (let i = 0; i < 7; i++) await client.do('POST', podPath(), { body: pod(`chunk-${i}`, { set: 'chunk' }) });
    const r = new Reflector<Pod>({ client, type: PODS, namespace: 'default', labelSelector: 'set=chunk', limit: 2, logger: silentLogger() });
    const sets: string[][] = [];
    await r.start((items) => sets.push(items.map((p) => p.metadata!.name!).sort()));
    await r.stop();
    expect(sets[0]).toEqual([0, 1, 2, 3, 4, 5, 6].map((i) => `chunk-${i}`));
  });

  it('resumes after the server drops the watch, losing and duplicating nothing', async () => {
    const r = new Reflector<Pod>({ client, type: PODS, namespace: 'default', labelSelector: 'set=resume', logger: silentLogger() });
    let latest: string[] = [];
    let deliveries = 0;
    await r.start((items) => {
      deliveries++;
      latest = items.map((p) => `${p.metadata!.name}@${p.metadata!.labels!.v ?? ''}`).sort();
    });
    try {
      await client.do('POST', podPath(), { body: pod('r1', { set: 'resume', v: '1' }) });
      await eventually(() => latest.includes('r1@1'));
      cp.dropWatches();
      // Writes while no watch is open: the resumed watch must replay them once each.
      await client.do('POST', podPath(), { body: pod('r2', { set: 'resume', v: '1' }) });
      const r1 = await client.do<Pod>('GET', podPath('r1'));
      await client.do('PUT', podPath('r1'), { body: { ...r1, metadata: { ...r1.metadata, labels: { set: 'resume', v: '2' } } } });
      await eventually(() => latest.join() === 'r1@2,r2@1');
      const before = deliveries;
      await new Promise((res) => setTimeout(res, 300));
      expect(deliveries).toBe(before);
    } finally {
      await r.stop();
    }
  });

  it('410 after compaction: lists again, and the final state includes a deletion made in the gap', async () => {
    const r = new Reflector<Pod>({ client, type: PODS, namespace: 'default', labelSelector: 'set=gone', logger: silentLogger() });
    let latest: string[] = [];
    await client.do('POST', podPath(), { body: pod('g1', { set: 'gone' }) });
    await client.do('POST', podPath(), { body: pod('g2', { set: 'gone' }) });
    await r.start((items) => (latest = items.map((p) => p.metadata!.name!).sort()));
    try {
      expect(latest).toEqual(['g1', 'g2']);
      cp.dropWatches();
      await client.do('DELETE', podPath('g1'));
      await client.do('POST', podPath(), { body: pod('g3', { set: 'gone' }) });
      cp.compactHistory();
      await eventually(() => latest.join() === 'g2,g3', 15_000);
    } finally {
      await r.stop();
    }
  });
});
