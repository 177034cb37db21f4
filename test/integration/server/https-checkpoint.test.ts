/**
 * The node's HTTPS server end to end: real TLS with real certificates (a client CA and
 * client certificates made in the test), the real CRI client against the test CRI server
 * (which writes a real tar archive), the checkpoint service on a temporary root dir.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { realClock } from '../../../src/clock.js';
import { HealthRegistry } from '../../../src/health/checks.js';
import { HealthzServer } from '../../../src/server/healthz-server.js';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import type { PodSandboxConfig } from '../../../src/runtime/types.js';
import { inspectArchive } from '../../../src/checkpoint/archive.js';
import { Authenticator, WebhookAuthorizer, alwaysAllow, type Authorizer, type ReviewClient, type SubjectAccessReviewSpec } from '../../../src/server/auth.js';
import { CheckpointService, type PodLookup } from '../../../src/checkpoint/service.js';
import { buildServerAuth, checkpointsEnabled } from '../../../src/server/from-config.js';
import { createNodeServer, createReadOnlyServer, type NodeServer } from '../../../src/server/https-server.js';
import { loadOrCreateServingCert, type ServingCert } from '../../../src/server/tls.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { createTestCa, type Issued, type TestCa } from './pki.js';
import { request } from './client.js';

const PODS: Pod[] = [
  { metadata: { namespace: 'default', name: 'web-0', uid: 'uid-web' }, spec: { containers: [{ name: 'app' }, { name: 'sidecar' }], initContainers: [{ name: 'init-db' }] } },
  { metadata: { namespace: 'prod', name: 'db', uid: 'uid-db' }, spec: { containers: [{ name: 'pg' }] } },
];
const podLookup: PodLookup = {
  getPod: (ns, name) => PODS.find((p) => p.metadata?.namespace === ns && p.metadata?.name === name),
  listPods: () => PODS,
};

let tmp: string;
let ca: TestCa;
let otherCa: TestCa;
let alice: Issued;
let serving: ServingCert;
let fake: FakeRuntime;
let cri: CriClient;
const servers: NodeServer[] = [];

async function runContainer(ns: string, pod: string, uid: string, name: string): Promise<string> {
  const sandbox: PodSandboxConfig = {
    metadata: { name: pod, uid, namespace: ns, attempt: 0 },
    labels: { 'io.kubernetes.pod.uid': uid, 'io.kubernetes.pod.name': pod, 'io.kubernetes.pod.namespace': ns },
    linux: { securityContext: { namespaceOptions: { network: 'NODE' } } },
  };
  const existing = await cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.uid': uid } });
  const sid = existing[0]?.id ?? (await cri.runPodSandbox(sandbox));
  const id = await cri.createContainer(
    sid,
    {
      metadata: { name, attempt: 0 },
      image: { image: 'docker.io/local/busybox:latest' },
      command: ['sleep', '3600'],
      labels: { ...sandbox.labels, 'io.kubernetes.container.name': name },
    },
    sandbox,
  );
  await cri.startContainer(id);
  return id;
}

interface NodeOpts {
  checkpoints?: boolean;
  anonymous?: boolean;
  authorizer?: Authorizer;
  reviews?: ReviewClient;
  rootDir?: string;
  shutdownTimeoutMs?: number;
}

async function startNode(o: NodeOpts = {}): Promise<{ url: string; rootDir: string }> {
  const rootDir = o.rootDir ?? (await fsp.mkdtemp(path.join(tmp, 'root-')));
  const health = new HealthRegistry();
  health.add({ name: 'loops', check() {} });
  const server = createNodeServer({
    address: '127.0.0.1',
    port: 0,
    tls: { cert: serving.cert, key: serving.key, clientCA: ca.cert },
    authenticator: new Authenticator({
      x509: true,
      anonymous: o.anonymous ?? false,
      clock: realClock,
      ...(o.reviews ? { webhook: { client: o.reviews, cacheTtlMs: 60_000 } } : {}),
    }),
    authorizer: o.authorizer ?? alwaysAllow,
    nodeName: 'node-a',
    health,
    pods: podLookup,
    ...(o.shutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: o.shutdownTimeoutMs } : {}),
    ...(o.checkpoints === false ? {} : { checkpoints: new CheckpointService({ rootDir, runtime: cri, pods: podLookup, runtimeRequestTimeoutMs: 30_000, clock: realClock }) }),
  });
  servers.push(server);
  const { port } = await server.start();
  return { url: `https://127.0.0.1:${port}`, rootDir };
}

const asAlice = () => ({ ca: serving.cert, cert: alice.cert, key: alice.key });

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-https-'));
  ca = await createTestCa();
  otherCa = await createTestCa('someone-else');
  alice = await ca.issue({ cn: 'alice', orgs: ['forensics'] });
  serving = await loadOrCreateServingCert({ certDir: path.join(tmp, 'pki'), hostname: 'node-a', ips: ['127.0.0.1'] });
  fake = await startFakeRuntime();
  cri = createCriClient({ runtimeEndpoint: fake.endpoint, requestTimeoutMs: 10_000 });
  await runContainer('default', 'web-0', 'uid-web', 'app');
  await runContainer('default', 'web-0', 'uid-web', 'sidecar');
  await runContainer('prod', 'db', 'uid-db', 'pg');
});

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.stop()));
  fake.checkpointDelayMs = 0;
  fake.failWith('CheckpointContainer', undefined);
});

afterAll(async () => {
  cri?.close();
  await fake?.stop();
  if (tmp) await fsp.rm(tmp, { recursive: true, force: true });
});

describe('authentication and authorization over real TLS', () => {
  it('lets an mTLS user checkpoint: 200, {"items":[path]}, a 0600 valid tar under <root>/checkpoints (0700)', async () => {
    const { url, rootDir } = await startNode();
    const r = await request(`${url}/checkpoint/default/web-0/app?timeout=20`, { method: 'POST', ...asAlice() });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('application/json');
    const body = r.json() as { items: string[] };
    expect(body.items).toHaveLength(1);
    const archive = body.items[0]!;
    expect(path.dirname(archive)).toBe(path.join(rootDir, 'checkpoints'));
    expect(path.basename(archive)).toMatch(/^checkpoint-web-0_default-app-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\.tar$/);
    expect(fs.statSync(archive).mode & 0o777).toBe(0o600);
    expect(fs.statSync(path.join(rootDir, 'checkpoints')).mode & 0o777).toBe(0o700);
    const inspected = await inspectArchive(archive);
    expect(inspected).toMatchObject({ pod: 'web-0', namespace: 'default', container: 'app', size: fs.statSync(archive).size });
    expect(inspected.entries.map((e) => e.name)).toEqual(['config.dump', 'spec.dump', 'checkpoint/pages-1.img', 'checkpoint/inventory.img']);
    expect(fake.callsOf('CheckpointContainer').at(-1)?.request).toMatchObject({ location: archive, timeout: 20 });

    // GET /checkpoints lists it with its sha256.
    const list = await request(`${url}/checkpoints`, asAlice());
    expect(list.status).toBe(200);
    expect(list.json()).toEqual({ items: [{ path: archive, pod: 'web-0', namespace: 'default', container: 'app', time: inspected.time, size: inspected.size, sha256: inspected.sha256 }] });
  });

  it('401 without credentials when anonymous is off; anonymous reaches authorization when on', async () => {
    const { url } = await startNode();
    const r = await request(`${url}/checkpoint/default/web-0/app`, { method: 'POST', ca: serving.cert });
    expect(r.status).toBe(401);
    expect(r.json()).toEqual({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: 'Unauthorized', reason: 'Unauthorized', code: 401 });
    expect((await request(`${url}/healthz`, { ca: serving.cert })).status).toBe(401);

    const seen: SubjectAccessReviewSpec[] = [];
    const anon = await startNode({
      anonymous: true,
      authorizer: new WebhookAuthorizer({
        client: { subjectAccessReview: async (s) => (seen.push(s), { allowed: false }) },
        cacheAuthorizedTtlMs: 0,
        cacheUnauthorizedTtlMs: 0,
        clock: realClock,
      }),
    });
    const a = await request(`${anon.url}/pods`, { ca: serving.cert });
    expect(a.status).toBe(403);
    expect(seen[0]).toMatchObject({ user: 'system:anonymous', groups: ['system:unauthenticated'] });
  });

  it('401 for a client certificate from another CA, or one not made for client auth', async () => {
    const { url } = await startNode({ anonymous: true });
    const mallory = await otherCa.issue({ cn: 'alice', orgs: ['system:masters'] });
    const r = await request(`${url}/pods`, { ca: serving.cert, cert: mallory.cert, key: mallory.key });
    expect(r.status).toBe(401);
    const serverOnly = await ca.issue({ cn: 'bob', eku: ['1.3.6.1.5.5.7.3.1'] });
    expect((await request(`${url}/pods`, { ca: serving.cert, cert: serverOnly.cert, key: serverOnly.key })).status).toBe(401);
  });

  it('refuses TLS 1.2 renegotiation: a connection keeps the client certificate it was authenticated with', async () => {
    const { url } = await startNode();
    const sock = tls.connect({ host: '127.0.0.1', port: Number(new URL(url).port), servername: 'node-a', maxVersion: 'TLSv1.2', ...asAlice() });
    const failed = new Promise<Error>((resolve) => sock.once('error', resolve));
    await new Promise<void>((resolve, reject) => {
      sock.once('secureConnect', resolve);
      sock.once('error', reject);
    });
    expect(sock.getProtocol()).toBe('TLSv1.2');
    // A renegotiation could present another certificate after the server read this one (once per connection).
    const renegotiated = new Promise<string>((resolve) => sock.renegotiate({}, (err) => resolve(err ? `error: ${err.message}` : 'renegotiated')));
    const outcome = await Promise.race([renegotiated, failed.then((e) => `connection error: ${e.message}`)]);
    sock.destroy();
    expect(outcome).toMatch(/no renegotiation/);
  });

  it('403 from a Webhook denial, with the kubelet message and the reason; the SAR carries CN, O and the node attributes', async () => {
    const seen: SubjectAccessReviewSpec[] = [];
    const reviews: ReviewClient = {
      tokenReview: async (t) => (t === 'tok-bob' ? { authenticated: true, user: { username: 'bob', groups: ['dev'] } } : { authenticated: false }),
      subjectAccessReview: async (s) => {
        seen.push(s);
        return s.resourceAttributes.subresource === 'checkpoint' ? { allowed: false, reason: 'RBAC: nodes/checkpoint create not granted' } : { allowed: true };
      },
    };
    const { url, rootDir } = await startNode({ reviews, authorizer: new WebhookAuthorizer({ client: reviews, cacheAuthorizedTtlMs: 300_000, cacheUnauthorizedTtlMs: 30_000, clock: realClock }) });
    const r = await request(`${url}/checkpoint/default/web-0/app`, { method: 'POST', ...asAlice() });
    expect(r.status).toBe(403);
    expect(r.json()).toMatchObject({
      kind: 'Status',
      reason: 'Forbidden',
      code: 403,
      message: 'Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[checkpoint]): RBAC: nodes/checkpoint create not granted',
    });
    expect(seen[0]).toEqual({
      user: 'alice',
      groups: ['forensics', 'system:authenticated'],
      resourceAttributes: { verb: 'create', group: '', version: 'v1', resource: 'nodes', subresource: 'checkpoint', name: 'node-a', namespace: '' },
    });
    expect(fs.existsSync(path.join(rootDir, 'checkpoints'))).toBe(false);
    // A bearer token checked by TokenReview; /pods is nodes/proxy, allowed here.
    const pods = await request(`${url}/pods`, { ca: serving.cert, token: 'tok-bob' });
    expect(pods.status).toBe(200);
    expect(pods.json()).toMatchObject({ kind: 'PodList', apiVersion: 'v1', items: PODS });
    expect(seen.at(-1)).toMatchObject({ user: 'bob', resourceAttributes: { verb: 'get', subresource: 'proxy' } });
    expect((await request(`${url}/pods`, { ca: serving.cert, token: 'wrong' })).status).toBe(401);
  });

  it('builds standalone auth from the config: x509 + AlwaysAllow works, Webhook is refused with a reason', async () => {
    const caFile = path.join(tmp, 'client-ca.crt');
    await fsp.writeFile(caFile, ca.cert);
    const cfg = {
      authentication: { x509: { clientCAFile: caFile }, webhook: { enabled: false, cacheTTL: '2m0s' }, anonymous: { enabled: false } },
      authorization: { mode: 'AlwaysAllow' as const, webhook: { cacheAuthorizedTTL: '5m0s', cacheUnauthorizedTTL: '30s' } },
    };
    const auth = await buildServerAuth(cfg, { clock: realClock });
    expect(auth.clientCA).toBe(ca.cert);
    expect(await auth.authenticator.authenticate({ peerCertificate: { verified: true, commonName: 'alice', organizations: [] } })).toMatchObject({ username: 'alice' });
    await expect(buildServerAuth({ ...cfg, authorization: { ...cfg.authorization, mode: 'Webhook' } }, { clock: realClock })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('authorization.mode is Webhook but nodelet runs standalone'),
    });
    await expect(buildServerAuth({ ...cfg, authentication: { ...cfg.authentication, webhook: { enabled: true, cacheTTL: '2m0s' } } }, { clock: realClock })).rejects.toMatchObject({
      message: expect.stringContaining('authentication.webhook.enabled is true but nodelet runs standalone'),
    });
    await expect(buildServerAuth({ ...cfg, authentication: { ...cfg.authentication, x509: { clientCAFile: path.join(tmp, 'missing.crt') } } }, { clock: realClock })).rejects.toMatchObject({
      message: expect.stringMatching(/^authentication\.x509\.clientCAFile ".*missing\.crt": ENOENT/),
    });
  });
});

describe('checkpoint endpoint answers', () => {
  it('404 when the gate is off or debugging handlers are off (the route does not exist)', async () => {
    expect(checkpointsEnabled({ enableDebuggingHandlers: true, featureGates: {} })).toBe(true);
    expect(checkpointsEnabled({ enableDebuggingHandlers: true, featureGates: { ContainerCheckpoint: false } })).toBe(false);
    expect(checkpointsEnabled({ enableDebuggingHandlers: false, featureGates: { ContainerCheckpoint: true } })).toBe(false);
    const { url } = await startNode({ checkpoints: false });
    const r = await request(`${url}/checkpoint/default/web-0/app`, { method: 'POST', ...asAlice() });
    expect(r.status).toBe(404);
    expect(r.json()).toMatchObject({ kind: 'Status', reason: 'NotFound', code: 404 });
    expect((await request(`${url}/checkpoints`, asAlice())).status).toBe(404);
  });

  it('404 naming an unknown pod or container', async () => {
    const { url } = await startNode();
    const pod = await request(`${url}/checkpoint/default/nope/app`, { method: 'POST', ...asAlice() });
    expect(pod.status).toBe(404);
    expect(pod.json()).toMatchObject({ reason: 'NotFound', message: 'pods "nope" not found in namespace "default"' });
    const ctr = await request(`${url}/checkpoint/default/web-0/nope`, { method: 'POST', ...asAlice() });
    expect(ctr.status).toBe(404);
    expect(ctr.json()).toMatchObject({ message: 'container "nope" not found in pod "default/web-0"' });
  });

  it.each([
    ['/checkpoint/default/web-0/app?timeout=-1', 'timeout'],
    ['/checkpoint/default/web-0/app?timeout=abc', 'timeout'],
    ['/checkpoint/default/web-0/app?timeout=1.5', 'timeout'],
    // Refused by the request-target rules before any route runs (request-target.ts).
    ['/checkpoint/../web-0/app', 'the path "/checkpoint/../web-0/app" has a ".." segment'],
    ['/checkpoint/default/../app', 'has a ".." segment'],
    ['/checkpoint/default/..%2F..%2Fetc/app', 'the path segment "..%2F..%2Fetc" holds an encoded "/"'],
    ['/checkpoint/default/web-0%2F..%2Fx/app', 'the path segment "web-0%2F..%2Fx" holds an encoded "/"'],
    ['/checkpoint/%2e%2e/web-0/app', 'has a ".." segment'],
    ['/checkpoint/default/web-0/app%zz', 'is not valid percent-encoding'],
    ['/checkpoint/default//app', 'pod in the path is empty'],
    ['/checkpoint/default/web-0/', 'container in the path is empty'],
    ['/checkpoint/default/web-0', 'container in the path is empty'],
    ['/checkpoint/default/web-0/app/extra', 'the path has 4 segments'],
  ])('400 for %s naming %s, before any runtime call', async (p, naming) => {
    const { url, rootDir } = await startNode();
    const before = fake.calls.length;
    const r = await request(`${url}${p}`, { method: 'POST', ...asAlice() });
    expect(r.status).toBe(400);
    expect(r.json()).toMatchObject({ kind: 'Status', status: 'Failure', reason: 'BadRequest', code: 400, message: expect.stringContaining(naming) });
    expect(fake.calls.length).toBe(before);
    expect(fs.existsSync(path.join(rootDir, 'checkpoints'))).toBe(false);
  });

  it('500 with the runtime message when the runtime fails, and no archive left', async () => {
    const { url, rootDir } = await startNode();
    fake.failWith('CheckpointContainer', { code: 2, message: 'criu dump failed: task 42 has a tty' });
    const r = await request(`${url}/checkpoint/default/web-0/app`, { method: 'POST', ...asAlice() });
    expect(r.status).toBe(500);
    expect(r.json()).toMatchObject({
      reason: 'InternalError',
      message: 'checkpointing of default/web-0/app failed (CheckpointContainer: rpc error: code = Unknown desc = criu dump failed: task 42 has a tty)',
    });
    expect(await fsp.readdir(path.join(rootDir, 'checkpoints'))).toEqual([]);
  });

  it('runs different containers in parallel and serializes the same one; same-second archives get distinct names', async () => {
    const { url } = await startNode();
    fake.checkpointDelayMs = 400;
    const from = fake.callsOf('CheckpointContainer').length;
    const post = (c: string) => request(`${url}/checkpoint/default/web-0/${c}`, { method: 'POST', ...asAlice() });
    const replies = await Promise.all([post('app'), post('sidecar'), post('app')]);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200]);
    const calls = fake.callsOf('CheckpointContainer').slice(from);
    const ids = await cri.listContainers({ labelSelector: { 'io.kubernetes.pod.uid': 'uid-web' } });
    const idOf = (name: string) => ids.find((c) => c.metadata.name === name)!.id;
    const appCalls = calls.filter((c) => c.request.containerId === idOf('app'));
    const sideCall = calls.find((c) => c.request.containerId === idOf('sidecar'))!;
    expect(appCalls).toHaveLength(2);
    // The second app checkpoint reached the runtime only after the first finished (>= 400 ms later);
    // the sidecar's ran alongside the first app one.
    expect(appCalls[1]!.at - appCalls[0]!.at).toBeGreaterThanOrEqual(390);
    expect(Math.abs(sideCall.at - appCalls[0]!.at)).toBeLessThan(390);
    const appArchives = replies.filter((_, i) => i !== 1).map((r) => (r.json() as { items: string[] }).items[0]!);
    expect(new Set(appArchives).size).toBe(2);
    for (const a of appArchives) expect(fs.statSync(a).mode & 0o777).toBe(0o600);
  });
});

describe('other routes', () => {
  it('serves /healthz and refuses unknown paths and methods with Status bodies', async () => {
    const { url } = await startNode();
    const h = await request(`${url}/healthz`, asAlice());
    expect([h.status, h.body]).toEqual([200, 'ok']);
    expect((await request(`${url}/healthz?verbose`, asAlice())).body).toBe('[+]loops ok\nhealthz check passed\n');
    const unknown = await request(`${url}/nothing`, asAlice());
    expect(unknown.status).toBe(404);
    const wrong = await request(`${url}/checkpoint/default/web-0/app`, { method: 'GET', ...asAlice() });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.allow).toBe('POST');
  });

  it('the read-only port serves GET /pods and /healthz without auth and never checkpoints', async () => {
    const health = new HealthRegistry();
    const ro = createReadOnlyServer({ address: '127.0.0.1', port: 0, health, pods: podLookup });
    servers.push(ro);
    const { port } = await ro.start();
    const base = `http://127.0.0.1:${port}`;
    expect((await request(`${base}/pods`)).json()).toMatchObject({ kind: 'PodList', items: PODS });
    expect((await request(`${base}/healthz`)).body).toBe('ok');
    const before = fake.calls.length;
    expect((await request(`${base}/checkpoint/default/web-0/app`, { method: 'POST' })).status).toBe(404);
    expect((await request(`${base}/checkpoints`)).status).toBe(404);
    expect(fake.calls.length).toBe(before);
  });
});

describe('failing handlers', () => {
  it('a handler that throws answers 500 with a generic message, and the servers keep serving', async () => {
    let fail = true;
    const pods: PodLookup = {
      getPod: podLookup.getPod,
      listPods: () => {
        if (fail) throw new Error('secret detail of a bug');
        return PODS;
      },
    };
    const ro = createReadOnlyServer({ address: '127.0.0.1', port: 0, health: new HealthRegistry(), pods });
    servers.push(ro);
    const base = `http://127.0.0.1:${(await ro.start()).port}`;
    const r = await request(`${base}/pods`);
    expect(r.status).toBe(500);
    expect(r.json()).toMatchObject({ kind: 'Status', code: 500, message: 'Internal error occurred: unexpected server error' });
    expect(r.body).not.toContain('secret');
    fail = false;
    expect((await request(`${base}/pods`)).status).toBe(200);

    // The healthz server: a health run that rejects is a 500, not an unhandled rejection.
    let broken = true;
    const real = new HealthRegistry();
    const health = { run: () => (broken ? Promise.reject(new Error('registry bug')) : real.run()) } as unknown as HealthRegistry;
    const hz = new HealthzServer({ host: '127.0.0.1', port: 0, health });
    const { port } = await hz.start();
    try {
      const h = await request(`http://127.0.0.1:${port}/healthz`);
      expect([h.status, h.body]).toEqual([500, 'internal error\n']);
      broken = false;
      expect((await request(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    } finally {
      await hz.stop();
    }
  });
});

describe('stop', () => {
  it('lets a short request finish, and cuts a long one after shutdownTimeoutMs', async () => {
    const { url } = await startNode({ shutdownTimeoutMs: 300 });
    const server = servers.at(-1)!;
    fake.checkpointDelayMs = 100;
    const short = request(`${url}/checkpoint/default/web-0/app`, { method: 'POST', ...asAlice() });
    await waitFor(() => fake.callsOf('CheckpointContainer').some((c) => Date.now() - c.at < 100));
    await server.stop();
    expect((await short).status).toBe(200);

    const again = await startNode({ shutdownTimeoutMs: 300 });
    const server2 = servers.at(-1)!;
    fake.checkpointDelayMs = 5000;
    const long = request(`${again.url}/checkpoint/default/web-0/sidecar`, { method: 'POST', ...asAlice() }).then(
      (r) => r.status,
      (err: Error) => err.message,
    );
    const n = fake.callsOf('CheckpointContainer').length;
    await waitFor(() => fake.callsOf('CheckpointContainer').length > n);
    const t0 = Date.now();
    await server2.stop();
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(await long).toBe('socket hang up');
    // Further connections are refused.
    await expect(request(`${again.url}/healthz`, asAlice())).rejects.toThrow(/ECONNREFUSED/);
  });
});

/** Bounded polling for an event in another component (the runtime received a call). */
async function waitFor(cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > until) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}
