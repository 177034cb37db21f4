/**
 * Plain-HTTP /healthz on healthzBindAddress:healthzPort (the kubelet's 127.0.0.1:10248).
 * `200 ok` while every check passes; `500` listing the failing checks otherwise;
 * `?verbose` lists every check. Nothing else is served here.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { renderHealthz, type HealthRegistry } from './checks.js';

export class HealthzServer {
  readonly #server: http.Server;

  constructor(
    private readonly opts: { host: string; port: number; health: HealthRegistry },
  ) {
    this.#server = http.createServer((req, res) => void this.#handle(req, res));
    this.#server.keepAliveTimeout = 5_000;
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== '/healthz' && !url.pathname.startsWith('/healthz/')) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('404 page not found\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { 'content-type': 'text/plain; charset=utf-8', allow: 'GET, HEAD' }).end('method not allowed\n');
      return;
    }
    const report = await this.opts.health.run();
    // /healthz/<name> asks for one check, as the Kubernetes healthz mux does.
    const one = url.pathname.slice('/healthz/'.length);
    if (one) {
      const r = report.results.find((x) => x.name === one);
      if (!r) {
        res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end(`check ${one} not found\n`);
        return;
      }
      res.writeHead(r.ok ? 200 : 500, { 'content-type': 'text/plain; charset=utf-8' }).end(r.ok ? 'ok' : `[-]${r.name} failed: ${r.reason}\n`);
      return;
    }
    const { status, body } = renderHealthz(report, url.searchParams.has('verbose'));
    res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'x-content-type-options': 'nosniff' }).end(req.method === 'HEAD' ? undefined : body);
  }

  /** Listens; resolves with the bound address (port 0 picks a free one). */
  start(): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(this.opts.port, this.opts.host, () => {
        this.#server.off('error', reject);
        resolve(this.#server.address() as AddressInfo);
      });
    });
  }

  stop(): Promise<void> {
    return new Promise((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeAllConnections();
    });
  }
}

/**
 * Liveness of the event loop: a timer that should tick every `periodMs`; the check
 * fails when the last tick is older than `maxLagMs`. (A fully frozen loop cannot answer
 * at all; this catches a loop that is alive but starved.)
 */
export function eventLoopCheck(periodMs = 500, maxLagMs = 10_000) {
  let last = Date.now();
  const t = setInterval(() => {
    last = Date.now();
  }, periodMs);
  t.unref();
  return {
    name: 'eventloop',
    check() {
      const lag = Date.now() - last;
      if (lag > maxLagMs) throw new Error(`event loop stalled for ${lag}ms`);
    },
    stop() {
      clearInterval(t);
    },
  };
}
