/**
 * A minimal gRPC unary client over `node:http2` on a unix socket: what the CRI client needs
 * of gRPC, without @grpc/grpc-js in the daemon (issue 17: grpc-js cost ~4 MB of RSS and
 * loaded right after /healthz started listening; a unary call through it cost twice the CPU
 * of a raw HTTP/2 request on the same socket).
 *
 * - One HTTP/2 session per channel, connected on the first call and made again on the
 *   next call after it closed, failed or received GOAWAY: a restarted runtime is used again
 *   by the first call after it is back.
 * - Fail fast (grpc-js's waitForReady false): socket missing, connection refused, or the
 *   session lost mid-call -> UNAVAILABLE at once, never a wait for the runtime.
 * - Transparent retry (gRFC A6, RFC 9113 §8.7): a call the server provably never processed
 *   (its stream above the lastStreamID of the server's GOAWAY, or reset with REFUSED_STREAM,
 *   and no answer headers) is sent again once, at once, on a new session, within the same
 *   deadline. A call the server may have processed is never sent twice: its answer lost,
 *   it fails UNAVAILABLE as before (CRI calls are not all idempotent: RunPodSandbox).
 * - Keepalive, bounded and only when needed: while a call without a deadline is open (the
 *   runtime event stream, ExecSync of `/run`), a session that received nothing for
 *   `keepaliveIdleMs` (5 min) is sent an HTTP/2 PING; no acknowledgement within
 *   `keepaliveTimeoutMs` (20 s) ends the session, and its calls fail UNAVAILABLE. A call with
 *   a deadline is bounded by it, and an idle session costs nothing: no timer, no PING (the
 *   kernel reports a dead peer on a unix socket; the kubelet's CRI client dials without
 *   keepalive at all). 5 min is grpc-go's server default `EnforcementPolicy.MinTime`: a
 *   client pinging more often, while the server sends nothing, gets GOAWAY `too_many_pings`
 *   after 3 strikes, which containerd and CRI-O would send.
 * - Framing as the gRPC HTTP/2 protocol has it: 5-byte prefix (compressed flag, uint32 BE
 *   length) + message; status from the trailers, or from the headers of a trailers-only
 *   answer; an HTTP status other than 200 mapped as the spec says.
 * - The session never keeps the process alive by itself; a pending call's deadline (or
 *   keepalive) timer does.
 * - A call can be cancelled (an AbortSignal): the stream is reset with CANCEL, so the
 *   runtime's handler sees its context cancelled (containerd's ExecSync then kills the
 *   process it started).
 * - Timers run on the injected Clock (deadlines, keepalive), so tests drive them.
 * - Errors are GrpcError: numeric `code` and `details`, what fromGrpcError (errors.ts) reads.
 */
import http2 from 'node:http2';
import net from 'node:net';

import { realClock, type Clock } from '../clock.js';
import { GrpcStatus } from './grpc-status.js';

export { GrpcStatus, type GrpcStatusCode } from './grpc-status.js';

/** A failed call: `code` (gRPC status) and `details` (the status message as sent). */
export class GrpcError extends Error {
  readonly code: number;
  readonly details: string;
  constructor(code: number, details: string) {
    super(`${code} ${details}`);
    this.name = 'GrpcError';
    this.code = code;
    this.details = details;
  }
}

/** The default message size limit both ways: the kubelet's (ListContainers on a busy node exceeds grpc's 4 MiB). */
export const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

/** A session silent this long while a call without a deadline is open is sent a PING (grpc-go's server MinTime). */
export const KEEPALIVE_IDLE_MS = 5 * 60_000;
/** How long a keepalive PING may wait for its acknowledgement (grpc-go's keepalive Timeout default). */
export const KEEPALIVE_TIMEOUT_MS = 20_000;

export interface UnaryChannelOptions {
  maxSendMessageBytes?: number;
  maxReceiveMessageBytes?: number;
  /** Deadlines and keepalive timers; realClock by default. */
  clock?: Clock;
  /** Silence (nothing received on the session) before a keepalive PING; KEEPALIVE_IDLE_MS by default. */
  keepaliveIdleMs?: number;
  /** Wait for the PING's acknowledgement before the session is given up; KEEPALIVE_TIMEOUT_MS by default. */
  keepaliveTimeoutMs?: number;
}

/** One HTTP/2 session of a channel and what the channel knows of it. */
interface Conn {
  readonly session: http2.ClientHttp2Session;
  /** The session's connection error, for the details of the calls it fails. */
  error: Error | undefined;
  /** lastStreamID of the server's GOAWAY: streams above it were never processed. */
  goawayLast: number | undefined;
  /** Open calls without a deadline: the keepalive runs while there is one. */
  unbounded: number;
  /** Clock time of the last frame received for a call (or PING acknowledgement), kept while `unbounded`. */
  lastRx: number;
  /** Stops the keepalive loop. */
  keepalive: AbortController | undefined;
}

/** The reason a timer of this module is cancelled with: shared, so cancelling costs no stack trace. */
const TIMER_CANCELLED = Object.freeze(new Error('timer cancelled'));

/** HTTP status of a non-200 answer -> gRPC code (gRPC's http-grpc-status-mapping.md). */
export function grpcCodeForHttpStatus(httpStatus: number): number {
  switch (httpStatus) {
    case 400:
      return GrpcStatus.INTERNAL;
    case 401:
      return GrpcStatus.UNAUTHENTICATED;
    case 403:
      return GrpcStatus.PERMISSION_DENIED;
    case 404:
      return GrpcStatus.UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return GrpcStatus.UNAVAILABLE;
    default:
      return GrpcStatus.UNKNOWN;
  }
}

/** RST_STREAM error code -> gRPC code (what grpc-js and grpc-go report for a reset without status). */
function grpcCodeForRst(rst: number): number {
  const c = http2.constants;
  if (rst === c.NGHTTP2_REFUSED_STREAM) return GrpcStatus.UNAVAILABLE;
  if (rst === c.NGHTTP2_CANCEL) return GrpcStatus.CANCELLED;
  if (rst === c.NGHTTP2_ENHANCE_YOUR_CALM) return GrpcStatus.RESOURCE_EXHAUSTED;
  if (rst === c.NGHTTP2_INADEQUATE_SECURITY) return GrpcStatus.PERMISSION_DENIED;
  return GrpcStatus.INTERNAL;
}

/** `grpc-message` is percent-encoded UTF-8; a malformed encoding is shown as sent. */
export function decodeGrpcMessage(raw: string): string {
  if (!raw.includes('%')) return raw;
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/** `grpc-timeout`: at most 8 digits, in the finest unit that fits. */
export function grpcTimeout(ms: number): string {
  const m = Math.max(1, Math.ceil(ms));
  if (m < 1e8) return `${m}m`;
  const s = Math.ceil(m / 1000);
  if (s < 1e8) return `${s}S`;
  return `${Math.min(99_999_999, Math.ceil(s / 3600))}H`;
}

function positive(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (!(Number.isFinite(v) && v > 0)) throw new Error(`grpc channel option ${name}: expected a positive number of milliseconds, got ${v}`);
  return v;
}

function header(h: http2.IncomingHttpHeaders, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A gRPC channel to one `unix:///path` target, for unary calls. */
/** One call across its attempts: what is sent, and how it ends (once). */
interface Call {
  headers: http2.OutgoingHttpHeaders;
  framed: Buffer;
  deadlineMs: number | undefined;
  onMessage: ((message: Buffer) => void) | undefined;
  done: boolean;
  /** The stream of the current attempt. */
  stream: http2.ClientHttp2Stream | undefined;
  /** Releases the keepalive hold of the current attempt (calls without a deadline). */
  release: (() => void) | undefined;
  finish(err: GrpcError | undefined, res?: Buffer): void;
}

/**
 * The answer of one attempt as it arrives: the HTTP status, the gRPC status (in the headers
 * of a trailers-only answer, or in the trailers), and the length-prefixed messages in DATA,
 * each handed to `onMessage` (streaming) or kept (unary: exactly one).
 */
class Answer {
  httpStatus: number | undefined;
  statusCode: number | undefined;
  statusMessage = '';
  message: Buffer | undefined;
  readonly #chunks: Buffer[] = [];
  #buffered = 0;
  /** The length of the message whose prefix has been read, until the message is complete. */
  #expected: number | undefined;

  constructor(
    readonly maxReceive: number,
    readonly onMessage: ((message: Buffer) => void) | undefined,
  ) {}

  takeStatus(h: http2.IncomingHttpHeaders): void {
    const v = header(h, 'grpc-status');
    if (v === undefined) return;
    const n = Number(v);
    this.statusCode = Number.isInteger(n) && n >= 0 ? n : GrpcStatus.UNKNOWN;
    this.statusMessage = decodeGrpcMessage(header(h, 'grpc-message') ?? '');
  }

  /** The answer's headers; an error when they already end the call. */
  headers(h: http2.IncomingHttpHeaders): GrpcError | undefined {
    this.httpStatus = Number(h[':status']);
    this.takeStatus(h); // trailers-only answer
    if (this.statusCode === undefined && this.httpStatus !== 200) return new GrpcError(grpcCodeForHttpStatus(this.httpStatus), `Received HTTP status code ${this.httpStatus}`);
    const ct = header(h, 'content-type') ?? '';
    if (this.statusCode === undefined && !ct.startsWith('application/grpc')) return new GrpcError(GrpcStatus.UNKNOWN, `Received invalid content-type "${ct}"`);
    return undefined;
  }

  /** The buffered DATA as one buffer (concatenated once per message, not per chunk). */
  #coalesce(): Buffer {
    if (this.#chunks.length !== 1) this.#chunks.splice(0, this.#chunks.length, Buffer.concat(this.#chunks, this.#buffered));
    return this.#chunks[0]!;
  }

  /** DATA: pulls out the complete messages; an error when the answer is malformed. `ended()`: the call ended meanwhile (onMessage may end it). */
  data(chunk: Buffer, ended: () => boolean): GrpcError | undefined {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    for (;;) {
      if (this.#expected === undefined) {
        if (this.#buffered < 5) return undefined;
        const head = this.#chunks[0]!.length >= 5 ? this.#chunks[0]! : this.#coalesce();
        const len = head.readUInt32BE(1);
        if (head[0] !== 0) return new GrpcError(GrpcStatus.INTERNAL, 'Received compressed message but no compression was negotiated');
        if (len > this.maxReceive) return new GrpcError(GrpcStatus.RESOURCE_EXHAUSTED, `Received message larger than max (${len} vs. ${this.maxReceive})`);
        if (this.message !== undefined && !this.onMessage) return new GrpcError(GrpcStatus.INTERNAL, 'Received more than one message in a unary call');
        this.#expected = len;
      }
      const expected = this.#expected;
      if (this.#buffered < 5 + expected) return undefined;
      const all = this.#coalesce();
      // A copy only when the message is a part of a larger buffer.
      const body = all.subarray(5, 5 + expected);
      this.message = body.length === all.length - 5 && all.byteOffset === 0 && all.buffer.byteLength === all.length ? body : Buffer.from(body);
      const rest = all.subarray(5 + expected);
      this.#chunks.length = 0;
      this.#buffered = rest.length;
      if (rest.length) this.#chunks.push(rest);
      this.#expected = undefined;
      if (this.onMessage) {
        this.onMessage(this.message);
        if (ended()) return undefined;
      }
    }
  }

  /** At the stream's close: how the call ends when a status came, else undefined. */
  outcome(): { err: GrpcError | undefined; res?: Buffer } | undefined {
    if (this.statusCode === undefined) return undefined;
    if (this.statusCode !== GrpcStatus.OK) return { err: new GrpcError(this.statusCode, this.statusMessage) };
    if (this.#buffered > 0) return { err: new GrpcError(GrpcStatus.INTERNAL, 'Incomplete message at the end of the answer') };
    if (this.onMessage) return { err: undefined, res: Buffer.alloc(0) };
    if (this.message === undefined) return { err: new GrpcError(GrpcStatus.UNIMPLEMENTED, 'No message received') };
    return { err: undefined, res: this.message };
  }
}

export class UnaryChannel {
  readonly target: string;
  readonly #socketPath: string;
  readonly #maxSend: number;
  readonly #maxReceive: number;
  readonly #clock: Clock;
  readonly #idleMs: number;
  readonly #pingTimeoutMs: number;
  #conn: Conn | undefined;
  #closed = false;

  constructor(target: string, opts: UnaryChannelOptions = {}) {
    if (!target.startsWith('unix:///')) throw new Error(`grpc target "${target}": expected unix:///path`);
    this.target = target;
    this.#socketPath = target.slice('unix://'.length);
    this.#maxSend = opts.maxSendMessageBytes ?? MAX_MESSAGE_BYTES;
    this.#maxReceive = opts.maxReceiveMessageBytes ?? MAX_MESSAGE_BYTES;
    this.#clock = opts.clock ?? realClock;
    this.#idleMs = positive('keepaliveIdleMs', opts.keepaliveIdleMs, KEEPALIVE_IDLE_MS);
    this.#pingTimeoutMs = positive('keepaliveTimeoutMs', opts.keepaliveTimeoutMs, KEEPALIVE_TIMEOUT_MS);
  }

  /**
   * Runs `fn` after `ms` on the channel's clock; returns the cancel. On the real clock a
   * plain timer: a call's deadline then costs no AbortController and no promise (measured
   * here, 20,000 small calls: through Clock.sleep the client CPU per call went from ~205 to
   * ~250-275 us; with the plain timer it is back to the old client's, within noise).
   */
  #after(ms: number, fn: () => void): () => void {
    if (this.#clock === realClock) {
      const t = setTimeout(fn, ms);
      return () => clearTimeout(t);
    }
    const ab = new AbortController();
    this.#clock.sleep(ms, ab.signal).then(fn, () => {});
    return () => ab.abort(TIMER_CANCELLED);
  }

  #connect(): Conn {
    const c = this.#conn;
    if (c && !c.session.closed && !c.session.destroyed) return c;
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(this.#socketPath) });
    const conn: Conn = { session, error: undefined, goawayLast: undefined, unbounded: 0, lastRx: 0, keepalive: undefined };
    const drop = () => {
      if (this.#conn === conn) this.#conn = undefined;
    };
    session.on('error', (err: Error) => {
      conn.error ??= err;
      drop();
    });
    session.on('goaway', (_code: number, lastStreamID: number) => {
      // Sent twice by grpc-go (a first with 2^31-1, then the real one): the lowest counts.
      conn.goawayLast = Math.min(conn.goawayLast ?? lastStreamID, lastStreamID);
      drop();
    });
    session.on('close', () => {
      drop();
      conn.keepalive?.abort(TIMER_CANCELLED);
    });
    // Idle, the channel must not keep the process alive; a pending call's deadline timer does.
    session.unref();
    this.#conn = conn;
    return conn;
  }

  /** A call without a deadline opens on `conn`: the keepalive runs until its last such call ends. Returns the release. */
  #holdKeepalive(conn: Conn): () => void {
    if (conn.unbounded++ === 0) {
      conn.lastRx = this.#clock.now();
      void this.#keepalive(conn);
    }
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      if (--conn.unbounded === 0) conn.keepalive?.abort(TIMER_CANCELLED);
    };
  }

  /**
   * PING after `idleMs` of silence, repeated while calls without a deadline are open; an
   * unacknowledged PING destroys the session (its calls fail UNAVAILABLE, naming the cause).
   */
  async #keepalive(conn: Conn): Promise<void> {
    const ab = new AbortController();
    conn.keepalive = ab;
    try {
      while (conn.unbounded > 0 && !conn.session.destroyed && !ab.signal.aborted) {
        const wait = conn.lastRx + this.#idleMs - this.#clock.now();
        if (wait > 0) {
          await this.#clock.sleep(wait, ab.signal);
          continue;
        }
        const outcome = await this.#ping(conn, ab.signal);
        if (outcome === 'gone') return;
        if (outcome === 'timeout') {
          conn.session.destroy(new Error(`keepalive: no answer to HTTP/2 PING within ${this.#pingTimeoutMs} ms`));
          return;
        }
        conn.lastRx = this.#clock.now();
      }
    } catch {
      // The loop's sleep was cancelled: the last unbounded call ended, or the session closed.
    } finally {
      if (conn.keepalive === ab) conn.keepalive = undefined;
    }
  }

  #ping(conn: Conn, signal: AbortSignal): Promise<'acked' | 'timeout' | 'gone'> {
    return new Promise((resolve) => {
      const timer = new AbortController();
      let settled = false;
      const end = (outcome: 'acked' | 'timeout' | 'gone') => {
        if (settled) return;
        settled = true;
        timer.abort(TIMER_CANCELLED);
        signal.removeEventListener('abort', onStop);
        resolve(outcome);
      };
      const onStop = () => end('gone');
      if (signal.aborted) return end('gone');
      signal.addEventListener('abort', onStop, { once: true });
      this.#clock.sleep(this.#pingTimeoutMs, timer.signal).then(() => end('timeout'), () => {});
      try {
        // An error in the callback: the session went meanwhile, and its calls already fail.
        if (!conn.session.ping((err) => end(err ? 'gone' : 'acked'))) end('gone');
      } catch {
        end('gone');
      }
    });
  }

  /**
   * One unary call: `body` is the serialized request, the answer the serialized response.
   * Rejects with GrpcError. `deadlineMs` undefined: no deadline (the call ends with its
   * answer or `signal`; the keepalive bounds a silent runtime). `signal` aborting ends the
   * call at once with CANCELLED and resets the stream (RST_STREAM CANCEL), which a Go gRPC
   * server sees as its context cancelled.
   */
  call(path: string, body: Uint8Array, deadlineMs: number | undefined, signal?: AbortSignal): Promise<Buffer> {
    return this.#call(path, body, { ...(deadlineMs !== undefined ? { deadlineMs } : {}), ...(signal ? { signal } : {}) });
  }

  /**
   * A server-streaming call without a deadline: each message of the answer goes to
   * `onMessage` as it arrives; resolves when the server ends the stream with OK, rejects
   * with GrpcError otherwise (CANCELLED when `signal` aborts; UNAVAILABLE when the session
   * is lost, a silent one included: see the keepalive).
   */
  serverStream(path: string, body: Uint8Array, onMessage: (message: Buffer) => void, signal: AbortSignal): Promise<void> {
    return this.#call(path, body, { onMessage, signal }).then(() => undefined);
  }

  #call(path: string, body: Uint8Array, o: { deadlineMs?: number; onMessage?: (message: Buffer) => void; signal?: AbortSignal }): Promise<Buffer> {
    const { deadlineMs, signal } = o;
    if (this.#closed) return Promise.reject(new GrpcError(GrpcStatus.CANCELLED, 'Channel has been shut down'));
    if (body.length > this.#maxSend) {
      return Promise.reject(new GrpcError(GrpcStatus.RESOURCE_EXHAUSTED, `Sent message larger than max (${body.length} vs. ${this.#maxSend})`));
    }
    return new Promise<Buffer>((resolve, reject) => {
      const call: Call = {
        headers: {
          ':method': 'POST',
          ':path': path,
          'content-type': 'application/grpc',
          te: 'trailers',
          ...(deadlineMs !== undefined ? { 'grpc-timeout': grpcTimeout(deadlineMs) } : {}),
          'user-agent': 'nodelet-grpc-unary',
        },
        framed: Buffer.concat([prefix(body.length), body]),
        deadlineMs,
        onMessage: o.onMessage,
        done: false,
        stream: undefined,
        release: undefined,
        finish: (err, res) => {
          if (call.done) return;
          call.done = true;
          cancelDeadline?.();
          call.release?.();
          signal?.removeEventListener('abort', onAbort);
          if (err) {
            if (call.stream && !call.stream.closed) call.stream.close(http2.constants.NGHTTP2_CANCEL);
            reject(err);
          } else resolve(res!);
        },
      };
      const cancelDeadline = deadlineMs !== undefined ? this.#after(deadlineMs, () => call.finish(new GrpcError(GrpcStatus.DEADLINE_EXCEEDED, 'Deadline exceeded'))) : undefined;
      const onAbort = () => call.finish(new GrpcError(GrpcStatus.CANCELLED, 'Cancelled on client'));
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#attempt(call, false);
    });
  }

  /** A stream on the current session, or on one new session when that one got GOAWAY or closed meanwhile. */
  #open(headers: http2.OutgoingHttpHeaders): { conn: Conn; s: http2.ClientHttp2Stream } | GrpcError {
    try {
      const conn = this.#connect();
      return { conn, s: conn.session.request(headers) };
    } catch (err) {
      this.#conn = undefined;
      try {
        const conn = this.#connect();
        return { conn, s: conn.session.request(headers) };
      } catch (err2) {
        return new GrpcError(GrpcStatus.UNAVAILABLE, `cannot start call: ${(err2 as Error).message ?? String(err)}`);
      }
    }
  }

  /** One attempt of `call` on the current session; `retried`: this is the transparent retry. */
  #attempt(call: Call, retried: boolean): void {
    const opened = this.#open(call.headers);
    if (opened instanceof GrpcError) return call.finish(opened);
    const { conn, s } = opened;
    call.stream = s;
    if (call.deadlineMs === undefined) call.release = this.#holdKeepalive(conn);
    /** Something arrived for this call: the session is alive (read only while the keepalive runs). */
    const alive = () => {
      if (conn.unbounded > 0) conn.lastRx = this.#clock.now();
    };
    const answer = new Answer(this.#maxReceive, call.onMessage);
    let streamError: Error | undefined;
    s.on('response', (h) => {
      if (call.done) return;
      alive();
      const err = answer.headers(h);
      if (err) call.finish(err);
    });
    s.on('data', (chunk: Buffer) => {
      if (call.done) return;
      alive();
      const err = answer.data(chunk, () => call.done);
      if (err) call.finish(err);
    });
    s.on('trailers', (h) => answer.takeStatus(h));
    s.on('error', (err: Error) => {
      streamError = err;
    });
    s.on('close', () => {
      if (call.done) return;
      const outcome = answer.outcome();
      if (outcome) return call.finish(outcome.err, outcome.res);
      // No status. Never processed by the server (no answer headers, and above its
      // GOAWAY's lastStreamID or refused): sent again once, on a new session.
      const unprocessed =
        answer.httpStatus === undefined &&
        (s.rstCode === http2.constants.NGHTTP2_REFUSED_STREAM || (conn.goawayLast !== undefined && s.id !== undefined && s.id > conn.goawayLast));
      if (unprocessed && !retried) {
        call.release?.();
        call.release = undefined;
        return this.#attempt(call, true); // the GOAWAY already dropped the session: a new one
      }
      // Otherwise the connection went away, or the stream was reset.
      const session = conn.session;
      const lost = session.destroyed || session.closed || conn.error !== undefined || answer.httpStatus === undefined;
      if (lost) {
        const why = conn.error ?? streamError;
        return call.finish(new GrpcError(GrpcStatus.UNAVAILABLE, why ? `Connection dropped: ${why.message}` : 'Connection dropped'));
      }
      const rst = s.rstCode ?? http2.constants.NGHTTP2_INTERNAL_ERROR;
      call.finish(new GrpcError(grpcCodeForRst(rst), `Stream closed without a status (RST_STREAM code ${rst})`));
    });
    s.end(call.framed);
  }

  /** Closes the session; later calls fail with CANCELLED. Idempotent. */
  close(): void {
    this.#closed = true;
    const c = this.#conn;
    this.#conn = undefined;
    c?.session.destroy();
  }
}

function prefix(len: number): Buffer {
  const b = Buffer.alloc(5);
  b.writeUInt32BE(len, 1);
  return b;
}
