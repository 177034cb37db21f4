/**
 * Fault injection for the test control plane (the fault suite, test/faults): rules that
 * answer a request with an error of the test's choosing instead of the server's answer
 * (409, 429 with Retry-After, 500, 410 ...), or rewrite its URL before the server sees it
 * (e.g. a smaller `limit`, as a server may page sooner than asked). A rule picks requests
 * by a predicate on method and path, and may fire only on every n-th match or a number
 * of times. `observe` sees every request (after the rules), for counting writes.
 *
 * Wiring: the server's request handler calls `injectFault(req, res)` first (one line in
 * server.ts); the rules of a control plane are found by the local port its server listens
 * on, so a test gets them with `controlPlaneFaults(cp)` and nothing in the ControlPlane
 * contract changes. With no rule added, every request goes through untouched.
 */
import type http from 'node:http';
import type { TLSSocket } from 'node:tls';

export interface FaultRequest {
  method: string;
  /** The URL path, without the query. */
  path: string;
  query: URLSearchParams;
  /** The client certificate's CN, when one was sent (nodelet's is `system:node:<name>`). */
  user?: string;
}

export interface FaultRule {
  /** Which requests the rule applies to. */
  match: (r: FaultRequest) => boolean;
  /** The status to answer instead (a Kubernetes Status body is built from it). */
  respond?: { code: number; reason?: string; message?: string; headers?: Record<string, string> };
  /** Instead of answering: the URL (path and query) the server gets. */
  rewrite?: (url: URL) => string;
  /** Fire on every n-th matching request only (1: every one; 2: every second). Default 1. */
  every?: number;
  /** Fire this many times, then the rule is spent. Default: until removed. */
  times?: number;
}

interface ActiveRule extends FaultRule {
  matched: number;
  fired: number;
}

export class ControlPlaneFaults {
  readonly #rules = new Set<ActiveRule>();
  /** Requests answered (or rewritten) by a rule, in total. */
  injected = 0;
  /** Per rule-added label: how many times it fired. */
  readonly byLabel = new Map<string, number>();
  /** Sees every request that reaches the server (not the ones a rule answered). */
  observe: ((r: FaultRequest) => void) | undefined;

  /** Adds a rule; returns a function that removes it. `label` names it in `byLabel`. */
  add(rule: FaultRule, label = 'fault'): () => void {
    const active: ActiveRule & { label: string } = { ...rule, matched: 0, fired: 0, label };
    this.#rules.add(active);
    return () => this.#rules.delete(active);
  }

  clear(): void {
    this.#rules.clear();
  }

  /** Answers `req` per the first rule that fires; true when it did (the server must not). */
  handle(req: http.IncomingMessage, res: http.ServerResponse): boolean {
    const u = new URL(req.url ?? '/', 'https://x');
    const cn = (req.socket as TLSSocket).getPeerCertificate?.()?.subject?.CN;
    const r: FaultRequest = { method: req.method ?? 'GET', path: u.pathname, query: u.searchParams, ...(typeof cn === 'string' ? { user: cn } : {}) };
    for (const rule of this.#rules as Set<ActiveRule & { label: string }>) {
      if (!rule.match(r)) continue;
      rule.matched++;
      if (rule.matched % (rule.every ?? 1) !== 0) continue;
      rule.fired++;
      if (rule.times !== undefined && rule.fired >= rule.times) this.#rules.delete(rule);
      this.injected++;
      this.byLabel.set(rule.label, (this.byLabel.get(rule.label) ?? 0) + 1);
      if (rule.rewrite) {
        // Rewritten: the later rules still apply (to the request as it was sent).
        req.url = rule.rewrite(u);
        continue;
      }
      const a = rule.respond ?? { code: 500 };
      const reason = a.reason ?? (a.code === 409 ? 'Conflict' : a.code === 429 ? 'TooManyRequests' : a.code === 410 ? 'Expired' : 'InternalError');
      const body = JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: a.message ?? `injected fault: ${a.code}`, reason, code: a.code });
      res.writeHead(a.code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...a.headers });
      res.end(body);
      return true;
    }
    this.observe?.(r);
    return false;
  }
}

const byPort = new Map<number, ControlPlaneFaults>();

/** The fault rules of the control plane at `cp.url` (created on first use). */
export function controlPlaneFaults(cp: { url: string }): ControlPlaneFaults {
  const port = Number(new URL(cp.url).port);
  let f = byPort.get(port);
  if (!f) byPort.set(port, (f = new ControlPlaneFaults()));
  return f;
}

/** Called first by the server for every request: true when a fault rule answered it. */
export function injectFault(req: http.IncomingMessage, res: http.ServerResponse): boolean {
  const f = byPort.get(req.socket.localPort ?? 0);
  return f ? f.handle(req, res) : false;
}
