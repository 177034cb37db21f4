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
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fromGrpcError } from '../../../src/runtime/errors.js';
import { GrpcError, GrpcStatus, UnaryChannel, decodeGrpcMessage, grpcCodeForHttpStatus, grpcTimeout } from '../../../src/runtime/grpc-unary.js';

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

/** An HTTP/2 server on a new unix socket; `handler` answers each request once its body is read. */
async function serve(handler: Handler, socket = path.join(dir, `s${n++}.sock`)): Promise<Server> {
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
    stream.on('end', () => handler(stream, headers, Buffer.concat(parts)));
    stream.on('error', () => {});
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Answers `msg` in 1-byte DATA frames (the prefix split too), then OK in the trailers. */
async function answerSplit(stream: http2.ServerHttp2Stream, msg: Buffer): Promise<void> {
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
  const bytes = frame(msg);
  for (let i = 0; i < bytes.length; i++) {
    stream.write(bytes.subarray(i, i + 1));
    await sleep(1);
  }
  stream.end();
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

  it('deadline: DEADLINE_EXCEEDED at the deadline, and the stream is reset (the server sees it cancelled)', async () => {
    let serverSaw: number | undefined;
    const closed = new Promise<void>((resolve) => {
      void serve((stream) => {
        stream.on('close', () => {
          serverSaw = stream.rstCode;
          resolve();
        });
      }).then((srv) => {
        const started = Date.now();
        void failure(channel(srv.target).call('/x/Hang', Buffer.alloc(0), 150)).then((err) => {
          expect(err.code).toBe(GrpcStatus.DEADLINE_EXCEEDED);
          expect(Date.now() - started).toBeGreaterThanOrEqual(140);
          expect(Date.now() - started).toBeLessThan(1500);
        });
      });
    });
    await closed;
    expect(serverSaw).toBe(http2.constants.NGHTTP2_CANCEL);
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
      setTimeout(() => void srv!.close(), 50);
    });
    const ch = channel(srv.target);
    const started = Date.now();
    const err = await failure(ch.call('/x/Hang', Buffer.alloc(0), 10_000));
    expect(err.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(Date.now() - started).toBeLessThan(2000);
    await serve(ok, srv.socket);
    expect((await ch.call('/x/Y', Buffer.alloc(0), 5000)).toString()).toBe('ok');
  });

  it('GOAWAY from the server: the next call opens a new session', async () => {
    const srv = await serve(ok);
    const ch = channel(srv.target);
    await ch.call('/x/Y', Buffer.alloc(0), 5000);
    const [first] = [...srv.sessions];
    first!.goaway();
    await sleep(50);
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
    let gotBeforeEnd = 0;
    const srv = await serve(async (stream, headers) => {
      seen = headers;
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.write(Buffer.concat([frame(Buffer.from('one')), frame(Buffer.from('two'))]));
      await sleep(20);
      const third = frame(Buffer.from('three'));
      stream.write(third.subarray(0, 3));
      await sleep(20);
      stream.write(third.subarray(3));
      await sleep(20);
      gotBeforeEnd = got.length;
      stream.end();
    });
    await channel(srv.target).serverStream('/s.S/Watch', Buffer.from('req'), (m) => got.push(m.toString()), new AbortController().signal);
    expect(got).toEqual(['one', 'two', 'three']);
    expect(gotBeforeEnd).toBe(3);
    expect(seen![':path']).toBe('/s.S/Watch');
    expect(seen!['grpc-timeout']).toBeUndefined();
  });

  it('an abort ends the stream with CANCELLED and resets it (the server sees it closed); a failure status after messages rejects with it', async () => {
    let serverClosed = false;
    const srv = await serve((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
      stream.write(frame(Buffer.from('x')));
      stream.on('close', () => (serverClosed = true));
    });
    const ab = new AbortController();
    const got: string[] = [];
    const p = channel(srv.target).serverStream('/s.S/Watch', Buffer.alloc(0), (m) => {
      got.push(m.toString());
      ab.abort();
    }, ab.signal);
    expect((await failure(p)).code).toBe(GrpcStatus.CANCELLED);
    expect(got).toEqual(['x']);
    for (let i = 0; i < 100 && !serverClosed; i++) await sleep(5);
    expect(serverClosed).toBe(true);

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
