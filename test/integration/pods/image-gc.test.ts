/**
 * Image garbage collection on a real containerd (its own base directory): over the high
 * threshold an unused image older than imageMinimumGCAge is removed while the image a pod
 * uses and the sandbox (pause) image stay; imageMaximumGCAge removes an unused image at the
 * age it reached across a restart of nodelet (the records under the root dir), not counted
 * again from the restart. The extra images are busybox with another config (umoci), so
 * they have image IDs of their own. The 5 min period is shortened by
 * NODELET_TEST_IMAGE_GC_PERIOD.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMAGE_RECORDS_FILE } from '../../../src/pods/images/image-gc.js';
import { createCriClient } from '../../../src/runtime/cri-client.js';
import { BUSYBOX_IMAGE, ensureContainerd, PAUSE_IMAGE } from '../../helpers/containerd.js';
import { eventually, tempDir } from '../../helpers/nodelet.js';
import { busyboxPod, startPodNode, type PodNode } from './harness.js';

const DIR = '/var/lib/nodelet-dev/containerd-imagegc';
const SOCK = path.join(DIR, 'containerd.sock');
let node: PodNode | undefined;
let work: string;

beforeAll(async () => {
  const { endpoint } = await ensureContainerd({ dir: DIR });
  work = tempDir('nodelet-imagegc-images-');
  // This file's containerd as a fresh one: an earlier run stopped half-way may have left pods
  // (which hold images in use) and images (one it imported, a digest reference, or busybox
  // itself removed by a collection): its pods go, then every image but busybox and pause,
  // then the script imports what is missing again.
  const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 30_000 });
  try {
    for (const s of await cri.listPodSandbox()) {
      await cri.stopPodSandbox(s.id).catch(() => undefined);
      await cri.removePodSandbox(s.id);
    }
  } finally {
    cri.close();
  }
  const refs = execFileSync('ctr', ['--address', SOCK, '-n', 'k8s.io', 'images', 'ls', '-q'], { encoding: 'utf8' }).split('\n').filter(Boolean);
  const extra = refs.filter((r) => r !== BUSYBOX_IMAGE && r !== PAUSE_IMAGE);
  if (extra.length) execFileSync('ctr', ['--address', SOCK, '-n', 'k8s.io', 'images', 'rm', ...extra], { stdio: 'ignore' });
  await ensureContainerd({ dir: DIR });
}, 300_000);

afterAll(async () => {
  await node?.close();
  fs.rmSync(work, { recursive: true, force: true });
});

/** Imports busybox under `name` with a label of its own: a distinct image ID, layers shared. */
function importVariant(name: string): string {
  const dir = path.join(work, name.replace(/[^a-z0-9]/g, '-'));
  fs.mkdirSync(path.join(dir, 'oci'), { recursive: true });
  execFileSync('tar', ['-C', path.join(dir, 'oci'), '-xf', path.join(DIR, 'images/busybox.tar')]);
  execFileSync('umoci', ['config', '--image', `${path.join(dir, 'oci')}:latest`, '--config.label', `nodelet.test=${name}-${Date.now()}`]);
  execFileSync('umoci', ['gc', '--layout', path.join(dir, 'oci')]);
  execFileSync('tar', ['-C', path.join(dir, 'oci'), '-cf', path.join(dir, 'image.tar'), '.']);
  execFileSync('ctr', ['--address', SOCK, '-n', 'k8s.io', 'images', 'import', '--base-name', name, path.join(dir, 'image.tar')], { stdio: 'ignore' });
  return `${name}:latest`;
}

/** When nodelet first detected the image, from its records file (written at its first collection, at start). */
function firstDetected(node: PodNode, id: string): Promise<number> {
  const file = path.join(node.rootDir, IMAGE_RECORDS_FILE);
  return eventually(() => {
    const r = fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as { images: Record<string, { firstDetected: string }> }).images[id] : undefined;
    return r ? Date.parse(r.firstDetected) : undefined;
  }, 10_000, 50);
}

async function imageIds(node: PodNode): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const i of await node.cri.listImages()) for (const t of i.repoTags) out.set(t, i.id);
  return out;
}

describe('image garbage collection on containerd', () => {
  it('over imageGCHighThresholdPercent: the unused image older than imageMinimumGCAge goes; the image in use and the sandbox image stay', async () => {
    const unused = importVariant('docker.io/local/unused-a');
    node = await startPodNode({
      containerdDir: DIR,
      name: 'imagegc-a',
      config: { imageGCHighThresholdPercent: 1, imageGCLowThresholdPercent: 0, imageMinimumGCAge: '15s' },
      env: { NODELET_TEST_IMAGE_GC_PERIOD: '1s' },
      // The pod that uses busybox is there from the start: otherwise a slow start lets busybox reach the minimum age unused.
      beforeStart: async (p) => fs.writeFileSync(path.join(p.manifests, 'user.yaml'), JSON.stringify(busyboxPod('user', 'sleep 3600'))),
    });
    const before = await imageIds(node);
    expect(before.has(unused)).toBe(true);
    const detected = await firstDetected(node, before.get(unused)!);
    await eventually(async () => (await node!.pod('user'))?.status?.phase === 'Running', 30_000).catch(async (err) => {
      // Where the pod is, and what nodelet said of it: a slow machine or a refusal.
      console.log(JSON.stringify((await node!.pod('user'))?.status), node!.nodelet.stdout.split('\n').filter((l) => /user|image/.test(l)).slice(-15).join('\n'));
      throw err;
    });
    const removed = await node.nodelet.waitForMsg(/^removed image sha256:[0-9a-f]{64} \(\d+ bytes\): to free space/, 60_000);
    expect(removed.imageID).toBe(before.get(unused));
    // Not before imageMinimumGCAge (15 s: time for the pod to run on a loaded machine, or busybox, not yet in use, would be as old) from its first detection.
    expect(Date.parse(String(removed.time)) - detected).toBeGreaterThanOrEqual(15_000);
    const after = await imageIds(node);
    expect(after.has(unused)).toBe(false);
    expect(after.get(BUSYBOX_IMAGE)).toBe(before.get(BUSYBOX_IMAGE));
    expect(after.get(PAUSE_IMAGE)).toBe(before.get(PAUSE_IMAGE));
    // What it could not free (everything used on the disk, low threshold 0) is said, and the pod runs on.
    await node.nodelet.waitForMsg(/Failed to garbage collect required amount of images/, 10_000);
    expect((await node.pod('user'))?.status?.phase).toBe('Running');
    // The records name the images present (once the list after the removal is written: the
    // CI run of 1cb3144 read the file before that, with the removed image still in it), with
    // the one in use last used.
    const want = JSON.stringify([after.get(BUSYBOX_IMAGE), after.get(PAUSE_IMAGE)].sort());
    const read = () => JSON.parse(fs.readFileSync(path.join(node!.rootDir, IMAGE_RECORDS_FILE), 'utf8')) as { images: Record<string, { lastUsed?: string }> };
    await eventually(() => JSON.stringify(Object.keys(read().images).sort()) === want, 10_000, 100).catch(() => undefined);
    const records = read();
    expect(Object.keys(records.images).sort()).toEqual([after.get(BUSYBOX_IMAGE), after.get(PAUSE_IMAGE)].sort());
    expect(records.images[after.get(BUSYBOX_IMAGE)!]!.lastUsed).toBeDefined();
    await node.close();
    node = undefined;
  }, 120_000);

  it('imageMaximumGCAge: an unused image goes at the age it reached across a restart of nodelet', async () => {
    // The first case's node, when it failed before closing it: never two agents on this runtime.
    await node?.close();
    node = undefined;
    const stale = importVariant('docker.io/local/unused-b');
    const maxAgeMs = 8000;
    node = await startPodNode({
      containerdDir: DIR,
      name: 'imagegc-b',
      // Space collection off (100): only age removes.
      config: { imageGCHighThresholdPercent: 100, imageGCLowThresholdPercent: 99, imageMinimumGCAge: '1s', imageMaximumGCAge: `${maxAgeMs / 1000}s` },
      env: { NODELET_TEST_IMAGE_GC_PERIOD: '500ms' },
      // busybox stays in use by a pod from the start, or its age would remove it too (as the kubelet would).
      beforeStart: async (p) => fs.writeFileSync(path.join(p.manifests, 'keeper.yaml'), JSON.stringify(busyboxPod('keeper', 'sleep 3600'))),
    });
    await eventually(async () => (await node!.pod('keeper'))?.status?.phase === 'Running', 30_000);
    const id = (await imageIds(node)).get(stale)!;
    const detected = await firstDetected(node, id);
    // Restart half-way through its maximum age.
    await new Promise((r) => setTimeout(r, Math.max(0, detected + maxAgeMs / 2 - Date.now())));
    node.nodelet.kill('SIGTERM');
    await node.nodelet.exited;
    const restartedAt = Date.now();
    await node.restart();
    const removed = await node.nodelet.waitForMsg(/^removed image sha256:[0-9a-f]{64} \(\d+ bytes\): unused for more than imageMaximumGCAge/, 20_000);
    const removedAt = Date.now();
    expect(removed.imageID).toBe(id);
    // Counted from its first detection before the restart, not from the restart.
    expect(removedAt - detected).toBeGreaterThan(maxAgeMs);
    expect(removedAt - restartedAt).toBeLessThan(maxAgeMs);
    const after = await imageIds(node);
    expect(after.has(stale)).toBe(false);
    expect(after.has(BUSYBOX_IMAGE) && after.has(PAUSE_IMAGE)).toBe(true);
  }, 60_000);
});
