import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ArchiveLister, inspectArchive, verifyArchive } from '../../../src/checkpoint/archive.js';
import { writeTar } from './archive-fixtures.js';

let dir: string;
beforeEach(async () => {
  dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-archive-'));
});
afterEach(async () => {
  await fsp.rm(dir, { recursive: true, force: true });
});

const sha = (p: string) => crypto.createHash('sha256').update(fs.readFileSync(p)).digest('hex');
const pages = crypto.randomBytes(300 * 1024);

describe('inspectArchive', () => {
  it('reports identity from the name, size, sha256 and every entry', async () => {
    const file = path.join(dir, 'checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar');
    await writeTar(file, [['config.dump', '{"name":"app"}'], ['checkpoint/pages-1.img', pages], ['checkpoint/inventory.img', 'inv']]);
    expect(await inspectArchive(file)).toEqual({
      path: file,
      pod: 'web-0',
      namespace: 'default',
      container: 'app',
      time: '2026-11-22T23:40:05Z',
      size: fs.statSync(file).size,
      sha256: sha(file),
      entries: [
        { name: 'config.dump', size: 14, type: 'file' },
        { name: 'checkpoint/pages-1.img', size: pages.length, type: 'file' },
        { name: 'checkpoint/inventory.img', size: 3, type: 'file' },
      ],
    });
  });

  it('decides an ambiguous name with the OCI annotations in spec.dump (CRI-O and containerd keys)', async () => {
    const crio = path.join(dir, 'checkpoint-etcd_kube-system-etcd-2026-11-22T23:40:05Z.tar');
    await writeTar(crio, [['spec.dump', JSON.stringify({ annotations: { 'io.kubernetes.pod.namespace': 'kube-system', 'io.kubernetes.container.name': 'etcd' } })]]);
    expect(await inspectArchive(crio)).toMatchObject({ pod: 'etcd', namespace: 'kube-system', container: 'etcd' });
    const ctrd = path.join(dir, 'checkpoint-etcd_kube-system-etcd-2026-11-22T23:40:06Z.tar');
    await writeTar(ctrd, [['spec.dump', JSON.stringify({ annotations: { 'io.kubernetes.cri.sandbox-namespace': 'kube', 'io.kubernetes.cri.container-name': 'system-etcd' } })]]);
    expect(await inspectArchive(ctrd)).toMatchObject({ namespace: 'kube', container: 'system-etcd' });
    const none = path.join(dir, 'checkpoint-etcd_kube-system-etcd-2026-11-22T23:40:07Z.tar');
    await writeTar(none, [['x', 'y']]);
    expect(await inspectArchive(none)).toMatchObject({ namespace: 'kube', container: 'system-etcd', ambiguous: true });
  });

  it('takes identity from the archive when the file was renamed', async () => {
    const file = path.join(dir, 'evidence.tar');
    await writeTar(file, [['spec.dump', JSON.stringify({ annotations: { 'io.kubernetes.pod.name': 'web-0', 'io.kubernetes.pod.namespace': 'default', 'io.kubernetes.container.name': 'app' } })]]);
    const got = await inspectArchive(file);
    expect(got).toMatchObject({ pod: 'web-0', namespace: 'default', container: 'app' });
    expect(got.time).toBeUndefined();
  });

  it('names the file when it is missing, a symlink, or not a tar archive', async () => {
    await expect(inspectArchive(path.join(dir, 'nope.tar'))).rejects.toMatchObject({ code: 'NOT_FOUND', message: `${path.join(dir, 'nope.tar')}: no such file` });
    const garbage = path.join(dir, 'garbage.tar');
    await fsp.writeFile(garbage, crypto.randomBytes(2048));
    await expect(inspectArchive(garbage)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(new RegExp(`^${garbage} is not a readable tar archive: `)) });
    const empty = path.join(dir, 'empty.tar');
    await fsp.writeFile(empty, '');
    await expect(inspectArchive(empty)).rejects.toMatchObject({ message: `${empty} is not a readable tar archive: empty file` });
    const link = path.join(dir, 'link.tar');
    await fsp.symlink(garbage, link);
    await expect(inspectArchive(link)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: `${link} is a symbolic link, not an archive` });
  });
});

describe('verifyArchive', () => {
  it('accepts a tar archive and makes it 0600', async () => {
    const file = path.join(dir, 'a.tar');
    await writeTar(file, [['config.dump', '{}'], ['pages.img', pages]], 0o644);
    await verifyArchive(file);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
  });

  it.each([
    ['missing', async (_f: string) => {}, /left no archive at .*: .* no such file/],
    ['empty', async (f: string) => fsp.writeFile(f, ''), /is not a readable tar archive: empty file/],
    ['garbage', async (f: string) => fsp.writeFile(f, crypto.randomBytes(4096)), /is not a readable tar archive: /],
    ['an empty tar', async (f: string) => fsp.writeFile(f, Buffer.alloc(1024)), /is not a readable tar archive: no entries/],
    ['a directory', async (f: string) => fsp.mkdir(f), /left no archive at .*is not a regular file/],
  ])('refuses %s with INTERNAL', async (_what, make, msg) => {
    const file = path.join(dir, 'x.tar');
    await make(file);
    await expect(verifyArchive(file)).rejects.toMatchObject({ code: 'INTERNAL', message: expect.stringMatching(msg) });
  });
});

describe('ArchiveLister', () => {
  it('lists archives newest first with size and sha256, skips other files, symlinks and in-flight names', async () => {
    const a = path.join(dir, 'checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar');
    const b = path.join(dir, 'checkpoint-web-0_default-app-2026-11-22T23:40:05Z-1.tar');
    const c = path.join(dir, 'checkpoint-db_prod-pg-2026-11-22T23:41:00Z.tar');
    const bad = path.join(dir, 'checkpoint-db_prod-pg-2026-11-22T23:39:00Z.tar');
    await writeTar(a, [['p', pages]]);
    await writeTar(b, [['p', 'small']]);
    await writeTar(c, [['p', 'x']]);
    await fsp.writeFile(bad, 'not a tar at all, but still an archive name');
    await fsp.writeFile(path.join(dir, 'notes.txt'), 'x');
    await fsp.symlink(a, path.join(dir, 'checkpoint-web-0_default-app-2026-11-22T23:50:00Z.tar'));
    const lister = new ArchiveLister(dir);
    const list = await lister.list({ skip: (n) => n === 'checkpoint-db_prod-pg-2026-11-22T23:41:00Z.tar' });
    expect(list).toEqual([
      { path: b, pod: 'web-0', namespace: 'default', container: 'app', time: '2026-11-22T23:40:05Z', size: fs.statSync(b).size, sha256: sha(b) },
      { path: a, pod: 'web-0', namespace: 'default', container: 'app', time: '2026-11-22T23:40:05Z', size: fs.statSync(a).size, sha256: sha(a) },
      { path: bad, pod: 'db', namespace: 'prod', container: 'pg', time: '2026-11-22T23:39:00Z', size: fs.statSync(bad).size, sha256: sha(bad), error: expect.any(String) },
    ]);
    // The cache answers from (inode, size, mtime): an archive replaced in place is hashed again.
    await writeTar(a, [['p', 'replaced']]);
    const again = await lister.list();
    expect(again.find((x) => x.path === a)?.sha256).toBe(sha(a));
    expect(again.map((x) => x.path)).toEqual([c, b, a, bad]);
  });

  it('lists nothing for a missing directory', async () => {
    expect(await new ArchiveLister(path.join(dir, 'none')).list()).toEqual([]);
  });
});
