#!/usr/bin/env -S node --max-semi-space-size=1 --no-opt --no-sparkplug --no-maglev --optimize-for-size --regexp-interpret-all
/**
 * nodelet's command line (commander). `nodelet` runs the daemon; `nodelet config view`
 * prints the effective configuration. Maps every outcome to an exit code:
 * 0 clean stop (signal, lock hand-over), 1 invalid configuration or flags, 2 a fault
 * during start.
 */
import path from 'node:path';
import { Command, Option, type OptionValues } from 'commander';
import { errorMessage, isNodeletError, NodeletError } from './errors.js';
import { createLogger, levelFromVerbosity, type Logger } from './log.js';
import { resolveNodeIdentity } from './node-identity.js';
import { Daemon, type NodeletFlags } from './daemon.js';
import { loadConfig, renderConfig, parseFeatureGates, ConfigError, type LoadedConfig } from './config/index.js';

import { KUBELET_VERSION, VERSION } from './version.js';
import { nodeModeFor } from './connected.js';
import { realClock } from './clock.js';
import { isHostRefusal, runHostCheckPass } from './node/host-facts.js';
import { refusals, renderHostChecks } from './node/host-checks.js';
import { CONFIG_FLAGS, IGNORED_FLAGS, REMOVED_FLAGS, configFlagOverrides, ignoredFlagWarnings, refuseRemovedFlags, registrationFlags } from './kubelet-flags.js';

/**
 * The kubelet's flags that kubeadm and the managed node images pass (src/kubelet-flags.ts):
 * those setting config fields, `--node-labels`, `--cloud-provider`, the ignored ones with
 * their warning, and the removed ones (hidden, refused naming the release that removed them).
 */
function addKubeletFlags(cmd: Command): Command {
  cmd
    .option('--node-labels <k=v[,k=v]>', 'labels the Node registers with, merged over the well-known ones; kubernetes.io/k8s.io keys only in the kubelet\'s allowed set (node.kubernetes.io/*, kubelet.kubernetes.io/*, topology.kubernetes.io/zone, ...)')
    .option('--cloud-provider <name>', '"external" (a cloud controller manager initializes the Node: registered with the node.cloudprovider.kubernetes.io/uninitialized taint) or empty');
  for (const f of CONFIG_FLAGS) cmd.option(`--${f.flag} <value>`, f.help);
  for (const f of IGNORED_FLAGS) cmd.option(`--${f.flag} <value>`, f.help);
  for (const flag of Object.keys(REMOVED_FLAGS)) cmd.addOption(new Option(`--${flag} <value>`).hideHelp());
  return cmd;
}

/** Flags shared by the daemon and `config view`. Their help is the operator's documentation. */
function addCommonOptions(cmd: Command): Command {
  return addKubeletFlags(cmd)
    .option('--config <file>', 'KubeletConfiguration file (kubelet.config.k8s.io/v1beta1), YAML or JSON')
    .option('--config-dir <dir>', 'directory of drop-in *.conf KubeletConfiguration files, merged over --config in lexical order of their paths')
    .option('--root-dir <dir>', 'directory for nodelet files (checkpoints, seccomp profiles, pki)', '/var/lib/kubelet')
    .option('--kubeconfig <file>', 'kubeconfig of the control plane; without it nodelet runs standalone')
    .option('--bootstrap-kubeconfig <file>', 'kubeconfig with bootstrap credentials (a bootstrap token): when --kubeconfig is missing or its client certificate expired, nodelet requests a certificate with it (CertificateSigningRequest), stores it in --cert-dir and writes --kubeconfig')
    .option('--hostname-override <name>', 'node name to use instead of the hostname')
    .option('--node-ip <ip[,ip]>', 'IP address(es) of the node, instead of the host addresses found')
    .option('--lock-file <file>', 'lock file that keeps two agents from running at once (flock(2))', '/var/run/kubelet.lock')
    .option('--exit-on-lock-contention', 'exit 0 when another process waits for the lock file (hand-over to a new agent); needs --lock-file', false)
    .option('--cert-dir <dir>', 'directory of the serving certificate and key, and of the bootstrapped client certificate (kubelet-client-current.pem) (default: <root-dir>/pki)')
    .option('--feature-gates <A=true,B=false>', 'feature gates, over the configuration file\'s featureGates')
    .option('--checkpoint-retention <n>', 'keep only the newest n checkpoint archives per container (default: keep all)')
    .option('--container-log-dir <dir>', 'directory of the <pod>_<namespace>_<container>-<id>.log links to container logs that log shippers read', '/var/log/containers')
    .addOption(new Option('-v, --v <level>', 'log verbosity as the kubelet\'s: 0-1 info, 2-3 debug, 4+ trace').default('0'))
    .addOption(new Option('--log-level <level>', 'log level, over -v').choices(['error', 'warn', 'info', 'debug', 'trace']))
    // Kubelet flags that set KubeletConfiguration fields; they win over the files.
    .option('--container-runtime-endpoint <endpoint>', 'containerRuntimeEndpoint, e.g. unix:///run/containerd/containerd.sock')
    .option('--image-service-endpoint <endpoint>', 'imageServiceEndpoint')
    .option('--pod-manifest-path <dir>', 'staticPodPath: directory of static pod manifests')
    .option('--address <ip>', 'address: IP the HTTPS server binds')
    .option('--port <port>', 'port: HTTPS server port')
    .option('--read-only-port <port>', 'readOnlyPort: plain-HTTP port for /pods and /healthz; 0 disables')
    .option('--healthz-bind-address <ip>', 'healthzBindAddress')
    .option('--healthz-port <port>', 'healthzPort; 0 disables')
    .option('--tls-cert-file <file>', 'tlsCertFile: serving certificate')
    .option('--tls-private-key-file <file>', 'tlsPrivateKeyFile: serving key')
    .option('--cluster-dns <ip[,ip]>', 'clusterDNS')
    .option('--cluster-domain <domain>', 'clusterDomain')
    .option('--fail-swap-on <bool>', 'failSwapOn')
    .option('--max-pods <n>', 'maxPods');
}

/** Builds the KubeletConfiguration-shaped overrides of the flags given (values still raw strings where the config validates them). */
export function flagOverrides(o: OptionValues): Record<string, unknown> {
  refuseRemovedFlags(o);
  const out: Record<string, unknown> = configFlagOverrides(o);
  const num = (name: string, v: string) => {
    if (!/^\d+$/.test(v)) throw new NodeletError('INVALID_ARGUMENT', `--${name}: "${v}" is not a non-negative integer`);
    return Number(v);
  };
  const bool = (name: string, v: string) => {
    if (v !== 'true' && v !== 'false') throw new NodeletError('INVALID_ARGUMENT', `--${name}: "${v}" is not true or false`);
    return v === 'true';
  };
  if (o.featureGates !== undefined) out.featureGates = parseFeatureGates(o.featureGates);
  if (o.containerRuntimeEndpoint !== undefined) out.containerRuntimeEndpoint = o.containerRuntimeEndpoint;
  if (o.imageServiceEndpoint !== undefined) out.imageServiceEndpoint = o.imageServiceEndpoint;
  if (o.podManifestPath !== undefined) out.staticPodPath = o.podManifestPath;
  if (o.address !== undefined) out.address = o.address;
  if (o.port !== undefined) out.port = num('port', o.port);
  if (o.readOnlyPort !== undefined) out.readOnlyPort = num('read-only-port', o.readOnlyPort);
  if (o.healthzBindAddress !== undefined) out.healthzBindAddress = o.healthzBindAddress;
  if (o.healthzPort !== undefined) out.healthzPort = num('healthz-port', o.healthzPort);
  if (o.tlsCertFile !== undefined) out.tlsCertFile = o.tlsCertFile;
  if (o.tlsPrivateKeyFile !== undefined) out.tlsPrivateKeyFile = o.tlsPrivateKeyFile;
  if (o.clusterDns !== undefined) out.clusterDNS = String(o.clusterDns).split(',').map((s) => s.trim()).filter(Boolean);
  if (o.clusterDomain !== undefined) out.clusterDomain = o.clusterDomain;
  if (o.failSwapOn !== undefined) out.failSwapOn = bool('fail-swap-on', o.failSwapOn);
  if (o.maxPods !== undefined) out.maxPods = num('max-pods', o.maxPods);
  return out;
}

function load(o: OptionValues): Promise<LoadedConfig> {
  return loadConfig({
    configFile: o.config ? path.resolve(o.config) : undefined,
    configDir: o.configDir ? path.resolve(o.configDir) : undefined,
    flagOverrides: flagOverrides(o),
  });
}

function nodeletFlags(cmd: Command, o: OptionValues): NodeletFlags {
  if (o.exitOnLockContention && cmd.getOptionValueSource('lockFile') !== 'cli') {
    throw new NodeletError('INVALID_ARGUMENT', '--exit-on-lock-contention requires --lock-file');
  }
  let checkpointRetention: number | undefined;
  if (o.checkpointRetention !== undefined) {
    if (!/^[1-9]\d*$/.test(o.checkpointRetention)) {
      throw new NodeletError('INVALID_ARGUMENT', `--checkpoint-retention: "${o.checkpointRetention}" is not a positive integer`);
    }
    checkpointRetention = Number(o.checkpointRetention);
  }
  if (o.bootstrapKubeconfig !== undefined && !o.kubeconfig) {
    throw new NodeletError('INVALID_ARGUMENT', '--bootstrap-kubeconfig requires --kubeconfig (the file the bootstrap writes)');
  }
  const rootDir = path.resolve(o.rootDir);
  return {
    configFile: o.config ? path.resolve(o.config) : undefined,
    configDir: o.configDir ? path.resolve(o.configDir) : undefined,
    rootDir,
    kubeconfig: o.kubeconfig ? path.resolve(o.kubeconfig) : undefined,
    ...(o.bootstrapKubeconfig !== undefined ? { bootstrapKubeconfig: path.resolve(o.bootstrapKubeconfig) } : {}),
    lockFile: path.resolve(o.lockFile),
    exitOnLockContention: !!o.exitOnLockContention,
    certDir: path.resolve(o.certDir ?? path.join(rootDir, 'pki')),
    checkpointRetention,
    containerLogDir: path.resolve(o.containerLogDir),
  };
}

function loggerFor(o: OptionValues): Logger {
  if (o.v !== undefined && !/^\d+$/.test(o.v)) throw new NodeletError('INVALID_ARGUMENT', `-v: "${o.v}" is not a non-negative integer`);
  return createLogger({ level: o.logLevel ?? levelFromVerbosity(Number(o.v ?? 0)) });
}

/**
 * The kubelet takes its verbosity from `logging.verbosity` in the KubeletConfiguration too,
 * `-v` winning: applied once the files are read, before anything else logs through children.
 * A value that is not a non-negative integer is left alone (`logging` is not checked).
 */
function applyConfigVerbosity(logger: Logger, cmd: Command, logging: Record<string, unknown>): void {
  const v = logging['verbosity'];
  if (cmd.opts().logLevel !== undefined || cmd.getOptionValueSource('v') === 'cli') return;
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) logger.level = levelFromVerbosity(v);
}

/** Prints a startup failure for a human (stderr) and for the journal (an error record). */
function reportFailure(err: unknown, logger?: Logger): void {
  if (err instanceof ConfigError) {
    process.stderr.write(`nodelet: invalid configuration:\n${err.message.split('\n').map((l) => `  ${l}`).join('\n')}\n`);
    logger?.error({ problems: err.details.problems }, 'invalid configuration');
  } else {
    process.stderr.write(`nodelet: ${errorMessage(err)}\n`);
    logger?.error({ err }, errorMessage(err));
  }
}

/** Exit code after an uncaught exception (sysexits EX_SOFTWARE): distinct from 0/1/2, so the journal and systemd's Restart= show a crash. */
const EXIT_UNCAUGHT = 70;

/**
 * Last-resort handlers of the running daemon. A rejected promise nobody awaited is a bug,
 * logged with its stack while nodelet keeps serving: one bad request must not end the
 * node's agent. An uncaught exception may have left state half-changed, so it is logged
 * and nodelet exits EXIT_UNCAUGHT for systemd to restart it (the lock dies with it).
 */
function installProcessHandlers(logger: Logger): void {
  process.on('unhandledRejection', (reason) => {
    logger.error({ err: reason }, `unhandled promise rejection (a bug; nodelet keeps running): ${errorMessage(reason)}`);
  });
  process.on('uncaughtException', (err) => {
    logger.fatal({ err }, `uncaught exception (a bug): exiting with code ${EXIT_UNCAUGHT} to be restarted: ${errorMessage(err)}`);
    process.exit(EXIT_UNCAUGHT);
  });
}

async function runDaemon(cmd: Command): Promise<number> {
  const o = cmd.opts();
  let logger: Logger | undefined;
  let daemon: Daemon;
  try {
    logger = loggerFor(o);
    installProcessHandlers(logger);
    // Everything that can be wrong with the input is found here, before the lock is taken
    // or anything is written.
    const flags = nodeletFlags(cmd, o);
    const loaded = await load(o);
    applyConfigVerbosity(logger, cmd, loaded.config.logging);
    for (const w of ignoredFlagWarnings(o)) logger.warn(w);
    const registration = registrationFlags(o);
    const identity = resolveNodeIdentity({ hostnameOverride: o.hostnameOverride, nodeIp: o.nodeIp });
    // Connected mode: the kubeconfig is read now, so a bad one stops startup before the lock.
    // With --bootstrap-kubeconfig a missing or expired one is bootstrapped first, which waits
    // for the control plane (a signal ends the wait: a clean stop).
    const bootstrapping = new AbortController();
    const cancel = () => bootstrapping.abort();
    process.once('SIGTERM', cancel);
    process.once('SIGINT', cancel);
    try {
      const bootstrap = flags.bootstrapKubeconfig !== undefined ? { kubeconfig: flags.bootstrapKubeconfig, certDir: flags.certDir, signal: bootstrapping.signal } : undefined;
      const mode = await nodeModeFor(flags.kubeconfig, { identity, config: loaded.config, clock: realClock, logger, certDir: flags.certDir, registration, ...(bootstrap ? { bootstrap } : {}) });
      daemon = new Daemon({ flags, loaded, identity, logger, mode });
    } finally {
      process.off('SIGTERM', cancel);
      process.off('SIGINT', cancel);
    }
  } catch (err) {
    if (isNodeletError(err, 'CANCELLED')) {
      logger?.info('stopped while waiting for the TLS bootstrap');
      return 0;
    }
    reportFailure(err, logger);
    return 1;
  }

  const starting = new AbortController();
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    signals++;
    if (signals > 1) {
      logger!.warn({ signal: sig }, `second ${sig}: exiting now`);
      process.exit(1);
    }
    logger!.info({ signal: sig }, `received ${sig}, shutting down`);
    starting.abort();
    daemon.requestStop(sig);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  try {
    await daemon.start(starting.signal);
  } catch (err) {
    if (starting.signal.aborted) {
      await daemon.stop();
      return 0;
    }
    reportFailure(err, logger);
    await daemon.stop();
    // A refusing host check (swap on with failSwapOn, ...) is invalid input, found before the lock.
    return isHostRefusal(err) ? 1 : 2;
  }
  await daemon.done;
  await daemon.stop();
  return 0;
}

async function configView(cmd: Command): Promise<number> {
  const o = cmd.optsWithGlobals();
  try {
    const loaded = await load(o);
    process.stdout.write(renderConfig(loaded, { showOrigin: !!o.showOrigin }));
    for (const w of loaded.warnings) process.stderr.write(`warning: ${w.file}: ${w.field}: ${w.message}\n`);
    return 0;
  } catch (err) {
    reportFailure(err);
    return 1;
  }
}

export function buildProgram(): Command {
  const program = addCommonOptions(
    new Command('nodelet')
      .description('A Kubernetes node agent: runs the node\'s pods through the container runtime (CRI), standalone or with a control plane.')
      // The kubelet's form (`Kubernetes v1.35.0`), which kubeadm's preflight parses from `kubelet --version`.
      .version(`Kubernetes ${KUBELET_VERSION}-nodelet.${VERSION}`, '--version')
      .enablePositionalOptions(),
  ).action(async (_opts, cmd: Command) => {
    process.exitCode = await runDaemon(cmd);
  });

  const config = program.command('config').description('inspect the configuration');
  addCommonOptions(
    config
      .command('view')
      .description('print the effective KubeletConfiguration (defaults < --config < drop-ins < flags) as YAML')
      .option('--show-origin', 'annotate every value with where it came from: a file path, "flag" or "default"', false),
  ).action(async (_opts, cmd: Command) => {
    process.exitCode = await configView(cmd);
  });

  addCommonOptions(
    program
      .command('doctor')
      .description('run every host check (swap, cgroups, kernel features, the runtime\'s cgroup driver) without starting: no lock, nothing written; exits 1 when a check would stop the daemon')
      .option('-o, --output <format>', 'text or json', 'text'),
  ).action(async (_opts, cmd: Command) => {
    process.exitCode = await doctorCommand(cmd);
  });

  const checkpoint = program.command('checkpoint').description('work with checkpoint archives (POST /checkpoint writes them to <root-dir>/checkpoints)');
  checkpoint
    .command('inspect')
    .description('print what a checkpoint archive is: pod, namespace, container, time, size, sha256, and its entries (streamed, never loaded whole)')
    .argument('<archive>', 'path of a checkpoint-<pod>_<namespace>-<container>-<time>.tar archive')
    .option('-o, --output <format>', 'text or json', 'text')
    .action(async (archive: string, opts: { output: string }) => {
      process.exitCode = await inspectCommand(archive, opts.output);
    });
  return program;
}

async function doctorCommand(cmd: Command): Promise<number> {
  const o = cmd.optsWithGlobals();
  const output = cmd.opts().output as string;
  if (output !== 'text' && output !== 'json') {
    process.stderr.write(`nodelet: --output: "${output}" is not one of text, json\n`);
    return 1;
  }
  let loaded: LoadedConfig;
  try {
    loaded = await load(o);
  } catch (err) {
    reportFailure(err);
    return 1;
  }
  const run = await runHostCheckPass(loaded.config);
  const refuse = refusals(run.results).length > 0;
  if (output === 'json') {
    process.stdout.write(`${JSON.stringify({ checks: run.results, cgroupDriver: run.cgroupDriver, wouldStart: !refuse }, null, 2)}\n`);
  } else {
    process.stdout.write(renderHostChecks(run.results));
    process.stdout.write(refuse ? 'nodelet would refuse to start (a FAIL above).\n' : `nodelet would start (cgroup driver ${run.cgroupDriver}).\n`);
  }
  return refuse ? 1 : 0;
}

async function inspectCommand(archive: string, output: string): Promise<number> {
  if (output !== 'text' && output !== 'json') {
    process.stderr.write(`nodelet: --output: "${output}" is not one of text, json\n`);
    return 1;
  }
  try {
    // tar-stream and the archive reader load only for this command (start-up time of the daemon).
    const { inspectArchive } = await import('./checkpoint/archive.js');
    const d = await inspectArchive(archive);
    if (output === 'json') {
      process.stdout.write(`${JSON.stringify(d, null, 2)}\n`);
      return 0;
    }
    const line = (k: string, v: unknown) => `${`${k}:`.padEnd(11)}${v ?? '(unknown)'}\n`;
    let out = line('archive', d.path) + line('pod', d.pod) + line('namespace', d.namespace) + line('container', d.container) + line('time', d.time);
    if (d.ambiguous) out += line('note', 'the file name reads several ways; pod/namespace/container are a best guess');
    out += line('size', `${d.size} bytes`) + line('sha256', d.sha256) + `entries:   ${d.entries.length}\n`;
    for (const e of d.entries) out += `  ${e.type.padEnd(9)} ${String(e.size).padStart(12)}  ${e.name}\n`;
    process.stdout.write(out);
    return 0;
  } catch (err) {
    process.stderr.write(`nodelet: checkpoint inspect: ${errorMessage(err)}\n`);
    return 1;
  }
}

await buildProgram().parseAsync(process.argv);
// Whatever handles are left (a worker thread blocked in flock, an idle socket), a
// finished command exits with its code.
process.exit(process.exitCode ?? 0);
