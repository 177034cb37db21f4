import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { silentLogger, type Logger } from '../../../src/log.js';
import { podFromManifest, StaticPodSource } from '../../../src/pods/sources/static-source.js';

const yaml = (name: string, extra = '') => `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
spec:
  containers:
  - name: app
    image: busybox${extra}
`;

describe('podFromManifest', () => {
  it('names the pod <name>-<node>, defaults the namespace, derives the UID from content, node and file', () => {
    const p = podFromManifest(yaml('web'), '/m/web.yaml', 'node1');
    expect(p.metadata).toMatchObject({ name: 'web-node1', namespace: 'default', annotations: { 'kubernetes.io/config.source': 'file', 'kubernetes.io/config.hash': p.metadata!.uid } });
    expect(p.metadata!.uid).toMatch(/^[0-9a-f]{32}$/);
    expect(p.spec).toMatchObject({ nodeName: 'node1', restartPolicy: 'Always', terminationGracePeriodSeconds: 30 });
    // No tag: Always, as the API server defaults it; a fixed tag: IfNotPresent.
    expect(p.spec!.containers[0]!.imagePullPolicy).toBe('Always');
    expect(podFromManifest(yaml('web', ':1.36'), '/m/web.yaml', 'node1').spec!.containers[0]!.imagePullPolicy).toBe('IfNotPresent');
  });

  it('same content, same UID (key order and comments do not matter); another content, node or file: another UID', () => {
    const a = podFromManifest(yaml('web'), '/m/web.yaml', 'n').metadata!.uid;
    const json = JSON.stringify({ spec: { containers: [{ image: 'busybox', name: 'app' }] }, metadata: { name: 'web' }, kind: 'Pod', apiVersion: 'v1' });
    expect(podFromManifest(`# comment\n${yaml('web')}`, '/m/web.yaml', 'n').metadata!.uid).toBe(a);
    expect(podFromManifest(json, '/m/web.yaml', 'n').metadata!.uid).toBe(a);
    expect(podFromManifest(yaml('web', ':2'), '/m/web.yaml', 'n').metadata!.uid).not.toBe(a);
    expect(podFromManifest(yaml('web'), '/m/web.yaml', 'other').metadata!.uid).not.toBe(a);
    expect(podFromManifest(yaml('web'), '/m/web2.yaml', 'n').metadata!.uid).not.toBe(a);
  });

  it('keeps a UID the manifest declares, as the kubelet (applyDefaults), config.hash included; an empty one is derived', () => {
    const uid = '3f0c7c2e-6b1d-4f5a-9d7e-0a1b2c3d4e5f';
    const declared = yaml('web').replace('  name: web\n', `  name: web\n  uid: ${uid}\n`);
    const p = podFromManifest(declared, '/m/web.yaml', 'node1');
    expect(p.metadata).toMatchObject({ name: 'web-node1', uid, annotations: { 'kubernetes.io/config.hash': uid } });
    // Another content, node or file: still the declared UID (the kubelet only derives an unset one).
    expect(podFromManifest(declared.replace('image: busybox', 'image: busybox:2'), '/m/other.yaml', 'node2').metadata!.uid).toBe(uid);
    const empty = podFromManifest(yaml('web').replace('  name: web\n', "  name: web\n  uid: ''\n"), '/m/web.yaml', 'node1');
    expect(empty.metadata!.uid).toMatch(/^[0-9a-f]{32}$/);
    expect(empty.metadata!.annotations!['kubernetes.io/config.hash']).toBe(empty.metadata!.uid);
  });

  it.each([
    ['a path', '../../etc'],
    ['a slash', 'a/b'],
    ['a number', 42],
    ['too long', 'a'.repeat(129)],
    ['a NUL', 'a\u0000b'],
  ])('a declared UID that is %s is refused naming metadata.uid', (_n, uid) => {
    const text = JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x', uid }, spec: { containers: [{ name: 'a', image: 'b' }] } });
    expect(() => podFromManifest(text, '/m/bad.yaml', 'n')).toThrow(/metadata\.uid: .* is not a valid UID/);
  });

  it('reads manifests as YAML 1.1, as Kubernetes does: an octal mode 0644 is 420', () => {
    // (a downwardAPI volume: a static pod cannot show a configMap)
    const text = `${yaml('vol')}  volumes:\n  - name: info\n    downwardAPI: {defaultMode: 0644, items: []}\n`;
    const p = podFromManifest(text, '/m/vol.yaml', 'n');
    expect(p.spec!.volumes![0]!.downwardAPI!.defaultMode).toBe(420);
  });

  it.each([
    ['not YAML', 'a: [1', /cannot parse/],
    ['a list', '- 1', /not a Pod manifest/],
    ['wrong kind', 'apiVersion: v1\nkind: Deployment\nmetadata: {name: x}\nspec: {containers: [{name: a, image: b}]}', /kind: must be Pod/],
    ['no name', 'apiVersion: v1\nkind: Pod\nspec: {containers: [{name: a, image: b}]}', /metadata\.name: required/],
    ['no containers', 'apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: []}', /spec\.containers: must be a non-empty list/],
    ['no image', 'apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: a}]}', /spec\.containers\[0\]\.image: required/],
    ['duplicate names', 'apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {initContainers: [{name: a, image: b}], containers: [{name: a, image: b}]}', /duplicate container name "a"/],
    ['bad restartPolicy', 'apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {restartPolicy: Sometimes, containers: [{name: a, image: b}]}', /spec\.restartPolicy/],
  ])('%s: an error naming the file and the field', (_n, text, re) => {
    expect(() => podFromManifest(text, '/m/bad.yaml', 'n')).toThrow(re);
    expect(() => podFromManifest(text, '/m/bad.yaml', 'n')).toThrow(/^\/m\/bad\.yaml: /);
  });
});

describe('StaticPodSource', () => {
  function setup() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'static-'));
    const sets: Pod[][] = [];
    const src = new StaticPodSource({ dir, nodeName: 'n', logger: silentLogger(), onChange: (p) => sets.push(p), rescanMs: 60_000 });
    return { dir, sets, src };
  }

  it('delivers the first set (even empty), then only changes; dotfiles and directories are ignored', async () => {
    const { dir, sets, src } = setup();
    await src.scan();
    expect(sets).toEqual([[]]);
    fs.writeFileSync(path.join(dir, 'a.yaml'), yaml('a'));
    fs.writeFileSync(path.join(dir, '.b.yaml'), yaml('b'));
    fs.mkdirSync(path.join(dir, 'sub'));
    await src.scan();
    await src.scan();
    expect(sets.length).toBe(2);
    expect(sets[1]!.map((p) => p.metadata!.name)).toEqual(['a-n']);
    fs.rmSync(path.join(dir, 'a.yaml'));
    await src.scan();
    expect(sets[2]).toEqual([]);
  });

  it('an edited file gives a new UID; a malformed file is skipped while the others stay', async () => {
    const { dir, sets, src } = setup();
    fs.writeFileSync(path.join(dir, 'a.yaml'), yaml('a'));
    fs.writeFileSync(path.join(dir, 'b.yaml'), yaml('b'));
    await src.scan();
    const uidA = sets.at(-1)!.find((p) => p.metadata!.name === 'a-n')!.metadata!.uid;
    fs.writeFileSync(path.join(dir, 'a.yaml'), yaml('a', ':2'));
    fs.writeFileSync(path.join(dir, 'b.yaml'), 'garbage: [');
    await src.scan();
    const last = sets.at(-1)!;
    expect(last.map((p) => p.metadata!.name)).toEqual(['a-n']);
    expect(last[0]!.metadata!.uid).not.toBe(uidA);
  });

  it('an edited file whose pod declares its UID is delivered again: same UID, the new spec', async () => {
    const { dir, sets, src } = setup();
    const withUid = (extra: string) => yaml('a', extra).replace('  name: a\n', '  name: a\n  uid: 0123-abcd\n');
    fs.writeFileSync(path.join(dir, 'a.yaml'), withUid(':1'));
    await src.scan();
    await src.scan();
    expect(sets.length).toBe(1);
    fs.writeFileSync(path.join(dir, 'a.yaml'), withUid(':2'));
    await src.scan();
    expect(sets.length).toBe(2);
    expect(sets[1]!.map((p) => [p.metadata!.uid, p.spec!.containers[0]!.image])).toEqual([['0123-abcd', 'busybox:2']]);
  });

  it('two files declaring the same UID: the first in lexical order wins, the other is logged once', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'static-uid-'));
    const lines: string[] = [];
    const logger = { warn: (_o: unknown, msg: string) => lines.push(msg), info: () => undefined } as unknown as Logger;
    const sets: Pod[][] = [];
    const src = new StaticPodSource({ dir, nodeName: 'n', logger, onChange: (p) => sets.push(p), rescanMs: 60_000 });
    for (const name of ['b', 'a']) fs.writeFileSync(path.join(dir, `${name}.yaml`), yaml(name).replace(`  name: ${name}\n`, `  name: ${name}\n  uid: same-uid\n`));
    await src.scan();
    await src.scan();
    expect(sets.at(-1)!.map((p) => p.metadata!.name)).toEqual(['a-n']);
    expect(lines).toEqual([`skipping static pod manifest ${path.join(dir, 'b.yaml')}: uid same-uid is already defined by another file`]);
  });

  it('two files defining the same pod: the first in lexical order wins', async () => {
    const { dir, sets, src } = setup();
    fs.writeFileSync(path.join(dir, '2.yaml'), yaml('same', ':2'));
    fs.writeFileSync(path.join(dir, '1.yaml'), yaml('same', ':1'));
    await src.scan();
    expect(sets.at(-1)!.map((p) => p.spec!.containers[0]!.image)).toEqual(['busybox:1']);
  });

  it('a missing directory is no pods, and its later creation is noticed', async () => {
    const { dir, sets, src } = setup();
    fs.rmSync(dir, { recursive: true });
    await src.scan();
    expect(sets).toEqual([[]]);
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'a.json'), JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'a' }, spec: { containers: [{ name: 'c', image: 'i' }] } }));
    await src.scan();
    expect(sets.at(-1)!.map((p) => p.metadata!.name)).toEqual(['a-n']);
  });

  it('hostile files are skipped without being read, each logged once per version, and the good pod stays', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'static-hostile-'));
    const lines: string[] = [];
    const logger = { warn: (_o: unknown, msg: string) => lines.push(msg), info: () => undefined } as unknown as Logger;
    const sets: Pod[][] = [];
    const src = new StaticPodSource({ dir, nodeName: 'n', logger, onChange: (p) => sets.push(p), rescanMs: 60_000 });
    fs.writeFileSync(path.join(dir, 'good.yaml'), yaml('good'));
    execFileSync('mkfifo', [path.join(dir, 'fifo.yaml')]);
    fs.symlinkSync('/dev/zero', path.join(dir, 'zero.yaml'));
    fs.symlinkSync('loop2.yaml', path.join(dir, 'loop1.yaml'));
    fs.symlinkSync('loop1.yaml', path.join(dir, 'loop2.yaml'));
    fs.writeFileSync(path.join(dir, 'deep.yaml'), '['.repeat(10_000) + ']'.repeat(10_000));
    // 2 MiB, sparse: refused by its size.
    fs.truncateSync((fs.writeFileSync(path.join(dir, 'huge.yaml'), ''), path.join(dir, 'huge.yaml')), 2 * 1024 * 1024);
    await src.scan();
    await src.scan();
    expect(sets.at(-1)!.map((p) => p.metadata!.name)).toEqual(['good-n']);
    const named = (f: string) => lines.filter((l) => l.includes(path.join(dir, f)));
    for (const f of ['fifo.yaml', 'zero.yaml', 'loop1.yaml', 'loop2.yaml', 'deep.yaml', 'huge.yaml']) expect(named(f), f).toHaveLength(1);
    expect(named('fifo.yaml')[0]).toMatch(/is a FIFO, not a regular file: skipped without reading it/);
    expect(named('zero.yaml')[0]).toMatch(/is a character device/);
    expect(named('loop1.yaml')[0]).toMatch(/symlink loop/);
    expect(named('deep.yaml')[0]).toMatch(/cannot parse: nested deeper than 100 levels/);
    expect(named('huge.yaml')[0]).toMatch(/is 2 MiB \(2097152 bytes\), over the 1.5 MiB limit: skipped without reading it/);
    // A new version of a refused file is read again.
    fs.rmSync(path.join(dir, 'fifo.yaml'));
    fs.writeFileSync(path.join(dir, 'fifo.yaml'), yaml('other'));
    await src.scan();
    expect(sets.at(-1)!.map((p) => p.metadata!.name).sort()).toEqual(['good-n', 'other-n']);
    fs.rmSync(dir, { recursive: true });
  });
});

