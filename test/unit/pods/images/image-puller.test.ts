/**
 * Image pulls with pull secrets and KubeletEnsureSecretPulledImages, on an in-test image
 * service that behaves as a private registry (a pull of its images needs its credentials),
 * the real pull records in a temp root dir, and the in-memory API objects.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { VerificationPolicy } from '../../../../src/config/image-pull-credentials.js';
import { NodeletError } from '../../../../src/errors.js';
import { silentLogger } from '../../../../src/log.js';
import { hashCredential } from '../../../../src/pods/images/credentials.js';
import { ensurePodImage, type ImagePullerDeps } from '../../../../src/pods/images/image-puller.js';
import { decideAccess, requiresVerification } from '../../../../src/pods/images/pull-secrets.js';
import type { AuthConfig, Image } from '../../../../src/runtime/types.js';
import { ensureRootDirLayout, ImagePullRecords, recordFileName, type ImagePulledRecord } from '../../../../src/system/root-dir.js';
import { FakeApiObjects } from '../../../fakes/api-objects-port.js';
import { VirtualClock } from '../../../helpers/clock.js';

const IMAGE = 'registry.example:5000/team/app:v1';
const REPO = 'registry.example:5000/team/app';
const REF = 'sha256:app';
const GOOD = { username: 'robot', password: 's3cret' };

/** A registry at registry.example:5000 that wants GOOD; public images elsewhere. */
class Registry {
  readonly present = new Map<string, string>();
  readonly pulls: { image: string; auth: AuthConfig | undefined }[] = [];
  async imageStatus(image: string): Promise<Image | undefined> {
    const id = this.present.get(image);
    return id ? { id, repoTags: [image], repoDigests: [], size: 1, uid: null, username: '', pinned: false } : undefined;
  }
  async pullImage(image: string, _sb?: unknown, auth?: AuthConfig): Promise<string> {
    this.pulls.push({ image, auth });
    if (image.startsWith('registry.example:5000/') && (auth?.username !== GOOD.username || auth?.password !== GOOD.password)) {
      throw new NodeletError('INTERNAL', `failed to pull and unpack image "${image}": unexpected status code [manifests v1]: 401 Unauthorized (as ${auth?.username ?? 'anonymous'})`);
    }
    const id = image === IMAGE ? REF : `sha256:${image}`;
    this.present.set(image, id);
    return id;
  }
}

const dockerconfigjson = (user: string, pass: string, location = 'registry.example:5000') => JSON.stringify({ auths: { [location]: { auth: Buffer.from(`${user}:${pass}`).toString('base64') } } });

let dir: string;
let registry: Registry;
let objects: FakeApiObjects;
let records: ImagePullRecords;
let events: { reason: string; message: string }[];

beforeEach(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-puller-'));
  await ensureRootDirLayout(dir);
  registry = new Registry();
  objects = new FakeApiObjects(new VirtualClock());
  records = new ImagePullRecords(dir, silentLogger(), () => new Date('2026-01-02T03:04:05Z'));
  events = [];
  putPullSecret('good', dockerconfigjson(GOOD.username, GOOD.password), 'uid-good');
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function putPullSecret(name: string, doc: string, uid: string, type = 'kubernetes.io/dockerconfigjson', key = '.dockerconfigjson'): void {
  objects.putSecret('team', name, { [key]: doc }, { type });
  const stored = objects.secrets.get(`team/${name}`)!;
  objects.secrets.set(`team/${name}`, { ...stored, metadata: { ...stored.metadata, uid } });
}

const deps = (policy: VerificationPolicy = 'NeverVerifyPreloadedImages', allowlist: string[] = []): ImagePullerDeps => ({
  cri: registry,
  records,
  objects,
  verification: { policy, allowlist },
  events: { emit: (_ref, _type, reason, message) => events.push({ reason, message }) },
  log: silentLogger(),
});

const podWith = (secrets: string[], pullPolicy: Container['imagePullPolicy'] = 'IfNotPresent', image = IMAGE, annotations: Record<string, string> = {}): [Pod, Container] => {
  const c: Container = { name: 'app', image, imagePullPolicy: pullPolicy };
  return [{ metadata: { name: 'p', namespace: 'team', uid: 'pod-uid', annotations }, spec: { imagePullSecrets: secrets.map((name) => ({ name })), containers: [c] } }, c];
};
const run = <T>(f: () => Promise<T>) => f();
/** Whether it pulled (the image's status it found present is checked where it matters). */
const ensure = async (d: ImagePullerDeps, [pod, c]: [Pod, Container]) => (await ensurePodImage(d, pod, c, run)).pulled;
const reasonOf = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (err) {
    return { reason: (err as NodeletError).details.reason, message: (err as Error).message };
  }
  throw new Error('expected a failure');
};
const goodHash = hashCredential({ ...GOOD, email: '' });

describe('pulls with pull secrets', () => {
  it("passes the matching Secret's credentials as AuthConfig and records the Secret (coordinates and hash, never the secret)", async () => {
    expect(await ensure(deps(), podWith(['good']))).toBe(true);
    expect(registry.pulls).toEqual([{ image: IMAGE, auth: GOOD }]);
    const record = await records.pulledRecord(REF);
    expect(record?.credentialMapping).toEqual({ [REPO]: { kubernetesSecrets: [{ uid: 'uid-good', namespace: 'team', name: 'good', credentialHash: goodHash }] } });
    expect(fs.readFileSync(path.join(dir, 'image_manager/pulled', recordFileName(REF)), 'utf8')).not.toContain(GOOD.password);
  });

  it('tries every matching credential in order until one works (most specific location first)', async () => {
    putPullSecret('stale', dockerconfigjson('robot', 'old', 'registry.example:5000/team'), 'uid-stale');
    expect(await ensure(deps(), podWith(['good', 'stale']))).toBe(true);
    expect(registry.pulls.map((p) => p.auth)).toEqual([{ username: 'robot', password: 'old' }, GOOD]);
    expect((await records.pulledRecord(REF))?.credentialMapping?.[REPO]?.kubernetesSecrets?.map((s) => s.name)).toEqual(['good']);
  });

  it('when every credential fails, the error lists each failure', async () => {
    putPullSecret('a', dockerconfigjson('a', 'x'), 'uid-a');
    putPullSecret('b', dockerconfigjson('b', 'y'), 'uid-b');
    const r = await reasonOf(ensure(deps(), podWith(['a', 'b'])));
    expect(r.reason).toBe('ErrImagePull');
    expect(r.message).toMatch(/^failed to pull image "registry.example:5000\/team\/app:v1": \[.*401 Unauthorized \(as a\), .*401 Unauthorized \(as b\)\]$/);
    expect(await records.intentExists(IMAGE)).toBe(false);
  });

  it('a Secret that does not exist is named in one warning and the pull goes on without it (refused by the registry)', async () => {
    const r = await reasonOf(ensure(deps(), podWith(['gone', 'also-gone'])));
    expect(events).toEqual([{ reason: 'FailedToRetrieveImagePullSecret', message: 'Unable to retrieve some image pull secrets (gone, also-gone); attempting to pull the image may not succeed.' }]);
    expect(registry.pulls).toEqual([{ image: IMAGE, auth: undefined }]);
    expect(r).toMatchObject({ reason: 'ErrImagePull', message: expect.stringMatching(/401 Unauthorized \(as anonymous\)/) });
  });

  it('an API that does not answer is the same: the Secret is named, the pull goes on', async () => {
    objects.down = true;
    await reasonOf(ensure(deps(), podWith(['good'])));
    expect(events.map((e) => e.reason)).toEqual(['FailedToRetrieveImagePullSecret']);
  });

  it('a malformed .dockerconfigjson fails the pull naming the Secret, before any PullImage', async () => {
    putPullSecret('broken', '{"auths":{"registry.example:5000":{"auth":"not base64!"}}}', 'uid-broken');
    const r = await reasonOf(ensure(deps(), podWith(['broken', 'good'])));
    expect(r).toEqual({ reason: 'ErrImagePull', message: 'image pull secret "team/broken" (kubernetes.io/dockerconfigjson): its .dockerconfigjson is malformed: entry "registry.example:5000": auth is not valid base64' });
    expect(registry.pulls).toEqual([]);
  });

  it('a kubernetes.io/dockercfg Secret works too; other types and Secrets without the key are skipped', async () => {
    putPullSecret('legacy', JSON.stringify({ 'https://registry.example:5000': { auth: Buffer.from('robot:s3cret').toString('base64') } }), 'uid-legacy', 'kubernetes.io/dockercfg', '.dockercfg');
    putPullSecret('opaque', dockerconfigjson('x', 'y'), 'uid-opaque', 'Opaque');
    putPullSecret('wrongkey', dockerconfigjson('x', 'y'), 'uid-wk', 'kubernetes.io/dockerconfigjson', 'config.json');
    expect(await ensure(deps(), podWith(['opaque', 'wrongkey', 'legacy']))).toBe(true);
    expect(registry.pulls.map((p) => p.auth)).toEqual([GOOD]);
  });

  it('a static pod that names pull secrets is refused, naming the field', async () => {
    const r = await reasonOf(ensure(deps(), podWith(['good'], 'IfNotPresent', IMAGE, { 'kubernetes.io/config.source': 'file' })));
    expect(r).toEqual({ reason: 'CreateContainerConfigError', message: 'spec.imagePullSecrets: a static pod cannot refer to Secrets ("good")' });
    expect(registry.pulls).toEqual([]);
  });

  it('an invalid image name is refused, named', async () => {
    const r = await reasonOf(ensure(deps(), podWith([], 'Always', 'Registry.example:5000/Team/app')));
    expect(r.reason).toBe('InvalidImageName');
  });
});

describe('KubeletEnsureSecretPulledImages: a present image pulled with credentials', () => {
  beforeEach(async () => {
    // Pod A pulls the private image with its Secret.
    await ensure(deps(), podWith(['good']));
    registry.pulls.length = 0;
  });

  it('a pod without credentials may not use it: IfNotPresent pulls again (and is refused by the registry)', async () => {
    const r = await reasonOf(ensure(deps(), podWith([])));
    expect(registry.pulls).toEqual([{ image: IMAGE, auth: undefined }]);
    expect(r.reason).toBe('ErrImagePull');
  });

  it('with Never it is "not present", the same words as an absent image', async () => {
    const r = await reasonOf(ensure(deps(), podWith([], 'Never')));
    expect(r).toEqual({ reason: 'ErrImageNeverPull', message: `container image "${IMAGE}" is not present with pull policy of Never` });
    expect(registry.pulls).toEqual([]);
  });

  it('a pod with a wrong credential pulls with it and is refused', async () => {
    putPullSecret('wrong', dockerconfigjson('robot', 'nope'), 'uid-wrong');
    expect((await reasonOf(ensure(deps(), podWith(['wrong'])))).reason).toBe('ErrImagePull');
    expect(registry.pulls.map((p) => p.auth)).toEqual([{ username: 'robot', password: 'nope' }]);
  });

  it('the same Secret uses it without a pull', async () => {
    expect(await ensure(deps(), podWith(['good']))).toBe(false);
    expect(registry.pulls).toEqual([]);
  });

  it('another Secret with the same credential uses it without a pull, and is remembered', async () => {
    putPullSecret('copy', dockerconfigjson(GOOD.username, GOOD.password), 'uid-copy');
    expect(await ensure(deps(), podWith(['copy']))).toBe(false);
    expect(registry.pulls).toEqual([]);
    expect((await records.pulledRecord(REF))?.credentialMapping?.[REPO]?.kubernetesSecrets?.map((s) => s.name)).toEqual(['copy', 'good']);
  });

  it.each<[VerificationPolicy, string[], boolean]>([
    ['NeverVerify', [], false],
    ['NeverVerifyAllowlistedImages', ['registry.example:5000/team/*'], false],
    // As the kubelet: an exact entry (no tag allowed) is compared with the image field as written, tag included.
    ['NeverVerifyAllowlistedImages', ['registry.example:5000/team/app'], true],
    ['NeverVerifyAllowlistedImages', ['registry.example:5000/other/*'], true],
    ['AlwaysVerify', [], true],
  ])('policy %s %j: a pod without credentials must pull: %s', async (policy, allowlist, mustPull) => {
    const out = ensure(deps(policy, allowlist), podWith([]));
    if (mustPull) expect((await reasonOf(out)).reason).toBe('ErrImagePull');
    else expect(await out).toBe(false);
  });

  it('with the gate off, any pod uses it', async () => {
    const { verification: _gateOn, ...gateOff } = deps();
    expect(await ensure(gateOff, podWith([]))).toBe(false);
    expect(registry.pulls).toEqual([]);
  });
});

describe('KubeletEnsureSecretPulledImages: images that need no proof', () => {
  it('an image pulled without credentials is for every pod on the node', async () => {
    expect(await ensure(deps(), podWith([], 'IfNotPresent', 'quay.io/public/tool:1'))).toBe(true);
    expect((await records.pulledRecord('sha256:quay.io/public/tool:1'))?.credentialMapping).toEqual({ 'quay.io/public/tool': { nodePodsAccessible: true } });
    expect(await ensure(deps('AlwaysVerify'), podWith([], 'IfNotPresent', 'quay.io/public/tool:1'))).toBe(false);
  });

  it('a preloaded image (no record) is used under NeverVerifyPreloadedImages, verified under AlwaysVerify', async () => {
    registry.present.set(IMAGE, REF);
    expect(await ensure(deps(), podWith([]))).toBe(false);
    expect((await reasonOf(ensure(deps('AlwaysVerify'), podWith([])))).reason).toBe('ErrImagePull');
  });

  it('a present image used as it is comes back with the status ImageStatus answered (its user, for the container); a pulled one without', async () => {
    registry.present.set(IMAGE, REF);
    const asked: string[] = [];
    const counting = { ...registry, imageStatus: (image: string) => (asked.push(image), registry.imageStatus(image)), pullImage: registry.pullImage.bind(registry) };
    const { verification: _gateOn, ...gateOff } = deps();
    expect(await ensurePodImage({ ...gateOff, cri: counting }, ...podWith([]), run)).toEqual({ pulled: false, present: await registry.imageStatus(IMAGE) });
    expect(asked).toEqual([IMAGE]);
    expect(await ensurePodImage({ ...gateOff, cri: counting }, ...podWith([], 'Always', 'quay.io/public/tool:1'), run)).toEqual({ pulled: true });
  });

  it('an image whose pull a crash interrupted counts as pulled with unknown credentials', async () => {
    registry.present.set(IMAGE, REF);
    await new ImagePullRecords(dir, silentLogger()).pulling(IMAGE);
    const afterRestart = new ImagePullRecords(dir, silentLogger());
    await afterRestart.recover();
    expect((await reasonOf(ensurePodImage({ ...deps(), records: afterRestart }, ...podWith([]), run))).reason).toBe('ErrImagePull');
  });
});

describe('the decisions', () => {
  it.each<[VerificationPolicy, string[], string, boolean, boolean]>([
    ['NeverVerify', [], 'r.example/a', true, false],
    ['NeverVerifyPreloadedImages', [], 'r.example/a', false, false],
    ['NeverVerifyPreloadedImages', [], 'r.example/a', true, true],
    ['NeverVerifyAllowlistedImages', ['r.example/a'], 'r.example/a', true, false],
    ['NeverVerifyAllowlistedImages', ['r.example/a'], 'r.example/a:v1', true, true],
    ['NeverVerifyAllowlistedImages', ['r.example/a'], 'r.example/ab', false, true],
    ['NeverVerifyAllowlistedImages', ['r.example/*'], 'r.example/x/y', true, false],
    ['NeverVerifyAllowlistedImages', ['r.example/*'], 'r.examplex/y', true, true],
    ['AlwaysVerify', [], 'r.example/a', false, true],
  ])('requiresVerification(%s, %j, %s, pulled by the node agent: %s) = %s', (policy, allowlist, image, pulled, want) => {
    expect(requiresVerification(policy, allowlist, image, pulled)).toBe(want);
  });

  const rec = (creds: NonNullable<ImagePulledRecord['credentialMapping']>[string]): ImagePulledRecord => ({ kind: 'ImagePulledRecord', apiVersion: 'v', lastUpdatedTime: 't', imageRef: REF, credentialMapping: { [REPO]: creds } });
  const s = (name: string, hash: string) => ({ uid: `uid-${name}`, namespace: 'team', name, credentialHash: hash });
  it.each<[string, ImagePulledRecord | undefined, ReturnType<typeof s>[], Awaited<ReturnType<typeof decideAccess>>]>([
    ['no record', undefined, [], { pull: true, why: 'noRecord' }],
    ['a record for another repository', { ...rec({ nodePodsAccessible: true }), credentialMapping: { other: { nodePodsAccessible: true } } }, [], { pull: true, why: 'noCredentialsForRepository' }],
    ['node-wide', rec({ nodePodsAccessible: true }), [], { pull: false, why: 'nodePodsAccessible' }],
    ['a record without credentials (pulled in unknown circumstances)', rec({}), [s('a', 'h')], { pull: true, why: 'noMatchingSecret' }],
    ['same secret, same hash', rec({ kubernetesSecrets: [s('a', 'h')] }), [s('a', 'h')], { pull: false, why: 'secret' }],
    ['another secret, same hash: remembered', rec({ kubernetesSecrets: [s('a', 'h')] }), [s('b', 'h')], { pull: false, why: 'secret', remember: s('b', 'h') }],
    ['same secret, new content: accepted and remembered', rec({ kubernetesSecrets: [s('a', 'h')] }), [s('a', 'h2')], { pull: false, why: 'secret', remember: s('a', 'h2') }],
    ['another secret, another hash', rec({ kubernetesSecrets: [s('a', 'h')] }), [s('b', 'h2')], { pull: true, why: 'noMatchingSecret' }],
    ['an empty recorded hash never matches by hash', rec({ kubernetesSecrets: [s('a', '')] }), [s('b', '')], { pull: true, why: 'noMatchingSecret' }],
  ])('decideAccess: %s', async (_n, record, mine, want) => {
    expect(await decideAccess(record, REPO, async () => mine)).toEqual(want);
  });
});
