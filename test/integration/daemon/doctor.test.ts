/**
 * The host checks through the built binary: `nodelet doctor` (table and JSON, nothing
 * written), the daemon refusing swap with failSwapOn before the lock (this machine has no
 * swap, so a swap list is given through the test-only NODELET_TEST_PROC_SWAPS), the root
 * dir's kubelet layout after a start, and a corrupt device checkpoint rebuilt with a warning.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { freePort, runNodelet, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from '../../helpers/nodelet.js';
import { decodeDeviceCheckpoint } from '../../../src/system/root-dir.js';

const SWAP_ON = 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/swapfile                               file\t\t1048572\t\t0\t\t-2\n';

let cri: FakeRuntime;
beforeAll(async () => (cri = await startFakeRuntime()));
afterAll(async () => cri.stop());

const started: NodeletProcess[] = [];
afterEach(async () => {
  for (const p of started.splice(0)) {
    p.kill('SIGKILL');
    await p.exited;
  }
});

async function daemonArgs(dir: string, config?: string): Promise<string[]> {
  return [
    ...(config ? ['--config', config] : []),
    '--root-dir', path.join(dir, 'root'),
    '--lock-file', path.join(dir, 'kubelet.lock'),
    '--healthz-port', '0',
    '--read-only-port', '0',
    '--port', String(await freePort()),
    '--container-runtime-endpoint', cri.endpoint,
  ];
}

describe('nodelet doctor', () => {
  it('prints the table of every check without taking the lock or writing anything', async () => {
    const dir = tempDir();
    const r = await runNodelet(['doctor', ...(await daemonArgs(dir))]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^CHECK\s+REQUIRED\s+FOUND\s+VERDICT\s+WHAT TO DO$/);
    for (const check of ['swap', 'cgroup-version', 'cgroup-driver', 'kernel-version', 'psi', 'mount_setattr']) {
      expect(lines.some((l) => l.startsWith(`${check} `)), check).toBe(true);
    }
    expect(lines.at(-1)).toMatch(/^nodelet would start \(cgroup driver cgroupfs\)\.$/);
    // The test CRI server, like containerd 1.6, does not implement RuntimeConfig: the config's driver is used.
    expect(lines.find((l) => l.startsWith('cgroup-driver '))).toMatch(/does not implement RuntimeConfig; using cgroupDriver cgroupfs/);
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  it('-o json parses, and a refusing check makes it exit 1', async () => {
    const dir = tempDir();
    const ok = await runNodelet(['doctor', '-o', 'json', ...(await daemonArgs(dir))]);
    expect(ok.code, ok.stderr).toBe(0);
    const doc = JSON.parse(ok.stdout) as { checks: { check: string; verdict: string; required: string; found: string; action: string }[]; wouldStart: boolean; cgroupDriver: string };
    expect(doc.wouldStart).toBe(true);
    expect(doc.checks.find((c) => c.check === 'swap')).toMatchObject({ verdict: 'ok', found: 'swap off' });

    const swaps = path.join(dir, 'swaps');
    fs.writeFileSync(swaps, SWAP_ON);
    const bad = await runNodelet(['doctor', '-o', 'json', ...(await daemonArgs(dir))], { env: { NODELET_TEST_PROC_SWAPS: swaps } });
    expect(bad.code).toBe(1);
    const badDoc = JSON.parse(bad.stdout) as typeof doc;
    expect(badDoc.wouldStart).toBe(false);
    expect(badDoc.checks.find((c) => c.check === 'swap')).toMatchObject({ verdict: 'fail', found: 'swap on: /swapfile' });
  });
});

describe('the daemon runs the same checks at start', () => {
  it('swap on with failSwapOn: true refuses to start (exit 1, before the lock), saying how to allow it', async () => {
    const dir = tempDir();
    const swaps = path.join(dir, 'swaps');
    fs.writeFileSync(swaps, SWAP_ON);
    const config = writeKubeletConfig(dir, { failSwapOn: true, authentication: '{webhook: {enabled: false}, anonymous: {enabled: true}}', authorization: '{mode: AlwaysAllow}' });
    const r = await runNodelet(await daemonArgs(dir, config), { env: { NODELET_TEST_PROC_SWAPS: swaps } });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/swap: found swap on: \/swapfile; .*failSwapOn: false/);
    expect(fs.existsSync(path.join(dir, 'kubelet.lock'))).toBe(false);
    expect(fs.existsSync(path.join(dir, 'root'))).toBe(false);

    // failSwapOn: false lets it start with swap on.
    const allowed = writeKubeletConfig(dir, { failSwapOn: false, authentication: '{webhook: {enabled: false}, anonymous: {enabled: true}}', authorization: '{mode: AlwaysAllow}' });
    const p = startNodelet(await daemonArgs(dir, allowed), { env: { NODELET_TEST_PROC_SWAPS: swaps } });
    started.push(p);
    await p.waitForMsg(/nodelet is ready/);
  });

  it('leaves the kubelet\'s layout in the root dir, and rebuilds a corrupt device checkpoint with a warning', async () => {
    const dir = tempDir();
    const root = path.join(dir, 'root');
    fs.mkdirSync(path.join(root, 'device-plugins'), { recursive: true });
    fs.writeFileSync(path.join(root, 'device-plugins/kubelet_internal_checkpoint'), '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":1}');
    const p = startNodelet(await daemonArgs(dir));
    started.push(p);
    await p.waitForMsg(/nodelet is ready/);
    const warning = await p.waitForMsg(/kubelet_internal_checkpoint is corrupt/);
    expect(warning.level).toBe('warn');
    const mode = (d: string) => fs.statSync(path.join(root, d)).mode & 0o777;
    const umask = process.umask();
    expect(mode('checkpoints')).toBe(0o700);
    for (const [d, m] of [['pods', 0o750], ['plugins', 0o750], ['plugins_registry', 0o750], ['pod-resources', 0o750], ['device-plugins', 0o755], ['seccomp', 0o755], ['pki', 0o755], ['image_manager/pulling', 0o700], ['image_manager/pulled', 0o700]] as const) {
      expect(mode(d), d).toBe(m & ~umask);
    }
    const checkpoint = path.join(root, 'device-plugins/kubelet_internal_checkpoint');
    expect(decodeDeviceCheckpoint(fs.readFileSync(checkpoint, 'utf8'))).toEqual({ PodDeviceEntries: null, RegisteredDevices: {} });
    expect(fs.statSync(checkpoint).mode & 0o777).toBe(0o600);
    expect(fs.existsSync(path.join(root, 'device-plugins/kubelet.sock'))).toBe(false);
    // The host checks' warnings are in the log (this machine: cgroup v1 hybrid, containerd-like Unimplemented RuntimeConfig).
    expect(p.records.some((r) => r.component === 'host-checks' && r.level === 'warn')).toBe(true);
  });
});
