/**
 * Image garbage collection: the pure decisions (which images, in which order, thresholds,
 * ages, pins, use) as tables, then the manager on a fake runtime and a virtual clock:
 * what is removed and what stays, failures, events, and the records across a restart.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log.js';
import type { EventSink } from '../../../src/events.js';
import {
  containerImageRefs,
  decodeRecords,
  detectImages,
  encodeRecords,
  evictionOrder,
  IMAGE_RECORDS_FILE,
  imageGcEnabled,
  ImageManager,
  imagesInUse,
  imagesToRemove,
  spaceToFree,
  type Candidate,
  type ImageGcPolicy,
  type ImageGcRuntime,
  type ImageRecord,
} from '../../../src/pods/images/image-gc.js';
import type { Container, Image } from '../../../src/runtime/types.js';
import { NodeletError } from '../../../src/errors.js';
import { VirtualClock } from '../../helpers/clock.js';

const MIN = 60_000;
const img = (id: string, size = 100, o: Partial<Image> = {}): Image => ({ id, repoTags: [`docker.io/x/${id}:latest`], repoDigests: [], size, uid: null, username: '', pinned: false, ...o });
const rec = (firstDetected: number, lastUsed?: number, size = 100, pinned = false): ImageRecord => ({ firstDetected, lastUsed, size, pinned });
const cand = (id: string, r: ImageRecord): Candidate => ({ id, ...r });
const ids = (cs: readonly { id: string }[]) => cs.map((c) => c.id);

describe('in use', () => {
  it('an image is in use when a container names its ID, a tag or a digest', () => {
    const images = [img('sha256:a'), img('sha256:b', 1, { repoTags: ['docker.io/local/b:1'] }), img('sha256:c', 1, { repoDigests: ['docker.io/local/c@sha256:cc'] }), img('sha256:d')];
    expect([...imagesInUse(images, ['sha256:a', 'docker.io/local/b:1', 'docker.io/local/c@sha256:cc', ''])].sort()).toEqual(['sha256:a', 'sha256:b', 'sha256:c']);
  });

  it("a container's refs: image_ref, image_id and its image spec", () => {
    const c = { imageRef: 'sha256:a', imageId: 'sha256:b', image: { image: 'docker.io/x/c:1' } } as Container;
    expect(containerImageRefs([c, { ...c, imageId: '', image: null } as unknown as Container])).toEqual(['sha256:a', 'sha256:b', 'docker.io/x/c:1', 'sha256:a']);
  });
});

describe('detection', () => {
  it('new images first detected now, used ones last used now, the rest keep their times, gone ones dropped', () => {
    const prev = new Map([
      ['a', rec(1, 5)],
      ['b', rec(2, undefined)],
      ['gone', rec(3, 3)],
    ]);
    const next = detectImages(prev, [img('a', 10), img('b', 20, { pinned: true }), img('new', 30)], new Set(['b']), 100);
    expect(Object.fromEntries(next)).toEqual({
      a: rec(1, 5, 10),
      b: rec(2, 100, 20, true),
      new: rec(100, undefined, 30),
    });
  });
});

describe('eviction order', () => {
  it('unused and unpinned only; never used first, then least recently used, ties by first detection', () => {
    const records = new Map([
      ['used-long-ago', rec(1, 10)],
      ['never-used-late', rec(5)],
      ['never-used-early', rec(2)],
      ['used-recently', rec(1, 50)],
      ['in-use', rec(0, 99)],
      ['pinned', rec(0, undefined, 100, true)],
      ['same-use-later', rec(3, 10)],
    ]);
    expect(ids(evictionOrder(records, new Set(['in-use'])))).toEqual(['never-used-early', 'never-used-late', 'used-long-ago', 'same-use-later', 'used-recently']);
  });
});

describe('space to free (the high and low thresholds)', () => {
  const policy = { highThresholdPercent: 85, lowThresholdPercent: 80 };
  it.each([
    ['below the high threshold: nothing', { capacityBytes: 1000, availableBytes: 160 }, undefined],
    ['at the high threshold: down to the low one', { capacityBytes: 1000, availableBytes: 150 }, { usagePercent: 85, bytesToFree: 50 }],
    ['full', { capacityBytes: 1000, availableBytes: 0 }, { usagePercent: 100, bytesToFree: 200 }],
    ['available above capacity counts as empty', { capacityBytes: 1000, availableBytes: 5000 }, undefined],
    ['integer percentages as the kubelet: 100 − ⌊15.1⌋, so 84.9% used counts as 85%', { capacityBytes: 1000, availableBytes: 151 }, { usagePercent: 85, bytesToFree: 49 }],
  ])('%s', (_n, fsUsage, want) => {
    expect(spaceToFree(fsUsage, policy)).toEqual(want);
  });

  it('thresholds 1 and 0 free everything used on the filesystem', () => {
    expect(spaceToFree({ capacityBytes: 10 * 2 ** 40, availableBytes: 4 * 2 ** 40 }, { highThresholdPercent: 1, lowThresholdPercent: 0 })).toEqual({ usagePercent: 60, bytesToFree: 6 * 2 ** 40 });
  });

  it('a capacity of 0 is the InvalidDiskCapacity error', () => {
    expect(() => spaceToFree({ capacityBytes: 0, availableBytes: 0 }, policy)).toThrow(expect.objectContaining({ message: 'invalid capacity 0 on image filesystem', details: { reason: 'InvalidDiskCapacity' } }));
  });
});

describe('images to remove', () => {
  const now = 100 * MIN;
  const policy = { minAgeMs: 2 * MIN, maxAgeMs: 0 };
  const order = [
    cand('oldest', rec(0, undefined, 30)),
    cand('too-young', rec(now - MIN, undefined, 1000)),
    cand('old', rec(0, 10 * MIN, 30)),
    cand('newer', rec(0, 50 * MIN, 30)),
  ];

  it('for space: in eviction order, skipping images younger than imageMinimumGCAge, until the bytes are freed', () => {
    expect(ids(imagesToRemove(order, now, policy, 50).forSpace)).toEqual(['oldest', 'old']);
    expect(ids(imagesToRemove(order, now, policy, 1).forSpace)).toEqual(['oldest']);
    expect(ids(imagesToRemove(order, now, policy, 10_000).forSpace)).toEqual(['oldest', 'old', 'newer']);
    expect(ids(imagesToRemove(order, now, policy, 0).forSpace)).toEqual([]);
    expect(imagesToRemove(order, now, policy, 10_000).byAge).toEqual([]);
  });

  it('an image exactly imageMinimumGCAge old may go; one used at or after now may not', () => {
    const c = [cand('edge', rec(now - 2 * MIN)), cand('future', rec(0, now))];
    expect(ids(imagesToRemove(c, now, policy).forSpace)).toEqual(['edge']);
  });

  it('imageMaximumGCAge: every unused image not used for longer (never used: since first detected), whatever the space', () => {
    const r = imagesToRemove(order, now, { minAgeMs: 2 * MIN, maxAgeMs: 60 * MIN }, 0);
    expect(ids(r.byAge)).toEqual(['oldest', 'old']);
    expect(ids(imagesToRemove(order, now, { minAgeMs: 2 * MIN, maxAgeMs: 60 * MIN }).forSpace)).toEqual(['newer']);
    // Exactly the maximum age is not older than it.
    expect(ids(imagesToRemove([cand('x', rec(now - 60 * MIN))], now, { minAgeMs: 0, maxAgeMs: 60 * MIN }).byAge)).toEqual([]);
  });

  it('collection is off only with the high threshold at 100 and no maximum age', () => {
    const p = (high: number, maxAgeMs: number): ImageGcPolicy => ({ highThresholdPercent: high, lowThresholdPercent: 80, minAgeMs: 0, maxAgeMs });
    expect([imageGcEnabled(p(100, 0)), imageGcEnabled(p(99, 0)), imageGcEnabled(p(100, 1))]).toEqual([false, true, true]);
  });
});

describe('records file', () => {
  it('round-trips first detection and last use', () => {
    const r = new Map([
      ['sha256:a', rec(Date.UTC(2026, 0, 1), Date.UTC(2026, 0, 2))],
      ['sha256:b', rec(Date.UTC(2026, 0, 3))],
    ]);
    expect(Object.fromEntries(decodeRecords(encodeRecords(r)))).toEqual({ 'sha256:a': { firstDetected: Date.UTC(2026, 0, 1), lastUsed: Date.UTC(2026, 0, 2) }, 'sha256:b': { firstDetected: Date.UTC(2026, 0, 3), lastUsed: undefined } });
  });

  it.each([
    ['not JSON', '{', /^not JSON/],
    ['another kind', '{"kind":"X","images":{}}', /expected \{"kind":"NodeletImageRecords"/],
    ['a bad time', '{"kind":"NodeletImageRecords","images":{"a":{"firstDetected":"yesterday"}}}', /images\["a"\]\.firstDetected: not an RFC 3339 UTC time/],
    ['an entry that is no object', '{"kind":"NodeletImageRecords","images":{"a":1}}', /images\["a"\]: not an object/],
  ])('refuses %s, naming it', (_n, text, re) => {
    expect(() => decodeRecords(text)).toThrow(re);
  });
});

// ------------------------------------------------------------------ the manager

class FakeRuntime implements ImageGcRuntime {
  images = new Map<string, Image>();
  containers: Container[] = [];
  sandboxImage = 'docker.io/local/pause:latest';
  failRemove = new Set<string>();
  removed: string[] = [];
  capacity = 1000;
  available = 100;

  add(...list: Image[]) {
    for (const i of list) this.images.set(i.id, i);
  }
  async listImages() {
    return [...this.images.values()];
  }
  async removeImage(id: string) {
    if (this.failRemove.has(id)) throw new NodeletError('INTERNAL', `image ${id} is busy`);
    this.removed.push(id);
    this.images.delete(id);
  }
  async listContainers() {
    return this.containers;
  }
  async imageStatus(name: string) {
    return [...this.images.values()].find((i) => i.repoTags.includes(name) || i.id === name);
  }
  async status() {
    return { conditions: [], info: { config: JSON.stringify({ sandboxImage: this.sandboxImage }) } };
  }
  async imageFsInfo() {
    return ['/var/lib/containerd/snapshots'];
  }
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function setup(policy: Partial<ImageGcPolicy> = {}, rootDir?: string) {
  const root = rootDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-imagegc-'));
  if (!rootDir) {
    dirs.push(root);
    fs.mkdirSync(path.join(root, 'image_manager'), { mode: 0o700 });
  }
  const clock = new VirtualClock();
  const rt = new FakeRuntime();
  const events: [string, string, string][] = [];
  const sink: EventSink = { emit: (_ref, type, reason, message) => events.push([type, reason, message]) };
  const statfsDirs: string[] = [];
  const make = (r: FakeRuntime = rt, c: VirtualClock = clock) =>
    new ImageManager({
      runtime: r,
      policy: { highThresholdPercent: 85, lowThresholdPercent: 80, minAgeMs: 2 * MIN, maxAgeMs: 0, ...policy },
      rootDir: root,
      clock: c,
      logger: silentLogger(),
      events: sink,
      nodeName: 'n1',
      statfs: async (dir) => (statfsDirs.push(dir), { blocks: r.capacity, bsize: 1, bavail: r.available }),
    });
  return { root, clock, rt, events, statfsDirs, make };
}

const pause = img('sha256:pause', 700, { repoTags: ['docker.io/local/pause:latest'] });
const busybox = img('sha256:busybox', 800, { repoTags: ['docker.io/local/busybox:latest'] });
const running = { id: 'c1', imageRef: 'sha256:busybox', imageId: '', image: { image: 'docker.io/local/busybox:latest' } } as Container;

describe('ImageManager', () => {
  it('over the high threshold: removes unused images old enough, least recently used first; the sandbox image and images in use stay', async () => {
    const { rt, clock, make, events, statfsDirs } = setup();
    rt.add(pause, busybox, img('sha256:old', 40), img('sha256:older', 30));
    rt.containers = [running];
    const gc = make();
    // First turn: every image is new (younger than imageMinimumGCAge): nothing goes, and that is a failure to free.
    const first = await gc.syncOnce();
    expect(first.removed).toEqual([]);
    expect(first.space).toEqual({ usagePercent: 90, bytesToFree: 100, freed: 0 });
    expect(events).toEqual([['Warning', 'FreeDiskSpaceFailed', 'Failed to garbage collect required amount of images. Attempted to free 100 bytes, but only found 0 bytes eligible to free.']]);
    expect(statfsDirs).toEqual(['/var/lib/containerd/snapshots']);
    clock.t += 3 * MIN;
    rt.available = 100;
    const second = await gc.syncOnce();
    // Both unused images (never used; ties by first detection, then ID) are needed for 100 bytes... and only 70 are there.
    expect(second.removed.map((r) => r.id).sort()).toEqual(['sha256:old', 'sha256:older']);
    expect([...rt.images.keys()].sort()).toEqual(['sha256:busybox', 'sha256:pause']);
    // A second failure in a row: the kubelet's ImageGCFailed too.
    expect(events.map((e) => e[1])).toEqual(['FreeDiskSpaceFailed', 'FreeDiskSpaceFailed', 'ImageGCFailed']);
  });

  it('stops once enough is freed, and goes on past a removal that fails', async () => {
    const { rt, clock, make } = setup();
    rt.add(img('sha256:a', 60), img('sha256:b', 60), img('sha256:c', 60));
    const gc = make();
    await gc.syncOnce();
    clock.t += 3 * MIN;
    rt.available = 140; // 86% used: free 60 bytes down to 80%
    rt.failRemove.add('sha256:a');
    const out = await gc.syncOnce();
    expect(out.removed.map((r) => r.id)).toEqual(['sha256:b']);
    expect(out.error).toMatch(/^wanted to free 60 bytes, but freed 60 bytes space with errors in image deletion: sha256:a: image sha256:a is busy$/);
    expect([...rt.images.keys()]).toEqual(['sha256:a', 'sha256:c']);
  });

  it('under the high threshold nothing is removed; the list for the node status is largest first', async () => {
    const { rt, clock, make } = setup();
    rt.add(img('sha256:small', 1), img('sha256:big', 900));
    rt.available = 500;
    const gc = make();
    await gc.syncOnce();
    clock.t += 10 * MIN;
    expect((await gc.syncOnce()).removed).toEqual([]);
    expect(gc.images().map((i) => i.id)).toEqual(['sha256:big', 'sha256:small']);
  });

  it('pinned images are never removed', async () => {
    const { rt, clock, make } = setup({ highThresholdPercent: 1, lowThresholdPercent: 0 });
    rt.add(img('sha256:pinned', 10, { pinned: true }), img('sha256:free', 10));
    const gc = make();
    await gc.syncOnce();
    clock.t += 3 * MIN;
    await gc.syncOnce();
    expect([...rt.images.keys()]).toEqual(['sha256:pinned']);
  });

  it('imageMaximumGCAge removes an image unused for longer, across a restart (the records file), and keeps one in use', async () => {
    const { rt, clock, make, root } = setup({ highThresholdPercent: 100, lowThresholdPercent: 80, minAgeMs: MIN, maxAgeMs: 10 * MIN });
    rt.add(pause, busybox, img('sha256:stale', 10));
    rt.containers = [running];
    const t0 = clock.t;
    await make().syncOnce();
    const saved = JSON.parse(fs.readFileSync(path.join(root, IMAGE_RECORDS_FILE), 'utf8'));
    expect(saved.images['sha256:stale']).toEqual({ firstDetected: new Date(t0).toISOString() });
    expect(saved.images['sha256:busybox']).toEqual({ firstDetected: new Date(t0).toISOString(), lastUsed: new Date(t0).toISOString() });
    expect(fs.statSync(path.join(root, IMAGE_RECORDS_FILE)).mode & 0o777).toBe(0o600);
    // "Restart": a new manager 8 min later; 3 min after that the image is 11 min unused.
    clock.t = t0 + 8 * MIN;
    const again = make();
    expect((await again.syncOnce()).removed).toEqual([]);
    clock.t = t0 + 11 * MIN;
    expect((await again.syncOnce()).removed).toEqual([{ id: 'sha256:stale', reason: 'age', size: 10 }]);
    expect([...rt.images.keys()].sort()).toEqual(['sha256:busybox', 'sha256:pause']);
    // Space collection is off (high threshold 100): the filesystem was never read.
  });

  it('a corrupt records file is logged and started afresh, then rewritten', async () => {
    const { rt, make, root } = setup();
    fs.writeFileSync(path.join(root, IMAGE_RECORDS_FILE), '{"kind":"NodeletImageRecords","images":{"a":{"firstDetected":1}}}');
    rt.add(img('sha256:a'));
    rt.available = 900;
    const out = await make().syncOnce();
    expect(out.error).toBeUndefined();
    expect(Object.keys(JSON.parse(fs.readFileSync(path.join(root, IMAGE_RECORDS_FILE), 'utf8')).images)).toEqual(['sha256:a']);
  });

  it('off with the high threshold at 100 and no maximum age: images are listed, none removed', async () => {
    const { rt, clock, make, statfsDirs } = setup({ highThresholdPercent: 100, lowThresholdPercent: 0 });
    rt.add(img('sha256:a'));
    rt.available = 0;
    const gc = make();
    await gc.syncOnce();
    clock.t += 60 * MIN;
    expect((await gc.syncOnce()).removed).toEqual([]);
    expect(statfsDirs).toEqual([]);
    expect(gc.images()).toHaveLength(1);
  });

  it('a runtime that fails the listing: the turn fails, logged, nothing removed, the last list kept', async () => {
    const { rt, make } = setup();
    rt.add(img('sha256:a'));
    const gc = make();
    await gc.syncOnce();
    rt.listImages = async () => {
      throw new NodeletError('UNAVAILABLE', 'runtime down');
    };
    const out = await gc.syncOnce();
    expect(out.error).toBe('runtime down');
    expect(gc.images().map((i) => i.id)).toEqual(['sha256:a']);
  });
});
