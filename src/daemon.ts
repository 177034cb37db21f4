/**
 * The composition root. Builds every service from the frozen configuration and the
 * flags, starts them in order, stops them in reverse. Standalone versus connected is
 * decided here, by building fewer services, never by null checks deep inside.
 *
 * Order of a start: (config already validated by the caller) -> watchdog settings -> host
 * checks that can refuse -> lock (may wait) -> root dir -> healthz -> the host checks that
 * ask the runtime -> the services' modules (daemon-services.ts) -> services -> READY=1 ->
 * watchdog pings.
 */
import fs from 'node:fs';
import os from 'node:os';
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
import { parseDuration } from './config/duration.js';
import { isFeatureEnabled } from './config/feature-gates.js';
import { buildServerAuth, checkpointsEnabled, type ServerAuth } from './server/from-config.js';
import { parseEndpoint } from './runtime/endpoint.js';
import type { RuntimeState } from './runtime/health.js';
import { loadAllocationRecords, type AllocationRecords } from './pods/allocation.js';
import { hostAppArmorEnabled, podAdmitHandlers } from './pods/admission.js';
import type { Observability } from './server/https-server.js';
import { hostRefusal, nodeSwapFromFacts, runHostCheckPass, type HostCheckRun } from './node/host-facts.js';
import type { HostCheckResult } from './node/host-checks.js';
import { ensureDeviceCheckpoint, ensureRootDirLayout, ImagePullRecords, removeRootDirTempFiles } from './system/root-dir.js';

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
  /** Where the `<pod>_<ns>_<container>-<id>.log` links to container logs go (default /var/log/containers). */
  containerLogDir?: string;
}

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
    const { flags, loaded, identity } = this.#deps;
    const cfg = loaded.config;
    this.#log.info(
      { mode: this.mode, configFiles: loaded.sources, nodeName: identity.nodeName, nodeIPs: identity.ips, rootDir: flags.rootDir },
      this.mode === 'standalone'
        ? 'starting nodelet in standalone mode: no --kubeconfig, so no control plane is contacted'
        : 'starting nodelet in connected mode',
    );
    for (const w of loaded.warnings) this.#log.warn({ file: w.file, field: w.field }, `${w.file}: ${w.field}: ${w.message}`);
    // Whatever can still be wrong with the input (client CA file, webhook modes without a
    // control plane, endpoints) is found here, before the lock is taken or anything is written.
    const reviews = this.#deps.mode.reviews;
    const auth = await buildServerAuth(cfg, { clock: this.#deps.clock, ...(reviews ? { reviewClient: reviews } : {}) });
    parseEndpoint('containerRuntimeEndpoint', cfg.containerRuntimeEndpoint);
    // Host checks (swap, cgroups, kernel): a refusing one stops here, before the lock. The two
    // that only ever warn and cost a runtime call or a process (the runtime's cgroup driver,
    // the nft tool) run once /healthz answers.
    this.#host = await this.#checkHost();
    if (cfg.imageServiceEndpoint) parseEndpoint('imageServiceEndpoint', cfg.imageServiceEndpoint);

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
    // A step that holds the event loop is named in the log: debug from 50 ms (the bound
    // nodelet's own steps keep), a warning from 1 s (healthz and the watchdog notice soon).
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

    if (this.#watchdogTimeoutMs !== undefined) {
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

  async #buildServices(auth: ServerAuth): Promise<Service[]> {
    const { flags, identity } = this.#deps;
    const cfg = this.#deps.loaded.config;
    const log = this.#log;
    const services: Service[] = [];
    // The services' modules, once /healthz answers (daemon-services.ts).
    const { createCriClient, RuntimeHealth, PodCidrUpdater, CriPodRuntime, ContainerLogManager, parseLogMaxSize, DEFAULT_CONTAINER_LOG_DIR, PodManager, RuntimeEvents, StaticPodSource, nodeShutdownFor, Metrics, StatsProvider, renderResourceMetrics, configzBody, PodSources, backoffPolicy, ImageManager, imageGcPolicy } = await import('./daemon-services.js');
    const requestTimeoutMs = parseDuration(cfg.runtimeRequestTimeout);
    // What operators scrape (/metrics, /metrics/resource, /stats/summary, /configz): recorded by the CRI client, the control-plane client and the pod manager.
    const metrics = new Metrics({ nodeName: identity.nodeName, loopDelay: this.#loopDelay });
    // The control-plane client is loaded only when connected.
    const unobserve = this.mode === 'connected' ? (await import('./controlplane/client.js')).observeControlPlaneRequests((code, method, host) => metrics.restClientRequest(code, method, host)) : () => {};
    services.push({ name: 'metrics', start: () => {}, stop: async () => unobserve() });

    // The container runtime: a client that never fails at construction (the socket may
    // appear later), and a health loop that reports it and recovers by itself.
    const cri = createCriClient({
      runtimeEndpoint: cfg.containerRuntimeEndpoint,
      ...(cfg.imageServiceEndpoint ? { imageEndpoint: cfg.imageServiceEndpoint } : {}),
      requestTimeoutMs,
      logger: log,
      observe: (method, seconds, failed) => metrics.runtimeOperation(method, seconds, failed),
    });
    const stats = new StatsProvider({ runtime: cri, nodeName: identity.nodeName, rootDir: flags.rootDir, clock: this.#deps.clock, onCollect: (s, ok) => (metrics.statsCollections.inc({ result: ok ? 'ok' : 'error' }), metrics.statsCollectionDuration.observe(undefined, s)) });
    const observability: Observability = {
      metrics: () => metrics.render(),
      stats: () => stats.get(),
      resourceMetrics: renderResourceMetrics,
      ...(cfg.enableDebuggingHandlers ? { configz: (origin: boolean) => configzBody(this.#deps.loaded, origin) } : {}),
    };
    // The pod CIDR for the runtime: the config's podCIDR, then (connected) the Node's; resent when the runtime comes back.
    const podCidr = new PodCidrUpdater({ runtime: cri, logger: log.child({ component: 'pod-cidr' }) });
    const health = new RuntimeHealth({
      runtime: cri,
      clock: this.#deps.clock,
      logger: log.child({ component: 'runtime-health' }),
      endpoint: cfg.containerRuntimeEndpoint,
      onChange: () => {
        if (this.#ready) this.#notifier.status(this.#statusLine());
        void podCidr.retry();
      },
    });
    if (cfg.podCIDR) void podCidr.update(cfg.podCIDR);
    services.push({
      name: 'runtime-health',
      start: async (signal) => {
        log.info({ endpoint: cfg.containerRuntimeEndpoint, imageEndpoint: cfg.imageServiceEndpoint ?? cfg.containerRuntimeEndpoint }, `container runtime endpoint ${cfg.containerRuntimeEndpoint}`);
        await health.syncOnce();
        health.start(signal);
      },
      stop: async () => {
        await health.stop();
        cri.close();
      },
    });

    // Pods: the manager (one worker per pod), fed by the static pod source.
    const podRuntime = new CriPodRuntime({
      cri,
      rootDir: flags.rootDir,
      podLogsDir: cfg.podLogsDir,
      seccompDefault: cfg.seccompDefault,
      ...(cfg.clusterDNS?.length ? { clusterDNS: cfg.clusterDNS } : {}),
      ...(cfg.clusterDomain ? { clusterDomain: cfg.clusterDomain } : {}),
      resolvConf: cfg.resolvConf ?? '/etc/resolv.conf',
      nodeName: identity.nodeName,
      ...(identity.ips[0] ? { hostIP: identity.ips[0] } : {}),
      events: this.#deps.mode.events,
      logger: log.child({ component: 'pods' }),
      ...(this.#host ? { swap: nodeSwapFromFacts(this.#host.facts, cfg) } : {}),
      ...(this.#imageRecords ? { imageRecords: this.#imageRecords } : {}),
      ...(this.#allocation ? { allocation: this.#allocation } : {}),
      containerLogDir: flags.containerLogDir ?? DEFAULT_CONTAINER_LOG_DIR,
    });
    // Connected: pod and node events go to the control plane (best effort, never blocking).
    const mode = this.#deps.mode;
    // Connected: a changed pod status wakes the status writer (its listener is registered by the mode's services below).
    let podStatusChanged: (uid: string) => void = () => {};
    // The runtime's change events (runtime-events.ts): where it has them, the relist runs on
    // them (and every 10 s) instead of every second.
    let runtimeChanged = () => {};
    const runtimeEvents = new RuntimeEvents({
      stream: (path, body, onMessage, signal) => cri.serverStream(path, body, onMessage, signal),
      onEvent: () => runtimeChanged(),
      clock: this.#deps.clock,
      logger: log.child({ component: 'runtime-events' }),
    });
    const pods = new PodManager({
      runtimeEvents,
      onStatusChange: (uid) => podStatusChanged(uid),
      runtime: podRuntime,
      events: mode.events,
      logger: log.child({ component: 'pods' }),
      clock: this.#deps.clock,
      serializeImagePulls: cfg.serializeImagePulls,
      // A steady pod syncs on a runtime change or a wake-up it asked for, and every syncFrequency.
      syncFrequencyMs: parseDuration(cfg.syncFrequency) || 60_000,
      crashLoopBackOff: backoffPolicy({
        reducedDecay: isFeatureEnabled(cfg, 'ReduceDefaultCrashLoopBackOffDecay'),
        ...(cfg.crashLoopBackOff?.maxContainerRestartPeriod ? { maxContainerRestartPeriodMs: parseDuration(cfg.crashLoopBackOff.maxContainerRestartPeriod) } : {}),
      }),
      ...(identity.ips[0] ? { hostIP: identity.ips[0] } : {}),
      // Runtime pods another node's agent made are never removed, and reported on this Node.
      nodeName: identity.nodeName,
      metrics,
      // Admission: sysctls (the safe set for this kernel plus allowedUnsafeSysctls, a bad entry
      // is fatal as for the kubelet), AppArmor on this host, user namespaces.
      admitHandlers: podAdmitHandlers({
        kernelRelease: os.release(),
        allowedUnsafeSysctls: cfg.allowedUnsafeSysctls ?? [],
        appArmorEnabled: await hostAppArmorEnabled(),
        runtimeSupportsSupplementalGroupsPolicy: () => health.features()?.supplementalGroupsPolicy,
      }),
    });
    this.#status = { runtime: () => health.state(), pods: () => pods.listPods().length };
    this.health.add(pods.healthCheck());
    services.push({
      name: 'pods',
      start: async (signal) => {
        await podRuntime.init();
        pods.start(signal);
        runtimeChanged = () => pods.runtimeChanged();
        runtimeEvents.start(signal);
      },
      stop: async () => {
        await runtimeEvents.stop();
        await pods.stop();
      },
    });
    // The node's images and their garbage collection (the kubelet's image GC manager), standalone and connected.
    // NODELET_TEST_IMAGE_GC_PERIOD (tests only, a Go duration) shortens the kubelet's 5 min period.
    let gcPeriod: number | undefined;
    try {
      const text = this.#deps.env['NODELET_TEST_IMAGE_GC_PERIOD'];
      if (text) gcPeriod = Math.max(100, parseDuration(text));
    } catch (err) {
      log.warn(`NODELET_TEST_IMAGE_GC_PERIOD ignored: ${errorMessage(err)}`);
    }
    const images = new ImageManager({
      runtime: cri,
      policy: imageGcPolicy(cfg, parseDuration),
      rootDir: flags.rootDir,
      clock: this.#deps.clock,
      logger: log.child({ component: 'image-gc' }),
      events: mode.events,
      nodeName: identity.nodeName,
      ...(gcPeriod ? { gcPeriodMs: gcPeriod, listPeriodMs: gcPeriod } : {}),
    });
    services.push({ name: 'image-gc', start: (signal) => images.start(signal), stop: () => images.stop() });
    // Graceful node shutdown (src/node/shutdown-manager.ts): between the pod sources and the pod manager.
    const shutdown = nodeShutdownFor(cfg, { rootDir: flags.rootDir, setDesired: (list) => pods.setDesired(list), podStatus: (uid) => pods.podStatus(uid), clock: this.#deps.clock, events: mode.events, nodeName: identity.nodeName, logger: log.child({ component: 'node-shutdown' }), metrics });
    services.push({ name: 'node-shutdown', start: (signal) => shutdown.start(signal), stop: () => shutdown.stop() });
    // Container log rotation (containerLogMaxSize, containerLogMaxFiles), as the kubelet's log manager.
    const logRotation = new ContainerLogManager({
      runtime: cri,
      limits: { maxSize: parseLogMaxSize(cfg.containerLogMaxSize), maxFiles: cfg.containerLogMaxFiles },
      maxWorkers: cfg.containerLogMaxWorkers,
      periodMs: parseDuration(cfg.containerLogMonitorInterval),
      clock: this.#deps.clock,
      logger: log.child({ component: 'log-rotation' }),
      linkDir: flags.containerLogDir ?? DEFAULT_CONTAINER_LOG_DIR,
    });
    services.push({ name: 'log-rotation', start: (signal) => logRotation.start(signal), stop: () => logRotation.stop() });
    // Pod sources: static files always; the control plane's pods for this node when connected.
    const sources = new PodSources([...(cfg.staticPodPath ? (['file'] as const) : []), ...mode.podSources], (list, allReady) => {
      shutdown.setDesired(list);
      if (allReady) pods.setSourcesReady();
      if (this.#ready) this.#notifier.status(this.#statusLine());
    });
    if (cfg.staticPodPath) {
      const source = new StaticPodSource({
        dir: cfg.staticPodPath,
        // inotify wakes a rescan at once; the periodic one (what a watch can miss) runs every
        // fileCheckFrequency (20 s) as the kubelet's, not every second (idle CPU with 110 pods).
        rescanMs: parseDuration(cfg.fileCheckFrequency),
        nodeName: identity.nodeName,
        logger: log.child({ component: 'static-pods' }),
        onChange: (list) => {
          log.info({ staticPodPath: cfg.staticPodPath, pods: list.map((p) => p.metadata!.name) }, `static pods: ${list.length}`);
          sources.update('file', list);
          mode.staticPodsChanged(list);
        },
      });
      services.push({ name: 'static-pods', start: (signal) => source.start(signal), stop: () => source.stop() });
    } else {
      log.info('no staticPodPath: no static pods');
    }
    services.push(
      ...mode.services({
        sources,
        pods: { podStatus: (uid) => shutdown.statusOf(uid, pods.podStatus(uid)), active: (uid) => pods.active(uid), onStatusChange: (fn) => (podStatusChanged = fn) },
        runtimeState: () => shutdown.runtimeState(health.state()),
        rootDir: flags.rootDir,
        imageFsMountpoints: () => cri.imageFsInfo?.() ?? Promise.resolve([]),
        images: () => images.images(),
        podCIDR: (cidr) => void podCidr.update(cidr),
        onLeaseRenew: (ok) => metrics.leaseRenewed(ok),
        onNodeShutdown: (reportNow) => shutdown.onShutdownStart(reportNow),
      }),
    );

    if (cfg.readOnlyPort !== 0) {
      let ro: { stop(): Promise<void> } | undefined;
      services.push({
        name: 'read-only-server',
        start: async () => {
          // The servers' modules load after /healthz answers (start-up time).
          const { createReadOnlyServer } = await import('./server/https-server.js');
          const server = createReadOnlyServer({ address: cfg.address, port: cfg.readOnlyPort, health: this.health, pods, observability, logger: log });
          ro = server;
          const a = await server.start();
          log.info({ address: a.address, port: a.port }, `read-only server listening on http://${a.address}:${a.port} (/pods, /healthz)`);
        },
        stop: async () => ro?.stop(),
      });
    }

    // The HTTPS server: serving certificate (given, or self-signed in --cert-dir), authn/authz, checkpoints.
    services.push(
      this.#lazyService('https-server', async () => {
        const [{ loadOrCreateServingCert }, { CheckpointService }, { createNodeServer }, { StreamingService }] = await Promise.all([
          import('./server/tls.js'),
          import('./checkpoint/service.js'),
          import('./server/https-server.js'),
          import('./server/streaming.js'),
        ]);
        const cert = await loadOrCreateServingCert({
          ...(cfg.tlsCertFile ? { certFile: cfg.tlsCertFile } : {}),
          ...(cfg.tlsPrivateKeyFile ? { keyFile: cfg.tlsPrivateKeyFile } : {}),
          certDir: flags.certDir,
          hostname: identity.nodeName,
          ips: identity.ips,
          logger: log,
        });
        const checkpoints = checkpointsEnabled(cfg)
          ? new CheckpointService({
              rootDir: flags.rootDir,
              runtime: cri,
              pods,
              runtimeRequestTimeoutMs: requestTimeoutMs,
              ...(flags.checkpointRetention !== undefined ? { retention: flags.checkpointRetention } : {}),
              clock: this.#deps.clock,
              logger: log,
            })
          : undefined;
        const server = createNodeServer({
          address: cfg.address,
          port: cfg.port,
          tls: { cert: cert.cert, key: cert.key, ...(auth.clientCA !== undefined ? { clientCA: auth.clientCA } : {}) },
          authenticator: auth.authenticator,
          authorizer: auth.authorizer,
          nodeName: identity.nodeName,
          health: this.health,
          pods,
          ...(checkpoints ? { checkpoints } : {}),
          ...(cfg.enableDebuggingHandlers ? { containerLogs: { podLogsDir: cfg.podLogsDir } } : {}),
          ...(cfg.enableDebuggingHandlers ? { streaming: new StreamingService({ runtime: cri, pods, idleTimeoutMs: parseDuration(cfg.streamingConnectionIdleTimeout), logger: log }) } : {}),
          observability,
          logger: log,
        });
        const a = await server.start();
        log.info(
          { address: a.address, port: a.port, certFile: cert.certFile, checkpoints: !!checkpoints, authorization: cfg.authorization.mode },
          `HTTPS server listening on https://${a.address}:${a.port}${checkpoints ? ' (POST /checkpoint enabled)' : ''}`,
        );
        return () => server.stop();
      }),
    );

    return services;
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

  /** A service whose start builds it and returns its stop. */
  #lazyService(name: string, start: () => Promise<() => Promise<void>>): Service {
    let stop: (() => Promise<void>) | undefined;
    return {
      name,
      start: async () => {
        stop = await start();
      },
      stop: async () => {
        await stop?.();
      },
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
