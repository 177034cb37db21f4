/**
 * Objects at the API server's size limits (issue 26, item 6): the test control plane once
 * wedged for minutes on pods of 1 MB command lines and 10,000 env entries, objects a real API
 * server accepts. Twenty pods of about 1 MB each are stored; kubectl 1.32 must list them
 * within a second, a fresh TLS connection must get /version promptly while a list of all of
 * them is served, and requests over the limits get a real API server's answers.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, request } from './helpers.js';

const KUBECTL = '/usr/bin/kubectl';
const NS = 'big';
const PODS = 20;
let cp: ControlPlane;
let dir: string;
let kubeconfig: string;

function kubectl(args: string[]): Promise<{ code: number; stdout: string; stderr: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    execFile(KUBECTL, ['--kubeconfig', kubeconfig, ...args], { timeout: 60_000, maxBuffer: 1 << 30, env: { ...process.env, HOME: dir, KUBECACHEDIR: path.join(dir, 'cache') } }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr, ms: performance.now() - t0 });
    });
  });
}

/** GET on a new TLS connection (a fresh handshake, as the stuck clients made); resolves with the time to the whole answer. */
function timedGet(p: string): Promise<{ status: number; ms: number; bytes: number }> {
  const ca = fs.readFileSync(cp.caFile);
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = https.request(`${cp.url}${p}`, { ca, agent: false, headers: { Authorization: `Bearer ${TOKEN}`, 'Accept-Encoding': 'gzip' } }, (res) => {
      let bytes = 0;
      res.on('data', (c: Buffer) => (bytes += c.length));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - t0, bytes }));
    });
    req.on('error', reject);
    req.end();
  });
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** A pod of about 1 MB: a 1 MB command line, or 10,000 env entries. */
function bigPod(name: string, shape: 'command' | 'env', size = 1_000_000): object {
  const c: Record<string, unknown> = { name: 'c', image: 'busybox' };
  if (shape === 'command') c['command'] = ['sh', '-c', `: ${'x'.repeat(size)}`];
  // With the managedFields entry of every env name (about 50 bytes each), this one's encoding is close to etcd's limit.
  else c['env'] = Array.from({ length: 10_000 }, (_, i) => ({ name: `E${i}`, value: 'v'.repeat(80) }));
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: { containers: [c] } };
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cp-large-'));
  kubeconfig = path.join(dir, 'kubeconfig');
  cp = await startControlPlane({ nodeLifecycleIntervalMs: 0, pkiDir: path.join(dir, 'pki') });
  cp.addToken(TOKEN, 'admin', ['system:masters']);
  cp.writeKubeconfig(kubeconfig, { user: 'admin', groups: ['system:masters'] });
  expect((await request(cp, 'POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } } })).status).toBe(201);
  for (let i = 0; i < PODS; i++) {
    // Both shapes of the issue: most with a 1 MB command line, two with 10,000 env entries.
    const body = JSON.stringify(bigPod(`big-${String(i).padStart(2, '0')}`, i < 2 ? 'env' : 'command'));
    expect(body.length).toBeGreaterThan(1_000_000);
    const r = await request(cp, 'POST', `/api/v1/namespaces/${NS}/pods`, { body });
    expect(r.status, r.text.slice(0, 300)).toBe(201);
  }
}, 300_000);

afterAll(async () => {
  await cp?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('twenty pods of 1 MB each', () => {
  it('a list returns every one of them whole', async () => {
    const r = await request(cp, 'GET', `/api/v1/namespaces/${NS}/pods`);
    expect(r.status).toBe(200);
    expect(r.json.items).toHaveLength(PODS);
    expect(r.json.items[0].spec.containers[0].env).toHaveLength(10_000);
    expect(r.json.items[PODS - 1].spec.containers[0].command[2]).toHaveLength(1_000_002);
    expect(r.json.items[0].apiVersion).toBeUndefined();
  });

  it.runIf(fs.existsSync(KUBECTL))('kubectl get pods answers within a second', async () => {
    const warm = await kubectl(['get', 'pods', '-n', NS]); // discovery, cached afterwards
    expect(warm.stderr).toBe('');
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await kubectl(['get', 'pods', '-n', NS]);
      expect(r.code).toBe(0);
      expect(r.stdout.trim().split('\n')).toHaveLength(PODS + 1);
      times.push(r.ms);
    }
    console.log(`kubectl get pods with ${PODS} pods of 1 MB: ${times.map((t) => t.toFixed(0)).join(', ')} ms`);
    expect(median(times)).toBeLessThan(1000);
  });

  it('/version answers on a new TLS connection within 200 ms (beyond its idle cost) while the whole list is served', async () => {
    const rounds: number[] = [];
    const idle: number[] = [];
    const delay = monitorEventLoopDelay({ resolution: 5 });
    for (let i = 0; i < 3; i++) {
      // The same probe with nothing else to serve, just before: what a TLS handshake and
      // /version cost on this machine at this moment (tens of milliseconds on a loaded CI machine).
      idle.push((await timedGet('/version')).ms);
      delay.enable();
      const list = timedGet('/api/v1/pods');
      const probe = await timedGet('/version');
      expect(probe.status).toBe(200);
      rounds.push(probe.ms - idle[i]!);
      const l = await list;
      delay.disable();
      expect(l.status).toBe(200);
      // The probe answered while the list was still on its way.
      expect(probe.ms).toBeLessThan(l.ms);
    }
    // The server runs in this process: its event loop never stood still for long.
    const maxDelayMs = delay.max / 1e6;
    console.log(`/version during a ${PODS} MB list, beyond idle: ${rounds.map((t) => t.toFixed(0)).join(', ')} ms (idle: ${idle.map((t) => t.toFixed(0)).join(', ')} ms); longest event-loop stall ${maxDelayMs.toFixed(0)} ms`);
    expect(maxDelayMs).toBeLessThan(200);
    expect(median(rounds)).toBeLessThan(200);
  });
});

describe('requests over the limits', () => {
  it('a body over 3 MiB is 413 RequestEntityTooLarge, as kube-apiserver answers', async () => {
    const r = await request(cp, 'POST', `/api/v1/namespaces/${NS}/pods`, { body: JSON.stringify(bigPod('too-big', 'command', 3 * 1024 * 1024)) });
    expect(r.status).toBe(413);
    expect(r.json).toMatchObject({ kind: 'Status', status: 'Failure', reason: 'RequestEntityTooLarge', message: 'Request entity too large: limit is 3145728', code: 413 });
    expect((await request(cp, 'GET', `/api/v1/namespaces/${NS}/pods/too-big`)).status).toBe(404);
  });

  it('an object over etcd\'s 1.5 MiB is refused with etcd\'s error; one just under is stored', async () => {
    const over = await request(cp, 'POST', `/api/v1/namespaces/${NS}/pods`, { body: JSON.stringify(bigPod('over-etcd', 'command', 1_600_000)) });
    expect(over.status).toBe(500);
    // kube-apiserver passes etcd's error on as it comes: a 500 with the message and no reason.
    expect(over.json).toEqual({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: 'etcdserver: request is too large', code: 500 });
    const under = await request(cp, 'POST', `/api/v1/namespaces/${NS}/pods`, { body: JSON.stringify(bigPod('under-etcd', 'command', 1_500_000)) });
    expect(under.status).toBe(201);
    // A patch cannot grow a stored object past the limit either.
    const grow = await request(cp, 'PATCH', `/api/v1/namespaces/${NS}/pods/under-etcd`, { body: { metadata: { annotations: { pad: 'y'.repeat(200_000) } } }, contentType: 'application/merge-patch+json' });
    expect(grow.status).toBe(500);
    expect(grow.json.message).toBe('etcdserver: request is too large');
    expect((await request(cp, 'DELETE', `/api/v1/namespaces/${NS}/pods/under-etcd`)).status).toBe(200);
  });
});
