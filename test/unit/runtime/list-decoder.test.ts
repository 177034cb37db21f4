import protobuf from 'protobufjs';
import { describe, expect, it } from 'vitest';
import { ListDecoder, readVarint } from '../../../src/runtime/list-decoder.js';
import { criProtoPath, TO_OBJECT_OPTIONS } from '../../../src/runtime/proto.js';

const root = protobuf.loadSync(criProtoPath());
const Response = root.lookupType('runtime.v1.ListContainersResponse');
const Container = root.lookupType('runtime.v1.Container');
const decodeOne = (b: Uint8Array) => Container.toObject(Container.decode(b), TO_OBJECT_OPTIONS) as { id: string; state: string; metadata: { attempt: number } };

const c = (id: string, state = 1, attempt = 0) => ({ id, podSandboxId: 's1', metadata: { name: 'app', attempt }, state, createdAt: 1, labels: { 'io.kubernetes.pod.uid': 'u1' } });
const answer = (...cs: ReturnType<typeof c>[]) => Buffer.from(Response.encode(Response.fromObject({ containers: cs })).finish());

describe('ListDecoder', () => {
  it('decodes as the whole-answer decode does, and hands back an unchanged entry as the same frozen object, in any order', () => {
    const d = new ListDecoder(decodeOne);
    const first = d.decode(answer(c('a'), c('b')));
    expect(first).toEqual((Response.toObject(Response.decode(answer(c('a'), c('b'))), TO_OBJECT_OPTIONS) as { containers: unknown[] }).containers);
    expect(Object.isFrozen(first[0])).toBe(true);
    const again = d.decode(answer(c('b'), c('a')));
    expect(again[0]).toBe(first[1]);
    expect(again[1]).toBe(first[0]);
  });

  it('sees every change: a state, a new entry, a removed one, a new container in the place of an old one with the same count', () => {
    const d = new ListDecoder(decodeOne);
    const [a0, b0] = d.decode(answer(c('a'), c('b')));
    const [a1, b1] = d.decode(answer(c('a', 2), c('b')));
    expect(a1).not.toBe(a0);
    expect(a1!.state).toBe('CONTAINER_EXITED');
    expect(b1).toBe(b0);
    const three = d.decode(answer(c('a', 2), c('b'), c('n')));
    expect(three.map((x) => x.id)).toEqual(['a', 'b', 'n']);
    expect(three[0]).toBe(a1);
    const two = d.decode(answer(c('b'), c('n')));
    expect(two[0]).toBe(b0);
    // The exited container removed and a new one started (another ID, the next attempt): same count, new entry.
    const restarted = d.decode(answer(c('b'), c('n2', 1, 1)));
    expect(restarted.map((x) => [x.id, x.metadata.attempt])).toEqual([['b', 0], ['n2', 1]]);
    // A removed entry is forgotten: back with the same bytes, it is decoded anew.
    const back = d.decode(answer(c('a'), c('b')));
    expect(back[0]).not.toBe(a0);
    expect(back[0]).toEqual(a0);
  });

  it('hands back an entry whose labels and annotations come in another order as the same object (containerd writes maps in Go map order), and still sees a changed label', () => {
    const withMaps = (id: string, labels: Record<string, string>, annotations: Record<string, string>) => ({ ...c(id), labels, annotations });
    const enc = (...cs: ReturnType<typeof withMaps>[]) => Buffer.from(Response.encode(Response.fromObject({ containers: cs })).finish());
    const d = new ListDecoder(decodeOne);
    const [a0] = d.decode(enc(withMaps('a', { x: '1', y: '2', z: '3' }, { p: 'q', r: 's' })));
    const reordered = enc(withMaps('a', { z: '3', x: '1', y: '2' }, { r: 's', p: 'q' }));
    expect(reordered.equals(enc(withMaps('a', { x: '1', y: '2', z: '3' }, { p: 'q', r: 's' })))).toBe(false);
    expect(d.decode(reordered)[0]).toBe(a0);
    expect(d.decode(reordered)[0]).toBe(a0);
    // Same length, one value changed; a value moved from one key to another; a label moved to the annotations.
    const changed = d.decode(enc(withMaps('a', { z: '3', x: '1', y: '4' }, { r: 's', p: 'q' })))[0]!;
    expect(changed).not.toBe(a0);
    expect((changed as unknown as { labels: Record<string, string> }).labels).toEqual({ x: '1', y: '4', z: '3' });
    const swapped = d.decode(enc(withMaps('a', { x: '1', y: '3', z: '2' }, { p: 'q', r: 's' })))[0]!;
    expect(swapped).not.toBe(changed);
    expect((swapped as unknown as { labels: Record<string, string> }).labels).toEqual({ x: '1', y: '3', z: '2' });
    const moved = d.decode(enc(withMaps('a', { x: '1', y: '3' }, { p: 'q', r: 's', z: '2' })))[0]!;
    expect(moved).not.toBe(swapped);
    expect((moved as unknown as { annotations: Record<string, string> }).annotations).toEqual({ p: 'q', r: 's', z: '2' });
  });

  it('reuses an entry whose maps are rotated (Go map order of a small map) or otherwise reordered, and sees a changed state or label behind a rotation', () => {
    const withMaps = (id: string, state: number, labels: Record<string, string>, annotations: Record<string, string>) => ({ ...c(id, state), labels, annotations });
    const enc = (...cs: ReturnType<typeof withMaps>[]) => Buffer.from(Response.encode(Response.fromObject({ containers: cs })).finish());
    const labels = { a: '1', b: '2', c: '3', d: '4' };
    const d = new ListDecoder(decodeOne);
    const [first] = d.decode(enc(withMaps('k', 1, labels, { p: 'q', r: 's', t: 'u' })));
    // Rotations of both maps; then a swap, which no rotation gives.
    expect(d.decode(enc(withMaps('k', 1, { c: '3', d: '4', a: '1', b: '2' }, { t: 'u', p: 'q', r: 's' })))[0]).toBe(first);
    expect(d.decode(enc(withMaps('k', 1, { b: '2', a: '1', d: '4', c: '3' }, { p: 'q', t: 'u', r: 's' })))[0]).toBe(first);
    // Rotated maps with the state changed: outside the maps, so a new object.
    const exited = d.decode(enc(withMaps('k', 2, { d: '4', a: '1', b: '2', c: '3' }, { r: 's', t: 'u', p: 'q' })))[0]!;
    expect(exited).not.toBe(first);
    expect(exited.state).toBe('CONTAINER_EXITED');
    // Rotated, one value changed at the same length: a new object with the new value.
    const relabeled = d.decode(enc(withMaps('k', 2, { d: '5', a: '1', b: '2', c: '3' }, { r: 's', t: 'u', p: 'q' })))[0]!;
    expect(relabeled).not.toBe(exited);
    expect((relabeled as unknown as { labels: Record<string, string> }).labels).toEqual({ a: '1', b: '2', c: '3', d: '5' });
  });

  it('takes a map run found in the kept run written twice only at an entry boundary for a rotation', () => {
    // Kept labels: a = "...<the bytes of a whole label entry F>", b = "x". The new run is F, then
    // b's entry, then the head of a's entry: it occurs in the doubled kept run, but inside a's
    // value, and is no map at all (a's header claims more bytes than the run has left).
    const f = Buffer.from([0x42, 0x05, 0x0a, 0x01, 0x63, 0x12, 0x00]);
    const kept = Buffer.from(Container.encode(Container.fromObject({ id: 'm', state: 1, labels: { a: `zz${f.toString('latin1')}`, b: 'x' } })).finish());
    const runStart = kept.indexOf(Buffer.from([0x42]), kept.indexOf(Buffer.from([0x30])));
    const e1End = runStart + 2 + kept[runStart + 1]!;
    const run = kept.subarray(runStart);
    const e1 = kept.subarray(runStart, e1End);
    const moved = Buffer.concat([kept.subarray(0, runStart), f, kept.subarray(e1End), e1.subarray(0, e1.length - f.length)]);
    expect(moved.length).toBe(kept.length);
    expect(Buffer.concat([run, run]).indexOf(moved.subarray(runStart))).toBe(e1.length - f.length);
    const list = (entry: Buffer) => Buffer.concat([Buffer.from([0x0a, entry.length]), entry]);
    const d = new ListDecoder(decodeOne);
    const [first] = d.decode(list(kept));
    expect((first as unknown as { labels: Record<string, string> }).labels.b).toBe('x');
    expect(() => d.decode(list(moved))).toThrow();
  });

  it('decodes an empty answer, and answers of another shape in full without reuse; truncated bytes throw, never hang', () => {
    const d = new ListDecoder(decodeOne);
    expect(d.decode(Buffer.alloc(0))).toEqual([]);
    // An entry whose ID is not its first field (another writer's field order), and an unknown varint field at the top.
    const idLast = Buffer.concat([Buffer.from([0x30, 0x01]), Buffer.from(Container.encode(Container.fromObject({ id: 'x' })).finish())]);
    const odd = Buffer.concat([Buffer.from([0x10, 0x05]), Buffer.from([0x0a, idLast.length]), idLast]);
    const r1 = d.decode(odd);
    expect(r1.map((x) => [x.id, x.state])).toEqual([['x', 'CONTAINER_RUNNING']]);
    expect(d.decode(odd)[0]).not.toBe(r1[0]);
    expect(() => d.decode(Buffer.from([0x0a, 0x50, 0x01]))).toThrow(/runs past the end/);
    expect(readVarint(Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0x01]), 0)).toBeUndefined();
    expect(readVarint(Buffer.from([0x96, 0x01]), 0)).toEqual({ value: 150, end: 2 });
  });
});
