import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log.js';
import {
  decodeDeviceCheckpoint,
  deviceCheckpointChecksum,
  encodeDeviceCheckpoint,
  ensureDeviceCheckpoint,
  ensureRootDirLayout,
  ImagePullRecords,
  mergePulledRecord,
  type ImagePullCredentials,
  type ImagePulledRecord,
  imageRepository,
  recordFileName,
  ROOT_DIR_LAYOUT,
  writeFileAtomic,
  atomicTempPath,
  isAtomicTempName,
  removeRootDirTempFiles,
  DEVICE_CHECKPOINT_FILE,
  DEVICE_PLUGIN_SOCKET,
} from '../../../src/system/root-dir.js';

// Files written by real kubelets (published in vendors' documentation), read back verbatim:
// the checksum must be the one the kubelet's checkpointmanager computed.
const KUBELET_WRITTEN = [
  '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280}',
  '{"Data":{"PodDeviceEntries":[{"PodUID":"bf52b2cd-b611-4e79-86b1-280b283185c3","ContainerName":"check","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["tegra"]},"AllocResp":"Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"}],"RegisteredDevices":{"nvidia.com/gpu":["tegra"]}},"Checksum":3660592824}',
];

let dir: string;
beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'root-dir-'))));
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function warnings(): { log: ReturnType<typeof silentLogger>; msgs: string[] } {
  const msgs: string[] = [];
  const log = silentLogger();
  const wrap = (l: typeof log): typeof log =>
    new Proxy(l, {
      get(t, k) {
        if (k === 'warn') return (_o: unknown, m: string) => msgs.push(m);
        if (k === 'child') return () => wrap(l);
        return Reflect.get(t, k);
      },
    });
  return { log: wrap(log), msgs };
}

describe('device manager checkpoint (checkpointmanager checksum: FNV-32a of go-spew %#v)', () => {
  it.each(KUBELET_WRITTEN)('verifies a file a kubelet wrote: %s', (text) => {
    const data = decodeDeviceCheckpoint(text);
    expect(encodeDeviceCheckpoint(data)).toBe(text);
  });

  it.each([
    ['a flipped checksum', KUBELET_WRITTEN[0]!.replace('3952659280', '3952659281'), /checksum mismatch/],
    ['edited data', KUBELET_WRITTEN[1]!.replace('tegra"]}},', 'tegra2"]}},'), /checksum mismatch/],
    ['not JSON', '{"Data":', /not JSON/],
    ['no Data', '{"Checksum":1}', /no Data/],
    ['a bad entry', '{"Data":{"PodDeviceEntries":[{"PodUID":1}],"RegisteredDevices":{}},"Checksum":1}', /PodDeviceEntries\[0\]/],
  ])('refuses %s', (_n, text, re) => expect(() => decodeDeviceCheckpoint(text)).toThrow(re));

  it('nil and empty maps hash differently, as in Go', () => {
    expect(deviceCheckpointChecksum({ PodDeviceEntries: null, RegisteredDevices: {} })).not.toBe(deviceCheckpointChecksum({ PodDeviceEntries: null, RegisteredDevices: null }));
    const empty = encodeDeviceCheckpoint({ PodDeviceEntries: null, RegisteredDevices: {} });
    expect(JSON.parse(empty)).toEqual({ Data: { PodDeviceEntries: null, RegisteredDevices: {} }, Checksum: expect.any(Number) });
    expect(decodeDeviceCheckpoint(empty)).toEqual({ PodDeviceEntries: null, RegisteredDevices: {} });
  });

  it('creates one, keeps a valid one byte for byte, rebuilds a corrupt one with a warning', async () => {
    await ensureRootDirLayout(dir);
    const file = path.join(dir, DEVICE_CHECKPOINT_FILE);
    const { log, msgs } = warnings();
    expect(await ensureDeviceCheckpoint(dir, log)).toBe('created');
    expect(decodeDeviceCheckpoint(fs.readFileSync(file, 'utf8'))).toEqual({ PodDeviceEntries: null, RegisteredDevices: {} });
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    fs.writeFileSync(file, KUBELET_WRITTEN[1]!);
    expect(await ensureDeviceCheckpoint(dir, log)).toBe('kept');
    expect(fs.readFileSync(file, 'utf8')).toBe(KUBELET_WRITTEN[1]);
    fs.writeFileSync(file, '{"Data":{"PodDeviceEntries":nul');
    expect(await ensureDeviceCheckpoint(dir, log)).toBe('rebuilt');
    expect(msgs).toEqual([expect.stringMatching(/kubelet_internal_checkpoint is corrupt .*rebuilding it empty/)]);
    expect(() => decodeDeviceCheckpoint(fs.readFileSync(file, 'utf8'))).not.toThrow();
    expect(fs.existsSync(path.join(dir, DEVICE_PLUGIN_SOCKET))).toBe(false);
  });
});

describe('layout and atomic writes', () => {
  it('creates the kubelet\'s directories with their modes; checkpoints/ is tightened to 0700', async () => {
    fs.mkdirSync(path.join(dir, 'checkpoints'), { mode: 0o755 });
    fs.chmodSync(path.join(dir, 'checkpoints'), 0o755);
    await ensureRootDirLayout(dir);
    await ensureRootDirLayout(dir); // idempotent
    const old = process.umask();
    for (const { dir: d, mode } of ROOT_DIR_LAYOUT) {
      expect(fs.statSync(path.join(dir, d)).mode & 0o777, d).toBe(mode & ~old);
    }
    expect(fs.statSync(path.join(dir, 'checkpoints')).mode & 0o777).toBe(0o700);
  });

  it('writeFileAtomic replaces the content and leaves no temp file, with the mode asked', async () => {
    const f = path.join(dir, 'state');
    await writeFileAtomic(f, 'one', 0o640);
    await writeFileAtomic(f, 'two', 0o600);
    expect(fs.readFileSync(f, 'utf8')).toBe('two');
    expect(fs.statSync(f).mode & 0o777).toBe(0o600);
    expect(fs.readdirSync(dir)).toEqual(['state']);
  });

  it('a failed write leaves the old file and no temp file', async () => {
    const f = path.join(dir, 'state');
    await writeFileAtomic(f, 'one');
    fs.mkdirSync(path.join(dir, 'sub'));
    await expect(writeFileAtomic(path.join(dir, 'sub'), 'x')).rejects.toThrow();
    expect(fs.readdirSync(dir).sort()).toEqual(['state', 'sub']);
    expect(fs.readFileSync(f, 'utf8')).toBe('one');
  });

  it('writes through the one temp name .<name>.tmp; concurrent writes of a path are serialized, the last one wins', async () => {
    const f = path.join(dir, 'state');
    expect(atomicTempPath(f)).toBe(path.join(dir, '.state.tmp'));
    // A temp file a crashed write left (even a half-written one) is replaced, never renamed as is.
    fs.writeFileSync(atomicTempPath(f), '{"half":');
    const big = (c: string) => c.repeat(256 * 1024);
    await Promise.all([writeFileAtomic(f, big('a')), writeFileAtomic(f, big('b')), writeFileAtomic(f, big('c'))]);
    expect(fs.readFileSync(f, 'utf8')).toBe(big('c'));
    expect(fs.readdirSync(dir)).toEqual(['state']);
  });

  it.each([
    ['.allocated_pods_state.tmp', true],
    ['.kubelet_internal_checkpoint.tmp-1234-0a1b2c3d', true],
    ['kubelet.key.4321.deadbeef.tmp', true],
    ['allocated_pods_state', false],
    ['kubelet_internal_checkpoint', false],
    ['.tmp', false],
    ['kubelet.sock', false],
    ['notes.tmp', false],
  ])('isAtomicTempName(%s) = %s', (name, want) => expect(isAtomicTempName(name)).toBe(want));

  it('removeRootDirTempFiles removes the temp files a crash left (root, device-plugins, pki, extra dirs), logs each, keeps the rest', async () => {
    await ensureRootDirLayout(dir);
    const certDir = path.join(dir, 'elsewhere');
    fs.mkdirSync(certDir);
    const leftovers = [path.join(dir, '.allocated_pods_state.tmp'), path.join(dir, DEVICE_CHECKPOINT_FILE.replace('kubelet_internal', '.kubelet_internal') + '.tmp-99-00ff00ff'), path.join(dir, 'pki', 'kubelet.key.99.00ff00ff.tmp'), path.join(certDir, '.kubelet.crt.tmp')];
    const kept = [path.join(dir, 'allocated_pods_state'), path.join(dir, DEVICE_CHECKPOINT_FILE), path.join(certDir, 'kubelet.crt')];
    for (const f of [...leftovers, ...kept]) fs.writeFileSync(f, '{"torn":');
    const { log, msgs } = warnings();
    expect((await removeRootDirTempFiles(dir, log, [certDir])).sort()).toEqual([...leftovers].sort());
    for (const f of leftovers) expect(fs.existsSync(f), f).toBe(false);
    for (const f of kept) expect(fs.existsSync(f), f).toBe(true);
    expect(msgs.sort()).toEqual(leftovers.map((f) => `removed ${f}: the temp file of a write that a crash cut short (the file it was for keeps its previous content)`).sort());
  });
});

describe('image pull records (the pull manager\'s files)', () => {
  it('names files as upstream: sha256-<sha256 of the image or ref>', () => {
    // Upstream's test data: pulling/sha256-ee81…11 holds repo.repo/test/test:v1, pulled/sha256-b3c0…64 holds testimageref.
    expect(recordFileName('repo.repo/test/test:v1')).toBe('sha256-ee81caca15454863449fb55a1d942904d56d5ed9f9b20a7cb3453944ea2c7e11');
    expect(recordFileName('testimageref')).toBe('sha256-b3c0cc4278800b03a308ceb2611161430df571ca733122f0a40ac8b9792a9064');
  });

  it.each([
    ['docker.io/library/busybox:1.36', 'docker.io/library/busybox'],
    ['localhost:5000/app@sha256:abc', 'localhost:5000/app'],
    ['localhost:5000/app', 'localhost:5000/app'],
  ])('imageRepository(%s)', (i, r) => expect(imageRepository(i)).toBe(r));

  it('intent before the pull, record after, intent gone; never a secret', async () => {
    await ensureRootDirLayout(dir);
    const records = new ImagePullRecords(dir, silentLogger(), () => new Date('2026-01-02T03:04:05.678Z'));
    await records.pulling('docker.io/local/busybox:latest');
    const intent = path.join(dir, 'image_manager/pulling', recordFileName('docker.io/local/busybox:latest'));
    expect(JSON.parse(fs.readFileSync(intent, 'utf8'))).toEqual({ kind: 'ImagePullIntent', apiVersion: 'kubelet.config.k8s.io/v1alpha1', image: 'docker.io/local/busybox:latest' });
    await records.pulled('docker.io/local/busybox:latest', 'sha256:1234');
    expect(fs.existsSync(intent)).toBe(false);
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'image_manager/pulled', recordFileName('sha256:1234')), 'utf8'))).toEqual({
      kind: 'ImagePulledRecord',
      apiVersion: 'kubelet.config.k8s.io/v1alpha1',
      lastUpdatedTime: '2026-01-02T03:04:05Z',
      imageRef: 'sha256:1234',
      credentialMapping: { 'docker.io/local/busybox': { nodePodsAccessible: true } },
    });
  });

  it('at start, an interrupted pull is reported and kept (the image counts as pulled, credentials unknown), a corrupt record removed', async () => {
    await ensureRootDirLayout(dir);
    const { log, msgs } = warnings();
    await new ImagePullRecords(dir, log).pulling('example.com/app:1');
    const corrupt = path.join(dir, 'image_manager/pulled/sha256-00');
    fs.writeFileSync(corrupt, '{"kind":');
    // A new process (a restart): its counters are empty, the files are what is left.
    const records = new ImagePullRecords(dir, log);
    expect(await records.recover()).toEqual(['example.com/app:1']);
    expect(fs.readdirSync(path.join(dir, 'image_manager/pulling'))).toEqual([recordFileName('example.com/app:1')]);
    expect(await records.intentExists('example.com/app:1')).toBe(true);
    expect(fs.existsSync(corrupt)).toBe(false);
    expect(msgs).toEqual(expect.arrayContaining([expect.stringMatching(/pull of image example.com\/app:1 was interrupted/), expect.stringMatching(/sha256-00 is corrupt/)]));
  });
});

describe('image pull records: credentials (KubeletEnsureSecretPulledImages)', () => {
  let dir: string;
  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-pullrec-'));
    await ensureRootDirLayout(dir);
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  const base: ImagePulledRecord = { kind: 'ImagePulledRecord', apiVersion: 'kubelet.config.k8s.io/v1alpha1', lastUpdatedTime: 'T0', imageRef: 'sha256:aa' };
  const sec = (name: string, hash: string, uid = `uid-${name}`) => ({ uid, namespace: 'team', name, credentialHash: hash });
  const repo = 'registry.example:5000/team/app';

  it.each<[string, ImagePulledRecord, ImagePullCredentials | undefined, ImagePulledRecord | 'same']>([
    ['no credentials: unchanged', base, undefined, 'same'],
    ['empty credentials: unchanged', base, {}, 'same'],
    ['first secret of a repository', base, { kubernetesSecrets: [sec('b', 'h1')] }, { ...base, lastUpdatedTime: 'T1', credentialMapping: { [repo]: { kubernetesSecrets: [sec('b', 'h1')] } } }],
    [
      'a second secret is added, sorted by namespace/name/uid',
      { ...base, credentialMapping: { [repo]: { kubernetesSecrets: [sec('b', 'h1')] } } },
      { kubernetesSecrets: [sec('a', 'h2')] },
      { ...base, lastUpdatedTime: 'T1', credentialMapping: { [repo]: { kubernetesSecrets: [sec('a', 'h2'), sec('b', 'h1')] } } },
    ],
    ['the same secret and hash: unchanged', { ...base, credentialMapping: { [repo]: { kubernetesSecrets: [sec('b', 'h1')] } } }, { kubernetesSecrets: [sec('b', 'h1')] }, 'same'],
    [
      'the same secret with a new hash replaces it',
      { ...base, credentialMapping: { [repo]: { kubernetesSecrets: [sec('b', 'h1')] } } },
      { kubernetesSecrets: [sec('b', 'h9')] },
      { ...base, lastUpdatedTime: 'T1', credentialMapping: { [repo]: { kubernetesSecrets: [sec('b', 'h9')] } } },
    ],
    [
      'node-wide access absorbs the secrets',
      { ...base, credentialMapping: { [repo]: { kubernetesSecrets: [sec('b', 'h1')] } } },
      { nodePodsAccessible: true },
      { ...base, lastUpdatedTime: 'T1', credentialMapping: { [repo]: { nodePodsAccessible: true } } },
    ],
    ['node-wide access already: a secret adds nothing', { ...base, credentialMapping: { [repo]: { nodePodsAccessible: true } } }, { kubernetesSecrets: [sec('b', 'h1')] }, 'same'],
    [
      'another repository of the same image ref gets its own mapping',
      { ...base, credentialMapping: { 'docker.io/library/app': { nodePodsAccessible: true } } },
      { kubernetesSecrets: [sec('b', 'h1')] },
      { ...base, lastUpdatedTime: 'T1', credentialMapping: { 'docker.io/library/app': { nodePodsAccessible: true }, [repo]: { kubernetesSecrets: [sec('b', 'h1')] } } },
    ],
  ])('mergePulledRecord: %s', (_n, record, creds, want) => {
    const got = mergePulledRecord(record, repo, creds, 'T1');
    if (want === 'same') expect(got).toBe(record);
    else expect(got).toEqual(want);
  });

  it('pulls by two pods with different secrets merge into one record; the secret itself is never written', async () => {
    const records = new ImagePullRecords(dir, silentLogger(), () => new Date('2026-01-02T03:04:05Z'));
    await Promise.all([
      records.pulling('registry.example:5000/team/app:v1').then(() => records.pulled('registry.example:5000/team/app:v1', 'sha256:aa', { kubernetesSecrets: [sec('b', 'h1')] }, repo)),
      records.pulling('registry.example:5000/team/app:v1').then(() => records.pulled('registry.example:5000/team/app:v1', 'sha256:aa', { kubernetesSecrets: [sec('a', 'h2')] }, repo)),
    ]);
    expect(await records.pulledRecord('sha256:aa')).toEqual({
      kind: 'ImagePulledRecord',
      apiVersion: 'kubelet.config.k8s.io/v1alpha1',
      lastUpdatedTime: '2026-01-02T03:04:05Z',
      imageRef: 'sha256:aa',
      credentialMapping: { [repo]: { kubernetesSecrets: [sec('a', 'h2'), sec('b', 'h1')] } },
    });
    // Both pulls ended: the intent is gone.
    expect(await records.intentExists('registry.example:5000/team/app:v1')).toBe(false);
  });

  it('an intent stays while another pull of the image is in flight', async () => {
    const records = new ImagePullRecords(dir, silentLogger());
    await records.pulling('x.example/app:1');
    await records.pulling('x.example/app:1');
    await records.failed('x.example/app:1');
    expect(await records.intentExists('x.example/app:1')).toBe(true);
    await records.failed('x.example/app:1');
    expect(await records.intentExists('x.example/app:1')).toBe(false);
  });

  it('a pulled record that is not one (hand-edited, foreign) is refused when read', async () => {
    const records = new ImagePullRecords(dir, silentLogger());
    expect(await records.pulledRecord('sha256:none')).toBeUndefined();
    fs.writeFileSync(path.join(dir, 'image_manager/pulled', recordFileName('sha256:bad')), JSON.stringify({ kind: 'ImagePulledRecord', imageRef: 'sha256:bad', credentialMapping: { r: { kubernetesSecrets: 'all' } } }));
    await expect(records.pulledRecord('sha256:bad')).rejects.toThrow(/is corrupt/);
  });
});
