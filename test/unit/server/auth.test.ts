import { describe, expect, it } from 'vitest';
import { isNodeletError } from '../../../src/errors.js';
import {
  ANONYMOUS_USER,
  AUTHENTICATED_GROUP,
  Authenticator,
  UNAUTHENTICATED_GROUP,
  WebhookAuthorizer,
  alwaysAllow,
  authorizeRequest,
  bearerToken,
  forbiddenMessage,
  requestAttributes,
  verbForMethod,
  type PeerCertificate,
  type ReviewClient,
  type SubjectAccessReviewSpec,
} from '../../../src/server/auth.js';
import { ManualClock } from '../../helpers/clock.js';

const nodeAttrs = (verb: string, subresource: string) => ({ verb, group: '', version: 'v1', resource: 'nodes', subresource, name: 'node-a', namespace: '' });

describe('request attributes (the kubelet mapping)', () => {
  it.each([
    ['POST', 'create'],
    ['GET', 'get'],
    ['HEAD', 'get'],
    ['PUT', 'update'],
    ['PATCH', 'patch'],
    ['DELETE', 'delete'],
    ['get', 'get'],
    ['OPTIONS', ''],
  ])('%s -> verb %j', (method, verb) => {
    expect(verbForMethod(method)).toBe(verb);
  });

  it.each([
    ['POST', '/checkpoint/default/web/app', [nodeAttrs('create', 'checkpoint')]],
    ['POST', '/checkpoint/default/web/app?timeout=5', [nodeAttrs('create', 'checkpoint')]],
    ['GET', '/checkpoints', [nodeAttrs('get', 'checkpoint')]],
    ['GET', '/pods', [nodeAttrs('get', 'proxy')]],
    ['GET', '/healthz', [nodeAttrs('get', 'healthz'), nodeAttrs('get', 'proxy')]],
    ['GET', '/healthz/ping', [nodeAttrs('get', 'healthz'), nodeAttrs('get', 'proxy')]],
    ['GET', '/stats/summary', [nodeAttrs('get', 'stats')]],
    ['GET', '/stats', [nodeAttrs('get', 'stats')]],
    ['GET', '/metrics/cadvisor', [nodeAttrs('get', 'metrics')]],
    ['GET', '/logs/syslog', [nodeAttrs('get', 'log')]],
    ['GET', '/statsx', [nodeAttrs('get', 'proxy')]],
    ['GET', '/checkpointx/a', [nodeAttrs('get', 'proxy')]],
    ['DELETE', '/run/ns/pod/c', [nodeAttrs('delete', 'proxy')]],
    ['GET', '/', [nodeAttrs('get', 'proxy')]],
  ])('%s %s', (method, path, want) => {
    expect(requestAttributes(method, path, 'node-a')).toEqual(want);
  });

  it('formats the 403 message as the kubelet, with the reason appended', () => {
    const user = { username: 'alice', groups: [] };
    expect(forbiddenMessage(user, [nodeAttrs('create', 'checkpoint')])).toBe('Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[checkpoint])');
    expect(forbiddenMessage(user, [nodeAttrs('get', 'healthz'), nodeAttrs('get', 'proxy')], 'no RBAC rule')).toBe(
      'Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[healthz proxy]): no RBAC rule',
    );
  });
});

describe('bearerToken', () => {
  it.each([
    [undefined, undefined],
    ['', undefined],
    ['Bearer abc', 'abc'],
    ['bearer abc', 'abc'],
    ['Bearer   abc  ', 'abc'],
    ['Basic abc', undefined],
    ['Bearer a b', undefined],
    ['Bearer', undefined],
  ])('%j -> %j', (h, want) => {
    expect(bearerToken(h)).toBe(want);
  });
});

function fakeReviews() {
  const tokens = new Map<string, { username: string; groups?: string[] }>();
  const calls = { token: 0, sar: [] as SubjectAccessReviewSpec[] };
  let failNext = false;
  const rules: ((s: SubjectAccessReviewSpec) => { allowed: boolean; reason?: string } | undefined)[] = [];
  const client: ReviewClient = {
    async tokenReview(token) {
      calls.token++;
      if (failNext) {
        failNext = false;
        throw new Error('connect ECONNREFUSED 127.0.0.1:6443');
      }
      const u = tokens.get(token);
      return u ? { authenticated: true, user: u } : { authenticated: false, error: token === 'expired' ? 'token expired' : undefined };
    },
    async subjectAccessReview(spec) {
      calls.sar.push(spec);
      if (failNext) {
        failNext = false;
        throw new Error('503 from control plane');
      }
      for (const r of rules) {
        const d = r(spec);
        if (d) return d;
      }
      return { allowed: false };
    },
  };
  return { client, tokens, calls, rules, failOnce: () => (failNext = true) };
}

const goodCert: PeerCertificate = { verified: true, commonName: 'alice', organizations: ['ops', 'forensics'] };

describe('Authenticator', () => {
  it('takes user = CN and groups = O from a verified client certificate, plus system:authenticated', async () => {
    const a = new Authenticator({ x509: true, anonymous: false, clock: new ManualClock() });
    expect(await a.authenticate({ peerCertificate: goodCert })).toEqual({ username: 'alice', groups: ['ops', 'forensics', AUTHENTICATED_GROUP] });
    expect(await a.authenticate({ peerCertificate: { ...goodCert, extKeyUsage: ['1.3.6.1.5.5.7.3.2'] } })).toMatchObject({ username: 'alice' });
  });

  it('rejects an unverified certificate or one not for client auth, even with anonymous on', async () => {
    const a = new Authenticator({ x509: true, anonymous: true, clock: new ManualClock() });
    for (const cert of [
      { ...goodCert, verified: false, verifyError: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' },
      { ...goodCert, extKeyUsage: ['1.3.6.1.5.5.7.3.1'] },
      { ...goodCert, commonName: '' },
    ]) {
      const err = await a.authenticate({ peerCertificate: cert }).catch((e: unknown) => e);
      expect(isNodeletError(err, 'UNAUTHENTICATED')).toBe(true);
      expect((err as Error).message).toBe('Unauthorized');
    }
  });

  it('ignores certificates when x509 is not configured', async () => {
    const a = new Authenticator({ x509: false, anonymous: true, clock: new ManualClock() });
    expect(await a.authenticate({ peerCertificate: goodCert })).toEqual({ username: ANONYMOUS_USER, groups: [UNAUTHENTICATED_GROUP] });
  });

  it('no credentials: 401 with anonymous off, system:anonymous with it on', async () => {
    const off = new Authenticator({ x509: true, anonymous: false, clock: new ManualClock() });
    await expect(off.authenticate({})).rejects.toMatchObject({ code: 'UNAUTHENTICATED', message: 'Unauthorized', details: { why: 'no credentials' } });
    const on = new Authenticator({ x509: true, anonymous: true, clock: new ManualClock() });
    expect(await on.authenticate({})).toEqual({ username: 'system:anonymous', groups: ['system:unauthenticated'] });
  });

  it('checks bearer tokens with a TokenReview and caches answers (good and bad) for cacheTTL', async () => {
    const clock = new ManualClock();
    const r = fakeReviews();
    r.tokens.set('tok-bob', { username: 'bob', groups: ['dev'] });
    const a = new Authenticator({ x509: true, anonymous: true, webhook: { client: r.client, cacheTtlMs: 120_000 }, clock });
    expect(await a.authenticate({ authorization: 'Bearer tok-bob' })).toEqual({ username: 'bob', groups: ['dev', AUTHENTICATED_GROUP] });
    expect(await a.authenticate({ authorization: 'Bearer tok-bob' })).toMatchObject({ username: 'bob' });
    expect(r.calls.token).toBe(1);
    // A rejected token is an error (401), not anonymous.
    await expect(a.authenticate({ authorization: 'Bearer expired' })).rejects.toMatchObject({ code: 'UNAUTHENTICATED', details: { why: 'invalid bearer token: token expired' } });
    await expect(a.authenticate({ authorization: 'Bearer expired' })).rejects.toMatchObject({ code: 'UNAUTHENTICATED' });
    expect(r.calls.token).toBe(2);
    clock.t += 120_000;
    r.tokens.delete('tok-bob');
    await expect(a.authenticate({ authorization: 'Bearer tok-bob' })).rejects.toMatchObject({ code: 'UNAUTHENTICATED', details: { why: 'invalid bearer token' } });
    expect(r.calls.token).toBe(3);
  });

  it('does not cache a failed TokenReview call', async () => {
    const r = fakeReviews();
    r.tokens.set('t', { username: 'carol' });
    const a = new Authenticator({ x509: false, anonymous: false, webhook: { client: r.client, cacheTtlMs: 60_000 }, clock: new ManualClock() });
    r.failOnce();
    await expect(a.authenticate({ authorization: 'Bearer t' })).rejects.toMatchObject({ code: 'UNAUTHENTICATED', details: { why: 'token review failed: connect ECONNREFUSED 127.0.0.1:6443' } });
    expect(await a.authenticate({ authorization: 'Bearer t' })).toMatchObject({ username: 'carol' });
  });

  it('a verified certificate wins over a token; a token without webhook authn is ignored', async () => {
    const r = fakeReviews();
    const a = new Authenticator({ x509: true, anonymous: false, webhook: { client: r.client, cacheTtlMs: 60_000 }, clock: new ManualClock() });
    expect(await a.authenticate({ peerCertificate: goodCert, authorization: 'Bearer whatever' })).toMatchObject({ username: 'alice' });
    expect(r.calls.token).toBe(0);
    const noWebhook = new Authenticator({ x509: true, anonymous: true, clock: new ManualClock() });
    expect(await noWebhook.authenticate({ authorization: 'Bearer whatever' })).toMatchObject({ username: ANONYMOUS_USER });
  });
});

describe('authorization', () => {
  const alice = { username: 'alice', groups: ['ops', AUTHENTICATED_GROUP] };

  it('AlwaysAllow allows everything', async () => {
    await expect(authorizeRequest(alwaysAllow, { username: ANONYMOUS_USER, groups: [] }, requestAttributes('POST', '/checkpoint/a/b/c', 'n'))).resolves.toBeUndefined();
  });

  it('Webhook posts a SubjectAccessReview with the request attributes and answers 403 with the reason', async () => {
    const r = fakeReviews();
    r.rules.push((s) => (s.resourceAttributes.subresource === 'checkpoint' ? { allowed: false, reason: 'no RBAC policy matched' } : undefined));
    const authz = new WebhookAuthorizer({ client: r.client, cacheAuthorizedTtlMs: 300_000, cacheUnauthorizedTtlMs: 30_000, clock: new ManualClock() });
    const err = await authorizeRequest(authz, alice, requestAttributes('POST', '/checkpoint/default/web/app', 'node-a')).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'FORBIDDEN', message: 'Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[checkpoint]): no RBAC policy matched' });
    expect(r.calls.sar).toEqual([{ user: 'alice', groups: ['ops', AUTHENTICATED_GROUP], resourceAttributes: nodeAttrs('create', 'checkpoint') }]);
  });

  it('allows /healthz through nodes/proxy when nodes/healthz is not granted', async () => {
    const r = fakeReviews();
    r.rules.push((s) => (s.resourceAttributes.subresource === 'proxy' ? { allowed: true } : undefined));
    const authz = new WebhookAuthorizer({ client: r.client, cacheAuthorizedTtlMs: 300_000, cacheUnauthorizedTtlMs: 30_000, clock: new ManualClock() });
    await authorizeRequest(authz, alice, requestAttributes('GET', '/healthz', 'node-a'));
    expect(r.calls.sar.map((s) => s.resourceAttributes.subresource)).toEqual(['healthz', 'proxy']);
  });

  it('caches allowed answers for cacheAuthorizedTTL and denied ones for cacheUnauthorizedTTL', async () => {
    const clock = new ManualClock();
    const r = fakeReviews();
    let allowCheckpoint = false;
    r.rules.push((s) => (s.resourceAttributes.subresource === 'checkpoint' ? { allowed: allowCheckpoint } : { allowed: true }));
    const authz = new WebhookAuthorizer({ client: r.client, cacheAuthorizedTtlMs: 300_000, cacheUnauthorizedTtlMs: 30_000, clock });
    const cp = requestAttributes('POST', '/checkpoint/a/b/c', 'n');
    const pods = requestAttributes('GET', '/pods', 'n');
    await expect(authorizeRequest(authz, alice, cp)).rejects.toMatchObject({ code: 'FORBIDDEN' });
    await authorizeRequest(authz, alice, pods);
    allowCheckpoint = true;
    clock.t += 29_999;
    await expect(authorizeRequest(authz, alice, cp)).rejects.toMatchObject({ code: 'FORBIDDEN' });
    expect(r.calls.sar).toHaveLength(2);
    clock.t += 1;
    await authorizeRequest(authz, alice, cp);
    expect(r.calls.sar).toHaveLength(3);
    // The allowed /pods answer is still cached at 30 s, gone after 300 s.
    await authorizeRequest(authz, alice, pods);
    expect(r.calls.sar).toHaveLength(3);
    clock.t += 300_000;
    await authorizeRequest(authz, alice, pods);
    expect(r.calls.sar).toHaveLength(4);
    // Another user is another cache entry.
    await authorizeRequest(authz, { username: 'bob', groups: [] }, pods);
    expect(r.calls.sar).toHaveLength(5);
  });

  it('an authorizer failure is a 500 naming the request, and is not cached', async () => {
    const r = fakeReviews();
    r.rules.push(() => ({ allowed: true }));
    const authz = new WebhookAuthorizer({ client: r.client, cacheAuthorizedTtlMs: 300_000, cacheUnauthorizedTtlMs: 30_000, clock: new ManualClock() });
    r.failOnce();
    await expect(authorizeRequest(authz, alice, requestAttributes('POST', '/checkpoint/a/b/c', 'n'))).rejects.toMatchObject({
      code: 'INTERNAL',
      message: 'Authorization error (user=alice, verb=create, resource=nodes, subresource(s)=[checkpoint])',
      details: { why: 'subject access review failed: 503 from control plane' },
    });
    await authorizeRequest(authz, alice, requestAttributes('POST', '/checkpoint/a/b/c', 'n'));
  });
});
