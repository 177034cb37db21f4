import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ArchiveLister, inspectArchive, verifyArchive, walkTar } from '../../../src/checkpoint/archive.js';
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

/** One ustar header block; `size` as octal text, or base-256 when `base256`. */
function header(name: string, size: number, type = '0', o: { base256?: boolean; magic?: string } = {}): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0, 'latin1');
  h.write('0000644\0', 100, 'latin1');
  if (o.base256) {
    h[124] = 0x80;
    let n = size;
    for (let i = 11; i > 0; i--, n = Math.floor(n / 256)) h[124 + i] = n % 256;
  } else h.write(`${size.toString(8).padStart(11, '0')}\0`, 124, 'latin1');
  h.write('00000000000\0', 136, 'latin1');
  h.write(type, 156, 'latin1');
  h.write(o.magic ?? 'ustar\x0000', 257, 'latin1');
  h.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
  return h;
}
const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc((512 - (b.length % 512)) % 512)]);
const END = Buffer.alloc(1024);
const paxRecord = (k: string, v: string) => {
  const body = ` ${k}=${v}\n`;
  let len = body.length + 1;
  if (String(len).length + body.length > len) len++;
  return `${len}${body}`;
};

describe('walkTar', () => {
  /** walkTar over `bytes` written to a file, counting the bytes it read. */
  async function walk(bytes: Buffer): Promise<{ problem: string | undefined; read: number }> {
    const file = path.join(dir, 'w.tar');
    await fsp.writeFile(file, bytes);
    const fd = fs.openSync(file, 'r');
    let read = 0;
    try {
      const problem = walkTar((buf, position) => {
        const n = fs.readSync(fd, buf, 0, buf.length, position);
        read += n;
        return n;
      }, bytes.length);
      return { problem, read };
    } finally {
      fs.closeSync(fd);
    }
  }

  it('refuses every cut of a whole archive (inside a member, a header, or on a block boundary) and accepts the whole', async () => {
    const file = path.join(dir, 'whole.tar');
    await writeTar(file, [['config.dump', '{"name":"app"}'], ['checkpoint/pages-1.img', crypto.randomBytes(5000)], ['checkpoint/inventory.img', 'inv']]);
    const whole = fs.readFileSync(file);
    expect((await walk(whole)).problem).toBeUndefined();
    let cuts = 0;
    for (let block = 0; block < whole.length; block += 512) {
      for (const cut of [block, block + 100]) {
        if (cut === 0) continue;
        expect((await walk(whole.subarray(0, cut))).problem, `cut at ${cut} of ${whole.length}`).toMatch(/^truncated: /);
        cuts++;
      }
    }
    expect(cuts).toBe((whole.length / 512) * 2 - 1);
  });

  it('reads the headers only, not the members\' data', async () => {
    const big = crypto.randomBytes(3 * 1024 * 1024);
    const bytes = Buffer.concat([header('pages-1.img', big.length), pad(big), header('inventory.img', 3), pad(Buffer.from('inv')), END]);
    const r = await walk(bytes);
    expect(r.problem).toBeUndefined();
    expect(r.read).toBeLessThan(200 * 1024);
  });

  it('applies a PAX size, reads a GNU base-256 size, skips a directory\'s size and zero blocks between members', async () => {
    const data = crypto.randomBytes(1500);
    const pax = Buffer.from(paxRecord('size', String(data.length)) + paxRecord('path', 'a/very/long/name'));
    const bytes = Buffer.concat([
      header('PaxHeaders/x', pax.length, 'x'),
      pad(pax),
      header('x', 0), // the PAX size (1500) wins over this 0
      pad(data),
      Buffer.alloc(512),
      header('gnu.img', data.length, '0', { base256: true, magic: 'ustar  \0' }),
      pad(data),
      header('dir/', 4096, '5'),
      END,
    ]);
    expect((await walk(bytes)).problem).toBeUndefined();
    // Without the PAX header, the 1500 bytes would be read as a header: refused.
    expect((await walk(bytes.subarray(1024))).problem).toMatch(/no valid tar header at byte 512/);
  });

  it.each([
    ['a bad checksum', () => { const h = header('a', 1); h[0] = 0x62; return Buffer.concat([h, pad(Buffer.from('x')), END]); }, /no valid tar header at byte 0 \(checksum mismatch\)/],
    ['a v7 header (no magic)', () => Buffer.concat([header('a', 1, '0', { magic: '\0\0\0\0\0\0\0\0' }), pad(Buffer.from('x')), END]), /unknown format/],
    ['no end marker', () => Buffer.concat([header('a', 1), pad(Buffer.from('x'))]), /^truncated: no end-of-archive marker/],
    ['one zero block only', () => Buffer.concat([header('a', 1), pad(Buffer.from('x')), Buffer.alloc(512)]), /^truncated: no end-of-archive marker/],
    ['only zero blocks', () => Buffer.alloc(4096), /^no entries$/],
    ['a huge PAX header', () => Buffer.concat([header('p', 5 * 1024 * 1024, 'x'), END]), /extended header at byte 0 is 5242880 bytes/],
    ['a PAX size that is no number', () => { const p = Buffer.from(paxRecord('size', '-1')); return Buffer.concat([header('p', p.length, 'x'), pad(p), header('a', 0), END]); }, /invalid member size/],
    ['a size that is no octal number', () => { const h = header('a', 0); h.write('9999', 124, 'latin1'); h.fill(0x20, 148, 156); let s = 0; for (const b of h) s += b; h.write(`${s.toString(8).padStart(6, '0')}\0 `, 148, 'latin1'); return Buffer.concat([h, END]); }, /invalid member size in the tar header at byte 0/],
  ])('refuses %s', async (_what, make, msg) => {
    expect((await walk(make())).problem).toMatch(msg);
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
