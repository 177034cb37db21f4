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

// ---------------------------------------------------------------- pods/ephemeralcontainers

/** A field error as kube-apiserver's field.Error: `<field>: <type>: <detail>` and its cause reason. */
interface FieldError {
  reason: string;
  field: string;
  message: string;
}

/** What server.ts throws for a refused ephemeral containers update (its ApiError fields). */
export interface ApiFailure {
  code: number;
  reason: string;
  message: string;
  details: Obj;
}

const MIRROR_ANNOTATION = 'kubernetes.io/config.mirror';
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_LABEL_MSG = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
/**
 * EphemeralContainerCommon's fields an ephemeral container may not set (upstream's allow
 * list, in the struct's order): what a pod's fundamental services rely on.
 */
const FORBIDDEN_FIELDS = ['ports', 'resources', 'resizePolicy', 'restartPolicy', 'livenessProbe', 'readinessProbe', 'startupProbe', 'lifecycle'];

const quote = (v: unknown) => JSON.stringify(v);
const isSet = (v: unknown): boolean => v !== undefined && v !== null && !(Array.isArray(v) && v.length === 0) && !(typeof v === 'object' && !Array.isArray(v) && Object.keys(v as object).length === 0);
type Container = Record<string, unknown>;
const containersOf = (spec: Obj | undefined, key: string): Container[] => (Array.isArray(spec?.[key]) ? (spec[key] as unknown[]).filter((c): c is Container => c !== null && typeof c === 'object' && !Array.isArray(c)) : []);

/** The API server's defaults for an ephemeral container (SetDefaults_EphemeralContainer): termination message and pull policy. */
function defaultEphemeral(c: Container): Container {
  const out = { ...c };
  if (out['terminationMessagePath'] === undefined || out['terminationMessagePath'] === '') out['terminationMessagePath'] = '/dev/termination-log';
  if (out['terminationMessagePolicy'] === undefined || out['terminationMessagePolicy'] === '') out['terminationMessagePolicy'] = 'File';
  if (out['imagePullPolicy'] === undefined || out['imagePullPolicy'] === '') {
    const image = typeof out['image'] === 'string' ? out['image'] : '';
    const ref = image.split('@')[0]!;
    const tag = /:([^/:]+)$/.exec(ref)?.[1];
    out['imagePullPolicy'] = image.includes('@') || (tag !== undefined && tag !== 'latest') ? 'IfNotPresent' : 'Always';
  }
  return out;
}

/** validateEphemeralContainers: each container's own checks, names unique across every container of the pod, the target an existing non-ephemeral container. */
function ephemeralContainerErrors(spec: Obj): FieldError[] {
  const errs: FieldError[] = [];
  const others = new Set([...containersOf(spec, 'containers'), ...containersOf(spec, 'initContainers')].map((c) => String(c['name'] ?? '')));
  const all = new Set(others);
  const volumes = new Set(containersOf(spec, 'volumes').map((v) => String(v['name'] ?? '')));
  containersOf(spec, 'ephemeralContainers').forEach((ec, i) => {
    const at = `spec.ephemeralContainers[${i}]`;
    const name = ec['name'];
    if (typeof name !== 'string' || name === '') errs.push({ reason: 'FieldValueRequired', field: `${at}.name`, message: 'Required value' });
    else if (!DNS_LABEL.test(name) || name.length > 63) errs.push({ reason: 'FieldValueInvalid', field: `${at}.name`, message: `Invalid value: ${quote(name)}: ${name.length > 63 ? 'must be no more than 63 characters' : DNS_LABEL_MSG}` });
    if (typeof ec['image'] !== 'string' || ec['image'] === '') errs.push({ reason: 'FieldValueRequired', field: `${at}.image`, message: 'Required value' });
    const tmp = ec['terminationMessagePolicy'];
    if (tmp !== 'File' && tmp !== 'FallbackToLogsOnError') errs.push({ reason: 'FieldValueNotSupported', field: `${at}.terminationMessagePolicy`, message: `Unsupported value: ${quote(tmp)}: supported values: "File", "FallbackToLogsOnError"` });
    containersOf(ec, 'volumeMounts').forEach((vm, j) => {
      if (!volumes.has(String(vm['name'] ?? ''))) errs.push({ reason: 'FieldValueNotFound', field: `${at}.volumeMounts[${j}].name`, message: `Not found: ${quote(vm['name'] ?? '')}` });
    });
    const pull = ec['imagePullPolicy'];
    if (pull !== 'Always' && pull !== 'IfNotPresent' && pull !== 'Never') errs.push({ reason: 'FieldValueNotSupported', field: `${at}.imagePullPolicy`, message: `Unsupported value: ${quote(pull)}: supported values: "Always", "IfNotPresent", "Never"` });
    if (typeof name === 'string' && name !== '') {
      if (all.has(name)) errs.push({ reason: 'FieldValueDuplicate', field: `${at}.name`, message: `Duplicate value: ${quote(name)}` });
      else all.add(name);
    }
    const target = ec['targetContainerName'];
    if (target !== undefined && target !== null && target !== '' && !others.has(String(target))) errs.push({ reason: 'FieldValueNotFound', field: `${at}.targetContainerName`, message: `Not found: ${quote(target)}` });
    for (const f of FORBIDDEN_FIELDS) if (isSet(ec[f])) errs.push({ reason: 'FieldValueForbidden', field: `${at}.${f}`, message: 'Forbidden: cannot be set for an Ephemeral Container' });
    containersOf(ec, 'volumeMounts').forEach((vm, j) => {
      for (const f of ['subPath', 'subPathExpr']) if (isSet(vm[f])) errs.push({ reason: 'FieldValueForbidden', field: `${at}.volumeMounts[${j}].${f}`, message: 'Forbidden: cannot be set for an Ephemeral Container' });
    });
  });
  return errs;
}

/** apierrors.NewInvalid: one error as is, several in brackets. */
function invalidFailure(name: string, errs: FieldError[]): ApiFailure {
  const text = errs.map((e) => `${e.field}: ${e.message}`);
  return {
    code: 422,
    reason: 'Invalid',
    message: `Pod "${name}" is invalid: ${text.length === 1 ? text[0] : `[${text.join(', ')}]`}`,
    details: { name, kind: 'Pod', causes: errs.map((e) => ({ reason: e.reason, message: e.message, field: e.field })) },
  };
}

/** A pod created with ephemeral containers (ValidatePodCreate): they come only through the subresource. */
export function ephemeralContainersOnCreate(pod: Obj): ApiFailure | undefined {
  if (!isSet(pod['spec']?.['ephemeralContainers'])) return undefined;
  return invalidFailure(String(pod['metadata']?.['name'] ?? ''), [{ reason: 'FieldValueForbidden', field: 'spec.ephemeralContainers', message: 'Forbidden: cannot be set on create' }]);
}

/**
 * A write (PUT or PATCH) of `pods/<name>/ephemeralcontainers`, as kube-apiserver's
 * ephemeral containers strategy: of the written pod only `spec.ephemeralContainers` is
 * taken (defaulted), everything else is the stored pod's (`managedFields` excepted, which
 * the caller records); existing ephemeral containers may be neither removed nor changed,
 * and the new ones are validated (ValidatePodEphemeralContainersUpdate). Returns the pod to
 * store, or the failure.
 */
export function ephemeralContainersUpdate(old: Obj, written: Obj): { pod: Obj } | { failure: ApiFailure } {
  const name = String(old['metadata']?.['name'] ?? '');
  const wrote = written['spec']?.['ephemeralContainers'];
  if (wrote !== undefined && wrote !== null && !Array.isArray(wrote)) return { failure: invalidFailure(name, [{ reason: 'FieldValueInvalid', field: 'spec.ephemeralContainers', message: `Invalid value: ${quote(wrote)}: must be a list` }]) };
  const next: Obj = JSON.parse(JSON.stringify(old));
  next['metadata'] = { ...next['metadata'] };
  if (written['metadata']?.['managedFields'] === undefined) delete next['metadata']['managedFields'];
  else next['metadata']['managedFields'] = written['metadata']['managedFields'];
  next['spec'] = { ...(next['spec'] ?? {}) };
  const list = ((wrote ?? []) as unknown[]).map((c) => (c !== null && typeof c === 'object' && !Array.isArray(c) ? defaultEphemeral(c as Container) : c));
  if (list.length > 0) next['spec']['ephemeralContainers'] = list;
  else delete next['spec']['ephemeralContainers'];
  if (old['metadata']?.['annotations']?.[MIRROR_ANNOTATION] !== undefined) {
    return { failure: invalidFailure(name, [{ reason: 'FieldValueForbidden', field: '', message: 'Forbidden: static pods do not support ephemeral containers' }]) };
  }
  const errs = list.some((c) => c === null || typeof c !== 'object' || Array.isArray(c)) ? [{ reason: 'FieldValueInvalid', field: 'spec.ephemeralContainers', message: 'Invalid value: each item must be an object' }] : ephemeralContainerErrors(next['spec']);
  // Existing ones: neither removed nor changed (order aside: a patch does not keep it).
  const byName = new Map(containersOf(next['spec'], 'ephemeralContainers').map((c) => [String(c['name'] ?? ''), c] as const));
  for (const prev of containersOf(old['spec'], 'ephemeralContainers')) {
    const pname = String(prev['name'] ?? '');
    const now = byName.get(pname);
    if (!now) errs.push({ reason: 'FieldValueForbidden', field: 'spec.ephemeralContainers', message: `Forbidden: existing ephemeral containers ${quote(pname)} may not be removed\n` });
    else if (!sameJson(prev, now)) errs.push({ reason: 'FieldValueForbidden', field: 'spec.ephemeralContainers', message: `Forbidden: existing ephemeral containers ${quote(pname)} may not be changed\n${changedFields(prev, now)}` });
  }
  return errs.length > 0 ? { failure: invalidFailure(name, errs) } : { pod: next };
}

function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object' || Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === (b as unknown[]).length && a.every((x, i) => sameJson(x, (b as unknown[])[i]));
  const ka = Object.keys(a).filter((k) => (a as Obj)[k] !== undefined);
  const kb = Object.keys(b).filter((k) => (b as Obj)[k] !== undefined);
  return ka.length === kb.length && ka.every((k) => sameJson((a as Obj)[k], (b as Obj)[k]));
}

/** The fields that differ, one a line (`- <field>: <old>` / `+ <field>: <new>`), in place of upstream's cmp.Diff. */
function changedFields(a: Container, b: Container): string {
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => !sameJson(a[k], b[k])).sort();
  return keys.map((k) => `- ${k}: ${quote(a[k] ?? null)}\n+ ${k}: ${quote(b[k] ?? null)}`).join('\n');
}
