import { describe, expect, it } from 'vitest';
import { checkFields, parseJsonStrict, parseYamlStrict } from '../../control-plane/decode.js';
import { PatchError, applyJsonPatch, applyMergePatch, applyStrategicMergePatch } from '../../control-plane/patch.js';
import { NODE_SCHEMA, POD_SCHEMA } from '../../control-plane/schema.js';
import { SelectorError, matchFields, matchLabels, parseFieldSelector, parseLabelSelector } from '../../control-plane/selectors.js';
import { negotiate } from '../../control-plane/server.js';
import { GoneError, Store } from '../../control-plane/store.js';

describe('label selectors', () => {
  const obj = { metadata: { labels: { app: 'web', env: 'prod' } } };
  it.each([
    ['app=web', true],
    ['app==web', true],
    ['app!=web', false],
    ['app in (web, db)', true],
    ['app notin (web)', false],
    ['tier', false],
    ['!tier', true],
    ['app=web,env=dev', false],
    ['', true],
  ])('%s -> %s', (sel, want) => {
    expect(matchLabels(parseLabelSelector(sel), obj)).toBe(want);
  });
  it('rejects a malformed selector', () => {
    expect(() => parseLabelSelector('a b c')).toThrow(SelectorError);
  });
});

describe('field selectors', () => {
  const p = { metadata: { name: 'a', namespace: 'ns' }, spec: { nodeName: 'n1' }, status: { phase: 'Running' } };
  it.each([
    ['metadata.name=a', true],
    ['metadata.namespace!=ns', false],
    ['spec.nodeName=n1,status.phase=Running', true],
    ['spec.nodeName=', false],
  ])('%s -> %s', (sel, want) => {
    expect(matchFields(parseFieldSelector(sel, 'Pod'), p)).toBe(want);
  });
  it('names the unsupported field', () => {
    expect(() => parseFieldSelector('spec.foo=1', 'Pod')).toThrow('field label not supported: spec.foo');
  });
});

describe('patches', () => {
  it('json patch: add/remove/replace/move/copy/test and a failing test', () => {
    const doc = { a: { b: [1, 2] }, c: 'x' };
    expect(applyJsonPatch(doc, [{ op: 'add', path: '/a/b/-', value: 3 }, { op: 'replace', path: '/c', value: 'y' }, { op: 'copy', from: '/c', path: '/d' }, { op: 'move', from: '/d', path: '/e' }, { op: 'remove', path: '/a/b/0' }, { op: 'test', path: '/e', value: 'y' }])).toEqual({ a: { b: [2, 3] }, c: 'y', e: 'y' });
    expect(doc).toEqual({ a: { b: [1, 2] }, c: 'x' });
    expect(() => applyJsonPatch(doc, [{ op: 'test', path: '/c', value: 'nope' }])).toThrow(PatchError);
    expect(() => applyJsonPatch(doc, [{ op: 'remove', path: '/zz' }])).toThrow(/does not/);
  });
  it('merge patch: null deletes, lists replace', () => {
    expect(applyMergePatch({ a: 1, b: { c: 2, d: 3 }, l: [1, 2] }, { a: null, b: { c: null, e: 4 }, l: [9] })).toEqual({ b: { d: 3, e: 4 }, l: [9] });
  });
  it('strategic merge: map lists by merge key, $patch delete and replace', () => {
    const node = { status: { conditions: [{ type: 'Ready', status: 'False' }, { type: 'PIDPressure', status: 'False' }] } };
    expect(applyStrategicMergePatch(node, { status: { conditions: [{ type: 'Ready', status: 'True' }, { type: 'MemoryPressure', status: 'False' }] } }, NODE_SCHEMA)).toEqual({
      status: { conditions: [{ type: 'Ready', status: 'True' }, { type: 'PIDPressure', status: 'False' }, { type: 'MemoryPressure', status: 'False' }] },
    });
    expect(applyStrategicMergePatch(node, { status: { conditions: [{ type: 'Ready', $patch: 'delete' }] } }, NODE_SCHEMA)).toEqual({ status: { conditions: [{ type: 'PIDPressure', status: 'False' }] } });
    const pod = { spec: { containers: [{ name: 'a', image: '1', args: ['x'] }], tolerations: [{ key: 'k' }] } };
    expect(applyStrategicMergePatch(pod, { spec: { containers: [{ name: 'a', args: ['y'] }], tolerations: [{ key: 'z' }] } }, POD_SCHEMA)).toEqual({ spec: { containers: [{ name: 'a', image: '1', args: ['y'] }], tolerations: [{ key: 'z' }] } });
  });
});

describe('body decoding', () => {
  it('finds duplicate fields in raw JSON with their paths; the last value wins', () => {
    const d = parseJsonStrict('{"a":1,"b":{"c":1,"c":2},"l":[{"x":1,"x":2}],"a":3}');
    expect(d.value).toEqual({ a: 3, b: { c: 2 }, l: [{ x: 2 }] });
    expect(d.duplicates).toEqual(['b.c', 'l[0].x', 'a']);
  });
  it('rejects invalid JSON', () => {
    expect(() => parseJsonStrict('{"a":}')).toThrow(/invalid JSON/);
  });
  it('finds duplicate keys in YAML', () => {
    expect(parseYamlStrict('a: 1\nb:\n  c: 1\n  c: 2\n').duplicates).toEqual(['b.c']);
  });
  it('reports unknown fields (dropping them) and the first type error', () => {
    const v = { spec: { bogus: 1, containers: [{ name: 'c', nope: 1 }] }, metadata: { labels: { any: 'thing' } } };
    const r = checkFields(v, POD_SCHEMA);
    expect(r.unknown).toEqual(['spec.bogus', 'spec.containers[0].nope']);
    expect(v.spec).toEqual({ containers: [{ name: 'c' }] });
    expect(checkFields({ spec: { containers: 'x' } }, POD_SCHEMA).typeError).toContain('spec.containers');
  });
});

describe('content negotiation', () => {
  it.each([
    [undefined, { yaml: false, table: false }],
    ['application/json', { yaml: false, table: false }],
    ['application/yaml', { yaml: true, table: false }],
    ['application/json;as=Table;v=v1;g=meta.k8s.io,application/json', { yaml: false, table: true }],
    ['application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json', { yaml: false, table: false }],
    ['application/vnd.kubernetes.protobuf', undefined],
    ['application/cbor', undefined],
    ['application/vnd.kubernetes.protobuf, */*', { yaml: false, table: false }],
  ])('%s', (accept, want) => {
    expect(negotiate(accept, true)).toEqual(want);
  });
});

describe('store', () => {
  it('one counter for all types; listAt undoes later changes; compaction makes older versions gone', () => {
    let now = 0;
    const s = new Store({ now: () => now, sleep: () => Promise.resolve() }, 1000);
    const a = s.put('pods', 'ns', 'a', { metadata: { name: 'a', namespace: 'ns' } });
    const n = s.put('nodes', '', 'n', { metadata: { name: 'n' } });
    expect(Number(n.metadata.resourceVersion)).toBe(Number(a.metadata.resourceVersion) + 1);
    s.put('pods', 'ns', 'a', { metadata: { name: 'a', namespace: 'ns', labels: { v: '2' } } });
    s.remove('pods', 'ns', 'a');
    expect(s.list('pods')).toEqual([]);
    expect(s.listAt('pods', undefined, Number(a.metadata.resourceVersion))).toEqual([a]);
    expect(s.eventsAfter(Number(a.metadata.resourceVersion)).map((e) => e.type)).toEqual(['ADDED', 'MODIFIED', 'DELETED']);
    now = 2000;
    s.put('pods', 'ns', 'b', { metadata: { name: 'b', namespace: 'ns' } });
    expect(() => s.eventsAfter(Number(a.metadata.resourceVersion))).toThrow(GoneError);
    s.compact();
    expect(() => s.listAt('pods', undefined, s.currentRv - 1)).toThrow(GoneError);
    expect(s.eventsAfter(s.currentRv)).toEqual([]);
  });
});
