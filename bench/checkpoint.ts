/**
 * The checkpoint endpoint's own overhead: `POST /checkpoint/...` through nodelet's HTTPS
 * server (mTLS, authentication, authorization, pod lookup, runtime lookup by labels, name
 * reservation, CRI call, archive verification and chmod) against calling the same test
 * CRI server's CheckpointContainer directly, in the same run, interleaved (the order
 * alternates every iteration so neither side always runs on a warmer cache).
 *
 * Run: `npm run build && node dist/bench/checkpoint.js [iterations=200]`. Writes its
 * section of BENCHMARKS.md (replaced on each run) and prints the same table.
 * The HTTPS client keeps its connection alive, as a forensic tool taking several
 * checkpoints would; the TLS handshake is therefore not in the per-request numbers.
 */
import fs from 'node:fs';
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
import { Authenticator, alwaysAllow } from '../src/server/auth.js';
import { CheckpointService } from '../src/checkpoint/service.js';
import { createNodeServer } from '../src/server/https-server.js';
import { loadOrCreateServingCert } from '../src/server/tls.js';
import { startFakeRuntime } from '../test/cri/fake-runtime.js';
import { createTestCa } from '../test/integration/server/pki.js';
import { ratioTable, replaceNamedSection } from './sections.js';


function post(agent: https.Agent, port: number, p: string, tls: { ca: string }): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request({ method: 'POST', hostname: '127.0.0.1', port, path: p, agent, ca: tls.ca, servername: 'localhost' }, (res) => {
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

async function main(): Promise<void> {
  const iterations = Math.max(10, Number(process.argv[2] ?? 200) || 200);
  const warmup = 20;
  const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-cp-'));
  const fake = await startFakeRuntime();
  const cri = createCriClient({ runtimeEndpoint: fake.endpoint, requestTimeoutMs: 30_000 });
  const uid = 'bench-uid';
  const labels = { 'io.kubernetes.pod.uid': uid, 'io.kubernetes.pod.name': 'bench', 'io.kubernetes.pod.namespace': 'default' };
  const sandbox: PodSandboxConfig = { metadata: { name: 'bench', uid, namespace: 'default', attempt: 0 }, labels, linux: { securityContext: { namespaceOptions: { network: 'NODE' } } } };
  const sid = await cri.runPodSandbox(sandbox);
  const cid = await cri.createContainer(sid, { metadata: { name: 'app', attempt: 0 }, image: { image: 'docker.io/local/busybox:latest' }, command: ['sleep', '3600'], labels: { ...labels, 'io.kubernetes.container.name': 'app' } }, sandbox);
  await cri.startContainer(cid);

  const pod: Pod = { metadata: { namespace: 'default', name: 'bench', uid }, spec: { containers: [{ name: 'app' }] } };
  const pods = { getPod: (ns: string, n: string) => (ns === 'default' && n === 'bench' ? pod : undefined), listPods: () => [pod] };
  const ca = await createTestCa();
  const client = await ca.issue({ cn: 'bench' });
  const serving = await loadOrCreateServingCert({ certDir: path.join(tmp, 'pki'), hostname: 'localhost', ips: [] });
  const rootDir = path.join(tmp, 'root');
  const server = createNodeServer({
    address: '127.0.0.1',
    port: 0,
    tls: { cert: serving.cert, key: serving.key, clientCA: ca.cert },
    authenticator: new Authenticator({ x509: true, anonymous: false, clock: realClock }),
    authorizer: alwaysAllow,
    nodeName: 'bench-node',
    health: new HealthRegistry(),
    pods,
    checkpoints: new CheckpointService({ rootDir, runtime: cri, pods, runtimeRequestTimeoutMs: 30_000, clock: realClock }),
  });
  const { port } = await server.start();
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, cert: client.cert, key: client.key, ca: serving.cert });
  const directDir = path.join(tmp, 'direct');
  await fsp.mkdir(directDir, { mode: 0o700 });

  const viaNodelet = async (): Promise<number> => {
    const t0 = performance.now();
    const r = await post(agent, port, '/checkpoint/default/bench/app', { ca: serving.cert });
    const dt = performance.now() - t0;
    if (r.status !== 200) throw new Error(`nodelet answered ${r.status}: ${r.body}`);
    await fsp.rm((JSON.parse(r.body) as { items: string[] }).items[0]!);
    return dt;
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
    for (let i = 0; i < warmup; i++) {
      await direct();
      await viaNodelet();
    }
    const a: number[] = [];
    const b: number[] = [];
    for (let i = 0; i < iterations; i++) {
      if (i % 2 === 0) {
        a.push(await direct());
        b.push(await viaNodelet());
      } else {
        b.push(await viaNodelet());
        a.push(await direct());
      }
    }
    const section = [
      '## Checkpoint endpoint overhead (`bench/checkpoint.ts`)',
      '',
      `Run ${new Date().toISOString()} on Node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model.trim() ?? 'unknown'}), ${iterations} iterations each after ${warmup} warm-up, interleaved.`,
      'Direct = the CRI client calling the test CRI server\'s CheckpointContainer (writes a ~66 KiB tar). Nodelet = `POST /checkpoint/default/bench/app` over HTTPS with mTLS on a kept-alive connection, through authn, authz (AlwaysAllow), pod and runtime lookups, CRI call, archive verification and chmod, against the same CRI server.',
      '',
      ...ratioTable(a, b),
      '',
      'Reproduce: `npm run build && node dist/bench/checkpoint.js 200`.',
    ].join('\n');
    const file = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'BENCHMARKS.md');
    const doc = fs.existsSync(file) ? await fsp.readFile(file, 'utf8') : '';
    await fsp.writeFile(file, replaceSection(doc, section));
    process.stdout.write(`${section}\n\nwritten to ${file}\n`);
  } finally {
    agent.destroy();
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
