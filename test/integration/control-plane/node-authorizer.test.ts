/**
 * Issue 27: the Node authorizer and NodeRestriction. A caller `system:node:<n>` in
 * `system:nodes` reads only what the pods bound to it refer to, asks tokens only for them,
 * and writes only its own Node, Lease, pod statuses and mirror pods; others keep full access.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, namespaces, pod, request } from './helpers.js';

const KUBECTL = '/usr/bin/kubectl';
let cp: ControlPlane;
let dir: string;
const N1 = 'node-n1-token';
const N2 = 'node-n2-token';
let n1Uid = '';

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cp-nodeauthz-'));
  cp = await startControlPlane({ nodeLifecycleIntervalMs: 0, pkiDir: path.join(dir, 'pki') });
  cp.addToken(TOKEN, 'admin', ['system:masters']);
  cp.addToken(N1, 'system:node:n1', ['system:nodes', 'system:authenticated']);
  cp.addToken(N2, 'system:node:n2', ['system:nodes', 'system:authenticated']);
  n1Uid = (await request(cp, 'POST', '/api/v1/nodes', { token: N1, body: { metadata: { name: 'n1' } } })).json.metadata.uid;
  await request(cp, 'POST', '/api/v1/nodes', { token: N2, body: { metadata: { name: 'n2' } } });
});
afterAll(async () => {
  await cp.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const newNs = namespaces(() => cp, 'nauthz');
const b64 = (s: string): string => Buffer.from(s).toString('base64');

/** A namespace with secrets s-vol, s-env, s-pull, s-other, configmaps c-proj, c-other, and pod `web` bound to n1 using all but the "other" ones. */
async function fixture(): Promise<{ ns: string; podUid: string }> {
  const ns = await newNs();
  for (const s of ['s-vol', 's-env', 's-pull', 's-other']) await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { body: { metadata: { name: s }, data: { k: b64('v') } } });
  for (const c of ['c-proj', 'c-other']) await request(cp, 'POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { metadata: { name: c }, data: { k: 'v' } } });
  await request(cp, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { metadata: { name: 'app' } } });
  const p = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, {
    body: pod('web', {
      spec: {
        nodeName: 'n1',
        serviceAccountName: 'app',
        imagePullSecrets: [{ name: 's-pull' }],
        containers: [{ name: 'c', image: 'busybox', env: [{ name: 'P', valueFrom: { secretKeyRef: { name: 's-env', key: 'k' } } }] }],
        volumes: [{ name: 'v', secret: { secretName: 's-vol' } }, { name: 'p', projected: { sources: [{ configMap: { name: 'c-proj' } }] } }],
      },
    }),
  });
  expect(p.status).toBe(201);
  return { ns, podUid: p.json.metadata.uid };
}

describe('Node authorizer: reads', () => {
  it('a node gets the secrets and configmaps of its pods and nothing else, with upstream\'s 403', async () => {
    const { ns } = await fixture();
    for (const s of ['s-vol', 's-env', 's-pull']) expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets/${s}`, { token: N1 })).status).toBe(200);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps/c-proj`, { token: N1 })).status).toBe(200);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps/kube-root-ca.crt`, { token: N1 })).status).toBe(200); // the injected volume's
    const other = await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets/s-other`, { token: N1 });
    expect(other.status).toBe(403);
    expect(other.json).toMatchObject({ kind: 'Status', reason: 'Forbidden', code: 403, details: { name: 's-other', kind: 'secrets' } });
    expect(other.json.message).toBe(`secrets "s-other" is forbidden: User "system:node:n1" cannot get resource "secrets" in API group "" in the namespace "${ns}": no relationship found between node 'n1' and this object`);
    // Another node sees none of them.
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets/s-vol`, { token: N2 })).status).toBe(403);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps/c-other`, { token: N1 })).status).toBe(403);
    // The admin keeps full access.
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets/s-other`)).status).toBe(200);
  });

  it('list and watch only with fieldSelector=metadata.name of a related object', async () => {
    const { ns } = await fixture();
    const one = await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets?fieldSelector=metadata.name%3Ds-vol`, { token: N1 });
    expect(one.status).toBe(200);
    expect(one.json.items.map((i: { metadata: { name: string } }) => i.metadata.name)).toEqual(['s-vol']);
    const all = await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets`, { token: N1 });
    expect(all.status).toBe(403);
    expect(all.json.message).toBe(`secrets is forbidden: User "system:node:n1" cannot list resource "secrets" in API group "" in the namespace "${ns}": No Object name found`);
    const w = await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dc-proj`, { token: N1 });
    expect(w.status).toBe(200);
    expect(w.text).toContain('"c-proj"');
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps?watch=true&fieldSelector=metadata.name%3Dc-other`, { token: N1 })).status).toBe(403);
  });

  it('relationships follow the pods: gone with the pod, there when a pod is bound', async () => {
    const { ns } = await fixture();
    await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/web`);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets/s-vol`, { token: N1 })).status).toBe(403);
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('late', { spec: { volumes: [{ name: 'o', secret: { secretName: 's-other' } }] } }) });
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets/s-other`, { token: N2 })).status).toBe(403); // not bound yet
    await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/late`, { contentType: 'application/merge-patch+json', body: { spec: { nodeName: 'n2' } } });
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/secrets/s-other`, { token: N2 })).status).toBe(200);
  });

  it('nodes: its own Node only; pods: bound ones, listed by spec.nodeName', async () => {
    const { ns } = await fixture();
    expect((await request(cp, 'GET', '/api/v1/nodes/n1', { token: N1 })).status).toBe(200);
    const n2 = await request(cp, 'GET', '/api/v1/nodes/n2', { token: N1 });
    expect(n2.status).toBe(403);
    expect(n2.json.message).toBe(`nodes "n2" is forbidden: User "system:node:n1" cannot get resource "nodes" in API group "" at the cluster scope: node 'n1' cannot read 'n2', only its own Node object`);
    expect((await request(cp, 'GET', '/api/v1/nodes?fieldSelector=metadata.name%3Dn1', { token: N1 })).status).toBe(200);
    expect((await request(cp, 'GET', '/api/v1/nodes', { token: N1 })).status).toBe(403);
    expect((await request(cp, 'GET', '/api/v1/pods?fieldSelector=spec.nodeName%3Dn1', { token: N1 })).status).toBe(200);
    expect((await request(cp, 'GET', '/api/v1/pods', { token: N1 })).json.message).toContain('can only list/watch pods with spec.nodeName field selector');
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods/web`, { token: N1 })).status).toBe(200);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/pods/web`, { token: N2 })).status).toBe(403);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/serviceaccounts/app`, { token: N1 })).json.message).toContain('can only create tokens for individual service accounts');
    expect((await request(cp, 'GET', '/api/v1/namespaces', { token: N1 })).status).toBe(403);
  });
});

describe('Node authorizer and NodeRestriction: writes', () => {
  it('tokens only for the service account of its pod, bound to that pod', async () => {
    const { ns, podUid } = await fixture();
    const ask = (token: string, sa: string, spec: object) => request(cp, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`, { token, body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec } });
    const ok = await ask(N1, 'app', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'web', uid: podUid } });
    expect(ok.status).toBe(201);
    expect(ok.json.status.token.split('.')).toHaveLength(3);
    const unbound = await ask(N1, 'app', {});
    expect(unbound.status).toBe(403);
    expect(unbound.json.message).toBe('serviceaccounts "app" is forbidden: node requested token not bound to a pod');
    expect((await ask(N1, 'app', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'web' } })).json.message).toContain('node requested token with a pod binding without a uid');
    const otherSa = await ask(N1, 'default', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'web', uid: podUid } });
    expect(otherSa.status).toBe(403);
    expect(otherSa.json.message).toContain(`User "system:node:n1" cannot create resource "serviceaccounts/token" in API group "" in the namespace "${ns}": no relationship found between node 'n1' and this object`);
    expect((await ask(N2, 'app', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'web', uid: podUid } })).status).toBe(403);
  });

  it('its own Node and Lease only', async () => {
    const other = await request(cp, 'PATCH', '/api/v1/nodes/n2/status', { token: N1, contentType: 'application/merge-patch+json', body: { status: { phase: 'x' } } });
    expect(other.status).toBe(403);
    expect(other.json.message).toBe('nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"');
    expect((await request(cp, 'PATCH', '/api/v1/nodes/n1/status', { token: N1, contentType: 'application/merge-patch+json', body: { status: { capacity: { pods: '110' } } } })).status).toBe(200);
    expect((await request(cp, 'POST', '/api/v1/nodes', { token: N1, body: { metadata: { name: 'n3' } } })).json.message).toBe('nodes "n3" is forbidden: node "n1" is not allowed to modify node "n3"');
    const lease = (name: string) => ({ apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name }, spec: { holderIdentity: name, leaseDurationSeconds: 40 } });
    expect((await request(cp, 'POST', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', { token: N1, body: lease('n1') })).status).toBe(201);
    const foreign = await request(cp, 'POST', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', { token: N1, body: lease('n2') });
    expect(foreign.json.message).toBe('leases.coordination.k8s.io "n2" is forbidden: can only access node lease with the same name as the requesting node');
    expect((await request(cp, 'GET', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1', { token: N2 })).json.message).toContain('can only access node lease with the same name as the requesting node');
    expect((await request(cp, 'POST', '/apis/coordination.k8s.io/v1/namespaces/default/leases', { token: N1, body: lease('n1') })).json.message).toContain('can only access leases in the "kube-node-lease" system namespace');
  });

  it('status of the pods bound to it; mirror pods on itself only; events', async () => {
    const { ns } = await fixture();
    expect((await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/web/status`, { token: N1, contentType: 'application/merge-patch+json', body: { status: { phase: 'Running' } } })).status).toBe(200);
    const st = await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/web/status`, { token: N2, contentType: 'application/merge-patch+json', body: { status: { phase: 'Failed' } } });
    expect(st.json.message).toBe('pods "web" is forbidden: node "n2" can only update pod status for pods with spec.nodeName set to itself');
    expect((await request(cp, 'PATCH', `/api/v1/namespaces/${ns}/pods/web`, { token: N1, contentType: 'application/merge-patch+json', body: { metadata: { labels: { a: 'b' } } } })).status).toBe(403);
    const plain = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { token: N1, body: pod('p', { spec: { nodeName: 'n1' } }) });
    expect(plain.json.message).toBe('pods "p" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, node "n1" can only create mirror pods');
    const mirror = (nodeName: string, extra: object = {}) => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: `static-${nodeName}`, annotations: { 'kubernetes.io/config.mirror': 'h' }, ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: n1Uid, controller: true }] },
      spec: { nodeName, containers: [{ name: 'c', image: 'busybox' }], ...extra },
    });
    expect((await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { token: N1, body: mirror('n1') })).status).toBe(201);
    expect((await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { token: N1, body: mirror('n2') })).json.message).toBe('pods "static-n2" is forbidden: node "n1" can only create pods with spec.nodeName set to itself');
    const withSecret = await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { token: N1, body: mirror('n1', { volumes: [{ name: 's', secret: { secretName: 's-vol' } }] }) });
    expect(withSecret.json.message).toBe('pods "static-n1" is forbidden: a mirror pod may not reference secrets');
    expect((await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/static-n1`, { token: N2 })).json.message).toBe('pods "static-n1" is forbidden: node "n2" can only delete pods with spec.nodeName set to itself');
    expect((await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/static-n1`, { token: N1 })).status).toBe(200);
    const ev = await request(cp, 'POST', `/api/v1/namespaces/${ns}/events`, { token: N1, body: { metadata: { name: 'e1' }, involvedObject: { kind: 'Node', name: 'n1' }, reason: 'Starting', message: 'x', type: 'Normal' } });
    expect(ev.status).toBe(201);
    expect((await request(cp, 'POST', `/api/v1/namespaces/${ns}/secrets`, { token: N1, body: { metadata: { name: 'mine' } } })).json.message).toBe(`secrets is forbidden: User "system:node:n1" cannot create resource "secrets" in API group "" in the namespace "${ns}": can only read resources of this type`);
  });

  it('TokenReview and SubjectAccessReview stay open to nodes; a user without the group is not a node', async () => {
    expect((await request(cp, 'POST', '/apis/authentication.k8s.io/v1/tokenreviews', { token: N1, body: { spec: { token: 'x' } } })).status).toBe(201);
    expect((await request(cp, 'POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', { token: N1, body: { spec: { user: 'u', resourceAttributes: { verb: 'get', resource: 'pods' } } } })).status).toBe(201);
    cp.addToken('not-a-node', 'system:node:n1', []);
    expect((await request(cp, 'GET', '/api/v1/namespaces/default/secrets', { token: 'not-a-node' })).status).toBe(200);
  });
});

describe.runIf(fs.existsSync(KUBECTL))('kubectl with node credentials', () => {
  it('prints the Forbidden message for a secret the node has no pod for', async () => {
    const { ns } = await fixture();
    const kubeconfig = path.join(dir, 'node.kubeconfig');
    cp.writeKubeconfig(kubeconfig, { user: 'system:node:n1', groups: ['system:nodes'] });
    const run = (args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(KUBECTL, ['--kubeconfig', kubeconfig, '-n', ns, ...args], { timeout: 20_000, env: { ...process.env, HOME: dir, KUBECACHEDIR: path.join(dir, 'cache') } }, (err, stdout, stderr) => resolve({ code: err ? 1 : 0, stdout, stderr }));
      });
    const ok = await run(['get', 'secret', 's-vol', '-o', 'jsonpath={.data.k}']);
    expect(ok.stdout).toBe(b64('v'));
    const denied = await run(['get', 'secret', 's-other']);
    expect(denied.code).toBe(1);
    expect(denied.stderr.trim()).toBe(`Error from server (Forbidden): secrets "s-other" is forbidden: User "system:node:n1" cannot get resource "secrets" in API group "" in the namespace "${ns}": no relationship found between node 'n1' and this object`);
  });
});
