/**
 * Credential plugins: a kubeconfig user with `exec` (client.authentication.k8s.io/v1 or
 * v1beta1), as client-go's plugin/pkg/client/auth/exec runs them. The plugin is a program
 * (`aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`) that prints an
 * ExecCredential on its stdout: a bearer token or a client certificate and key, with an
 * optional `expirationTimestamp`.
 *
 * As client-go:
 * - the environment is nodelet's plus the config's `env`, and `KUBERNETES_EXEC_INFO` holds
 *   an ExecCredential of the configured version with `spec.interactive: false` and, with
 *   `provideClusterInfo`, `spec.cluster` (server, CA data, tls-server-name, the cluster's
 *   `client.authentication.k8s.io/exec` extension as `config`);
 * - the answer must be an ExecCredential of the configured apiVersion with a status holding a
 *   token or a certificate and key (both), else the run failed;
 * - the credential is used until `expirationTimestamp` passes (none: until a 401), then the
 *   plugin runs again; a 401 from the API server runs it again unless another caller already
 *   did since that credential was handed out (`refresh(stale)`);
 * - a missing executable is reported with client-go's help and the config's `installHint`.
 *
 * Where nodelet differs, because a node agent has no terminal and must not hang: stdin is
 * never given (`interactiveMode: Always` is refused when the kubeconfig is read, naming it;
 * `IfAvailable` and `Never` run non-interactively); a run is bounded in time (RUN_TIMEOUT_MS,
 * the plugin's process group then killed; client-go has no bound) and in output (stdout
 * MAX_STDOUT_BYTES, past it the plugin is killed and the answer refused; stderr kept up to
 * its last MAX_STDERR_BYTES for the error message, never passed through); one run at a time
 * (callers wait for the run in progress); a failed run is remembered and the plugin is not
 * run again before a backoff (1 s doubling to 1 min, the failure returned meanwhile), so a
 * broken plugin is not spawned once per request. The process is spawned, never run
 * synchronously: the event loop keeps turning while it works.
 */
import { spawn } from 'node:child_process';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { backoffDelay, realClock, type Clock } from '../clock.js';
import { NodeletError, errorMessage } from '../errors.js';
import type { Logger } from '../log.js';

export const EXEC_API_VERSIONS = ['client.authentication.k8s.io/v1', 'client.authentication.k8s.io/v1beta1'] as const;
export type ExecApiVersion = (typeof EXEC_API_VERSIONS)[number];
export type InteractiveMode = 'Never' | 'IfAvailable' | 'Always';

/** The bound of one run of the plugin. */
export const RUN_TIMEOUT_MS = 30_000;
/** The most stdout a plugin may print: an ExecCredential with a certificate chain and key is a few KiB. */
export const MAX_STDOUT_BYTES = 1024 * 1024;
/** The end of stderr kept for the error message. */
export const MAX_STDERR_BYTES = 4096;
const BACKOFF_BASE_MS = 1000;
const BACKOFF_MAX_MS = 60_000;

/** client-go's help when the executable is missing (installHintVerboseHelp). */
const INSTALL_HELP =
  'It looks like you are trying to use a client-go credential plugin that is not installed.\n\nTo learn more about this feature, consult the documentation available at:\n      https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins';

/** What the plugin is told about the cluster (`spec.cluster`, client.authentication.k8s.io Cluster). */
export interface ExecClusterInfo {
  server: string;
  'tls-server-name'?: string;
  'insecure-skip-tls-verify'?: boolean;
  /** base64 of the CA's PEM, as Go encodes []byte. */
  'certificate-authority-data'?: string;
  'proxy-url'?: string;
  'disable-compression'?: boolean;
  config?: unknown;
}

/** A kubeconfig user's `exec`, validated (kubeconfig.ts parseExecConfig). */
export interface ExecConfig {
  command: string;
  args: string[];
  env: { name: string; value: string }[];
  apiVersion: ExecApiVersion;
  installHint?: string;
  provideClusterInfo: boolean;
  interactiveMode: InteractiveMode;
  cluster: ExecClusterInfo;
  /** `<kubeconfig>: users[i].user.exec`, for messages. */
  origin: string;
}

/** A credential for the API server: a token, or a client certificate and key. */
export interface Credential {
  token?: string;
  cert?: string;
  key?: string;
  /** ms since the epoch; absent: until a 401. */
  expiresAt?: number;
}

/** What the control-plane client asks of a credential provider. */
export interface CredentialSource {
  /** The credential to send now (runs the plugin when there is none or it expired). */
  get(signal?: AbortSignal): Promise<Credential>;
  /** The server refused `stale` (401): the next get() runs the plugin again, unless it already did since. */
  refresh(stale: Credential): void;
}

/** What one run produced. */
export interface RunResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: string;
  /** The executable could not be started (ENOENT, EACCES). */
  spawnError?: NodeJS.ErrnoException;
  timedOut: boolean;
  stdoutTooLarge: boolean;
}

export interface RunOptions {
  env: NodeJS.ProcessEnv;
  timeoutMs: number;
  maxStdoutBytes: number;
  maxStderrBytes: number;
  clock: Clock;
  signal?: AbortSignal;
}

/** Keeps the last `max` bytes of a stream. */
function tailKeeper(max: number): { push(b: Buffer): void; text(): string } {
  let chunks: Buffer[] = [];
  let n = 0;
  return {
    push(b) {
      chunks.push(b);
      n += b.length;
      if (n > 2 * max) {
        const all = Buffer.concat(chunks, n).subarray(n - max);
        chunks = [all];
        n = all.length;
      }
    },
    text() {
      const all = Buffer.concat(chunks, n);
      return (all.length > max ? all.subarray(all.length - max) : all).toString('utf8').trim();
    },
  };
}

/**
 * Runs the plugin once (spawn, its own process group, stdin closed), bounded in time (the
 * injected clock's sleep, so tests drive it) and in stdout. Never rejects.
 */
export function runPlugin(command: string, args: readonly string[], o: RunOptions): Promise<RunResult> {
  return new Promise((resolve) => {
    const stdout: Buffer[] = [];
    let outBytes = 0;
    const stderr = tailKeeper(o.maxStderrBytes);
    let timedOut = false;
    let stdoutTooLarge = false;
    let spawnError: NodeJS.ErrnoException | undefined;
    const timer = new AbortController();
    const child = spawn(command, [...args], { env: o.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    };
    child.stdout.on('data', (b: Buffer) => {
      if (stdoutTooLarge) return;
      outBytes += b.length;
      if (outBytes > o.maxStdoutBytes) {
        stdoutTooLarge = true;
        kill();
        return;
      }
      stdout.push(b);
    });
    child.stderr.on('data', (b: Buffer) => stderr.push(b));
    child.on('error', (err: NodeJS.ErrnoException) => {
      spawnError = err;
    });
    const onAbort = () => kill();
    o.signal?.addEventListener('abort', onAbort, { once: true });
    o.clock.sleep(o.timeoutMs, timer.signal).then(
      () => {
        timedOut = true;
        kill();
      },
      () => {},
    );
    // 'exit', not 'close': a grandchild holding the pipes open must not hold the answer.
    let settled = false;
    const finish = (exitCode: number | null, sig: NodeJS.Signals | null) => {
      if (settled) return;
      settled = true;
      timer.abort();
      o.signal?.removeEventListener('abort', onAbort);
      // Whatever the group still runs goes with the run (a plugin's helper left behind).
      if (exitCode !== 0 || timedOut || stdoutTooLarge) kill();
      setImmediate(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        resolve({ exitCode, signal: sig, stdout: Buffer.concat(stdout), stderr: stderr.text(), ...(spawnError ? { spawnError } : {}), timedOut, stdoutTooLarge });
      });
    };
    child.once('exit', (code, sig) => {
      // Let the pipes deliver what the plugin wrote before it exited.
      let open = 2;
      const done = () => {
        if (--open === 0) finish(code, sig);
      };
      child.stdout.once('close', done);
      child.stderr.once('close', done);
      // A pipe held open by a grandchild: answer once the loop had a turn to read.
      setTimeout(() => finish(code, sig), 50).unref();
    });
    child.once('error', () => {
      if (child.pid === undefined) finish(null, null);
    });
  });
}

/** The environment of a run: nodelet's, the config's env, KUBERNETES_EXEC_INFO. */
export function pluginEnv(cfg: ExecConfig, base: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...base };
  for (const e of cfg.env) env[e.name] = e.value;
  const info = { apiVersion: cfg.apiVersion, kind: 'ExecCredential', spec: { interactive: false, ...(cfg.provideClusterInfo ? { cluster: cfg.cluster } : {}) } };
  env.KUBERNETES_EXEC_INFO = JSON.stringify(info);
  return env;
}

function failed(cfg: ExecConfig, message: string, details: Record<string, unknown> = {}): NodeletError {
  return new NodeletError('UNAVAILABLE', `credential plugin ${cfg.command} (${cfg.origin}): ${message}`, { reason: 'CredentialPluginFailed', command: cfg.command, ...details });
}

/** Why a run failed, in client-go's words where it has them, with the plugin's stderr; undefined when it succeeded. */
export function runFailure(cfg: ExecConfig, r: RunResult, timeoutMs: number, maxStdoutBytes: number): NodeletError | undefined {
  const withStderr = (m: string) => (r.stderr ? `${m}; stderr: ${r.stderr}` : m);
  if (r.spawnError) {
    if (r.spawnError.code === 'ENOENT') {
      const hint = cfg.installHint ? `\n\n${cfg.installHint}` : '';
      return failed(cfg, `executable ${cfg.command} not found\n\n${INSTALL_HELP}${hint}`, { errno: 'ENOENT' });
    }
    return failed(cfg, `cannot run ${cfg.command}: ${r.spawnError.code ?? errorMessage(r.spawnError)}`, { errno: r.spawnError.code });
  }
  if (r.stdoutTooLarge) return failed(cfg, `its output is larger than ${maxStdoutBytes} bytes; refused`);
  if (r.timedOut) return failed(cfg, withStderr(`did not finish within ${timeoutMs / 1000} s; killed`));
  if (r.exitCode !== 0) {
    const how = r.exitCode === null ? `was killed by ${r.signal}` : `failed with exit code ${r.exitCode}`;
    return failed(cfg, withStderr(`executable ${cfg.command} ${how}`), { exitCode: r.exitCode });
  }
  return undefined;
}

function pemOk(pem: string, what: 'certificate' | 'key'): boolean {
  try {
    if (what === 'certificate') new X509Certificate(pem);
    else createPrivateKey(pem);
    return true;
  } catch {
    return false;
  }
}

/** The credential in a plugin's stdout, checked as client-go checks it. Throws the failure. */
export function parseExecCredential(cfg: ExecConfig, stdout: string): Credential {
  let doc: unknown;
  try {
    doc = JSON.parse(stdout);
  } catch {
    throw failed(cfg, `decoding stdout: not a JSON ExecCredential: ${JSON.stringify(stdout.slice(0, 200))}`);
  }
  const obj = doc as { apiVersion?: unknown; kind?: unknown; status?: Record<string, unknown> } | null;
  if (!obj || typeof obj !== 'object') throw failed(cfg, 'decoding stdout: not an ExecCredential object');
  if (obj.kind !== 'ExecCredential') throw failed(cfg, `decoding stdout: kind is ${JSON.stringify(obj.kind)}, not "ExecCredential"`);
  if (obj.apiVersion !== cfg.apiVersion) throw failed(cfg, `exec plugin is configured to use API version ${cfg.apiVersion}, plugin returned version ${String(obj.apiVersion)}`);
  const st = obj.status;
  if (!st || typeof st !== 'object') throw failed(cfg, "exec plugin didn't return a status field");
  const s = (k: string): string => {
    const v = st[k];
    if (v === undefined || v === null || v === '') return '';
    if (typeof v !== 'string') throw failed(cfg, `status.${k} is not a string`);
    return v;
  };
  const token = s('token');
  const cert = s('clientCertificateData');
  const key = s('clientKeyData');
  if (!token && !cert && !key) throw failed(cfg, "exec plugin didn't return a token or cert/key pair");
  if (!cert !== !key) throw failed(cfg, 'exec plugin returned only certificate or key, not both');
  if (cert && (!pemOk(cert, 'certificate') || !pemOk(key, 'key'))) throw failed(cfg, 'failed parsing client key/certificate (status.clientCertificateData, status.clientKeyData)');
  const cred: Credential = {};
  if (token) cred.token = token;
  if (cert) {
    cred.cert = cert;
    cred.key = key;
  }
  const exp = s('expirationTimestamp');
  if (exp) {
    const t = Date.parse(exp);
    if (!Number.isFinite(t) || !/^\d{4}-\d\d-\d\dT/.test(exp)) throw failed(cfg, `status.expirationTimestamp ${JSON.stringify(exp)} is not an RFC 3339 time`);
    cred.expiresAt = t;
  }
  return cred;
}

export interface ExecCredentialOptions {
  config: ExecConfig;
  clock?: Clock;
  logger?: Logger;
  /** Overrides for tests: the bounds, the environment, the runner. */
  timeoutMs?: number;
  maxStdoutBytes?: number;
  env?: NodeJS.ProcessEnv;
  run?: typeof runPlugin;
}

/** One plugin's credential, shared by every client of one kubeconfig. */
export class ExecCredentialPlugin implements CredentialSource {
  readonly #o: ExecCredentialOptions;
  readonly #clock: Clock;
  #cached: Credential | undefined;
  #running: Promise<Credential> | undefined;
  #failures = 0;
  #lastError: NodeletError | undefined;
  #retryAt = 0;
  /** How many times the plugin ran (metrics, tests). */
  runs = 0;

  constructor(o: ExecCredentialOptions) {
    this.#o = o;
    this.#clock = o.clock ?? realClock;
  }

  #fresh(c: Credential | undefined): c is Credential {
    return !!c && (c.expiresAt === undefined || this.#clock.now() < c.expiresAt);
  }

  get(signal?: AbortSignal): Promise<Credential> {
    if (this.#fresh(this.#cached)) return Promise.resolve(this.#cached);
    if (this.#running) return this.#running;
    // Within the backoff after a failure: the failure, without a new run.
    if (this.#lastError && this.#clock.now() < this.#retryAt) return Promise.reject(this.#lastError);
    this.#running = this.#runOnce(signal).finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  refresh(stale: Credential): void {
    // Another caller's 401 already dropped it, or a new one came meanwhile: nothing to do.
    if (this.#cached === stale) this.#cached = undefined;
  }

  async #runOnce(signal?: AbortSignal): Promise<Credential> {
    const { config: cfg } = this.#o;
    const timeoutMs = this.#o.timeoutMs ?? RUN_TIMEOUT_MS;
    const maxStdoutBytes = this.#o.maxStdoutBytes ?? MAX_STDOUT_BYTES;
    this.runs++;
    const r = await (this.#o.run ?? runPlugin)(cfg.command, cfg.args, {
      env: pluginEnv(cfg, this.#o.env ?? process.env),
      timeoutMs,
      maxStdoutBytes,
      maxStderrBytes: MAX_STDERR_BYTES,
      clock: this.#clock,
      ...(signal ? { signal } : {}),
    });
    try {
      const failure = runFailure(cfg, r, timeoutMs, maxStdoutBytes);
      if (failure) throw failure;
      const cred = parseExecCredential(cfg, r.stdout.toString('utf8'));
      this.#cached = cred;
      this.#failures = 0;
      this.#lastError = undefined;
      if (r.stderr) this.#o.logger?.debug({ command: cfg.command, stderr: r.stderr }, 'credential plugin wrote to stderr');
      return cred;
    } catch (err) {
      const e = err instanceof NodeletError ? err : failed(cfg, errorMessage(err));
      const delay = backoffDelay(this.#failures++, BACKOFF_BASE_MS, BACKOFF_MAX_MS);
      this.#lastError = e;
      this.#retryAt = this.#clock.now() + delay;
      this.#o.logger?.warn({ command: cfg.command, retryInMs: delay }, `${e.message} (next run in ${delay / 1000} s at the earliest)`);
      throw e;
    }
  }
}

/** One plugin per exec config (the kubeconfig's clients share it: one run serves them all). */
const shared = new WeakMap<ExecConfig, ExecCredentialPlugin>();
export function sharedExecCredentials(cfg: ExecConfig, o: Omit<ExecCredentialOptions, 'config'> = {}): ExecCredentialPlugin {
  let p = shared.get(cfg);
  if (!p) {
    p = new ExecCredentialPlugin({ ...o, config: cfg });
    shared.set(cfg, p);
  }
  return p;
}
