import type { Pod, PodStatus } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { PodStatusWriter, sameJson } from '../../../src/pods/status-writer.js';
import { MemPodStatusApi } from '../../fakes/pod-status.js';

const pod = (uid: string, extra: Partial<Pod['metadata']> = {}, phase?: string): Pod => ({
  metadata: { name: `p-${uid}`, namespace: 'default', uid, ...extra },
  spec: { nodeName: 'n1', containers: [{ name: 'app', image: 'busybox' }] },
  ...(phase ? { status: { phase } } : {}),
});

function setup() {
  const api = new MemPodStatusApi();
  const statuses = new Map<string, PodStatus>();
  const active = new Set<string>();
  const w = new PodStatusWriter({ api, pods: { statusOf: (p) => statuses.get(p.metadata!.uid!), active: (p) => active.has(p.metadata!.uid!) }, logger: silentLogger() });
  /** The API's pods, as the writer is told of them (the reflector's view) and as stored in the API (where it writes). */
  const setApiPods = (pods: Pod[]) => {
    for (const p of pods) if (!api.objects.pod(p.metadata!.namespace!, p.metadata!.name!)) api.objects.createPod(p);
    w.setApiPods(pods);
  };
  return { api, statuses, active, w, setApiPods };
}

const running: PodStatus = { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }], containerStatuses: [{ name: 'app', ready: true, restartCount: 0, image: 'busybox', imageID: '' }] };

describe('PodStatusWriter', () => {
  it('writes a pod status once, again only when it changes, with the UID', async () => {
    const { api, statuses, w, setApiPods } = setup();
    setApiPods([pod('u1')]);
    await w.syncOnce();
    expect(api.patches).toEqual([]); // no status computed yet: nothing to say
    statuses.set('u1', { phase: 'Pending' });
    await w.syncOnce();
    await w.syncOnce();
    expect(api.patches).toEqual([{ name: 'p-u1', uid: 'u1', status: { phase: 'Pending' } }]);
    statuses.set('u1', running);
    await w.syncOnce();
    expect(api.patches).toHaveLength(2);
    expect(api.patches[1]!.status).toEqual(running);
  });

  it('clears a top-level field it wrote before and no longer has', async () => {
    const { api, statuses, w, setApiPods } = setup();
    setApiPods([pod('u1')]);
    statuses.set('u1', { phase: 'Pending', reason: 'SyncError', message: 'runtime down' });
    await w.syncOnce();
    statuses.set('u1', running);
    await w.syncOnce();
    expect(api.patches[1]!.status).toEqual({ ...running, reason: null, message: null });
  });

  it('never writes over a terminal phase in the API', async () => {
    const { api, statuses, w, setApiPods } = setup();
    setApiPods([pod('u1', {}, 'Succeeded'), pod('u2', {}, 'Failed')]);
    statuses.set('u1', running);
    statuses.set('u2', running);
    await w.syncOnce();
    expect(api.patches).toEqual([]);
  });

  it('retries a failed write on the next turn; a pod gone (404) is not retried', async () => {
    const { api, statuses, w, setApiPods } = setup();
    setApiPods([pod('u1')]);
    statuses.set('u1', running);
    api.fail = new NodeletError('UNAVAILABLE', 'connection refused');
    await w.syncOnce();
    api.fail = undefined;
    await w.syncOnce();
    expect(api.patches).toHaveLength(1);
    statuses.set('u1', { phase: 'Pending' });
    api.fail = new NodeletError('NOT_FOUND', 'pods "p-u1" not found');
    await w.syncOnce();
    api.fail = undefined;
    await w.syncOnce();
    expect(api.patches).toHaveLength(1);
  });

  it('deletes a pod being deleted once the manager has removed it from the runtime, once', async () => {
    const { api, active, w, setApiPods } = setup();
    active.add('u1');
    setApiPods([pod('u1', { deletionTimestamp: '2026-11-23T00:00:00Z' })]);
    await w.syncOnce();
    expect(api.deletes).toEqual([]); // containers still being stopped
    active.delete('u1');
    await w.syncOnce();
    await w.syncOnce();
    expect(api.deletes).toEqual([{ name: 'p-u1', uid: 'u1' }]);
  });

  it('a deletion refused because the name holds another pod (UID precondition, 409) is not retried', async () => {
    const { api, w, setApiPods } = setup();
    setApiPods([pod('u1', { deletionTimestamp: '2026-11-23T00:00:00Z' })]);
    api.fail = new NodeletError('CONFLICT', 'Precondition failed: UID in precondition: u1, UID in object meta: u2');
    await w.syncOnce();
    api.fail = undefined;
    await w.syncOnce();
    expect(api.deletes).toEqual([]);
  });

  it('forgets a pod that left the API: the same UID back later is written again', async () => {
    const { api, statuses, w, setApiPods } = setup();
    statuses.set('u1', running);
    setApiPods([pod('u1')]);
    await w.syncOnce();
    setApiPods([]);
    await w.syncOnce();
    setApiPods([pod('u1')]);
    await w.syncOnce();
    expect(api.patches).toHaveLength(2);
  });
});

describe('sameJson', () => {
  it('is JSON equality, key order aside, undefined members absent', () => {
    const a = { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }], podIP: undefined, n: 1 };
    expect(sameJson(a, JSON.parse(JSON.stringify(a)))).toBe(true);
    expect(sameJson({ n: 1, phase: 'Running', conditions: [{ status: 'True', type: 'Ready' }] }, JSON.parse(JSON.stringify(a)))).toBe(true);
    expect(sameJson({ ...a, n: 2 }, JSON.parse(JSON.stringify(a)))).toBe(false);
    expect(sameJson({ ...a, extra: 'x' }, JSON.parse(JSON.stringify(a)))).toBe(false);
    expect(sameJson({ ...a, conditions: [] }, JSON.parse(JSON.stringify(a)))).toBe(false);
    expect(sameJson({ phase: 'Running' }, { phase: 'Running', n: null })).toBe(false);
    expect(sameJson([1, undefined], [1, null])).toBe(true);
    expect(sameJson({ a: [] }, { a: {} })).toBe(false);
  });
});
