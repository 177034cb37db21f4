/**
 * kill -9 at chosen moments, not random ones: during an image pull, and during a state
 * write. The built nodelet runs standalone on the test CRI server.
 *
 * - During a pull: the CRI server holds PullImage; once it has the call and nodelet's
 *   `image_manager/pulling` intent exists, nodelet gets SIGKILL.
 * - During a write: nodelet runs under strace, which sends SIGKILL at the syscall entry
 *   (strace -e inject=<syscall>:signal=SIGKILL -P <the temp file of allocated_pods_state>):
 *   at the rename of the complete temp file, then at the first write into it.
 * - A file torn by the test itself (a disk that lost the end of a write): truncated
 *   records and a half-written temp file.
 *
 * After each kill: every file under the root dir is whole (each parsed by the format it
 * has), any temp file is the one expected, the lock is free. At the next start: the
 * interrupted pull, the leftover temp file, the corrupt files are each logged with the
 * image or the file's path, nothing of it is fatal, and the pods run.
 */
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { PodList } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAllocationCheckpoint, ALLOCATED_PODS_STATE } from '../../../src/pods/sync/allocation.js';
import { decodeRecords, IMAGE_RECORDS_FILE } from '../../../src/pods/images/image-gc.js';
import { atomicTempPath, decodeDeviceCheckpoint, DEVICE_CHECKPOINT_FILE, isAtomicTempName, recordFileName } from '../../../src/system/root-dir.js';
import { sleeperManifest, startFakeNode, type FakeNode } from '../../helpers/fake-node.js';
import { eventually, startNodelet, type LogRecord, type NodeletProcess } from '../../helpers/nodelet.js';

const PULLED_IMAGE = 'docker.io/local/app:1';
let node: FakeNode;

beforeAll(async () => {
  const strace = spawnSync('strace', ['-V'], { encoding: 'utf8' });
  if (strace.status !== 0) throw new Error(`strace is required (scripts/deps.sh installs it): ${strace.error?.message ?? strace.stderr}`);
  node = await startFakeNode({ prefix: 'nodelet-crash-writes-', manifests: { 'p1.yaml': sleeperManifest('p1') } });
  await node.podsRunning(1, 40_000);
});
afterAll(async () => {
  node?.cri.release('PullImage');
  await node?.close();
});

/** Names the format of each file nodelet writes under the root dir and parses it; throws naming the file. */
function checkFile(root: string, rel: string, text: string): void {
  const json = () => JSON.parse(text) as Record<string, unknown>;
  if (rel === DEVICE_CHECKPOINT_FILE) decodeDeviceCheckpoint(text);
  else if (rel === ALLOCATED_PODS_STATE || rel === 'actuated_pods_state') decodeAllocationCheckpoint(text);
  else if (/^image_manager\/pulling\/sha256-[0-9a-f]{64}$/.test(rel)) expect(json()).toMatchObject({ kind: 'ImagePullIntent', image: expect.any(String) });
  else if (/^image_manager\/pulled\/sha256-[0-9a-f]{64}$/.test(rel)) expect(json()).toMatchObject({ kind: 'ImagePulledRecord', imageRef: expect.any(String) });
  else if (rel === IMAGE_RECORDS_FILE) decodeRecords(text);
  else if (rel === 'pki/kubelet.crt') new crypto.X509Certificate(text);
  else if (rel === 'pki/kubelet.key') crypto.createPrivateKey(text);
  // Termination-message files: created empty by nodelet, written by the container.
  else if (/^pods\/[0-9a-f-]+\/containers\/[a-z0-9-]+\/[0-9a-f]{8}$/.test(rel)) return;
  else if (/^pods\/[0-9a-f-]+\/etc-hosts$/.test(rel)) expect(text).toMatch(/localhost\n$/m);
  else throw new Error(`${path.join(root, rel)}: a file this test does not know how to check (add its format to checkFile)`);
}

/** Every file under the root dir parses whole; returns the temp files found (never parsed: nothing reads them). */
function checkRootDir(): { temps: string[]; checked: number } {
  const root = node.rootDir;
  const temps: string[] = [];
  let checked = 0;
  for (const e of fs.readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const file = path.join(e.parentPath, e.name);
    if (isAtomicTempName(e.name)) {
      temps.push(file);
      continue;
    }
    try {
      checkFile(root, path.relative(root, file), fs.readFileSync(file, 'utf8'));
    } catch (err) {
      throw new Error(`${file} is torn or not what it should be: ${(err as Error).message}`);
    }
    checked++;
  }
  return { temps: temps.sort(), checked };
}

/** The lock file is free: util-linux flock takes it without waiting. */
function lockIsFree(): boolean {
  return spawnSync('flock', ['-n', path.join(node.dir, 'lock'), 'true']).status === 0;
}

async function podUids(): Promise<Record<string, string>> {
  const res = await fetch(`http://127.0.0.1:${node.ports.readOnly}/pods`);
  return Object.fromEntries(((await res.json()) as PodList).items.map((p) => [p.metadata!.name!, p.metadata!.uid!]));
}

const allocatedFile = () => path.join(node.rootDir, ALLOCATED_PODS_STATE);
const allocatedUids = () => Object.keys(decodeAllocationCheckpoint(fs.readFileSync(allocatedFile(), 'utf8'))).sort();

async function stop(): Promise<void> {
  node.nodelet.kill('SIGTERM');
  expect(await node.nodelet.exited).toEqual({ code: 0, signal: null });
}

/** Starts nodelet under strace, SIGKILLed at the entry of the first of `syscalls` that touches `file`. */
function startKilledAt(syscalls: string[], file: string): NodeletProcess {
  const set = syscalls.join(',');
  // libuv may do file IO through io_uring (no write/rename syscall for strace to stop at): off.
  node.nodelet = startNodelet(node.args, { env: { UV_USE_IO_URING: '0' }, prefix: ['strace', '-f', '-qq', '-o', '/dev/null', '-e', `trace=${set}`, '-e', `inject=${set}:signal=SIGKILL`, '-P', file] });
  return node.nodelet;
}

/**
 * The strace'd run's end: strace exits with its tracee's SIGKILL. If the injection never
 * fired, nodelet (strace's child) is killed by its PID and the test fails saying so.
 */
async function killedByStrace(p: NodeletProcess, timeoutMs = 60_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), timeoutMs)));
  const end = await Promise.race([p.exited, late]);
  clearTimeout(timer);
  if (end === 'late') {
    const children = fs.readFileSync(`/proc/${p.pid}/task/${p.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    for (const pid of children) process.kill(Number(pid), 'SIGKILL');
    await p.exited;
    throw new Error(`strace did not kill nodelet within ${timeoutMs} ms (the syscall it waited for never came); nodelet's log:\n${p.stdout.slice(-4000)}`);
  }
  expect(end).toEqual({ code: null, signal: 'SIGKILL' });
}

const warned = (p: NodeletProcess, pred: (r: LogRecord) => boolean) => p.waitFor((r) => r.level === 'warn' && pred(r), 30_000);

describe('kill -9 during an image pull', () => {
  it('leaves whole files and a free lock; the next start reports the interrupted pull, pulls again, the pod runs', async () => {
    node.cri.allowPull(PULLED_IMAGE);
    node.cri.hold('PullImage', 1);
    fs.writeFileSync(path.join(node.manifests, 'puller.yaml'), sleeperManifest('puller').replace('docker.io/local/busybox:latest', PULLED_IMAGE));
    const intent = path.join(node.rootDir, 'image_manager/pulling', recordFileName(PULLED_IMAGE));
    await eventually(() => node.cri.held('PullImage') === 1 && fs.existsSync(intent), 20_000, 20);
    const pid = node.nodelet.pid;
    node.nodelet.kill('SIGKILL');
    expect(await node.nodelet.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(fs.existsSync(`/proc/${pid}`)).toBe(false);

    const after = checkRootDir();
    expect(after.temps).toEqual([]);
    expect(after.checked).toBeGreaterThanOrEqual(6); // device checkpoint, 2 pod records, intent, cert, key, ...
    expect(JSON.parse(fs.readFileSync(intent, 'utf8'))).toMatchObject({ kind: 'ImagePullIntent', image: PULLED_IMAGE });
    expect(lockIsFree()).toBe(true);
    // The held call went with its client: it never ran, so the image is still absent.
    await eventually(() => node.cri.held('PullImage') === 0, 5_000, 20);
    expect([...node.cri.images.values()].some((i) => i.repoTags.includes(PULLED_IMAGE))).toBe(false);

    const p = node.nodelet = startNodelet(node.args);
    const rec = await warned(p, (r) => r.image === PULLED_IMAGE && /was interrupted/.test(r.msg));
    expect(rec).toMatchObject({ component: 'root-dir', file: intent });
    await node.podsRunning(2, 40_000);
    expect(node.cri.callsOf('PullImage').map((c) => (c.request.image as { image: string }).image)).toEqual([PULLED_IMAGE, PULLED_IMAGE]);
    expect(fs.readdirSync(path.dirname(intent))).toEqual([]);
    const imageId = [...node.cri.images.values()].find((i) => i.repoTags.includes(PULLED_IMAGE))!.id;
    const pulled = path.join(node.rootDir, 'image_manager/pulled', recordFileName(imageId));
    expect(JSON.parse(fs.readFileSync(pulled, 'utf8'))).toMatchObject({ kind: 'ImagePulledRecord', imageRef: imageId });
    expect(checkRootDir().temps).toEqual([]);
  });
});

describe('kill -9 during a state write (strace: SIGKILL at the syscall)', () => {
  it('at the rename of allocated_pods_state: the file keeps its previous content; the next start removes the temp file and records the pod', async () => {
    const prev = fs.readFileSync(allocatedFile(), 'utf8');
    const before = allocatedUids();
    await stop();
    fs.writeFileSync(path.join(node.manifests, 'p2.yaml'), sleeperManifest('p2'));
    const tmp = atomicTempPath(allocatedFile());
    await killedByStrace(startKilledAt(['rename', 'renameat', 'renameat2'], tmp));

    expect(fs.readFileSync(allocatedFile(), 'utf8')).toBe(prev);
    // The temp file is whole (the new content, one more pod): only the rename was missing.
    expect(Object.keys(decodeAllocationCheckpoint(fs.readFileSync(tmp, 'utf8'))).length).toBe(before.length + 1);
    expect(checkRootDir().temps).toEqual([tmp]);
    expect(lockIsFree()).toBe(true);

    const q = node.nodelet = startNodelet(node.args);
    expect(await warned(q, (r) => r.file === tmp && /a crash cut short/.test(r.msg))).toMatchObject({ component: 'root-dir' });
    await node.podsRunning(3, 40_000);
    const uids = await podUids();
    await eventually(() => allocatedUids().join() === [uids['p1-n1'], uids['p2-n1'], uids['puller-n1']].sort().join(), 20_000, 50);
    expect(checkRootDir().temps).toEqual([]);
  });

  it('at the first write into its temp file: the file keeps its previous content; the next start removes the empty temp file', async () => {
    const prev = fs.readFileSync(allocatedFile(), 'utf8');
    await stop();
    fs.writeFileSync(path.join(node.manifests, 'p3.yaml'), sleeperManifest('p3'));
    const tmp = atomicTempPath(allocatedFile());
    await killedByStrace(startKilledAt(['write', 'pwrite64', 'writev', 'pwritev', 'pwritev2'], tmp));

    expect(fs.readFileSync(allocatedFile(), 'utf8')).toBe(prev);
    expect(fs.statSync(tmp).size).toBe(0);
    expect(checkRootDir().temps).toEqual([tmp]);
    expect(lockIsFree()).toBe(true);

    const q = node.nodelet = startNodelet(node.args);
    await warned(q, (r) => r.file === tmp && /a crash cut short/.test(r.msg));
    await node.podsRunning(4, 40_000);
    const uids = await podUids();
    await eventually(() => allocatedUids().includes(uids['p3-n1']!), 20_000, 50);
    expect(checkRootDir().temps).toEqual([]);
  });
});

describe('files torn under nodelet (truncated by the test)', () => {
  it('each corrupt file is logged with its path and rebuilt, a half-written temp file is never taken for a record, the pods run', async () => {
    await stop();
    const uids = allocatedUids();
    expect(uids).toHaveLength(4);
    const root = node.rootDir;
    const pulledDir = path.join(root, 'image_manager/pulled');
    const pulled = path.join(pulledDir, fs.readdirSync(pulledDir).find((n) => n.startsWith('sha256-'))!);
    const torn = [allocatedFile(), path.join(root, DEVICE_CHECKPOINT_FILE), pulled];
    for (const f of torn) fs.truncateSync(f, Math.floor(fs.statSync(f).size / 2));
    // A temp file cut in the middle, beside a whole record: never renamed, never read.
    const actuated = path.join(root, 'actuated_pods_state');
    const actuatedBefore = fs.readFileSync(actuated, 'utf8');
    const halfTemp = atomicTempPath(actuated);
    fs.writeFileSync(halfTemp, actuatedBefore.slice(0, actuatedBefore.length >> 1));

    const p = node.nodelet = startNodelet(node.args);
    await p.waitForMsg(/nodelet is ready/, 60_000);
    for (const f of torn) expect(await warned(p, (r) => r.file === f && /corrupt/.test(r.msg)), f).toMatchObject({ component: 'root-dir' });
    await warned(p, (r) => r.file === halfTemp && /a crash cut short/.test(r.msg));
    await node.podsRunning(4, 40_000);
    expect(fs.readFileSync(actuated, 'utf8')).toBe(actuatedBefore);
    const after = checkRootDir();
    expect(after.temps).toEqual([]);
    // The allocation record rebuilt from what runs: every running pod is in it again.
    await eventually(() => allocatedUids().join() === uids.join(), 20_000, 50);
    expect(() => decodeDeviceCheckpoint(fs.readFileSync(torn[1]!, 'utf8'))).not.toThrow();
    expect(fs.existsSync(pulled)).toBe(false);
  });
});
