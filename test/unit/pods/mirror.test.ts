import type { Pod } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log.js';
import { MirrorPods, mirrorPodOf, planMirrorPods } from '../../../src/pods/mirror.js';
import { MemMirrorPodApi } from '../../fakes/mirror-pods.js';

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
  ];
  for (const c of cases) {
    it(c.name, () => {
      const plan = planMirrorPods(c.statics, c.api);
      expect(plan.create.map((p) => p.metadata!.name)).toEqual(c.create);
      expect(plan.remove.map((r) => [r.pod.metadata!.uid, r.why])).toEqual(c.remove);
      expect(plan.blocked.map((b) => b.pod.metadata!.name)).toEqual(c.blocked);
    });
  }
});

describe('MirrorPods', () => {
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
