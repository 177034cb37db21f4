/**
 * The test API server's pod subresources that end at the node agent, as kube-apiserver's:
 * - `GET pods/<name>/log` -> the node's `GET /containerLogs/<ns>/<pod>/<container>` with
 *   `follow`, `previous`, `sinceSeconds`, `sinceTime`, `timestamps`, `tailLines`,
 *   `limitBytes`; the answer streams back as it comes (status, headers and body).
 * - `pods/<name>/exec`, `pods/<name>/attach` -> the node's `/exec/...`, `/attach/...` with
 *   PodExecOptions/PodAttachOptions translated as kube-apiserver does (`stdin` -> `input=1`,
 *   `stdout` -> `output=1`, `stderr` -> `error=1`, `tty=1`, `command` repeated), and
 *   `pods/<name>/portforward` -> `/portForward/<ns>/<pod>` (`ports` -> `port`): the upgrade
 *   request passes through to the agent and the two connections are piped byte for byte
 *   (kube-apiserver can translate WebSocket to SPDY; this server does not, so a client sees
 *   what the agent and its runtime negotiate).
 *
 * The node is the pod's `spec.nodeName`, reached at `status.daemonEndpoints.kubeletEndpoint.Port`
 * on its InternalIP over HTTPS (node-proxy.ts's `nodeEndpoint`) with the control plane's own
 * client certificate (CN `system:apiserver`, group `system:masters`), without verifying the
 * agent's serving certificate. Wired in server.ts: one route line, one upgrade listener.
 */
import type http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import { apiserverClient, nodeEndpoint, setNodeProxyPki } from './node-proxy.js';
import type { Pki } from './pki.js';
import type { Obj, Store } from './store.js';

export const POD_SUBRESOURCE_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/(log|exec|attach|portforward)$/;

/** Open upgraded sessions per control plane: its close() ends them (a server's close waits for every connection). */
const sessions = new WeakMap<Store, Set<Duplex>>();

/** Ends every open exec/attach/portforward session of this control plane. */
export function closePodSubresourceSessions(store: Store): void {
  for (const s of sessions.get(store) ?? []) s.destroy();
  sessions.delete(store);
}

/** The control plane's PKI, for the client certificate presented to node agents (node-proxy.ts's, shared). */
export function setPodSubresourcesPki(store: Store, pki: Pki): void {
  setNodeProxyPki(store, pki);
}

function clientFor(store: Store): { cert: Buffer; key: Buffer } {
  const c = apiserverClient(store);
  if (!c) throw new SubresourceError(500, 'InternalError', 'pod subresources: no PKI registered for this control plane');
  return c;
}

class SubresourceError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

function statusJson(e: SubresourceError): string {
  return JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: e.message, reason: e.reason, code: e.code });
}

const PHRASES: Record<number, string> = { 400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found', 405: 'Method Not Allowed', 500: 'Internal Server Error', 503: 'Service Unavailable' };

function bool(q: URLSearchParams, name: string): boolean {
  const v = q.get(name);
  if (v === null || v === '' || v === 'false' || v === '0') return false;
  if (v === 'true' || v === '1') return true;
  throw new SubresourceError(400, 'BadRequest', `${name}: Invalid value: ${JSON.stringify(v)}: must be a boolean`);
}

/** The agent's path and query for a subresource request (kube-apiserver's pod strategy: LogLocation, ExecLocation, ...). */
export function nodeLocation(store: Store, namespace: string, name: string, sub: string, q: URLSearchParams): { node: Obj; path: string } {
  const pod = store.get('pods', namespace, name);
  if (!pod) throw new SubresourceError(404, 'NotFound', `pods "${name}" not found`);
  const spec = (pod['spec'] ?? {}) as { nodeName?: string; containers?: { name: string }[]; initContainers?: { name: string }[]; ephemeralContainers?: { name: string }[] };
  const nodeName = spec.nodeName;
  if (!nodeName) throw new SubresourceError(400, 'BadRequest', `pod ${name} does not have a host assigned`);
  const node = store.get('nodes', '', nodeName);
  if (!node) throw new SubresourceError(404, 'NotFound', `nodes "${nodeName}" not found`);
  const enc = encodeURIComponent;
  const out = new URLSearchParams();
  if (sub === 'portforward') {
    for (const p of q.getAll('ports')) out.append('port', p);
    return { node, path: `/portForward/${enc(namespace)}/${enc(name)}${out.size > 0 ? `?${out}` : ''}` };
  }
  const all = [...(spec.containers ?? []), ...(spec.initContainers ?? []), ...(spec.ephemeralContainers ?? [])].map((c) => c.name);
  let container = q.get('container') ?? '';
  if (container === '') {
    if ((spec.containers ?? []).length !== 1) throw new SubresourceError(400, 'BadRequest', `a container name must be specified for pod ${name}, choose one of: [${all.join(' ')}]`);
    container = spec.containers![0]!.name;
  }
  if (!all.includes(container)) throw new SubresourceError(400, 'BadRequest', `container ${container} is not valid for pod ${name}`);
  if (sub === 'log') {
    for (const k of ['follow', 'previous', 'timestamps']) if (bool(q, k)) out.set(k, 'true');
    for (const k of ['sinceSeconds', 'sinceTime', 'tailLines', 'limitBytes']) {
      const v = q.get(k);
      if (v !== null) out.set(k, v);
    }
  } else {
    const phase = (pod['status'] as { phase?: string } | undefined)?.phase;
    if (phase === 'Succeeded' || phase === 'Failed') throw new SubresourceError(400, 'BadRequest', `cannot ${sub} into a container in a completed pod; current phase is ${phase}`);
    const stdin = bool(q, 'stdin');
    const stdout = bool(q, 'stdout');
    const stderr = bool(q, 'stderr');
    const tty = bool(q, 'tty');
    if (!stdin && !stdout && !stderr) throw new SubresourceError(400, 'BadRequest', 'you must specify at least one of stdin, stdout, or stderr');
    if (stdin) out.set('input', '1');
    if (stdout) out.set('output', '1');
    if (stderr) out.set('error', '1');
    if (tty) out.set('tty', '1');
    const cmd = q.getAll('command');
    if (sub === 'exec' && cmd.length === 0) throw new SubresourceError(400, 'BadRequest', 'you must specify at least one command for the container');
    if (sub === 'exec') for (const c of cmd) out.append('command', c);
  }
  const kind = sub === 'log' ? 'containerLogs' : sub;
  const qs = out.toString();
  return { node, path: `/${kind}/${enc(namespace)}/${enc(name)}/${enc(container)}${qs ? `?${qs}` : ''}` };
}

function endpointOf(node: Obj): { host: string; port: number } {
  const ep = nodeEndpoint(node);
  if (!ep) throw new SubresourceError(503, 'ServiceUnavailable', `no kubelet endpoint on node "${String(node['metadata']?.['name'] ?? '')}"`);
  return ep;
}

/** Non-upgrade requests to a pod subresource (the path matched POD_SUBRESOURCE_PATH): `log` is proxied; the others need an upgrade. */
export function podSubresource(req: http.IncomingMessage, res: http.ServerResponse, u: URL, store: Store): Promise<void> {
  const m = POD_SUBRESOURCE_PATH.exec(u.pathname)!;
  const [namespace, name, sub] = [decodeURIComponent(m[1]!), decodeURIComponent(m[2]!), m[3]!];
  const fail = (e: unknown) => {
    const err = e instanceof SubresourceError ? e : new SubresourceError(500, 'InternalError', (e as Error).message);
    if (res.headersSent) return void res.destroy();
    res.writeHead(err.code, { 'Content-Type': 'application/json' });
    res.end(statusJson(err));
  };
  try {
    if (sub !== 'log') throw new SubresourceError(400, 'BadRequest', `Upgrade request required`);
    if (req.method !== 'GET') throw new SubresourceError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
    const loc = nodeLocation(store, namespace, name, sub, u.searchParams);
    const ep = endpointOf(loc.node);
    const { cert, key } = clientFor(store);
    req.resume();
    return new Promise<void>((resolve) => {
      const out = https.request({ host: ep.host, port: ep.port, method: 'GET', path: loc.path, cert, key, rejectUnauthorized: false, timeout: 30_000 }, (answer) => {
        // A follow stream may be quiet for long: no timeout once it answered.
        out.setTimeout(0);
        const headers: Record<string, string> = {};
        for (const h of ['content-type', 'content-length', 'x-content-type-options']) {
          const v = answer.headers[h];
          if (typeof v === 'string') headers[h] = v;
        }
        res.writeHead(answer.statusCode ?? 502, headers);
        answer.pipe(res);
        answer.on('end', resolve);
        answer.on('error', () => (res.destroy(), resolve()));
      });
      res.on('close', () => {
        out.destroy();
        resolve();
      });
      out.on('timeout', () => out.destroy(new Error('timeout')));
      out.on('error', (err) => {
        fail(new SubresourceError(500, 'InternalError', `Get "https://${ep.host}:${ep.port}${loc.path.split('?')[0]}": ${err.message}`));
        resolve();
      });
      out.end();
    });
  } catch (e) {
    fail(e);
    return Promise.resolve();
  }
}

const FORWARDED = /^(connection|upgrade|sec-websocket-[a-z-]+|x-stream-protocol-version|origin)$/i;

function writeRaw(socket: Duplex, e: SubresourceError): void {
  const body = statusJson(e);
  if (socket.writable) socket.end(`HTTP/1.1 ${e.code} ${PHRASES[e.code] ?? 'Error'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  setTimeout(() => socket.destroy(), 1000).unref();
}

/**
 * The server's 'upgrade' listener: exec, attach and portforward pass through to the agent;
 * anything else upgraded is refused. `authenticated` says whether the caller is known.
 */
export function upgradePodSubresource(req: http.IncomingMessage, socket: Duplex, head: Buffer, store: Store, authenticated: (req: http.IncomingMessage) => boolean): void {
  socket.on('error', () => socket.destroy());
  let set = sessions.get(store);
  if (!set) sessions.set(store, (set = new Set()));
  const open = set;
  open.add(socket);
  socket.on('close', () => open.delete(socket));
  try {
    if (!authenticated(req)) throw new SubresourceError(401, 'Unauthorized', 'Unauthorized');
    const u = new URL(req.url ?? '/', 'https://x');
    const m = POD_SUBRESOURCE_PATH.exec(u.pathname);
    if (!m || m[3] === 'log') throw new SubresourceError(400, 'BadRequest', 'this path is not served as an upgraded connection');
    const loc = nodeLocation(store, decodeURIComponent(m[1]!), decodeURIComponent(m[2]!), m[3]!, u.searchParams);
    const ep = endpointOf(loc.node);
    const { cert, key } = clientFor(store);
    const up = tls.connect({ host: ep.host, port: ep.port, cert, key, rejectUnauthorized: false });
    let connected = false;
    const close = () => {
      socket.end();
      up.end();
      setTimeout(() => (socket.destroy(), up.destroy()), 1000).unref();
    };
    up.once('secureConnect', () => {
      connected = true;
      const lines = [`${req.method ?? 'GET'} ${loc.path} HTTP/1.1`, `Host: ${ep.host}:${ep.port}`];
      for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) if (FORWARDED.test(req.rawHeaders[i]!)) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      up.write(`${lines.join('\r\n')}\r\n\r\n`);
      if (head.length > 0) up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
    up.on('error', (err) => {
      if (!connected) writeRaw(socket, new SubresourceError(500, 'InternalError', `error dialing backend: ${err.message}`));
      else close();
    });
    up.on('close', close);
    socket.on('close', () => (connected ? close() : up.destroy()));
  } catch (e) {
    writeRaw(socket, e instanceof SubresourceError ? e : new SubresourceError(500, 'InternalError', (e as Error).message));
  }
}
