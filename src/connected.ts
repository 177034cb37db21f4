/**
 * Standalone or connected: the one place that turns a control-plane connection into
 * everything connected mode adds. The composition root (daemon.ts) asks a NodeMode for
 * its event sink, its pod sources and its services, the same calls in both modes;
 * standalone builds none of the control-plane parts, and nothing else in nodelet asks
 * which mode it runs in.
 *
 * `ControlPlanePorts` is what connected mode needs of the control plane, in nodelet's
 * terms; the control-plane client implements it (src/controlplane/adapter.ts).
 */
import type { Node, Pod } from 'kubernetes-types/core/v1.js';
import type { Clock } from './clock.js';
import type { KubeletConfiguration } from './config/types.js';
import type { ApiObjects } from './pods/objects/objects.js';
import { parseDuration } from './config/duration.js';
import { errorMessage } from './errors.js';
import type { ControlPlanePorts } from './controlplane/adapter.js';
import { clientGoLimit } from './controlplane/rate-limit.js';
import { ApiEventRecorder, noEvents, nodeRef, type EventSink } from './events.js';
import type { Logger } from './log.js';
import type { Service } from './loop.js';
import type { NodeIdentity } from './node-identity.js';
import { readMachineFacts } from './node/facts.js';
import { PressureMonitor, SignalReader } from './node/signals.js';
import { LeaseRenewer } from './node/lease.js';
import { NodeReporter } from './node/reporter.js';
import { isMirrorPod, MirrorPods, mirroredUid } from './pods/status/mirror.js';
import { runnableApiPods, type PodSources, type SourceName } from './pods/sources/sources.js';
import { PodStatusWriter } from './pods/status/status-writer.js';
import type { PodStatus } from 'kubernetes-types/core/v1.js';
import type { RuntimeState } from './runtime/health.js';
import type { Image } from './runtime/types.js';
import { nodeRegistration, reservedResources } from './node/status.js';
import type { RegistrationFlags } from './kubelet-flags.js';
import type { ReviewClient } from './server/auth.js';
import { KUBELET_VERSION, VERSION } from './version.js';
import { isFeatureEnabled } from './config/feature-gates.js';
import type { ServingCertificateManager } from './controlplane/serving-cert.js';

export type { ControlPlanePorts } from './controlplane/adapter.js';

export type Mode = 'standalone' | 'connected';

/** What the mode's services need of the rest of the daemon, once it is built. */
export interface ModeContext {
  /** The pod sources: connected mode feeds the `api` source. */
  sources: PodSources;
  /** The pod manager's view: a pod's status, and whether it is still in the runtime. */
  pods: {
    podStatus(uid: string): PodStatus | undefined;
    active(uid: string): boolean;
    /** Registers the one listener told when a pod's status changed or it left the runtime (the pod manager's onStatusChange). */
    onStatusChange?(listener: (uid: string) => void): void;
  };
  /** The runtime's last known state, for the Node's Ready condition. */
  runtimeState: () => RuntimeState;
  /** The Node's pod CIDR(s), comma-separated, for the runtime (called on every report; the receiver sends changes only). */
  podCIDR?: (cidr: string) => void;
  /** The root dir (`--root-dir`): its filesystem is the nodefs of the eviction signals. */
  rootDir?: string;
  /** Told of every lease renewal attempt (metrics). */
  onLeaseRenew?: (ok: boolean) => void;
  /** Given what reports the node status at once: called when a node shutdown starts (src/node/shutdown-manager.ts). */
  onNodeShutdown?: (reportNow: () => void) => void;
  /** The runtime's image filesystems (CRI ImageFsInfo mountpoints), for the imagefs signals. */
  imageFsMountpoints?: () => Promise<string[]>;
  /** The runtime's images as last listed (the image manager's), for the Node's status.images. */
  images?: () => readonly Image[];
}

export interface NodeMode {
  readonly name: Mode;
  /** Where pod and node events go (standalone: nowhere). */
  readonly events: EventSink;
  /** The API objects pods refer to: ConfigMaps, Secrets, ServiceAccounts, Services, tokens (standalone: none). */
  readonly objects?: ApiObjects;
  /** This node's Node as the control plane has it, last watched (standalone: none), for pod admission. */
  apiNode?(): Node | undefined;
  /** Token and access reviews for the HTTPS server's webhook modes (standalone: none). */
  readonly reviews?: ReviewClient;
  /** `serverTLSBootstrap`: the serving certificate the cluster issues, for the HTTPS server (standalone: none). */
  readonly servingCertificates?: ServingCertificateManager;
  /** The pod sources besides static files. */
  readonly podSources: readonly SourceName[];
  /** The static pods changed (connected: their mirror pods follow). */
  staticPodsChanged(pods: Pod[]): void;
  /** The services the mode adds, in start order (stopped in reverse). */
  services(ctx: ModeContext): Service[];
}

/**
 * The mode the flags ask for: connected with `--kubeconfig`, standalone without. The
 * kubeconfig is read here, before the lock is taken, so a bad one stops startup naming
 * its file and field; no request is made until the services start.
 */
export async function nodeModeFor(kubeconfig: string | undefined, o: ConnectedOptions): Promise<NodeMode> {
  if (kubeconfig === undefined) return standaloneMode();
  // TLS bootstrap (--bootstrap-kubeconfig): a missing or expired kubeconfig is written first,
  // with a client certificate the control plane issued (src/controlplane/bootstrap.ts).
  if (o.bootstrap) {
    const { ensureClientCertificate } = await import('./controlplane/bootstrap.js');
    await ensureClientCertificate({ kubeconfig, bootstrapKubeconfig: o.bootstrap.kubeconfig, certDir: o.bootstrap.certDir, nodeName: o.identity.nodeName, clock: o.clock, logger: o.logger, signal: o.bootstrap.signal });
  }
  // rotateCertificates: the newest pair in --cert-dir (a rotated one) wins over the kubeconfig's.
  const rotation = o.config.rotateCertificates && o.certDir ? await rotationSetup(kubeconfig, o.certDir, o.bootstrap?.kubeconfig, o.clock.now()) : undefined;
  // Imported only when connected: the control-plane client and its parts, which a standalone node never needs.
  const { controlPlanePorts } = await import('./controlplane/adapter.js');
  // The Lease's deadline, as the kubelet's heartbeat client: min(nodeStatusUpdateFrequency,
  // nodeLeaseDurationSeconds) (10 s with the defaults), but at least 2 s: on a loaded node a
  // 1 s deadline aborted renewals the server was about to accept, each abort costing a
  // conflict and a re-read (seen in the load test, 1 s status frequency, 4 s lease).
  const leaseTimeoutMs = Math.max(2000, Math.min(parseDuration(o.config.nodeStatusUpdateFrequency), o.config.nodeLeaseDurationSeconds * 1000));
  // client-go's token buckets, as the kubelet gives its clients: kubeAPIQPS/kubeAPIBurst for
  // the main client, eventRecordQPS/eventBurst for the events' own; the heartbeat (Lease,
  // Node status) has none. QPS 0 means client-go's default (5), a negative QPS no limit.
  const ports = await controlPlanePorts(kubeconfig, o.identity.nodeName, o.logger, {
    leaseTimeoutMs,
    apiLimiter: clientGoLimit(o.config.kubeAPIQPS, o.config.kubeAPIBurst, o.clock),
    eventLimiter: clientGoLimit(o.config.eventRecordQPS, o.config.eventBurst, o.clock),
    ...(rotation ? { clientCertificate: { cert: rotation.access.cert, key: rotation.access.key } } : {}),
  });
  let rotator: import('./controlplane/rotation.js').ClientCertificateRotator | undefined;
  if (rotation) {
    const { ClientCertificateRotator } = await import('./controlplane/rotation.js');
    rotator = new ClientCertificateRotator({
      ...rotation,
      certDir: o.certDir!,
      nodeName: o.identity.nodeName,
      clock: o.clock,
      logger: o.logger,
      apply: (cert, key) => ports.setClientCertificate?.(cert, key),
    });
  }
  // serverTLSBootstrap: serving certificate requests, made with the credentials in use (a rotated pair's once there is one).
  const serving = servingTlsBootstrap(o.config) ? await servingManager(kubeconfig, o, () => rotator?.current) : undefined;
  return connectedMode(ports, { ...o, ...(rotator ? { certificateRotation: rotator } : {}), ...(serving ? { servingCertificates: serving } : {}) });
}

/** Whether serving certificates come from the cluster: `serverTLSBootstrap` and the gate RotateKubeletServerCertificate (the kubelet's condition). */
export function servingTlsBootstrap(cfg: KubeletConfiguration): boolean {
  return cfg.serverTLSBootstrap === true && isFeatureEnabled(cfg, 'RotateKubeletServerCertificate');
}

/** The serving certificate manager of a connected node: its stored pair read now, its requests sent once started. */
async function servingManager(kubeconfig: string, o: ConnectedOptions, clientPair: () => { cert: string; key: string } | undefined): Promise<ServingCertificateManager> {
  const [{ ServingCertificateManager, controlPlaneRequester }, { loadKubeconfig }] = await Promise.all([import('./controlplane/serving-cert.js'), import('./controlplane/kubeconfig.js')]);
  const access = loadKubeconfig(kubeconfig);
  const log = o.logger.child({ component: 'serving-certificate' });
  return ServingCertificateManager.load({
    nodeName: o.identity.nodeName,
    hostname: o.identity.hostname,
    ips: o.identity.ips,
    certDir: o.certDir ?? '/var/lib/kubelet/pki',
    ...(o.config.tlsCertFile ? { tlsCertFile: o.config.tlsCertFile } : {}),
    ...(o.config.tlsPrivateKeyFile ? { tlsPrivateKeyFile: o.config.tlsPrivateKeyFile } : {}),
    allowDnsOnly: isFeatureEnabled(o.config, 'AllowDNSOnlyNodeCSR'),
    request: controlPlaneRequester(() => ({ ...access, ...(clientPair() ?? {}) }), o.clock, log),
    clock: o.clock,
    logger: o.logger,
  });
}

/**
 * What rotation starts from: the kubeconfig's access with the pair in use, which is
 * `<cert-dir>/kubelet-client-current.pem` when it holds a certificate that has not expired
 * (the kubelet's file store: a rotated pair outlives the kubeconfig's), else the kubeconfig's.
 * Undefined (no rotation) when the kubeconfig authenticates without a client certificate.
 */
async function rotationSetup(kubeconfig: string, certDir: string, bootstrapKubeconfig: string | undefined, now: number) {
  const { loadKubeconfig } = await import('./controlplane/kubeconfig.js');
  const { readCurrentPair } = await import('./controlplane/bootstrap.js');
  const access = loadKubeconfig(kubeconfig);
  const stored = readCurrentPair(certDir, now);
  const pair = stored ?? (access.cert && access.key ? { cert: access.cert, key: access.key } : undefined);
  if (!pair) return undefined;
  return { access: { ...access, ...pair }, ...(bootstrapKubeconfig ? { bootstrap: () => loadKubeconfig(bootstrapKubeconfig) } : {}) };
}

/** Standalone: no control plane is contacted, nothing of connected mode is built. */
export function standaloneMode(): NodeMode {
  return { name: 'standalone', events: noEvents, podSources: [], staticPodsChanged: () => {}, services: () => [] };
}

export interface ConnectedOptions {
  identity: NodeIdentity;
  config: KubeletConfiguration;
  clock: Clock;
  logger: Logger;
  /** `--bootstrap-kubeconfig` and `--cert-dir`: bootstrap the kubeconfig when it is missing or expired; the signal cancels the wait. */
  bootstrap?: { kubeconfig: string; certDir: string; signal: AbortSignal };
  /** `--cert-dir`: where rotated client certificates go (`rotateCertificates`). */
  certDir?: string;
  /** `--node-labels`, `--cloud-provider` (and `--node-ip` with it): what the Node registers with besides the config's taints and providerID. */
  registration?: RegistrationFlags;
  /** Set by nodeModeFor with `rotateCertificates`: the loop renewing the client certificate. */
  certificateRotation?: { start(signal: AbortSignal): void; stop(): Promise<void> };
  /** Set by nodeModeFor with `serverTLSBootstrap`: the serving certificate manager. */
  servingCertificates?: ServingCertificateManager;
}

/**
 * Connected: the pods the control plane binds to this node, their status and mirror pods,
 * the Node and its status, the heartbeat lease, events. None of them blocks startup: a
 * control plane that is down shows in the logs and is retried, while static pods run.
 */
export function connectedMode(cp: ControlPlanePorts, o: ConnectedOptions): NodeMode {
  const { identity, clock, logger: log } = o;
  // 12 attempts (backoff to 5 s: about 40 s), as client-go's 12 tries per event: events of a
  // short control-plane outage are sent when it answers again, not dropped. Their client
  // (cp.events) has its own rate limit, eventRecordQPS/eventBurst (nodeModeFor).
  const events = new ApiEventRecorder({ api: cp.events, host: identity.nodeName, clock, attempts: 12, logger: log.child({ component: 'events' }) });
  // Each static pod gets a mirror pod in the API.
  const mirrors = new MirrorPods({ api: cp.mirrorPods, nodeName: identity.nodeName, clock, logger: log.child({ component: 'mirror-pods' }) });
  return {
    name: 'connected',
    events,
    reviews: cp.reviews,
    ...(o.servingCertificates ? { servingCertificates: o.servingCertificates } : {}),
    ...(cp.objects ? { objects: cp.objects } : {}),
    apiNode: () => cp.nodes.watchedNode?.(identity.nodeName)?.node,
    podSources: ['api'],
    staticPodsChanged: (pods) => mirrors.setStaticPods(pods),
    services: (ctx) => connectedServices(cp, o, ctx, events, mirrors),
  };
}

/** The Node's reporter: registration, then its status (conditions from the measured pressure against evictionHard, allocatable, images). */
function nodeReporterFor(cp: ControlPlanePorts, o: ConnectedOptions, ctx: ModeContext, events: ApiEventRecorder): NodeReporter {
  const { identity, config: cfg, clock, logger: log } = o;
  const machine = readMachineFacts();
  const reserved = reservedResources(cfg.kubeReserved, cfg.systemReserved);
  const registration = nodeRegistration({ ...o.registration, ...(cfg.registerWithTaints ? { registerWithTaints: cfg.registerWithTaints } : {}), ...(cfg.providerID ? { providerID: cfg.providerID } : {}) });
  const pressure = new PressureMonitor({
    reader: new SignalReader({
      rootDir: ctx.rootDir ?? '/var/lib/kubelet',
      logger: log.child({ component: 'node-signals' }),
      ...(ctx.imageFsMountpoints ? { imageFsMountpoints: ctx.imageFsMountpoints } : {}),
    }),
    evictionHard: cfg.evictionHard,
    transitionPeriodMs: parseDuration(cfg.evictionPressureTransitionPeriod ?? '5m'),
    clock,
    logger: log.child({ component: 'node-status' }),
  });
  return new NodeReporter({
    api: cp.nodes,
    events,
    clock,
    logger: log.child({ component: 'node-status' }),
    updateFrequencyMs: parseDuration(cfg.nodeStatusUpdateFrequency),
    reportFrequencyMs: parseDuration(cfg.nodeStatusReportFrequency),
    ...(ctx.podCIDR ? { onPodCIDR: ctx.podCIDR } : {}),
    facts: async () => {
      const decided = await pressure.decide();
      return {
        ...machine,
        nodeName: identity.nodeName,
        hostname: identity.hostname,
        ips: identity.ips,
        maxPods: cfg.maxPods,
        evictionHardMemoryBytes: pressure.memoryThresholdBytes(machine.memoryBytes),
        // Allocatable: kubeReserved + systemReserved and the nodefs.available threshold off ephemeral-storage.
        reserved,
        ephemeralStorageBytes: pressure.nodefsCapacityBytes(),
        evictionHardNodefs: pressure.nodefsThreshold(),
        ...(ctx.images ? { images: ctx.images(), maxImages: cfg.nodeStatusMaxImages } : {}),
        kubeletPort: cfg.port,
        kubeletVersion: `${KUBELET_VERSION}-nodelet.${VERSION}`,
        runtime: ctx.runtimeState(),
        pressure: decided,
        registration,
      };
    },
  });
}

/** Connected mode's services, in start order (stopped in reverse). */
function connectedServices(cp: ControlPlanePorts, o: ConnectedOptions, ctx: ModeContext, events: ApiEventRecorder, mirrors: MirrorPods): Service[] {
  const { identity, config: cfg, clock, logger: log } = o;
  const reporter = nodeReporterFor(cp, o, ctx, events);
  ctx.onNodeShutdown?.(() => reporter.reportNow());
  const statusWriter = new PodStatusWriter({
    api: cp.podStatus,
    pods: {
      // A mirror pod's status is its static pod's.
      statusOf: (p) => ctx.pods.podStatus((isMirrorPod(p) ? mirroredUid(p) : p.metadata?.uid) ?? ''),
      active: (p) => ctx.pods.active(p.metadata?.uid ?? ''),
    },
    clock,
    logger: log.child({ component: 'pod-status' }),
  });
  // A changed status is written at once; the writer's 10 s comparison stays as the backstop.
  ctx.pods.onStatusChange?.(() => statusWriter.statusChanged());
  const lease = new LeaseRenewer({
    api: cp.leases,
    nodeName: identity.nodeName,
    leaseDurationSeconds: cfg.nodeLeaseDurationSeconds,
    clock,
    logger: log.child({ component: 'node-lease' }),
    ...(ctx.onLeaseRenew ? { onRenew: ctx.onLeaseRenew } : {}),
  });
  // Stopped in reverse: the loops and the watch first, then queued events are sent (for at
  // most 2 s), and the client closes last, with nothing left in flight.
  return [
    { name: 'control-plane-client', start: () => log.info({ server: cp.server }, `connected to the control plane at ${cp.server}`), stop: () => cp.close() },
    ...(o.certificateRotation ? [{ name: 'certificate-rotation', start: (signal: AbortSignal) => o.certificateRotation!.start(signal), stop: () => o.certificateRotation!.stop() }] : []),
    ...(o.servingCertificates ? [{ name: 'serving-certificate', start: (signal: AbortSignal) => o.servingCertificates!.start(signal), stop: () => o.servingCertificates!.stop() }] : []),
    { name: 'events', start: () => events.emit(nodeRef(identity.nodeName), 'Normal', 'Starting', 'Starting kubelet.'), stop: () => events.stop() },
    {
      name: 'api-pods',
      start: () => {
        void cp.pods
          .start((list) => {
            const onNode = list.filter((p) => p.spec?.nodeName === identity.nodeName);
            statusWriter.setApiPods(onNode);
            mirrors.setApiPods(onNode);
            ctx.sources.update('api', runnableApiPods(list, identity.nodeName));
          })
          .catch((err) => log.warn({ err: errorMessage(err) }, `cannot list this node's pods: ${errorMessage(err)}`));
      },
      stop: () => cp.pods.stop(),
    },
    { name: 'pod-status', start: (signal) => statusWriter.start(signal), stop: () => statusWriter.stop() },
    { name: 'mirror-pods', start: (signal) => mirrors.start(signal), stop: () => mirrors.stop() },
    { name: 'node-status', start: (signal) => reporter.start(signal), stop: () => reporter.stop() },
    { name: 'node-lease', start: (signal) => lease.start(signal), stop: () => lease.stop() },
  ];
}
