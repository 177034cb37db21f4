/**
 * Image pull secrets end to end: the built nodelet connected to the test control plane, on
 * the test CRI server acting as a private registry at registry.example:5000. A pod whose
 * `imagePullSecrets` name a kubernetes.io/dockerconfigjson Secret is pulled with its
 * AuthConfig (the runtime records it) and runs; a pod without it is refused, its container
 * waiting with the registry's answer.
 */
import type { Pod, Secret, ServiceAccount } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS, type ResourceType } from '../../../src/controlplane/client.js';
import { n1Pod, startConnectedNode, type ConnectedNode } from '../../faults/connected-node.js';
import { eventually } from '../../helpers/nodelet.js';

const SECRETS: ResourceType = { group: '', version: 'v1', resource: 'secrets', namespaced: true };
const SERVICE_ACCOUNTS: ResourceType = { group: '', version: 'v1', resource: 'serviceaccounts', namespaced: true };
const IMAGE = 'registry.example:5000/team/app:v1';
const GOOD = { username: 'robot', password: 's3cret' };

let n1: ConnectedNode;

beforeAll(async () => {
  n1 = await startConnectedNode({ prefix: 'nodelet-pullsecrets-' });
  n1.cri.allowPull(IMAGE);
  n1.cri.requireAuth('registry.example:5000/', GOOD);
  const doc = JSON.stringify({ auths: { 'registry.example:5000': { auth: Buffer.from(`${GOOD.username}:${GOOD.password}`).toString('base64') } } });
  await n1.api.create<Secret>(SECRETS, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'regcred', namespace: 'default' },
    type: 'kubernetes.io/dockerconfigjson',
    data: { '.dockerconfigjson': Buffer.from(doc).toString('base64') },
  });
});

afterAll(async () => {
  await n1?.close();
});

const pod = (name: string, secrets: string[], serviceAccountName?: string): Pod =>
  n1Pod(name, { ...(serviceAccountName ? { serviceAccountName } : {}), ...(secrets.length ? { imagePullSecrets: secrets.map((s) => ({ name: s })) } : {}) }, IMAGE);

const get = (name: string) => n1.api.get<Pod>(PODS, { namespace: 'default', name });

describe('image pull secrets from the API', () => {
  it('a pod with the Secret is pulled with its AuthConfig and runs', async () => {
    await n1.api.create<Pod>(PODS, pod('private', ['regcred']));
    await eventually(async () => (await get('private')).status?.phase === 'Running', 20_000);
    expect(n1.cri.pullAuths()).toContainEqual({ ...GOOD, auth: '', serverAddress: '', identityToken: '', registryToken: '' });
  });

  it("a pod without its own gets its ServiceAccount's imagePullSecrets (copied in by the API server's admission) and runs", async () => {
    await n1.api.create<ServiceAccount>(SERVICE_ACCOUNTS, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'builder', namespace: 'default' }, imagePullSecrets: [{ name: 'regcred' }] });
    const created = await n1.api.create<Pod>(PODS, pod('via-sa', [], 'builder'));
    expect(created.spec?.imagePullSecrets).toEqual([{ name: 'regcred' }]);
    await eventually(async () => (await get('via-sa')).status?.phase === 'Running', 20_000);
  });

  it('a pod without it may not use the cached image: it is pulled without credentials and refused', async () => {
    const before = n1.cri.pullAuths().length;
    await n1.api.create<Pod>(PODS, pod('nocreds', []));
    const waiting = await eventually(async () => {
      const w = (await get('nocreds')).status?.containerStatuses?.[0]?.state?.waiting;
      return w?.reason === 'ErrImagePull' || w?.reason === 'ImagePullBackOff' ? w : undefined;
    }, 20_000);
    expect(waiting.message).toContain('401 Unauthorized');
    expect(n1.cri.pullAuths().slice(before)).toContain(null);
  });
});
