/**
 * Issue 27: the ServiceAccount admission plugin on pod create, as kube-apiserver runs it:
 * the default service account, its existence, the `kube-api-access-*` projected volume and
 * its mounts, the account's imagePullSecrets, and what a mirror pod may not reference.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, namespaces, request } from './helpers.js';

let cp: ControlPlane;
let dir: string;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cp-saadm-'));
  cp = await startControlPlane({ nodeLifecycleIntervalMs: 0, pkiDir: path.join(dir, 'pki') });
  cp.addToken(TOKEN, 'admin', ['system:masters']);
});
afterAll(async () => {
  await cp.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const newNs = namespaces(() => cp, 'saadm');
const MOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';

async function createPod(ns: string, name: string, spec: object, metadata: object = {}) {
  return request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: { apiVersion: 'v1', kind: 'Pod', metadata: { name, ...metadata }, spec } });
}

describe('ServiceAccount admission', () => {
  it('defaults to `default` and injects the kube-api-access volume exactly as upstream, mounted in every container and init container', async () => {
    const ns = await newNs();
    const r = await createPod(ns, 'p', { initContainers: [{ name: 'i', image: 'busybox' }], containers: [{ name: 'a', image: 'busybox' }, { name: 'b', image: 'busybox', volumeMounts: [{ name: 'data', mountPath: '/data' }] }], volumes: [{ name: 'data', emptyDir: {} }] });
    expect(r.status).toBe(201);
    const spec = r.json.spec;
    expect(spec.serviceAccountName).toBe('default');
    expect(spec.volumes).toHaveLength(2);
    const vol = spec.volumes[1];
    expect(vol.name).toMatch(/^kube-api-access-[a-z0-9]{5}$/);
    expect(vol).toEqual({
      name: vol.name,
      projected: {
        sources: [
          { serviceAccountToken: { expirationSeconds: 3607, path: 'token' } },
          { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
          { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
        ],
        defaultMode: 420,
      },
    });
    const mount = { name: vol.name, readOnly: true, mountPath: MOUNT };
    expect(spec.initContainers[0].volumeMounts).toEqual([mount]);
    expect(spec.containers[0].volumeMounts).toEqual([mount]);
    expect(spec.containers[1].volumeMounts).toEqual([{ name: 'data', mountPath: '/data' }, mount]);
  });

  it('refuses a pod whose service account does not exist, with upstream\'s 403', async () => {
    const ns = await newNs();
    const r = await createPod(ns, 'p', { serviceAccountName: 'ghost', containers: [{ name: 'a', image: 'busybox' }] });
    expect(r.status).toBe(403);
    expect(r.json.reason).toBe('Forbidden');
    expect(r.json.message).toBe(`pods "p" is forbidden: error looking up service account ${ns}/ghost: serviceaccount "ghost" not found`);
    const gen = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: { metadata: { generateName: 'web-' }, spec: { serviceAccountName: 'ghost', containers: [{ name: 'a', image: 'busybox' }] } } });
    expect(gen.json.message).toMatch(/^pods "web-" is forbidden: /);
  });

  it('automountServiceAccountToken: the pod\'s word wins, else the account\'s', async () => {
    const ns = await newNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { metadata: { name: 'quiet' }, automountServiceAccountToken: false } });
    const c = [{ name: 'a', image: 'busybox' }];
    const none = (await createPod(ns, 'p1', { serviceAccountName: 'quiet', containers: c })).json.spec;
    expect(none.volumes).toBeUndefined();
    expect(none.containers[0].volumeMounts).toBeUndefined();
    const podSays = (await createPod(ns, 'p2', { serviceAccountName: 'quiet', automountServiceAccountToken: true, containers: c })).json.spec;
    expect(podSays.volumes[0].name).toMatch(/^kube-api-access-/);
    const podRefuses = (await createPod(ns, 'p3', { automountServiceAccountToken: false, containers: c })).json.spec;
    expect(podRefuses.volumes).toBeUndefined();
    expect(podRefuses.serviceAccountName).toBe('default');
  });

  it('leaves a container that mounts something at the token path alone', async () => {
    const ns = await newNs();
    const r = await createPod(ns, 'p', { containers: [{ name: 'a', image: 'busybox', volumeMounts: [{ name: 'mine', mountPath: MOUNT }] }], volumes: [{ name: 'mine', emptyDir: {} }] });
    expect(r.json.spec.containers[0].volumeMounts).toEqual([{ name: 'mine', mountPath: MOUNT }]);
    expect(r.json.spec.volumes).toEqual([{ name: 'mine', emptyDir: {} }]);
  });

  it('copies the account\'s imagePullSecrets to a pod that has none', async () => {
    const ns = await newNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { metadata: { name: 'puller' }, imagePullSecrets: [{ name: 'reg-a' }, { name: 'reg-b' }] } });
    const c = [{ name: 'a', image: 'busybox' }];
    expect((await createPod(ns, 'p1', { serviceAccountName: 'puller', containers: c })).json.spec.imagePullSecrets).toEqual([{ name: 'reg-a' }, { name: 'reg-b' }]);
    expect((await createPod(ns, 'p2', { serviceAccountName: 'puller', imagePullSecrets: [{ name: 'own' }], containers: c })).json.spec.imagePullSecrets).toEqual([{ name: 'own' }]);
  });

  it.each([
    ['a service account', { serviceAccountName: 'default' }, 'a mirror pod may not reference service accounts'],
    ['a secret volume', { volumes: [{ name: 's', secret: { secretName: 's' } }] }, 'a mirror pod may not reference secrets'],
    ['a secret in env', { containers: [{ name: 'a', image: 'busybox', env: [{ name: 'X', valueFrom: { secretKeyRef: { name: 's', key: 'k' } } }] }] }, 'a mirror pod may not reference secrets'],
    ['a token projection', { volumes: [{ name: 't', projected: { sources: [{ serviceAccountToken: { path: 'token' } }] } }] }, 'a mirror pod may not use ServiceAccountToken volume projections'],
    ['a configmap', { containers: [{ name: 'a', image: 'busybox', envFrom: [{ configMapRef: { name: 'c' } }] }] }, 'a mirror pod may not reference configmaps'],
  ])('a mirror pod referring to %s is refused', async (_what, spec, msg) => {
    const ns = await newNs();
    const r = await createPod(ns, 'm', { containers: [{ name: 'a', image: 'busybox' }], ...spec }, { annotations: { 'kubernetes.io/config.mirror': 'hash' } });
    expect(r.status).toBe(403);
    expect(r.json.message).toBe(`pods "m" is forbidden: ${msg}`);
  });

  it('disableServiceAccountAdmission (--disable-admission-plugins=ServiceAccount) stores pods as sent', async () => {
    const other = await startControlPlane({ nodeLifecycleIntervalMs: 0, pkiDir: path.join(dir, 'pki2'), disableServiceAccountAdmission: true });
    try {
      other.addToken(TOKEN, 'admin', ['system:masters']);
      const r = await request(other, 'POST', '/api/v1/namespaces/default/pods', { body: { metadata: { name: 'p' }, spec: { serviceAccountName: 'ghost', containers: [{ name: 'a', image: 'busybox' }] } } });
      expect(r.status).toBe(201);
      expect(r.json.spec).toEqual({ serviceAccountName: 'ghost', containers: [{ name: 'a', image: 'busybox' }] });
    } finally {
      await other.close();
    }
  });

  it('a plain mirror pod is stored as sent: no service account, no volume', async () => {
    const ns = await newNs();
    const r = await createPod(ns, 'm', { containers: [{ name: 'a', image: 'busybox' }] }, { annotations: { 'kubernetes.io/config.mirror': 'hash' } });
    expect(r.status).toBe(201);
    expect(r.json.spec.serviceAccountName).toBeUndefined();
    expect(r.json.spec.volumes).toBeUndefined();
  });
});
