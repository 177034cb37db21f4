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
 * `ExecSync` and answers its stdout followed by its stderr, as the kubelet's.
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
import { silentLogger, type Logger } from '../log.js';
import type { PodLookup } from '../pods/lookup.js';
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
  logger?: Logger;
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
export class StreamingService {
  readonly idleTimeoutMs: number;
  readonly #log: Logger;
  readonly #sessions = new Set<Session>();

  constructor(private readonly o: StreamingServiceOptions) {
    if (!(o.idleTimeoutMs >= 0)) throw new NodeletError('INVALID_ARGUMENT', `idleTimeoutMs must be >= 0, got ${o.idleTimeoutMs}`, { param: 'streamingConnectionIdleTimeout' });
    this.idleTimeoutMs = o.idleTimeoutMs;
    this.#log = (o.logger ?? silentLogger()).child({ component: 'streaming' });
  }

  /** Open sessions (tests, metrics). */
  get sessions(): number {
    return this.#sessions.size;
  }

  /** The runtime's streaming URL for an exec, attach or portForward request. */
  async streamUrl(r: StreamRequest): Promise<string> {
    const rt = this.o.runtime;
    const pod = findPod(this.o.pods, r.target);
    if (r.kind === 'portForward') {
      if (!rt.portForward) throw new NodeletError('UNIMPLEMENTED', 'the container runtime does not implement PortForward', {});
      const uid = pod.metadata?.uid ?? '';
      const ready = await rt.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.uid': uid }, state: 'SANDBOX_READY' });
      const sandbox = ready.sort((a, b) => b.createdAt - a.createdAt)[0];
      if (!sandbox) throw new NodeletError('INVALID_ARGUMENT', `pod "${r.target.pod}" in namespace "${r.target.namespace}" has no ready sandbox`, { param: 'pod' });
      return rt.portForward(sandbox.id, r.ports ?? []);
    }
    const id = runningContainerId(pod, r.target.container!);
    const o = r.options!;
    if (r.kind === 'exec') {
      if (!rt.exec) throw new NodeletError('UNIMPLEMENTED', 'the container runtime does not implement Exec', {});
      return rt.exec({ containerId: id, cmd: o.cmd, tty: o.tty, stdin: o.stdin, stdout: o.stdout, stderr: o.stderr });
    }
    if (!rt.attach) throw new NodeletError('UNIMPLEMENTED', 'the container runtime does not implement Attach', {});
    return rt.attach({ containerId: id, tty: o.tty, stdin: o.stdin, stdout: o.stdout, stderr: o.stderr });
  }

  /** `/run`: ExecSync without a timeout; stdout then stderr, as the kubelet's RunInContainer. */
  async run(r: StreamRequest): Promise<Buffer> {
    const pod = findPod(this.o.pods, r.target);
    const id = runningContainerId(pod, r.target.container!);
    const res = await this.o.runtime.execSync(id, r.options!.cmd, 0);
    return Buffer.concat([res.stdout, res.stderr]);
  }

  /**
   * Forwards the client's upgrade request to `url` and pipes the two connections. `head`:
   * bytes the client sent after its request head. Resolves once the upstream connection is
   * made (or failed: then the client got a 502 and is closed); never rejects.
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
      upstream.once(connected, () => {
        if (closed) {
          upstream.destroy();
          resolve();
          return;
        }
        open = true;
        this.#sessions.add(session);
        upstream.write(requestHead(req, u));
        if (head.length > 0) upstream.write(head);
        upstream.pipe(client);
        client.pipe(upstream);
        if (this.idleTimeoutMs > 0) {
          // Reads and writes both count as activity; a session quiet on both sides ends.
          for (const s of [client, upstream] as (Duplex & { setTimeout?: (ms: number, cb?: () => void) => void })[]) {
            s.setTimeout?.(this.idleTimeoutMs, () => {
              log.info({ idleTimeoutMs: this.idleTimeoutMs }, 'streaming session idle: closed');
              close();
              client.destroy();
              upstream.destroy();
            });
          }
        }
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
      upstream.on('close', close);
      client.on('close', () => {
        if (!open) {
          upstream.destroy();
          resolve();
        }
        close();
      });
    });
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

/** Answers a failure on a raw socket (before any upgrade) with a Status body, and closes it. */
export function writeFailure(socket: Duplex, code: number, message: string, reason = REASONS[code] ?? 'InternalError'): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const body = JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });
  socket.end(`HTTP/1.1 ${code} ${PHRASES[code] ?? 'Error'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n${body}`);
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
