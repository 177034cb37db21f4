/**
 * `/exec`, `/attach`, `/portForward` and `/run` on the HTTPS server: what `kubectl exec`,
 * `attach` and `port-forward` reach through the API server's `pods/exec`, `pods/attach`
 * and `pods/portforward` subresources.
 *
 * For the three streaming routes nodelet asks the runtime (CRI `Exec`, `Attach`,
 * `PortForward`) for the URL of a session on its streaming server (containerd:
 * `http://127.0.0.1:<port>/exec/<token>`), then forwards the client's upgrade request
 * there and pipes the two connections both ways, byte for byte, as the kubelet's proxy
 * does: the protocol negotiation (SPDY/3.1 with `v4.channel.k8s.io` and older, the
 * WebSocket channel protocols, `portforward.k8s.io`) is between the client and the
 * runtime; nodelet never reads or rewrites a frame. Whatever the runtime answers (101, or
 * a refusal such as 403 for a protocol it does not speak) reaches the client unchanged,
 * so a client that falls back from WebSocket to SPDY (kubectl 1.30+) does so as with the
 * kubelet. Either side closing closes the other; a session with no traffic for
 * `streamingConnectionIdleTimeout` is closed.
 *
 * `/run/<ns>/<pod>[/<uid>]/<container>?command=...` (POST) runs the command with CRI
 * `ExecSync` and answers its stdout followed by its stderr, or 500 when it exits non-zero,
 * as the kubelet's.
 *
 * Query parameters are the kubelet's (what the API server sends it): `command` (repeated),
 * `input`, `output`, `error`, `tty` ("1" or "true" is true), with `stdin`, `stdout`,
 * `stderr` accepted as the same three; `port` (repeated, 1-65535) for port forwarding.
 * Anything else malformed is a 400 naming the parameter; an unknown pod or container a 404.
 */
import net from 'node:net';
import tls from 'node:tls';
import type http from 'node:http';
import type { Duplex } from 'node:stream';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError, errorMessage } from '../errors.js';
import { realClock, type Clock } from '../clock.js';
import { silentLogger, type Logger } from '../log.js';
import type { PodLookup } from '../pods/sources/lookup.js';
import type { RuntimeService } from '../runtime/types.js';

export type StreamKind = 'exec' | 'attach' | 'portForward' | 'run';

/** The routes this module serves, by the first path segment. */
export const STREAM_KINDS: readonly StreamKind[] = ['exec', 'attach', 'portForward', 'run'];

export function isStreamKind(s: string | undefined): s is StreamKind {
  return s !== undefined && (STREAM_KINDS as readonly string[]).includes(s);
}

export interface ContainerTarget {
  namespace: string;
  pod: string;
  /** Given by the `<uid>` variant of the path: the pod must have it. */
  uid?: string;
  /** Absent for portForward. */
  container?: string;
}

export interface StreamOptions {
  cmd: string[];
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

export interface StreamRequest {
  kind: StreamKind;
  target: ContainerTarget;
  /** exec, attach, run. */
  options?: StreamOptions;
  /** portForward: the `port` parameters (may be empty: SPDY clients name ports per stream). */
  ports?: number[];
}

/** Client bytes held while the runtime has not answered an upgrade; beyond, the client is not read until it has. */
const MAX_EARLY_BYTES = 64 * 1024;
/** Longest response head accepted from the runtime's streaming server. */
const MAX_ANSWER_HEAD_BYTES = 64 * 1024;

/** Longest command line accepted, in elements and bytes (bounded like every other input). */
const MAX_COMMAND_ARGS = 1024;
const MAX_COMMAND_BYTES = 128 * 1024;

function flag(q: URLSearchParams, names: readonly string[]): boolean {
  let value = false;
  for (const name of names) {
    for (const v of q.getAll(name)) {
      if (v === '1' || v === 'true') value = true;
      else if (!(v === '' || v === '0' || v === 'false')) {
        throw new NodeletError('INVALID_ARGUMENT', `query parameter ${name}: ${JSON.stringify(v.slice(0, 64))} is not a boolean (1, true, 0, false)`, { param: name });
      }
    }
  }
  return value;
}

function decodeSegments(rest: string[]): string[] {
  try {
    return rest.map((s) => decodeURIComponent(s));
  } catch {
    throw new NodeletError('INVALID_ARGUMENT', 'the path is not valid percent-encoding', { param: 'path' });
  }
}

/**
 * The request a streaming route asks for, from the raw path segments after the first
 * (`exec`, ...) and the query. Pure; throws INVALID_ARGUMENT naming the path or parameter.
 */
export function parseStreamRequest(kind: StreamKind, rest: string[], q: URLSearchParams): StreamRequest {
  const seg = decodeSegments(rest);
  const shapes = kind === 'portForward' ? '/portForward/<namespace>/<pod>[/<uid>]' : `/${kind}/<namespace>/<pod>[/<uid>]/<container>`;
  const counts = kind === 'portForward' ? [2, 3] : [3, 4];
  if (!counts.includes(seg.length) || seg.some((s) => s === '' || s.length > 253 || s.includes('\0'))) {
    throw new NodeletError('INVALID_ARGUMENT', `expected ${shapes}`, { param: 'path' });
  }
  const [namespace, pod] = seg as [string, string];
  if (kind === 'portForward') {
    const ports = q.getAll('port').map((v) => {
      if (!/^\d{1,5}$/.test(v) || Number(v) < 1 || Number(v) > 65535) {
        throw new NodeletError('INVALID_ARGUMENT', `query parameter port: ${JSON.stringify(v.slice(0, 64))} is not a port number (1-65535)`, { param: 'port' });
      }
      return Number(v);
    });
    if (ports.length > 128) throw new NodeletError('INVALID_ARGUMENT', `query parameter port: at most 128 ports, got ${ports.length}`, { param: 'port' });
    return { kind, target: { namespace, pod, ...(seg.length === 3 ? { uid: seg[2] } : {}) }, ports };
  }
  const container = seg[seg.length - 1]!;
  const uid = seg.length === 4 ? seg[2] : undefined;
  const cmd = q.getAll('command');
  if (cmd.length > MAX_COMMAND_ARGS || cmd.reduce((n, c) => n + Buffer.byteLength(c), 0) > MAX_COMMAND_BYTES) {
    throw new NodeletError('INVALID_ARGUMENT', `query parameter command: longer than ${MAX_COMMAND_ARGS} arguments or ${MAX_COMMAND_BYTES} bytes`, { param: 'command' });
  }
  if ((kind === 'exec' || kind === 'run') && cmd.length === 0) throw new NodeletError('INVALID_ARGUMENT', 'query parameter command: a command is required', { param: 'command' });
  if (kind === 'attach' && cmd.length > 0) throw new NodeletError('INVALID_ARGUMENT', 'query parameter command: attach takes no command', { param: 'command' });
  const tty = flag(q, ['tty']);
  const stdin = flag(q, ['input', 'stdin']);
  const stdout = flag(q, ['output', 'stdout']);
  // As the kubelet: a terminal merges stderr into stdout.
  const stderr = flag(q, ['error', 'stderr']) && !tty;
  if (kind !== 'run' && !stdin && !stdout && !stderr) {
    throw new NodeletError('INVALID_ARGUMENT', 'you must specify at least 1 of stdin, stdout, stderr (query parameters input, output, error)', { param: 'output' });
  }
  return { kind, target: { namespace, pod, ...(uid !== undefined ? { uid } : {}), container }, options: { cmd, stdin, stdout, stderr, tty } };
}

function findPod(pods: PodLookup, t: ContainerTarget): Pod {
  const pod = pods.getPod(t.namespace, t.pod);
  if (!pod || (t.uid !== undefined && pod.metadata?.uid !== t.uid)) {
    throw new NodeletError('NOT_FOUND', `pod "${t.pod}" in namespace "${t.namespace}"${t.uid !== undefined ? ` with UID "${t.uid}"` : ''} not found`, { param: 'pod' });
  }
  return pod;
}

/** The runtime ID of a running container of the pod (`containerd://<id>` in its status). */
export function runningContainerId(pod: Pod, container: string): string {
  const name = pod.metadata?.name ?? '';
  const spec = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? []), ...(pod.spec?.ephemeralContainers ?? [])];
  if (!spec.some((c) => c.name === container)) throw new NodeletError('NOT_FOUND', `container "${container}" not found in pod "${name}"`, { param: 'container' });
  const st = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? []), ...(pod.status?.ephemeralContainerStatuses ?? [])].find((s) => s.name === container);
  const id = st?.containerID?.replace(/^[a-z0-9-]+:\/\//, '');
  if (!st?.state?.running || !id) throw new NodeletError('INVALID_ARGUMENT', `container "${container}" in pod "${name}" is not running`, { param: 'container' });
  return id;
}

export interface StreamingServiceOptions {
  runtime: Pick<RuntimeService, 'exec' | 'attach' | 'portForward' | 'execSync' | 'listPodSandbox'>;
  pods: PodLookup;
  /** streamingConnectionIdleTimeout, ms: a session with no traffic this long is closed. */
  idleTimeoutMs: number;
  /** `/run` commands counted as starting at once (default RUN_STARTING_MAX), and for how long after their call began (default RUN_START_WINDOW_MS). */
  runStart?: { max: number; windowMs: number };
  /** Times the start window (tests: a VirtualClock). */
  clock?: Clock;
  logger?: Logger;
}

/**
 * `/run` and containerd 1.6 (measured here, 1.6.20): an ExecSync cancelled once its command
 * runs has the command killed (containerd's ExecSync kills it when its context ends), but
 * one cancelled while the runtime is still starting the command leaves it running for
 * good: the cancel lands before the start, the kill finds no process, and the start then
 * completes (30 clients leaving after 1 s left 18 commands; 1 client leaving after 20, 50
 * or 100 ms left its command each time; leaving after 1 s, none). So nodelet lets at most
 * RUN_STARTING_MAX `/run` calls be starting at once (a call counts as starting for
 * RUN_START_WINDOW_MS, or until it ends) and queues the others; a client that leaves while
 * queued never reaches the runtime, and one that leaves while its call is starting has
 * the call cancelled at the end of the window, when the command runs. Throughput: quick
 * commands are not held back (a slot frees when its call ends); long ones start at
 * RUN_STARTING_MAX per RUN_START_WINDOW_MS.
 */
export const RUN_STARTING_MAX = 4;
export const RUN_START_WINDOW_MS = 2000;

/** A counting gate: at most `max` holders; waiters in arrival order; a waiter whose signal aborts leaves the queue. */
class StartGate {
  #held = 0;
  readonly #waiters: { go: () => void }[] = [];
  constructor(readonly max: number) {}

  /** Resolves a release function (idempotent) once a place is free; rejects CANCELLED when `signal` aborts first. */
  enter(signal: AbortSignal | undefined): Promise<() => void> {
    const release = () => {
      let done = false;
      return () => {
        if (done) return;
        done = true;
        this.#held--;
        this.#waiters.shift()?.go();
      };
    };
    if (this.#held < this.max && this.#waiters.length === 0) {
      this.#held++;
      return Promise.resolve(release());
    }
    return new Promise((resolve, reject) => {
      const gone = () => new NodeletError('CANCELLED', 'the client closed the connection before the command was started', {});
      if (signal?.aborted) return reject(gone());
      const waiter = {
        go: () => {
          signal?.removeEventListener('abort', onAbort);
          this.#held++;
          resolve(release());
        },
      };
      const onAbort = () => {
        const i = this.#waiters.indexOf(waiter);
        if (i >= 0) this.#waiters.splice(i, 1);
        reject(gone());
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  /** Calls starting now, and calls queued (tests). */
  get counts(): { starting: number; queued: number } {
    return { starting: this.#held, queued: this.#waiters.length };
  }
}

/** An open proxied session, for stop(). */
interface Session {
  client: Duplex;
  upstream: Duplex;
}

/**
 * Resolves streaming requests to runtime URLs and proxies the sessions. Built once by the
 * composition root; `closeAll()` (server stop) ends every open session.
 */
/**
 * An upgrade between the client and the runtime's streaming server, until the runtime's
 * response head is read: the client's bytes (`head`, then what it sends; past
 * MAX_EARLY_BYTES it is no longer read) are held, never sent ahead of a 101. Then, on a 101,
 * the held bytes go upstream and the two sides are piped; on anything else the refusal
 * reaches the client, the held bytes are dropped, and the connection ends once the refusal's
 * body (its Content-Length) has been relayed.
 */
class UpgradeGate {
  /** 'head' until the runtime's response head is read; then 'upgraded' (101) or 'refused'. */
  phase: 'head' | 'upgraded' | 'refused' = 'head';
  readonly #early: Buffer[];
  #earlyBytes: number;
  #answer: Buffer = Buffer.alloc(0);

  constructor(
    readonly client: Duplex,
    readonly upstream: net.Socket,
    head: Buffer,
    readonly close: () => void,
  ) {
    this.#early = head.length > 0 ? [head] : [];
    this.#earlyBytes = head.length;
    client.on('data', this.#onEarly);
    if (this.#earlyBytes > MAX_EARLY_BYTES) client.pause();
  }

  readonly #onEarly = (d: Buffer): void => {
    this.#early.push(d);
    this.#earlyBytes += d.length;
    if (this.#earlyBytes > MAX_EARLY_BYTES) this.client.pause();
  };

  /** The upstream connection is up: its answer is read from now on. */
  listen(): void {
    this.upstream.on('data', this.#onAnswer);
  }

  readonly #onAnswer = (d: Buffer): void => {
    const { client, upstream } = this;
    this.#answer = this.#answer.length === 0 ? d : Buffer.concat([this.#answer, d]);
    const answer = this.#answer;
    const end = answer.indexOf('\r\n\r\n');
    if (end < 0) {
      if (answer.length > MAX_ANSWER_HEAD_BYTES) {
        this.phase = 'refused';
        upstream.off('data', this.#onAnswer);
        writeFailure(client, 502, `the runtime's streaming server answered a response head over ${MAX_ANSWER_HEAD_BYTES} bytes`);
        this.close();
      }
      return;
    }
    upstream.off('data', this.#onAnswer);
    client.off('data', this.#onEarly);
    const headText = answer.subarray(0, end).toString('latin1');
    if (/^HTTP\/1\.[01] 101[ \r]/.test(headText + '\r')) {
      this.phase = 'upgraded';
      client.write(answer);
      for (const b of this.#early.splice(0)) upstream.write(b);
      upstream.pipe(client);
      client.pipe(upstream);
      return;
    }
    this.#refused(answer, headText, end);
  };

  /** Refused: the answer reaches the client; what the client sent is dropped, and so is whatever it sends until the connection ends (read, so that its closing is seen). */
  #refused(answer: Buffer, headText: string, end: number): void {
    const { client, upstream } = this;
    this.phase = 'refused';
    this.#early.length = 0;
    client.on('data', () => undefined);
    client.resume();
    client.write(answer);
    const length = /\r\ncontent-length:[ \t]*(\d{1,15})[ \t]*(?=\r\n|$)/i.exec(headText)?.[1];
    let remaining = length === undefined ? Infinity : Number(length) - (answer.length - end - 4);
    if (remaining <= 0) return this.close();
    upstream.on('data', (more: Buffer) => {
      client.write(more);
      remaining -= more.length;
      if (remaining <= 0) this.close();
    });
  }
}

export class StreamingService {
  readonly idleTimeoutMs: number;
  readonly #log: Logger;
  readonly #sessions = new Set<Session>();
  readonly #runGate: StartGate;
  readonly #runWindowMs: number;
  readonly #clock: Clock;

  constructor(private readonly o: StreamingServiceOptions) {
    if (!(o.idleTimeoutMs >= 0)) throw new NodeletError('INVALID_ARGUMENT', `idleTimeoutMs must be >= 0, got ${o.idleTimeoutMs}`, { param: 'streamingConnectionIdleTimeout' });
    this.idleTimeoutMs = o.idleTimeoutMs;
    this.#log = (o.logger ?? silentLogger()).child({ component: 'streaming' });
    this.#runGate = new StartGate(Math.max(1, o.runStart?.max ?? RUN_STARTING_MAX));
    this.#runWindowMs = Math.max(0, o.runStart?.windowMs ?? RUN_START_WINDOW_MS);
    this.#clock = o.clock ?? realClock;
  }

  /** Open sessions (tests, metrics). */
  get sessions(): number {
    return this.#sessions.size;
  }

  /** `/run` calls counted as starting, and those queued behind them (tests). */
  get runs(): { starting: number; queued: number } {
    return this.#runGate.counts;
  }

  /**
   * The runtime's streaming URL for an exec, attach or portForward request. `signal`: the
   * client's connection; its closing cancels the runtime calls.
   */
  async streamUrl(r: StreamRequest, signal?: AbortSignal): Promise<string> {
    const rt = this.o.runtime;
    const call = signal ? { signal } : undefined;
    const pod = findPod(this.o.pods, r.target);
    if (r.kind === 'portForward') {
      if (!rt.portForward) throw new NodeletError('UNIMPLEMENTED', 'the container runtime does not implement PortForward', {});
      const uid = pod.metadata?.uid ?? '';
      const ready = await rt.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.uid': uid }, state: 'SANDBOX_READY' }, call);
      const sandbox = ready.sort((a, b) => b.createdAt - a.createdAt)[0];
      if (!sandbox) throw new NodeletError('INVALID_ARGUMENT', `pod "${r.target.pod}" in namespace "${r.target.namespace}" has no ready sandbox`, { param: 'pod' });
      return rt.portForward(sandbox.id, r.ports ?? [], call);
    }
    const id = runningContainerId(pod, r.target.container!);
    const o = r.options!;
    if (r.kind === 'exec') {
      if (!rt.exec) throw new NodeletError('UNIMPLEMENTED', 'the container runtime does not implement Exec', {});
      return rt.exec({ containerId: id, cmd: o.cmd, tty: o.tty, stdin: o.stdin, stdout: o.stdout, stderr: o.stderr }, call);
    }
    if (!rt.attach) throw new NodeletError('UNIMPLEMENTED', 'the container runtime does not implement Attach', {});
    return rt.attach({ containerId: id, tty: o.tty, stdin: o.stdin, stdout: o.stdout, stderr: o.stderr }, call);
  }

  /**
   * `/run`: ExecSync with timeout 0, so without a deadline, as the kubelet's RunInContainer;
   * stdout then stderr. `signal` (the client's connection) cancels the call, and containerd
   * then kills the command: a command does not outlive its client (see RUN_START_WINDOW_MS
   * for when the cancel is sent). A command that exits non-zero, and every runtime failure
   * (output over the 16 MiB message limit, the runtime away, ...), is INTERNAL, so 500, as
   * the kubelet's getRun answers 500 to whatever RunInContainer returns: its CRI client's
   * ExecSync makes a non-zero exit the error `command '<cmd>' exited with <N>: <stderr>`
   * (the output is then not answered), the message here too.
   */
  async run(r: StreamRequest, signal?: AbortSignal): Promise<Buffer> {
    const pod = findPod(this.o.pods, r.target);
    const id = runningContainerId(pod, r.target.container!);
    const release = await this.#runGate.enter(signal);
    // The start window: it ends after windowMs, or when the call ends (`ended` aborts the wait).
    const ended = new AbortController();
    const started = this.#runWindowMs > 0 ? this.#clock.sleep(this.#runWindowMs, ended.signal).then(() => true, () => false) : Promise.resolve(true);
    void started.then(release);
    // The client leaving cancels the call, once the command is past its start.
    const cancel = new AbortController();
    const onLeave = () => void started.then(() => cancel.abort());
    if (signal?.aborted) onLeave();
    else signal?.addEventListener('abort', onLeave, { once: true });
    let res;
    try {
      res = await this.o.runtime.execSync(id, r.options!.cmd, 0, signal ? { signal: cancel.signal } : undefined);
    } catch (err) {
      if (err instanceof NodeletError && err.code === 'CANCELLED') throw err;
      throw new NodeletError('INTERNAL', `running ${JSON.stringify(r.options!.cmd.join(' ').slice(0, 200))} in container "${r.target.container}": ${errorMessage(err)}`, { method: 'ExecSync' }, { cause: err });
    } finally {
      signal?.removeEventListener('abort', onLeave);
      ended.abort();
      release();
    }
    if (res.exitCode !== 0) {
      throw new NodeletError('INTERNAL', `command '${r.options!.cmd.join(' ')}' exited with ${res.exitCode}: ${res.stderr.toString('utf8')}`, { method: 'ExecSync', exitCode: res.exitCode });
    }
    return Buffer.concat([res.stdout, res.stderr]);
  }

  /**
   * Forwards the client's upgrade request to `url` and pipes the two connections. `head`:
   * bytes the client sent after its request head. Resolves once the upstream connection is
   * made (or failed: then the client got a 502 and is closed); never rejects.
   *
   * Nothing the client sends after its request reaches the runtime unless the runtime
   * accepts the upgrade: those bytes (`head`, then whatever arrives before the runtime's
   * answer; past 64 KiB the client is no longer read) are held until the runtime's response
   * head, sent on after a 101, dropped after anything else. A refusal (say 403 for a
   * protocol the runtime does not speak) reaches the client unchanged; the connection then
   * ends once the refusal's body (its Content-Length) has been relayed, or when either side
   * closes.
   */
  proxy(req: http.IncomingMessage, client: Duplex, head: Buffer, url: string): Promise<void> {
    const log = this.#log;
    let u: URL;
    try {
      u = new URL(url);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`scheme ${u.protocol}`);
    } catch (err) {
      writeFailure(client, 500, `the runtime gave an unusable streaming URL: ${errorMessage(err)}`);
      return Promise.resolve();
    }
    const port = Number(u.port || (u.protocol === 'https:' ? 443 : 80));
    const host = u.hostname.replace(/^\[|\]$/g, '');
    return new Promise<void>((resolve) => {
      // The runtime is trusted (it is on the node, over the socket nodelet chose); its
      // streaming server's TLS certificate is its own, self-signed, as with the kubelet.
      const upstream: net.Socket =
        u.protocol === 'https:' ? tls.connect({ host, port, rejectUnauthorized: false, servername: net.isIP(host) ? undefined : host }) : net.connect({ host, port });
      const connected = u.protocol === 'https:' ? 'secureConnect' : 'connect';
      const session: Session = { client, upstream };
      let open = false;
      let closed = false;
      const close = () => {
        if (closed) return;
        closed = true;
        this.#sessions.delete(session);
        // Let what is queued reach each side, then tear both down.
        client.end();
        upstream.end();
        setTimeout(() => {
          client.destroy();
          upstream.destroy();
        }, 1000).unref();
      };
      const gate = new UpgradeGate(client, upstream, head, close);

      upstream.once(connected, () => {
        if (closed) {
          upstream.destroy();
          resolve();
          return;
        }
        open = true;
        this.#sessions.add(session);
        gate.listen();
        upstream.write(requestHead(req, u));
        this.#idleTimeouts(client, upstream, close);
        resolve();
      });
      upstream.on('error', (err) => {
        if (!open && !closed) {
          closed = true;
          writeFailure(client, 502, `error dialing the runtime's streaming server: ${err.message}`);
          resolve();
          return;
        }
        log.debug({ err: err.message }, 'streaming: runtime connection error');
        close();
      });
      client.on('error', (err) => {
        log.debug({ err: err.message }, 'streaming: client connection error');
        if (!open) upstream.destroy();
        close();
      });
      upstream.on('close', () => {
        // The runtime went away before answering: the client still gets an answer.
        if (open && gate.phase === 'head' && !closed) writeFailure(client, 502, "the runtime's streaming server closed the connection without answering");
        close();
      });
      client.on('close', () => {
        if (!open) {
          upstream.destroy();
          resolve();
        }
        close();
      });
    });
  }

  /** Reads and writes both count as activity; a session quiet on both sides for idleTimeoutMs ends. */
  #idleTimeouts(client: Duplex, upstream: net.Socket, close: () => void): void {
    if (!(this.idleTimeoutMs > 0)) return;
    for (const s of [client, upstream] as (Duplex & { setTimeout?: (ms: number, cb?: () => void) => void })[]) {
      s.setTimeout?.(this.idleTimeoutMs, () => {
        this.#log.info({ idleTimeoutMs: this.idleTimeoutMs }, 'streaming session idle: closed');
        close();
        client.destroy();
        upstream.destroy();
      });
    }
  }

  /** Ends every open session at once (server stop). */
  closeAll(): void {
    for (const s of this.#sessions) {
      s.client.destroy();
      s.upstream.destroy();
    }
    this.#sessions.clear();
  }
}

/** Headers forwarded to the runtime: the ones its upgrade negotiation reads, each line as the client sent it. */
const FORWARDED = /^(connection|upgrade|sec-websocket-[a-z-]+|x-stream-protocol-version|origin)$/i;

/** The request head sent to the runtime: the client's method, the runtime URL's path, the negotiation headers. */
export function requestHead(req: Pick<http.IncomingMessage, 'method' | 'rawHeaders'>, u: URL): string {
  const lines = [`${req.method ?? 'GET'} ${u.pathname}${u.search} HTTP/1.1`, `Host: ${u.host}`];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    // Node's parser has already refused CR, LF and NUL in names and values.
    if (FORWARDED.test(name)) lines.push(`${name}: ${raw[i + 1]}`);
  }
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/**
 * Answers a failure on a raw socket (before any upgrade, or a CONNECT) with a Status body,
 * and closes it. `headers`: more header lines (names and values nodelet chose, never input).
 */
export function writeFailure(socket: Duplex, code: number, message: string, reason = REASONS[code] ?? 'InternalError', headers: Record<string, string> = {}): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const body = JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });
  const more = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  socket.end(`HTTP/1.1 ${code} ${PHRASES[code] ?? 'Error'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Content-Type-Options: nosniff\r\n${more}Connection: close\r\n\r\n${body}`);
  setTimeout(() => socket.destroy(), 1000).unref();
}

const REASONS: Record<number, string> = { 400: 'BadRequest', 401: 'Unauthorized', 403: 'Forbidden', 404: 'NotFound', 405: 'MethodNotAllowed', 502: 'BadGateway', 503: 'ServiceUnavailable' };
const PHRASES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};
