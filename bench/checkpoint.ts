/**
 * The checkpoint endpoint's own overhead: `POST /checkpoint/...` through nodelet's HTTPS
 * server (mTLS, authentication, Webhook authorization, pod lookup, running container from
 * the pod's status, name reservation, CRI call, archive verification and chmod) against
 * calling the same test CRI server's CheckpointContainer directly, in the same run,
 * interleaved (the order rotates every round so no side always runs on a warmer cache).
 *
 * Two clients, both with the client certificate an API server uses for its kubelet client:
 * - reused: one kept-alive connection. This is what the target applies to: the API server
 *   sends every `nodes/proxy` request (`kubectl` reaching a node) over one shared
 *   `http.Transport` with keep-alive (pkg/kubelet/client/kubelet_client.go), so a node pays
 *   the TLS handshake once per connection, not per request;
 * - fresh: a new connection per request, full handshake (no session resumption), for what
 *   a one-off client (curl, a script) pays.
 * Authorization is the kubelet's default mode, Webhook, its SubjectAccessReview answered
 * in-process and cached as configured (the count sent is printed). The pod lookup returns
 * the pod with the status the pod manager shows (the running container's ID in it).
 * Plus the per-request cost of a cached bearer token (TokenReview cache) and of a cached
 * authorization decision, each timed alone.
 *
 * Run: `npm run build && node dist/bench/checkpoint.js [rounds=400] [--quick]`. Writes its
 * section of BENCHMARKS.md (replaced on each run) unless --quick, and prints it.
 */
import fsp from 'node:fs/promises';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { realClock } from '../src/clock.js';
import { HealthRegistry } from '../src/health/checks.js';
import { createCriClient } from '../src/runtime/cri-client.js';
import type { PodSandboxConfig } from '../src/runtime/types.js';
import { Authenticator, WebhookAuthorizer, requestAttributes, type ReviewClient } from '../src/server/auth.js';
import { CheckpointService } from '../src/checkpoint/service.js';
import { createNodeServer } from '../src/server/https-server.js';
import { loadOrCreateServingCert } from '../src/server/tls.js';
import { startFakeRuntime } from '../test/cri/fake-runtime.js';
import { createTestCa } from '../test/integration/server/pki.js';
import { benchArgs } from './agent.js';
import { percentile, ratioTable, replaceNamedSection, writeSection } from './sections.js';

function post(agent: https.Agent, port: number, p: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request({ method: 'POST', hostname: '127.0.0.1', port, path: p, agent, servername: 'localhost' }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** Replaces (or appends) this benchmark's section of BENCHMARKS.md. */
export function replaceSection(doc: string, section: string): string {
  return replaceNamedSection(doc, 'checkpoint', section);
}

/** Median microseconds of `fn` over `n` calls (after as many to warm up). */
async function microseconds(n: number, fn: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < n; i++) await fn();
  const t: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    t.push((performance.now() - t0) * 1000);
  }
  return percentile(t.sort((a, b) => a - b), 50);
}

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const rounds = quick ? 10 : Math.max(10, nums[0] ?? 400);
  const warmup = quick ? 3 : 30;
  const load = () => os.loadavg().map((l) => l.toFixed(2)).join(' ');
  const loadBefore = load();
  const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-cp-'));
  const fake = await startFakeRuntime();
  const cri = createCriClient({ runtimeEndpoint: fake.endpoint, requestTimeoutMs: 30_000 });
  const uid = 'bench-uid';
  const labels = { 'io.kubernetes.pod.uid': uid, 'io.kubernetes.pod.name': 'bench', 'io.kubernetes.pod.namespace': 'default' };
  const sandbox: PodSandboxConfig = { metadata: { name: 'bench', uid, namespace: 'default', attempt: 0 }, labels, linux: { securityContext: { namespaceOptions: { network: 'NODE' } } } };
  const sid = await cri.runPodSandbox(sandbox);
  const cid = await cri.createContainer(sid, { metadata: { name: 'app', attempt: 0 }, image: { image: 'docker.io/local/busybox:latest' }, command: ['sleep', '3600'], labels: { ...labels, 'io.kubernetes.container.name': 'app' } }, sandbox);
  await cri.startContainer(cid);

  // As the pod manager shows the pod: its spec and the status of its last look at the runtime.
  const pod: Pod = {
    metadata: { namespace: 'default', name: 'bench', uid },
    spec: { containers: [{ name: 'app' }] },
    status: { phase: 'Running', containerStatuses: [{ name: 'app', containerID: `containerd://${cid}`, state: { running: { startedAt: new Date().toISOString() } }, image: 'docker.io/local/busybox:latest', imageID: '', ready: true, restartCount: 0 }] },
  };
  const pods = { getPod: (ns: string, n: string) => (ns === 'default' && n === 'bench' ? pod : undefined), listPods: () => [pod] };
  const reviews = { token: 0, sar: 0 };
  const review: ReviewClient = {
    tokenReview: async () => (reviews.token++, { authenticated: true, user: { username: 'system:serviceaccount:ops:forensics', groups: ['system:serviceaccounts'] } }),
    subjectAccessReview: async () => (reviews.sar++, { allowed: true }),
  };
  const authenticator = new Authenticator({ x509: true, anonymous: false, webhook: { client: review, cacheTtlMs: 120_000 }, clock: realClock });
  const authorizer = new WebhookAuthorizer({ client: review, cacheAuthorizedTtlMs: 300_000, cacheUnauthorizedTtlMs: 30_000, clock: realClock });
  const ca = await createTestCa();
  const client = await ca.issue({ cn: 'kube-apiserver-kubelet-client', orgs: ['system:masters'] });
  const serving = await loadOrCreateServingCert({ certDir: path.join(tmp, 'pki'), hostname: 'localhost', ips: [] });
  const rootDir = path.join(tmp, 'root');
  const server = createNodeServer({
    address: '127.0.0.1',
    port: 0,
    tls: { cert: serving.cert, key: serving.key, clientCA: ca.cert },
    authenticator,
    authorizer,
    nodeName: 'bench-node',
    health: new HealthRegistry(),
    pods,
    checkpoints: new CheckpointService({ rootDir, runtime: cri, pods, runtimeRequestTimeoutMs: 30_000, clock: realClock }),
  });
  const { port } = await server.start();
  const tls = { cert: client.cert, key: client.key, ca: serving.cert };
  const kept = new https.Agent({ keepAlive: true, maxSockets: 1, ...tls });
  const directDir = path.join(tmp, 'direct');
  await fsp.mkdir(directDir, { mode: 0o700 });

  const through = async (agent: https.Agent): Promise<number> => {
    const t0 = performance.now();
    const r = await post(agent, port, '/checkpoint/default/bench/app');
    const dt = performance.now() - t0;
    if (r.status !== 200) throw new Error(`nodelet answered ${r.status}: ${r.body}`);
    await fsp.rm((JSON.parse(r.body) as { items: string[] }).items[0]!);
    return dt;
  };
  const reused = () => through(kept);
  const fresh = async () => {
    // A new connection and a full handshake: no kept socket, no cached TLS session.
    const agent = new https.Agent({ keepAlive: false, maxCachedSessions: 0, ...tls });
    try {
      return await through(agent);
    } finally {
      agent.destroy();
    }
  };
  let n = 0;
  const direct = async (): Promise<number> => {
    const location = path.join(directDir, `direct-${n++}.tar`);
    const t0 = performance.now();
    await cri.checkpointContainer({ containerId: cid, location, timeoutSec: 0 });
    const dt = performance.now() - t0;
    await fsp.rm(location);
    return dt;
  };

  try {
    const runs: [() => Promise<number>, number[]][] = [
      [direct, []],
      [reused, []],
      [fresh, []],
    ];
    for (let i = 0; i < warmup + rounds; i++) {
      for (let k = 0; k < runs.length; k++) {
        const [fn, out] = runs[(i + k) % runs.length]!;
        const dt = await fn();
        if (i >= warmup) out.push(dt);
      }
    }
    const [a, b, c] = runs.map((r) => r[1]) as [number[], number[], number[]];
    const sarsAfterRounds = reviews.sar;
    // The caches alone: a bearer token already reviewed, an attribute set already allowed.
    const token = `Bearer ${'x'.repeat(900)}`;
    const user = await authenticator.authenticate({ authorization: token });
    const attrs = requestAttributes('POST', '/checkpoint/default/bench/app', 'bench-node')[0]!;
    const tokenUs = await microseconds(quick ? 10 : 10_000, () => authenticator.authenticate({ authorization: token }));
    const sarUs = await microseconds(quick ? 10 : 10_000, () => authorizer.authorize(user, attrs));
    const med = (x: number[]) => percentile([...x].sort((p, q) => p - q), 50);
    const section = [
      '## Checkpoint endpoint overhead (`bench/checkpoint.ts`)',
      '',
      `Run ${new Date().toISOString()} on Node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model.trim() ?? 'unknown'}), load average ${loadBefore} before and ${load()} after; ${rounds} rounds after ${warmup} warm-up, the three in rotating order.`,
      'Direct = the CRI client calling the test CRI server\'s CheckpointContainer (it writes a ~66 KiB tar). Through nodelet = `POST /checkpoint/default/bench/app` over HTTPS with a client certificate, through authentication, Webhook authorization (SubjectAccessReview cached), the pod lookup, the running container\'s ID from the pod\'s status, the CRI call, the archive\'s headers walked and its chmod, against the same CRI server, in the same process.',
      '',
      'Reused connection (one kept-alive TLS connection, as the API server\'s kubelet client keeps; the target applies here):',
      '',
      ...ratioTable(a, b),
      '',
      'Fresh connection per request (TCP + full TLS 1.3 handshake with the client certificate, no session resumption):',
      '',
      ...ratioTable(a, c),
      '',
      `TLS handshake and connection cost, fresh − reused at the median: ${(med(c) - med(b)).toFixed(2)} ms. SubjectAccessReviews sent in ${warmup + rounds} × 2 requests: ${sarsAfterRounds}. A cached bearer token costs ${tokenUs.toFixed(1)} µs per request (TokenReviews sent: ${reviews.token}), a cached authorization decision ${sarUs.toFixed(1)} µs (median of 10,000 each).`,
      '',
      `Reproduce: \`npm run build && node dist/bench/checkpoint.js ${rounds}\`.`,
    ].join('\n');
    if (!quick) await writeSection('checkpoint', section);
    process.stdout.write(`${section}\n${quick ? '' : '\nwritten to BENCHMARKS.md\n'}`);
  } finally {
    kept.destroy();
    await server.stop();
    await cri.removePodSandbox(sid).catch(() => undefined);
    cri.close();
    await fake.stop();
    await fsp.rm(tmp, { recursive: true, force: true });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`checkpoint benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}
