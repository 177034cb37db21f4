/**
 * A minimal SPDY/3.1 client of the kind `kubectl exec` is, for tests and benchmarks that
 * need to speak to a streaming server (containerd 1.6 refuses WebSocket): the HTTP/1.1
 * upgrade, then SYN_STREAM / SYN_REPLY / DATA / RST_STREAM / SETTINGS / PING / GOAWAY /
 * HEADERS / WINDOW_UPDATE frames, header blocks compressed with zlib and the SPDY/3
 * dictionary (one compression context per direction for the whole session, each block
 * ended with a sync flush), and on top the streams of the `v4.channel.k8s.io` protocol
 * (`streamtype` error, stdin, stdout, stderr, resize), as k8s.io/apimachinery's
 * httpstream/spdy (moby/spdystream) on the server side expects them.
 *
 * Flow control is not done: spdystream neither sends nor honours WINDOW_UPDATE. DATA is
 * handed to the stream as it arrives (slices of the socket's reads, never buffered whole
 * frames), so reading 100 MiB costs one pass over the bytes.
 *
 * Not a general SPDY implementation: no server push, no priorities, no settings honoured.
 */
import http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import zlib from 'node:zlib';

export const SPDY_VERSION = 3;

export const FRAME = {
  SYN_STREAM: 1,
  SYN_REPLY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PING: 6,
  GOAWAY: 7,
  HEADERS: 8,
  WINDOW_UPDATE: 9,
} as const;

export const FLAG_FIN = 0x01;
export const FLAG_UNIDIRECTIONAL = 0x02;

/** The words and the tail of the SPDY/3 header dictionary (draft 3, section 2.6.10.1). */
const DICTIONARY_WORDS = [
  'options', 'head', 'post', 'put', 'delete', 'trace', 'accept', 'accept-charset', 'accept-encoding', 'accept-language',
  'accept-ranges', 'age', 'allow', 'authorization', 'cache-control', 'connection', 'content-base', 'content-encoding',
  'content-language', 'content-length', 'content-location', 'content-md5', 'content-range', 'content-type', 'date', 'etag',
  'expect', 'expires', 'from', 'host', 'if-match', 'if-modified-since', 'if-none-match', 'if-range', 'if-unmodified-since',
  'last-modified', 'location', 'max-forwards', 'pragma', 'proxy-authenticate', 'proxy-authorization', 'range', 'referer',
  'retry-after', 'server', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'user-agent', 'vary', 'via', 'warning',
  'www-authenticate', 'method', 'get', 'status', '200 OK', 'version', 'HTTP/1.1', 'url', 'public', 'set-cookie',
  'keep-alive', 'origin',
];
const DICTIONARY_TAIL =
  '100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505' +
  '203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized' +
  '403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable' +
  'Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT' +
  'chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,' +
  'text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.';

/** The 1423-byte SPDY/3 zlib dictionary: each word with its 32-bit big-endian length, then the tail. */
export const SPDY_DICTIONARY: Buffer = Buffer.concat([
  ...DICTIONARY_WORDS.map((w) => {
    const b = Buffer.alloc(4 + w.length);
    b.writeUInt32BE(w.length, 0);
    b.write(w, 4, 'latin1');
    return b;
  }),
  Buffer.from(DICTIONARY_TAIL, 'latin1'),
]);

/** Header name → value; several values of one name are joined with NUL, as on the wire. */
export type SpdyHeaders = Record<string, string>;

/** The uncompressed name/value block: a 32-bit count, then each name and value with its 32-bit length. */
export function packHeaderBlock(headers: SpdyHeaders): Buffer {
  const parts: Buffer[] = [];
  const count = Buffer.alloc(4);
  count.writeUInt32BE(Object.keys(headers).length, 0);
  parts.push(count);
  for (const [name, value] of Object.entries(headers)) {
    // spdystream refuses a name that is not lowercase (UnlowercasedHeaderName).
    for (const s of [name.toLowerCase(), value]) {
      const b = Buffer.from(s, 'utf8');
      const len = Buffer.alloc(4);
      len.writeUInt32BE(b.length, 0);
      parts.push(len, b);
    }
  }
  return Buffer.concat(parts);
}

/** The inverse of packHeaderBlock; throws on a truncated or overlong block. */
export function unpackHeaderBlock(block: Buffer): SpdyHeaders {
  const out: SpdyHeaders = {};
  let p = 0;
  const u32 = () => {
    if (p + 4 > block.length) throw new Error('SPDY header block truncated');
    const v = block.readUInt32BE(p);
    p += 4;
    return v;
  };
  const str = () => {
    const n = u32();
    if (p + n > block.length) throw new Error('SPDY header block truncated');
    const s = block.toString('utf8', p, p + n);
    p += n;
    return s;
  };
  const count = u32();
  for (let i = 0; i < count; i++) {
    const name = str();
    out[name] = str();
  }
  if (p !== block.length) throw new Error(`SPDY header block: ${block.length - p} bytes after ${count} headers`);
  return out;
}

/**
 * One direction's zlib context for header blocks: every block is a continuation of the
 * same deflate (or inflate) stream, flushed with Z_SYNC_FLUSH, as SPDY/3 requires. Calls
 * are queued, so blocks come out in the order they were given.
 */
export class HeaderCompressor {
  readonly #z: zlib.Deflate | zlib.Inflate;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(readonly mode: 'deflate' | 'inflate') {
    this.#z = mode === 'deflate' ? zlib.createDeflate({ dictionary: SPDY_DICTIONARY, level: 9 }) : zlib.createInflate({ dictionary: SPDY_DICTIONARY });
  }

  /** Deflates (or inflates) one header block. */
  process(input: Buffer): Promise<Buffer> {
    const run = () =>
      new Promise<Buffer>((resolve, reject) => {
        const chunks: Buffer[] = [];
        const onData = (d: Buffer) => chunks.push(d);
        const onError = (err: Error) => {
          this.#z.off('data', onData);
          reject(err);
        };
        this.#z.on('data', onData);
        this.#z.once('error', onError);
        this.#z.write(input);
        this.#z.flush(zlib.constants.Z_SYNC_FLUSH, () => {
          this.#z.off('data', onData);
          this.#z.off('error', onError);
          resolve(Buffer.concat(chunks));
        });
      });
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => undefined);
    return p;
  }

  async encode(headers: SpdyHeaders): Promise<Buffer> {
    return this.process(packHeaderBlock(headers));
  }

  async decode(block: Buffer): Promise<SpdyHeaders> {
    return unpackHeaderBlock(await this.process(block));
  }

  close(): void {
    this.#z.close();
  }
}

/** A control frame: control bit, version 3, type; flags and 24-bit length; the payload. */
export function controlFrame(type: number, flags: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt16BE(0x8000 | SPDY_VERSION, 0);
  h.writeUInt16BE(type, 2);
  h.writeUInt32BE(((flags & 0xff) << 24) | payload.length, 4);
  return Buffer.concat([h, payload]);
}

export function dataFrame(streamId: number, flags: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt32BE(streamId & 0x7fffffff, 0);
  h.writeUInt32BE(((flags & 0xff) << 24) | payload.length, 4);
  return payload.length ? Buffer.concat([h, payload]) : h;
}

export function synStreamPayload(streamId: number, compressedHeaders: Buffer, associatedTo = 0, priority = 0): Buffer {
  const b = Buffer.alloc(10);
  b.writeUInt32BE(streamId & 0x7fffffff, 0);
  b.writeUInt32BE(associatedTo & 0x7fffffff, 4);
  b.writeUInt8((priority & 0x7) << 5, 8);
  return Buffer.concat([b, compressedHeaders]);
}

const u32Payload = (...values: number[]) => {
  const b = Buffer.alloc(4 * values.length);
  values.forEach((v, i) => b.writeUInt32BE(v >>> 0, 4 * i));
  return b;
};

/** A parsed frame as the parser reports it. DATA payloads come separately, in pieces. */
export type ParsedFrame =
  | { kind: 'control'; type: number; flags: number; payload: Buffer }
  | { kind: 'data-start'; streamId: number; flags: number; length: number }
  | { kind: 'data'; streamId: number; chunk: Buffer }
  | { kind: 'data-end'; streamId: number; flags: number };

/**
 * Splits a byte stream into frames. Control frames are delivered whole (they are small);
 * a DATA frame's payload is delivered as the slices of the input that hold it.
 */
export class FrameParser {
  #head: Buffer = Buffer.alloc(0);
  #control: { type: number; flags: number; length: number; parts: Buffer[]; got: number } | undefined;
  #data: { streamId: number; flags: number; left: number } | undefined;

  constructor(private readonly emit: (f: ParsedFrame) => void) {}

  push(chunk: Buffer): void {
    let p = 0;
    while (p < chunk.length) {
      if (this.#data) {
        const n = Math.min(this.#data.left, chunk.length - p);
        if (n > 0) this.emit({ kind: 'data', streamId: this.#data.streamId, chunk: chunk.subarray(p, p + n) });
        p += n;
        this.#data.left -= n;
        if (this.#data.left === 0) {
          const d = this.#data;
          this.#data = undefined;
          this.emit({ kind: 'data-end', streamId: d.streamId, flags: d.flags });
        }
        continue;
      }
      if (this.#control) {
        const c = this.#control;
        const n = Math.min(c.length - c.got, chunk.length - p);
        c.parts.push(chunk.subarray(p, p + n));
        c.got += n;
        p += n;
        if (c.got === c.length) {
          this.#control = undefined;
          this.emit({ kind: 'control', type: c.type, flags: c.flags, payload: Buffer.concat(c.parts) });
        }
        continue;
      }
      // A frame head: 8 bytes, possibly split across reads.
      const need = 8 - this.#head.length;
      const take = chunk.subarray(p, p + need);
      p += take.length;
      this.#head = this.#head.length ? Buffer.concat([this.#head, take]) : take;
      if (this.#head.length < 8) continue;
      const h = this.#head;
      this.#head = Buffer.alloc(0);
      const flags = h.readUInt8(4);
      const length = h.readUInt32BE(4) & 0xffffff;
      if (h.readUInt8(0) & 0x80) {
        const version = h.readUInt16BE(0) & 0x7fff;
        if (version !== SPDY_VERSION) throw new Error(`SPDY: control frame of version ${version}`);
        const type = h.readUInt16BE(2);
        if (length === 0) this.emit({ kind: 'control', type, flags, payload: Buffer.alloc(0) });
        else this.#control = { type, flags, length, parts: [], got: 0 };
      } else {
        const streamId = h.readUInt32BE(0) & 0x7fffffff;
        this.emit({ kind: 'data-start', streamId, flags, length });
        if (length === 0) this.emit({ kind: 'data-end', streamId, flags });
        else this.#data = { streamId, flags, left: length };
      }
    }
  }
}

export interface SpdyStream {
  readonly id: number;
  /** The SYN_REPLY's headers (rejects on RST_STREAM before it). */
  readonly reply: Promise<SpdyHeaders>;
  /** Resolves when the server ended its side (FIN) or reset the stream, or the connection closed. */
  readonly ended: Promise<void>;
  /** Called with each piece of DATA as it arrives. */
  onData: (chunk: Buffer) => void;
  write(data: Buffer | string, fin?: boolean): void;
  /** Sends an empty DATA frame with FIN: the client's side is done. */
  end(): void;
}

interface StreamState extends SpdyStream {
  settle(err?: Error): void;
  replied(h: SpdyHeaders): void;
  replyFailed(err: Error): void;
}

/**
 * A client SPDY/3.1 session over an upgraded socket: streams get odd ids from 1, control
 * frames are answered (PING echoed, GOAWAY and RST_STREAM end what they name).
 */
export class SpdySession {
  readonly #socket: Duplex;
  readonly #out = new HeaderCompressor('deflate');
  readonly #in = new HeaderCompressor('inflate');
  readonly #streams = new Map<number, StreamState>();
  readonly #parser: FrameParser;
  #nextId = 1;
  #closed = false;
  /** Frames sent in order: a SYN_STREAM waits for its compressed headers, later frames wait for it. */
  #sendQueue: Promise<void> = Promise.resolve();
  /** Resolves when the socket closed; carries the error, if any. */
  readonly closed: Promise<Error | undefined>;
  /** Bytes received on the socket (every frame), the socket's reads and the DATA frames. */
  bytesIn = 0;
  reads = 0;
  dataFrames = 0;

  constructor(socket: Duplex, head: Buffer = Buffer.alloc(0)) {
    this.#socket = socket;
    this.#parser = new FrameParser((f) => this.#frame(f));
    let failure: Error | undefined;
    this.closed = new Promise((resolve) => {
      socket.on('error', (err) => (failure = err));
      socket.on('close', () => {
        this.#closed = true;
        for (const s of this.#streams.values()) s.settle(failure ?? new Error('connection closed'));
        this.#streams.clear();
        this.#out.close();
        this.#in.close();
        resolve(failure);
      });
    });
    const onData = (d: Buffer) => {
      this.bytesIn += d.length;
      this.reads++;
      try {
        this.#parser.push(d);
      } catch (err) {
        socket.destroy(err as Error);
      }
    };
    if (head.length) onData(head);
    socket.on('data', onData);
  }

  #send(frame: Buffer | Promise<Buffer>): void {
    this.#sendQueue = this.#sendQueue.then(async () => {
      const b = await frame;
      if (!this.#closed) this.#socket.write(b);
    });
    this.#sendQueue.catch((err: Error) => this.#socket.destroy(err));
  }

  /** Opens a stream with these headers (names are sent lowercase). */
  openStream(headers: SpdyHeaders, fin = false): SpdyStream {
    const id = this.#nextId;
    this.#nextId += 2;
    let replied!: (h: SpdyHeaders) => void;
    let replyFailed!: (err: Error) => void;
    const reply = new Promise<SpdyHeaders>((res, rej) => ((replied = res), (replyFailed = rej)));
    reply.catch(() => undefined);
    let done!: () => void;
    const ended = new Promise<void>((res) => (done = res));
    const self = this;
    const stream: StreamState = {
      id,
      reply,
      ended,
      onData: () => undefined,
      write(data, endIt = false) {
        self.#send(dataFrame(id, endIt ? FLAG_FIN : 0, typeof data === 'string' ? Buffer.from(data) : data));
      },
      end() {
        self.#send(dataFrame(id, FLAG_FIN, Buffer.alloc(0)));
      },
      settle(err) {
        if (err) replyFailed(err);
        done();
      },
      replied: (h) => replied(h),
      replyFailed: (err) => replyFailed(err),
    };
    this.#streams.set(id, stream);
    this.#send(this.#out.encode(headers).then((block) => controlFrame(FRAME.SYN_STREAM, fin ? FLAG_FIN : 0, synStreamPayload(id, block))));
    return stream;
  }

  /** Sends a PING; resolves with the round trip in ms. */
  ping(id = 1): Promise<number> {
    const t0 = performance.now();
    return new Promise((resolve) => {
      this.#pings.set(id, () => resolve(performance.now() - t0));
      this.#send(controlFrame(FRAME.PING, 0, u32Payload(id)));
    });
  }
  readonly #pings = new Map<number, () => void>();

  /** GOAWAY (status OK), then the socket is ended. */
  close(): void {
    if (this.#closed) return;
    this.#send(controlFrame(FRAME.GOAWAY, 0, u32Payload(0, 0)));
    this.#sendQueue.then(() => this.#socket.end(), () => undefined);
  }

  destroy(): void {
    this.#socket.destroy();
  }

  #frame(f: ParsedFrame): void {
    if (f.kind === 'data') {
      this.#streams.get(f.streamId)?.onData(f.chunk);
      return;
    }
    if (f.kind === 'data-end') {
      if (f.flags & FLAG_FIN) this.#finish(f.streamId);
      return;
    }
    if (f.kind === 'data-start') {
      this.dataFrames++;
      return;
    }
    const p = f.payload;
    switch (f.type) {
      case FRAME.SYN_REPLY:
      case FRAME.HEADERS: {
        const id = p.readUInt32BE(0) & 0x7fffffff;
        // Every block must pass through the inflater, in order, to keep its context.
        const decoded = this.#in.decode(p.subarray(4));
        const s = this.#streams.get(id);
        decoded.then(
          (h) => {
            if (f.type === FRAME.SYN_REPLY) s?.replied(h);
            if (f.flags & FLAG_FIN) this.#finish(id);
          },
          (err: Error) => this.#socket.destroy(err),
        );
        return;
      }
      case FRAME.RST_STREAM: {
        const id = p.readUInt32BE(0) & 0x7fffffff;
        const s = this.#streams.get(id);
        this.#streams.delete(id);
        s?.settle(new Error(`stream ${id} reset by the server (status ${p.readUInt32BE(4)})`));
        return;
      }
      case FRAME.PING: {
        const id = p.readUInt32BE(0);
        // Ours are odd; the server's (even) are echoed.
        if (id % 2 === 1) this.#pings.get(id)?.();
        else this.#send(controlFrame(FRAME.PING, 0, p));
        return;
      }
      case FRAME.GOAWAY:
        this.#socket.end();
        return;
      case FRAME.SYN_STREAM: {
        // No server push: refuse (RST_STREAM REFUSED_STREAM = 3), but keep the inflater in step.
        const id = p.readUInt32BE(0) & 0x7fffffff;
        this.#in.decode(p.subarray(10)).catch((err: Error) => this.#socket.destroy(err));
        this.#send(controlFrame(FRAME.RST_STREAM, 0, u32Payload(id, 3)));
        return;
      }
      default:
        // SETTINGS, WINDOW_UPDATE: nothing to do without flow control.
        return;
    }
  }

  #finish(id: number): void {
    const s = this.#streams.get(id);
    if (!s) return;
    this.#streams.delete(id);
    s.settle();
  }
}

export interface UpgradeOptions {
  method?: string;
  /** `X-Stream-Protocol-Version` values offered, most preferred first. */
  protocols?: string[];
  headers?: Record<string, string>;
  /** https: the server's certificate is not checked (the node's own, self-signed). */
  timeoutMs?: number;
}

/** The upgraded connection and the protocol the server chose. */
export interface Upgraded {
  session: SpdySession;
  protocol: string | undefined;
  headers: http.IncomingHttpHeaders;
}

/**
 * Requests `url` with `Upgrade: SPDY/3.1`; resolves with the session on 101, rejects with
 * the status and body otherwise.
 */
export function spdyUpgrade(url: string, o: UpgradeOptions = {}): Promise<Upgraded> {
  const u = new URL(url);
  const mod = u.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(u, {
      method: o.method ?? 'POST',
      agent: false,
      rejectUnauthorized: false,
      headers: {
        Connection: 'Upgrade',
        Upgrade: 'SPDY/3.1',
        ...(o.protocols?.length ? { 'X-Stream-Protocol-Version': o.protocols } : {}),
        ...o.headers,
      },
      timeout: o.timeoutMs ?? 30_000,
    });
    req.on('upgrade', (res, socket, head) => {
      socket.setTimeout(0);
      socket.setNoDelay(true);
      const v = res.headers['x-stream-protocol-version'];
      resolve({ session: new SpdySession(socket, head), protocol: Array.isArray(v) ? v[0] : v, headers: res.headers });
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (d: string) => (body += d.slice(0, 4096)));
      res.on('end', () => reject(new Error(`upgrade refused: ${res.statusCode} ${body.slice(0, 500)}`)));
    });
    req.on('timeout', () => req.destroy(new Error('upgrade: no answer')));
    req.on('error', reject);
    req.end();
  });
}

/** The streams of one `v4.channel.k8s.io` exec or attach. */
export interface ChannelStreams {
  error: SpdyStream;
  stdin?: SpdyStream;
  stdout?: SpdyStream;
  stderr?: SpdyStream;
  resize?: SpdyStream;
}

/**
 * Opens the streams of the remotecommand protocol in kubectl's order (error, stdin, stdout,
 * stderr, resize), each named by its `streamtype` header.
 */
export function openChannelStreams(session: SpdySession, want: { stdin?: boolean; stdout?: boolean; stderr?: boolean; tty?: boolean }): ChannelStreams {
  const open = (t: string) => session.openStream({ streamtype: t });
  const s: ChannelStreams = { error: open('error') };
  if (want.stdin) s.stdin = open('stdin');
  if (want.stdout) s.stdout = open('stdout');
  if (want.stderr) s.stderr = open('stderr');
  if (want.tty) s.resize = open('resize');
  return s;
}

export interface ExecResult {
  protocol: string | undefined;
  stdoutBytes: number;
  stderrBytes: number;
  /** The first bytes of stdout and stderr (up to 64 KiB each), for checks. */
  stdout: string;
  stderr: string;
  /** The v4 error stream: a metav1.Status, `{"status":"Success",...}` when the command exited 0; undefined when none came. */
  status: { status?: string; message?: string; reason?: string; details?: { causes?: { reason?: string; message?: string }[] } } | undefined;
  /** ms from the request to the error stream's end. */
  ms: number;
  /** DATA frames and socket reads of the session (how the server cut the stream, how it arrived). */
  dataFrames: number;
  reads: number;
}

/**
 * Runs an exec (or attach) session at `url` (the runtime's streaming URL, or nodelet's
 * `/exec/...`) with the v4 channel protocol: stdout and stderr counted, `stdin` sent and
 * closed when given. Resolves when the error stream ends.
 */
export async function spdyExec(url: string, o: { stdin?: Buffer | string; stdout?: boolean; stderr?: boolean; timeoutMs?: number } = {}): Promise<ExecResult> {
  const t0 = performance.now();
  const { session, protocol } = await spdyUpgrade(url, { protocols: ['v4.channel.k8s.io'], timeoutMs: o.timeoutMs });
  const timer = setTimeout(() => session.destroy(), o.timeoutMs ?? 120_000);
  try {
    const s = openChannelStreams(session, { stdin: o.stdin !== undefined, stdout: o.stdout ?? true, stderr: o.stderr ?? false });
    const res: ExecResult = { protocol, stdoutBytes: 0, stderrBytes: 0, stdout: '', stderr: '', status: undefined, ms: 0, dataFrames: 0, reads: 0 };
    const KEEP = 64 * 1024;
    if (s.stdout) {
      s.stdout.onData = (c) => {
        if (res.stdout.length < KEEP) res.stdout += c.subarray(0, KEEP - res.stdout.length).toString('latin1');
        res.stdoutBytes += c.length;
      };
    }
    if (s.stderr) {
      s.stderr.onData = (c) => {
        if (res.stderr.length < KEEP) res.stderr += c.subarray(0, KEEP - res.stderr.length).toString('latin1');
        res.stderrBytes += c.length;
      };
    }
    const errorParts: Buffer[] = [];
    s.error.onData = (c) => errorParts.push(Buffer.from(c));
    if (s.stdin && o.stdin !== undefined) {
      const stdin = s.stdin;
      // The server reads stdin once every stream is replied.
      void stdin.reply.then(() => stdin.write(o.stdin!, true), () => undefined);
    }
    await Promise.race([s.error.ended, session.closed]);
    // Output streams end before the status is written; whatever is in flight has arrived.
    await Promise.race([Promise.all([s.stdout?.ended, s.stderr?.ended]), session.closed]);
    res.ms = performance.now() - t0;
    res.dataFrames = session.dataFrames;
    res.reads = session.reads;
    const text = Buffer.concat(errorParts).toString('utf8');
    // v4 always writes a Status, Success included: none means the session broke off.
    res.status = text ? (JSON.parse(text) as ExecResult['status']) : undefined;
    return res;
  } finally {
    clearTimeout(timer);
    session.close();
    setTimeout(() => session.destroy(), 1000).unref();
  }
}
