/**
 * What the whole-process benchmarks share: the built nodelet started as a child process the
 * way an operator starts it, its resident memory and CPU read from /proc, static pod
 * manifests written atomically (a dotfile renamed into place, so nodelet never reads half a
 * file), raw CRI pods WITHOUT the kubelet's labels (nodelet never sees them, so it never
 * removes a baseline pod while it runs beside them), and `--quick` handling.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CriClient } from '../src/runtime/cri-client.js';
import type { ContainerConfig, PodSandboxConfig } from '../src/runtime/types.js';
import { freePort, shebangNodeFlags } from '../test/helpers/nodelet.js';
import { IMAGE } from './runtime.js';
import { percentile } from './sections.js';

/** The two builds `npm run build` makes, next to this file's build (dist/bench): tsc's output and the esbuild bundle. */
export const TSC_MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'src', 'main.js');
export const BUNDLE_MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'nodelet', 'main.js');
/**
 * The shipped entry point (package.json `bin`, what the unit runs): the bundle;
 * NODELET_BENCH_MAIN runs another entry point instead (to compare builds).
 */
export const NODELET_MAIN = process.env.NODELET_BENCH_MAIN ?? BUNDLE_MAIN;
export const TICK_MS = 1000 / 100; // USER_HZ

/** `--quick` (CI: once, tiny counts) and the positional numbers after it. */
export function benchArgs(): { quick: boolean; nums: number[] } {
  const args = process.argv.slice(2);
  return { quick: args.includes('--quick'), nums: args.filter((a) => /^\d+$/.test(a)).map(Number) };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function rssBytes(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

/** utime + stime of a process, in ms (10 ms ticks). */
export function cpuMs(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

export function machine(): string {
  return `Node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} at the end`;
}

export const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

/** p50 and p99 of two samples, their ratio and the added amount: one table row each. */
export function rows(label: string, base: readonly number[], through: readonly number[], digits = 1): string[] {
  const a = [...base].sort((x, y) => x - y);
  const b = [...through].sort((x, y) => x - y);
  return [50, 99].map((p) => {
    const d = percentile(a, p);
    const h = percentile(b, p);
    return `| ${label} p${p} | ${d.toFixed(digits)} | ${h.toFixed(digits)} | ${(h / d).toFixed(2)}× | ${h - d >= 0 ? '+' : '−'}${Math.abs(h - d).toFixed(digits)} |`;
  });
}

export const median = (xs: readonly number[]) => percentile([...xs].sort((x, y) => x - y), 50);

/** A static pod manifest: one busybox sleeper, hostNetwork, no grace period (teardown is not measured). */
export function manifest(name: string): string {
  return [
    'apiVersion: v1',
    'kind: Pod',
    `metadata: {name: ${name}, namespace: bench}`,
    'spec:',
    '  hostNetwork: true',
    '  terminationGracePeriodSeconds: 0',
    `  containers: [{name: main, image: ${IMAGE}, imagePullPolicy: IfNotPresent, command: [sleep, "3600"]}]`,
    '',
  ].join('\n');
}

/** Writes a manifest as a dotfile (ignored by nodelet) first; `place()` renames it into view. */
export async function stageManifest(dir: string, name: string): Promise<() => Promise<void>> {
  const tmp = path.join(dir, `.${name}.yaml`);
  await fsp.writeFile(tmp, manifest(name));
  return () => fsp.rename(tmp, path.join(dir, `${name}.yaml`));
}

/** Names of the containers running in the runtime for pods of namespace `bench`, by pod name. */
export async function runningPods(cri: CriClient): Promise<Set<string>> {
  const list = await cri.listContainers({ labelSelector: { 'io.kubernetes.pod.namespace': 'bench' } });
  const out = new Set<string>();
  for (const c of list) if (c.state === 'CONTAINER_RUNNING') out.add(c.labels['io.kubernetes.pod.name'] ?? '');
  return out;
}

/** Names of the raw pods whose container runs. */
export async function runningRaw(cri: CriClient): Promise<Set<string>> {
  const list = await cri.listContainers({ labelSelector: { 'bench.nodelet/raw': 'true' } });
  const out = new Set<string>();
  for (const c of list) if (c.state === 'CONTAINER_RUNNING') out.add(c.labels['bench.nodelet/name'] ?? '');
  return out;
}

/** Polls CRI every `everyMs` until `pred` holds; the ms from `t0`. */
export async function until(pred: () => Promise<boolean>, t0: number, timeoutMs: number, what: string, everyMs = 5): Promise<number> {
  for (;;) {
    if (await pred()) return performance.now() - t0;
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not seen within ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

/**
 * A raw CRI pod outside nodelet's view (no io.kubernetes.* labels), hostNetwork. With
 * `kubeletSeccomp`, its sandbox carries the seccomp profile every kubelet gives the pause
 * process (RuntimeDefault: generatePodSandboxLinuxConfig), which containerd takes longer to
 * apply (replayed alone, 2026-11-28: 97 -> 110 ms for RunPodSandbox).
 */
export function rawSandbox(name: string, logDirectory: string, kubeletSeccomp = false): PodSandboxConfig {
  return {
    metadata: { name, uid: name, namespace: 'bench-direct', attempt: 0 },
    logDirectory,
    labels: { 'bench.nodelet/raw': 'true' },
    linux: { securityContext: { namespaceOptions: { network: 'NODE', pid: 'CONTAINER', ipc: 'POD', targetId: '' }, ...(kubeletSeccomp ? { seccomp: { profileType: 'RuntimeDefault', localhostRef: '' } } : {}) } },
  };
}

export function rawContainer(name: string): ContainerConfig {
  return { metadata: { name: 'main', attempt: 0 }, image: { image: IMAGE }, command: ['sleep', '3600'], labels: { 'bench.nodelet/raw': 'true', 'bench.nodelet/name': name }, logPath: `${name}.log` };
}

/** RunPodSandbox + CreateContainer + StartContainer: the floor of a pod start. */
export async function rawStart(cri: CriClient, name: string, logDir: string, kubeletSeccomp = false): Promise<void> {
  const sandbox = rawSandbox(name, logDir, kubeletSeccomp);
  const sid = await cri.runPodSandbox(sandbox);
  const cid = await cri.createContainer(sid, rawContainer(name), sandbox);
  await cri.startContainer(cid);
}

export async function removeRaw(cri: CriClient): Promise<void> {
  const sel = { labelSelector: { 'bench.nodelet/raw': 'true' } };
  await Promise.all(
    (await cri.listPodSandbox(sel)).map(async (s) => {
      await cri.stopPodSandbox(s.id).catch(() => undefined);
      await cri.removePodSandbox(s.id);
    }),
  );
}

export interface Agent {
  child: ChildProcess;
  pid: number;
  healthzPort: number;
  readOnlyPort: number;
  exited: Promise<unknown>;
  stop(): Promise<void>;
}

/**
 * Starts the built nodelet on `dir` (config, root dir, lock, static pod dir `manifests`) with
 * the given runtime endpoint; extra config lines and flags as given. stderr is inherited,
 * stdout (JSON logs at warn) goes to `<dir>/nodelet.log`.
 */
export async function startAgent(o: { dir: string; endpoint: string; healthzPort: number; port?: number; readOnlyPort?: number; config?: Record<string, string | number>; flags?: string[]; nodeArgs?: string[]; main?: string }): Promise<Agent> {
  const cfg = {
    containerRuntimeEndpoint: o.endpoint,
    podLogsDir: path.join(o.dir, 'logs'),
    address: '127.0.0.1',
    port: o.port ?? (await freePort()), // 0 would be the default 10250, which another agent may hold
    readOnlyPort: o.readOnlyPort ?? 0,
    healthzPort: o.healthzPort,
    staticPodPath: path.join(o.dir, 'manifests'),
    authentication: '{anonymous: {enabled: true}, webhook: {enabled: false}}',
    authorization: '{mode: AlwaysAllow}',
    ...o.config,
  };
  fs.mkdirSync(path.join(o.dir, 'manifests'), { recursive: true });
  fs.writeFileSync(
    path.join(o.dir, 'kubelet.yaml'),
    ['apiVersion: kubelet.config.k8s.io/v1beta1', 'kind: KubeletConfiguration', ...Object.entries(cfg).map(([k, v]) => `${k}: ${v}`), ''].join('\n'),
  );
  const main = o.main ?? NODELET_MAIN;
  const args = [
    // The flags the shipped entry's shebang gives (the tsc output is run with the same, to compare builds alone).
    ...shebangNodeFlags(BUNDLE_MAIN),
    ...(o.nodeArgs ?? []),
    main,
    '--config', path.join(o.dir, 'kubelet.yaml'),
    '--root-dir', path.join(o.dir, 'root'),
    '--cert-dir', path.join(o.dir, 'pki'),
    '--lock-file', path.join(o.dir, 'lock'),
    '--hostname-override', 'bench',
    '--log-level', 'warn',
    ...(o.flags ?? []),
  ];
  const env = { ...process.env };
  for (const k of ['NOTIFY_SOCKET', 'WATCHDOG_USEC', 'WATCHDOG_PID', 'JOURNAL_STREAM']) delete env[k];
  // Its log (warnings and errors) in <dir>/nodelet.log, for a run that fails.
  const log = fs.openSync(path.join(o.dir, 'nodelet.log'), 'a');
  const child = spawn(process.execPath, args, { stdio: ['ignore', log, 'inherit'], env });
  fs.closeSync(log);
  const exited = new Promise((r) => child.once('exit', r));
  return {
    child,
    pid: child.pid!,
    healthzPort: o.healthzPort,
    readOnlyPort: o.readOnlyPort ?? 0,
    exited,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/** One GET on 127.0.0.1; the status (0 when nothing answers). */
export function httpStatus(port: number, p: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: p, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', () => resolve(0));
  });
}

export function httpBody(port: number, p: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: p, agent: false }, (res) => {
        let s = '';
        res.setEncoding('utf8').on('data', (c: string) => (s += c));
        res.on('end', () => resolve(s));
      })
      .on('error', reject);
  });
}

/** A bare Node process (the memory baseline): the same runtime with nothing loaded, kept alive. */
export function bareNode(): { pid: number; stop(): Promise<void> } {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1 << 30)'], { stdio: 'ignore' });
  const exited = new Promise((r) => child.once('exit', r));
  return {
    pid: child.pid!,
    async stop() {
      child.kill('SIGTERM');
      await exited;
    },
  };
}
