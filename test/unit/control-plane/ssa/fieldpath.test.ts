import { describe, expect, it } from 'vitest';
import { FieldSet, fieldPE, keyPE, valuePE, peKey, parsePEKey, pathString, type Path } from '../../../control-plane/ssa/fieldpath.js';
import { toFieldSet } from '../../../control-plane/ssa/typed.js';
import { podSchema } from './pod-schema.js';

const f = fieldPE;

describe('FieldsV1 encoding', () => {
  // Each document is what a real API server prints; parsing and printing it again must give
  // the same JSON text, key order included.
  const roundTrips: Array<[string, object]> = [
    [
      'apply of labels and a container',
      {
        'f:metadata': { 'f:labels': { 'f:app': {} } },
        'f:spec': { 'f:containers': { 'k:{"name":"nginx"}': { '.': {}, 'f:image': {}, 'f:name': {} } } },
      },
    ],
    [
      'update entry with map members and nested structs',
      {
        'f:metadata': { 'f:labels': { '.': {}, 'f:run': {} } },
        'f:spec': {
          'f:containers': {
            'k:{"name":"nginx"}': {
              '.': {},
              'f:image': {},
              'f:imagePullPolicy': {},
              'f:name': {},
              'f:resources': { '.': {}, 'f:limits': { '.': {}, 'f:cpu': {} } },
            },
          },
          'f:dnsPolicy': {},
        },
      },
    ],
    [
      'multi-field keys sorted by name, numbers bare',
      { 'f:ports': { 'k:{"containerPort":80,"protocol":"TCP"}': { '.': {}, 'f:containerPort': {}, 'f:protocol': {} } } },
    ],
    [
      'set items and fields before keys before values',
      { 'f:metadata': { 'f:finalizers': { '.': {}, 'v:"a.example.com/x"': {}, 'v:"b.example.com/y"': {} } } },
    ],
    ['status conditions keyed by type', { 'f:status': { 'f:conditions': { 'k:{"type":"Ready"}': { '.': {}, 'f:status': {}, 'f:type': {} } } } }],
  ];
  for (const [name, doc] of roundTrips) {
    it(`round-trips: ${name}`, () => {
      expect(JSON.stringify(FieldSet.fromFieldsV1(doc).toFieldsV1())).toBe(JSON.stringify(doc));
    });
  }

  it('prints keys in upstream path-element order whatever the insertion order', () => {
    const s = FieldSet.of(
      [f('spec'), f('containers'), keyPE([['name', 'b']]), f('name')],
      [f('spec'), f('containers'), keyPE([['name', 'a']])],
      [f('spec'), f('containers'), keyPE([['name', 'a']]), f('image')],
      [f('metadata'), f('labels'), f('z')],
      [f('metadata'), f('labels'), f('a')],
    );
    expect(JSON.stringify(s.toFieldsV1())).toBe(
      JSON.stringify({
        'f:metadata': { 'f:labels': { 'f:a': {}, 'f:z': {} } },
        'f:spec': { 'f:containers': { 'k:{"name":"a"}': { '.': {}, 'f:image': {} }, 'k:{"name":"b"}': { 'f:name': {} } } },
      }),
    );
  });

  it.each([
    [f('image'), 'f:image'],
    [keyPE([['protocol', 'TCP'], ['containerPort', 80]]), 'k:{"containerPort":80,"protocol":"TCP"}'],
    [valuePE('a<b>&c'), 'v:"a\\u003cb\\u003e\\u0026c"'],
    [valuePE(3), 'v:3'],
    [valuePE(true), 'v:true'],
  ])('path element %j is keyed %s and parses back', (pe, key) => {
    expect(peKey(pe)).toBe(key);
    expect(parsePEKey(key)).toEqual(pe);
  });

  it('rejects unknown element prefixes and non-object leaves, naming them', () => {
    expect(() => FieldSet.fromFieldsV1({ 'x:foo': {} })).toThrow(/x:foo/);
    expect(() => FieldSet.fromFieldsV1({ 'f:foo': 1 })).toThrow(/f:foo/);
  });
});

describe('paths as kubectl prints them', () => {
  it.each<[Path, string]>([
    [[f('spec'), f('replicas')], '.spec.replicas'],
    [[f('spec'), f('containers'), keyPE([['name', 'a']]), f('image')], '.spec.containers[name="a"].image'],
    [[f('spec'), f('containers'), keyPE([['name', 'a']]), f('ports'), keyPE([['containerPort', 80], ['protocol', 'TCP']])], '.spec.containers[name="a"].ports[containerPort=80,protocol="TCP"]'],
    [[f('metadata'), f('finalizers'), valuePE('x/y')], '.metadata.finalizers[="x/y"]'],
  ])('%j -> %s', (path, text) => {
    expect(pathString(path)).toBe(text);
  });
});

describe('set operations', () => {
  const a = FieldSet.of([f('a')], [f('b'), f('c')], [f('b'), f('d')]);
  const b = FieldSet.of([f('b')], [f('b'), f('c')], [f('e')]);
  const keys = (s: FieldSet): string[] => s.paths().map(pathString);

  it.each<[string, () => FieldSet, string[]]>([
    ['union', () => a.union(b), ['.a', '.b', '.e', '.b.c', '.b.d']],
    ['intersection', () => a.intersection(b), ['.b.c']],
    ['difference is not recursive', () => a.difference(b), ['.a', '.b.d']],
    ['recursive difference drops children of removed members', () => a.recursiveDifference(b), ['.a']],
  ])('%s', (_name, op, expected) => {
    expect(keys(op())).toEqual(expected);
  });

  it('treats a path as a whole: .b is not .b.c', () => {
    expect(a.has([f('b'), f('c')])).toBe(true);
    expect(a.has([f('b')])).toBe(false);
    expect(FieldSet.of([]).empty()).toBe(true);
  });
});

describe('field set of an applied configuration', () => {
  it.each<[string, object, object]>([
    [
      'struct fields hold no "." but list entries and map values do as needed',
      { metadata: { labels: { app: 'x' } }, spec: { containers: [{ name: 'c', image: 'i' }] } },
      { 'f:metadata': { 'f:labels': { 'f:app': {} } }, 'f:spec': { 'f:containers': { 'k:{"name":"c"}': { '.': {}, 'f:image': {}, 'f:name': {} } } } },
    ],
    [
      'atomic list and atomic struct are single leaves',
      { spec: { containers: [{ name: 'c', args: ['a', 'b'] }], nodeSelector: { disk: 'ssd' }, tolerations: [{ key: 'k' }] } },
      { 'f:spec': { 'f:containers': { 'k:{"name":"c"}': { '.': {}, 'f:args': {}, 'f:name': {} } }, 'f:nodeSelector': {}, 'f:tolerations': {} } },
    ],
    ['set list items', { metadata: { finalizers: ['b', 'a'] } }, { 'f:metadata': { 'f:finalizers': { 'v:"a"': {}, 'v:"b"': {} } } }],
    [
      'map list with a defaulted key field',
      { spec: { containers: [{ name: 'c', ports: [{ containerPort: 80 }] }] } },
      { 'f:spec': { 'f:containers': { 'k:{"name":"c"}': { '.': {}, 'f:name': {}, 'f:ports': { 'k:{"containerPort":80,"protocol":"TCP"}': { '.': {}, 'f:containerPort': {} } } } } } },
    ],
    ['empty struct and null are owned as leaves', { spec: { securityContext: {}, nodeName: null } }, { 'f:spec': { 'f:nodeName': {}, 'f:securityContext': {} } }],
  ])('%s', (_name, obj, fields) => {
    expect(toFieldSet(obj as never, podSchema).toFieldsV1()).toEqual(fields);
  });

  it('unstructured (no schema): every key is tracked with ".", lists are atomic', () => {
    expect(toFieldSet({ spec: { foo: { bar: 1 }, list: [{ a: 1 }] } }, undefined).toFieldsV1()).toEqual({
      'f:spec': { '.': {}, 'f:foo': { '.': {}, 'f:bar': {} }, 'f:list': {} },
    });
  });
});
