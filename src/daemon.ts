/**
 * The composition root. Builds every service from the frozen configuration and the
 * flags, starts them in order, stops them in reverse. Standalone versus connected is
 * decided here, by building fewer services, never by null checks deep inside.
 *
 * Order of a start: (config already validated by the caller) -> watchdog settings -> host
 * checks that can refuse -> lock (may wait) -> root dir -> healthz -> the host checks that
 * ask the runtime -> the services' modules (wiring/) -> services -> READY=1 ->
 * watchdog pings.
 */
import fs from 'node:fs';
import { realClock, type Clock } from './clock.js';
import { standaloneMode, type Mode, type NodeMode } from './connected.js';
import { errorMessage } from './errors.js';
import { EventLoopDelay, eventLoopCheck, HealthRegistry } from './health/checks.js';
import { HealthzServer } from './server/healthz-server.js';
import type { Logger } from './log.js';
import { Loop, type Service } from './loop.js';
import { Lifetime } from './lifetime.js';
import type { NodeIdentity } from './node-identity.js';
import { acquireLock, watchContention, type ContentionWatch, type LockHandle } from './system/lock.js';
import { createNotifier, watchdogIntervalFromEnv, WatchdogLoop, type Notifier } from './system/notify.js';
import type { LoadedConfig } from './config/index.js';
import type { NodeletFlags } from './wiring/context.js';
import { buildServerAuth, type ServerAuth } from './server/from-config.js';
import { parseEndpoint } from './runtime/endpoint.js';
import type { RuntimeState } from './runtime/health.js';
import { loadAllocationRecords, type AllocationRecords } from './pods/sync/allocation.js';
import { hostRefusal, runHostCheckPass, type HostCheckRun } from './node/host-facts.js';
import type { HostCheckResult } from './node/host-checks.js';
import { ensureDeviceCheckpoint, ensureRootDirLayout, ImagePullRecords, removeRootDirTempFiles } from './system/root-dir.js';

export type { NodeletFlags } from './wiring/context.js';

export type { Mode } from './connected.js';

/** Host checks that only warn and cost a runtime call or a process: run once /healthz answers. */
const LATER_HOST_CHECKS = new Set(['cgroup-driver', 'nftables']);

export interface DaemonDeps {
  flags: NodeletFlags;
  loaded: LoadedConfig;
  identity: NodeIdentity;
  logger: Logger;
  /** Standalone (the default: no network call to any control plane) or connected (src/connected.ts). */
  mode?: NodeMode;
  env?: NodeJS.ProcessEnv;
  clock?: Clock;
  /** Bound on the whole stop sequence. */
  stopTimeoutMs?: number;
}

export class Daemon {
  readonly #deps: Required<Omit<DaemonDeps, 'env'>> & { env: NodeJS.ProcessEnv };
  readonly health = new HealthRegistry();
  readonly #notifier: Notifier;
  readonly #watchdogTimeoutMs: number | undefined;
  readonly mode: Mode;
  #lock: LockHandle | undefined;
  #started: Service[] = [];
  #status: { runtime: () => RuntimeState | undefined; pods: () => number } = { runtime: () => undefined, pods: () => 0 };
  #ready = false;
  #watchdog: WatchdogLoop | undefined;
  #contention: ContentionWatch | undefined;
  #stopping: Promise<void> | undefined;
  readonly #done: Promise<string>;
  #finish!: (reason: string) => void;

  /** Validates what can be validated before anything is touched; throws NodeletError. */
  constructor(deps: DaemonDeps) {
    const env = deps.env ?? process.env;
    this.#deps = { clock: realClock, stopTimeoutMs: 20_000, mode: standaloneMode(), ...deps, env };
    this.#watchdogTimeoutMs = watchdogIntervalFromEnv(env);
    this.#notifier = createNotifier(env);
    this.mode = this.#deps.mode.name;
    this.#done = new Promise((resolve) => (this.#finish = resolve));
  }

  get #log(): Logger {
    return this.#deps.logger;
  }

  /** Resolves with the reason the daemon should stop (signal, lock contention). */
  get done(): Promise<string> {
    return this.#done;
  }

  requestStop(reason: string): void {
    this.#finish(reason);
  }

  /**
   * A daemon with nothing listening (healthz disabled, no runtime yet) must not exit
   * because Node's event loop has nothing left to wait for: one handle, held from start to stop.
   */
  readonly #keepAlive = new Loop({ name: 'keep-alive', turn: async () => {}, delayMs: () => 2 ** 30, clock: realClock });
  /**
   * Each service's start gets a signal of its own from it: all are aborted once the ordered
   * stop is over, so nothing a service left running outlives the daemon. (The signal given to
   * start() only cuts the startup short; stopping goes service by service, in reverse.) One
   * signal each, not one for all: a shared one gathered a listener per service, and Node
   * warned at the 11th (src/lifetime.ts).
   */
  readonly #life = new Lifetime();

  async start(signal: AbortSignal = new AbortController().signal): Promise<void> {
    this.#keepAlive.start();
    const auth = await this.#checkInput();
    await this.#takeLock(signal);
    this.#startLoopCheck();

    // /healthz answers from here (as the kubelet's answers once its server is up, while its
    // loops start); the services' modules load after it, and it stops last.
    const healthz = this.#healthzService();
    if (healthz && !signal.aborted) {
      await healthz.start(this.#life.signal());
      this.#started.push(healthz);
    }
    await this.#checkHostLater();

    for (const svc of await this.#buildServices(auth)) {
      if (signal.aborted) break;
      this.#log.debug({ service: svc.name }, 'starting service');
      await svc.start(this.#life.signal());
      this.#started.push(svc);
    }

    this.#ready = true;
    const status = this.#statusLine();
    this.#notifier.ready(status);
    this.#log.info({ status }, 'nodelet is ready');
    this.#startWatchdog();
  }

  /**
   * Whatever can still be wrong with the input (client CA file, webhook modes without a
   * control plane, endpoints, the host checks that refuse) is found here, before the lock is
   * taken or anything is written. Resolves the HTTPS server's authentication.
   */
  async #checkInput(): Promise<Awaited<ReturnType<typeof buildServerAuth>>> {
    const { flags, loaded, identity } = this.#deps;
    const cfg = loaded.config;
    this.#log.info(
      { mode: this.mode, configFiles: loaded.sources, nodeName: identity.nodeName, nodeIPs: identity.ips, rootDir: flags.rootDir },
      this.mode === 'standalone'
        ? 'starting nodelet in standalone mode: no --kubeconfig, so no control plane is contacted'
        : 'starting nodelet in connected mode',
    );
    for (const w of loaded.warnings) this.#log.warn({ file: w.file, field: w.field }, `${w.file}: ${w.field}: ${w.message}`);
    const reviews = this.#deps.mode.reviews;
    const auth = await buildServerAuth(cfg, { clock: this.#deps.clock, ...(reviews ? { reviewClient: reviews } : {}) });
    parseEndpoint('containerRuntimeEndpoint', cfg.containerRuntimeEndpoint);
    // Host checks (swap, cgroups, kernel): a refusing one stops here, before the lock. The two
    // that only ever warn and cost a runtime call or a process (the runtime's cgroup driver,
    // the nft tool) run once /healthz answers.
    this.#host = await this.#checkHost();
    if (cfg.imageServiceEndpoint) parseEndpoint('imageServiceEndpoint', cfg.imageServiceEndpoint);
    return auth;
  }

  /** The lock file (and, with exitOnLockContention, its watch), then the root dir; the lock's own health check. */
  async #takeLock(signal: AbortSignal): Promise<void> {
    const { flags } = this.#deps;
    this.#notifier.status(`waiting for lock file ${flags.lockFile}`);
    this.#lock = await acquireLock(flags.lockFile, { logger: this.#log.child({ component: 'lock' }), signal });
    if (flags.exitOnLockContention) {
      this.#contention = watchContention(this.#lock, (reason) => {
        this.#log.info({ lockFile: flags.lockFile }, `lock contention: ${reason}; exiting so the new agent can take over`);
        this.requestStop('lock contention');
      }, { logger: this.#log.child({ component: 'lock' }) });
      await this.#contention.ready;
    }
    fs.mkdirSync(flags.rootDir, { recursive: true, mode: 0o750 });
    await this.#prepareRootDir();
    const lock = this.#lock;
    this.health.add({
      name: 'lockfile',
      check() {
        if (!lock.stillOwnsPath()) throw new Error(`lock file ${lock.path} was deleted or replaced`);
      },
    });
  }

  /**
   * A step that holds the event loop is named in the log: debug from 50 ms (the bound
   * nodelet's own steps keep), a warning from 1 s (healthz and the watchdog notice soon).
   */
  #startLoopCheck(): void {
    const loopLog = this.#log.child({ component: 'eventloop' });
    const loop = eventLoopCheck({
      delay: this.#loopDelay,
      onDelay: ({ maxMs }) => {
        if (maxMs >= 1000) loopLog.warn({ maxDelayMs: maxMs }, `the event loop was blocked for ${maxMs} ms`);
        else if (maxMs >= 50) loopLog.debug({ maxDelayMs: maxMs }, `event loop delay ${maxMs} ms`);
      },
    });
    this.health.add(loop);
    loop.start(this.#life.signal());
    this.#started.push({ name: 'eventloop-check', start: () => {}, stop: () => loop.stop() });
  }

  /** systemd's watchdog (WATCHDOG_USEC), pinged while every health check passes. */
  #startWatchdog(): void {
    if (this.#watchdogTimeoutMs === undefined) return;
    this.#watchdog = new WatchdogLoop({
      notifier: this.#notifier,
      health: this.health,
      timeoutMs: this.#watchdogTimeoutMs,
      clock: this.#deps.clock,
      logger: this.#log.child({ component: 'watchdog' }),
    });
    this.#watchdog.start(this.#life.signal());
    this.#log.info({ timeoutMs: this.#watchdogTimeoutMs, pingEveryMs: this.#watchdog.periodMs }, 'systemd watchdog enabled');
  }

  #host: HostCheckRun | undefined;
  /** Event-loop delay: one sampler for the eventloop check's log and /metrics. */
  readonly #loopDelay = new EventLoopDelay();
  #imageRecords: ImagePullRecords | undefined;
  #allocation: AllocationRecords | undefined;

  /**
   * Runs the host checks that can refuse (host-facts.ts) once, without asking the runtime or
   * running nft; logs warnings; throws the refusal (main: exit 1).
   */
  async #checkHost(): Promise<HostCheckRun> {
    const run = await runHostCheckPass(this.#deps.loaded.config, { env: this.#deps.env, runtime: false, facts: { probeNft: false } });
    this.#logHostChecks(run.results.filter((r) => !LATER_HOST_CHECKS.has(r.check)));
    const refusal = hostRefusal(run.results);
    if (refusal) throw refusal;
    return run;
  }

  /** The host checks that only warn and ask the runtime (its cgroup driver) or run the nft tool: logged, never fatal. */
  async #checkHostLater(): Promise<void> {
    const run = await runHostCheckPass(this.#deps.loaded.config, { env: this.#deps.env });
    this.#logHostChecks(run.results.filter((r) => LATER_HOST_CHECKS.has(r.check)));
    const log = this.#log.child({ component: 'host-checks' });
    log.info({ cgroupDriver: run.cgroupDriver, source: run.facts.runtimeDriver.kind === 'answered' ? 'runtime' : 'config' }, `cgroup driver ${run.cgroupDriver} (${run.facts.runtimeDriver.kind === 'answered' ? 'from the runtime' : 'from the configuration: the runtime did not tell'})`);
  }

  #logHostChecks(results: readonly HostCheckResult[]): void {
    const log = this.#log.child({ component: 'host-checks' });
    for (const r of results) {
      if (r.verdict === 'warn') log.warn({ check: r.check, found: r.found }, `host check ${r.check}: ${r.action} (found: ${r.found})`);
      else log.debug({ check: r.check, found: r.found, verdict: r.verdict }, `host check ${r.check}: ${r.verdict}`);
    }
  }

  /** The kubelet's layout under the root dir, its device checkpoint, image pull records (root-dir.ts) and pod resource records (allocation.ts). */
  async #prepareRootDir(): Promise<void> {
    const root = this.#deps.flags.rootDir;
    const log = this.#log.child({ component: 'root-dir' });
    await ensureRootDirLayout(root);
    await removeRootDirTempFiles(root, log, [this.#deps.flags.certDir]);
    await ensureDeviceCheckpoint(root, log);
    this.#imageRecords = new ImagePullRecords(root, log);
    await this.#imageRecords.recover();
    this.#allocation = await loadAllocationRecords(root, log);
  }

  /** `STATUS=` for systemctl status: mode, node, runtime state. */
  #statusLine(): string {
    const { identity } = this.#deps;
    const rt = this.#status.runtime();
    const endpoint = this.#deps.loaded.config.containerRuntimeEndpoint;
    const runtime = !rt ? `runtime ${endpoint}` : rt.runtimeReady ? `runtime ${endpoint}: ${rt.runtimeName} ${rt.runtimeVersion} ready` : `runtime ${endpoint}: not ready (${rt.reason})`;
    return `${this.mode}; node ${identity.nodeName}; ${runtime}; ${this.#status.pods()} pods`;
  }

  /** Every service after healthz (wiring/: the runtime, the pods and connected mode, the servers), in start order. */
  async #buildServices(auth: ServerAuth): Promise<Service[]> {
    const { flags, identity, loaded } = this.#deps;
    // The services' modules, once /healthz answers.
    const { wireServices } = await import('./wiring/index.js');
    const wired = await wireServices(
      { loaded, cfg: loaded.config, flags, identity, mode: this.#deps.mode, clock: this.#deps.clock, log: this.#log, env: this.#deps.env },
      {
        auth,
        health: this.health,
        loopDelay: this.#loopDelay,
        host: this.#host,
        imageRecords: this.#imageRecords,
        allocation: this.#allocation,
        onRuntimeChange: () => this.#ready && this.#notifier.status(this.#statusLine()),
        onPodsChanged: () => this.#ready && this.#notifier.status(this.#statusLine()),
      },
    );
    this.#status = { runtime: wired.runtimeState, pods: () => wired.pods.listPods().length };
    return wired.services;
  }

  /** The healthz server, started before every other service (see start()); undefined when disabled. */
  #healthzService(): Service | undefined {
    const cfg = this.#deps.loaded.config;
    if (cfg.healthzPort === 0) {
      this.#log.info('healthz server disabled (healthzPort: 0)');
      return undefined;
    }
    const server = new HealthzServer({ host: cfg.healthzBindAddress, port: cfg.healthzPort, health: this.health, logger: this.#log });
    return {
      name: 'healthz',
      start: async () => {
        const addr = await server.start();
        this.#log.info({ address: addr.address, port: addr.port }, `healthz listening on http://${addr.address}:${addr.port}/healthz`);
      },
      stop: () => server.stop(),
    };
  }

  /** Stops everything in reverse order of start, each bounded; releases the lock last. Idempotent. */
  stop(): Promise<void> {
    this.#stopping ??= this.#stopAll();
    return this.#stopping;
  }

  async #stopAll(): Promise<void> {
    this.#notifier.stopping('shutting down');
    this.#contention?.stop();
    await this.#watchdog?.stop();
    const clock = this.#deps.clock;
    const deadline = clock.now() + this.#deps.stopTimeoutMs;
    for (const svc of this.#started.reverse()) {
      const left = Math.max(0, deadline - clock.now());
      let timer: AbortController | undefined;
      try {
        const bound = new AbortController();
        timer = bound;
        await Promise.race([svc.stop(), clock.sleep(left, bound.signal).then(() => Promise.reject(new Error(`did not stop within ${left}ms`)))]);
      } catch (err) {
        this.#log.warn({ service: svc.name }, `stopping ${svc.name}: ${errorMessage(err)}`);
      } finally {
        timer?.abort();
      }
    }
    this.#started = [];
    this.#life.abort();
    this.#lock?.release();
    await this.#keepAlive.stop();
    this.#log.info('nodelet stopped');
  }
}
