/**
 * Hostile files against the built daemon (on the test CRI server): files dropped into
 * staticPodPath never stall /healthz, grow memory or disturb a running static pod, and
 * each is logged once; a seccomp profile that links out of <root-dir>/seccomp, is a FIFO
 * or /dev/zero is refused fast and never echoed; a FIFO among the checkpoint archives, as
 * `checkpoint inspect`'s argument, as --config or as a drop-in is refused at once.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import type { Pod, PodList } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeNode, sleeperManifest, type FakeNode } from '../../helpers/fake-node.js';
import { eventually, runNodelet, startNodelet, tempDir, type LogRecord, type NodeletProcess } from '../../helpers/nodelet.js';
import { startHealthzPoller } from '../../helpers/healthz-poller.js';
import { request } from '../server/client.js';
import { createTestCa, type Issued } from '../server/pki.js';

let node: FakeNode;
let nodelet: NodeletProcess;
let dir: string;
let manifests: string;
let rootDir: string;
let readOnlyPort: number;
let healthzPort: number;
let port: number;
let serverCa: string;
let client: Issued;
const SECRET = 'TOP-SECRET-4f1d9c';

const manifest = (name: string, extra = '') => sleeperManifest(name, undefined, extra);

beforeAll(async () => {
  const ca = await createTestCa();
  client = await ca.issue({ cn: 'ops', orgs: ['ops'] });
  node = await startFakeNode({ prefix: 'nodelet-hostile-', manifests: { 'good.yaml': manifest('good') }, clientCA: ca.cert, start: false });
  ({ dir, manifests, rootDir } = node);
  ({ https: port, readOnly: readOnlyPort, healthz: healthzPort } = node.ports);
  fs.mkdirSync(path.join(rootDir, 'seccomp'), { recursive: true, mode: 0o700 });
  nodelet = await node.start();
  await eventually(async () => (await pod('good-n1'))?.status?.containerStatuses?.[0]?.state?.running, 20_000);
  serverCa = node.servingCert();
}, 60_000);

afterAll(() => node?.close());

async function pods(): Promise<Pod[]> {
  const res = await fetch(`http://127.0.0.1:${readOnlyPort}/pods`);
  return ((await res.json()) as PodList).items;
}

async function pod(name: string): Promise<Pod | undefined> {
  return (await pods()).find((p) => p.metadata?.name === name);
}

/** One GET /healthz; its latency in ms, or Infinity when it failed or took over 2 s. */
function healthz(): Promise<number> {
  const start = performance.now();
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port: healthzPort, path: '/healthz', timeout: 2000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode === 200 ? performance.now() - start : Infinity));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(Infinity));
  });
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m![1]) / 1024;
}

/**
 * A file dropped into staticPodPath in one step: written beforehand under a dotfile name
 * (ignored by nodelet), renamed into place when the test drops it, so the test's own
 * writing is not inside the measured window and nodelet sees one version.
 */
function staged(name: string, text: string | (() => void)): () => void {
  const tmp = path.join(manifests, `.${name}.tmp`);
  if (typeof text === 'string') fs.writeFileSync(tmp, text);
  else text();
  return () => fs.renameSync(tmp, path.join(manifests, name));
}

const mentions = (records: LogRecord[], file: string) => records.filter((r) => JSON.stringify(r).includes(file));

/** A file root cannot read either: a write-only sysfs attribute (open for reading fails with EACCES even for root). */
const unreadableTarget = ['/sys/bus/pci/rescan', '/sys/bus/pci/drivers_probe', '/sys/kernel/slab/kmalloc-8/validate'].find((f) => {
  try {
    fs.closeSync(fs.openSync(f, 'r'));
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EACCES';
  }
});

describe('hostile files in staticPodPath', () => {
  it('never stall /healthz, grow RSS by 100 MB or touch the running pod; each is logged once', async () => {
    const before = (await pod('good-n1'))!.status!.containerStatuses![0]!.containerID;
    expect(before).toBeTruthy();
    const bomb = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
    for (let i = 1; i < 9; i++) bomb.push(`${'abcdefghi'[i]}: &${'abcdefghi'[i]} [${Array(9).fill(`*${'abcdefghi'[i - 1]}`).join(',')}]`);
    const hostile: [string, () => void][] = [
      // 50 MB: a YAML list of 13 million `- 1` lines, written in chunks.
      ['big.yaml', staged('big.yaml', () => {
        const fd = fs.openSync(path.join(manifests, '.big.yaml.tmp'), 'w');
        const chunk = Buffer.from('- 1\n'.repeat(1_000_000));
        for (let i = 0; i < 13; i++) fs.writeSync(fd, chunk);
        fs.closeSync(fd);
      })],
      ['deep.yaml', staged('deep.yaml', '['.repeat(10_000) + ']'.repeat(10_000))],
      ['bomb.yaml', staged('bomb.yaml', bomb.join('\n') + '\n')],
      ['keys.yaml', staged('keys.yaml', Array.from({ length: 100_000 }, (_, i) => `key${i}: value${i}`).join('\n'))],
      // Under the 1.5 MiB size limit, so the parser (off the main thread) has to refuse it.
      ['keys-1mib.yaml', staged('keys-1mib.yaml', Array.from({ length: 60_000 }, (_, i) => `k${i}: v${i}`).join('\n'))],
      ['fifo.yaml', () => execFileSync('mkfifo', [path.join(manifests, 'fifo.yaml')])],
      ['loop.yaml', () => fs.symlinkSync('loop.yaml', path.join(manifests, 'loop.yaml'))],
      ['zero.yaml', () => fs.symlinkSync('/dev/zero', path.join(manifests, 'zero.yaml'))],
      ...(unreadableTarget ? [['unreadable.yaml', () => fs.symlinkSync(unreadableTarget, path.join(manifests, 'unreadable.yaml'))] as [string, () => void]] : []),
    ];
    const baseline = rssMb(nodelet.pid);
    const poller = startHealthzPoller(healthzPort, nodelet.pid);
    const took: Record<string, number> = {};
    for (const [name, create] of hostile) {
      const start = performance.now();
      create();
      await nodelet.waitFor((r) => r.file === path.join(manifests, name), 10_000);
      took[name] = Math.round(performance.now() - start);
    }
    // A few more seconds (inotify events from the renames, any rescan): nothing is read or logged again.
    await new Promise((r) => setTimeout(r, 2500));
    const s = await poller.stop();

    for (const [name] of hostile) expect(mentions(nodelet.records, path.join(manifests, name)), name).toHaveLength(1);
    const msg = (name: string) => mentions(nodelet.records, path.join(manifests, name))[0]!.msg;
    expect(msg('big.yaml')).toMatch(/over the 1\.5 MiB limit: skipped without reading it/);
    expect(msg('keys.yaml')).toMatch(/over the 1\.5 MiB limit/);
    expect(msg('deep.yaml')).toMatch(/nested deeper than 100 levels/);
    expect(msg('bomb.yaml')).toMatch(/more than 20000 YAML nodes, aliases expanded/);
    expect(msg('keys-1mib.yaml')).toMatch(/more than 20000 YAML nodes/);
    expect(msg('fifo.yaml')).toMatch(/is a FIFO, not a regular file/);
    expect(msg('loop.yaml')).toMatch(/symlink loop/);
    expect(msg('zero.yaml')).toMatch(/is a character device/);
    if (unreadableTarget) expect(msg('unreadable.yaml')).toMatch(/is not readable \(permission denied\)/);

    const worst = Math.max(...s.latencies);
    const peak = Math.max(...s.rssMb);
    console.log(`hostile files: ${s.latencies.length} healthz samples, worst ${worst.toFixed(1)} ms; RSS ${baseline.toFixed(0)} -> peak ${peak.toFixed(0)} MB; ms to log each: ${JSON.stringify(took)}`);
    expect(s.latencies.length).toBeGreaterThan(20);
    expect(s.latencies.filter((l) => l < 0), 'failed /healthz answers').toEqual([]);
    expect(worst).toBeLessThan(500);
    expect(peak - baseline).toBeLessThan(100);
    const good = (await pod('good-n1'))!;
    expect(good.status!.containerStatuses![0]!.containerID).toBe(before);
    expect(good.status!.containerStatuses![0]!.state!.running).toBeTruthy();
  }, 60_000);
});

describe('seccomp profiles', () => {
  it('a link out of <root-dir>/seccomp is refused naming the file, and the secret never appears', async () => {
    const secretFile = path.join(dir, 'secret.json');
    fs.writeFileSync(secretFile, `{"defaultAction":"${SECRET}"}`);
    fs.symlinkSync(secretFile, path.join(rootDir, 'seccomp', 'x.json'));
    fs.writeFileSync(path.join(manifests, 'sec-link.yaml'), manifest('sec-link', '    securityContext: {seccompProfile: {type: Localhost, localhostProfile: x.json}}\n'));
    const waiting = await eventually(async () => {
      const w = (await pod('sec-link-n1'))?.status?.containerStatuses?.[0]?.state?.waiting;
      return w?.message ? w : undefined;
    }, 10_000);
    expect(waiting.reason).toBe('CreateContainerError');
    expect(waiting.message).toContain(path.join(rootDir, 'seccomp', 'x.json'));
    expect(waiting.message).toMatch(/leaves the directory/);
    expect(JSON.stringify(await pods())).not.toContain(SECRET);
    expect(nodelet.stdout + nodelet.stderr).not.toContain(SECRET);
  });

  it('a FIFO and a /dev/zero link as the profile are refused within a second; SIGTERM afterwards exits at once', async () => {
    execFileSync('mkfifo', [path.join(rootDir, 'seccomp', 'fifo.json')]);
    fs.symlinkSync('/dev/zero', path.join(rootDir, 'seccomp', 'zero.json'));
    const refusedIn: Record<string, number> = {};
    for (const [name, profile] of [['sec-fifo', 'fifo.json'], ['sec-zero', 'zero.json']] as const) {
      // From the manifest landing (picked up by inotify, sandbox created) to the refusal in the status.
      const start = performance.now();
      fs.writeFileSync(path.join(manifests, `${name}.yaml`), manifest(name, `    securityContext: {seccompProfile: {type: Localhost, localhostProfile: ${profile}}}\n`));
      const w = await eventually(async () => (await pod(`${name}-n1`))?.status?.containerStatuses?.[0]?.state?.waiting?.message, 5_000, 20);
      refusedIn[name] = Math.round(performance.now() - start);
      expect(w).toMatch(name === 'sec-fifo' ? /is a FIFO, not a regular file/ : /is a character device, not a regular file/);
    }
    console.log(`seccomp refusals (ms from the manifest written): ${JSON.stringify(refusedIn)}`);
    for (const ms of Object.values(refusedIn)) expect(ms).toBeLessThan(1000);
    // /healthz still answers: no libuv thread is stuck on the FIFO.
    expect(await healthz()).toBeLessThan(500);
    const start = performance.now();
    nodelet.kill('SIGTERM');
    const exit = await nodelet.exited;
    const ms = performance.now() - start;
    console.log(`SIGTERM to exit: ${ms.toFixed(0)} ms`);
    expect(exit.code).toBe(0);
    expect(ms).toBeLessThan(20_000);
  }, 40_000);
});

describe('FIFOs where nodelet expects files', () => {
  it('a FIFO named like an archive: GET /checkpoints skips it at once, checkpoint inspect exits 1 naming it', async () => {
    // The first nodelet stopped above; a new one on the same root dir serves GET /checkpoints.
    const fifo = path.join(rootDir, 'checkpoints', 'checkpoint-good-n1_default-web-2026-01-01T00:00:00Z.tar');
    fs.mkdirSync(path.dirname(fifo), { recursive: true, mode: 0o700 });
    execFileSync('mkfifo', [fifo]);
    const second = startNodelet(['--config', path.join(dir, 'kubelet.yaml'), '--root-dir', rootDir, '--lock-file', path.join(dir, 'lock'), '--hostname-override', 'n1']);
    try {
      await second.waitForMsg(/nodelet is ready/, 30_000);
      const start = performance.now();
      const list = await request(`https://127.0.0.1:${port}/checkpoints`, { ca: serverCa, cert: client.cert, key: client.key });
      const ms = performance.now() - start;
      expect(list.status).toBe(200);
      expect((list.json() as { items: { path: string; error?: string }[] }).items.filter((i) => i.path === fifo && !i.error)).toEqual([]);
      expect(ms).toBeLessThan(1000);
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
    const start = performance.now();
    const r = await runNodelet(['checkpoint', 'inspect', fifo], { timeoutMs: 10_000 });
    const ms = performance.now() - start;
    console.log(`checkpoint inspect <fifo>: exit ${r.code} in ${ms.toFixed(0)} ms`);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(fifo);
    expect(r.stderr).toMatch(/is not a regular file: it is a FIFO/);
    // The whole process (Node's own start is most of it, seconds on a loaded machine): a
    // FIFO that blocked would never end.
    expect(ms).toBeLessThan(10_000);
  }, 60_000);

  it('a FIFO as --config or as a drop-in: exit 1 naming it, before the lock is taken', async () => {
    const d = tempDir('nodelet-hostile-cfg-');
    try {
      const fifo = path.join(d, 'kubelet.yaml');
      execFileSync('mkfifo', [fifo]);
      fs.mkdirSync(path.join(d, 'conf.d'));
      const dropIn = path.join(d, 'conf.d', '10-fifo.conf');
      execFileSync('mkfifo', [dropIn]);
      fs.writeFileSync(path.join(d, 'ok.yaml'), 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n');
      for (const [args, file] of [
        [['--config', fifo], fifo],
        [['--config', path.join(d, 'ok.yaml'), '--config-dir', path.join(d, 'conf.d')], dropIn],
      ] as const) {
        const start = performance.now();
        const r = await runNodelet([...args, '--root-dir', path.join(d, 'root'), '--lock-file', path.join(d, 'lock')], { timeoutMs: 10_000 });
        const ms = performance.now() - start;
        expect(r.code).toBe(1);
        expect(r.stdout + r.stderr).toContain(file);
        expect(r.stdout + r.stderr).toMatch(/is a FIFO, not a regular file/);
        expect(ms).toBeLessThan(10_000); // the whole process, as above

        expect(fs.existsSync(path.join(d, 'lock'))).toBe(false);
      }
    } finally {
      fs.rmSync(d, { recursive: true, force: true });
    }
  }, 30_000);
});
