/**
 * A runtime that answers CheckpointContainer OK but leaves a bad archive, through the
 * whole daemon: the built nodelet on the test CRI server, HTTPS with a client certificate.
 * A truncated archive (a real tar cut in the middle of a member), an empty file, bytes
 * that are no tar, or no file at all are each answered 500 with the reason, and nothing is
 * left in <root-dir>/checkpoints; a whole archive afterwards is answered 200 and kept.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeNode, sleeperManifest, type FakeNode } from '../../helpers/fake-node.js';

let node: FakeNode;
let dir: string;

beforeAll(async () => {
  node = await startFakeNode({ manifests: { 'app.yaml': sleeperManifest('app', 'shop') }, client: { cn: 'forensics', orgs: ['ops'] } });
  dir = node.dir;
  await node.podsRunning(1);
});

afterAll(() => node?.close());

const checkpoint = () => node.https(`/checkpoint/shop/app-n1/web`, { method: 'POST' });
const archives = () => (fs.existsSync(path.join(dir, 'root', 'checkpoints')) ? fs.readdirSync(path.join(dir, 'root', 'checkpoints')) : []);

describe('checkpoint archives are verified whole before the 200', () => {
  it.each([
    ['truncated', /truncated: the archive ends inside a member or block/],
    ['empty', /empty file/],
    ['garbage', /is not a readable tar archive/],
    ['none', /left no archive at/],
  ] as const)('a %s archive is 500 with the reason and removed', async (kind, reason) => {
    node.cri.checkpointArchive = kind;
    const r = await checkpoint();
    expect(r.status).toBe(500);
    expect(r.body).toMatch(reason);
    expect(archives()).toEqual([]);
  });

  it('a whole archive afterwards is 200 and kept', async () => {
    node.cri.checkpointArchive = 'whole';
    const r = await checkpoint();
    expect(r.status).toBe(200);
    const file = (r.json() as { items: string[] }).items[0]!;
    expect(archives()).toEqual([path.basename(file)]);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
  });
});
