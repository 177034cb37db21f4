/**
 * Starts the BUILT nodelet (dist/nodelet/main.js, the bundle `npm run build` makes and
 * operators run) as a child process, the way systemd or an operator does, and follows its
 * JSON log lines.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const projectRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const nodeletBin = path.join(projectRoot, 'dist/nodelet/main.js');

/**
 * The node flags an entry point's first line gives (`#!/usr/bin/env -S node <flags>`, as
 * src/main.ts writes it and the bundle keeps it): what `/usr/local/bin/nodelet`, the unit
 * and the quick start run with, so that tests and benchmarks that spawn `node <entry>`
 * run nodelet the same way. Throws when the first line is not such a shebang.
 */
export function shebangNodeFlags(entry = nodeletBin): string[] {
  const first = fs.readFileSync(entry, 'utf8').split('\n', 1)[0]!;
  const m = /^#!\/usr\/bin\/env(?: -S)? node((?: --[a-z0-9-]+(?:=\S+)?)*)$/.exec(first);
  if (!m) throw new Error(`${entry}: the first line must be "#!/usr/bin/env node" or "#!/usr/bin/env -S node --flag ...", found ${JSON.stringify(first)}`);
  return m[1]!.split(' ').filter(Boolean);
}

export interface LogRecord {
  level: string;
  msg: string;
  component?: string;
  [k: string]: unknown;
}

export class NodeletProcess {
  readonly records: LogRecord[] = [];
  stdout = '';
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  #waiters: { pred: (r: LogRecord) => boolean; resolve: (r: LogRecord) => void }[] = [];

  constructor(readonly child: ChildProcess) {
    let buf = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      this.stdout += d;
      buf += d;
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        try {
          const rec = JSON.parse(line.replace(/^<\d>/, '')) as LogRecord;
          this.records.push(rec);
          this.#waiters = this.#waiters.filter((w) => (w.pred(rec) ? (w.resolve(rec), false) : true));
        } catch {
          /* not a JSON record */
        }
      }
    });
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (this.stderr += d));
    this.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Resolves with the first record (past or future) matching; rejects after timeoutMs or on exit. */
  waitFor(pred: (r: LogRecord) => boolean, timeoutMs = 15_000): Promise<LogRecord> {
    const seen = this.records.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`timed out waiting for a log record; stdout:\n${this.stdout}\nstderr:\n${this.stderr}`)), timeoutMs);
      this.#waiters.push({
        pred,
        resolve: (r) => {
          clearTimeout(t);
          resolve(r);
        },
      });
      void this.exited.then(({ code, signal }) => {
        clearTimeout(t);
        reject(new Error(`nodelet exited (code ${code}, signal ${signal}) before the awaited record; stdout:\n${this.stdout}\nstderr:\n${this.stderr}`));
      });
    });
  }

  waitForMsg(re: RegExp, timeoutMs?: number): Promise<LogRecord> {
    return this.waitFor((r) => re.test(r.msg), timeoutMs);
  }

  /** Sends a signal to this process only (by PID) unless it already exited. */
  kill(sig: NodeJS.Signals = 'SIGTERM'): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(sig);
  }
}

/**
 * A nodelet a test started ends with the test's process: `setpriv --pdeathsig SIGTERM` (util-linux,
 * in every Debian) execs nodelet with the kernel's parent-death signal set, so the PID is still
 * nodelet's. Without it, a test run killed by a timeout (or a test that failed before its
 * cleanup) left nodelets running on the same containerd directory as the next run's: two
 * agents on one runtime, each removing the other's pods (the "fresh machine" flakes of issue 31).
 */
const PARENT_DEATH = fs.existsSync('/usr/bin/setpriv') ? ['/usr/bin/setpriv', '--pdeathsig', 'SIGTERM', '--'] : [];

/**
 * `prefix`: a command nodelet runs under (e.g. `['strace', '-f', ...]`, which ends its
 * argument list with the node binary and nodelet's arguments); `pid` is then the prefix's.
 */
export function startNodelet(args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; prefix?: string[] } = {}): NodeletProcess {
  if (!fs.existsSync(nodeletBin)) throw new Error(`${nodeletBin} is missing: run \`npm run build\` first`);
  const env = { ...process.env, ...opts.env };
  for (const k of ['NOTIFY_SOCKET', 'WATCHDOG_USEC', 'WATCHDOG_PID', 'JOURNAL_STREAM'] as const) {
    if (!(opts.env && k in opts.env)) delete env[k];
  }
  // NODELET_TEST_NODE_ARGS: extra node flags for a profiling run (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`).
  const nodeArgs = (process.env.NODELET_TEST_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const argv = [process.execPath, ...shebangNodeFlags(), ...nodeArgs, nodeletBin, ...args];
  if (opts.prefix?.length) argv.unshift(...opts.prefix);
  argv.unshift(...PARENT_DEATH);
  const child = spawn(argv[0]!, argv.slice(1), { env, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  return new NodeletProcess(child);
}

/** Runs nodelet to completion (for commands and for startups that must fail). */
export async function runNodelet(args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}) {
  const p = startNodelet(args, opts);
  const t = setTimeout(() => p.kill('SIGKILL'), opts.timeoutMs ?? 20_000);
  const { code, signal } = await p.exited;
  clearTimeout(t);
  return { code, signal, stdout: p.stdout, stderr: p.stderr, records: p.records };
}

export function tempDir(prefix = 'nodelet-test-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** Polls `fn` until it returns a truthy value, or throws after timeoutMs. */
export async function eventually<T>(fn: () => T | Promise<T>, timeoutMs = 10_000, everyMs = 100): Promise<NonNullable<T>> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`condition not met within ${timeoutMs}ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * Writes a KubeletConfiguration for a test nodelet at `<dir>/kubelet.yaml` and returns its
 * path: the header, then one `key: value` line per field (values are YAML flow text).
 */
export function writeKubeletConfig(dir: string, fields: Record<string, string | number | boolean>): string {
  const file = path.join(dir, 'kubelet.yaml');
  const lines = ['apiVersion: kubelet.config.k8s.io/v1beta1', 'kind: KubeletConfiguration', ...Object.entries(fields).map(([k, v]) => `${k}: ${v}`), ''];
  fs.writeFileSync(file, lines.join('\n'));
  return file;
}
