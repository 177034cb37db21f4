import { describe, expect, it } from 'vitest';
import { apply, at, edit, entries, owners, pod, update } from './helpers.js';

const summary = (o: Record<string, any>) => entries(o).map((e) => `${e.manager} ${e.operation} ${e.time}`);

/** managedFields entries: identity, merging, time and order, as the upstream apiserver keeps them. */
describe('managedFields entries', () => {
  it('one entry per manager and operation: re-applying replaces the Apply entry, updates accumulate', () => {
    const a1 = apply(undefined, pod({ replicas: 1 }), 'm');
    const a2 = apply(a1, pod({ nodeName: 'n' }), 'm', { now: at(1) });
    expect(owners(a2)).toEqual({ 'm/Apply': { 'f:spec': { 'f:nodeName': {} } } });
    const u1 = update(a2, edit(a2, (c) => (c['metadata']['labels'] = { a: '1' })), 'm', { now: at(2) });
    const u2 = update(u1, edit(u1, (c) => (c['metadata']['labels']['b'] = '2')), 'm', { now: at(3) });
    expect(owners(u2)).toEqual({
      'm/Apply': { 'f:spec': { 'f:nodeName': {} } },
      'm/Update': { 'f:metadata': { 'f:labels': { '.': {}, 'f:a': {}, 'f:b': {} } } },
    });
    expect(summary(u2)).toEqual(['m Apply 2024-05-01T10:00:01Z', 'm Update 2024-05-01T10:00:03Z']);
  });

  it('time moves only when something changed; a no-op apply or update leaves the entries as they were', () => {
    const a1 = apply(undefined, pod({ replicas: 1 }), 'm');
    const again = apply(a1, pod({ replicas: 1 }), 'm', { now: at(60) });
    expect(again).toEqual(a1);
    const noChange = update(a1, structuredClone(a1), 'editor', { now: at(61) });
    expect(noChange).toEqual(a1);
  });

  it('order: Apply entries before Update entries, then oldest first, then by manager', () => {
    let o = apply(undefined, pod({ replicas: 1 }), 'zeta', { now: at(10) });
    o = update(o, edit(o, (c) => (c['spec']['nodeName'] = 'n')), 'beta', { now: at(5) });
    o = apply(o, pod(undefined, { labels: { x: '1' } }), 'alpha', { now: at(10) });
    o = apply(o, pod(undefined, { annotations: { y: '1' } }), 'omega', { now: at(2) });
    o = update(o, edit(o, (c) => (c['metadata']['labels']['u'] = '1')), 'alpha', { now: at(1) });
    expect(summary(o)).toEqual([
      'omega Apply 2024-05-01T10:00:02Z',
      'alpha Apply 2024-05-01T10:00:10Z',
      'zeta Apply 2024-05-01T10:00:10Z',
      'alpha Update 2024-05-01T10:00:01Z',
      'beta Update 2024-05-01T10:00:05Z',
    ]);
  });

  it('an entry whose fields are all taken away disappears', () => {
    const a = apply(undefined, pod({ replicas: 1 }), 'a');
    const u = update(a, edit(a, (c) => (c['spec']['replicas'] = 2)), 'b', { now: at(1) });
    expect(entries(u).map((e) => e.manager)).toEqual(['b']);
  });

  it('removing a field takes it from every owner', () => {
    const a = apply(apply(undefined, pod({ replicas: 1, nodeName: 'n' }), 'a'), pod({ replicas: 1 }), 'b');
    const u = update(a, edit(a, (c) => delete c['spec']['replicas']), 'editor', { now: at(1) });
    expect(owners(u)).toEqual({ 'a/Apply': { 'f:spec': { 'f:nodeName': {} } } });
  });

  it('apiVersion, metadata identity and server-set fields are never recorded', () => {
    const u = update(undefined, pod({ nodeName: 'n' }, { uid: 'u', resourceVersion: '1', creationTimestamp: '2024-01-01T00:00:00Z', generation: 1 }), 'creator');
    expect(owners(u)).toEqual({ 'creator/Update': { 'f:spec': { 'f:nodeName': {} } } });
  });

  it('at most 10 Update entries: the oldest are folded into "ancient-changes"', () => {
    let o = apply(undefined, pod({ nodeName: 'n' }), 'applier');
    for (let i = 0; i < 12; i++) {
      o = update(o, edit(o, (c) => ((c['metadata']['labels'] ??= {})[`l${i}`] = 'x')), `updater-${i}`, { now: at(i + 1) });
    }
    const updates = entries(o).filter((e) => e.operation === 'Update');
    expect(updates).toHaveLength(10);
    expect(updates[0]!.manager).toBe('ancient-changes');
    expect(updates[0]!.time).toBe(at(3));
    expect(updates[0]!.fieldsV1).toEqual({ 'f:metadata': { 'f:labels': { '.': {}, 'f:l0': {}, 'f:l1': {}, 'f:l2': {} } } });
    expect(updates.slice(1).map((e) => e.manager)).toEqual([3, 4, 5, 6, 7, 8, 9, 10, 11].map((i) => `updater-${i}`));
  });
});
