import type { Pod, PodStatus } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { PodStatusWriter, sameJson } from '../../../src/pods/status/status-writer.js';
import { MemPodStatusApi } from '../../fakes/pod-status.js';
import { settle, VirtualClock } from '../../helpers/clock.js';

const pod = (uid: string, extra: Partial<Pod['metadata']> = {}, phase?: string): Pod => ({
  metadata: { name: `p-${uid}`, namespace: 'default', uid, ...extra },
  spec: { nodeName: 'n1', containers: [{ name: 'app', image: 'busybox' }] },
  ...(phase ? { status: { phase } } : {}),
});

function setup(clock?: VirtualClock) {
  const api = new MemPodStatusApi();
  const statuses = new Map<string, PodStatus>();
  const active = new Set<string>();
  /** How many times the writer read a status (one per API pod per turn). */
  const reads = { n: 0 };
  const statusOf = (p: Pod) => {
    reads.n++;
    return statuses.get(p.metadata!.uid!);
  };
  const w = new PodStatusWriter({ api, pods: { statusOf, active: (p) => active.has(p.metadata!.uid!) }, logger: silentLogger(), ...(clock ? { clock } : {}) });
  /** The API's pods, as the writer is told of them (the reflector's view) and as stored in the API (where it writes). */
  const setApiPods = (pods: Pod[]) => {
    for (const p of pods) if (!api.objects.pod(p.metadata!.namespace!, p.metadata!.name!)) api.objects.createPod(p);
    w.setApiPods(pods);
  };
  return { api, statuses, active, w, setApiPods, reads };
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

  it('a status computed again equal (a new object) is not written; the next changed one is', async () => {
    const { api, statuses, w, setApiPods } = setup();
    setApiPods([pod('u1')]);
    statuses.set('u1', running);
    await w.syncOnce();
    statuses.set('u1', structuredClone(running)); // the manager's periodic sync: same content
    await w.syncOnce();
    await w.syncOnce();
    expect(api.patches).toHaveLength(1);
    statuses.set('u1', { ...structuredClone(running), conditions: [{ type: 'Ready', status: 'False' }] });
    await w.syncOnce();
    expect(api.patches).toHaveLength(2);
    expect(api.patches[1]!.status.conditions).toEqual([{ type: 'Ready', status: 'False' }]);
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

  it('writes a changed status as soon as the manager tells of it, without waiting for the period; several changes make one turn', async () => {
    const clock = new VirtualClock();
    const { api, statuses, w, setApiPods, reads } = setup(clock);
    setApiPods([pod('u1'), pod('u2')]);
    statuses.set('u1', { phase: 'Pending' });
    statuses.set('u2', { phase: 'Pending' });
    w.start();
    try {
      await clock.whenSleeping();
      await settle();
      expect(api.patches).toHaveLength(2); // the first turn, at once
      expect(clock.sleeps).toEqual([10_000]); // the kubelet's status manager resync period
      const t0 = clock.now();
      const readsBefore = reads.n;
      // Both pods' containers run: the manager tells of each change, in the same tick.
      statuses.set('u1', running);
      w.statusChanged();
      statuses.set('u2', running);
      w.statusChanged();
      w.statusChanged();
      await settle();
      await settle();
      expect(clock.now()).toBe(t0); // no virtual time went by
      expect(api.patches.slice(2).map((p) => [p.uid, p.status.phase])).toEqual([
        ['u1', 'Running'],
        ['u2', 'Running'],
      ]);
      expect(reads.n - readsBefore).toBe(2); // one turn: each pod read once
      expect(clock.sleeps).toEqual([10_000, 10_000]); // and it sleeps its period again
      // The period stays as the backstop: a change nobody told of is written within 10 s.
      statuses.set('u1', { phase: 'Succeeded' });
      await settle();
      expect(api.patches).toHaveLength(4);
      await clock.advance(9_999);
      expect(api.patches).toHaveLength(4);
      await clock.advance(1);
      expect(api.patches).toHaveLength(5);
      expect(api.patches[4]!.status.phase).toBe('Succeeded');
    } finally {
      await w.stop();
    }
  });

  it('a change told while a turn is writing makes one more turn right after it', async () => {
    const clock = new VirtualClock();
    const { api, statuses, w, setApiPods } = setup(clock);
    setApiPods([pod('u1')]);
    statuses.set('u1', { phase: 'Pending' });
    // The first write waits until the test lets it through.
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const patch = api.patchPodStatus.bind(api);
    api.patchPodStatus = async (...a) => {
      await gate;
      return patch(...a);
    };
    w.start();
    try {
      await settle();
      statuses.set('u1', running);
      w.statusChanged();
      release();
      await clock.whenSleeping();
      await settle();
      await settle();
      expect(clock.now()).toBe(Date.UTC(2026, 10, 23, 2, 0, 0));
      expect(api.patches.map((p) => p.status.phase)).toEqual(['Pending', 'Running']);
    } finally {
      await w.stop();
    }
  });

  it('a pod new in the API set, or newly being deleted, wakes a turn at once; the same set again does not', async () => {
    const clock = new VirtualClock();
    const { api, statuses, active, w, setApiPods, reads } = setup(clock);
    statuses.set('u1', running);
    statuses.set('u2', running);
    setApiPods([pod('u1')]);
    w.start();
    try {
      await clock.whenSleeping();
      await settle();
      expect(api.patches.map((p) => p.uid)).toEqual(['u1']);
      // The same pods again (a watch event of another field): no turn.
      const before = reads.n;
      setApiPods([pod('u1')]);
      await settle();
      expect(reads.n).toBe(before);
      // A new pod (a mirror pod just created): its status is written now, not in 10 s.
      setApiPods([pod('u1'), pod('u2')]);
      await settle();
      await settle();
      expect(api.patches.map((p) => p.uid)).toEqual(['u1', 'u2']);
      // u2 is being deleted and is already out of the runtime: deleted from the API now.
      active.delete('u2');
      setApiPods([pod('u1'), { ...pod('u2'), metadata: { ...pod('u2').metadata, deletionTimestamp: '2026-11-23T02:00:00Z' } }]);
      await settle();
      await settle();
      expect(api.deletes.map((d) => d.uid)).toEqual(['u2']);
      expect(clock.now()).toBe(Date.UTC(2026, 10, 23, 2, 0, 0)); // no virtual time went by
    } finally {
      await w.stop();
    }
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
    // Two statuses just computed (undefined members on either side) compare as their JSON does.
    expect(sameJson({ b: 1, started: undefined }, { b: 1, started: undefined })).toBe(true);
    expect(sameJson({ b: 1 }, { b: 1, started: undefined })).toBe(true);
    expect(sameJson([undefined], [null])).toBe(true);
    expect(sameJson({ b: 1 }, { b: 1, started: 'x' })).toBe(false);
  });
});
