/**
 * The composition root. Builds every service from the frozen configuration and the
 * flags, starts them in order, stops them in reverse. Standalone versus connected is
 * decided here, by building fewer services, never by null checks deep inside.
 *
 * Order of a start: (config already validated by the caller) -> watchdog settings ->
 * lock (may wait) -> root dir -> services -> READY=1 -> watchdog pings.
 */
import fs from 'node:fs';
import { realClock, type Clock } from './clock.js';
import { errorMessage, NodeletError } from './errors.js';
import { HealthRegistry } from './health/checks.js';
import { HealthzServer, eventLoopCheck } from './health/healthz-server.js';
import type { Logger } from './log.js';
import type { NodeIdentity } from './node-identity.js';
import { acquireLock, watchContention, type LockHandle } from './system/lock.js';
import { createNotifier, watchdogIntervalFromEnv, WatchdogLoop, type Notifier } from './system/notify.js';
import type { LoadedConfig } from './config/index.js';

/** Command-line settings that are not part of KubeletConfiguration. */
export interface NodeletFlags {
  configFile?: string;
  configDir?: string;
  rootDir: string;
  kubeconfig?: string;
  lockFile: string;
  exitOnLockContention: boolean;
  certDir: string;
  checkpointRetention?: number;
}

/** Something the daemon starts and stops. Constructors start nothing. */
export interface Service {
  readonly name: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export type Mode = 'standalone' | 'connected';

export interface DaemonDeps {
  flags: NodeletFlags;
  loaded: LoadedConfig;
  identity: NodeIdentity;
  logger: Logger;
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
  #watchdog: WatchdogLoop | undefined;
  #contention: { stop(): void } | undefined;
  #stopping: Promise<void> | undefined;
  readonly #done: Promise<string>;
  #finish!: (reason: string) => void;

  /** Validates what can be validated before anything is touched; throws NodeletError. */
  constructor(deps: DaemonDeps) {
    const env = deps.env ?? process.env;
    this.#deps = { clock: realClock, stopTimeoutMs: 20_000, ...deps, env };
    this.#watchdogTimeoutMs = watchdogIntervalFromEnv(env);
    this.#notifier = createNotifier(env);
    this.mode = deps.flags.kubeconfig ? 'connected' : 'standalone';
    if (this.mode === 'connected') {
      throw new NodeletError(
        'CONFIG_INVALID',
        `--kubeconfig: connected mode is not available in this version of nodelet; run without --kubeconfig (standalone)`,
      );
    }
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
   * because Node's event loop has nothing left to wait for: hold one handle until stop.
   */
  #keepAlive: NodeJS.Timeout | undefined = setInterval(() => {}, 1 << 30);

  async start(signal?: AbortSignal): Promise<void> {
    const { flags, loaded, identity } = this.#deps;
    const cfg = loaded.config;
    this.#log.info(
      { mode: this.mode, configFiles: loaded.sources, nodeName: identity.nodeName, nodeIPs: identity.ips, rootDir: flags.rootDir },
      this.mode === 'standalone'
        ? 'starting nodelet in standalone mode: no --kubeconfig, so no control plane is contacted'
        : 'starting nodelet in connected mode',
    );
    for (const w of loaded.warnings) this.#log.warn({ file: w.file, field: w.field }, `${w.file}: ${w.field}: ${w.message}`);
    this.#notifier.status(`waiting for lock file ${flags.lockFile}`);

    this.#lock = await acquireLock(flags.lockFile, { logger: this.#log.child({ component: 'lock' }), signal });
    if (flags.exitOnLockContention) {
      this.#contention = watchContention(this.#lock, (reason) => {
        this.#log.info({ lockFile: flags.lockFile }, `lock contention: ${reason}; exiting so the new agent can take over`);
        this.requestStop('lock contention');
      });
    }
    fs.mkdirSync(flags.rootDir, { recursive: true, mode: 0o750 });

    const lock = this.#lock;
    this.health.add({
      name: 'lockfile',
      check() {
        if (!lock.stillOwnsPath()) throw new Error(`lock file ${lock.path} was deleted or replaced`);
      },
    });
    const loop = eventLoopCheck();
    this.health.add(loop);
    this.#started.push({ name: 'eventloop-check', start: async () => {}, stop: async () => loop.stop() });

    for (const svc of this.#buildServices()) {
      if (signal?.aborted) break;
      this.#log.debug({ service: svc.name }, 'starting service');
      await svc.start();
      this.#started.push(svc);
    }

    const status = `${this.mode}; node ${identity.nodeName}; runtime ${cfg.containerRuntimeEndpoint}`;
    this.#notifier.ready(status);
    this.#log.info({ status }, 'nodelet is ready');

    if (this.#watchdogTimeoutMs !== undefined) {
      this.#watchdog = new WatchdogLoop({
        notifier: this.#notifier,
        health: this.health,
        timeoutMs: this.#watchdogTimeoutMs,
        clock: this.#deps.clock,
        logger: this.#log.child({ component: 'watchdog' }),
      });
      this.#watchdog.start();
      this.#log.info({ timeoutMs: this.#watchdogTimeoutMs, pingEveryMs: this.#watchdog.periodMs }, 'systemd watchdog enabled');
    }
  }

  #buildServices(): Service[] {
    const cfg = this.#deps.loaded.config;
    const services: Service[] = [];
    if (cfg.healthzPort !== 0) {
      const server = new HealthzServer({ host: cfg.healthzBindAddress, port: cfg.healthzPort, health: this.health });
      services.push({
        name: 'healthz',
        start: async () => {
          const addr = await server.start();
          this.#log.info({ address: addr.address, port: addr.port }, `healthz listening on http://${addr.address}:${addr.port}/healthz`);
        },
        stop: () => server.stop(),
      });
    } else {
      this.#log.info('healthz server disabled (healthzPort: 0)');
    }
    return services;
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
    const deadline = Date.now() + this.#deps.stopTimeoutMs;
    for (const svc of this.#started.reverse()) {
      const left = Math.max(0, deadline - Date.now());
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([
          svc.stop(),
          new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error(`did not stop within ${left}ms`)), left);
          }),
        ]);
      } catch (err) {
        this.#log.warn({ service: svc.name }, `stopping ${svc.name}: ${errorMessage(err)}`);
      } finally {
        clearTimeout(timer);
      }
    }
    this.#started = [];
    this.#lock?.release();
    clearInterval(this.#keepAlive);
    this.#keepAlive = undefined;
    this.#log.info('nodelet stopped');
  }
}
