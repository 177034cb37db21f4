import { describe, expect, it } from 'vitest';
import { applyObject, ApplyInvalidError } from '../../../control-plane/ssa/index.js';
import { apply, at, body, conflictOf, owners, pod, update, T0 } from './helpers.js';

const c = (name: string, extra: Record<string, unknown> = {}) => ({ name, image: `${name}:1`, ...extra });

/** Spec "Merge strategy markers": how lists and maps merge and who owns what inside them. */
describe('merge strategy markers', () => {
  it('map list: entries merge by key, the live order is kept and new entries are placed like upstream', () => {
    const live = apply(undefined, pod({ containers: [c('a'), c('b')] }), 'mgr-a');
    const merged = apply(live, pod({ containers: [c('c'), c('a')] }), 'mgr-b', { now: at(1) });
    expect(body(merged)['spec']['containers'].map((x: { name: string }) => x.name)).toEqual(['c', 'a', 'b']);
  });

  it('map list: different managers own different entries and different fields of one entry', () => {
    const live = apply(undefined, pod({ containers: [c('a')] }), 'mgr-a');
    const b = apply(live, pod({ containers: [{ name: 'a', imagePullPolicy: 'Always' }, c('b')] }), 'mgr-b', { now: at(1) });
    expect(body(b)['spec']['containers']).toEqual([
      { name: 'a', image: 'a:1', imagePullPolicy: 'Always' },
      { name: 'b', image: 'b:1' },
    ]);
    expect(owners(b)).toEqual({
      'mgr-a/Apply': { 'f:spec': { 'f:containers': { 'k:{"name":"a"}': { '.': {}, 'f:image': {}, 'f:name': {} } } } },
      'mgr-b/Apply': {
        'f:spec': {
          'f:containers': {
            'k:{"name":"a"}': { '.': {}, 'f:imagePullPolicy': {}, 'f:name': {} },
            'k:{"name":"b"}': { '.': {}, 'f:image': {}, 'f:name': {} },
          },
        },
      },
    });
  });

  it('map list with two key fields: ports keyed by containerPort and protocol (defaulted TCP)', () => {
    const live = apply(undefined, pod({ containers: [c('a', { ports: [{ containerPort: 80 }, { containerPort: 53, protocol: 'UDP' }] })] }), 'mgr-a');
    const b = apply(live, pod({ containers: [{ name: 'a', ports: [{ containerPort: 80, protocol: 'TCP', name: 'web' }, { containerPort: 53, protocol: 'UDP', name: 'dns' }] }] }), 'mgr-b', { now: at(1) });
    // The entry without protocol is the TCP entry: merged, not duplicated.
    expect(body(b)['spec']['containers'][0]['ports']).toEqual([
      { containerPort: 80, protocol: 'TCP', name: 'web' },
      { containerPort: 53, protocol: 'UDP', name: 'dns' },
    ]);
    expect(owners(b)['mgr-a/Apply']).toEqual({
      'f:spec': {
        'f:containers': {
          'k:{"name":"a"}': {
            '.': {},
            'f:image': {},
            'f:name': {},
            'f:ports': {
              'k:{"containerPort":53,"protocol":"UDP"}': { '.': {}, 'f:containerPort': {}, 'f:protocol': {} },
              'k:{"containerPort":80,"protocol":"TCP"}': { '.': {}, 'f:containerPort': {} },
            },
          },
        },
      },
    });
  });

  it('atomic list: replaced whole, owned as one field; a different list conflicts, the same list is shared', () => {
    const live = apply(undefined, pod({ containers: [c('a', { args: ['x', 'y'] })] }), 'mgr-a');
    expect(owners(live)['mgr-a/Apply']).toEqual({ 'f:spec': { 'f:containers': { 'k:{"name":"a"}': { '.': {}, 'f:args': {}, 'f:image': {}, 'f:name': {} } } } });
    const err = conflictOf(() => apply(live, pod({ containers: [{ name: 'a', args: ['x'] }] }), 'mgr-b'));
    expect(err.conflicts.map((x) => `${x.manager} ${x.field}`)).toEqual(['mgr-a .spec.containers[name="a"].args']);
    const shared = apply(live, pod({ containers: [{ name: 'a', args: ['x', 'y'] }] }), 'mgr-b', { now: at(1) });
    const forced = apply(shared, pod({ containers: [{ name: 'a', args: ['z'] }] }), 'mgr-c', { force: true, now: at(2) });
    expect(body(forced)['spec']['containers'][0]['args']).toEqual(['z']);
    expect(owners(forced)['mgr-c/Apply']).toEqual({ 'f:spec': { 'f:containers': { 'k:{"name":"a"}': { '.': {}, 'f:args': {}, 'f:name': {} } } } });
    expect(owners(forced)['mgr-b/Apply']).toEqual({ 'f:spec': { 'f:containers': { 'k:{"name":"a"}': { '.': {}, 'f:name': {} } } } });
  });

  it('atomic list of objects (tolerations): one element changing is a change of the whole list', () => {
    const live = apply(undefined, pod({ tolerations: [{ key: 'a' }, { key: 'b' }] }), 'mgr-a');
    const err = conflictOf(() => apply(live, pod({ tolerations: [{ key: 'a' }] }), 'mgr-b'));
    expect(err.conflicts.map((x) => x.field)).toEqual(['.spec.tolerations']);
  });

  it('atomic map and atomic struct: replaced whole by the applier, not merged', () => {
    const live = apply(undefined, pod({ nodeSelector: { disk: 'ssd', zone: 'a' }, securityContext: { runAsUser: 1 } }), 'mgr-a');
    const err = conflictOf(() => apply(live, pod({ nodeSelector: { disk: 'hdd' }, securityContext: { runAsGroup: 2 } }), 'mgr-b'));
    expect(err.conflicts.map((x) => x.field)).toEqual(['.spec.nodeSelector', '.spec.securityContext']);
    const forced = apply(live, pod({ nodeSelector: { disk: 'hdd' }, securityContext: { runAsGroup: 2 } }), 'mgr-b', { force: true, now: at(1) });
    expect(body(forced)['spec']).toEqual({ nodeSelector: { disk: 'hdd' }, securityContext: { runAsGroup: 2 } });
  });

  it('granular map (labels): managers own their own keys; only a changed key conflicts', () => {
    const live = apply(undefined, pod(undefined, { labels: { app: 'web' } }), 'mgr-a');
    const b = apply(live, pod(undefined, { labels: { team: 't' } }), 'mgr-b', { now: at(1) });
    expect(body(b)['metadata']['labels']).toEqual({ app: 'web', team: 't' });
    const err = conflictOf(() => apply(b, pod(undefined, { labels: { app: 'api' } }), 'mgr-b'));
    expect(err.conflicts.map((x) => x.field)).toEqual(['.metadata.labels.app']);
  });

  it('set list: items owned one by one, union kept in order', () => {
    const live = apply(undefined, pod(undefined, { finalizers: ['f/a'] }), 'mgr-a');
    const b = apply(live, pod(undefined, { finalizers: ['f/b', 'f/a'] }), 'mgr-b', { now: at(1) });
    expect(body(b)['metadata']['finalizers']).toEqual(['f/b', 'f/a']);
    expect(owners(b)['mgr-b/Apply']).toEqual({ 'f:metadata': { 'f:finalizers': { 'v:"f/a"': {}, 'v:"f/b"': {} } } });
  });

  it('unstructured kinds (no schema): objects granular, every list atomic', () => {
    const widget = (spec: object) => ({ apiVersion: 'x.io/v1', kind: 'Widget', metadata: { name: 'w' }, spec });
    const run = (live: object | undefined, spec: object, manager: string) =>
      applyObject({ live, applied: widget(spec), manager, force: false, apiVersion: 'x.io/v1', kind: 'Widget', now: T0 }) as Record<string, any>;
    const live = run(undefined, { size: 1, items: [{ name: 'a' }] }, 'mgr-a');
    expect(live['metadata']['managedFields'][0]['fieldsV1']).toEqual({ 'f:spec': { '.': {}, 'f:items': {}, 'f:size': {} } });
    const err = conflictOf(() => run(live, { items: [{ name: 'a' }, { name: 'b' }] }, 'mgr-b'));
    expect(err.conflicts.map((x) => x.field)).toEqual(['.spec.items']);
    const b = run(live, { color: 'red' }, 'mgr-b');
    expect(b['spec']).toEqual({ size: 1, items: [{ name: 'a' }], color: 'red' });
  });
});

describe('invalid apply bodies and live objects', () => {
  it.each<[string, object, RegExp]>([
    ['managedFields in the body', pod(undefined, { managedFields: [] }), /^metadata\.managedFields must be nil$/],
    ['duplicate map-list keys', pod({ containers: [c('a'), c('a')] }), /\.spec\.containers: duplicate entries for key \[name="a"\]/],
    ['an entry without its key field', pod({ containers: [{ image: 'x' }] }), /\.spec\.containers: .*omits key field "name"/],
    ['an object in a set list', pod(undefined, { finalizers: [{ a: 1 }] }), /\.metadata\.finalizers: .*not a scalar/],
  ])('%s -> ApplyInvalidError (400)', (_name, applied, message) => {
    let thrown: unknown;
    try {
      apply(undefined, applied as Record<string, unknown>, 'mgr-a');
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(ApplyInvalidError);
    expect((thrown as ApplyInvalidError).code).toBe('INVALID_ARGUMENT');
    expect((thrown as Error).message).toMatch(message);
  });

  it('an update the schema cannot walk stores the object without managedFields instead of failing', () => {
    const live = apply(undefined, pod({ nodeName: 'n' }), 'mgr-a');
    const after = { ...live, spec: { nodeName: 'n', containers: [{ image: 'nameless' }] } };
    const out = update(live, after, 'kubectl-edit', { now: at(1) });
    expect(out).toEqual({ ...after, metadata: { name: 'p', namespace: 'default' } });
  });
});
