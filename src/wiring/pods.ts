/**
 * The pods' part of the daemon, in the order a pod travels:
 *
 *   sources (static files; the control plane's, when connected)
 *     -> PodSources (every source's set merged, "all ready" once each has delivered)
 *     -> the node shutdown manager (graceful node shutdown holds back or ends pods)
 *     -> PodManager (one worker per pod: plan, sync steps, status)
 *     -> CriPodRuntime (the PodRuntime port on the CRI client)
 *
 * beside them the runtime's change events (the relist runs on them), the image GC, the
 * container log rotation, and connected mode's services (pod status, mirror pods, Node,
 * Lease, events), which read the pod manager's view. News between them goes through
 * Subscribers, not callbacks assigned after the fact.
 */
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { parseDuration } from '../config/duration.js';
import { isFeatureEnabled } from '../config/feature-gates.js';
import type { Service } from '../loop.js';
import type { HostCheckRun } from '../node/host-facts.js';
import { nodeSwapFromFacts } from '../node/host-facts.js';
import { nodeShutdownFor } from '../node/shutdown-manager.js';
import { EvictionManager, evictionThresholds } from '../node/eviction.js';
import { measureLocalUsage, type LocalStorageDirs } from '../node/local-storage.js';
import { SignalReader } from '../node/signals.js';
import { readMachineFacts } from '../node/facts.js';
import { filesystemBytes, nodeViewFor } from '../node/node-view.js';
import { isStaticPod } from '../pods/sources/static-source.js';
import { hostAppArmorEnabled, podAdmitHandlers } from '../pods/sync/admission.js';
import type { AllocationRecords } from '../pods/sync/allocation.js';
import { CriPodRuntime } from '../pods/cri/cri-pod-runtime.js';
import { podCgroupsFor } from '../pods/cgroups/setup.js';
import { ImageManager, imageGcPolicy } from '../pods/images/image-gc.js';
import { ContainerLogManager, parseLogMaxSize } from '../pods/logs/log-rotation.js';
import { DEFAULT_CONTAINER_LOG_DIR } from '../pods/logs/log-symlinks.js';
import { PodManager } from '../pods/sync/manager.js';
import { backoffPolicy } from '../pods/sync/plan.js';
import { isDnsLabel } from '../pods/sources/pod-validation.js';
import { PodSources } from '../pods/sources/sources.js';
import { apiVolumeDir } from '../pods/volumes/api-data.js';
import { emptyDirPath, podLogDir } from '../pods/volumes/volumes.js';
import { StaticPodSource } from '../pods/sources/static-source.js';
import type { ContainerEvent } from '../runtime/containerd-event.js';
import { RuntimeEvents } from '../runtime/runtime-events.js';
import type { ImagePullRecords } from '../system/root-dir.js';
import { isVerificationPolicy } from '../config/image-pull-credentials.js';
import { errorMessage } from '../errors.js';
import { Subscribers } from '../subscribers.js';
import type { WiringContext } from './context.js';
import type { RuntimeWiring } from './runtime.js';

export interface PodsWiring {
  pods: PodManager;
  services: Service[];
}

export interface PodsWiringOptions {
  /** The host checks' facts (swap), when they ran. */
  host: HostCheckRun | undefined;
  imageRecords: ImagePullRecords | undefined;
  allocation: AllocationRecords | undefined;
  /** The desired pods changed (the daemon's STATUS= line). */
  onPodsChanged: () => void;
}

export async function wirePods(ctx: WiringContext, rt: RuntimeWiring, o: PodsWiringOptions): Promise<PodsWiring> {
  const { cfg, flags, identity, clock, log, mode } = ctx;
  const { cri, metrics } = rt;
  const services: Service[] = [];
  // The node as admission and the downward API see it (node-view.ts, the kubelet's
  // getNodeAnyWay): the Node when connected; the root dir's filesystem size (ephemeral-storage
  // capacity) is read once.
  const rootFsBytes = await filesystemBytes(flags.rootDir);
  // The machine's facts (read from /etc and /sys, synchronously): once, for the three that need them.
  const machine = readMachineFacts();
  const nodeView = nodeViewFor({ nodeName: identity.nodeName, hostname: identity.hostname, machine, config: cfg, ephemeralStorageBytes: () => rootFsBytes, ...(mode.apiNode ? { apiNode: () => mode.apiNode!() } : {}) });
  // The kubelet's cgroup hierarchy (cgroupsPerQOS): started before the pods, below.
  const cgroups = await podCgroupsFor(cfg, { cri, machine, events: mode.events, nodeName: identity.nodeName, logger: log.child({ component: 'cgroups' }) });
  const podRuntime = podRuntimeFor(ctx, rt, o, { nodeAllocatable: () => nodeView().allocatable, memoryCapacityBytes: machine.memoryBytes }, cgroups);
  // A pod's status changed (connected mode's status writer listens); the runtime changed (the pod manager relists).
  const statusChanges = new Subscribers<string>();
  const runtimeChanges = new Subscribers<void>();
  // The runtime's change events: the relist runs on them where it has them; a container's exit read from containerd's event syncs its pod at once.
  const runtimeEvents = runtimeEventsFor(ctx, cri, () => runtimeChanges.emit(), (e) => pods.runtimeContainerExited(podRuntime.noteContainerEvent(e)));
  // The eviction manager (below) decides the pressure conditions the eviction admission handler reads.
  let eviction: EvictionManager | undefined;
  const pods = await podManagerFor(ctx, rt, { podRuntime, runtimeEvents, statusChanges, nodeView, pressure: () => eviction?.conditions() ?? [] });
  if (cgroups) services.push({ name: 'pod-cgroups', start: () => cgroups.start(), stop: async () => {} });
  services.push({
    name: 'pods',
    start: async (signal) => {
      await podRuntime.init();
      pods.start(signal);
      runtimeChanges.subscribe(() => pods.runtimeChanged());
      runtimeEvents.start(signal);
    },
    stop: async () => {
      await runtimeEvents.stop();
      await pods.stop();
    },
  });
  const images = imageManagerFor(ctx, rt);
  services.push({ name: 'image-gc', start: (signal) => images.start(signal), stop: () => images.stop() });
  const evictionManager = (eviction = evictionManagerFor(ctx, rt, pods, images));
  services.push({ name: 'eviction', start: (signal) => evictionManager.start(signal), stop: () => evictionManager.stop() });

  // Graceful node shutdown (src/node/shutdown-manager.ts): between the pod sources and the pod manager.
  const shutdown = nodeShutdownFor(cfg, { rootDir: flags.rootDir, setDesired: (list) => pods.setDesired(list), podStatus: (uid) => pods.podStatus(uid), clock, events: mode.events, nodeName: identity.nodeName, logger: log.child({ component: 'node-shutdown' }), metrics });
  services.push({ name: 'node-shutdown', start: (signal) => shutdown.start(signal), stop: () => shutdown.stop() });

  // Container log rotation (containerLogMaxSize, containerLogMaxFiles), as the kubelet's log manager.
  const logRotation = new ContainerLogManager({
    runtime: cri,
    limits: { maxSize: parseLogMaxSize(cfg.containerLogMaxSize), maxFiles: cfg.containerLogMaxFiles },
    maxWorkers: cfg.containerLogMaxWorkers,
    periodMs: parseDuration(cfg.containerLogMonitorInterval),
    clock,
    logger: log.child({ component: 'log-rotation' }),
    linkDir: flags.containerLogDir ?? DEFAULT_CONTAINER_LOG_DIR,
  });
  services.push({ name: 'log-rotation', start: (signal) => logRotation.start(signal), stop: () => logRotation.stop() });

  const sources = podSourcesFor(ctx, services, { shutdown, pods, onPodsChanged: o.onPodsChanged });
  // Connected: the pod status writer, mirror pods, Node, Lease, events (standalone: none).
  services.push(
    ...mode.services({
      sources,
      pods: { podStatus: (uid) => shutdown.statusOf(uid, pods.podStatus(uid)), active: (uid) => pods.active(uid), onStatusChange: (fn) => void statusChanges.subscribe(fn) },
      runtimeState: () => shutdown.runtimeState(rt.health.state()),
      rootDir: flags.rootDir,
      imageFsMountpoints: () => cri.imageFsInfo?.() ?? Promise.resolve([]),
      images: () => images.images(),
      podCIDR: (cidr) => void rt.podCidr.update(cidr),
      onLeaseRenew: (ok) => metrics.leaseRenewed(ok),
      onNodeShutdown: (reportNow) => shutdown.onShutdownStart(reportNow),
    }),
  );
  return { pods, services };
}

/**
 * The runtime's change events (runtime-events.ts): `onEvent` for any change, and first
 * `onContainerEvent` for a container's exit or OOM kill read from containerd's event (the
 * pod runtime notes it, cri-pod-runtime.ts noteContainerEvent, and the pod syncs on it).
 */
function runtimeEventsFor(ctx: WiringContext, cri: RuntimeWiring['cri'], onEvent: () => void, onContainerEvent: (e: ContainerEvent) => void): RuntimeEvents {
  return new RuntimeEvents({
    stream: (path, body, onMessage, signal) => cri.serverStream(path, body, onMessage, signal),
    onEvent,
    onContainerEvent,
    clock: ctx.clock,
    logger: ctx.log.child({ component: 'runtime-events' }),
  });
}

/** The PodRuntime port on the CRI client, with everything a container's config reads. */
function podRuntimeFor(ctx: WiringContext, rt: RuntimeWiring, o: PodsWiringOptions, node: { nodeAllocatable: () => Readonly<Record<string, string>>; memoryCapacityBytes: number }, cgroups: Awaited<ReturnType<typeof podCgroupsFor>>): CriPodRuntime {
  const { cfg, flags, identity, log, mode } = ctx;
  return new CriPodRuntime({
    cri: rt.cri,
    rootDir: flags.rootDir,
    podLogsDir: cfg.podLogsDir,
    seccompDefault: cfg.seccompDefault,
    ...(cfg.clusterDNS?.length ? { clusterDNS: cfg.clusterDNS } : {}),
    ...(cfg.clusterDomain ? { clusterDomain: cfg.clusterDomain } : {}),
    resolvConf: cfg.resolvConf ?? '/etc/resolv.conf',
    nodeName: identity.nodeName,
    ...(identity.ips[0] ? { hostIP: identity.ips[0] } : {}),
    events: mode.events,
    logger: log.child({ component: 'pods' }),
    ...(o.host ? { swap: nodeSwapFromFacts(o.host.facts, cfg) } : {}),
    ...(o.imageRecords ? { imageRecords: o.imageRecords } : {}),
    // Set only while KubeletEnsureSecretPulledImages is on (config/defaults.ts): who may use a present image.
    ...(isVerificationPolicy(cfg.imagePullCredentialsVerificationPolicy)
      ? { imageCredentialVerification: { policy: cfg.imagePullCredentialsVerificationPolicy, allowlist: cfg.preloadedImagesVerificationAllowlist ?? [] } }
      : {}),
    ...(o.allocation ? { allocation: o.allocation } : {}),
    ...(mode.objects ? { objects: mode.objects } : {}),
    // The downward API's unset limits: the node's allocatable.
    nodeAllocatable: node.nodeAllocatable,
    containerLogDir: flags.containerLogDir ?? DEFAULT_CONTAINER_LOG_DIR,
    ...(cgroups ? { cgroups } : {}),
    memoryCapacityBytes: node.memoryCapacityBytes,
  });
}

/** The pod manager, with its admission handlers. */
async function podManagerFor(
  ctx: WiringContext,
  rt: RuntimeWiring,
  p: { podRuntime: CriPodRuntime; runtimeEvents: RuntimeEvents; statusChanges: Subscribers<string>; nodeView: ReturnType<typeof nodeViewFor>; pressure: () => readonly string[] },
): Promise<PodManager> {
  const { cfg, identity, clock, log, mode } = ctx;
  return new PodManager({
    runtimeEvents: p.runtimeEvents,
    onStatusChange: (uid) => p.statusChanges.emit(uid),
    runtime: p.podRuntime,
    events: mode.events,
    logger: log.child({ component: 'pods' }),
    clock,
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
    metrics: rt.metrics,
    // Admission: sysctls (the safe set for this kernel plus allowedUnsafeSysctls, a bad entry
    // is fatal as for the kubelet), AppArmor on this host, user namespaces, node pressure, then
    // the predicates (resources, node affinity, host ports, taints) against the node's view.
    admitHandlers: podAdmitHandlers({
      kernelRelease: os.release(),
      allowedUnsafeSysctls: cfg.allowedUnsafeSysctls ?? [],
      appArmorEnabled: await hostAppArmorEnabled(),
      pressureConditions: p.pressure,
      predicates: { node: p.nodeView, isStatic: (pod) => isStaticPod(pod) },
    }),
  });
}

/**
 * The node's images and their garbage collection (the kubelet's image GC manager), standalone
 * and connected. NODELET_TEST_IMAGE_GC_PERIOD (tests only, a Go duration) shortens the
 * kubelet's 5 min period.
 */
function imageManagerFor(ctx: WiringContext, rt: RuntimeWiring): ImageManager {
  const { cfg, flags, identity, clock, log, mode } = ctx;
  let gcPeriod: number | undefined;
  try {
    const text = ctx.env['NODELET_TEST_IMAGE_GC_PERIOD'];
    if (text) gcPeriod = Math.max(100, parseDuration(text));
  } catch (err) {
    log.warn(`NODELET_TEST_IMAGE_GC_PERIOD ignored: ${errorMessage(err)}`);
  }
  return new ImageManager({
    runtime: rt.cri,
    policy: imageGcPolicy(cfg, parseDuration),
    rootDir: flags.rootDir,
    clock,
    logger: log.child({ component: 'image-gc' }),
    events: mode.events,
    nodeName: identity.nodeName,
    ...(gcPeriod ? { gcPeriodMs: gcPeriod, listPeriodMs: gcPeriod } : {}),
  });
}

/**
 * The eviction manager (the kubelet's, every 10 s), standalone and connected: signals from
 * the host, the pods' usage from the CRI stats (the Summary), unused images removed first
 * under disk pressure, then one pod at a time ended Failed/Evicted.
 */
function evictionManagerFor(ctx: WiringContext, rt: RuntimeWiring, pods: PodManager, images: ImageManager): EvictionManager {
  const { cfg, flags, identity, clock, log, mode } = ctx;
  const { thresholds, ignored } = evictionThresholds(cfg, parseDuration);
  if (ignored.length) log.info({ signals: ignored }, `eviction signals nodelet does not measure, ignored by the eviction manager: ${ignored.join(', ')}`);
  const signals = new SignalReader({ rootDir: flags.rootDir, logger: log.child({ component: 'eviction' }), imageFsMountpoints: () => rt.cri.imageFsInfo?.() ?? Promise.resolve([]) });
  return new EvictionManager({
    thresholds,
    observe: () => signals.observe(),
    ...(cfg.kernelMemcgNotification ? { observeMemory: () => signals.observeMemory() } : {}),
    podStats: async () => (await rt.observability.stats()).summary.pods,
    ...(cfg.localStorageCapacityIsolation ? { measureLocalStorage: (pod: Pod) => measureLocalUsage(pod, localStorageDirs(flags.rootDir, cfg.podLogsDir)) } : {}),
    pods,
    reclaimImages: () => images.deleteUnusedImages(),
    maxPodGracePeriodSeconds: cfg.evictionMaxPodGracePeriod ?? 0,
    transitionPeriodMs: parseDuration(cfg.evictionPressureTransitionPeriod),
    clock,
    logger: log.child({ component: 'eviction' }),
    events: mode.events,
    nodeName: identity.nodeName,
  });
}

/** Where a pod's local volumes and container logs are (refuses names that would be paths). */
function localStorageDirs(rootDir: string, podLogsDir: string): LocalStorageDirs {
  const meta = (pod: Pod) => ({ namespace: pod.metadata?.namespace ?? '', name: pod.metadata?.name ?? '', uid: pod.metadata?.uid ?? '' });
  return {
    volumeDir: (pod, v) => (v.emptyDir ? emptyDirPath(rootDir, meta(pod).uid, v.name) : apiVolumeDir(rootDir, pod, v)),
    containerLogDir: (pod, container) => {
      const m = meta(pod);
      return isDnsLabel(container) ? path.join(podLogDir(podLogsDir, m.namespace, m.name, m.uid), container) : undefined;
    },
  };
}

/**
 * Pod sources: static files always; the control plane's pods for this node when connected.
 * The desired set goes to the shutdown manager, which hands it on to the pod manager.
 */
function podSourcesFor(ctx: WiringContext, services: Service[], p: { shutdown: ReturnType<typeof nodeShutdownFor>; pods: PodManager; onPodsChanged: () => void }): PodSources {
  const { cfg, identity, log, mode } = ctx;
  const sources = new PodSources([...(cfg.staticPodPath ? (['file'] as const) : []), ...mode.podSources], (list, allReady) => {
    p.shutdown.setDesired(list);
    if (allReady) p.pods.setSourcesReady();
    p.onPodsChanged();
  });
  if (!cfg.staticPodPath) {
    log.info('no staticPodPath: no static pods');
    return sources;
  }
  const source = new StaticPodSource({
    dir: cfg.staticPodPath,
    // inotify wakes a rescan at once; the periodic one (what a watch can miss) runs every
    // fileCheckFrequency (20 s) as the kubelet's, not every second (idle CPU with 110 pods).
    rescanMs: parseDuration(cfg.fileCheckFrequency),
    nodeName: identity.nodeName,
    logger: log.child({ component: 'static-pods' }),
    onChange: (list) => {
      log.info({ staticPodPath: cfg.staticPodPath, pods: list.map((pod) => pod.metadata!.name) }, `static pods: ${list.length}`);
      sources.update('file', list);
      mode.staticPodsChanged(list);
    },
  });
  services.push({ name: 'static-pods', start: (signal) => source.start(signal), stop: () => source.stop() });
  return sources;
}
