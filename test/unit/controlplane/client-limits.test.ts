/**
 * The control-plane client's bounds and rate limit against an in-process HTTP server on
 * loopback that answers at once: an endless answer, a gzip bomb, a Content-Length past the
 * bound, an endless run of empty deflate blocks, an endless watch event are each abandoned
 * at their bound with an error naming the request, the resource and the bound; a list whose
 * pages are too large is read in smaller pages; requests wait for the token bucket's tokens
 * on the injected clock.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BODY_LIMITS, ControlPlaneClient, NODES, PODS, isTooLarge } from '../../../src/controlplane/client.js';
import { TokenBucket } from '../../../src/controlplane/rate-limit.js';
import { Reflector } from '../../../src/controlplane/reflector.js';
import { NodeletError } from '../../../src/errors.js';
import { createLogger } from '../../../src/log.js';
import { VirtualClock } from '../../helpers/clock.js';

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

let server: http.Server;
let url: string;
let handler: Handler = (_req, res) => res.end('{}');
/** Every request the server got: method and URL. */
let seen: string[] = [];
/** Answers the server had to stop writing because the client went away. */
let abandoned = 0;
let onAbandoned: (() => void) | undefined;
/** Resolves once the server saw an answer abandoned by the client (its connection closed mid-body). */
function anAbandonedAnswer(): Promise<void> {
  if (abandoned > 0) return Promise.resolve();
  return new Promise((resolve) => (onAbandoned = resolve));
}
const clients: ControlPlaneClient[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    res.on('close', () => {
      if (!res.writableFinished) {
        abandoned++;
        onAbandoned?.();
      }
    });
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterEach(async () => {
  seen = [];
  abandoned = 0;
  onAbandoned = undefined;
  handler = (_req, res) => res.end('{}');
  await Promise.all(clients.splice(0).map((c) => c.close(0)));
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function client(o: Partial<ConstructorParameters<typeof ControlPlaneClient>[0]> = {}): ControlPlaneClient {
  const c = new ControlPlaneClient({ access: { file: 'test', server: url, namespace: 'default', insecureSkipTlsVerify: false }, ...o });
  clients.push(c);
  return c;
}

/** Writes `chunk` for ever (respecting back-pressure) until the client goes away. */
function endless(res: http.ServerResponse, chunk: Buffer): void {
  const pump = () => {
    while (!res.destroyed && res.write(chunk));
    if (!res.destroyed) res.once('drain', pump);
  };
  pump();
}

const KiB = 1024;
const small = { object: 64 * KiB, listPage: 128 * KiB, watchEvent: 64 * KiB };

/** A JSON document whose one string holds `n` bytes of 'a', gzipped (a few KiB for MiBs). */
function gzipBomb(prefix: string, n: number, suffix: string): Buffer {
  return zlib.gzipSync(Buffer.concat([Buffer.from(prefix), Buffer.alloc(n, 'a'), Buffer.from(suffix)]), { level: 9 });
}

async function rejection(p: Promise<unknown>): Promise<NodeletError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(NodeletError);
  return err as NodeletError;
}

describe('answers are bounded as they are read', () => {
  it('an endless object answer stops at 4 MiB (the default bound), naming the request, the resource and the bound, and its connection is dropped', async () => {
    handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"kind":"Node","metadata":{"name":"n1","annotations":{"a":"');
      endless(res, Buffer.alloc(64 * KiB, 'x'));
    };
    const err = await rejection(client().get(NODES, { name: 'n1' }));
    expect(err.message).toBe("GET /api/v1/nodes/n1: the answer (nodes) is larger than 4 MiB, nodelet's bound for one object; the rest was not read");
  });

  it('the message and details of a too-large answer', async () => {
    handler = (_req, res) => {
      res.writeHead(200);
      endless(res, Buffer.alloc(16 * KiB, ' '));
    };
    const err = await rejection(client({ bodyLimits: small }).get(PODS, { namespace: 'ns', name: 'p' }));
    expect(err.code).toBe('UNAVAILABLE');
    expect(err.details).toEqual({ status: 200, reason: 'TooLarge', method: 'GET', path: '/api/v1/namespaces/ns/pods/p', resource: 'pods', kind: 'object', limitBytes: 64 * KiB });
    expect(isTooLarge(err)).toBe(true);
    await anAbandonedAnswer();
    expect(abandoned).toBe(1);
  });

  it('an answer of exactly the bound is read; one byte more is refused', async () => {
    const doc = (n: number) => {
      const head = '{"kind":"Node","metadata":{"name":"n1"},"x":"';
      return head + 'y'.repeat(n - head.length - 2) + '"}';
    };
    let size = 64 * KiB;
    handler = (_req, res) => res.end(doc(size));
    const c = client({ bodyLimits: small });
    expect((await c.get<{ metadata?: { name?: string }; x?: string }>(NODES, { name: 'n1' })).x).toHaveLength(64 * KiB - 47);
    size += 1;
    expect((await rejection(c.get(NODES, { name: 'n1' }))).details.reason).toBe('TooLarge');
  });

  it('a Content-Length past the bound is refused before the body is read', async () => {
    handler = (_req, res) => {
      res.writeHead(200, { 'content-length': String(10 * 1024 * KiB) });
      endless(res, Buffer.alloc(16 * KiB, ' '));
    };
    const err = await rejection(client({ bodyLimits: small }).get(NODES, { name: 'n1' }));
    expect(err.details).toMatchObject({ reason: 'TooLarge', resource: 'nodes', limitBytes: 64 * KiB });
    await anAbandonedAnswer();
    expect(abandoned).toBe(1);
  });

  it('a gzip bomb is counted as it expands: 8 MiB from a few KiB is refused at the bound', async () => {
    const bomb = gzipBomb('{"kind":"Node","metadata":{"name":"n1"},"x":"', 8 * 1024 * KiB, '"}');
    expect(bomb.length).toBeLessThan(64 * KiB);
    handler = (_req, res) => {
      res.writeHead(200, { 'content-encoding': 'gzip', 'content-length': String(bomb.length) });
      res.end(bomb);
    };
    const err = await rejection(client({ bodyLimits: small }).get(NODES, { name: 'n1' }));
    expect(err.message).toMatch(/^GET \/api\/v1\/nodes\/n1: the answer \(nodes\) is larger than 64 KiB/);
  });

  it('a gzip answer that never ends and never expands (empty deflate blocks) is cut by its own size', async () => {
    handler = (_req, res) => {
      res.writeHead(200, { 'content-encoding': 'gzip' });
      // gzip header, then empty stored blocks (a sync flush each) for ever.
      res.write(Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]));
      endless(res, Buffer.from(Array.from({ length: 2000 }, () => [0, 0, 0, 0xff, 0xff]).flat()));
    };
    const err = await rejection(client({ bodyLimits: small }).get(NODES, { name: 'n1' }));
    expect(err.details).toMatchObject({ reason: 'TooLarge', resource: 'nodes' });
  });

  it('a small gzip answer is decoded as before', async () => {
    const body = zlib.gzipSync(JSON.stringify({ kind: 'Node', metadata: { name: 'n1' } }));
    handler = (_req, res) => {
      res.writeHead(200, { 'content-encoding': 'gzip' });
      res.end(body);
    };
    expect(await client({ bodyLimits: small }).get(NODES, { name: 'n1' })).toEqual({ kind: 'Node', metadata: { name: 'n1' } });
  });

  it('an error answer (a Status) is bounded too', async () => {
    handler = (_req, res) => {
      res.writeHead(500);
      endless(res, Buffer.alloc(16 * KiB, ' '));
    };
    const err = await rejection(client({ bodyLimits: small }).create(PODS, { metadata: { name: 'p', namespace: 'ns' } }));
    expect(err.details).toMatchObject({ reason: 'TooLarge', status: 500, method: 'POST', resource: 'pods' });
  });

  it('a write names its subresource', async () => {
    handler = (_req, res) => {
      res.writeHead(200);
      endless(res, Buffer.alloc(16 * KiB, ' '));
    };
    const err = await rejection(client({ bodyLimits: small }).patch(PODS, { namespace: 'ns', name: 'p' }, { status: {} }, { type: 'strategic', subresource: 'status' }));
    expect(err.message).toMatch(/^PATCH \/api\/v1\/namespaces\/ns\/pods\/p\/status: the answer \(pods\/status\) is larger than 64 KiB/);
  });
});

describe('list pages', () => {
  const pod = (i: number) => ({ metadata: { name: `p${i}`, namespace: 'ns', annotations: { pad: 'z'.repeat(20 * KiB) } } });
  /** A server holding 10 pods of ~20 KiB, paged by `limit` with `continue` = the next index. */
  function pagedServer(): void {
    handler = (req, res) => {
      const q = new URL(req.url!, 'http://x').searchParams;
      const limit = Number(q.get('limit'));
      const from = Number(q.get('continue') || 0);
      const items = Array.from({ length: Math.min(limit, 10 - from) }, (_, k) => pod(from + k));
      const next = from + items.length;
      res.end(JSON.stringify({ kind: 'PodList', metadata: { resourceVersion: '7', ...(next < 10 ? { continue: String(next) } : {}) }, items }));
    };
  }

  it('a page past the bound is asked again with half the limit; the list is whole and the smaller limit is returned', async () => {
    pagedServer();
    const r = await client({ bodyLimits: small }).listAll<{ metadata: { name: string } }>(PODS, { limit: 8 });
    expect(r.items.map((p) => p.metadata.name)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', 'p8', 'p9']);
    expect(r).toMatchObject({ resourceVersion: '7', limit: 4 });
    // 8 pods of 20 KiB pass 128 KiB; 4 fit.
    expect(seen.map((s) => new URL(s.split(' ')[1]!, 'http://x').searchParams.toString())).toEqual(['limit=8', 'limit=4', 'limit=4&continue=4', 'limit=4&continue=8']);
  });

  it('an endless list page is refused at one object a page, naming the list page bound', async () => {
    handler = (_req, res) => {
      res.writeHead(200);
      res.write('{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[');
      endless(res, Buffer.from(`${JSON.stringify(pod(0))},`.repeat(4)));
    };
    const err = await rejection(client({ bodyLimits: small }).listAll(PODS, { fieldSelector: 'spec.nodeName=n1', limit: 4 }));
    expect(err.message).toBe("GET /api/v1/pods: a list page of pods is larger than 128 KiB, nodelet's bound for a list page; the rest was not read");
    expect(seen.map((s) => new URL(s.split(' ')[1]!, 'http://x').searchParams.get('limit'))).toEqual(['4', '2', '1']);
  });

  it('an answer that is not a list is a clear error', async () => {
    handler = (_req, res) => res.end('{"kind":"Status"}');
    await expect(client().listAll(PODS)).rejects.toThrow('GET /api/v1/pods: the answer is not a list of pods');
  });
});

describe('watch events', () => {
  it('an endless event is refused at its bound after the events before it', async () => {
    handler = (_req, res) => {
      res.writeHead(200);
      res.write('{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"2"}}}\n{"type":"MODIFIED","object":{"metadata":{"name":"');
      endless(res, Buffer.alloc(16 * KiB, 'b'));
    };
    const events = await client({ bodyLimits: small }).watch(PODS, { fieldSelector: 'spec.nodeName=n1' });
    const got: string[] = [];
    const err = await rejection(
      (async () => {
        for await (const ev of events) got.push(ev.type);
      })(),
    );
    expect(got).toEqual(['ADDED']);
    expect(err.message).toBe("WATCH /api/v1/pods: a watch event of pods is larger than 64 KiB, nodelet's bound for a watch event; the rest was not read");
    expect(err.details).toMatchObject({ reason: 'TooLarge', resource: 'pods', kind: 'watch event', limitBytes: 64 * KiB, status: 200 });
    await anAbandonedAnswer();
    expect(abandoned).toBe(1);
  });

  it('a gzip bomb in a watch stream is refused as it expands', async () => {
    const bomb = gzipBomb('{"type":"ADDED","object":{"metadata":{"name":"', 8 * 1024 * KiB, '"}}}\n');
    handler = (_req, res) => {
      res.writeHead(200, { 'content-encoding': 'gzip' });
      res.end(bomb);
    };
    const events = await client({ bodyLimits: small }).watch(NODES, {});
    const err = await rejection(
      (async () => {
        for await (const _ of events) void _;
      })(),
    );
    expect(err.details).toMatchObject({ reason: 'TooLarge', resource: 'nodes', kind: 'watch event' });
  });

  it('many events in one long stream are fine: the bound is per event', async () => {
    const line = `${JSON.stringify({ type: 'MODIFIED', object: { metadata: { name: 'a', resourceVersion: '1' }, pad: 'p'.repeat(40 * KiB) } })}\n`;
    handler = (_req, res) => res.end(line.repeat(50));
    let n = 0;
    for await (const ev of await client({ bodyLimits: small }).watch(PODS, {})) if (ev.type === 'MODIFIED') n++;
    expect(n).toBe(50);
  });

  it('the default bound of a watch event is 4 MiB', () => {
    expect(BODY_LIMITS).toEqual({ object: 4 * 1024 * KiB, listPage: 8 * 1024 * KiB, watchEvent: 4 * 1024 * KiB });
  });
});

describe('the rate limiter', () => {
  it('each request, a watch included, takes a token: at 5 a second with a burst of 1, the second waits 200 ms and the third 400 ms on the clock', async () => {
    const clock = new VirtualClock();
    const c = client({ limiter: new TokenBucket(5, 1, clock) });
    const done: string[] = [];
    const a = c.get(NODES, { name: 'a' }).then(() => done.push('a'));
    const b = c.get(NODES, { name: 'b' }).then(() => done.push('b'));
    const w = c.watch(NODES, {}).then(() => done.push('watch'));
    await a;
    expect(seen).toEqual(['GET /api/v1/nodes/a']);
    expect(clock.sleeps).toEqual([200, 400]);
    await clock.advance(200);
    await b;
    expect(seen).toEqual(['GET /api/v1/nodes/a', 'GET /api/v1/nodes/b']);
    expect(clock.pending).toBe(1);
    await clock.advance(200);
    await w;
    expect(done).toEqual(['a', 'b', 'watch']);
    expect(seen[2]).toBe('GET /api/v1/nodes?watch=1');
  });

  it('a request abandoned while it waits is CANCELLED, never sent, and gives its token back', async () => {
    const clock = new VirtualClock();
    const c = client({ limiter: new TokenBucket(5, 1, clock) });
    await c.get(NODES, { name: 'a' });
    const ctl = new AbortController();
    const waiting = c.get(NODES, { name: 'b' }, { signal: ctl.signal });
    await clock.whenSleeping();
    ctl.abort();
    expect((await rejection(waiting)).code).toBe('CANCELLED');
    expect(seen).toEqual(['GET /api/v1/nodes/a']);
    // Its token was given back: the next request waits 200 ms, not 400.
    const next = c.get(NODES, { name: 'c' });
    await clock.whenSleeping();
    expect(clock.sleeps.at(-1)).toBe(200);
    await clock.advance(200);
    await next;
    expect(seen).toEqual(['GET /api/v1/nodes/a', 'GET /api/v1/nodes/c']);
  });

  it('without a limiter nothing waits', async () => {
    const c = client();
    await Promise.all(Array.from({ length: 20 }, (_, i) => c.get(NODES, { name: `n${i}` })));
    expect(seen).toHaveLength(20);
  });
});

describe('the reflector over a server whose answers are too large', () => {
  it('logs an error naming the resource and the bound, backs off, and lists and watches again once the server behaves', async () => {
    let bad = true;
    /** Watch answers held open, ended at the test's end. */
    const open: http.ServerResponse[] = [];
    handler = (req, res) => {
      const watch = new URL(req.url!, 'http://x').searchParams.get('watch') === '1';
      res.writeHead(200, { 'content-type': 'application/json' });
      if (bad && !watch) {
        res.write('{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[');
        endless(res, Buffer.from('{"metadata":{"name":"x"}},'.repeat(500)));
      } else if (bad) {
        res.write('{"type":"ADDED","object":{"metadata":{"name":"');
        endless(res, Buffer.alloc(16 * KiB, 'y'));
      } else if (!watch) {
        res.end(JSON.stringify({ kind: 'PodList', metadata: { resourceVersion: '10' }, items: [{ metadata: { name: 'a', namespace: 'ns', resourceVersion: '9' } }] }));
      } else {
        res.write(`${JSON.stringify({ type: 'ADDED', object: { metadata: { name: 'b', namespace: 'ns', resourceVersion: '11' } } })}\n`);
        open.push(res);
      }
    };
    const records: Array<{ level: string; msg: string; limitBytes?: number }> = [];
    const logger = createLogger({ journal: false, level: 'info', destination: { write: (line: string) => void records.push(JSON.parse(line)) } });
    const clock = new VirtualClock(undefined, { autoAdvance: true });
    const r = new Reflector({ client: client({ bodyLimits: small }), type: PODS, clock, logger, idleTimeoutMs: 0, onEvent: () => {} });
    const errors = () => records.filter((x) => x.level === 'error');
    try {
      r.start();
      // Lists fail at every page size down to one object a page, then back off and try again.
      while (errors().length < 2) await clock.whenSleeping().then(() => new Promise((resolve) => setImmediate(resolve)));
      expect(errors()[0]!.msg).toBe("answer too large: GET /api/v1/pods: a list page of pods is larger than 128 KiB, nodelet's bound for a list page; the rest was not read; retrying");
      expect(errors()[0]!.limitBytes).toBe(128 * KiB);
      expect(r.hasSynced).toBe(false);
      bad = false;
      await r.waitForSync();
      expect(r.state.items().map((o) => o.metadata!.name)).toEqual(['a']);
      // The watch now gets an endless event: an error naming the watch event's bound, then it resumes.
      open.splice(0).forEach((res) => res.destroy());
      bad = true;
      const before = errors().length;
      while (errors().length === before) await new Promise((resolve) => setImmediate(resolve));
      expect(errors().at(-1)!.msg).toMatch(/^answer too large: WATCH \/api\/v1\/pods: a watch event of pods is larger than 64 KiB, nodelet's bound for a watch event; the rest was not read; retrying$/);
      bad = false;
      while (!r.state.get('ns/b')) await new Promise((resolve) => setImmediate(resolve));
      expect(r.state.items().map((o) => o.metadata!.name).sort()).toEqual(['a', 'b']);
      expect(r.healthy()).toBe(true);
    } finally {
      await r.stop();
      open.forEach((res) => res.destroy());
    }
  });
});
