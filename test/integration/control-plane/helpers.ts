/**
 * A small HTTPS client for the control-plane tests: requests with a bearer token (or none),
 * JSON/YAML bodies, gzip left undecoded so tests can see it, and a watch reader that
 * collects the stream's JSON documents.
 */
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { runKubectl, type KubectlResult } from '../../helpers/kubectl.js';

export const TOKEN = 'admin-token';

export interface Resp {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  raw: Buffer;
  text: string;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export interface ReqOpts {
  body?: unknown;
  contentType?: string;
  headers?: Record<string, string>;
  token?: string | null;
}

export function request(cp: ControlPlane, method: string, path: string, o: ReqOpts = {}): Promise<Resp> {
  const ca = fs.readFileSync(cp.caFile);
  const body = o.body === undefined ? undefined : typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
  const headers: Record<string, string> = { ...(o.headers ?? {}) };
  if (o.token !== null) headers['Authorization'] = `Bearer ${o.token ?? TOKEN}`;
  if (body !== undefined) {
    headers['Content-Type'] = o.contentType ?? 'application/json';
    // DELETE is not chunked by default in node: frame the body explicitly.
    headers['Content-Length'] = String(Buffer.byteLength(body));
  }
  return new Promise((resolve, reject) => {
    const req = https.request(`${cp.url}${path}`, { method, ca, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const raw = Buffer.concat(chunks);
        const text = raw.toString('utf8');
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, raw, text, json });
      });
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

export interface WatchStream {
  status: number;
  events: any[]; // eslint-disable-line @typescript-eslint/no-explicit-any
  ended: Promise<void>;
  /** Resolves once at least n events arrived (bounded by timeoutMs). */
  waitFor(n: number, timeoutMs?: number): Promise<any[]>; // eslint-disable-line @typescript-eslint/no-explicit-any
  close(): void;
  body: string;
}

export function watch(cp: ControlPlane, path: string, headers: Record<string, string> = {}): Promise<WatchStream> {
  const ca = fs.readFileSync(cp.caFile);
  return new Promise((resolve, reject) => {
    const req = https.request(`${cp.url}${path}`, { method: 'GET', ca, headers: { Authorization: `Bearer ${TOKEN}`, ...headers } }, (res) => {
      const events: any[] = []; // eslint-disable-line @typescript-eslint/no-explicit-any
      let buf = '';
      const waiters: Array<() => void> = [];
      let endResolve!: () => void;
      const ended = new Promise<void>((r) => (endResolve = r));
      const s: WatchStream = {
        status: res.statusCode ?? 0,
        events,
        ended,
        body: '',
        waitFor(n, timeoutMs = 3000) {
          return new Promise((ok, fail) => {
            const check = (): boolean => {
              if (events.length >= n) {
                clearTimeout(t);
                ok(events);
                return true;
              }
              return false;
            };
            const t = setTimeout(() => fail(new Error(`timed out waiting for ${n} events, got ${JSON.stringify(events.map((e) => e.type))}`)), timeoutMs);
            const again = (): void => {
              if (!check()) waiters.push(again);
            };
            again();
          });
        },
        close() {
          req.destroy();
        },
      };
      res.on('data', (c: Buffer) => {
        buf += c.toString('utf8');
        s.body += c.toString('utf8');
        let i: number;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (line !== '') events.push(JSON.parse(line));
        }
        for (const w of waiters.splice(0)) w();
      });
      res.on('end', () => endResolve());
      res.on('close', () => endResolve());
      resolve(s);
    });
    req.on('error', (e) => {
      if ((e as NodeJS.ErrnoException).code !== 'ECONNRESET') reject(e);
    });
    req.end();
  });
}

export function pod(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name, ...((extra['metadata'] as object) ?? {}) }, spec: { containers: [{ name: 'c', image: 'busybox' }], ...((extra['spec'] as object) ?? {}) } };
}

/** Makes fresh namespaces `<prefix>1`, `<prefix>2`, ... on the control plane `cp()` returns (so tests never share one). */
export function namespaces(cp: () => ControlPlane, prefix: string): () => Promise<string> {
  let n = 0;
  return async () => {
    const name = `${prefix}${++n}`;
    await request(cp(), 'POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name } } });
    return name;
  };
}

/** A control plane of a test file's own, with kubectl as its admin. */
export interface AdminControlPlane {
  cp: ControlPlane;
  /** A temp folder: the control plane's PKI, the admin's `kubeconfig`, kubectl's HOME. */
  dir: string;
  /** The admin's kubeconfig (system:masters). */
  kubeconfig: string;
  /** kubectl as the admin, run to its end; `input` is its stdin. */
  kubectl(args: string[], input?: string): Promise<KubectlResult>;
  /** Stops the control plane and removes the folder. */
  close(): Promise<void>;
}

/**
 * Starts a control plane (no node lifecycle controller) whose PKI is in a new temp folder
 * `<prefix>*`, with the admin's kubeconfig there; `token`: a bearer token for the admin too.
 */
export async function startAdminControlPlane(prefix: string, o: { token?: string } = {}): Promise<AdminControlPlane> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const kubeconfig = path.join(dir, 'kubeconfig');
  const cp = await startControlPlane({ nodeLifecycleIntervalMs: 0, pkiDir: path.join(dir, 'pki') }).catch((err: unknown) => {
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  });
  cp.writeKubeconfig(kubeconfig, { user: 'admin', groups: ['system:masters'] });
  if (o.token) cp.addToken(o.token, 'admin', ['system:masters']);
  return {
    cp,
    dir,
    kubeconfig,
    kubectl: (args, input) => runKubectl({ kubeconfig, home: dir }, args, input),
    async close() {
      await cp.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
