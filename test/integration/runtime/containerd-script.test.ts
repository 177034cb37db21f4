/**
 * scripts/containerd.sh's idea of "its" containerd: the PID in <base>/containerd.pid counts
 * only while that process is a containerd started with <base>/config.toml. A recycled PID
 * (any process, or the containerd of another base directory) is not ours: `start` would
 * otherwise wait for a socket that process never opens, as a CI run did when a stopped
 * containerd's PID was reused by a benchmark's containerd.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { containerdScript } from '../../helpers/containerd.js';

const children: ChildProcess[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

/** A process whose command name is `containerd` and whose arguments end with `--config <config>`. */
function fakeContainerd(dir: string, config: string): ChildProcess {
  const exe = path.join(dir, 'containerd');
  if (!fs.existsSync(exe)) {
    fs.copyFileSync('/bin/bash', exe);
    fs.chmodSync(exe, 0o755);
  }
  // `sleep; :` keeps bash itself running (a lone command would be exec'd and renamed).
  const c = spawn(exe, ['-c', 'sleep 300; :', '--config', config], { stdio: 'ignore' });
  children.push(c);
  return c;
}

function status(base: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(containerdScript, ['status'], { env: { ...process.env, NODELET_CONTAINERD_DIR: base }, timeout: 30_000 }, (err, stdout) => {
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, out: String(stdout).trim() });
    });
  });
}

async function untilComm(pid: number): Promise<void> {
  for (let i = 0; i < 200 && fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== 'containerd'; i++) await new Promise((r) => setTimeout(r, 10));
}

describe('scripts/containerd.sh and a PID in its pidfile', () => {
  it("does not take another base directory's containerd for its own (stopped), and does take one started with its own config", async () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-ctrd-pid-'));
    dirs.push(base);
    const other = fakeContainerd(base, '/var/lib/nodelet-dev/containerd-elsewhere/config.toml');
    await untilComm(other.pid!);
    fs.writeFileSync(path.join(base, 'containerd.pid'), `${other.pid}\n`);
    expect(await status(base)).toEqual({ code: 3, out: 'stopped' });

    const ours = fakeContainerd(base, path.join(base, 'config.toml'));
    await untilComm(ours.pid!);
    fs.writeFileSync(path.join(base, 'containerd.pid'), `${ours.pid}\n`);
    // Ours, but it answers no CRI call (no socket): the script says so instead of "stopped".
    expect(await status(base)).toEqual({ code: 3, out: `starting-or-unresponsive ${ours.pid} unix://${base}/containerd.sock` });
  });
});
