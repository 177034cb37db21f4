/**
 * What operators scrape, end to end: the built nodelet, connected to the test control
 * plane, on a real containerd of its own, with a static pod whose one container burns CPU
 * and whose other fills 64 MiB of /dev/shm. Every exposition is parsed by Debian's
 * python3-prometheus-client (a parser nobody here wrote); kubectl reaches the HTTPS
 * endpoints through the control plane's node proxy, as against a real cluster.
 */
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { ensureContainerd, BUSYBOX_IMAGE } from '../../helpers/containerd.js';
import { eventually, freePort, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from '../../helpers/nodelet.js';

interface PySample {
  name: string;
  labels: Record<string, string>;
  value: number;
  timestamp: number | null;
}
interface PyFamily {
  name: string;
  type: string;
  help: string;
  samples: PySample[];
}

const PARSE = `
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({"name": f.name, "type": f.type, "help": f.documentation,
                "samples": [{"name": s.name, "labels": s.labels, "value": s.value,
                             "timestamp": None if s.timestamp is None else float(s.timestamp)} for s in f.samples]})
print(json.dumps(out))
`;

/** Parses an exposition with Python's prometheus_client (Debian's, hence /usr/bin/python3). */
function parseExposition(text: string): Map<string, PyFamily> {
  const out = execFileSync('/usr/bin/python3', ['-c', PARSE], { input: text, encoding: 'utf8' });
  return new Map((JSON.parse(out) as PyFamily[]).map((f) => [f.name, f]));
}

let cp: ControlPlane;
let nodelet: NodeletProcess;
let dir: string;
let port: number;
let readOnlyPort: number;
let adminKubeconfig: string;
const NODE = 'metrics-node';
const POD = `stress-${NODE}`;

async function get(url: string): Promise<{ status: number; type: string; body: string }> {
  const r = await fetch(url);
  return { status: r.status, type: r.headers.get('content-type') ?? '', body: await r.text() };
}

/** GET `p` on the read-only port, which must answer 200: its content type, its families by name and each family's type. */
async function scrape(p: string): Promise<{ type: string; fams: Map<string, PyFamily>; types: Record<string, string> }> {
  const r = await get(`http://127.0.0.1:${readOnlyPort}${p}`);
  expect(r.status).toBe(200);
  const fams = parseExposition(r.body);
  return { type: r.type, fams, types: Object.fromEntries([...fams.values()].map((f) => [f.name, f.type])) };
}

/** GET on nodelet's HTTPS port, with a client certificate or none (its serving certificate is self-signed). */
function httpsGet(p: string, tls: { cert: Buffer; key: Buffer } | undefined): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, path: p, rejectUnauthorized: false, ...(tls ?? {}) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
}

function kubectl(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('kubectl', ['--kubeconfig', adminKubeconfig, ...args], { timeout: 30_000, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

beforeAll(async () => {
  const { endpoint } = await ensureContainerd({ dir: '/var/lib/nodelet-dev/containerd-metrics' });
  cp = await startControlPlane();
  // The API server's proxy user and the admin may read the node's endpoints; nobody else.
  cp.setAccessRules((a) => ({ allowed: a.user === 'system:apiserver' || a.user === 'admin', reason: 'test rules' }));
  dir = tempDir('nodelet-metrics-');
  cp.writeKubeconfig(path.join(dir, 'kubelet.kubeconfig'), { user: `system:node:${NODE}`, groups: ['system:nodes'] });
  adminKubeconfig = path.join(dir, 'admin.kubeconfig');
  cp.writeKubeconfig(adminKubeconfig, { user: 'admin', groups: ['system:masters'] });
  port = await freePort();
  readOnlyPort = await freePort();
  fs.mkdirSync(path.join(dir, 'manifests'));
  fs.writeFileSync(
    path.join(dir, 'manifests', 'stress.yaml'),
    `apiVersion: v1
kind: Pod
metadata: {name: stress, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers:
  - {name: burn, image: ${BUSYBOX_IMAGE}, imagePullPolicy: Never, command: [sh, -c, "while :; do :; done"]}
  - {name: mem, image: ${BUSYBOX_IMAGE}, imagePullPolicy: Never, command: [sh, -c, "dd if=/dev/zero of=/dev/shm/fill bs=1M count=64 && exec sleep 3600"]}
`,
  );
  // v1beta1 defaults otherwise: webhook authentication, Webhook authorization, no anonymous.
  writeKubeletConfig(dir, {
    containerRuntimeEndpoint: endpoint,
    podLogsDir: path.join(dir, 'logs'),
    address: '127.0.0.1',
    port,
    readOnlyPort,
    healthzPort: 0,
    staticPodPath: path.join(dir, 'manifests'),
    authentication: `{x509: {clientCAFile: ${cp.caFile}}}`,
  });
  nodelet = startNodelet([
    '--config', path.join(dir, 'kubelet.yaml'),
    '--kubeconfig', path.join(dir, 'kubelet.kubeconfig'),
    '--root-dir', path.join(dir, 'root'),
    '--lock-file', path.join(dir, 'lock'),
    '--hostname-override', NODE,
    '--node-ip', '127.0.0.1',
  ]);
  await nodelet.waitForMsg(/nodelet is ready/, 60_000);
  // Both containers run and the memory one has filled its 64 MiB.
  await eventually(async () => {
    const fams = parseExposition((await get(`http://127.0.0.1:${readOnlyPort}/metrics/resource`)).body);
    const mem = fams.get('container_memory_working_set_bytes')?.samples ?? [];
    // Only this pod: runtime pods a previous run left are removed by nodelet once its sources are ready.
    return mem.length === 2 && mem.every((s) => s.labels.pod === POD) && mem.find((s) => s.labels.container === 'mem')!.value >= 64 * 1024 * 1024;
  }, 60_000, 500);
}, 180_000);

afterAll(async () => {
  if (nodelet) {
    // Remove the static pod first so nothing is left on the shared containerd of this file.
    fs.rmSync(path.join(dir, 'manifests', 'stress.yaml'), { force: true });
    await eventually(async () => !(await get(`http://127.0.0.1:${readOnlyPort}/stats/summary`)).body.includes(POD), 60_000, 500).catch(() => undefined);
    nodelet.kill('SIGTERM');
    await nodelet.exited;
  }
  await cp?.close();
}, 120_000);

describe('/metrics/resource', () => {
  it('has the kubelet resource families with their types, labels and per-sample timestamps, live containers only', async () => {
    const { type, fams, types } = await scrape('/metrics/resource');
    expect(type).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(types).toMatchObject({
      node_cpu_usage_seconds: 'counter',
      node_memory_working_set_bytes: 'gauge',
      node_swap_usage_bytes: 'gauge',
      container_start_time_seconds: 'gauge',
      container_cpu_usage_seconds: 'counter',
      container_memory_working_set_bytes: 'gauge',
      container_swap_usage_bytes: 'gauge',
      container_swap_limit_bytes: 'gauge',
      pod_cpu_usage_seconds: 'counter',
      pod_memory_working_set_bytes: 'gauge',
      pod_swap_usage_bytes: 'gauge',
      scrape_error: 'gauge',
      resource_scrape_error: 'gauge',
    });
    expect(fams.get('resource_scrape_error')!.samples[0]!.value).toBe(0);
    const cpu = fams.get('container_cpu_usage_seconds')!.samples;
    expect(cpu.map((s) => s.labels).sort((a, b) => a.container!.localeCompare(b.container!))).toEqual([
      { container: 'burn', pod: POD, namespace: 'default' },
      { container: 'mem', pod: POD, namespace: 'default' },
    ]);
    // Usage samples carry their read time; start times do not (as the kubelet's).
    const now = Date.now() / 1000;
    for (const name of ['node_cpu_usage_seconds', 'node_memory_working_set_bytes', 'container_cpu_usage_seconds', 'container_memory_working_set_bytes', 'pod_cpu_usage_seconds', 'pod_memory_working_set_bytes']) {
      for (const s of fams.get(name)!.samples) expect(Math.abs(s.timestamp! - now), `${name} timestamp`).toBeLessThan(60);
    }
    for (const s of fams.get('container_start_time_seconds')!.samples) {
      expect(s.timestamp).toBeNull();
      expect(now - s.value).toBeGreaterThan(0);
      expect(now - s.value).toBeLessThan(600);
    }
    expect(fams.get('pod_cpu_usage_seconds')!.samples.map((s) => s.labels)).toEqual([{ pod: POD, namespace: 'default' }]);
  });

  it('moves: the burning container gains CPU seconds, the filling one shows its 64 MiB', async () => {
    const read = async () => (await scrape('/metrics/resource')).fams;
    const cpuOf = (f: Map<string, PyFamily>, c: string) => f.get('container_cpu_usage_seconds')!.samples.find((s) => s.labels.container === c)!.value;
    const a = await read();
    await new Promise((r) => setTimeout(r, 3000));
    const b = await read();
    // A busy loop on a loaded 2-core machine: well over a tenth of a core over 3 s.
    expect(cpuOf(b, 'burn') - cpuOf(a, 'burn')).toBeGreaterThan(0.3);
    expect(cpuOf(b, 'mem') - cpuOf(a, 'mem')).toBeLessThan(0.3);
    const mem = b.get('container_memory_working_set_bytes')!.samples;
    expect(mem.find((s) => s.labels.container === 'mem')!.value).toBeGreaterThanOrEqual(64 * 1024 * 1024);
    expect(mem.find((s) => s.labels.container === 'burn')!.value).toBeLessThan(16 * 1024 * 1024);
    const pod = b.get('pod_memory_working_set_bytes')!.samples[0]!.value;
    expect(pod).toBeGreaterThanOrEqual(64 * 1024 * 1024);
    expect(b.get('node_cpu_usage_seconds')!.samples[0]!.value).toBeGreaterThan(a.get('node_cpu_usage_seconds')!.samples[0]!.value);
  });
});

describe('/metrics', () => {
  it('has the kubelet families, client-go request counts, process and Node.js metrics, parsed by prometheus_client', async () => {
    const { fams, types } = await scrape('/metrics');
    expect(types).toMatchObject({
      kubelet_running_pods: 'gauge',
      kubelet_running_containers: 'gauge',
      kubelet_pod_start_duration_seconds: 'histogram',
      kubelet_pod_worker_duration_seconds: 'histogram',
      kubelet_runtime_operations: 'counter',
      kubelet_runtime_operations_errors: 'counter',
      kubelet_runtime_operations_duration_seconds: 'histogram',
      kubelet_started_pods: 'counter',
      kubelet_started_containers: 'counter',
      rest_client_requests: 'counter',
      process_cpu_seconds: 'counter',
      process_resident_memory_bytes: 'gauge',
      process_start_time_seconds: 'gauge',
      process_open_fds: 'gauge',
      nodejs_heap_size_used_bytes: 'gauge',
      nodelet_build_info: 'gauge',
    });
    const v = (name: string, labels: Record<string, string> = {}) =>
      fams.get(name)!.samples.find((s) => Object.entries(labels).every(([k, x]) => s.labels[k] === x) && !s.name.endsWith('_created'))?.value;
    expect(v('kubelet_running_pods')).toBe(1);
    expect(v('kubelet_running_containers', { container_state: 'running' })).toBe(2);
    expect(v('kubelet_started_pods')).toBeGreaterThanOrEqual(1);
    expect(v('kubelet_started_containers', { container_type: 'container' })).toBeGreaterThanOrEqual(2);
    expect(v('kubelet_runtime_operations', { operation_type: 'run_podsandbox' })).toBeGreaterThanOrEqual(1);
    expect(v('kubelet_runtime_operations', { operation_type: 'list_container_stats' })).toBeGreaterThanOrEqual(1);
    // Sandboxes have a cgroup parent (the pod cgroup), so containerd 1.6 answers ListPodSandboxStats (it refuses it for those without).
    expect(v('kubelet_runtime_operations', { operation_type: 'list_podsandbox_stats' })).toBeGreaterThanOrEqual(1);
    expect(v('kubelet_runtime_operations_errors', { operation_type: 'list_podsandbox_stats' }) ?? 0).toBe(0);
    expect(fams.get('kubelet_pod_start_duration_seconds')!.samples.find((s) => s.name.endsWith('_count'))!.value).toBeGreaterThanOrEqual(1);
    expect(fams.get('kubelet_pod_worker_duration_seconds')!.samples.some((s) => s.labels.operation_type === 'create' && s.name.endsWith('_count') && s.value >= 1)).toBe(true);
    const host = new URL(cp.url).host;
    expect(v('rest_client_requests', { code: '200', method: 'GET', host })! + (v('rest_client_requests', { code: '201', method: 'POST', host }) ?? 0)).toBeGreaterThan(0);
    expect(v('process_resident_memory_bytes')).toBeGreaterThan(10 * 1024 * 1024);
  });
});

describe('/stats/summary', () => {
  it('answers the Summary API: node cpu, memory, fs, runtime imagefs, rlimit; the pod with its containers', async () => {
    const r = await get(`http://127.0.0.1:${readOnlyPort}/stats/summary`);
    expect(r.status).toBe(200);
    const s = JSON.parse(r.body);
    expect(s.node.nodeName).toBe(NODE);
    expect(s.node.cpu.usageCoreNanoSeconds).toBeGreaterThan(0);
    expect(s.node.memory.workingSetBytes).toBeGreaterThan(0);
    expect(s.node.fs.capacityBytes).toBeGreaterThan(s.node.fs.availableBytes);
    expect(s.node.runtime.imageFs.usedBytes).toBeGreaterThan(0);
    expect(s.node.rlimit.maxpid).toBeGreaterThan(0);
    const pod = s.pods.find((p: { podRef: { name: string } }) => p.podRef.name === POD);
    expect(pod.podRef.namespace).toBe('default');
    expect(pod.containers.map((c: { name: string }) => c.name).sort()).toEqual(['burn', 'mem']);
    expect(pod.memory.workingSetBytes).toBeGreaterThanOrEqual(64 * 1024 * 1024);
    expect(pod['ephemeral-storage'].capacityBytes).toBeGreaterThan(0);
    const only = JSON.parse((await get(`http://127.0.0.1:${readOnlyPort}/stats/summary?only_cpu_and_memory=true`)).body);
    expect(only.node.fs).toBeUndefined();
    expect(only.pods[0].cpu.usageCoreNanoSeconds).toBeGreaterThan(0);
  });
});

describe('HTTPS, authorization and the node proxy', () => {
  it('/configz is not on the read-only port; the proxy reaches the node over HTTPS', async () => {
    expect((await get(`http://127.0.0.1:${readOnlyPort}/configz`)).status).toBe(404);
    const r = await kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/healthz`]);
    expect(r.stdout.trim()).toBe('ok');
  });

  it('kubectl get --raw through the node proxy reads /metrics/resource and /configz', async () => {
    const m = await kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/metrics/resource`]);
    expect(m.stderr).toBe('');
    const fams = parseExposition(m.stdout);
    expect(fams.get('container_cpu_usage_seconds')!.samples.length).toBe(2);
    const c = await kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/configz`]);
    const cz = JSON.parse(c.stdout);
    expect(cz.kubeletconfig).toMatchObject({ kind: 'KubeletConfiguration', port, readOnlyPort, staticPodPath: path.join(dir, 'manifests') });
    const o = JSON.parse((await kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/configz?origin`])).stdout);
    expect(o.origins.port).toBe(path.join(dir, 'kubelet.yaml'));
    expect(o.origins.maxPods).toBe('default');
    const s = JSON.parse((await kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/stats/summary`])).stdout);
    expect(s.node.nodeName).toBe(NODE);
  });

  it('authorizes /metrics* as nodes/metrics, /stats* as nodes/stats, /configz as nodes/proxy (SubjectAccessReview); 401 without credentials', async () => {
    const seen: string[] = [];
    cp.setAccessRules((a) => {
      seen.push(`${a.user} ${a.verb} ${a.resource}/${a.subresource}`);
      return { allowed: a.user === 'system:apiserver' || a.user === 'admin' || (a.user === 'carol' && a.subresource !== 'stats'), reason: 'test rules' };
    });
    const carol = cp.issueClientCert('carol');
    const tls = { cert: fs.readFileSync(carol.certFile), key: fs.readFileSync(carol.keyFile) };
    try {
      expect((await httpsGet('/metrics', tls)).status).toBe(200);
      expect((await httpsGet('/metrics/resource', tls)).status).toBe(200);
      const denied = await httpsGet('/stats/summary', tls);
      expect(denied.status).toBe(403);
      expect(JSON.parse(denied.body).message).toMatch(/^Forbidden \(user=carol, verb=get, resource=nodes, subresource\(s\)=\[stats\]\)/);
      expect((await httpsGet('/configz', tls)).status).toBe(200);
      expect((await httpsGet('/metrics', undefined)).status).toBe(401);
      expect([...new Set(seen.filter((x) => x.startsWith('carol ')))].sort()).toEqual(['carol get nodes/metrics', 'carol get nodes/proxy', 'carol get nodes/stats']);
    } finally {
      cp.setAccessRules((a) => ({ allowed: a.user === 'system:apiserver' || a.user === 'admin' }));
    }
  });
});
