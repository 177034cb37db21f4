/**
 * The API server's node proxy: `/api/v1/nodes/<node>/proxy/<path>` forwarded to the node's
 * agent at `status.daemonEndpoints.kubeletEndpoint.Port` on its `InternalIP` over HTTPS,
 * authenticated with the control plane's own client certificate (CN `system:apiserver`,
 * like kube-apiserver's `--kubelet-client-certificate`), without verifying the agent's
 * serving certificate (kube-apiserver's default without `--kubelet-certificate-authority`).
 * The caller was authenticated by the control plane already; method, query, body and the
 * answer (status, headers, body) pass through as streams.
 *
 * Wired by one route line in server.ts; the PKI is registered per store once the control
 * plane has it (`setNodeProxyPki`), and the client certificate issued on first use.
 */
import fs from 'node:fs';
import type http from 'node:http';
import https from 'node:https';
import type { Pki } from './pki.js';
import type { Obj, Store } from './store.js';

export const NODE_PROXY_PATH = /^\/api\/v1\/nodes\/([^/]+)\/proxy(\/.*)?$/;

const pkis = new WeakMap<Store, Pki>();
const clients = new WeakMap<Store, { cert: Buffer; key: Buffer }>();

/** The control plane's PKI, for the proxy's client certificate. */
export function setNodeProxyPki(store: Store, pki: Pki): void {
  pkis.set(store, pki);
}

/**
 * The control plane's client certificate for node agents (CN `system:apiserver`, group
 * `system:masters`), issued on first use; undefined while no PKI is registered. The node
 * proxy and the pod subresources (pod-subresources.ts) present it.
 */
export function apiserverClient(store: Store): { cert: Buffer; key: Buffer } | undefined {
  let c = clients.get(store);
  if (!c) {
    const pki = pkis.get(store);
    if (!pki) return undefined;
    const files = pki.issueClient('system:apiserver', ['system:masters']);
    c = { cert: fs.readFileSync(files.certFile), key: fs.readFileSync(files.keyFile) };
    clients.set(store, c);
  }
  return c;
}

function clientFor(store: Store): { cert: Buffer; key: Buffer } {
  const c = apiserverClient(store);
  if (!c) throw new Error('node proxy: no PKI registered for this control plane');
  return c;
}

function status(res: http.ServerResponse, code: number, reason: string, message: string): void {
  const body = JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

/** Where the node's agent listens, from the Node object. */
export function nodeEndpoint(node: Obj): { host: string; port: number } | undefined {
  const addresses = (node['status']?.['addresses'] ?? []) as { type: string; address: string }[];
  const host = addresses.find((a) => a.type === 'InternalIP')?.address ?? addresses.find((a) => a.type === 'Hostname')?.address;
  const port = node['status']?.['daemonEndpoints']?.['kubeletEndpoint']?.['Port'];
  return host && typeof port === 'number' && port > 0 ? { host, port } : undefined;
}

/** Serves one node proxy request (the path matched NODE_PROXY_PATH). */
export function proxyToNode(req: http.IncomingMessage, res: http.ServerResponse, u: URL, store: Store): Promise<void> {
  const m = NODE_PROXY_PATH.exec(u.pathname)!;
  const name = decodeURIComponent(m[1]!);
  const node = store.get('nodes', '', name);
  if (!node) {
    status(res, 404, 'NotFound', `nodes "${name}" not found`);
    return Promise.resolve();
  }
  const ep = nodeEndpoint(node);
  if (!ep) {
    status(res, 503, 'ServiceUnavailable', `no kubelet endpoint on node "${name}"`);
    return Promise.resolve();
  }
  const { cert, key } = clientFor(store);
  const headers = { ...req.headers };
  delete headers['authorization'];
  delete headers['host'];
  return new Promise<void>((resolve) => {
    const out = https.request(
      { host: ep.host, port: ep.port, method: req.method, path: `${m[2] ?? '/'}${u.search}`, headers, cert, key, rejectUnauthorized: false, timeout: 30_000 },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
        answer.on('end', resolve);
        answer.on('error', () => (res.destroy(), resolve()));
      },
    );
    out.on('timeout', () => out.destroy(new Error('timeout')));
    out.on('error', (err) => {
      if (!res.headersSent) status(res, 503, 'ServiceUnavailable', `error trying to reach service: ${err.message}`);
      else res.destroy();
      resolve();
    });
    req.pipe(out);
  });
}
