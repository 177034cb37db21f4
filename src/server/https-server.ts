/**
 * The node's servers:
 * - `createNodeServer`: HTTPS on `address:port` (10250), every request authenticated and
 *   authorized (auth.ts) before routing, as the kubelet's filter chain does; routes
 *   `GET /healthz`, `GET /pods`; with enableDebuggingHandlers `GET /containerLogs/<ns>/<pod>/<container>`;
 *   and, when the checkpoint service is given (gate ContainerCheckpoint on and
 *   enableDebuggingHandlers true), `POST /checkpoint/<ns>/<pod>/<container>` and
 *   `GET /checkpoints`. Without them those paths are 404 like any unknown path.
 *   With `observability` (src/metrics): `GET /metrics`, `/metrics/resource`,
 *   `/stats/summary`, and with enableDebuggingHandlers `GET /configz` (the kubelet
 *   installs /configz among its debugging handlers).
 * - `createReadOnlyServer`: plain HTTP for `readOnlyPort`, unauthenticated like the
 *   kubelet's: what its InstallDefaultHandlers serves: `GET /healthz`, `GET /pods`,
 *   and with `observability` `/metrics`, `/metrics/resource`, `/stats/summary`; never a
 *   checkpoint, container logs or /configz.
 *
 * Errors from every route go through errors.ts (one table, a `Status` body). Paths are
 * routed on the raw, undecoded URL path, split on `/`, and never normalized, so the
 * authorization attributes and the route are computed from the same segments.
 *
 * No request may end or wedge the process: the target is judged by request-target.ts
 * before authentication (400 naming what is wrong), Node's parser errors answer 400/431
 * and header, request and handshake times are bounded (http-hardening.ts), and whatever a
 * handler throws or rejects with is answered 500 (or the connection destroyed when the
 * answer had begun). Streamed answers respect backpressure, so a slow reader holds at most
 * a socket buffer of nodelet's memory.
 *
 * Built by the composition root; `start()` listens, `stop()` stops accepting, lets open
 * requests finish for up to shutdownTimeoutMs, then closes what is left. Both idempotent.
 */
import crypto from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { NodeletError, errorMessage } from '../errors.js';
import { renderHealthz, type HealthRegistry } from '../health/checks.js';
import { silentLogger, type Logger } from '../log.js';
import { authorizeRequest, requestAttributes, type Authenticator, type Authorizer, type Credentials, type PeerCertificate, type UserInfo } from './auth.js';
import type { CheckpointService } from '../checkpoint/service.js';
import type { PodLookup } from '../pods/sources/lookup.js';
import { logTarget, openLog, parseLogOptions, streamLogs } from './container-logs.js';
import { isStreamKind, parseStreamRequest, writeFailure, type StreamingService } from './streaming.js';
import { methodNotAllowed, routeNotFound, statusFor, type FailureStatus } from './errors.js';
import { answerClientError, serverLimits } from './http-hardening.js';
import { parseRequestTarget, type RequestTarget } from './request-target.js';
import type { StatsSnapshot, Summary } from '../metrics/stats.js';
import { NO_SERVING_CERTIFICATE, type ServingCertificateSource, type ServingPair } from './serving-source.js';

/** What the metrics and stats routes read (src/metrics builds it; the daemon passes it in). */
export interface Observability {
  /** The `/metrics` exposition body. */
  metrics(): string;
  /** A stats snapshot (cached, shared by concurrent scrapes); rejects when the runtime cannot be read. */
  stats(): Promise<StatsSnapshot>;
  /** The `/metrics/resource` body for a snapshot, or for a failed read (undefined). */
  resourceMetrics(snap: StatsSnapshot | undefined): string;
  /** `/configz`: `{"kubeletconfig": ...}`; `origin` adds `origins` (leaf path -> file, `flag` or `default`). Only with enableDebuggingHandlers. */
  configz?: (origin: boolean) => unknown;
}

const EXPOSITION = 'text/plain; version=0.0.4; charset=utf-8';

export interface NodeServerOptions {
  address: string;
  port: number;
  tls: {
    /** PEM serving certificate and key (tls.ts): tlsCertFile or the self-signed pair. */
    cert?: string;
    key?: string;
    /**
     * Instead of cert/key (`serverTLSBootstrap`): the certificate the cluster issued
     * (serving-cert.ts), swapped in for new connections whenever it changes; while it has
     * none, every handshake fails.
     */
    source?: ServingCertificateSource;
    /** PEM bundle of `authentication.x509.clientCAFile`; set: client certificates are requested and verified against it. */
    clientCA?: string;
  };
  authenticator: Authenticator;
  authorizer: Authorizer;
  /** The node's name: the `name` of every authorization attribute set. */
  nodeName: string;
  health: HealthRegistry;
  pods: PodLookup;
  /** Given only when checkpoints are enabled (gate and enableDebuggingHandlers). */
  checkpoints?: CheckpointService;
  /** Given only with enableDebuggingHandlers: `GET /containerLogs/<ns>/<pod>/<container>` reads from here. */
  containerLogs?: { podLogsDir: string };
  /** /metrics, /metrics/resource, /stats/summary (and /configz when it has `configz`). */
  observability?: Observability;
  /** Given only with enableDebuggingHandlers: `/exec`, `/attach`, `/portForward` (upgrades proxied to the runtime) and `/run` (streaming.ts). */
  streaming?: StreamingService;
  /** How long stop() lets open requests run (default 5000). */
  shutdownTimeoutMs?: number;
  logger?: Logger;
}

export interface ReadOnlyServerOptions {
  address: string;
  port: number;
  health: HealthRegistry;
  pods: PodLookup;
  /** /metrics, /metrics/resource, /stats/summary (never /configz here). */
  observability?: Observability;
  shutdownTimeoutMs?: number;
  logger?: Logger;
}

export interface NodeServer {
  /** Listens; resolves with the bound address (port 0 picks a free one). */
  start(): Promise<{ address: string; port: number }>;
  /** Graceful, bounded stop. */
  stop(): Promise<void>;
}

interface Route {
  methods: readonly string[];
  handle(ctx: RequestContext): Promise<Reply>;
}

interface RequestContext {
  method: string;
  segments: string[];
  query: URLSearchParams;
  user?: UserInfo;
  /**
   * Aborts when the client's connection closes before the answer is complete: what a
   * handler passes to the runtime calls it makes for this client, so they end with it (the
   * kubelet's request context). Shared reads (stats snapshots) do not take it.
   */
  signal: AbortSignal;
}

/** A stream's `write` resolves when the client can take more (backpressure), at once otherwise. */
type Reply = { status: number; json: unknown } | { status: number; text: string; contentType?: string } | { status: number; stream: (write: (chunk: Buffer) => void | Promise<void>, signal: AbortSignal) => Promise<void> };

/** Finds the route for the raw path segments (`/a/b` -> ['a','b']). */
type Router = (segments: string[]) => Route | undefined;

function podList(pods: PodLookup): Reply {
  return { status: 200, json: { kind: 'PodList', apiVersion: 'v1', metadata: {}, items: pods.listPods() } };
}

/**
 * The metrics and stats routes, by path (`metrics`, `metrics/resource`, `stats/summary`,
 * `configz`). `/stats/summary?only_cpu_and_memory=true` leaves out what the kubelet's does.
 */
function observabilityRoutes(o: Observability | undefined): Record<string, Route> {
  if (!o) return {};
  const routes: Record<string, Route> = {
    metrics: { methods: ['GET', 'HEAD'], handle: async () => ({ status: 200, text: o.metrics(), contentType: EXPOSITION }) },
    'metrics/resource': {
      methods: ['GET', 'HEAD'],
      async handle() {
        // A runtime that cannot be read is a scrape with resource_scrape_error 1, as the kubelet's.
        const snap = await o.stats().catch(() => undefined);
        return { status: 200, text: o.resourceMetrics(snap), contentType: EXPOSITION };
      },
    },
    'stats/summary': {
      methods: ['GET'],
      async handle(ctx) {
        const snap = await o.stats().catch((err: unknown) => {
          throw new NodeletError('INTERNAL', `failed to get node info: ${errorMessage(err)}`, {}, { cause: err });
        });
        const only = ctx.query.get('only_cpu_and_memory') === 'true';
        return { status: 200, json: only ? cpuAndMemory(snap.summary) : snap.summary };
      },
    },
  };
  const configz = o.configz;
  if (configz) routes.configz = { methods: ['GET'], handle: async (ctx) => ({ status: 200, json: configz(ctx.query.has('origin')) }) };
  return routes;
}

function cpuAndMemory(s: Summary): Summary {
  const { nodeName, startTime, cpu, memory, swap } = s.node;
  return {
    node: { nodeName, startTime, ...(cpu ? { cpu } : {}), ...(memory ? { memory } : {}), ...(swap ? { swap } : {}) },
    pods: s.pods.map((p) => ({
      podRef: p.podRef,
      startTime: p.startTime,
      containers: p.containers.map((c) => ({ name: c.name, startTime: c.startTime, ...(c.cpu ? { cpu: c.cpu } : {}), ...(c.memory ? { memory: c.memory } : {}), ...(c.swap ? { swap: c.swap } : {}) })),
      ...(p.cpu ? { cpu: p.cpu } : {}),
      ...(p.memory ? { memory: p.memory } : {}),
      ...(p.swap ? { swap: p.swap } : {}),
    })),
  };
}

/** Route of the observability paths for raw segments (`['metrics','resource']`), or undefined. */
function observabilityRoute(routes: Record<string, Route>, segments: string[]): Route | undefined {
  const key = segments.join('/');
  return Object.hasOwn(routes, key) ? routes[key] : undefined;
}

function commonRoutes(health: HealthRegistry, pods: PodLookup): Record<string, Route> {
  return {
    healthz: {
      methods: ['GET', 'HEAD'],
      async handle(ctx) {
        const r = renderHealthz(await health.run(), ctx.query.has('verbose'));
        return { status: r.status, text: r.body };
      },
    },
    pods: { methods: ['GET'], handle: async () => podList(pods) },
  };
}

function nodeRouter(o: NodeServerOptions): Router {
  const common = commonRoutes(o.health, o.pods);
  const obs = observabilityRoutes(o.observability);
  const cp = o.checkpoints;
  const checkpoint: Route | undefined = cp && {
    methods: ['POST'],
    async handle(ctx) {
      const rest = ctx.segments.slice(1);
      if (rest.length > 3) {
        throw new NodeletError('INVALID_ARGUMENT', `expected /checkpoint/<namespace>/<pod>/<container>: the path has ${rest.length} segments after /checkpoint`, { param: 'path' });
      }
      const result = await cp.checkpoint({ namespace: rest[0], pod: rest[1], container: rest[2], timeout: ctx.query.getAll('timeout'), ...(ctx.user ? { user: ctx.user.username } : {}), signal: ctx.signal });
      return { status: 200, json: result };
    },
  };
  const checkpoints: Route | undefined = cp && { methods: ['GET'], handle: async () => ({ status: 200, json: { items: await cp.list() } }) };
  const logs = o.containerLogs;
  const containerLogs: Route | undefined = logs && {
    methods: ['GET'],
    async handle(ctx) {
      let rest: string[];
      try {
        rest = ctx.segments.slice(1).map((s) => decodeURIComponent(s));
      } catch {
        throw new NodeletError('INVALID_ARGUMENT', 'the path is not valid percent-encoding', { param: 'path' });
      }
      if (rest.length !== 3 || rest.some((s) => s === '')) throw new NodeletError('INVALID_ARGUMENT', 'expected /containerLogs/<namespace>/<pod>/<container>', { param: 'path' });
      const [namespace, pod, container] = rest as [string, string, string];
      const opts = parseLogOptions(ctx.query, Date.now());
      const target = logTarget(o.pods, logs.podLogsDir, namespace, pod, container, opts.previous);
      const fh = await openLog(target, container);
      return { status: 200, stream: (write, signal) => streamLogs(fh, target, opts, write, signal) };
    },
  };
  const st = o.streaming;
  const streamRoute = (kind: 'exec' | 'attach' | 'portForward' | 'run'): Route | undefined =>
    st && {
      methods: kind === 'run' ? ['POST'] : ['GET', 'POST'],
      async handle(ctx) {
        const r = parseStreamRequest(kind, ctx.segments.slice(1), ctx.query);
        // exec, attach, portForward arrive here only without an upgrade (those go to the 'upgrade' listener).
        if (kind !== 'run') throw new NodeletError('INVALID_ARGUMENT', `Upgrade request required: /${kind} is served as an upgraded (SPDY or WebSocket) connection`, { param: 'Upgrade' });
        const out = await st.run(r, ctx.signal);
        return { status: 200, stream: async (write) => void (await write(out)) };
      },
    };
  return (segments) => {
    const [first, ...rest] = segments;
    const observed = observabilityRoute(obs, segments);
    if (observed) return observed;
    if (first === 'checkpoint') return checkpoint;
    if (first === 'containerLogs') return containerLogs;
    if (isStreamKind(first)) return streamRoute(first);
    if (rest.length > 0) return undefined;
    if (first === 'checkpoints') return checkpoints;
    return first === 'healthz' || first === 'pods' ? common[first] : undefined;
  };
}

/**
 * What each TLS connection's client certificate says, read once per connection: the
 * certificate cannot change on a connection (the server refuses renegotiation, as Go's
 * TLS server behind the kubelet does), and decoding it is a tenth of a millisecond that a
 * kept-alive connection would otherwise pay on every request.
 */
const peerCertificates = new WeakMap<TLSSocket, PeerCertificate | null>();

function peerCertificate(req: http.IncomingMessage): PeerCertificate | undefined {
  const sock = req.socket as TLSSocket;
  if (typeof sock.getPeerCertificate !== 'function') return undefined;
  let known = peerCertificates.get(sock);
  if (known === undefined) {
    known = readPeerCertificate(sock) ?? null;
    peerCertificates.set(sock, known);
  }
  return known ?? undefined;
}

function readPeerCertificate(sock: TLSSocket): PeerCertificate | undefined {
  const pc = sock.getPeerCertificate();
  if (!pc || Object.keys(pc).length === 0) return undefined;
  const list = (v: string | string[] | undefined): string[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);
  const subject = (pc.subject ?? {}) as unknown as Record<string, string | string[] | undefined>;
  return {
    verified: sock.authorized === true,
    ...(sock.authorizationError ? { verifyError: String(sock.authorizationError) } : {}),
    commonName: list(subject.CN)[0] ?? '',
    organizations: list(subject.O),
    ...(Array.isArray(pc.ext_key_usage) ? { extKeyUsage: pc.ext_key_usage } : {}),
  };
}

function send(res: http.ServerResponse, reply: Reply | FailureStatus, headOnly: boolean, extraHeaders: Record<string, string> = {}): void | Promise<void> {
  if ('stream' in reply) return sendStream(res, reply, headOnly);
  let status: number;
  let body: string;
  let type: string;
  if ('kind' in reply && reply.kind === 'Status') {
    status = reply.code;
    body = JSON.stringify(reply);
    type = 'application/json';
  } else if ('json' in reply) {
    status = reply.status;
    body = JSON.stringify(reply.json);
    type = 'application/json';
  } else {
    const r = reply as { status: number; text: string; contentType?: string };
    status = r.status;
    body = r.text;
    type = r.contentType ?? 'text/plain; charset=utf-8';
  }
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body), 'X-Content-Type-Options': 'nosniff', ...extraHeaders });
  res.end(headOnly ? undefined : body);
}

/** A chunked text/plain body written as it comes, no faster than the client reads; stops when the client goes. */
async function sendStream(res: http.ServerResponse, reply: Extract<Reply, { stream: unknown }>, headOnly: boolean): Promise<void> {
  res.writeHead(reply.status, { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
  if (headOnly) return void res.end();
  const gone = new AbortController();
  res.once('close', () => gone.abort());
  // A client that left while the route was getting ready (its 'close' is past): stop at once.
  if (res.destroyed) gone.abort();
  const write = (chunk: Buffer): void | Promise<void> => {
    if (res.destroyed || res.write(chunk)) return;
    return new Promise<void>((resolve) => {
      const done = () => {
        res.off('drain', done);
        res.off('close', done);
        resolve();
      };
      res.on('drain', done);
      res.on('close', done);
    });
  };
  try {
    await reply.stream(write, gone.signal);
  } finally {
    res.end();
  }
}

/** What the HTTPS port checks of every request (absent on the read-only port). */
interface ServerAuth {
  authenticator: Authenticator;
  authorizer: Authorizer;
  nodeName: string;
  /** A client CA is configured: client certificates are read. */
  x509: boolean;
}

/** Authenticates the request and authorizes `method` on `rawPath`; throws UNAUTHENTICATED or FORBIDDEN. */
async function admit(req: http.IncomingMessage, method: string, rawPath: string, auth: ServerAuth): Promise<UserInfo> {
  const creds: Credentials = {
    ...(auth.x509 ? { peerCertificate: peerCertificate(req) } : {}),
    ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
  };
  const user = await auth.authenticator.authenticate(creds);
  await authorizeRequest(auth.authorizer, user, requestAttributes(method, rawPath, auth.nodeName));
  return user;
}

/**
 * `CONNECT` requests. Node hands them to a `connect` listener with the raw socket (none:
 * the connection is dropped unanswered), so they get one here: the answer any method no
 * route serves gets (the target judged, then authentication and authorization on the
 * HTTPS port, then 404 for a path no route serves, 405 with `Allow` for one that is), and
 * the connection closes. The kubelet's server (Go net/http, go-restful) answers a CONNECT
 * to a served path the same 405 after its authentication filter, and 404 to others; an
 * authority-form target (`CONNECT host:443`) is refused 400 by the target check, like every
 * target that is not a path (Go's mux answers it 404).
 */
function connectHandler(router: Router, log: Logger, auth?: ServerAuth) {
  return (req: http.IncomingMessage, socket: Duplex): void => {
    socket.on('error', (err) => log.debug({ err: err.message }, 'CONNECT: client connection error'));
    const method = 'CONNECT';
    (async (): Promise<{ status: FailureStatus; headers?: Record<string, string> }> => {
      const target = parseRequestTarget(req.url);
      if (auth) await admit(req, method, target.rawPath, auth);
      const route = router(target.segments);
      if (!route) return { status: routeNotFound() };
      return { status: methodNotAllowed(method, route.methods), headers: { Allow: route.methods.join(', ') } };
    })()
      .catch((err: unknown): { status: FailureStatus; headers?: Record<string, string> } => ({ status: statusFor(err) }))
      .then(({ status, headers }) => {
        log.debug({ method, path: (req.url ?? '').slice(0, 200), code: status.code }, 'request refused');
        writeFailure(socket, status.code, status.message, status.reason, headers);
      });
  };
}

/** Longest error message a log line carries (the client's answer has all of it). */
const LOGGED_MESSAGE_MAX = 2048;

/** An error's message for the log: a `/run` whose command failed carries its stderr, up to the runtime's 16 MiB. */
function loggedMessage(err: unknown): string {
  const m = errorMessage(err);
  return m.length > LOGGED_MESSAGE_MAX ? `${m.slice(0, LOGGED_MESSAGE_MAX)}... (${m.length} chars)` : m;
}

/** The request pipeline shared by both servers; `auth` absent = the read-only port. */
function makeHandler(router: Router, log: Logger, auth?: ServerAuth): http.RequestListener {
  return (req, res) => {
    const method = (req.method ?? 'GET').toUpperCase();
    // Bodies are not used by any route; drain so keep-alive connections stay usable.
    req.resume();
    const headOnly = method === 'HEAD';
    let rawPath = (req.url ?? '').slice(0, 200);
    // The client leaving (its connection closed before the answer ended) cancels what the
    // handler is doing for it. After the answer 'close' comes too; aborting then changes nothing.
    const client = new AbortController();
    res.once('close', () => client.abort());
    (async () => {
      let user: UserInfo | undefined;
      try {
        // Judged before authentication: a target nobody can route is refused the same for everyone.
        const target: RequestTarget = parseRequestTarget(req.url);
        rawPath = target.rawPath;
        const { segments, query } = target;
        if (auth) user = await admit(req, method, rawPath, auth);
        const route = router(segments);
        if (!route) return send(res, routeNotFound(), headOnly);
        if (!route.methods.includes(method)) return send(res, methodNotAllowed(method, route.methods), headOnly, { Allow: route.methods.join(', ') });
        const reply = await route.handle({ method, segments, query, ...(user ? { user } : {}), signal: client.signal });
        await send(res, reply, headOnly);
      } catch (err) {
        if (client.signal.aborted && !res.headersSent) {
          // The client left before its answer: the handler stopped for it; nobody reads a status.
          log.debug({ method, path: rawPath, user: user?.username, err: errorMessage(err) }, 'client closed the connection before the answer');
          res.destroy();
          return;
        }
        const status = statusFor(err);
        const fields = { method, path: rawPath, user: user?.username, code: status.code, err: loggedMessage(err), details: err instanceof NodeletError ? err.details : undefined };
        if (status.code >= 500) log.warn(fields, 'request failed');
        else log.debug(fields, 'request refused');
        if (!res.headersSent) send(res, status, headOnly);
        else res.destroy();
      }
    })().catch((err: unknown) => {
      // Only answering itself can fail here (a socket gone mid-write): never an unhandled rejection.
      log.warn({ method, path: rawPath, err: errorMessage(err) }, 'answering a request failed');
      res.destroy();
    });
  };
}

function lifecycle(server: http.Server | https.Server, limits: { maxHeaderSize: number }, address: string, port: number, shutdownTimeoutMs: number, log: Logger): NodeServer {
  let started = false;
  let stopping: Promise<void> | undefined;
  return {
    async start() {
      if (!started) {
        await new Promise<void>((resolve, reject) => {
          const onError = (err: Error) => reject(new NodeletError('UNAVAILABLE', `listening on ${address}:${port}: ${err.message}`, { address, port }, { cause: err }));
          server.once('error', onError);
          server.listen({ host: address, port }, () => {
            server.off('error', onError);
            resolve();
          });
        });
        started = true;
        // Errors after listening (a socket reset) must never crash the daemon.
        server.on('error', (err) => log.warn({ err: err.message }, 'server error'));
        server.on('clientError', answerClientError(log, limits.maxHeaderSize));
        log.info({ address, port: (server.address() as AddressInfo).port }, 'listening');
      }
      const a = server.address() as AddressInfo;
      return { address: a.address, port: a.port };
    },
    stop() {
      if (!started) return Promise.resolve();
      stopping ??= new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          log.warn({ shutdownTimeoutMs }, 'closing connections still open at shutdown');
          server.closeAllConnections();
        }, shutdownTimeoutMs);
        server.close(() => {
          clearTimeout(timer);
          resolve();
        });
        server.closeIdleConnections();
      });
      return stopping;
    },
  };
}

/** The HTTPS server on `port` (see the file comment). Constructing it listens on nothing. */
export function createNodeServer(o: NodeServerOptions): NodeServer {
  const log = (o.logger ?? silentLogger()).child({ component: 'https-server' });
  // 32 KiB of headers: room for the largest bearer tokens (OIDC with many groups).
  const limits = serverLimits(32 * 1024);
  const router = nodeRouter(o);
  const auth: ServerAuth = { authenticator: o.authenticator, authorizer: o.authorizer, nodeName: o.nodeName, x509: !!o.tls.clientCA };
  const source = o.tls.source;
  const server = https.createServer(
    {
      ...limits,
      // A client that opens a connection and never finishes the handshake is dropped.
      handshakeTimeout: 10_000,
      ...secureContextOptions(source ? source.current() : o.tls.cert !== undefined && o.tls.key !== undefined ? { cert: o.tls.cert, key: o.tls.key } : undefined, o.tls.clientCA),
      ...(o.tls.clientCA
        ? // Ask for a certificate but let the handshake through without one: tokens and
          // anonymous requests use the same port; auth.ts decides from socket.authorized.
          { requestCert: true, rejectUnauthorized: false }
        : {}),
    },
    makeHandler(router, log, auth),
  );
  if (source) swapCertificates(server, source, o.tls.clientCA, log);
  server.on('connect', connectHandler(router, log, auth));
  const st = o.streaming;
  if (!st) return lifecycle(server, limits, o.address, o.port, o.shutdownTimeoutMs ?? 5000, log);
  server.on('upgrade', upgradeHandler(st, log, auth));
  const lc = lifecycle(server, limits, o.address, o.port, o.shutdownTimeoutMs ?? 5000, log);
  // Sessions are not requests: the server's graceful close would wait for them for hours.
  return { start: () => lc.start(), stop: () => (st.closeAll(), lc.stop()) };
}

/** The secure context's options: the serving pair (none: every handshake fails) and the client CA. */
function secureContextOptions(pair: ServingPair | undefined, clientCA: string | undefined): https.ServerOptions {
  return {
    ...(pair ? { cert: pair.cert, key: pair.key } : {}),
    minVersion: 'TLSv1.2',
    // No TLS 1.2 renegotiation (Go's TLS server has none): a connection's client certificate is fixed.
    secureOptions: crypto.constants.SSL_OP_NO_RENEGOTIATION,
    ...(clientCA ? { ca: clientCA } : {}),
  };
}

/**
 * Serves the source's certificate: each change replaces the server's secure context, which
 * new handshakes use; connections already open (streaming sessions, watches of logs) keep
 * theirs. While there is none, handshakes fail and are logged in the kubelet's words (at
 * most once a minute, with how many).
 */
function swapCertificates(server: https.Server, source: ServingCertificateSource, clientCA: string | undefined, log: Logger): void {
  let has = source.current() !== undefined;
  source.onChange((pair) => {
    has = pair !== undefined;
    server.setSecureContext(secureContextOptions(pair, clientCA));
    log.info({ serving: has }, has ? 'serving the new certificate on new connections' : 'no serving certificate: handshakes fail until one is issued');
  });
  let failed = 0;
  let lastLog = 0;
  server.prependListener('tlsClientError', (err: Error, sock: TLSSocket) => {
    if (has) return;
    failed++;
    const now = Date.now();
    if (now - lastLog < 60_000) return;
    lastLog = now;
    log.warn({ remote: sock.remoteAddress, failedHandshakes: failed, err: err.message }, `TLS handshake error from ${sock.remoteAddress ?? 'a client'}: ${NO_SERVING_CERTIFICATE}`);
    failed = 0;
  });
}

/**
 * Upgrade requests (`Connection: Upgrade`): authenticated and authorized as every request,
 * then `/exec`, `/attach`, `/portForward` are proxied to the runtime (streaming.ts). Any
 * other path answers 400: nothing else is served upgraded.
 */
function upgradeHandler(st: StreamingService, log: Logger, auth: ServerAuth) {
  return (req: http.IncomingMessage, socket: Duplex, head: Buffer): void => {
    const method = (req.method ?? 'GET').toUpperCase();
    let rawPath = (req.url ?? '').slice(0, 200);
    socket.on('error', (err) => log.debug({ err: err.message }, 'upgrade: client connection error'));
    // The client leaving while nodelet asks the runtime for a session cancels that call.
    const client = new AbortController();
    socket.once('close', () => client.abort());
    (async () => {
      const target = parseRequestTarget(req.url);
      rawPath = target.rawPath;
      const user = await admit(req, method, rawPath, auth);
      const [kind, ...rest] = target.segments;
      if (!isStreamKind(kind) || kind === 'run') throw new NodeletError('INVALID_ARGUMENT', `${target.segments[0] ? `/${target.segments[0]}` : 'this path'} is not served as an upgraded connection`, { param: 'Upgrade' });
      if (method !== 'GET' && method !== 'POST') throw new NodeletError('INVALID_ARGUMENT', `method ${method} cannot open a stream (GET or POST)`, { param: 'method' });
      const url = await st.streamUrl(parseStreamRequest(kind, rest, target.query), client.signal);
      // Gone while the runtime answered: the session URL is left unused (it expires in the runtime).
      if (client.signal.aborted) return;
      log.debug({ method, path: rawPath, user: user.username }, 'streaming session');
      await st.proxy(req, socket, head, url);
    })().catch((err: unknown) => {
      if (client.signal.aborted) {
        log.debug({ method, path: rawPath, err: errorMessage(err) }, 'upgrade: client closed the connection before the session');
        socket.destroy();
        return;
      }
      const status = statusFor(err);
      const fields = { method, path: rawPath, code: status.code, err: errorMessage(err) };
      if (status.code >= 500) log.warn(fields, 'upgrade request failed');
      else log.debug(fields, 'upgrade request refused');
      writeFailure(socket, status.code, status.message, status.reason);
    });
  };
}

/** The read-only HTTP server for `readOnlyPort`: GET /healthz and GET /pods, no authentication, never checkpoints. */
export function createReadOnlyServer(o: ReadOnlyServerOptions): NodeServer {
  const log = (o.logger ?? silentLogger()).child({ component: 'read-only-server' });
  const common = commonRoutes(o.health, o.pods);
  // Never /configz here: the kubelet installs it only among the debugging handlers of the authenticated port.
  const obs = observabilityRoutes(o.observability && { ...o.observability, configz: undefined });
  const router: Router = (segments) =>
    observabilityRoute(obs, segments) ?? (segments.length === 1 && (segments[0] === 'healthz' || segments[0] === 'pods') ? common[segments[0]] : undefined);
  const limits = serverLimits();
  const server = http.createServer(limits, makeHandler(router, log));
  server.on('connect', connectHandler(router, log));
  return lifecycle(server, limits, o.address, o.port, o.shutdownTimeoutMs ?? 5000, log);
}
