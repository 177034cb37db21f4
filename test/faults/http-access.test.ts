/**
 * (d) Hostile HTTP in volume and (e) access, against the built daemon on the test CRI
 * server. Generated requests (traversal, encoded slashes, NUL, oversized targets, headers
 * and bodies, invalid query values) on all three servers, slow clients holding connections
 * and a burst of concurrent connections (short 1,000, full 5,000): the daemon never exits,
 * never answers 5xx to them, and /healthz answers throughout. Access: every route of the
 * HTTPS server refuses a client without a certificate and one whose certificate another
 * CA issued (401 or a refused handshake) and serves a client of the trusted CA; the
 * read-only port serves none of the debugging routes; the serving key is 0600, the
 * checkpoint directory 0700; a bearer token sent to nodelet never appears in its logs.
 * (Webhook denial, 403, is covered by test/integration/server/https-checkpoint.test.ts.)
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeNode, sleeperManifest, type FakeNode } from '../helpers/fake-node.js';
import { eventually } from '../helpers/nodelet.js';
import { createTestCa, type Issued } from '../integration/server/pki.js';
import { pick, procUsage, rng, SEED, Tally } from './report.js';

const REQUESTS = pick(2_000, 20_000);
const CONCURRENT = pick(1_000, 5_000);
const SLOW = pick(50, 200);
const tally = new Tally('http');
let node: FakeNode;
let client: Issued;
let stranger: Issued;
const TOKEN = 'fault-suite-secret-token-3f9c1a7e';

beforeAll(async () => {
  const ca = await createTestCa();
  const other = await createTestCa('another-ca');
  client = await ca.issue({ cn: 'ops' });
  stranger = await other.issue({ cn: 'ops' });
  node = await startFakeNode({ prefix: 'nodelet-faults-http-', manifests: { 'app.yaml': sleeperManifest('app', 'shop') }, clientCA: ca.cert });
  await eventually(() => [...node.cri.containers.values()].some((c) => c.state === 'CONTAINER_RUNNING'), 30_000);
});
afterAll(async () => {
  tally.write();
  await node?.close();
});

/** Sends raw bytes, resolves with the status code (0: closed without an answer). */
function raw(port: number, data: Buffer | string, o: { tls?: boolean; timeoutMs?: number } = {}): Promise<number> {
  return new Promise((resolve) => {
    const sock: net.Socket = o.tls ? tls.connect({ port, host: '127.0.0.1', rejectUnauthorized: false }) : net.connect(port, '127.0.0.1');
    let got = '';
    const done = () => {
      clearTimeout(t);
      sock.destroy();
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(got);
      resolve(m ? Number(m[1]) : 0);
    };
    const t = setTimeout(done, o.timeoutMs ?? 10_000);
    sock.on(o.tls ? 'secureConnect' : 'connect', () => sock.write(data));
    sock.on('data', (d) => {
      got += d.toString('latin1');
      if (/^HTTP\/1\.[01] \d{3}/.test(got)) done();
    });
    sock.on('error', done);
    sock.on('close', done);
  });
}

const PIECES = ['..', '.', '%2e%2e', '%2F', '%2f', '%00', '%', '%zz', '%c0%af', 'pods', 'healthz', 'stats', 'summary', 'containerLogs', 'checkpoint', 'shop', 'app-n1', 'web', 'metrics', 'x'.repeat(300), '\u00e9', '*', ';', '~', '%5C', '%u002e'];
const QUERIES = ['tailLines=-1', 'tailLines=99999999999999999999', 'limitBytes=abc', 'sinceSeconds=1e309', 'sinceTime=notatime', 'timeout=-5', 'timeout=1e400', 'follow=maybe', 'previous=%00', 'a=' + 'b'.repeat(9000), 'timestamps=true&timestamps=false'];

function generateRequest(r: ReturnType<typeof rng>): string {
  const method = r.pick(['GET', 'GET', 'POST', 'HEAD', 'PUT', 'DELETE', 'OPTIONS', 'TRACE', 'G\u0000T', 'CONNECT']);
  let target = '';
  for (let i = 0, n = 1 + r.int(6); i < n; i++) target += `/${r.pick(PIECES)}`;
  if (r.next() < 0.3) target += `?${r.pick(QUERIES)}`;
  if (r.next() < 0.05) target = r.pick(['*', 'http://127.0.0.1/healthz', '/' + 'a'.repeat(20_000), '//etc/passwd', '/\u0000']);
  let headers = 'Host: 127.0.0.1\r\n';
  const shape = r.int(10);
  if (shape === 0) headers += `X-Big: ${'h'.repeat(40_000)}\r\n`;
  if (shape === 1) for (let i = 0; i < 500; i++) headers += `X-${i}: v\r\n`;
  if (shape === 2) headers += 'Content-Length: 99999999999\r\n';
  if (shape === 3) headers += 'Transfer-Encoding: chunked\r\nContent-Length: 5\r\n';
  if (shape === 4) headers += `Authorization: Bearer ${TOKEN}\r\n`;
  const body = shape === 5 ? 'b'.repeat(200_000) : '';
  if (body) headers += `Content-Length: ${body.length}\r\n`;
  return `${method} ${target} HTTP/1.1\r\n${headers}Connection: close\r\n\r\n${body}`;
}

/** Polls /healthz every 100 ms until stopped; counts answers and failures. */
function healthzPoller() {
  let stop = false;
  const counts = { ok: 0, failed: 0 };
  const run = (async () => {
    while (!stop) {
      const s = await raw(node.ports.healthz, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', { timeoutMs: 5000 });
      if (s === 200) counts.ok++;
      else counts.failed++;
      await new Promise((res) => setTimeout(res, 100));
    }
  })();
  return { counts, stop: async () => ((stop = true), await run) };
}

describe(`hostile requests in volume (seed ${SEED})`, () => {
  it(`${REQUESTS} generated requests, ${SLOW} slow clients and ${CONCURRENT} concurrent connections: no exit, no 5xx, /healthz throughout`, async () => {
    const r = rng(SEED);
    const before = procUsage(node.nodelet.pid);
    const poll = healthzPoller();
    // Slow clients: half a request line, then silence; they hold their connections open meanwhile.
    const slow = Array.from({ length: SLOW }, () => raw(r.next() < 0.5 ? node.ports.readOnly : node.ports.healthz, 'GET /pods HTTP/1.1\r\nHost: x\r\nX-Slow: ', { timeoutMs: 15_000 }));
    const servers = [
      { port: node.ports.healthz, tls: false },
      { port: node.ports.readOnly, tls: false },
      { port: node.ports.https, tls: true },
    ];
    const statuses = new Map<number, number>();
    for (let i = 0; i < REQUESTS; i += 20) {
      const batch = Array.from({ length: Math.min(20, REQUESTS - i) }, () => {
        const s = r.pick(servers);
        return raw(s.port, generateRequest(r), { tls: s.tls });
      });
      for (const s of await Promise.all(batch)) statuses.set(s, (statuses.get(s) ?? 0) + 1);
    }
    tally.add('generated requests', REQUESTS);
    // A burst of concurrent connections, each a real request to the read-only port.
    const burst = await Promise.all(Array.from({ length: CONCURRENT }, () => raw(node.ports.readOnly, 'GET /pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', { timeoutMs: 30_000 })));
    tally.add('concurrent connections', CONCURRENT);
    tally.add('concurrent connections answered 200', burst.filter((s) => s === 200).length);
    const slowResults = await Promise.all(slow);
    tally.add('slow clients', SLOW);
    tally.add('slow clients cut off by the header timeout (408 or closed)', slowResults.filter((s) => s === 408 || s === 0).length);
    await poll.stop();
    const after = procUsage(node.nodelet.pid);
    for (const [s, n] of statuses) tally.add(`status ${s}`, n);
    tally.add('healthz answered 200', poll.counts.ok);
    tally.add('healthz failures', poll.counts.failed);
    tally.note('nodelet before', before);
    tally.note('nodelet after', after);
    const fiveHundreds = [...statuses].filter(([s]) => s >= 500).reduce((a, [, n]) => a + n, 0);
    tally.add('5xx answers', fiveHundreds);
    expect(node.nodelet.child.exitCode).toBeNull();
    tally.add('crashes', 0);
    expect(fiveHundreds).toBe(0);
    expect(poll.counts.failed).toBe(0);
    expect(poll.counts.ok).toBeGreaterThan(0);
    expect(burst.filter((s) => s === 200).length).toBe(CONCURRENT);
  });
});

/** One HTTPS request with an optional client certificate: the status, or 0 for a refused handshake/closed connection. */
function httpsStatus(method: string, target: string, cert?: Issued, headers = ''): Promise<number> {
  return new Promise((resolve) => {
    const sock = tls.connect({ port: node.ports.https, host: '127.0.0.1', ca: node.servingCert(), servername: 'localhost', ...(cert ? { cert: cert.cert, key: cert.key } : {}) });
    let got = '';
    const done = () => {
      sock.destroy();
      resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0));
    };
    sock.on('secureConnect', () => sock.write(`${method} ${target} HTTP/1.1\r\nHost: localhost\r\n${headers}Connection: close\r\n\r\n`));
    sock.on('data', (d) => {
      got += d.toString('latin1');
      if (/^HTTP\/1\.1 \d{3}/.test(got)) done();
    });
    sock.on('error', done);
    sock.on('close', done);
    setTimeout(done, 10_000);
  });
}

/** The kubelet's routes (FACTS.md: the authorization mapping) with what serves them. */
const ROUTES: [string, string][] = [
  ['GET', '/pods'],
  ['GET', '/runningpods/'],
  ['GET', '/stats/summary'],
  ['GET', '/metrics'],
  ['GET', '/metrics/cadvisor'],
  ['GET', '/metrics/resource'],
  ['GET', '/metrics/probes'],
  ['GET', '/logs/'],
  ['GET', '/containerLogs/shop/app-n1/web'],
  ['POST', '/checkpoint/shop/app-n1/web'],
  ['GET', '/checkpoints'],
  ['GET', '/configz'],
  ['GET', '/spec/'],
  ['GET', '/healthz'],
];

describe('access', () => {
  it('every HTTPS route: 401 without a certificate, refused with another CA\'s, served for the trusted CA\'s', async () => {
    for (const [method, route] of ROUTES) {
      expect(await httpsStatus(method, route), `${method} ${route} without a certificate`).toBe(401);
      expect([0, 401], `${method} ${route} with another CA's certificate`).toContain(await httpsStatus(method, route, stranger));
      const served = await httpsStatus(method, route, client);
      expect(served, `${method} ${route} with the trusted certificate`).not.toBe(401);
      expect(served).not.toBe(403);
      tally.add('routes checked');
      tally.add('unauthenticated requests refused', 2);
    }
  });

  it('the read-only port serves none of the debugging routes', async () => {
    for (const [method, route] of [['POST', '/checkpoint/shop/app-n1/web'], ['GET', '/containerLogs/shop/app-n1/web'], ['GET', '/logs/'], ['GET', '/checkpoints'], ['GET', '/configz'], ['GET', '/run/shop/app-n1/web'], ['POST', '/exec/shop/app-n1/web'], ['GET', '/debug/pprof/']] as const) {
      const s = await raw(node.ports.readOnly, `${method} ${route} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      expect([404, 405], `${method} ${route} on the read-only port`).toContain(s);
      tally.add('read-only port: debugging routes refused');
    }
    expect(await raw(node.ports.readOnly, 'GET /pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).toBe(200);
  });

  it('keys 0600, the checkpoint directory 0700, and a bearer token never in the logs', async () => {
    expect(fs.statSync(path.join(node.rootDir, 'pki', 'kubelet.key')).mode & 0o777).toBe(0o600);
    expect(await httpsStatus('POST', '/checkpoint/shop/app-n1/web', client)).toBe(200);
    expect(fs.statSync(path.join(node.rootDir, 'checkpoints')).mode & 0o777).toBe(0o700);
    for (const f of fs.readdirSync(path.join(node.rootDir, 'checkpoints'))) expect(fs.statSync(path.join(node.rootDir, 'checkpoints', f)).mode & 0o777).toBe(0o600);
    for (const [method, route] of ROUTES) await httpsStatus(method, route, undefined, `Authorization: Bearer ${TOKEN}\r\n`);
    await new Promise((r) => setTimeout(r, 500));
    expect(node.nodelet.stdout.includes(TOKEN) || node.nodelet.stderr.includes(TOKEN)).toBe(false);
    tally.add('log bytes searched for the token', node.nodelet.stdout.length + node.nodelet.stderr.length);
  });
});
