/**
 * Image pull secrets end to end below the pod manager: CriPodRuntime (the real CRI client
 * over gRPC) against the test CRI server acting as a private registry at
 * registry.example:5000 that refuses pulls without its credentials, the pod's Secrets from
 * the in-memory API objects, and the pull records in a temp root dir.
 */
import fs from 'node:fs';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import type { CriPodRuntime } from '../../../src/pods/cri/cri-pod-runtime.js';
import type { CriClient } from '../../../src/runtime/cri-client.js';
import { ensureRootDirLayout, ImagePullRecords } from '../../../src/system/root-dir.js';
import { silentLogger } from '../../../src/log.js';
import type { FakeRuntime } from '../../cri/fake-runtime.js';
import { FakeApiObjects } from '../../fakes/api-objects-port.js';
import { VirtualClock } from '../../helpers/clock.js';
import { podRuntimeIn, startFakeCriClient, type FakeCriClient } from '../../helpers/fake-cri-runtime.js';
import { tempDir } from '../../helpers/nodelet.js';

const IMAGE = 'registry.example:5000/team/app:v1';
const GOOD = { username: 'robot', password: 's3cret' };
const NO_AUTH_FIELDS = { auth: '', serverAddress: '', identityToken: '', registryToken: '' };

let fake: FakeCriClient | undefined;
let cri: FakeRuntime;
let client: CriClient;
let dir: string;
let objects: FakeApiObjects;
let events: { reason: string; message: string }[];
let rt: CriPodRuntime;

beforeAll(async () => {
  ({ cri, client } = fake = await startFakeCriClient());
});
afterAll(() => fake?.close());

beforeEach(async () => {
  dir = tempDir('nodelet-pullsecrets-');
  await ensureRootDirLayout(dir);
  cri.calls.length = 0;
  for (const [id, img] of cri.images) if (img.repoTags.includes(IMAGE)) cri.images.delete(id);
  cri.allowPull(IMAGE);
  cri.requireAuth('registry.example:5000/', GOOD);
  objects = new FakeApiObjects(new VirtualClock());
  events = [];
  const dockerconfigjson = (user: string, pass: string) => JSON.stringify({ auths: { 'https://registry.example:5000': { auth: Buffer.from(`${user}:${pass}`).toString('base64') } } });
  objects.putSecret('team', 'regcred', { '.dockerconfigjson': dockerconfigjson(GOOD.username, GOOD.password) }, { type: 'kubernetes.io/dockerconfigjson' });
  objects.putSecret('team', 'wrongcred', { '.dockerconfigjson': dockerconfigjson('robot', 'guess') }, { type: 'kubernetes.io/dockerconfigjson' });
  objects.putSecret('team', 'broken', { '.dockerconfigjson': '{"auths": [' }, { type: 'kubernetes.io/dockerconfigjson' });
  rt = podRuntimeIn(client, dir, {
    objects,
    imageRecords: new ImagePullRecords(dir, silentLogger()),
    imageCredentialVerification: { policy: 'NeverVerifyPreloadedImages', allowlist: [] },
    events: { emit: (_ref, _type, reason, message) => events.push({ reason, message }) },
  });
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const podWith = (secrets: string[], imagePullPolicy: Container['imagePullPolicy'] = 'IfNotPresent'): [Pod, Container] => {
  const c: Container = { name: 'app', image: IMAGE, imagePullPolicy };
  return [{ metadata: { name: 'web', namespace: 'team', uid: `uid-${secrets.join('-')}` }, spec: { imagePullSecrets: secrets.map((name) => ({ name })), containers: [c] } }, c];
};
const ensure = ([pod, c]: [Pod, Container]) => rt.ensureImage(pod, c, (pull) => pull());
async function failure(p: Promise<unknown>): Promise<{ reason: unknown; message: string }> {
  try {
    await p;
  } catch (err) {
    return { reason: (err as NodeletError).details.reason, message: (err as Error).message };
  }
  throw new Error('expected the pull to fail');
}

describe('a private registry (registry.example:5000) and image pull secrets', () => {
  it('pulls with the AuthConfig of the pod\'s dockerconfigjson Secret (recorded by the runtime)', async () => {
    expect(await ensure(podWith(['regcred']))).toBe(true);
    expect(cri.pullAuths()).toEqual([{ ...GOOD, ...NO_AUTH_FIELDS }]);
    expect(cri.callsOf('PullImage')[0]!.request.image).toMatchObject({ image: IMAGE });
  });

  it('is refused without credentials, the error naming the image and the registry\'s answer', async () => {
    const f = await failure(ensure(podWith([])));
    expect(cri.pullAuths()).toEqual([null]);
    expect(f.reason).toBe('ErrImagePull');
    expect(f.message).toContain(`failed to pull image "${IMAGE}"`);
    expect(f.message).toContain('401 Unauthorized');
  });

  it('is refused with wrong credentials; a missing Secret is named in an event and the pull goes on without it', async () => {
    const f = await failure(ensure(podWith(['nosuch', 'wrongcred'])));
    expect(events).toEqual([{ reason: 'FailedToRetrieveImagePullSecret', message: 'Unable to retrieve some image pull secrets (nosuch); attempting to pull the image may not succeed.' }]);
    expect(cri.pullAuths()).toEqual([{ username: 'robot', password: 'guess', ...NO_AUTH_FIELDS }]);
    expect(f).toMatchObject({ reason: 'ErrImagePull', message: expect.stringContaining('401 Unauthorized') });
  });

  it('a malformed .dockerconfigjson is named, and nothing is pulled', async () => {
    const f = await failure(ensure(podWith(['broken'])));
    expect(f).toEqual({ reason: 'ErrImagePull', message: expect.stringMatching(/^image pull secret "team\/broken" \(kubernetes\.io\/dockerconfigjson\): its \.dockerconfigjson is malformed: /) });
    expect(cri.callsOf('PullImage')).toEqual([]);
  });

  it('once pulled with credentials, a pod without them cannot use the cached image (KubeletEnsureSecretPulledImages)', async () => {
    expect(await ensure(podWith(['regcred']))).toBe(true);
    // IfNotPresent: the image is there, but this pod must pull it with its own (no) credentials.
    const f = await failure(ensure(podWith([])));
    expect(f.reason).toBe('ErrImagePull');
    expect(cri.pullAuths()).toEqual([{ ...GOOD, ...NO_AUTH_FIELDS }, null]);
    // Never: the same words as an absent image.
    expect(await failure(ensure(podWith([], 'Never')))).toEqual({ reason: 'ErrImageNeverPull', message: `container image "${IMAGE}" is not present with pull policy of Never` });
    // A pod with the Secret uses it without a pull.
    expect(await ensure(podWith(['regcred']))).toBe(false);
    expect(cri.callsOf('PullImage')).toHaveLength(2);
  });

  it('the CRI client sends AuthConfig.auth (base64 user:password) as well', async () => {
    const ref = await client.pullImage(IMAGE, undefined, { auth: Buffer.from('robot:s3cret').toString('base64') });
    expect(ref).toMatch(/^sha256:/);
    expect(cri.pullAuths()).toEqual([{ username: '', password: '', auth: 'cm9ib3Q6czNjcmV0', serverAddress: '', identityToken: '', registryToken: '' }]);
  });
});
