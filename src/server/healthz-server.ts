/**
 * Plain-HTTP /healthz on healthzBindAddress:healthzPort (the kubelet's 127.0.0.1:10248).
 * `200 ok` while every check passes; `500` listing the failing checks otherwise;
 * `?verbose` lists every check. Nothing else is served here.
 *
 * Any local process can reach this port without credentials, so no request may end or
 * wedge it: the target is parsed defensively (400 with the reason), malformed requests get
 * 400/431 (http-hardening.ts), and a handler that fails answers 500 instead of rejecting.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { errorMessage } from '../errors.js';
import { silentLogger, type Logger } from '../log.js';
import { answerClientError, answerRaw, serverLimits } from './http-hardening.js';
import { parseRequestTarget, type RequestTarget } from './request-target.js';
import { renderHealthz, type HealthRegistry } from '../health/checks.js';

const TEXT = { 'content-type': 'text/plain; charset=utf-8', 'x-content-type-options': 'nosniff' };

export class HealthzServer {
  readonly #server: http.Server;
  readonly #log: Logger;

  constructor(
    private readonly opts: { host: string; port: number; health: HealthRegistry; logger?: Logger },
  ) {
    this.#log = (opts.logger ?? silentLogger()).child({ component: 'healthz-server' });
    const limits = serverLimits();
    this.#server = http.createServer(limits, (req, res) => {
      req.resume();
      this.#handle(req, res).catch((err: unknown) => {
        this.#log.warn({ err: errorMessage(err), url: req.url?.slice(0, 200) }, 'healthz request failed');
        if (!res.headersSent) res.writeHead(500, TEXT).end('internal error\n');
        else res.destroy();
      });
    });
    this.#server.on('clientError', answerClientError(this.#log, limits.maxHeaderSize));
    // CONNECT reaches only a 'connect' listener (without one Node drops the connection
    // unanswered): the answer any other method /healthz does not serve gets.
    this.#server.on('connect', (req: http.IncomingMessage, socket: import('node:stream').Duplex) => {
      socket.on('error', () => undefined);
      let target: RequestTarget;
      try {
        target = parseRequestTarget(req.url);
      } catch (err) {
        return answerRaw(socket, 400, 'Bad Request', `400 bad request: ${errorMessage(err)}\n`);
      }
      if (target.segments[0] !== 'healthz' || target.segments.length > 2) return answerRaw(socket, 404, 'Not Found', '404 page not found\n');
      answerRaw(socket, 405, 'Method Not Allowed', 'method not allowed\n', { Allow: 'GET, HEAD' });
    });
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let target: RequestTarget;
    try {
      target = parseRequestTarget(req.url);
    } catch (err) {
      res.writeHead(400, TEXT).end(`400 bad request: ${errorMessage(err)}\n`);
      return;
    }
    const { segments, query } = target;
    if (segments[0] !== 'healthz' || segments.length > 2) {
      res.writeHead(404, TEXT).end('404 page not found\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { ...TEXT, allow: 'GET, HEAD' }).end('method not allowed\n');
      return;
    }
    const report = await this.opts.health.run();
    // /healthz/<name> asks for one check, as the Kubernetes healthz mux does.
    const one = segments[1] ? decodeURIComponent(segments[1]) : '';
    if (one) {
      const r = report.results.find((x) => x.name === one);
      if (!r) {
        res.writeHead(404, TEXT).end(`check ${one} not found\n`);
        return;
      }
      res.writeHead(r.ok ? 200 : 500, TEXT).end(r.ok ? 'ok' : `[-]${r.name} failed: ${r.reason}\n`);
      return;
    }
    const { status, body } = renderHealthz(report, query.has('verbose'));
    res.writeHead(status, TEXT).end(req.method === 'HEAD' ? undefined : body);
  }

  /** Listens; resolves with the bound address (port 0 picks a free one). */
  start(): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(this.opts.port, this.opts.host, () => {
        this.#server.off('error', reject);
        // After listening, an error (EMFILE on accept under a connection flood) is logged, never fatal.
        this.#server.on('error', (err) => this.#log.warn({ err: err.message }, 'healthz server error'));
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
