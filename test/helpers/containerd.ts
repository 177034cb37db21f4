/**
 * Real containerd for integration tests, through scripts/containerd.sh (the same script a
 * developer runs). The script is idempotent and flock-protected, so every test file may
 * call ensureContainerd(); the first one pays the start (~1.5 s), the others ~0.2 s.
 * A containerd that cannot start fails the test loudly with the script's output: tests
 * never skip.
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const projectRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const containerdScript = path.join(projectRoot, 'scripts/containerd.sh');

/** Images the script imports: full names, as containerd resolves them. */
export const BUSYBOX_IMAGE = 'docker.io/local/busybox:latest';
export const PAUSE_IMAGE = 'docker.io/local/pause:latest';

export interface ContainerdOptions {
  /** Base directory (NODELET_CONTAINERD_DIR); default the script's shared /var/lib/nodelet-dev/containerd. */
  dir?: string;
}

function run(args: string[], o: ContainerdOptions, timeoutMs = 240_000): Promise<{ code: number; stdout: string; stderr: string }> {
  const env = { ...process.env, ...(o.dir ? { NODELET_CONTAINERD_DIR: o.dir } : {}) };
  return new Promise((resolve) => {
    execFile(containerdScript, args, { env, timeout: timeoutMs, maxBuffer: 8 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/** Starts (or finds) the private containerd; resolves its CRI endpoint `unix:///...`. Throws with the script's output on failure. */
export async function ensureContainerd(o: ContainerdOptions = {}): Promise<{ endpoint: string }> {
  const r = await run(['start'], o);
  const last = r.stdout.trim().split('\n').pop() ?? '';
  if (r.code !== 0 || !last.startsWith('unix:///')) {
    throw new Error(`scripts/containerd.sh start failed (exit ${r.code}); containerd is required for this test.\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  }
  return { endpoint: last };
}

/** Stops the containerd the script started for this base directory (its pidfile PID only). */
export async function stopContainerd(o: ContainerdOptions = {}): Promise<void> {
  const r = await run(['stop'], o, 60_000);
  if (r.code !== 0) throw new Error(`scripts/containerd.sh stop failed (exit ${r.code}):\n${r.stderr}`);
}
