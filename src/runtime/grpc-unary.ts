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
 * - Framing as the gRPC HTTP/2 protocol has it: 5-byte prefix (compressed flag, uint32 BE
 *   length) + message; status from the trailers, or from the headers of a trailers-only
 *   answer; an HTTP status other than 200 mapped as the spec says.
 * - The session never keeps the process alive by itself; a pending call's deadline timer does.
 * - A call can be cancelled (an AbortSignal): the stream is reset with CANCEL, so the
 *   runtime's handler sees its context cancelled (containerd's ExecSync then kills the
 *   process it started).
 * - Errors are GrpcError: numeric `code` and `details`, what fromGrpcError (errors.ts) reads.
 */
import http2 from 'node:http2';
import net from 'node:net';

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

export interface UnaryChannelOptions {
  maxSendMessageBytes?: number;
  maxReceiveMessageBytes?: number;
}

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

function header(h: http2.IncomingHttpHeaders, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A gRPC channel to one `unix:///path` target, for unary calls. */
export class UnaryChannel {
  readonly target: string;
  readonly #socketPath: string;
  readonly #maxSend: number;
  readonly #maxReceive: number;
  #session: http2.ClientHttp2Session | undefined;
  /** The last connection error of the current session, for the details of the calls it fails. */
  #sessionError: Error | undefined;
  #closed = false;

  constructor(target: string, opts: UnaryChannelOptions = {}) {
    if (!target.startsWith('unix:///')) throw new Error(`grpc target "${target}": expected unix:///path`);
    this.target = target;
    this.#socketPath = target.slice('unix://'.length);
    this.#maxSend = opts.maxSendMessageBytes ?? MAX_MESSAGE_BYTES;
    this.#maxReceive = opts.maxReceiveMessageBytes ?? MAX_MESSAGE_BYTES;
  }

  #connect(): http2.ClientHttp2Session {
    const s = this.#session;
    if (s && !s.closed && !s.destroyed) return s;
    this.#sessionError = undefined;
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(this.#socketPath) });
    const drop = () => {
      if (this.#session === session) this.#session = undefined;
    };
    session.on('error', (err: Error) => {
      if (this.#session === session || this.#session === undefined) this.#sessionError = err;
      drop();
    });
    session.on('goaway', drop);
    session.on('close', drop);
    // Idle, the channel must not keep the process alive; a pending call's deadline timer does.
    session.unref();
    this.#session = session;
    return session;
  }

  /**
   * One unary call: `body` is the serialized request, the answer the serialized response.
   * Rejects with GrpcError. `deadlineMs` undefined: no deadline (the call ends with its
   * answer or `signal`). `signal` aborting ends the call at once with CANCELLED and resets
   * the stream (RST_STREAM CANCEL), which a Go gRPC server sees as its context cancelled.
   */
  call(path: string, body: Uint8Array, deadlineMs: number | undefined, signal?: AbortSignal): Promise<Buffer> {
    return this.#call(path, body, { ...(deadlineMs !== undefined ? { deadlineMs } : {}), ...(signal ? { signal } : {}) });
  }

  /**
   * A server-streaming call without a deadline: each message of the answer goes to
   * `onMessage` as it arrives; resolves when the server ends the stream with OK, rejects
   * with GrpcError otherwise (CANCELLED when `signal` aborts).
   */
  serverStream(path: string, body: Uint8Array, onMessage: (message: Buffer) => void, signal: AbortSignal): Promise<void> {
    return this.#call(path, body, { onMessage, signal }).then(() => undefined);
  }

  #call(path: string, body: Uint8Array, o: { deadlineMs?: number; onMessage?: (message: Buffer) => void; signal?: AbortSignal }): Promise<Buffer> {
    const { deadlineMs, onMessage, signal } = o;
    if (this.#closed) return Promise.reject(new GrpcError(GrpcStatus.CANCELLED, 'Channel has been shut down'));
    if (body.length > this.#maxSend) {
      return Promise.reject(new GrpcError(GrpcStatus.RESOURCE_EXHAUSTED, `Sent message larger than max (${body.length} vs. ${this.#maxSend})`));
    }
    return new Promise<Buffer>((resolve, reject) => {
      let stream: http2.ClientHttp2Stream;
      let session: http2.ClientHttp2Session;
      const headers: http2.OutgoingHttpHeaders = {
        ':method': 'POST',
        ':path': path,
        'content-type': 'application/grpc',
        te: 'trailers',
        ...(deadlineMs !== undefined ? { 'grpc-timeout': grpcTimeout(deadlineMs) } : {}),
        'user-agent': 'nodelet-grpc-unary',
      };
      try {
        session = this.#connect();
        stream = session.request(headers);
      } catch (err) {
        // A session that got GOAWAY or closed between the check and the request: one new session.
        this.#session = undefined;
        try {
          session = this.#connect();
          stream = session.request(headers);
        } catch (err2) {
          reject(new GrpcError(GrpcStatus.UNAVAILABLE, `cannot start call: ${(err2 as Error).message ?? String(err)}`));
          return;
        }
      }

      let done = false;
      const finish = (err: GrpcError | undefined, res?: Buffer) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (err) {
          if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
          reject(err);
        } else resolve(res!);
      };
      const timer = deadlineMs !== undefined ? setTimeout(() => finish(new GrpcError(GrpcStatus.DEADLINE_EXCEEDED, 'Deadline exceeded')), deadlineMs) : undefined;
      const onAbort = () => finish(new GrpcError(GrpcStatus.CANCELLED, 'Cancelled on client'));
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });

      // Response state.
      let httpStatus: number | undefined;
      let statusCode: number | undefined;
      let statusMessage = '';
      const chunks: Buffer[] = [];
      let buffered = 0;
      let message: Buffer | undefined;
      let streamError: Error | undefined;

      const takeStatus = (h: http2.IncomingHttpHeaders): void => {
        const s = header(h, 'grpc-status');
        if (s === undefined) return;
        const n = Number(s);
        statusCode = Number.isInteger(n) && n >= 0 ? n : GrpcStatus.UNKNOWN;
        statusMessage = decodeGrpcMessage(header(h, 'grpc-message') ?? '');
      };

      /** The length of the message whose prefix has been read, until the message is complete. */
      let expected: number | undefined;
      /** The buffered DATA as one buffer (concatenated once per message, not per chunk). */
      const coalesce = (): Buffer => {
        if (chunks.length !== 1) chunks.splice(0, chunks.length, Buffer.concat(chunks, buffered));
        return chunks[0]!;
      };

      /** Pulls complete messages out of the buffered DATA; false once the call has failed. */
      const drain = (): boolean => {
        for (;;) {
          if (expected === undefined) {
            if (buffered < 5) return true;
            const head = chunks[0]!.length >= 5 ? chunks[0]! : coalesce();
            const len = head.readUInt32BE(1);
            if (head[0] !== 0) {
              finish(new GrpcError(GrpcStatus.INTERNAL, 'Received compressed message but no compression was negotiated'));
              return false;
            }
            if (len > this.#maxReceive) {
              finish(new GrpcError(GrpcStatus.RESOURCE_EXHAUSTED, `Received message larger than max (${len} vs. ${this.#maxReceive})`));
              return false;
            }
            if (message !== undefined && !onMessage) {
              finish(new GrpcError(GrpcStatus.INTERNAL, 'Received more than one message in a unary call'));
              return false;
            }
            expected = len;
          }
          if (buffered < 5 + expected) return true;
          const all = coalesce();
          // A copy only when the message is a part of a larger buffer.
          const body = all.subarray(5, 5 + expected);
          message = body.length === all.length - 5 && all.byteOffset === 0 && all.buffer.byteLength === all.length ? body : Buffer.from(body);
          const rest = all.subarray(5 + expected);
          chunks.length = 0;
          buffered = rest.length;
          if (rest.length) chunks.push(rest);
          expected = undefined;
          if (onMessage) {
            onMessage(message);
            if (done) return false;
          }
        }
      };

      stream.on('response', (h) => {
        httpStatus = Number(h[':status']);
        takeStatus(h); // trailers-only answer
        if (statusCode === undefined && httpStatus !== 200) {
          finish(new GrpcError(grpcCodeForHttpStatus(httpStatus), `Received HTTP status code ${httpStatus}`));
          return;
        }
        const ct = header(h, 'content-type') ?? '';
        if (statusCode === undefined && !ct.startsWith('application/grpc')) {
          finish(new GrpcError(GrpcStatus.UNKNOWN, `Received invalid content-type "${ct}"`));
        }
      });
      stream.on('data', (chunk: Buffer) => {
        if (done) return;
        chunks.push(chunk);
        buffered += chunk.length;
        drain();
      });
      stream.on('trailers', (h) => takeStatus(h));
      stream.on('error', (err: Error) => {
        streamError = err;
      });
      stream.on('close', () => {
        if (done) return;
        if (statusCode !== undefined) {
          if (statusCode !== GrpcStatus.OK) return finish(new GrpcError(statusCode, statusMessage));
          if (buffered > 0) return finish(new GrpcError(GrpcStatus.INTERNAL, 'Incomplete message at the end of the answer'));
          if (onMessage) return finish(undefined, Buffer.alloc(0));
          if (message === undefined) return finish(new GrpcError(GrpcStatus.UNIMPLEMENTED, 'No message received'));
          return finish(undefined, message);
        }
        // No status: the connection went away, or the stream was reset.
        const lost = session.destroyed || session.closed || this.#sessionError !== undefined || httpStatus === undefined;
        if (lost) {
          const why = this.#sessionError ?? streamError;
          return finish(new GrpcError(GrpcStatus.UNAVAILABLE, why ? `Connection dropped: ${why.message}` : 'Connection dropped'));
        }
        const rst = stream.rstCode ?? http2.constants.NGHTTP2_INTERNAL_ERROR;
        finish(new GrpcError(grpcCodeForRst(rst), `Stream closed without a status (RST_STREAM code ${rst})`));
      });
      stream.end(Buffer.concat([prefix(body.length), body]));
    });
  }

  /** Closes the session; later calls fail with CANCELLED. Idempotent. */
  close(): void {
    this.#closed = true;
    const s = this.#session;
    this.#session = undefined;
    s?.destroy();
  }
}

function prefix(len: number): Buffer {
  const b = Buffer.alloc(5);
  b.writeUInt32BE(len, 1);
  return b;
}
