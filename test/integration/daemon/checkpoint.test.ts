/**
 * The checkpoint endpoint through the whole daemon: the built nodelet runs a static pod on
 * the test CRI server (which writes real tar archives), serves HTTPS with its self-signed
 * certificate from --cert-dir, authenticates a client certificate against clientCAFile,
 * writes 0600 archives, applies --checkpoint-retention, lists them on GET /checkpoints;
 * `nodelet checkpoint inspect` reads one back.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeNode, sleeperManifest, type FakeNode } from '../../helpers/fake-node.js';
import { eventually, runNodelet } from '../../helpers/nodelet.js';

let node: FakeNode;
let dir: string;

beforeAll(async () => {
  node = await startFakeNode({ manifests: { 'app.yaml': sleeperManifest('app', 'shop') }, client: { cn: 'forensics', orgs: ['ops'] }, args: ['--checkpoint-retention', '2'] });
  dir = node.dir;
  await node.podsRunning(1);
});

afterAll(() => node?.close());


describe('POST /checkpoint through the daemon', () => {
  it('serves with a self-signed certificate generated into <root-dir>/pki (key 0600), and refuses a client without a certificate', async () => {
    expect(fs.statSync(path.join(dir, 'root', 'pki', 'kubelet.key')).mode & 0o777).toBe(0o600);
    const r = await node.https('/checkpoint/shop/app-n1/web', { method: 'POST', anonymous: true });
    expect(r.status).toBe(401);
  });

  it('writes 0600 tar archives, keeps the newest --checkpoint-retention of them, lists them, and inspect reads one', async () => {
    const archives: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await node.https('/checkpoint/shop/app-n1/web', { method: 'POST' });
      expect(r.status).toBe(200);
      expect(r.headers['content-type']).toMatch(/^application\/json/);
      const body = r.json() as { items: string[] };
      expect(body.items).toHaveLength(1);
      archives.push(body.items[0]!);
      expect(path.dirname(body.items[0]!)).toBe(path.join(dir, 'root', 'checkpoints'));
      expect(path.basename(body.items[0]!)).toMatch(/^checkpoint-app-n1_shop-web-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)(-\d+)?\.tar$/);
      expect(fs.statSync(body.items[0]!).mode & 0o777).toBe(0o600);
    }
    expect(new Set(archives).size).toBe(3);
    expect(fs.statSync(path.join(dir, 'root', 'checkpoints')).mode & 0o777).toBe(0o700);
    // Retention 2: the oldest is gone, the two newest stay.
    await eventually(() => !fs.existsSync(archives[0]!), 5000);
    expect(fs.existsSync(archives[1]!) && fs.existsSync(archives[2]!)).toBe(true);

    const list = await node.https('/checkpoints');
    expect(list.status).toBe(200);
    const items = (list.json() as { items: { path: string; pod: string; namespace: string; container: string; sha256: string; size: number }[] }).items;
    expect(items.map((i) => i.path).sort()).toEqual([archives[1], archives[2]].sort());
    expect(items[0]).toMatchObject({ pod: 'app-n1', namespace: 'shop', container: 'web' });
    expect(items[0]!.sha256).toMatch(/^[0-9a-f]{64}$/);

    const text = await runNodelet(['checkpoint', 'inspect', archives[2]!]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^pod:\s+app-n1$/m);
    expect(text.stdout).toMatch(/^namespace:\s+shop$/m);
    expect(text.stdout).toMatch(/^container:\s+web$/m);
    const json = await runNodelet(['checkpoint', 'inspect', '-o', 'json', archives[2]!]);
    const d = JSON.parse(json.stdout) as { sha256: string; size: number; entries: { name: string }[] };
    expect(d.sha256).toBe(items.find((i) => i.path === archives[2])!.sha256);
    expect(d.size).toBe(fs.statSync(archives[2]!).size);
    expect(d.entries.length).toBeGreaterThan(0);
  });

  it('five checkpoints within one second with --checkpoint-retention 2: five distinct paths, each there when answered, the 2 newest kept', async () => {
    // Start at the top of a second so the five share it, as an attacker's burst would.
    await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 5));
    const answered: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await node.https('/checkpoint/shop/app-n1/web', { method: 'POST' });
      expect(r.status).toBe(200);
      const p = (r.json() as { items: string[] }).items[0]!;
      expect(fs.existsSync(p), `answer ${i + 1}: ${p} exists`).toBe(true);
      answered.push(p);
    }
    expect(new Set(answered).size).toBe(5);
    const stamps = new Set(answered.map((p) => /(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)/.exec(p)![1]));
    expect(stamps.size, 'the burst fell within one or two seconds').toBeLessThanOrEqual(2);
    expect(fs.readdirSync(path.join(dir, 'root', 'checkpoints')).sort()).toEqual(answered.slice(-2).map((p) => path.basename(p)).sort());
  });

  it('checkpoint inspect names the file it cannot read', async () => {
    const bogus = path.join(dir, 'not-a-tar.tar');
    fs.writeFileSync(bogus, 'hello');
    const r = await runNodelet(['checkpoint', 'inspect', bogus]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(bogus);
    const missing = await runNodelet(['checkpoint', 'inspect', path.join(dir, 'nope.tar')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('nope.tar');
  });
});
