/**
 * kubectl 1.32 (/usr/bin/kubectl, a client no one here wrote) as the tests run it: to its end
 * with a kubeconfig and a HOME of the test's own (so nothing of the machine's ~/.kube is read),
 * or as processes a test watches (`KubectlProcesses`: streams, background commands and a real
 * terminal), each of which the test's teardown stops.
 */
import { execFile, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import path from 'node:path';
import { eventually } from './nodelet.js';

export const KUBECTL = '/usr/bin/kubectl';

export interface KubectlResult {
  /** kubectl's exit code (1 when it was killed). */
  code: number;
  stdout: string;
  stderr: string;
}

export interface KubectlOptions {
  kubeconfig: string;
  /** HOME for kubectl. */
  home: string;
  /** KUBECACHEDIR, its discovery cache (default `<home>/kubectl-cache`). */
  cacheDir?: string;
  /** Killed after this long (default 20 s). */
  timeoutMs?: number;
  maxBuffer?: number;
}

/** The environment kubectl runs with: this process's, with HOME and KUBECACHEDIR of the test's own. */
export function kubectlEnv(home: string, cacheDir = path.join(home, 'kubectl-cache')): NodeJS.ProcessEnv {
  return { ...process.env, HOME: home, KUBECACHEDIR: cacheDir };
}

/** Runs kubectl to its end; `input`, when given, is its stdin (then closed). Never rejects: a failure is a non-zero code. */
export function runKubectl(o: KubectlOptions, args: string[], input?: string): Promise<KubectlResult> {
  return new Promise((resolve) => {
    const child = execFile(KUBECTL, ['--kubeconfig', o.kubeconfig, ...args], { timeout: o.timeoutMs ?? 20_000, ...(o.maxBuffer ? { maxBuffer: o.maxBuffer } : {}), env: kubectlEnv(o.home, o.cacheDir) }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
    if (input !== undefined) child.stdin!.end(input);
  });
}

/** kubectl as the admin of a test folder (`<dir>/admin.kubeconfig`, as startTestCluster writes it; HOME `dir`). */
export function adminKubectl(dir: string, args: string[], input?: string): Promise<KubectlResult> {
  return runKubectl({ kubeconfig: path.join(dir, 'admin.kubeconfig'), home: dir }, args, input);
}

/** A kubectl on a real pseudo-terminal (util-linux `script`), what it showed so far, and waits on it. */
export interface KubectlTerminal {
  child: ChildProcessWithoutNullStreams;
  /** Everything the terminal showed (latin1). */
  output(): string;
  /** kubectl's exit code once it ends. */
  exited: Promise<number | null>;
  /** Waits until `re` matches what the terminal showed from offset `from`; the error quotes it. */
  seen(re: RegExp, from?: number, ms?: number): Promise<RegExpExecArray>;
}

/**
 * The kubectl processes of one test file, with the kubeconfig `kubeconfig()` names (read at
 * each start, so it may name a folder made in beforeAll). Every process started here is
 * stopped by `stopAll()` (the file's afterAll), also one a failed test left running.
 */
export class KubectlProcesses {
  readonly children = new Set<ChildProcessWithoutNullStreams>();

  constructor(private readonly kubeconfig: () => string) {}

  /** Starts `kubectl --kubeconfig <file> <args>` with pipes, tracked until it ends. */
  spawn(args: string[]): ChildProcessWithoutNullStreams {
    return this.track(spawn(KUBECTL, ['--kubeconfig', this.kubeconfig(), ...args], { stdio: 'pipe' }));
  }

  /** Runs kubectl to its end (SIGKILL after `timeoutMs`, default 20 s); stdin gets `input` and its end. */
  run(args: string[], o: { input?: string; timeoutMs?: number } = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      const c = this.spawn(args);
      let stdout = '';
      let stderr = '';
      c.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const t = setTimeout(() => c.kill('SIGKILL'), o.timeoutMs ?? 20_000);
      c.on('close', (code) => {
        clearTimeout(t);
        resolve({ code, stdout, stderr });
      });
      c.stdin.end(o.input ?? '');
    });
  }

  /** A long-running kubectl whose output (stdout and stderr together) the test watches. */
  background(args: string[]): { child: ChildProcessWithoutNullStreams; output: () => string } {
    const c = this.spawn(args);
    let out = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString()));
    c.stderr.on('data', (d: Buffer) => (out += d.toString()));
    return { child: c, output: () => out };
  }

  /**
   * `kubectl <args>` on a real pseudo-terminal: util-linux `script` gives its child one and
   * relays our pipe to it and its output back. `setup`: shell commands run on that terminal
   * first (`stty rows 30 cols 90`). `seenMs`: how long `seen` waits by default.
   */
  terminal(args: string, o: { setup?: string; seenMs?: number } = {}): KubectlTerminal {
    const k = this.track(spawn('script', ['-qfec', `${o.setup ? `${o.setup}; ` : ''}exec ${KUBECTL} --kubeconfig ${this.kubeconfig()} ${args}`, '/dev/null'], { stdio: 'pipe' }));
    let out = '';
    k.stdout.on('data', (d: Buffer) => (out += d.toString('latin1')));
    k.stderr.on('data', (d: Buffer) => (out += d.toString('latin1')));
    const exited = new Promise<number | null>((resolve) => k.once('close', (code) => resolve(code)));
    const seen = (re: RegExp, from = 0, ms = o.seenMs ?? 10_000) =>
      eventually(() => re.exec(out.slice(from)) ?? undefined, ms, 20).catch(() => {
        throw new Error(`${re} not seen; the terminal showed: ${JSON.stringify(out.slice(from))}`);
      });
    return { child: k, output: () => out, exited, seen };
  }

  /** SIGTERM to `c` unless it ended; resolves once it has. */
  stop(c: ChildProcessWithoutNullStreams): Promise<void> {
    if (c.exitCode !== null || c.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      c.once('close', () => resolve());
      c.kill('SIGTERM');
    });
  }

  /** Stops every process still running (a file's afterAll). */
  async stopAll(): Promise<void> {
    for (const c of [...this.children]) await this.stop(c);
  }

  private track(c: ChildProcessWithoutNullStreams): ChildProcessWithoutNullStreams {
    this.children.add(c);
    c.on('close', () => this.children.delete(c));
    return c;
  }
}
