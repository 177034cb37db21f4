/**
 * No request may end, wedge or fool nodelet (issue 19). Against the built daemon, with the
 * test CRI server as its runtime:
 * - request targets and headers that Node hands over unchecked or refuses itself, written
 *   byte for byte on raw TCP/TLS connections (curl and undici would normalize them), to the
 *   healthz port, the HTTPS port and the read-only port: each gets a 4xx with a reason (or
 *   a close where the request is too large to read), and nodelet stays up and healthy;
 * - GET /containerLogs on a 500 MB log answers tailLines and limitBytes at once, reading
 *   only what it answers (RSS checked), and a follower stays on without piling listeners.
 */
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import type { Pod, PodList } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeNode, sleeperManifest, type FakeNode } from '../../helpers/fake-node.js';
import { eventually, type NodeletProcess } from '../../helpers/nodelet.js';
import { createTestCa, type Issued } from '../server/pki.js';

let node: FakeNode;
let nodelet: NodeletProcess;
let dir: string;
let ports: { healthz: number; https: number; readOnly: number };
let serverCa: string;
let client: Issued;
let pod: Pod;

beforeAll(async () => {
  const ca = await createTestCa();
  client = await ca.issue({ cn: 'ops', orgs: ['ops'] });
  node = await startFakeNode({ manifests: { 'app.yaml': sleeperManifest('app', 'shop') }, clientCA: ca.cert });
  ({ nodelet, dir, ports } = node);
  pod = await eventually(async () => {
    const res = await fetch(`http://127.0.0.1:${ports.readOnly}/pods`);
    const p = ((await res.json()) as PodList).items[0];
    return p?.status?.containerStatuses?.[0]?.containerID && p.status.containerStatuses[0].state?.running ? p : undefined;
  }, 20_000);
  serverCa = node.servingCert();
});

afterAll(() => node?.close());

interface RawAnswer {
  status?: number;
  head: string;
  body: string;
  /** The connection ended (closed or reset) without a status line. */
  closed: boolean;
}

/** Writes `bytes` on a fresh connection (TLS for the HTTPS port) and reads until the server closes. */
function rawRequest(port: number, bytes: Buffer, useTls: boolean, cert?: Issued): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const sock = useTls ? tls.connect({ host: '127.0.0.1', port, ca: serverCa, servername: 'localhost', ...(cert ? { cert: cert.cert, key: cert.key } : {}) }) : net.connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    const done = () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3}) /.exec(text);
      const sep = text.indexOf('\r\n\r\n');
      resolve({ ...(m ? { status: Number(m[1]) } : {}), head: sep < 0 ? text : text.slice(0, sep), body: sep < 0 ? '' : text.slice(sep + 4), closed: !m });
    };
    const timer = setTimeout(() => sock.destroy(), 10_000);
    sock.once(useTls ? 'secureConnect' : 'connect', () => sock.write(bytes));
    sock.on('data', (d: Buffer) => chunks.push(d));
    sock.on('error', () => undefined);
    sock.on('close', done);
  });
}

const request = (target: string, headers = '') => Buffer.from(`GET ${target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n${headers}\r\n`, 'latin1');

async function healthy(): Promise<void> {
  expect(nodelet.child.exitCode, `nodelet exited; stderr:\n${nodelet.stderr}`).toBeNull();
  const res = await fetch(`http://127.0.0.1:${ports.healthz}/healthz`);
  expect(res.status).toBe(200);
  expect(await res.text()).toBe('ok');
}

describe('hostile requests on every port', () => {
  const cases: [string, () => Buffer, 'reason' | 'too-large'][] = [
    ['an absolute-form target with a port out of range', () => request('http://a:99999/healthz'), 'reason'],
    ['an absolute-form target with a broken IPv6 host', () => request('http://[/healthz'), 'reason'],
    ['an absolute-form target with bad percent-encoding in the host', () => request('http://%zz/healthz'), 'reason'],
    ['an absolute-form target with no host', () => request('http:///'), 'reason'],
    ['the asterisk-form', () => request('*'), 'reason'],
    ['a valid absolute-form URL', () => request(`http://127.0.0.1:${ports.healthz}/healthz`), 'reason'],
    ['a NUL in the path', () => request('/heal\0thz'), 'reason'],
    ['an encoded slash', () => request('/healthz%2F..%2Fpods'), 'reason'],
    ['bad percent-encoding in the path', () => request('/healthz%zz'), 'reason'],
    ['a 100 KB header', () => request('/healthz', `X-Big: ${'a'.repeat(100 * 1024)}\r\n`), 'too-large'],
    ['a 70 KB target', () => request(`/${'a'.repeat(70 * 1024)}`), 'too-large'],
  ];
  const servers = [
    ['healthz', () => ports.healthz, false],
    ['HTTPS', () => ports.https, true],
    ['read-only', () => ports.readOnly, false],
  ] as const;

  for (const [server, port, useTls] of servers) {
    it(`the ${server} port answers each with a 4xx and a reason, and nodelet stays up`, async () => {
      for (const [what, bytes, expect4xx] of cases) {
        const a = await rawRequest(port(), bytes(), useTls);
        if (expect4xx === 'too-large') {
          // Node stops reading at maxHeaderSize: 431, or a reset when the rest was still coming.
          expect(a.closed || a.status === 431, `${server}: ${what}: ${a.head}`).toBe(true);
        } else {
          expect(a.status, `${server}: ${what}: ${a.head}`).toBeGreaterThanOrEqual(400);
          expect(a.status, `${server}: ${what}: ${a.head}`).toBeLessThan(500);
          expect(a.body.trim().length, `${server}: ${what}: a reason in the body`).toBeGreaterThan(10);
        }
        await healthy();
      }
    });
  }

  it('CONNECT gets an answer on every port, as any method a path does not serve (Node drops it unanswered by default)', async () => {
    const connect = (target: string) => Buffer.from(`CONNECT ${target} HTTP/1.1\r\nHost: localhost\r\n\r\n`, 'latin1');
    const runPath = `/run/${pod.metadata!.namespace}/${pod.metadata!.name}/${pod.spec!.containers[0]!.name}`;
    const answers = {
      httpsServed: await rawRequest(ports.https, connect(runPath), true, client),
      httpsUnknown: await rawRequest(ports.https, connect('/nothing-here'), true, client),
      httpsAnonymous: await rawRequest(ports.https, connect(runPath), true),
      httpsAuthority: await rawRequest(ports.https, connect('example.com:443'), true, client),
      readOnly: await rawRequest(ports.readOnly, connect('/pods'), false),
      healthz: await rawRequest(ports.healthz, connect('/healthz'), false),
      healthzAuthority: await rawRequest(ports.healthz, connect('example.com:443'), false),
    };
    const summary = Object.fromEntries(Object.entries(answers).map(([k, a]) => [k, [a.status, /\r\nAllow: ([^\r]*)/i.exec(a.head)?.[1] ?? null]]));
    expect(summary).toEqual({
      httpsServed: [405, 'POST'],
      httpsUnknown: [404, null],
      httpsAnonymous: [401, null],
      httpsAuthority: [400, null],
      readOnly: [405, 'GET'],
      healthz: [405, 'GET, HEAD'],
      healthzAuthority: [400, null],
    });
    await healthy();
  });

  it('says what is wrong: the reason names the problem', async () => {
    const ro = await rawRequest(ports.readOnly, request('http://a:99999/healthz'), false);
    expect(ro.status).toBe(400);
    expect(JSON.parse(ro.body)).toMatchObject({ kind: 'Status', code: 400, message: expect.stringContaining('is not a valid absolute URL') });
    const hz = await rawRequest(ports.healthz, request('/heal\0thz'), false);
    expect(hz.status).toBe(400);
    expect(hz.body).toContain('malformed HTTP request');
    const big = await rawRequest(ports.healthz, request('/healthz', `X-Big: ${'a'.repeat(20 * 1024)}\r\n`), false);
    expect(big.status).toBe(431);
    expect(big.body).toContain('exceed');
  });
});

/** VmRSS of the daemon, in kB. */
function rssKb(): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${nodelet.pid}/status`, 'utf8'));
  return Number(m![1]);
}

function get(p: string, onData?: (s: string, req: import('node:http').ClientRequest) => void): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get({ host: '127.0.0.1', port: ports.https, path: p, ca: serverCa, cert: client.cert, key: client.key, servername: 'localhost', agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
        onData?.(body, req);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('close', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', (err) => (req.destroyed && onData ? undefined : reject(err)));
  });
}

describe('GET /containerLogs on a 500 MB log', () => {
  let logFile: string;
  const logs = () => `/containerLogs/shop/app-n1/web`;
  const first = '2026-11-23T06:00:00.000000001Z stdout F first line of the log\n';
  const last = '2026-11-23T06:59:59.999999999Z stdout F the last line\n';

  beforeAll(() => {
    const st = pod.status!.containerStatuses![0]!;
    logFile = path.join(dir, 'logs', `shop_app-n1_${pod.metadata!.uid}`, 'web', `${st.restartCount}.log`);
    fs.mkdirSync(path.dirname(logFile), { recursive: true });
    // 500 MiB written quickly: one 1 MiB buffer of CRI records, repeated.
    const rec = Buffer.from(`2026-11-23T06:30:00.123456789Z stdout F ${'x'.repeat(88)}\n`);
    const mib = Buffer.concat(Array.from({ length: Math.floor((1 << 20) / rec.length) }, () => rec));
    const fd = fs.openSync(logFile, 'w');
    fs.writeSync(fd, first);
    for (let i = 0; i < 500; i++) fs.writeSync(fd, mib);
    fs.writeSync(fd, last);
    fs.closeSync(fd);
  });
  afterAll(() => fs.rmSync(logFile, { force: true }));

  it('tailLines=1 and limitBytes answer in under a second, the daemon\'s RSS growing under 20 MB', async () => {
    expect(fs.statSync(logFile).size).toBeGreaterThan(500 * 1e6);
    // Warm the TLS path up with an answer that reads no log.
    expect((await get('/containerLogs/shop/app-n1/nope')).status).toBe(404);
    const before = rssKb();

    let t = Date.now();
    const tail = await get(`${logs()}?tailLines=1`);
    expect(Date.now() - t).toBeLessThan(1000);
    expect(tail).toEqual({ status: 200, body: 'the last line\n' });
    expect((await get(`${logs()}?tailLines=2&timestamps=true`)).body).toBe(`2026-11-23T06:30:00.123456789Z ${'x'.repeat(88)}\n2026-11-23T06:59:59.999999999Z the last line\n`);

    t = Date.now();
    const head = await get(`${logs()}?limitBytes=10`);
    expect(Date.now() - t).toBeLessThan(1000);
    expect(head).toEqual({ status: 200, body: 'first line' });

    expect(rssKb() - before).toBeLessThan(20 * 1024);
    await healthy();
  });

  it('a follower stays on for seconds with one listener: no MaxListenersExceededWarning, appended lines arrive', async () => {
    const started = Date.now();
    let appended = false;
    const r = await get(`${logs()}?tailLines=1&follow=true`, (body, req) => {
      if (!appended && body === 'the last line\n') {
        appended = true;
        // Appended after a dozen polls (the old follower added a listener per poll: the warning comes at 11).
        setTimeout(() => fs.appendFileSync(logFile, '2026-11-23T07:00:00Z stdout F appended\n'), 3200);
      }
      if (body.endsWith('appended\n')) req.destroy();
    });
    expect(r.body).toBe('the last line\nappended\n');
    expect(Date.now() - started).toBeGreaterThan(3000);
    await healthy();
    expect(nodelet.stderr).not.toContain('MaxListenersExceededWarning');
  });
});
