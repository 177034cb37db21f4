/**
 * The daemon's gRPC unary client (grpc-unary.ts) against HTTP/2 servers started here on
 * unix sockets: framing (messages split across DATA frames, the prefix split too), status
 * from trailers and from trailers-only answers, grpc-message percent-decoding, HTTP status
 * mapping, size limits, deadlines, fail-fast while the server is away and reconnecting
 * once it is back, and an idle channel not keeping the process alive.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fromGrpcError } from '../../../src/runtime/errors.js';
import { silentLogger } from '../../../src/log.js';
import {
  GrpcError,
  GrpcStatus,
  KEEPALIVE_IDLE_MS,
  KEEPALIVE_TIMEOUT_MS,
  UnaryChannel,
  decodeGrpcMessage,
  grpcCodeForHttpStatus,
  grpcTimeout,
} from '../../../src/runtime/grpc-unary.js';
import { CRI_EVENTS_PATH, RuntimeEvents } from '../../../src/runtime/runtime-events.js';
import { VirtualClock } from '../../helpers/clock.js';

type Handler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, body: Buffer) => void;

let dir: string;
let n = 0;
const cleanups: (() => void)[] = [];

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'grpc-unary-'));
});
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function frame(msg: Buffer, flag = 0): Buffer {
  const p = Buffer.alloc(5);
  p[0] = flag;
  p.writeUInt32BE(msg.length, 1);
  return Buffer.concat([p, msg]);
}

interface Server {
  socket: string;
  target: string;
  sessions: Set<http2.ServerHttp2Session>;
  close(): Promise<void>;
}

/** Each request as its stream opens (in stream ID order), with its body to come. */
type StreamHandler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, body: Promise<Buffer>) => void;

/** An HTTP/2 server on a new unix socket; `handler` answers each request once its body is read. */
function serve(handler: Handler, socket?: string): Promise<Server> {
  return serveStreams((stream, headers, body) => void body.then((b) => handler(stream, headers, b)), socket);
}

/** An HTTP/2 server on a new unix socket that sees each stream as it opens. */
async function serveStreams(onStream: StreamHandler, socket = path.join(dir, `s${n++}.sock`)): Promise<Server> {
  fs.rmSync(socket, { force: true });
  const server = http2.createServer();
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  server.on('stream', (stream, headers) => {
    const parts: Buffer[] = [];
    stream.on('data', (c: Buffer) => parts.push(c));
    stream.on('error', () => {});
    onStream(stream, headers, new Promise((resolve) => stream.on('end', () => resolve(Buffer.concat(parts)))));
  });
  await new Promise<void>((r) => server.listen(socket, r));
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    for (const s of sessions) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  };
  cleanups.push(() => void close());
  return { socket, target: `unix://${socket}`, sessions, close };
}

function channel(target: string, opts?: ConstructorParameters<typeof UnaryChannel>[1]): UnaryChannel {
  const ch = new UnaryChannel(target, opts);
  cleanups.push(() => ch.close());
  return ch;
}

async function failure(p: Promise<unknown>): Promise<GrpcError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(GrpcError);
    return err as GrpcError;
  }
  throw new Error('expected the call to fail');
}

/** Writes `chunk` and resolves once it is flushed (so the next write is a DATA frame of its own). */
const flushed = (stream: http2.ServerHttp2Stream, chunk: Buffer) => new Promise<void>((r) => stream.write(chunk, () => r()));

/** Answers `msg` in 1-byte DATA frames (the prefix split too), then OK in the trailers. */
async function answerSplit(stream: http2.ServerHttp2Stream, msg: Buffer): Promise<void> {
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
  const bytes = frame(msg);
  for (let i = 0; i < bytes.length; i++) await flushed(stream, bytes.subarray(i, i + 1));
  stream.end();
}

/** A promise and its resolve, for events a test waits on. */
function signal<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('UnaryChannel: framing', () => {
  it('sends the gRPC request (path, headers, 5-byte prefix) and reassembles an answer split across DATA frames', async () => {
    let seen: { headers: http2.IncomingHttpHeaders; body: Buffer } | undefined;
    const srv = await serve((stream, headers, body) => {
      seen = { headers, body };
      void answerSplit(stream, Buffer.from(`echo:${body.subarray(5).toString()}`));
    });
    const ch = channel(srv.target);
    const res = await ch.call('/runtime.v1.RuntimeService/Version', Buffer.from('hello'), 5000);
    expect(res.toString()).toBe('echo:hello');
    expect(seen!.headers[':method']).toBe('POST');
    expect(seen!.headers[':path']).toBe('/runtime.v1.RuntimeService/Version');
    expect(seen!.headers['content-type']).toBe('application/grpc');
    expect(seen!.headers.te).toBe('trailers');
    expect(seen!.headers['grpc-timeout']).toBe('5000m');
    expect(seen!.body.equals(frame(Buffer.from('hello')))).toBe(true);
  });

  it('takes an empty message (all defaults) and several messages over one session', async () => {
    const srv = await serve((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(frame(Buffer.alloc(0)));
    });
    const ch = channel(srv.target);
    const answers = await Promise.all([1, 2, 3].map(() => ch.call('/x/Y', Buffer.alloc(0), 5000)));
    expect(answers.map((a) => a.length)).toEqual([0, 0, 0]);
    expect(srv.sessions.size).toBe(1);
  });

  it('reads a 5 MiB answer (over grpc-go/grpc-js 4 MiB default: the kubelet allows 16 MiB)', async () => {
    const big = Buffer.alloc(5 * 1024 * 1024, 7);
    const srv = await serve((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(frame(big));
    });
    const res = await channel(srv.target).call('/x/Y', Buffer.alloc(0), 10_000);
    expect(res.equals(big)).toBe(true);
  });
});

describe('UnaryChannel: status', () => {
  it('a trailers-only answer: the code and the percent-decoded grpc-message from the headers', async () => {
    const srv = await serve((stream) => {
      stream.respond(
        { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '5', 'grpc-message': 'sandbox%20%22abc%22%20not%20found%3A%20%E2%9C%93%25' },
        { endStream: true },
      );
    });
    const err = await failure(channel(srv.target).call('/x/Y', Buffer.alloc(0), 5000));
    expect(err.code).toBe(GrpcStatus.NOT_FOUND);
    expect(err.details).toBe('sandbox "abc" not found: ✓%');
    // What the CRI client makes of it.
    const e = fromGrpcError('PodSandboxStatus', err);
    expect(e.code).toBe('NOT_FOUND');
    expect(e.message).toBe('PodSandboxStatus: rpc error: code = NotFound desc = sandbox "abc" not found: ✓%');
  });

  it('a status in the trailers after headers (and a message): the failure wins over the message', async () => {
    const srv = await serve((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '2', 'grpc-message': 'name%20is%20reserved' }));
      stream.end(frame(Buffer.from('x')));
    });
    const err = await failure(channel(srv.target).call('/x/Y', Buffer.alloc(0), 5000));
    expect(err.code).toBe(GrpcStatus.UNKNOWN);
    expect(err.details).toBe('name is reserved');
    expect(fromGrpcError('RunPodSandbox', err).code).toBe('CONFLICT');
  });

  it.each([
    [404, GrpcStatus.UNIMPLEMENTED],
    [501, GrpcStatus.UNKNOWN],
    [503, GrpcStatus.UNAVAILABLE],
    [401, GrpcStatus.UNAUTHENTICATED],
    [403, GrpcStatus.PERMISSION_DENIED],
    [400, GrpcStatus.INTERNAL],
    [429, GrpcStatus.UNAVAILABLE],
  ])('HTTP %i without grpc-status -> gRPC code %i', async (httpStatus, code) => {
    const srv = await serve((stream) => {
      stream.respond({ ':status': httpStatus, 'content-type': 'text/plain' });
      stream.end('no');
    });
    const err = await failure(channel(srv.target).call('/x/Y', Buffer.alloc(0), 5000));
    expect(err.code).toBe(code);
    expect(err.details).toBe(`Received HTTP status code ${httpStatus}`);
    expect(grpcCodeForHttpStatus(httpStatus)).toBe(code);
  });

  it('a compressed message (none negotiated) -> INTERNAL', async () => {
    const srv = await serve((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(frame(Buffer.from('zz'), 1));
    });
    const err = await failure(channel(srv.target).call('/x/Y', Buffer.alloc(0), 5000));
    expect(err.code).toBe(GrpcStatus.INTERNAL);
    expect(err.details).toMatch(/compressed/);
  });

  it('OK without a message, or with a truncated one: an error, never an empty answer', async () => {
    const srv = await serve((stream, headers) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(headers[':path'] === '/x/Truncated' ? frame(Buffer.from('abcdef')).subarray(0, 8) : undefined);
    });
    const ch = channel(srv.target);
    expect((await failure(ch.call('/x/None', Buffer.alloc(0), 5000))).code).toBe(GrpcStatus.UNIMPLEMENTED);
    expect((await failure(ch.call('/x/Truncated', Buffer.alloc(0), 5000))).code).toBe(GrpcStatus.INTERNAL);
  });
});

describe('UnaryChannel: limits and deadlines', () => {
  it('an answer over the limit -> RESOURCE_EXHAUSTED as soon as its prefix arrives (default limit 16 MiB)', async () => {
    const srv = await serve((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
      const p = Buffer.alloc(5);
      p.writeUInt32BE(16 * 1024 * 1024 + 1, 1);
      stream.write(p); // and never the rest: the client must not wait for 16 MiB
    });
    const started = Date.now();
    const err = await failure(channel(srv.target).call('/x/Y', Buffer.alloc(0), 5000));
    expect(err.code).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(err.details).toBe(`Received message larger than max (${16 * 1024 * 1024 + 1} vs. ${16 * 1024 * 1024})`);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(fromGrpcError('ListContainers', err).code).toBe('TOO_MANY_REQUESTS');
  });

  it('a request over the limit -> RESOURCE_EXHAUSTED without sending it', async () => {
    let requests = 0;
    const srv = await serve((stream) => {
      requests++;
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '0' }, { endStream: true });
    });
    const ch = channel(srv.target, { maxSendMessageBytes: 1024 });
    const err = await failure(ch.call('/x/Y', Buffer.alloc(1025), 5000));
    expect(err.code).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(err.details).toBe('Sent message larger than max (1025 vs. 1024)');
    expect(requests).toBe(0);
  });

  it('deadline: DEADLINE_EXCEEDED at the deadline (on the channel\'s clock), and the stream is reset (the server sees it cancelled)', async () => {
    const arrived = signal();
    const serverSaw = signal<number>();
    const srv = await serve((stream) => {
      stream.on('close', () => serverSaw.resolve(stream.rstCode));
      arrived.resolve();
    });
    const clock = new VirtualClock();
    let settled = false;
    const call = failure(channel(srv.target, { clock }).call('/x/Hang', Buffer.alloc(0), 150)).finally(() => (settled = true));
    await arrived.promise;
    await clock.advance(149);
    expect(settled).toBe(false);
    await clock.advance(1);
    expect((await call).code).toBe(GrpcStatus.DEADLINE_EXCEEDED);
    expect(await serverSaw.promise).toBe(http2.constants.NGHTTP2_CANCEL);
    expect(clock.pending).toBe(0);
  });

  it('no deadline: no grpc-timeout is sent; an abort ends the call with CANCELLED and resets the stream (the server sees it cancelled)', async () => {
    let headers: http2.IncomingHttpHeaders | undefined;
    let serverSaw!: Promise<number>;
    const arrived = new Promise<void>((resolve) => {
      void serve((stream, h) => {
        headers = h;
        serverSaw = new Promise((r) => stream.on('close', () => r(stream.rstCode)));
        resolve();
      }).then((srv) => {
        const client = new AbortController();
        const call = failure(channel(srv.target).call('/runtime.v1.RuntimeService/ExecSync', Buffer.alloc(0), undefined, client.signal));
        void arrived.then(async () => {
          client.abort();
          expect((await call).code).toBe(GrpcStatus.CANCELLED);
        });
      });
    });
    await arrived;
    expect(headers?.['grpc-timeout']).toBeUndefined();
    expect(await serverSaw).toBe(http2.constants.NGHTTP2_CANCEL);
  });

  it('grpc-timeout encodes the deadline in at most 8 digits', () => {
    expect(grpcTimeout(120_000)).toBe('120000m');
    expect(grpcTimeout(0.2)).toBe('1m');
    expect(grpcTimeout(200_000_000)).toBe('200000S');
    expect(decodeGrpcMessage('bad%zz%')).toBe('bad%zz%');
  });
});

describe('UnaryChannel: the server away and back', () => {
  const ok: Handler = (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(frame(Buffer.from('ok')));
  };

  it('socket missing -> UNAVAILABLE at once; the same channel reaches the server once it listens', async () => {
    const socket = path.join(dir, `late${n++}.sock`);
    const ch = channel(`unix://${socket}`);
    const started = Date.now();
    const err = await failure(ch.call('/x/Y', Buffer.alloc(0), 10_000));
    expect(err.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(err.details).toMatch(/ENOENT/);
    expect(Date.now() - started).toBeLessThan(1000);
    expect(fromGrpcError('Version', err).code).toBe('UNAVAILABLE');
    await serve(ok, socket);
    expect((await ch.call('/x/Y', Buffer.alloc(0), 5000)).toString()).toBe('ok');
  });

  it('connection refused (the socket file of a killed runtime) -> UNAVAILABLE at once', async () => {
    const socket = path.join(dir, `stale${n++}.sock`);
    const child = spawn(process.execPath, ['-e', `require('node:net').createServer().listen(${JSON.stringify(socket)}, () => console.log('up'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((r) => child.stdout!.once('data', r));
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
    expect(fs.existsSync(socket)).toBe(true);
    const started = Date.now();
    const err = await failure(channel(`unix://${socket}`).call('/x/Y', Buffer.alloc(0), 10_000));
    expect(err.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(err.details).toMatch(/ECONNREFUSED/);
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it('server killed mid-call -> UNAVAILABLE; restarted on the same socket -> the next call succeeds', async () => {
    let srv: Server | undefined;
    srv = await serve(() => {
      // never answers: the server dies with the call open
      void srv!.close();
    });
    const ch = channel(srv.target);
    const started = Date.now();
    const err = await failure(ch.call('/x/Hang', Buffer.alloc(0), 10_000));
    expect(err.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(Date.now() - started).toBeLessThan(2000);
    await serve(ok, srv.socket);
    expect((await ch.call('/x/Y', Buffer.alloc(0), 5000)).toString()).toBe('ok');
  });

  it('GOAWAY from the server: the next call opens a new session (received before it, or refusing it)', async () => {
    const srv = await serve(ok);
    const ch = channel(srv.target);
    await ch.call('/x/Y', Buffer.alloc(0), 5000);
    const [first] = [...srv.sessions];
    first!.goaway(http2.constants.NGHTTP2_NO_ERROR, 1);
    expect((await ch.call('/x/Y', Buffer.alloc(0), 5000)).toString()).toBe('ok');
    expect([...srv.sessions].some((s) => s !== first)).toBe(true);
  });

  it('close(): later calls fail with CANCELLED', async () => {
    const srv = await serve(ok);
    const ch = channel(srv.target);
    await ch.call('/x/Y', Buffer.alloc(0), 5000);
    ch.close();
    expect((await failure(ch.call('/x/Y', Buffer.alloc(0), 5000))).code).toBe(GrpcStatus.CANCELLED);
  });
});

describe('UnaryChannel: an idle channel does not keep the process alive', () => {
  let child: ChildProcess | undefined;
  afterEach(() => child?.kill());

  it('its connected, idle session holds no ref on the event loop', async () => {
    // The server in another process: its sockets must not count in this process's handles.
    const socket = path.join(dir, `child${n++}.sock`);
    const script = `
      const http2 = require('node:http2');
      const s = http2.createServer();
      s.on('stream', (st) => { st.on('data', () => {}); st.on('end', () => {
        st.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        st.on('wantTrailers', () => st.sendTrailers({ 'grpc-status': '0' }));
        st.end(Buffer.from([0, 0, 0, 0, 0]));
      }); });
      s.listen(${JSON.stringify(socket)}, () => console.log('up'));`;
    child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((r) => child!.stdout!.once('data', r));
    const pipes = () => process.getActiveResourcesInfo().filter((t) => t === 'PipeWrap').length;
    const before = pipes();
    const ch = channel(`unix://${socket}`);
    await ch.call('/x/Y', Buffer.alloc(0), 5000);
    await ch.call('/x/Y', Buffer.alloc(0), 5000); // the session stays connected between calls
    expect(pipes()).toBe(before);
  });
});

describe('UnaryChannel: server streams (runtime events)', () => {
  it('hands each message over as it arrives (several in one DATA frame, one split across frames), sends no deadline, and ends on OK', async () => {
    let seen: http2.IncomingHttpHeaders | undefined;
    const got: string[] = [];
    const waiters: { n: number; resolve: () => void }[] = [];
    /** Resolves once the client has handed `n` messages over: the server goes on only then. */
    const received = (n: number) => new Promise<void>((resolve) => (got.length >= n ? resolve() : waiters.push({ n, resolve })));
    const onMessage = (m: Buffer) => {
      got.push(m.toString());
      for (const w of waiters.filter((x) => got.length >= x.n)) w.resolve();
    };
    let gotBeforeEnd = 0;
    const srv = await serve(async (stream, headers) => {
      seen = headers;
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.write(Buffer.concat([frame(Buffer.from('one')), frame(Buffer.from('two'))]));
      await received(2);
      const third = frame(Buffer.from('three'));
      await flushed(stream, third.subarray(0, 3));
      stream.write(third.subarray(3));
      await received(3);
      gotBeforeEnd = got.length;
      stream.end();
    });
    await channel(srv.target).serverStream('/s.S/Watch', Buffer.from('req'), onMessage, new AbortController().signal);
    expect(got).toEqual(['one', 'two', 'three']);
    expect(gotBeforeEnd).toBe(3);
    expect(seen![':path']).toBe('/s.S/Watch');
    expect(seen!['grpc-timeout']).toBeUndefined();
  });

  it('an abort ends the stream with CANCELLED and resets it (the server sees it closed); a failure status after messages rejects with it', async () => {
    const serverClosed = signal<number>();
    const srv = await serve((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
      stream.write(frame(Buffer.from('x')));
      stream.on('close', () => serverClosed.resolve(stream.rstCode));
    });
    const ab = new AbortController();
    const got: string[] = [];
    const p = channel(srv.target).serverStream('/s.S/Watch', Buffer.alloc(0), (m) => {
      got.push(m.toString());
      ab.abort();
    }, ab.signal);
    expect((await failure(p)).code).toBe(GrpcStatus.CANCELLED);
    expect(got).toEqual(['x']);
    expect(await serverClosed.promise).toBe(http2.constants.NGHTTP2_CANCEL);

    const failing = await serve((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': String(GrpcStatus.UNAVAILABLE), 'grpc-message': 'shutting down' }));
      stream.end(frame(Buffer.from('y')));
    });
    const got2: string[] = [];
    const e = await failure(channel(failing.target).serverStream('/s.S/Watch', Buffer.alloc(0), (m) => got2.push(m.toString()), new AbortController().signal));
    expect([e.code, got2]).toEqual([GrpcStatus.UNAVAILABLE, ['y']]);
    expect(e.message).toContain('shutting down');
  });
});

/** Answers `text` with OK. */
function answer(stream: http2.ServerHttp2Stream, text: string): void {
  if (stream.closed) return;
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
  stream.end(frame(Buffer.from(text)));
}

/** Counts each call's effect as its server would (the call's ID is its request message). */
class Effects {
  readonly counts = new Map<string, number>();
  async run(body: Promise<Buffer>): Promise<string> {
    const id = (await body).subarray(5).toString();
    this.counts.set(id, (this.counts.get(id) ?? 0) + 1);
    return id;
  }
  sorted(): [string, number][] {
    return [...this.counts].sort(([a], [b]) => a.localeCompare(b));
  }
}

const settledOf = async (p: Promise<unknown>): Promise<PromiseSettledResult<unknown>> => (await Promise.allSettled([p]))[0]!;

describe('UnaryChannel: GOAWAY and refused streams (transparent retry)', () => {
  const RUN = '/runtime.v1.RuntimeService/RunPodSandbox';

  it.each([
    ['one GOAWAY', false],
    ["grpc-go's graceful stop: GOAWAY with 2^31-1, then the real lastStreamID", true],
  ])('graceful GOAWAY in the middle of a burst (%s): every call the server did not process is sent again on a new session and succeeds; each call runs exactly once', async (_name, twice) => {
    const effects = new Effects();
    const seen: http2.Http2Session[] = [];
    const processedOnFirst: number[] = [];
    const held: Promise<() => void>[] = [];
    let goneAway: http2.Http2Session | undefined;
    const srv = await serveStreams((stream, _h, body) => {
      const session = stream.session!;
      if (!seen.includes(session)) seen.push(session);
      // Above the GOAWAY's lastStreamID: the application never sees it (the HTTP/2 layer refuses it).
      if (session === goneAway) return;
      if (session !== seen[0]) return void effects.run(body).then((id) => answer(stream, `done:${id}`));
      // The first session processes 5 calls, then says GOAWAY naming the last of them, then answers them.
      processedOnFirst.push(stream.id!);
      held.push(effects.run(body).then((id) => () => answer(stream, `done:${id}`)));
      if (held.length === 5) {
        goneAway = session;
        if (twice) session.goaway(http2.constants.NGHTTP2_NO_ERROR, 2 ** 31 - 1);
        session.goaway(http2.constants.NGHTTP2_NO_ERROR, stream.id!);
        void Promise.all(held).then((answers) => answers.forEach((a) => a()));
      }
    });
    const ch = channel(srv.target);
    const ids = Array.from({ length: 20 }, (_, i) => `sandbox-${String(i).padStart(2, '0')}`);
    const answers = await Promise.all(ids.map((id) => ch.call(RUN, Buffer.from(id), 5000)));
    expect(answers.map(String)).toEqual(ids.map((id) => `done:${id}`));
    expect(effects.sorted()).toEqual(ids.map((id) => [id, 1]));
    expect([seen.length, processedOnFirst]).toEqual([2, [1, 3, 5, 7, 9]]);
  });

  it('a call the server processed whose answer is lost is not sent again: UNAVAILABLE, and it ran once (the unprocessed ones are retried)', async () => {
    const effects = new Effects();
    let first: http2.Http2Session | undefined;
    const srv = await serveStreams((stream, _h, body) => {
      const session = stream.session!;
      first ??= session;
      if (session === first) {
        if (stream.id !== 1) return; // above lastStreamID: refused
        void effects.run(body); // processed, never answered
        session.goaway(http2.constants.NGHTTP2_NO_ERROR, 1);
        return;
      }
      // A retried call on the new session proves the client had the GOAWAY: the old session now dies.
      first?.destroy();
      void effects.run(body).then((id) => answer(stream, `done:${id}`));
    });
    const ch = channel(srv.target);
    const results = await Promise.all(['a', 'b', 'c'].map((id) => settledOf(ch.call(RUN, Buffer.from(id), 5000))));
    expect(results[0]).toMatchObject({ status: 'rejected', reason: { code: GrpcStatus.UNAVAILABLE } });
    expect(results.slice(1).map((r) => r.status === 'fulfilled' && String(r.value))).toEqual(['done:b', 'done:c']);
    expect(effects.sorted()).toEqual([['a', 1], ['b', 1], ['c', 1]]);
    expect(fromGrpcError('RunPodSandbox', (results[0] as PromiseRejectedResult).reason).code).toBe('UNAVAILABLE');
  });

  it('GOAWAY with an error (too_many_pings): the calls above its lastStreamID are retried, the processed ones fail UNAVAILABLE', async () => {
    const effects = new Effects();
    let first: http2.Http2Session | undefined;
    let processed = 0;
    const srv = await serveStreams((stream, _h, body) => {
      const session = stream.session!;
      first ??= session;
      if (session !== first) return void effects.run(body).then((id) => answer(stream, `done:${id}`));
      if (processed >= 2) return;
      void effects.run(body);
      if (++processed === 2) session.goaway(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, stream.id!, Buffer.from('too_many_pings'));
    });
    const ch = channel(srv.target);
    const ids = ['p1', 'p2', 'u1', 'u2', 'u3'];
    const results = await Promise.all(ids.map((id) => settledOf(ch.call(RUN, Buffer.from(id), 5000))));
    expect(results.map((r) => (r.status === 'fulfilled' ? String(r.value) : (r.reason as GrpcError).code))).toEqual([
      GrpcStatus.UNAVAILABLE,
      GrpcStatus.UNAVAILABLE,
      'done:u1',
      'done:u2',
      'done:u3',
    ]);
    expect(effects.sorted()).toEqual(ids.map((id) => [id, 1]));
  });

  it('RST_STREAM REFUSED_STREAM: sent again once (and succeeds); refused again -> UNAVAILABLE after exactly two attempts', async () => {
    const effects = new Effects();
    let refuse = 1;
    let attempts = 0;
    const srv = await serveStreams((stream, _h, body) => {
      attempts++;
      if (refuse-- > 0) return stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      void effects.run(body).then((id) => answer(stream, `done:${id}`));
    });
    const ch = channel(srv.target);
    expect(String(await ch.call(RUN, Buffer.from('x'), 5000))).toBe('done:x');
    expect([attempts, effects.sorted()]).toEqual([2, [['x', 1]]]);

    refuse = Infinity;
    attempts = 0;
    const err = await failure(ch.call(RUN, Buffer.from('y'), 5000));
    expect([err.code, attempts]).toEqual([GrpcStatus.UNAVAILABLE, 2]);
    expect(effects.counts.has('y')).toBe(false);
  });
});

/**
 * A unix-socket proxy in front of a server: `freeze()` makes its open connections drop
 * every byte both ways, as a runtime that hangs (SIGSTOP, a wedged event loop) would.
 * New connections are forwarded.
 */
async function proxy(upstreamSocket: string): Promise<{ target: string; freeze(): void }> {
  const socket = path.join(dir, `p${n++}.sock`);
  const open = new Set<net.Socket>();
  const frozen = new WeakSet<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(upstreamSocket);
    open.add(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.on('data', (d: Buffer) => frozen.has(client) || upstream.write(d));
    upstream.on('data', (d: Buffer) => frozen.has(client) || client.write(d));
  });
  await new Promise<void>((r) => server.listen(socket, r));
  cleanups.push(() => {
    for (const c of open) c.destroy();
    server.close();
  });
  return { target: `unix://${socket}`, freeze: () => open.forEach((c) => frozen.add(c)) };
}

/** Messages handed over by a server stream, and a wait for the n-th. */
function collector() {
  const got: string[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  return {
    got,
    onMessage: (m: Buffer) => {
      got.push(m.toString());
      for (const w of waiters.filter((x) => got.length >= x.n)) w.resolve();
    },
    received: (count: number) => new Promise<void>((resolve) => (got.length >= count ? resolve() : waiters.push({ n: count, resolve }))),
  };
}

describe('UnaryChannel: keepalive of calls without a deadline', () => {
  const watch = (stream: http2.ServerHttp2Stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
    stream.write(frame(Buffer.from('hello')));
  };

  it('a silent runtime under an open server stream is noticed after 5 min of silence + 20 s without a PING answer: UNAVAILABLE, naming the keepalive', async () => {
    const clock = new VirtualClock();
    const srv = await serve(watch);
    const px = await proxy(srv.socket);
    const c = collector();
    let settled = false;
    const p = failure(channel(px.target, { clock }).serverStream('/s.S/Watch', Buffer.alloc(0), c.onMessage, new AbortController().signal)).finally(() => (settled = true));
    await c.received(1);
    px.freeze();
    await clock.advance(KEEPALIVE_IDLE_MS + KEEPALIVE_TIMEOUT_MS - 1);
    expect(settled).toBe(false);
    await clock.advance(1);
    const err = await p;
    expect([err.code, err.details]).toEqual([GrpcStatus.UNAVAILABLE, 'Connection dropped: keepalive: no answer to HTTP/2 PING within 20000 ms']);
    expect(clock.pending).toBe(0);
  });

  it('a runtime that answers: one PING after 5 min of silence, the stream stays open; no timer once it ends, none for calls with a deadline', async () => {
    const clock = new VirtualClock();
    const pings: number[] = [];
    const srv = await serve((stream, headers) => {
      if (headers[':path'] === '/x/Y') return answer(stream, 'ok');
      watch(stream);
      // The PING's acknowledgement leaves before this message: its arrival proves the client has the answer.
      stream.session!.on('ping', () => {
        pings.push(clock.now());
        stream.write(frame(Buffer.from('after-ping')));
      });
    });
    const ch = channel(srv.target, { clock });
    expect(String(await ch.call('/x/Y', Buffer.alloc(0), 5000))).toBe('ok');
    expect([clock.pending, clock.sleeps]).toEqual([0, [5000]]); // a deadline, and no keepalive timer
    const t0 = clock.now();
    const c = collector();
    const ab = new AbortController();
    let settled = false;
    const p = failure(ch.serverStream('/s.S/Watch', Buffer.alloc(0), c.onMessage, ab.signal)).finally(() => (settled = true));
    await c.received(1);
    await clock.advance(KEEPALIVE_IDLE_MS - 1);
    expect(pings).toEqual([]);
    await clock.advance(1);
    await c.received(2);
    expect(pings).toEqual([t0 + KEEPALIVE_IDLE_MS]);
    await clock.advance(KEEPALIVE_TIMEOUT_MS);
    expect([settled, pings.length]).toEqual([false, 1]);
    ab.abort();
    expect((await p).code).toBe(GrpcStatus.CANCELLED);
    expect(clock.pending).toBe(0);
  });

  it('rejects a keepalive option that is not a positive number of milliseconds', () => {
    expect(() => new UnaryChannel('unix:///x.sock', { keepaliveIdleMs: 0 })).toThrow('grpc channel option keepaliveIdleMs: expected a positive number of milliseconds, got 0');
    expect(() => new UnaryChannel('unix:///x.sock', { keepaliveTimeoutMs: Number.NaN })).toThrow(/keepaliveTimeoutMs/);
  });

  it('the runtime events subscription notices a silent runtime within the bound, asks for a relist, and subscribes again', async () => {
    const clock = new VirtualClock();
    const srv = await serve((stream, headers) => {
      if (headers[':path'] !== CRI_EVENTS_PATH) return void stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '12' }, { endStream: true });
      watch(stream);
    });
    const px = await proxy(srv.socket);
    const ch = channel(px.target, { clock });
    const relists: number[] = [];
    const waiters: { cond: () => boolean; resolve: () => void }[] = [];
    const until = (cond: () => boolean) => new Promise<void>((resolve) => (cond() ? resolve() : waiters.push({ cond, resolve })));
    const ev = new RuntimeEvents({
      stream: (p, b, m, s) => ch.serverStream(p, b, m, s),
      onEvent: () => {
        relists.push(clock.now());
        for (const w of waiters.filter((x) => x.cond())) w.resolve();
      },
      clock,
      logger: silentLogger(),
      settleMs: 1000,
      coalesceMs: 100,
    });
    const ab = new AbortController();
    const t0 = clock.now();
    ev.start(ab.signal);
    cleanups.push(() => ab.abort());
    await until(() => ev.live);
    px.freeze();
    await clock.advance(KEEPALIVE_IDLE_MS + KEEPALIVE_TIMEOUT_MS);
    await until(() => !ev.live);
    // Lost at the bound exactly (virtual time); one relist for what the silence may have hidden.
    expect(relists.at(-1)).toBe(t0 + KEEPALIVE_IDLE_MS + KEEPALIVE_TIMEOUT_MS);
    await clock.advance(1000); // the backoff after a failed subscription
    await until(() => ev.live);
    expect(ev.source).toBe('cri');
    ab.abort();
    await ev.stop();
  });
});
