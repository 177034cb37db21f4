import type { Pod } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { MirrorPods, mirrorOwnerUid, mirrorPodOf, planMirrorPods } from '../../../src/pods/status/mirror.js';
import { MemMirrorPodApi } from '../../fakes/mirror-pods.js';
import { ManualClock } from '../../helpers/clock.js';

const staticPod = (name: string, hash: string): Pod => ({
  metadata: {
    name: `${name}-n1`,
    namespace: 'kube-system',
    uid: hash,
    labels: { tier: 'control-plane' },
    annotations: { 'kubernetes.io/config.source': 'file', 'kubernetes.io/config.hash': hash, 'kubernetes.io/config.seen': '2026-11-23T00:00:00Z' },
  },
  spec: { nodeName: 'n1', hostNetwork: true, containers: [{ name: 'app', image: 'busybox' }] },
});
const node = { name: 'n1', uid: 'node-uid' };
const mirror = (name: string, hash: string, uid: string, extra: Partial<NonNullable<Pod['metadata']>> = {}): Pod => {
  const m = mirrorPodOf(staticPod(name, hash), node);
  return { ...m, metadata: { ...m.metadata, uid, ...extra } };
};
const regular = (name: string): Pod => ({ metadata: { name: `${name}-n1`, namespace: 'kube-system', uid: 'r1' }, spec: { nodeName: 'n1', containers: [] } });

describe('mirrorPodOf', () => {
  it('is the static pod with the mirror annotation (its hash), owned by the Node, bound to it', () => {
    const m = mirrorPodOf(staticPod('etcd', 'h1'), node);
    expect(m.metadata).toEqual({
      name: 'etcd-n1',
      namespace: 'kube-system',
      labels: { tier: 'control-plane' },
      annotations: { 'kubernetes.io/config.source': 'file', 'kubernetes.io/config.hash': 'h1', 'kubernetes.io/config.seen': '2026-11-23T00:00:00Z', 'kubernetes.io/config.mirror': 'h1' },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'node-uid', controller: true }],
    });
    expect(m.metadata!.uid).toBeUndefined();
    expect(m.spec).toMatchObject({ nodeName: 'n1', containers: [{ name: 'app', image: 'busybox' }] });
  });
});

describe('planMirrorPods', () => {
  const cases: { name: string; statics: Pod[]; api: Pod[]; create: string[]; remove: [string, string][]; blocked: string[] }[] = [
    { name: 'a static pod without a mirror: create', statics: [staticPod('a', 'h1')], api: [], create: ['a-n1'], remove: [], blocked: [] },
    { name: 'the current mirror: nothing to do', statics: [staticPod('a', 'h1')], api: [mirror('a', 'h1', 'm1')], create: [], remove: [], blocked: [] },
    { name: 'a mirror of an older version of the file: delete (created again next turn)', statics: [staticPod('a', 'h2')], api: [mirror('a', 'h1', 'm1')], create: [], remove: [['m1', 'its static pod changed']], blocked: [] },
    { name: 'a mirror being deleted: delete it for good', statics: [staticPod('a', 'h1')], api: [mirror('a', 'h1', 'm1', { deletionTimestamp: '2026-11-23T00:00:00Z' })], create: [], remove: [['m1', 'it is being deleted']], blocked: [] },
    { name: 'an orphaned mirror: delete', statics: [], api: [mirror('a', 'h1', 'm1')], create: [], remove: [['m1', 'its static pod is gone']], blocked: [] },
    { name: 'the name held by a regular pod: left alone, reported', statics: [staticPod('a', 'h1')], api: [regular('a')], create: [], remove: [], blocked: ['a-n1'] },
    { name: 'regular pods of the node are none of its business', statics: [], api: [regular('b')], create: [], remove: [], blocked: [] },
    {
      name: 'a current mirror owned by an earlier Node of this name (registered again since): delete (created again with the Node\'s UID)',
      statics: [staticPod('a', 'h1')],
      api: [{ ...mirror('a', 'h1', 'm1'), metadata: { ...mirror('a', 'h1', 'm1').metadata, ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'old-node-uid', controller: true }] } }],
      create: [],
      remove: [['m1', "it is owned by an earlier Node of this name (uid old-node-uid; the Node's uid is now node-uid)"]],
      blocked: [],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const plan = planMirrorPods(c.statics, c.api, 'node-uid');
      expect(plan.create.map((p) => p.metadata!.name)).toEqual(c.create);
      expect(plan.remove.map((r) => [r.pod.metadata!.uid, r.why])).toEqual(c.remove);
      expect(plan.blocked.map((b) => b.pod.metadata!.name)).toEqual(c.blocked);
    });
  }
});

describe('MirrorPods', () => {
  it('follows the Node\'s UID: a Node deleted and registered again gets its mirror pods deleted and created again, owned by the new Node', async () => {
    const api = new MemMirrorPodApi();
    const clock = new ManualClock();
    const first = api.objects.addNode('n1', 'node-uid-1');
    const logs: string[] = [];
    const logger = { ...silentLogger(), info: (_o: unknown, msg: string) => logs.push(msg) } as never;
    const m = new MirrorPods({ api, nodeName: 'n1', logger, clock });
    // The watch of this node's pods: what the API holds now.
    const watch = () => m.setApiPods([...api.objects.pods.values()]);
    m.setStaticPods([staticPod('a', 'h1')]);
    watch();
    await m.syncOnce();
    watch();
    await m.syncOnce();
    const m1 = api.objects.pod('kube-system', 'a-n1')!;
    expect(mirrorOwnerUid(m1)).toBe(first);
    // The Node is deleted and the node status loop registers it again: a new UID. Nothing else changes.
    api.objects.nodes.delete('n1');
    const second = api.objects.addNode('n1', 'node-uid-2');
    clock.t += 5_000;
    await m.syncOnce();
    expect(api.deleted).toEqual([]);
    // Within nodeCheckMs (10 s) of the last look: the stale mirror is deleted (UID precondition) ...
    clock.t += 5_000;
    await m.syncOnce();
    expect(api.deleted).toEqual([m1.metadata!.uid]);
    expect(logs).toContain("mirror pod deleted: it is owned by an earlier Node of this name (uid node-uid-1; the Node's uid is now node-uid-2)");
    // ... and, once the watch shows it gone, created again owned by the Node as it is now.
    watch();
    await m.syncOnce();
    const m2 = api.objects.pod('kube-system', 'a-n1')!;
    expect(m2.metadata!.uid).not.toBe(m1.metadata!.uid);
    expect(m2.metadata!.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: second, controller: true }]);
    watch();
    clock.t += 20_000;
    await m.syncOnce();
    expect(api.deleted).toHaveLength(1);
  });

  it('a mirror pod created again after the Node was registered again (the garbage collector deleted the old one) is owned by the new Node, not a remembered UID', async () => {
    const api = new MemMirrorPodApi();
    const clock = new ManualClock();
    api.objects.addNode('n1', 'node-uid-1');
    const m = new MirrorPods({ api, nodeName: 'n1', logger: silentLogger(), clock });
    m.setStaticPods([staticPod('a', 'h1')]);
    m.setApiPods([]);
    await m.syncOnce();
    expect(api.created.map((p) => mirrorOwnerUid(p))).toEqual(['node-uid-1']);
    // A second later: Node registered again, the old mirror collected (its owner is gone); the watch shows it gone.
    api.objects.nodes.delete('n1');
    api.objects.addNode('n1', 'node-uid-2');
    api.objects.pods.clear();
    clock.t += 1_000;
    m.setApiPods([]);
    await m.syncOnce();
    expect(api.created.map((p) => mirrorOwnerUid(p))).toEqual(['node-uid-1', 'node-uid-2']);
  });

  it('no answer about the Node: no mirror pod created with a remembered UID; created once the Node can be read', async () => {
    const api = new MemMirrorPodApi();
    const clock = new ManualClock();
    api.objects.addNode('n1', 'node-uid-1');
    let down = false;
    const nodeUid = api.nodeUid.bind(api);
    api.nodeUid = async (name) => {
      if (down) throw new NodeletError('UNAVAILABLE', 'connection refused');
      return nodeUid(name);
    };
    const m = new MirrorPods({ api, nodeName: 'n1', logger: silentLogger(), clock });
    m.setStaticPods([staticPod('a', 'h1')]);
    m.setApiPods([]);
    await m.syncOnce();
    api.objects.pods.clear();
    api.objects.nodes.delete('n1');
    api.objects.addNode('n1', 'node-uid-2');
    down = true;
    m.setApiPods([]);
    clock.t += 1_000;
    await m.syncOnce();
    expect(api.created.map((p) => mirrorOwnerUid(p))).toEqual(['node-uid-1']);
    down = false;
    clock.t += 1_000;
    await m.syncOnce();
    expect(api.created.map((p) => mirrorOwnerUid(p))).toEqual(['node-uid-1', 'node-uid-2']);
  });

  it('does nothing before the first API set, waits for the Node to exist, then creates the mirror', async () => {
    const api = new MemMirrorPodApi();
    const m = new MirrorPods({ api, nodeName: 'n1', logger: silentLogger() });
    m.setStaticPods([staticPod('a', 'h1')]);
    await m.syncOnce();
    m.setApiPods([]);
    await m.syncOnce();
    expect(api.created).toEqual([]);
    api.objects.addNode('n1', 'node-uid');
    await m.syncOnce();
    expect(api.created.map((p) => [p.metadata!.name, p.metadata!.ownerReferences![0]!.uid])).toEqual([['a-n1', 'node-uid']]);
  });

  it('an AlreadyExists (created by an earlier turn, not watched yet) is not an error; an outdated mirror is deleted', async () => {
    const api = new MemMirrorPodApi();
    api.objects.addNode('n1', 'node-uid');
    // In the API: the outdated mirror of a, and the mirror of b an earlier turn created.
    api.objects.createPod(mirror('a', 'h1', 'm1'));
    api.objects.createPod(mirrorPodOf(staticPod('b', 'h3'), node));
    const warnings: string[] = [];
    const logger = { ...silentLogger(), warn: (_o: unknown, msg: string) => warnings.push(msg) } as never;
    const m = new MirrorPods({ api, nodeName: 'n1', logger });
    m.setStaticPods([staticPod('a', 'h2'), staticPod('b', 'h3')]);
    m.setApiPods([mirror('a', 'h1', 'm1')]);
    await m.syncOnce();
    expect(api.deleted).toEqual(['m1']);
    expect(warnings).toEqual([]);
  });
});
