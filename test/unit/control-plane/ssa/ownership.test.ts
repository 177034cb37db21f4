import { describe, expect, it } from 'vitest';
import { ApplyConflictError } from '../../../control-plane/ssa/index.js';
import { apply, at, body, conflictOf, edit, entries, owners, pod, update, type Obj } from './helpers.js';

const REPLICAS = { 'f:spec': { 'f:replicas': {} } };
const NODE_NAME = { 'f:spec': { 'f:nodeName': {} } };

/** Spec "Field ownership" table: one test per row. */
describe('field ownership table', () => {
  it('owned by A; apply by B with a different value, no force -> conflict error, state unchanged', () => {
    const a = apply(undefined, pod({ replicas: 1 }), 'mgr-a');
    const snapshot = structuredClone(a);
    const err = conflictOf(() => apply(a, pod({ replicas: 2 }), 'mgr-b', { now: at(5) }));
    expect(err).toBeInstanceOf(ApplyConflictError);
    expect(err.code).toBe('CONFLICT');
    expect(err.message).toBe('Apply failed with 1 conflict: conflict with "mgr-a": .spec.replicas');
    expect(err.conflicts).toEqual([{ field: '.spec.replicas', manager: 'mgr-a', operation: 'Apply', message: 'conflict with "mgr-a"' }]);
    expect(a).toEqual(snapshot);
  });

  it('owned by A; apply by B with force and a different value -> owned by B only', () => {
    const a = apply(undefined, pod({ replicas: 1, nodeName: 'n1' }), 'mgr-a');
    const b = apply(a, pod({ replicas: 2 }), 'mgr-b', { force: true, now: at(5) });
    expect(body(b)['spec']).toEqual({ replicas: 2, nodeName: 'n1' });
    expect(owners(b)).toEqual({ 'mgr-a/Apply': NODE_NAME, 'mgr-b/Apply': REPLICAS });
  });

  it('owned by A; apply by B with the same value -> owned by A and B', () => {
    const a = apply(undefined, pod({ replicas: 1 }), 'mgr-a');
    const b = apply(a, pod({ replicas: 1 }), 'mgr-b', { now: at(5) });
    expect(body(b)).toEqual(body(a));
    expect(owners(b)).toEqual({ 'mgr-a/Apply': REPLICAS, 'mgr-b/Apply': REPLICAS });
  });

  it('owned by A and B; apply by B omitting the field -> owned by A, value kept', () => {
    const ab = apply(apply(undefined, pod({ replicas: 1 }), 'mgr-a'), pod({ replicas: 1, nodeName: 'n1' }), 'mgr-b');
    const b = apply(ab, pod({ nodeName: 'n1' }), 'mgr-b', { now: at(5) });
    expect(body(b)['spec']).toEqual({ replicas: 1, nodeName: 'n1' });
    expect(owners(b)).toEqual({ 'mgr-a/Apply': REPLICAS, 'mgr-b/Apply': NODE_NAME });
  });

  it('owned by A only; apply by A omitting the field, no other owner -> field removed', () => {
    const a = apply(undefined, pod({ replicas: 1, nodeName: 'n1' }), 'mgr-a');
    const a2 = apply(a, pod({ nodeName: 'n1' }), 'mgr-a', { now: at(5) });
    expect(body(a2)['spec']).toEqual({ nodeName: 'n1' });
    expect(owners(a2)).toEqual({ 'mgr-a/Apply': NODE_NAME });
  });

  it.each<[string, (o: Obj) => Obj]>([
    ['owned by A', (o) => o],
    ['owned by A and B', (o) => apply(o, pod({ replicas: 1 }), 'mgr-b')],
  ])('%s; update or non-apply patch changing the value -> owned by the requester, no conflict', (_name, prepare) => {
    const live = prepare(apply(undefined, pod({ replicas: 1, nodeName: 'n1' }), 'mgr-a'));
    const u = update(live, edit(live, (c) => (c['spec']['replicas'] = 7)), 'kubectl-edit', { now: at(5) });
    expect(body(u)['spec']).toEqual({ replicas: 7, nodeName: 'n1' });
    expect(owners(u)).toEqual({ 'mgr-a/Apply': NODE_NAME, 'kubectl-edit/Update': REPLICAS });
  });
});

/** Spec "Server-side apply: ownership rules" 1-10. */
describe('ownership rules', () => {
  it('1: every field of a new object has owners, whether created by apply or by create', () => {
    const manifest = pod({ containers: [{ name: 'nginx', image: 'nginx:1' }] }, { labels: { app: 'web' } });
    const viaApply = apply(undefined, manifest, 'kubectl');
    expect(entries(viaApply)).toEqual([
      {
        manager: 'kubectl',
        operation: 'Apply',
        apiVersion: 'v1',
        time: '2024-05-01T10:00:00Z',
        fieldsType: 'FieldsV1',
        fieldsV1: {
          'f:metadata': { 'f:labels': { 'f:app': {} } },
          'f:spec': { 'f:containers': { 'k:{"name":"nginx"}': { '.': {}, 'f:image': {}, 'f:name': {} } } },
        },
      },
    ]);
    const viaCreate = update(undefined, manifest, 'kubectl-create');
    expect(owners(viaCreate)).toEqual({
      'kubectl-create/Update': {
        'f:metadata': { 'f:labels': { '.': {}, 'f:app': {} } },
        'f:spec': { 'f:containers': { '.': {}, 'k:{"name":"nginx"}': { '.': {}, 'f:image': {}, 'f:name': {} } } },
      },
    });
  });

  it('1: the last manager to assert a value owns it (apply, then update, then forced apply)', () => {
    const a = apply(undefined, pod({ replicas: 1 }), 'mgr-a');
    const u = update(a, edit(a, (c) => (c['spec']['replicas'] = 2)), 'editor', { now: at(1) });
    expect(owners(u)).toEqual({ 'editor/Update': REPLICAS });
    const f = apply(u, pod({ replicas: 3 }), 'mgr-a', { force: true, now: at(2) });
    expect(owners(f)).toEqual({ 'mgr-a/Apply': REPLICAS });
  });

  it('2: after a conflict the applier may omit the field: value stays, the applier owns none of it', () => {
    const a = apply(undefined, pod({ replicas: 1 }), 'mgr-a');
    conflictOf(() => apply(a, pod({ replicas: 2, nodeName: 'n1' }), 'mgr-b'));
    const b = apply(a, pod({ nodeName: 'n1' }), 'mgr-b', { now: at(1) });
    expect(body(b)['spec']).toEqual({ replicas: 1, nodeName: 'n1' });
    expect(owners(b)).toEqual({ 'mgr-a/Apply': REPLICAS, 'mgr-b/Apply': NODE_NAME });
  });

  it('3: shared owners: a third party changing the value conflicts with both; a co-owner conflicts with the other', () => {
    const ab = apply(apply(undefined, pod({ replicas: 1 }), 'mgr-a'), pod({ replicas: 1 }), 'mgr-b');
    const err = conflictOf(() => apply(ab, pod({ replicas: 2 }), 'mgr-c'));
    expect(err.conflicts.map((c) => [c.manager, c.field])).toEqual([
      ['mgr-a', '.spec.replicas'],
      ['mgr-b', '.spec.replicas'],
    ]);
    expect(err.message).toBe('Apply failed with 2 conflicts: conflicts with "mgr-a":\n- .spec.replicas\nconflicts with "mgr-b":\n- .spec.replicas');
    expect(conflictOf(() => apply(ab, pod({ replicas: 2 }), 'mgr-a')).conflicts.map((c) => c.manager)).toEqual(['mgr-b']);
  });

  it('3: a co-owner gives up ownership by applying without the field; the other may then change it', () => {
    const ab = apply(apply(undefined, pod({ replicas: 1 }), 'mgr-a'), pod({ replicas: 1, nodeName: 'n' }), 'mgr-b');
    const gaveUp = apply(ab, pod({ nodeName: 'n' }), 'mgr-b', { now: at(1) });
    const changed = apply(gaveUp, pod({ replicas: 4 }), 'mgr-a', { now: at(2) });
    expect(body(changed)['spec']).toEqual({ replicas: 4, nodeName: 'n' });
    expect(owners(changed)).toEqual({ 'mgr-a/Apply': REPLICAS, 'mgr-b/Apply': NODE_NAME });
  });

  it('4: an update after an apply never conflicts and moves ownership of the changed field to the updater', () => {
    const a = apply(undefined, pod({ containers: [{ name: 'nginx', image: 'nginx:1' }] }), 'mgr-a');
    const u = update(a, edit(a, (c) => (c['spec']['containers'][0]['image'] = 'nginx:2')), 'kubectl-edit', { now: at(1) });
    expect(owners(u)).toEqual({
      'mgr-a/Apply': { 'f:spec': { 'f:containers': { 'k:{"name":"nginx"}': { '.': {}, 'f:name': {} } } } },
      'kubectl-edit/Update': { 'f:spec': { 'f:containers': { 'k:{"name":"nginx"}': { 'f:image': {} } } } },
    });
    // The applier re-applying its old manifest now conflicts with the updater.
    const err = conflictOf(() => apply(u, pod({ containers: [{ name: 'nginx', image: 'nginx:1' }] }), 'mgr-a', { now: at(2) }));
    expect(err.message).toBe('Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .spec.containers[name="nginx"].image');
    expect(err.conflicts[0]).toMatchObject({ manager: 'kubectl-edit', operation: 'Update', message: 'conflict with "kubectl-edit" using v1' });
  });

  describe('5: a field that leaves the only owner\'s applied set is removed', () => {
    it('a list-map entry (container by name)', () => {
      const two = apply(undefined, pod({ containers: [{ name: 'a', image: 'ia' }, { name: 'b', image: 'ib' }] }), 'mgr-a');
      const one = apply(two, pod({ containers: [{ name: 'a', image: 'ia' }] }), 'mgr-a', { now: at(1) });
      expect(body(one)['spec']).toEqual({ containers: [{ name: 'a', image: 'ia' }] });
      expect(owners(one)).toEqual({ 'mgr-a/Apply': { 'f:spec': { 'f:containers': { 'k:{"name":"a"}': { '.': {}, 'f:image': {}, 'f:name': {} } } } } });
    });

    it('a map key (label), leaving keys of other owners', () => {
      const a = apply(undefined, pod(undefined, { labels: { app: 'web', tier: 'front' } }), 'mgr-a');
      const b = apply(a, pod(undefined, { labels: { team: 'x' } }), 'mgr-b');
      const dropped = apply(b, pod(undefined, { labels: { app: 'web' } }), 'mgr-a', { now: at(1) });
      expect(body(dropped)['metadata']['labels']).toEqual({ app: 'web', team: 'x' });
      const none = apply(dropped, pod(), 'mgr-a', { now: at(2) });
      expect(body(none)['metadata']['labels']).toEqual({ team: 'x' });
      expect(owners(none)).toEqual({ 'mgr-b/Apply': { 'f:metadata': { 'f:labels': { 'f:team': {} } } } });
    });

    it('the last label: the labels map goes too', () => {
      const a = apply(undefined, pod({ nodeName: 'n' }, { labels: { app: 'web' } }), 'mgr-a');
      const none = apply(a, pod({ nodeName: 'n' }), 'mgr-a', { now: at(1) });
      expect(body(none)['metadata']).toEqual({ name: 'p', namespace: 'default' });
    });

    it('a set item (finalizer)', () => {
      const a = apply(undefined, pod(undefined, { finalizers: ['x.io/a', 'x.io/b'] }), 'mgr-a');
      const b = apply(a, pod(undefined, { finalizers: ['x.io/c'] }), 'mgr-b');
      const dropped = apply(b, pod(undefined, { finalizers: ['x.io/b'] }), 'mgr-a', { now: at(1) });
      expect(body(dropped)['metadata']['finalizers']).toEqual(['x.io/b', 'x.io/c']);
      expect(owners(dropped)['mgr-a/Apply']).toEqual({ 'f:metadata': { 'f:finalizers': { 'v:"x.io/b"': {} } } });
    });

    it('kept when another applier co-owns the entry', () => {
      const a = apply(undefined, pod({ containers: [{ name: 'a', image: 'ia' }, { name: 'b', image: 'ib' }] }), 'mgr-a');
      const b = apply(a, pod({ containers: [{ name: 'b', image: 'ib' }] }), 'mgr-b');
      const dropped = apply(b, pod({ containers: [{ name: 'a', image: 'ia' }] }), 'mgr-a', { now: at(1) });
      expect(body(dropped)['spec']['containers']).toEqual([{ name: 'a', image: 'ia' }, { name: 'b', image: 'ib' }]);
    });

    it('kept when an updater took the field over', () => {
      const a = apply(undefined, pod(undefined, { labels: { app: 'web' } }), 'mgr-a');
      const u = update(a, edit(a, (c) => (c['metadata']['labels']['app'] = 'api')), 'kubectl-label', { now: at(1) });
      const dropped = apply(u, pod(), 'mgr-a', { now: at(2) });
      expect(body(dropped)['metadata']['labels']).toEqual({ app: 'api' });
      expect(owners(dropped)).toEqual({ 'kubectl-label/Update': { 'f:metadata': { 'f:labels': { 'f:app': {} } } } });
    });
  });

  it('6: a controller forcing its fields needs no resourceVersion and cannot delete fields that predate its first apply', () => {
    const created = update(undefined, pod({ nodeName: 'n' }, { labels: { app: 'web', legacy: 'yes' } }), 'kubectl-create');
    const c1 = apply(created, pod(undefined, { labels: { app: 'web', ctrl: 'on' } }), 'controller', { force: true, now: at(1) });
    const c2 = apply(c1, pod(), 'controller', { force: true, now: at(2) });
    expect(body(c2)['metadata']['labels']).toEqual({ app: 'web', legacy: 'yes' });
    expect(body(c2)['spec']).toEqual({ nodeName: 'n' });
  });

  it('6: fields of an object without managedFields belong to "before-first-apply"', () => {
    const legacy = pod({ nodeName: 'n', replicas: 1 }, { uid: 'u1', resourceVersion: '5', labels: { app: 'web' } });
    const err = conflictOf(() => apply(legacy, pod({ replicas: 2 }), 'controller'));
    expect(err.message).toBe('Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .spec.replicas');
    const forced = apply(legacy, pod({ replicas: 2 }), 'controller', { force: true, now: at(1) });
    expect(owners(forced)).toEqual({
      'controller/Apply': REPLICAS,
      'before-first-apply/Update': { 'f:metadata': { 'f:labels': { '.': {}, 'f:app': {} } }, 'f:spec': { 'f:nodeName': {} } },
    });
    // The controller dropping everything cannot delete what was there before.
    expect(body(apply(forced, pod(), 'controller', { now: at(2) }))['spec']).toEqual({ nodeName: 'n' });
  });

  it('7: handing a field over from a user to a controller through a temporary manager', () => {
    const user = apply(undefined, pod({ replicas: 3, nodeName: 'n' }), 'user');
    const handover = apply(user, pod({ replicas: 3 }), 'handover-to-hpa', { now: at(1) });
    const userDrops = apply(handover, pod({ nodeName: 'n' }), 'user', { now: at(2) });
    expect(body(userDrops)['spec']).toEqual({ replicas: 3, nodeName: 'n' });
    expect(owners(userDrops)).toEqual({ 'user/Apply': NODE_NAME, 'handover-to-hpa/Apply': REPLICAS });
    const hpa = update(userDrops, edit(userDrops, (c) => (c['spec']['replicas'] = 5)), 'hpa', { now: at(3) });
    expect(owners(hpa)).toEqual({ 'user/Apply': NODE_NAME, 'hpa/Update': REPLICAS });
  });

  it('8: apply to a missing object creates it (the server checks create vs patch permission)', () => {
    const created = apply(undefined, pod({ nodeName: 'n' }), 'mgr-a');
    expect(body(created)).toEqual({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'default' }, spec: { nodeName: 'n' }, status: {} });
    expect(owners(created)).toEqual({ 'mgr-a/Apply': NODE_NAME });
  });

  describe('9: clearing managedFields', () => {
    const live = apply(apply(undefined, pod({ replicas: 1 }), 'mgr-a'), pod({ nodeName: 'n' }), 'mgr-b');

    it('[{}] alone clears them', () => {
      const reset = update(live, edit(live, (c) => (c['metadata']['managedFields'] = [{}])), 'resetter', { now: at(1) });
      expect(reset['metadata']['managedFields']).toBeUndefined();
      expect(body(reset)).toEqual(body(live));
    });

    it('[{}] with other changes: reset first, then the requester owns what it changed', () => {
      const after = edit(live, (c) => {
        c['metadata']['managedFields'] = [{}];
        c['spec']['replicas'] = 9;
      });
      const reset = update(live, after, 'resetter', { now: at(1) });
      expect(owners(reset)).toEqual({ 'resetter/Update': REPLICAS });
    });

    it('an empty list does not reset', () => {
      const kept = update(live, edit(live, (c) => (c['metadata']['managedFields'] = [])), 'someone', { now: at(1) });
      expect(kept['metadata']['managedFields']).toEqual(live['metadata']['managedFields']);
    });

    it('a supplied non-empty list replaces the stored one (direct edit), and is ignored on subresources', () => {
      const onlyB = entries(live).filter((e) => e.manager === 'mgr-b');
      const edited = update(live, edit(live, (c) => (c['metadata']['managedFields'] = onlyB)), 'someone', { now: at(1) });
      expect(owners(edited)).toEqual({ 'mgr-b/Apply': NODE_NAME });
      const viaStatus = update(live, edit(live, (c) => (c['metadata']['managedFields'] = onlyB)), 'someone', { now: at(1), subresource: 'status' });
      expect(viaStatus['metadata']['managedFields']).toEqual(live['metadata']['managedFields']);
    });

    it('after a reset, the next apply meets "before-first-apply"', () => {
      const reset = update(live, edit(live, (c) => (c['metadata']['managedFields'] = [{}])), 'resetter', { now: at(1) });
      const err = conflictOf(() => apply(reset, pod({ replicas: 2 }), 'mgr-a', { now: at(2) }));
      expect(err.conflicts.map((c) => c.manager)).toEqual(['before-first-apply']);
    });
  });

  describe('10: subresources', () => {
    it('entries of a subresource are separate and named with it in conflicts', () => {
      const live = apply(undefined, pod({ nodeName: 'n' }), 'mgr-a');
      const status = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'default' }, status: { phase: 'Running' } };
      const s = apply(live, status, 'kubelet', { subresource: 'status', now: at(1) });
      expect(entries(s).map((e) => [e.manager, e.operation, e.subresource])).toEqual([
        ['mgr-a', 'Apply', undefined],
        ['kubelet', 'Apply', 'status'],
      ]);
      const err = conflictOf(() => apply(s, { ...status, status: { phase: 'Failed' } }, 'other', { subresource: 'status', now: at(2) }));
      expect(err.message).toBe('Apply failed with 1 conflict: conflict with "kubelet" with subresource "status": .status.phase');
      expect(err.conflicts[0]!.subresource).toBe('status');
    });

    it('fields the subresource cannot take (ignoredFields) are never owned', () => {
      const live = apply(undefined, pod({ nodeName: 'n' }), 'mgr-a');
      const s = apply(live, { ...pod({ nodeName: 'n' }), status: { phase: 'Running' } }, 'kubelet', { subresource: 'status', ignoredFields: [['spec']], now: at(1) });
      expect(owners(s)['kubelet/Apply/status']).toEqual({ 'f:status': { 'f:phase': {} } });
    });
  });
});
