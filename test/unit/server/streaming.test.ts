/**
 * /exec, /attach, /portForward, /run (src/server/streaming.ts): the parameters as the
 * kubelet reads them, the runtime asked for the right container or sandbox, and the
 * upgraded connection proxied byte for byte through the HTTPS server to a stand-in for the
 * runtime's streaming server on loopback (what it receives, what comes back, who closes).
 */
import net from 'node:net';
import tls from 'node:tls';
import type { AddressInfo } from 'node:net';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { HealthRegistry } from '../../../src/health/checks.js';
import { alwaysAllow, Authenticator, type Authorizer } from '../../../src/server/auth.js';
import { createNodeServer, type NodeServer } from '../../../src/server/https-server.js';
import { parseStreamRequest, requestHead, StreamingService, type StreamingServiceOptions, type StreamRequest } from '../../../src/server/streaming.js';
import { generateSelfSigned } from '../../../src/server/tls.js';
import { VirtualClock } from '../../helpers/clock.js';
import type { PodSandbox, StreamAttachRequest, StreamExecRequest } from '../../../src/runtime/types.js';

const q = (s: string) => new URLSearchParams(s);

describe('parseStreamRequest', () => {
  const ok: [string, Parameters<typeof parseStreamRequest>, StreamRequest][] = [
    [
      'exec with the kubelet\'s parameter names',
      ['exec', ['ns', 'p', 'c'], q('command=sh&command=-c&command=echo%20hi&input=1&output=1&error=1')],
      { kind: 'exec', target: { namespace: 'ns', pod: 'p', container: 'c' }, options: { cmd: ['sh', '-c', 'echo hi'], stdin: true, stdout: true, stderr: true, tty: false } },
    ],
    [
      'the uid variant, stdin/stdout aliases, tty drops stderr',
      ['exec', ['ns', 'p', 'u-1', 'c'], q('command=ls&stdin=true&stdout=true&stderr=true&tty=1')],
      { kind: 'exec', target: { namespace: 'ns', pod: 'p', uid: 'u-1', container: 'c' }, options: { cmd: ['ls'], stdin: true, stdout: true, stderr: false, tty: true } },
    ],
    ['attach', ['attach', ['ns', 'p', 'c'], q('output=1')], { kind: 'attach', target: { namespace: 'ns', pod: 'p', container: 'c' }, options: { cmd: [], stdin: false, stdout: true, stderr: false, tty: false } }],
    ['portForward with ports', ['portForward', ['ns', 'p'], q('port=8080&port=1')], { kind: 'portForward', target: { namespace: 'ns', pod: 'p' }, ports: [8080, 1] }],
    ['portForward without ports (SPDY)', ['portForward', ['ns', 'p', 'uid'], q('')], { kind: 'portForward', target: { namespace: 'ns', pod: 'p', uid: 'uid' }, ports: [] }],
    ['run, percent-encoded names', ['run', ['n%2Ds', 'p', 'c'], q('command=true')], { kind: 'run', target: { namespace: 'n-s', pod: 'p', container: 'c' }, options: { cmd: ['true'], stdin: false, stdout: false, stderr: false, tty: false } }],
  ];
  it.each(ok)('%s', (_name, args, want) => expect(parseStreamRequest(...args)).toEqual(want));

  const bad: [string, Parameters<typeof parseStreamRequest>, string, RegExp][] = [
    ['no command', ['exec', ['ns', 'p', 'c'], q('output=1')], 'command', /a command is required/],
    ['a bad boolean', ['exec', ['ns', 'p', 'c'], q('command=ls&output=yes')], 'output', /output: "yes" is not a boolean/],
    ['no stream', ['exec', ['ns', 'p', 'c'], q('command=ls')], 'output', /at least 1 of stdin, stdout, stderr/],
    ['attach with a command', ['attach', ['ns', 'p', 'c'], q('command=ls&output=1')], 'command', /attach takes no command/],
    ['a short path', ['exec', ['ns', 'p'], q('command=ls&output=1')], 'path', /expected \/exec\/<namespace>\/<pod>\[\/<uid>\]\/<container>/],
    ['an empty segment', ['attach', ['ns', '', 'c'], q('output=1')], 'path', /expected/],
    ['bad percent-encoding', ['exec', ['ns', '%zz', 'c'], q('command=ls&output=1')], 'path', /percent-encoding/],
    ['a port out of range', ['portForward', ['ns', 'p'], q('port=65536')], 'port', /"65536" is not a port number/],
    ['a port that is not a number', ['portForward', ['ns', 'p'], q('port=http')], 'port', /"http" is not a port number/],
    ['too long a command', ['exec', ['ns', 'p', 'c'], q(`output=1&${'command=x&'.repeat(1025)}`)], 'command', /longer than 1024 arguments/],
  ];
  it.each(bad)('refuses %s, naming the parameter', (_name, args, param, msg) => {
    let err: unknown;
    try {
      parseStreamRequest(...args);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NodeletError);
    expect({ code: (err as NodeletError).code, param: (err as NodeletError).details.param }).toEqual({ code: 'INVALID_ARGUMENT', param });
    expect((err as Error).message).toMatch(msg);
  });
});

describe('requestHead', () => {
  it('sends the runtime URL\'s path and every negotiation header line as the client sent it, and nothing else', () => {
    const head = requestHead(
      {
        method: 'POST',
        rawHeaders: ['Host', 'node:10250', 'Authorization', 'Bearer secret', 'Connection', 'Upgrade', 'Upgrade', 'SPDY/3.1', 'X-Stream-Protocol-Version', 'v4.channel.k8s.io', 'X-Stream-Protocol-Version', 'v3.channel.k8s.io', 'Cookie', 'a=b', 'Sec-WebSocket-Protocol', 'v5.channel.k8s.io'],
      },
      new URL('http://127.0.0.1:4321/exec/Tok3n?x=1'),
    );
    expect(head).toBe(
      'POST /exec/Tok3n?x=1 HTTP/1.1\r\nHost: 127.0.0.1:4321\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: v3.channel.k8s.io\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n',
    );
  });
});

function testPod(o: { uid?: string; running?: boolean } = {}): Pod {
  return {
    metadata: { name: 'p', namespace: 'ns', uid: o.uid ?? 'uid-1' },
    spec: { containers: [{ name: 'c', image: 'i' }] },
    status: { containerStatuses: [{ name: 'c', image: 'i', imageID: '', ready: true, restartCount: 0, containerID: 'containerd://abc123', state: o.running === false ? { waiting: { reason: 'CrashLoopBackOff' } } : { running: {} } }] },
  };
}

/** A runtime recording what it is asked; its streaming URLs point at `streamBase`. */
function fakeRuntime(streamBase = 'http://127.0.0.1:1') {
  const calls: unknown[] = [];
  const sandboxes: PodSandbox[] = [
    { id: 'old', metadata: { name: 'p', uid: 'uid-1', namespace: 'ns', attempt: 0 }, state: 'SANDBOX_READY', createdAt: 1, labels: { 'io.kubernetes.pod.uid': 'uid-1' }, annotations: {}, runtimeHandler: '' },
    { id: 'new', metadata: { name: 'p', uid: 'uid-1', namespace: 'ns', attempt: 1 }, state: 'SANDBOX_READY', createdAt: 2, labels: { 'io.kubernetes.pod.uid': 'uid-1' }, annotations: {}, runtimeHandler: '' },
  ];
  return {
    calls,
    runtime: {
      exec: async (r: StreamExecRequest) => (calls.push(['exec', r]), `${streamBase}/exec/tok`),
      attach: async (r: StreamAttachRequest) => (calls.push(['attach', r]), `${streamBase}/attach/tok`),
      portForward: async (id: string, ports: number[]) => (calls.push(['portForward', id, ports]), `${streamBase}/portforward/tok`),
      // `false` exits 1, as in a shell; anything else 0.
      execSync: async (id: string, cmd: string[], t: number) => (calls.push(['execSync', id, cmd, t]), { stdout: Buffer.from('out\n'), stderr: Buffer.from('err\n'), exitCode: cmd[0] === 'false' ? 1 : 0 }),
      listPodSandbox: async (f?: { labelSelector?: Record<string, string>; state?: string }) => (calls.push(['listPodSandbox', f]), sandboxes.filter((s) => s.labels['io.kubernetes.pod.uid'] === f?.labelSelector?.['io.kubernetes.pod.uid'])),
    },
  };
}

const lookup = (pod: Pod | undefined) => ({ getPod: (ns: string, name: string) => (pod && ns === 'ns' && name === 'p' ? pod : undefined), listPods: () => (pod ? [pod] : []) });

describe('StreamingService', () => {
  it('asks the runtime for the running container by its ID, and for the newest ready sandbox of the pod', async () => {
    const f = fakeRuntime();
    const s = new StreamingService({ runtime: f.runtime, pods: lookup(testPod()), idleTimeoutMs: 0 });
    expect(await s.streamUrl(parseStreamRequest('exec', ['ns', 'p', 'c'], q('command=ls&input=1&output=1')))).toBe('http://127.0.0.1:1/exec/tok');
    expect(await s.streamUrl(parseStreamRequest('attach', ['ns', 'p', 'uid-1', 'c'], q('output=1&tty=1')))).toBe('http://127.0.0.1:1/attach/tok');
    expect(await s.streamUrl(parseStreamRequest('portForward', ['ns', 'p'], q('port=80')))).toBe('http://127.0.0.1:1/portforward/tok');
    expect((await s.run(parseStreamRequest('run', ['ns', 'p', 'c'], q('command=ls')))).toString()).toBe('out\nerr\n');
    expect(f.calls).toEqual([
      ['exec', { containerId: 'abc123', cmd: ['ls'], tty: false, stdin: true, stdout: true, stderr: false }],
      ['attach', { containerId: 'abc123', tty: true, stdin: false, stdout: true, stderr: false }],
      ['listPodSandbox', { labelSelector: { 'io.kubernetes.pod.uid': 'uid-1' }, state: 'SANDBOX_READY' }],
      ['portForward', 'new', [80]],
      ['execSync', 'abc123', ['ls'], 0],
    ]);
  });

  const refusals: [string, Pod | undefined, StreamRequest, string, RegExp][] = [
    ['an unknown pod', undefined, parseStreamRequest('exec', ['ns', 'p', 'c'], q('command=ls&output=1')), 'NOT_FOUND', /pod "p" in namespace "ns" not found/],
    ['another UID', testPod(), parseStreamRequest('exec', ['ns', 'p', 'uid-2', 'c'], q('command=ls&output=1')), 'NOT_FOUND', /with UID "uid-2" not found/],
    ['an unknown container', testPod(), parseStreamRequest('attach', ['ns', 'p', 'x'], q('output=1')), 'NOT_FOUND', /container "x" not found in pod "p"/],
    ['a container not running', testPod({ running: false }), parseStreamRequest('exec', ['ns', 'p', 'c'], q('command=ls&output=1')), 'INVALID_ARGUMENT', /container "c" in pod "p" is not running/],
    ['a pod without a ready sandbox', testPod({ uid: 'uid-9' }), parseStreamRequest('portForward', ['ns', 'p'], q('')), 'INVALID_ARGUMENT', /has no ready sandbox/],
  ];
  it.each(refusals)('refuses %s, saying so, without asking the runtime for a stream', async (_n, pod, req, code, msg) => {
    const f = fakeRuntime();
    const s = new StreamingService({ runtime: f.runtime, pods: lookup(pod), idleTimeoutMs: 0 });
    await expect(s.streamUrl(req)).rejects.toMatchObject({ code, message: expect.stringMatching(msg) });
    expect(f.calls.filter((c) => (c as string[])[0] !== 'listPodSandbox')).toEqual([]);
  });
});

/**
 * A stand-in for the runtime's streaming server: records the request head and every byte
 * after it (`after`), answers 101 (or `refuse`: 403, the connection kept open as Go's
 * server keeps it), then echoes upper-cased. `hold`: the answer waits for `answer()`.
 */
function fakeStreamServer(o: { refuse?: boolean; hold?: boolean } = {}) {
  const heads: string[] = [];
  const after: string[] = [];
  const sockets = new Set<net.Socket>();
  let release: (() => void)[] = [];
  let headSeen: () => void = () => undefined;
  const headArrived = new Promise<void>((r) => (headSeen = r));
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    let buf = '';
    let upgraded = false;
    let head = false;
    s.on('data', (d: Buffer) => {
      if (head) after.push(d.toString('latin1'));
      if (upgraded) return void s.write(d.toString().toUpperCase());
      if (head) return;
      buf += d.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      head = true;
      heads.push(buf.slice(0, end));
      const rest = buf.slice(end + 4);
      if (rest) after.push(rest);
      headSeen();
      const answer = () => {
        if (o.refuse) return void s.write('HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nno thanks');
        upgraded = true;
        s.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n');
        if (after.length) s.write(after.join('').toUpperCase());
      };
      if (o.hold) release.push(answer);
      else answer();
    });
  });
  return {
    heads,
    after,
    sockets,
    headArrived,
    answer: () => {
      for (const a of release) a();
      release = [];
    },
    listen: () => new Promise<number>((r) => server.listen(0, '127.0.0.1', () => r((server.address() as AddressInfo).port))),
    close: () => new Promise<void>((r) => (sockets.forEach((s) => s.destroy()), server.close(() => r()))),
  };
}

let tlsPair: { cert: string; key: string };
beforeAll(async () => {
  tlsPair = await generateSelfSigned('node', { dns: ['localhost'], ips: ['127.0.0.1'] }, Date.now());
});

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function serve(o: { refuse?: boolean; hold?: boolean; authorizer?: Authorizer; idleTimeoutMs?: number; runtime?: Partial<StreamingServiceOptions['runtime']> } = {}) {
  const upstream = fakeStreamServer(o);
  const upPort = await upstream.listen();
  cleanups.push(() => upstream.close());
  const f = fakeRuntime(`http://127.0.0.1:${upPort}`);
  // No start window: the client leaving cancels at once (the window has its own tests on a virtual clock).
  const streaming = new StreamingService({ runtime: { ...f.runtime, ...o.runtime }, pods: lookup(testPod()), idleTimeoutMs: o.idleTimeoutMs ?? 0, runStart: { max: 4, windowMs: 0 } });
  const server: NodeServer = createNodeServer({
    address: '127.0.0.1',
    port: 0,
    tls: tlsPair,
    authenticator: new Authenticator({ anonymous: true, x509: false, clock: new VirtualClock() }),
    authorizer: o.authorizer ?? alwaysAllow,
    nodeName: 'node',
    health: new HealthRegistry(),
    pods: lookup(testPod()),
    streaming,
    shutdownTimeoutMs: 200,
  });
  const { port } = await server.start();
  cleanups.push(() => server.stop());
  return { port, upstream, streaming, calls: f.calls, server };
}

/** Opens a TLS connection and sends an upgrade request; resolves the socket and what it received so far. */
function upgrade(port: number, pathAndQuery: string, extra = '') {
  const sock = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false });
  cleanups.push(() => void sock.destroy());
  let got = '';
  sock.on('data', (d: Buffer) => (got += d.toString('latin1')));
  sock.on('error', () => {});
  const closed = new Promise<void>((r) => sock.on('close', () => r()));
  sock.write(`POST ${pathAndQuery} HTTP/1.1\r\nHost: node\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: channel.k8s.io\r\nContent-Length: 0\r\n\r\n${extra}`);
  const until = (re: RegExp) =>
    new Promise<string>((resolve, reject) => {
      const check = () => (re.test(got) ? resolve(got) : undefined);
      sock.on('data', check);
      sock.on('close', () => (re.test(got) ? resolve(got) : reject(new Error(`closed; got ${JSON.stringify(got)}`))));
      check();
    });
  return { sock, until, closed, got: () => got };
}

describe('the HTTPS server proxies upgraded streams', () => {
  it('forwards the upgrade to the runtime URL and pipes bytes both ways; the runtime closing closes the client', async () => {
    const s = await serve();
    const c = upgrade(s.port, '/exec/ns/p/c?command=sh&input=1&output=1', 'early-bytes');
    await c.until(/HTTP\/1\.1 101 Switching Protocols\r\n[\s\S]*\r\n\r\nEARLY-BYTES/);
    c.sock.write('ping');
    await c.until(/PING$/);
    expect(s.upstream.heads).toEqual(['POST /exec/tok HTTP/1.1\r\nHost: 127.0.0.1:' + s.upstream.heads[0]!.split('127.0.0.1:')[1]!.split('\r\n')[0] + '\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: channel.k8s.io']);
    expect(s.streaming.sessions).toBe(1);
    for (const u of s.upstream.sockets) u.end();
    await c.closed;
    expect(s.streaming.sessions).toBe(0);
  });

  it('passes the runtime\'s refusal through unchanged, and then closes the connection', async () => {
    const s = await serve({ refuse: true });
    const c = upgrade(s.port, '/portForward/ns/p');
    expect(await c.until(/no thanks$/)).toBe('HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nno thanks');
    expect(s.calls).toContainEqual(['portForward', 'new', []]);
    await c.closed;
    expect(s.streaming.sessions).toBe(0);
  });

  it('sends nothing the client pipelined after its upgrade request to a runtime that refuses the upgrade', async () => {
    const s = await serve({ refuse: true, hold: true });
    const c = upgrade(s.port, '/exec/ns/p/c?command=sh&input=1&output=1', 'GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n');
    await s.upstream.headArrived;
    c.sock.write('more bytes before the answer');
    // A round trip on another connection: time for those bytes to reach nodelet (and the runtime, were they forwarded).
    const probe = upgrade(s.port, '/healthz');
    await probe.until(/\r\n\r\n\{.*\}$/);
    s.upstream.answer();
    expect(await c.until(/no thanks$/)).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
    c.sock.write('and after it');
    await c.closed;
    expect(s.upstream.after).toEqual([]);
  });

  it('holds what the client sent before the runtime\'s 101, then forwards it in order', async () => {
    const s = await serve({ hold: true });
    const c = upgrade(s.port, '/exec/ns/p/c?command=sh&input=1&output=1', 'early-');
    await s.upstream.headArrived;
    c.sock.write('bytes');
    // A round trip on another connection: time for those bytes to reach nodelet (and the runtime, were they forwarded).
    const probe = upgrade(s.port, '/healthz');
    await probe.until(/\r\n\r\n\{.*\}$/);
    expect(s.upstream.after).toEqual([]);
    s.upstream.answer();
    await c.until(/101 Switching Protocols[\s\S]*\r\n\r\nEARLY-BYTES$/);
    expect(s.upstream.after.join('')).toBe('early-bytes');
  });

  it('answers a Status before asking the runtime: 403 when not authorized as nodes/proxy, 404 for an unknown pod, 400 for a path not served upgraded', async () => {
    const seen: string[] = [];
    const deny: Authorizer = { authorize: async (_u, a) => (seen.push(`${a.verb} ${a.subresource}`), { allowed: false }) };
    const s = await serve({ authorizer: deny });
    const forbidden = await upgrade(s.port, '/exec/ns/p/c?command=ls&output=1').until(/\r\n\r\n\{.*\}$/);
    expect(forbidden).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
    expect(JSON.parse(forbidden.split('\r\n\r\n')[1]!)).toMatchObject({ kind: 'Status', code: 403, reason: 'Forbidden' });
    expect(seen).toEqual(['create proxy']);
    const t = await serve();
    const missing = await upgrade(t.port, '/attach/ns/nope/c?output=1').until(/\r\n\r\n\{.*\}$/);
    expect(JSON.parse(missing.split('\r\n\r\n')[1]!)).toMatchObject({ code: 404, message: 'pod "nope" in namespace "ns" not found' });
    const other = await upgrade(t.port, '/healthz').until(/\r\n\r\n\{.*\}$/);
    expect(JSON.parse(other.split('\r\n\r\n')[1]!)).toMatchObject({ code: 400, message: '/healthz is not served as an upgraded connection' });
    expect([...s.calls, ...t.calls]).toEqual([]);
  });

  it('answers 400 to /exec without an upgrade, /run with the output, and 500 with the kubelet\'s message when the command exits non-zero', async () => {
    const s = await serve();
    const get = (method: string, p: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const r = tls.connect({ host: '127.0.0.1', port: s.port, rejectUnauthorized: false }, () => r.write(`${method} ${p} HTTP/1.1\r\nHost: node\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`));
        let b = '';
        r.on('data', (d: Buffer) => (b += d.toString()));
        r.on('end', () => {
          const [head, ...body] = b.split('\r\n\r\n');
          resolve({ status: Number(head!.split(' ')[1]), body: body.join('\r\n\r\n') });
        });
        r.on('error', reject);
      });
    const plain = await get('GET', '/exec/ns/p/c?command=ls&output=1');
    expect(plain.status).toBe(400);
    expect(JSON.parse(plain.body).message).toMatch(/^Upgrade request required/);
    const run = await get('POST', '/run/ns/p/c?command=ls');
    expect(run.status).toBe(200);
    expect(run.body).toMatch(/out\nerr\n/);
    // The kubelet's CRI client makes a non-zero exit an error, and its getRun answers every RunInContainer error 500.
    const failed = await get('POST', '/run/ns/p/c?command=false&command=--now');
    expect(failed.status).toBe(500);
    expect(JSON.parse(failed.body)).toMatchObject({ kind: 'Status', code: 500, reason: 'InternalError', message: "command 'false --now' exited with 1: err\n" });
  });

  it('closes a session idle for streamingConnectionIdleTimeout, and every session at stop', async () => {
    const s = await serve({ idleTimeoutMs: 50 });
    const c = upgrade(s.port, '/exec/ns/p/c?command=sh&output=1');
    await c.until(/101 Switching Protocols/);
    await c.closed;
    expect(s.streaming.sessions).toBe(0);
    const t = await serve();
    const d = upgrade(t.port, '/attach/ns/p/c?output=1');
    await d.until(/101 Switching Protocols/);
    await t.server.stop();
    await d.closed;
    expect(t.streaming.sessions).toBe(0);
  });
});

/**
 * A runtime whose ExecSync and Exec run until answered or cancelled: records each call's
 * signal, rejects with CANCELLED (as the CRI client does) when it aborts.
 */
function holdingRuntime() {
  const calls: { cmd: string[]; signal: AbortSignal | undefined; answer: (out: string) => void }[] = [];
  const execs: (AbortSignal | undefined)[] = [];
  const cancelled = () => new NodeletError('CANCELLED', 'ExecSync: Cancelled on client', {});
  const hold = <T>(signal: AbortSignal | undefined, onAnswer: (resolve: (v: T) => void) => void) =>
    new Promise<T>((resolve, reject) => {
      if (signal?.aborted) return reject(cancelled());
      signal?.addEventListener('abort', () => reject(cancelled()), { once: true });
      onAnswer(resolve);
    });
  return {
    calls,
    execs,
    runtime: {
      execSync: (_id: string, cmd: string[], _t: number, o?: { signal?: AbortSignal }) =>
        hold<{ stdout: Buffer; stderr: Buffer; exitCode: number }>(o?.signal, (resolve) => calls.push({ cmd, signal: o?.signal, answer: (out) => resolve({ stdout: Buffer.from(out), stderr: Buffer.alloc(0), exitCode: 0 }) })),
      exec: (_r: StreamExecRequest, o?: { signal?: AbortSignal }) => (execs.push(o?.signal), hold<string>(o?.signal, () => undefined)),
    },
  };
}

const settle = () => new Promise((r) => setImmediate(r));
/** Resolves once `cond` holds, checked once per event-loop turn (socket events, not time). */
const until = (cond: () => boolean) =>
  new Promise<void>((r) => {
    const check = () => (cond() ? r() : setImmediate(check));
    check();
  });

describe('/run: the command ends with its client', () => {
  const runReq = (cmd: string) => parseStreamRequest('run', ['ns', 'p', 'c'], q(`command=${cmd}`));

  it('at most `max` calls are starting at once; the others wait, and one whose client leaves while waiting never reaches the runtime', async () => {
    const clock = new VirtualClock();
    const h = holdingRuntime();
    const s = new StreamingService({ runtime: { ...fakeRuntime().runtime, ...h.runtime }, pods: lookup(testPod()), idleTimeoutMs: 0, runStart: { max: 2, windowMs: 2000 }, clock });
    const clients = [0, 1, 2, 3].map(() => new AbortController());
    const runs = clients.map((c, i) => s.run(runReq(`c${i}`), c.signal).then((b) => b.toString(), (e: NodeletError) => e.code));
    await settle();
    expect({ sent: h.calls.map((c) => c.cmd[0]), ...s.runs }).toEqual({ sent: ['c0', 'c1'], starting: 2, queued: 2 });
    // A quick command frees its place when it ends, before its window.
    h.calls[0]!.answer('zero\n');
    expect(await runs[0]).toBe('zero\n');
    await settle();
    expect(h.calls.map((c) => c.cmd[0])).toEqual(['c0', 'c1', 'c2']);
    // The last client leaves while waiting: it is never sent.
    clients[3]!.abort();
    expect(await runs[3]).toBe('CANCELLED');
    // The windows of c1 and c2 end: they count as running now, and nothing is left waiting.
    await clock.advance(2000);
    expect({ sent: h.calls.map((c) => c.cmd[0]), ...s.runs }).toEqual({ sent: ['c0', 'c1', 'c2'], starting: 0, queued: 0 });
    h.calls[1]!.answer('one\n');
    h.calls[2]!.answer('two\n');
    expect([await runs[1], await runs[2]]).toEqual(['one\n', 'two\n']);
  });

  it('a client leaving while its command starts cancels the call at the end of the start window; after the window, at once', async () => {
    const clock = new VirtualClock();
    const h = holdingRuntime();
    const s = new StreamingService({ runtime: { ...fakeRuntime().runtime, ...h.runtime }, pods: lookup(testPod()), idleTimeoutMs: 0, runStart: { max: 4, windowMs: 2000 }, clock });
    const early = new AbortController();
    const first = s.run(runReq('sleep'), early.signal).catch((e: NodeletError) => e.code);
    await settle();
    early.abort();
    await clock.advance(1999);
    expect(h.calls[0]!.signal!.aborted).toBe(false);
    await clock.advance(1);
    expect(h.calls[0]!.signal!.aborted).toBe(true);
    expect(await first).toBe('CANCELLED');
    const late = new AbortController();
    const second = s.run(runReq('sleep'), late.signal).catch((e: NodeletError) => e.code);
    await settle();
    await clock.advance(5000);
    expect(h.calls[1]!.signal!.aborted).toBe(false);
    late.abort();
    await settle();
    expect(h.calls[1]!.signal!.aborted).toBe(true);
    expect(await second).toBe('CANCELLED');
    expect(s.runs).toEqual({ starting: 0, queued: 0 });
  });

  it('over HTTPS: the CRI call\'s signal aborts when the client closes its connection, and the next /run is answered', async () => {
    const h = holdingRuntime();
    const s = await serve({ runtime: h.runtime });
    const sock = tls.connect({ host: '127.0.0.1', port: s.port, rejectUnauthorized: false }, () => sock.write('POST /run/ns/p/c?command=sleep&command=77 HTTP/1.1\r\nHost: node\r\nContent-Length: 0\r\n\r\n'));
    sock.on('error', () => undefined);
    let got = '';
    sock.on('data', (d: Buffer) => (got += d.toString()));
    // The call reached the runtime; the client goes.
    await until(() => h.calls.length > 0);
    sock.destroy();
    await until(() => h.calls[0]!.signal!.aborted);
    expect({ cmd: h.calls[0]!.cmd, aborted: h.calls[0]!.signal!.aborted, answered: got }).toEqual({ cmd: ['sleep', '77'], aborted: true, answered: '' });
    // nodelet is fine: the next /run gets its answer.
    const next = new Promise<string>((resolve) => {
      const r = tls.connect({ host: '127.0.0.1', port: s.port, rejectUnauthorized: false }, () => r.write('POST /run/ns/p/c?command=echo HTTP/1.1\r\nHost: node\r\nConnection: close\r\nContent-Length: 0\r\n\r\n'));
      let b = '';
      r.on('data', (d: Buffer) => (b += d.toString()));
      r.on('end', () => resolve(b));
    });
    await until(() => h.calls.length > 1);
    h.calls[1]!.answer('hello\n');
    expect(await next).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*\r\n\r\n(?:[0-9a-f]+\r\n)?hello\n/);
  });

  it('an upgrade whose client leaves while nodelet asks the runtime for the session cancels that call', async () => {
    const h = holdingRuntime();
    const s = await serve({ runtime: h.runtime });
    const c = upgrade(s.port, '/exec/ns/p/c?command=sh&output=1');
    await until(() => h.execs.length > 0);
    expect(h.execs[0]!.aborted).toBe(false);
    c.sock.destroy();
    await until(() => h.execs[0]!.aborted);
    expect(s.upstream.heads).toEqual([]);
  });
});

describe('every request gets an answer', () => {
  /** One raw request on a new TLS connection; the whole answer, until the server closes. */
  const raw = (port: number, text: string) =>
    new Promise<{ status: number; head: string; body: string }>((resolve) => {
      const r = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => r.write(text));
      let b = '';
      r.on('data', (d: Buffer) => (b += d.toString('latin1')));
      r.on('error', () => undefined);
      r.on('close', () => {
        const [head, ...body] = b.split('\r\n\r\n');
        resolve({ status: Number(head!.split(' ')[1] ?? 0), head: head!, body: body.join('\r\n\r\n') });
      });
    });

  it('/run output over the runtime\'s message limit answers 500 with the runtime\'s message, as the kubelet', async () => {
    const s = await serve({
      runtime: {
        execSync: async () => {
          throw new NodeletError('TOO_MANY_REQUESTS', 'ExecSync: rpc error: code = ResourceExhausted desc = Received message larger than max (17825851 vs. 16777216)', { method: 'ExecSync' });
        },
      },
    });
    const a = await raw(s.port, 'POST /run/ns/p/c?command=cat&command=big HTTP/1.1\r\nHost: node\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    expect(a.status).toBe(500);
    expect(JSON.parse(a.body)).toMatchObject({ kind: 'Status', code: 500, reason: 'InternalError', message: 'running "cat big" in container "c": ExecSync: rpc error: code = ResourceExhausted desc = Received message larger than max (17825851 vs. 16777216)' });
  });

  it('CONNECT: 405 with Allow on a served path, 404 on another, 400 for an authority-form target, 403 when not authorized; never a silent close', async () => {
    const s = await serve();
    const run = await raw(s.port, 'CONNECT /run/ns/p/c HTTP/1.1\r\nHost: node\r\n\r\n');
    expect({ status: run.status, allow: /\r\nAllow: ([^\r]*)/.exec(run.head)?.[1], body: JSON.parse(run.body) }).toEqual({
      status: 405,
      allow: 'POST',
      body: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', code: 405, reason: 'MethodNotAllowed', message: 'the server does not allow method CONNECT here (allowed: POST)' },
    });
    expect((await raw(s.port, 'CONNECT /healthz HTTP/1.1\r\nHost: node\r\n\r\n')).head).toMatch(/^HTTP\/1\.1 405 [\s\S]*\r\nAllow: GET, HEAD\r\n/);
    const nope = await raw(s.port, 'CONNECT /nope HTTP/1.1\r\nHost: node\r\n\r\n');
    expect([nope.status, JSON.parse(nope.body).reason]).toEqual([404, 'NotFound']);
    const authority = await raw(s.port, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    expect([authority.status, JSON.parse(authority.body).message]).toEqual([400, 'request target "example.com:443" must be a path starting with "/"']);
    const deny: Authorizer = { authorize: async () => ({ allowed: false }) };
    const t = await serve({ authorizer: deny });
    expect((await raw(t.port, 'CONNECT /run/ns/p/c HTTP/1.1\r\nHost: node\r\n\r\n')).status).toBe(403);
    expect([...s.calls, ...t.calls]).toEqual([]);
  });
});
