/**
 * The built nodelet against a control plane that misbehaves, and under a client-side rate
 * limit:
 *
 * - Between nodelet and the test control plane sits an HTTPS server of this test (the
 *   control plane's serving certificate, forwarding with the node's client certificate).
 *   Switched to "bomb", it answers every list, object and watch with an endless body or a
 *   gzip bomb (a few KiB expanding to 64 MiB), and every third watch with 410 so that the
 *   reflectors list again. nodelet's RSS stays within 50 MB of what it was, it logs errors
 *   naming the resource and the bound, and once the server behaves it lists, watches, runs
 *   a pod created meanwhile and renews its Lease again.
 * - With `kubeAPIQPS: 5` and `kubeAPIBurst: 1`, the requests of nodelet's main client that
 *   reach the server (pods, their status, the watches; not the Lease, the Node's status or
 *   events, which have clients of their own as in the kubelet) keep to the token bucket's
 *   rate while 60 new pods want their status written, and the Lease is renewed meanwhile.
 */
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import zlib from 'node:zlib';
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Node, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, describe, expect, it } from 'vitest';
import { LEASES, NODES, PODS } from '../../../src/controlplane/client.js';
import { loadKubeconfig } from '../../../src/controlplane/kubeconfig.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { controlPlaneFaults, type FaultRequest } from '../../control-plane/faults.js';
import { startConnectedNode, type ConnectedNode } from '../../faults/connected-node.js';
import { connectedArgs, writeConnectedConfig } from '../../helpers/connected-config.js';
import { eventually, startNodelet, type NodeletProcess } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { removeDir } from '../../helpers/cleanup.js';

const MiB = 1024 * 1024;

/** VmRSS of a process, bytes. */
function rss(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function pod(name: string): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default' },
    spec: { nodeName: 'n1', hostNetwork: true, terminationGracePeriodSeconds: 0, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] },
  };
}

/** What a request asks for: a watch, a list (a collection), or one object (a GET of a name, or any write). */
function requestKind(method: string, url: URL): 'watch' | 'list' | 'object' {
  const w = url.searchParams.get('watch');
  if (w === '1' || w === 'true') return 'watch';
  const segs = url.pathname.split('/').filter(Boolean);
  const rest = segs[0] === 'api' ? segs.slice(2) : segs.slice(3);
  const collection = rest.length === 1 || (rest[0] === 'namespaces' && rest.length === 3);
  return method === 'GET' && collection ? 'list' : 'object';
}

/** Writes `chunk` for ever (respecting back-pressure) until the client goes away. */
function endless(res: http.ServerResponse, chunk: Buffer): void {
  const pump = () => {
    while (!res.destroyed && res.write(chunk));
    if (!res.destroyed) res.once('drain', pump);
  };
  pump();
}

/** A JSON document that never ends: `head`, then `fill` for ever. */
const ENDLESS = {
  list: { head: '{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[', fill: '{"metadata":{"name":"p","namespace":"default"}},' },
  object: { head: '{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","annotations":{"a":"', fill: 'x' },
  watch: { head: '{"type":"ADDED","object":{"metadata":{"name":"', fill: 'x' },
};

/** A few KiB of gzip expanding to a 64 MiB document of the kind. */
function gzipBombs(): Record<'list' | 'object' | 'watch', Buffer> {
  const pad = Buffer.alloc(64 * MiB, 'a');
  const bomb = (head: string, tail: string) => zlib.gzipSync(Buffer.concat([Buffer.from(head), pad, Buffer.from(tail)]), { level: 9 });
  return {
    list: bomb('{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"', '"}}]}'),
    object: bomb(ENDLESS.object.head, '"}}}'),
    watch: bomb(ENDLESS.watch.head, '"}}}\n'),
  };
}

/**
 * An HTTPS server between nodelet and the control plane, with the control plane's serving
 * certificate. `pass`: every request is forwarded with the node's client certificate.
 * `bomb`: every request is answered by the test (see the file's comment).
 */
class BombProxy {
  mode: 'pass' | 'bomb' = 'pass';
  /** Answers given in bomb mode, by kind and body. */
  readonly served = new Map<string, number>();
  readonly #open = new Set<http.ServerResponse>();
  readonly #counts = { watch: 0, list: 0, object: 0 };
  readonly #bombs = gzipBombs();
  #server!: https.Server;
  #agent!: https.Agent;
  #upstream!: URL;
  url = '';

  static async start(cluster: TestCluster, nodeKubeconfig: string): Promise<BombProxy> {
    const p = new BombProxy();
    const access = loadKubeconfig(nodeKubeconfig);
    p.#upstream = new URL(cluster.cp.url);
    p.#agent = new https.Agent({ keepAlive: true, ca: access.ca, cert: access.cert, key: access.key });
    const pki = path.dirname(cluster.cp.caFile);
    p.#server = https.createServer({ cert: fs.readFileSync(path.join(pki, 'server.crt')), key: fs.readFileSync(path.join(pki, 'server.key')) }, (req, res) => p.#handle(req, res));
    await new Promise<void>((resolve) => p.#server.listen(0, '127.0.0.1', resolve));
    p.url = `https://127.0.0.1:${(p.#server.address() as AddressInfo).port}`;
    return p;
  }

  /** Switches mode and cuts every answer in flight (the open watches), so that nodelet asks again. */
  set(mode: 'pass' | 'bomb'): void {
    this.mode = mode;
    for (const res of this.#open) res.destroy();
  }

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    this.#open.add(res);
    res.on('close', () => this.#open.delete(res));
    if (this.mode === 'pass') this.#forward(req, res);
    else this.#bomb(req, res);
  }

  #forward(req: http.IncomingMessage, res: http.ServerResponse): void {
    const up = https.request({ host: this.#upstream.hostname, port: this.#upstream.port, method: req.method, path: req.url, headers: { ...req.headers, host: this.#upstream.host }, agent: this.#agent });
    req.pipe(up);
    up.on('response', (u) => {
      res.writeHead(u.statusCode ?? 502, u.headers);
      u.pipe(res);
      u.on('error', () => res.destroy());
    });
    up.on('error', () => res.destroy());
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
  }

  #bomb(req: http.IncomingMessage, res: http.ServerResponse): void {
    req.resume();
    const kind = requestKind(req.method ?? 'GET', new URL(req.url ?? '/', 'https://x'));
    const n = this.#counts[kind]++;
    const how = kind === 'watch' && n % 3 === 2 ? 'gone' : n % 2 === 0 ? 'endless' : 'gzip';
    this.served.set(`${kind} ${how}`, (this.served.get(`${kind} ${how}`) ?? 0) + 1);
    if (how === 'gone') {
      res.writeHead(410, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'Expired', code: 410, message: 'too old resource version' }));
    } else if (how === 'gzip') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
      res.end(this.#bombs[kind]);
    } else {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write(ENDLESS[kind].head);
      endless(res, Buffer.from(ENDLESS[kind].fill.repeat(Math.ceil((64 * 1024) / ENDLESS[kind].fill.length))));
    }
  }

  async close(): Promise<void> {
    this.set('pass');
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    this.#agent.destroy();
  }
}

describe('answers past the bounds', () => {
  let cluster: TestCluster | undefined;
  let cri: FakeRuntime | undefined;
  let proxy: BombProxy | undefined;
  let nodelet: NodeletProcess | undefined;

  afterAll(async () => {
    nodelet?.kill('SIGTERM');
    await nodelet?.exited;
    await proxy?.close();
    await cri?.stop();
    await cluster?.deletePods().catch(() => undefined);
    await cluster?.close();
    if (cluster) removeDir(cluster.dir); // nodelet leaves pods' volumes mounted, as the kubelet
  });

  it('endless answers and gzip bombs for lists, objects and watches: RSS within 50 MB, errors naming the resource and the bound, recovery once the server behaves', async () => {
    cluster = await startTestCluster({ prefix: 'nodelet-client-limits-' });
    const { api, dir } = cluster;
    cri = await startFakeRuntime();
    const kc = cluster.nodeKubeconfig('n1');
    proxy = await BombProxy.start(cluster, kc);
    fs.writeFileSync(kc, fs.readFileSync(kc, 'utf8').split(cluster.cp.url).join(proxy.url));
    await writeConnectedConfig(dir, cri.socketPath);
    const n = startNodelet(connectedArgs(dir, 'n1', kc));
    nodelet = n;
    await n.waitForMsg(/nodelet is ready/, 30_000);
    await n.waitForMsg(/^listed pods \(list 1\)/, 15_000);
    await eventually(async () => (await api.get<Node>(NODES, { name: 'n1' }).catch(() => undefined))?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'), 15_000);
    await sleep(2000);
    const start = Math.max(rss(n.pid), rss(n.pid));

    // Misbehave for 8 s; a pod is created meanwhile.
    const fromRecord = n.records.length;
    proxy.set('bomb');
    await api.create(PODS, pod('during-the-bombs'));
    let peak = start;
    // At least 8 s, and until every kind of bad answer was served and refused (at most 40 s).
    const wanted = ['list endless', 'list gzip', 'object endless', 'object gzip', 'watch endless', 'watch gzip', 'watch gone'];
    const errors = () => n.records.slice(fromRecord).filter((r) => r.level === 'error').map((r) => r.msg);
    const seenAll = () => wanted.every((k) => proxy!.served.has(k)) && errors().some((m) => / a list page of pods /.test(m)) && errors().some((m) => / a watch event of pods /.test(m)) && errors().some((m) => / a watch event of nodes /.test(m));
    const began = Date.now();
    while (Date.now() - began < 8000 || (!seenAll() && Date.now() - began < 40_000)) {
      peak = Math.max(peak, rss(n.pid));
      await sleep(50);
    }
    expect([...proxy.served.keys()].sort()).toEqual(expect.arrayContaining(wanted));
    expect(errors()).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^answer too large: GET \/api\/v1\/pods: a list page of pods is larger than 8 MiB, nodelet's bound for a list page/),
        expect.stringMatching(/^answer too large: WATCH \/api\/v1\/pods: a watch event of pods is larger than 4 MiB, nodelet's bound for a watch event/),
        expect.stringMatching(/^answer too large: WATCH \/api\/v1\/nodes: a watch event of nodes is larger than 4 MiB/),
      ]),
    );
    // An object's bound shows in the logs of what asked for it (the Lease, the Node's status, events).
    expect(n.records.slice(fromRecord).some((r) => /the answer \((leases|nodes|nodes\/status|events)\) is larger than 4 MiB, nodelet's bound for one object/.test(JSON.stringify(r)))).toBe(true);
    expect(n.child.exitCode).toBe(null);
    console.log(`nodelet RSS: ${(start / MiB).toFixed(1)} MiB at the start, ${(peak / MiB).toFixed(1)} MiB at the peak under the bombs; answers served: ${JSON.stringify(Object.fromEntries(proxy.served))}`);
    expect(peak - start).toBeLessThan(50 * 1000 * 1000);

    // The server behaves again: nodelet lists, watches, runs the pod and renews its Lease.
    const lists = n.records.filter((r) => /^listed pods/.test(r.msg)).length;
    const leaseBefore = (await api.get<Lease>(LEASES, { namespace: 'kube-node-lease', name: 'n1' })).spec!.renewTime;
    proxy.set('pass');
    // The reflectors' backoff is at most 30 s.
    await eventually(() => n.records.filter((r) => /^listed pods/.test(r.msg)).length > lists, 45_000);
    const running = await eventually(async () => {
      const p = await api.get<Pod>(PODS, { namespace: 'default', name: 'during-the-bombs' });
      return p.status?.phase === 'Running' ? p : undefined;
    }, 20_000);
    expect(running.status!.containerStatuses![0]!.ready).toBe(true);
    await eventually(async () => (await api.get<Lease>(LEASES, { namespace: 'kube-node-lease', name: 'n1' })).spec!.renewTime !== leaseBefore, 20_000);
    // Watching again: a pod created now runs too.
    await api.create(PODS, pod('after-the-bombs'));
    await eventually(async () => (await api.get<Pod>(PODS, { namespace: 'default', name: 'after-the-bombs' })).status?.phase === 'Running', 20_000);
  }, 200_000);
});

describe('kubeAPIQPS', () => {
  let node: ConnectedNode | undefined;

  afterAll(async () => {
    await node?.api.listAll<Pod>(PODS, { namespace: 'default' }).then(async ({ items }) => {
      for (const p of items) await node!.api.delete(PODS, { namespace: 'default', name: p.metadata!.name! }).catch(() => undefined);
    });
    await node?.close();
  });

  it('kubeAPIQPS 5 with kubeAPIBurst 1 holds the main client to 5 requests a second at the server, while the Lease is renewed', async () => {
    node = await startConnectedNode({ prefix: 'nodelet-qps-', config: { kubeAPIQPS: 5, kubeAPIBurst: 1 } });
    const faults = controlPlaneFaults(node.cp);
    const t0 = performance.now();
    const main: number[] = [];
    const leases: number[] = [];
    // The heartbeat (Lease, the Node and its status) and events have clients of their own.
    const heartbeatOrEvents = (r: FaultRequest) => /\/leases(\/|$)/.test(r.path) || /\/events(\/|$)/.test(r.path) || r.path === '/api/v1/nodes/n1' || r.path === '/api/v1/nodes/n1/status';
    faults.observe = (r) => {
      if (r.user !== 'system:node:n1') return;
      if (/\/leases\//.test(r.path) && r.method === 'PUT') leases.push(performance.now() - t0);
      if (!heartbeatOrEvents(r)) main.push(performance.now() - t0);
    };
    // 60 pods at once: each wants its status written, far more than 5 a second.
    const created = performance.now() - t0;
    await Promise.all(Array.from({ length: 60 }, (_, i) => node!.api.create(PODS, pod(`qps-${i}`))));
    // Every pod's status written (Running in the API) at the bucket's pace: about 12 s.
    await eventually(async () => (await node!.api.listAll<Pod>(PODS, { namespace: 'default' })).items.filter((p) => p.status?.phase === 'Running').length === 60, 40_000, 250);
    const end = performance.now() - t0;
    const window = main.filter((t) => t >= created && t <= end);
    // The bucket: at most burst + qps × span requests in any span (+1 for the network's jitter
    // between the client's send and the server's receipt).
    let worst = -Infinity;
    for (let i = 0; i < window.length; i++) {
      for (let j = i; j < window.length; j++) {
        const allowed = 1 + (5 * (window[j]! - window[i]!)) / 1000 + 1;
        worst = Math.max(worst, j - i + 1 - allowed);
      }
    }
    const span = (window.at(-1)! - window[0]!) / 1000;
    const rate = (window.length - 1) / span;
    const gaps = window.slice(1).map((t, i) => t - window[i]!);
    // A gap of one token's refill (200 ms, give or take the network): the bucket held that request back.
    const paced = gaps.filter((g) => g >= 150 && g <= 260).length / gaps.length;
    const renewals = leases.filter((t) => t >= created && t <= end).length;
    console.log(`main client: ${window.length} requests in ${span.toFixed(1)} s (${rate.toFixed(2)}/s); worst excess over the bucket in any span: ${worst.toFixed(2)}; gaps of one refill: ${(paced * 100).toFixed(0)} %, shortest gap ${Math.min(...gaps).toFixed(0)} ms; Lease renewals meanwhile: ${renewals}`);
    expect(window.length).toBeGreaterThanOrEqual(60);
    // Never above the bucket: in any span at most burst + 5/s × span (+1 for jitter).
    expect(worst).toBeLessThanOrEqual(0);
    expect(rate).toBeLessThanOrEqual(5.3);
    // The limit is what paced them: most requests went one refill after the one before.
    expect(paced).toBeGreaterThan(0.5);
    // The heartbeat client is not throttled: behind a backlog of 60 requests at 5 a second a
    // renewal would wait ~12 s; the 4 s Lease is renewed well within its duration throughout.
    const leaseTimes = leases.filter((t) => t >= created - 4000 && t <= end + 4000);
    const leaseGaps = leaseTimes.slice(1).map((t, i) => t - leaseTimes[i]!);
    console.log(`Lease renewals: longest gap ${Math.max(...leaseGaps).toFixed(0)} ms`);
    expect(renewals).toBeGreaterThan(0);
    expect(Math.max(...leaseGaps)).toBeLessThan(4000);
  }, 90_000);
});
