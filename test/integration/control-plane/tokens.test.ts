/**
 * Issue 27: the serviceaccounts/token subresource (TokenRequest) and the validation of the
 * JWTs it answers, by TokenReview and as Bearer credentials. The control plane runs on a
 * manual clock, so expiry is judged on its time, not the test's.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../helpers/clock.js';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, namespaces, pod, request } from './helpers.js';

let cp: ControlPlane;
let dir: string;
const clock = new ManualClock(Date.UTC(2026, 10, 27, 12, 0, 0));

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cp-tok-'));
  cp = await startControlPlane({ nodeLifecycleIntervalMs: 0, pkiDir: path.join(dir, 'pki'), clock });
  cp.addToken(TOKEN, 'admin', ['system:masters']);
});
afterAll(async () => {
  await cp.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const newNs = namespaces(() => cp, 'tok');

function claimsOf(jwt: string): { header: Record<string, unknown>; claims: Record<string, any> } { // eslint-disable-line @typescript-eslint/no-explicit-any
  const [h, c] = jwt.split('.');
  return { header: JSON.parse(Buffer.from(h!, 'base64url').toString()), claims: JSON.parse(Buffer.from(c!, 'base64url').toString()) };
}

async function tokenFor(ns: string, sa: string, spec: object = {}) {
  return request(cp, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`, { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec } });
}

async function review(token: string, audiences?: string[]) {
  const r = await request(cp, 'POST', '/apis/authentication.k8s.io/v1/tokenreviews', { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token, ...(audiences ? { audiences } : {}) } } });
  return r.json.status;
}

describe('TokenRequest', () => {
  it('answers a signed JWT with kube-apiserver\'s claims and expiry (default 3600 s)', async () => {
    const ns = await newNs();
    const sa = (await request(cp, 'GET', `/api/v1/namespaces/${ns}/serviceaccounts/default`)).json;
    const r = await tokenFor(ns, 'default');
    expect(r.status).toBe(201);
    expect(r.json.kind).toBe('TokenRequest');
    expect(r.json.apiVersion).toBe('authentication.k8s.io/v1');
    expect(r.json.spec).toEqual({ audiences: ['https://kubernetes.default.svc.cluster.local'], expirationSeconds: 3600 });
    const now = Math.floor(clock.now() / 1000);
    expect(r.json.status.expirationTimestamp).toBe(new Date((now + 3600) * 1000).toISOString().replace('.000', ''));
    const { header, claims } = claimsOf(r.json.status.token);
    expect(header.alg).toBe('ES256');
    expect(typeof header.kid).toBe('string');
    expect(claims).toEqual({
      aud: ['https://kubernetes.default.svc.cluster.local'],
      exp: now + 3600,
      iat: now,
      nbf: now,
      iss: 'https://kubernetes.default.svc.cluster.local',
      jti: expect.stringMatching(/^[0-9a-f-]{36}$/),
      sub: `system:serviceaccount:${ns}:default`,
      'kubernetes.io': { namespace: ns, serviceaccount: { name: 'default', uid: sa.metadata.uid } },
    });
  });

  it('refuses less than 10 minutes, a missing service account, a missing or replaced pod', async () => {
    const ns = await newNs();
    const short = await tokenFor(ns, 'default', { expirationSeconds: 599 });
    expect(short.status).toBe(422);
    expect(short.json.message).toContain('spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes');
    const noSa = await tokenFor(ns, 'ghost');
    expect(noSa.status).toBe(404);
    expect(noSa.json.message).toBe('serviceaccounts "ghost" not found');
    const noPod = await tokenFor(ns, 'default', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'gone' } });
    expect(noPod.status).toBe(404);
    expect(noPod.json.message).toBe('pods "gone" not found');
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('p') });
    const wrongUid = await tokenFor(ns, 'default', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'p', uid: 'not-its-uid' } });
    expect(wrongUid.status).toBe(409);
    expect(wrongUid.json.message).toContain('the UID in the bound object reference (not-its-uid) does not match the UID in record');
    const kind = await tokenFor(ns, 'default', { boundObjectRef: { kind: 'Deployment', apiVersion: 'apps/v1', name: 'd' } });
    expect(kind.status).toBe(422);
    expect(kind.json.message).toContain('spec.boundObjectRef.kind: Unsupported value: "Deployment"');
  });

  it('a pod-bound token names the pod and its node; TokenReview answers the identity with pod extras', async () => {
    const ns = await newNs();
    await request(cp, 'POST', '/api/v1/nodes', { body: { metadata: { name: 'tn1' } } });
    const node = (await request(cp, 'GET', '/api/v1/nodes/tn1')).json;
    const p = (await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('bound', { spec: { nodeName: 'tn1' } }) })).json;
    const r = await tokenFor(ns, 'default', { audiences: ['vault'], expirationSeconds: 600, boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'bound', uid: p.metadata.uid } });
    expect(r.status).toBe(201);
    expect(r.json.spec.boundObjectRef).toEqual({ kind: 'Pod', apiVersion: 'v1', name: 'bound', uid: p.metadata.uid });
    const { claims } = claimsOf(r.json.status.token);
    expect(claims['kubernetes.io'].pod).toEqual({ name: 'bound', uid: p.metadata.uid });
    expect(claims['kubernetes.io'].node).toEqual({ name: 'tn1', uid: node.metadata.uid });
    expect(claims.aud).toEqual(['vault']);
    const st = await review(r.json.status.token, ['vault', 'other']);
    expect(st.authenticated).toBe(true);
    expect(st.audiences).toEqual(['vault']);
    expect(st.user.username).toBe(`system:serviceaccount:${ns}:default`);
    expect(st.user.groups).toEqual(['system:serviceaccounts', `system:serviceaccounts:${ns}`, 'system:authenticated']);
    expect(st.user.extra['authentication.kubernetes.io/pod-name']).toEqual(['bound']);
    expect(st.user.extra['authentication.kubernetes.io/pod-uid']).toEqual([p.metadata.uid]);
    expect(st.user.extra['authentication.kubernetes.io/node-name']).toEqual(['tn1']);
    // Audiences must meet: the API's are not the token's.
    const wrongAud = await review(r.json.status.token);
    expect(wrongAud.authenticated).toBeUndefined();
    expect(wrongAud.error).toContain('invalid bearer token');
    // Once the pod is gone, the token is refused.
    await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/pods/bound`);
    const after = await review(r.json.status.token, ['vault']);
    expect(after.authenticated).toBeUndefined();
    expect(after.error).toContain('invalidated');
  });

  it('a pod running as another service account cannot be bound', async () => {
    const ns = await newNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { metadata: { name: 'other' } } });
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('p', { spec: { serviceAccountName: 'other' } }) });
    const r = await tokenFor(ns, 'default', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'p' } });
    expect(r.status).toBe(400);
    expect(r.json.message).toBe('cannot bind token for serviceaccount "default" to pod running with different serviceaccount name.');
  });
});

describe('validation of service-account JWTs', () => {
  it('a tampered token, an expired one (on the control plane\'s clock) and one of a recreated account are refused', async () => {
    const ns = await newNs();
    const tok = (await tokenFor(ns, 'default', { expirationSeconds: 600 })).json.status.token as string;
    expect((await review(tok)).authenticated).toBe(true);
    const [h, c, s] = tok.split('.');
    const claims = JSON.parse(Buffer.from(c!, 'base64url').toString());
    claims.sub = 'system:serviceaccount:kube-system:default';
    const forged = `${h}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${s}`;
    expect((await review(forged)).authenticated).toBeUndefined();
    // exp + the 60 s leeway of go-jose.
    clock.t += 660 * 1000;
    expect((await review(tok)).authenticated).toBe(true);
    clock.t += 1000;
    const expired = await review(tok);
    expect(expired.authenticated).toBeUndefined();
    expect(expired.error).toContain('token is expired');
    const tok2 = (await tokenFor(ns, 'default')).json.status.token as string;
    await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/serviceaccounts/default`);
    // The controller makes `default` again, with a new uid: the old token stays refused.
    for (let i = 0; i < 50 && (await request(cp, 'GET', `/api/v1/namespaces/${ns}/serviceaccounts/default`)).status !== 200; i++) await new Promise((r) => setTimeout(r, 10));
    expect((await review(tok2)).error).toContain('invalidated');
  });

  it('authenticates API requests as the service account (Bearer)', async () => {
    const ns = await newNs();
    await request(cp, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { metadata: { name: 'robot' } } });
    const tok = (await tokenFor(ns, 'robot')).json.status.token as string;
    const r = await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps/kube-root-ca.crt`, { token: tok });
    expect(r.status).toBe(200);
    const other = (await tokenFor(ns, 'robot', { audiences: ['not-the-api'] })).json.status.token as string;
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps`, { token: other })).status).toBe(401);
    await request(cp, 'DELETE', `/api/v1/namespaces/${ns}/serviceaccounts/robot`);
    expect((await request(cp, 'GET', `/api/v1/namespaces/${ns}/configmaps`, { token: tok })).status).toBe(401);
  });

  it('the token of an injected projected volume (3607 s, pod-bound) lasts a year with warnafter at its expiry', async () => {
    const ns = await newNs();
    const p = (await request(cp, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('p') })).json;
    const r = await tokenFor(ns, 'default', { expirationSeconds: 3607, boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'p', uid: p.metadata.uid } });
    const now = Math.floor(clock.now() / 1000);
    const { claims } = claimsOf(r.json.status.token);
    expect(claims.exp - claims.iat).toBe(365 * 24 * 3600);
    expect(claims['kubernetes.io'].warnafter).toBe(now + 3607);
    expect(r.json.status.expirationTimestamp).toBe(new Date((now + 3607) * 1000).toISOString().replace('.000', ''));
  });
});

describe('serviceAccountTokenMaxSeconds (--service-account-max-token-expiration, for tests)', () => {
  let capped: ControlPlane;
  const capClock = new ManualClock(Date.UTC(2026, 10, 27, 12, 0, 0));
  beforeAll(async () => {
    capped = await startControlPlane({ nodeLifecycleIntervalMs: 0, pkiDir: path.join(dir, 'pki-capped'), clock: capClock, serviceAccountTokenMaxSeconds: 20 });
    capped.addToken(TOKEN, 'admin', ['system:masters']);
  });
  afterAll(async () => capped?.close());

  it('a token asked for 600 s, or the injected 3607 s, lives 20 s: spec, expirationTimestamp and exp say so; it expires then', async () => {
    const ns = await namespaces(() => capped, 'cap')();
    const p = (await request(capped, 'POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('p') })).json;
    const now = Math.floor(capClock.now() / 1000);
    for (const asked of [600, 3607]) {
      const r = await request(capped, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts/default/token`, { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: asked, boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'p', uid: p.metadata.uid } } } });
      expect(r.status).toBe(201);
      expect(r.json.spec.expirationSeconds).toBe(20);
      expect(r.json.status.expirationTimestamp).toBe(new Date((now + 20) * 1000).toISOString().replace('.000', ''));
      const { claims } = claimsOf(r.json.status.token);
      expect(claims.exp - claims.iat).toBe(20);
      expect(claims['kubernetes.io'].warnafter).toBeUndefined();
    }
    // Shorter requests are still refused by validation, as upstream.
    expect((await request(capped, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts/default/token`, { body: { spec: { expirationSeconds: 30 } } })).status).toBe(422);
    const tok = (await request(capped, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts/default/token`, { body: { spec: { expirationSeconds: 600 } } })).json.status.token as string;
    const reviewOn = async () => (await request(capped, 'POST', '/apis/authentication.k8s.io/v1/tokenreviews', { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token: tok } } })).json.status;
    expect((await reviewOn()).authenticated).toBe(true);
    // Past exp plus go-jose's 60 s leeway: refused.
    capClock.t += 81_000;
    expect((await reviewOn()).error).toContain('token is expired');
  });

  it('refuses a value that is not a positive integer', async () => {
    await expect(startControlPlane({ serviceAccountTokenMaxSeconds: 0 })).rejects.toThrow('serviceAccountTokenMaxSeconds: must be a positive integer, got 0');
  });
});
