/**
 * nodelet's `/metrics`: the kubelet's families nodelet can honestly fill, client-go's
 * `rest_client_requests_total`, process and Node.js metrics, and nodelet's own (`nodelet_*`).
 *
 * One `Metrics` per daemon, built by the composition root and handed to the code paths
 * that record: the CRI client (`runtimeOperation`, through its `observe` option), the
 * control-plane client (`restClientRequest`, through its request observer), the pod
 * manager (`PodManagerMetrics`). Names, labels, help texts and buckets are upstream's
 * (pkg/kubelet/metrics/metrics.go, client-go's rest_client metrics).
 *
 * Recording is a map lookup and an add: safe on every CRI call.
 */
import type { PodManagerMetrics } from '../pods/sync/metrics-hooks.js';
import type { ObservedPod } from '../pods/sync/observed.js';
import { VERSION } from '../version.js';
import { Collected, Counter, DEF_BUCKETS, exponentialBuckets, Gauge, Histogram, Registry } from './exposition.js';
import { registerProcessMetrics, type LoopDelaySource } from './process.js';

/** The kubelet's pod startup buckets (podStartupDurationBuckets). */
export const POD_STARTUP_BUCKETS = [0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600];

/** CRI method -> the kubelet's operation_type (instrumented_services.go). */
const OPERATION_TYPES: Record<string, string> = {
  Version: 'version',
  Status: 'status',
  UpdateRuntimeConfig: 'update_runtime_config',
  RunPodSandbox: 'run_podsandbox',
  StopPodSandbox: 'stop_podsandbox',
  RemovePodSandbox: 'remove_podsandbox',
  PodSandboxStatus: 'podsandbox_status',
  ListPodSandbox: 'list_podsandbox',
  CreateContainer: 'create_container',
  StartContainer: 'start_container',
  StopContainer: 'stop_container',
  RemoveContainer: 'remove_container',
  ListContainers: 'list_containers',
  ContainerStatus: 'container_status',
  ExecSync: 'exec_sync',
  CheckpointContainer: 'checkpoint_container',
  ListContainerStats: 'list_container_stats',
  ListPodSandboxStats: 'list_podsandbox_stats',
  ListImages: 'list_images',
  ImageStatus: 'image_status',
  PullImage: 'pull_image',
  RemoveImage: 'remove_image',
  ImageFsInfo: 'image_fs_info',
};

/** `RunPodSandbox` -> `run_podsandbox`; unknown methods in snake case. */
export function operationType(method: string): string {
  return OPERATION_TYPES[method] ?? method.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
}

export type { PodManagerMetrics } from '../pods/sync/metrics-hooks.js';

/**
 * What the node shutdown manager records: the kubelet's graceful shutdown gauges, in seconds
 * since the epoch (given here in milliseconds; 0: none).
 */
export interface NodeShutdownMetrics {
  /** `kubelet_graceful_shutdown_start_time_seconds`: when the last graceful node shutdown started. */
  setShutdownStartTime(ms: number): void;
  /** `kubelet_graceful_shutdown_end_time_seconds`: when it ended (0 while one is under way). */
  setShutdownEndTime(ms: number): void;
}

export class Metrics implements PodManagerMetrics {
  readonly registry = new Registry();

  readonly runningPods = this.registry.register(new Gauge('kubelet_running_pods', '[ALPHA] Number of pods that have a running pod sandbox', []));
  readonly runningContainers = this.registry.register(new Gauge('kubelet_running_containers', '[ALPHA] Number of containers currently running', ['container_state']));
  readonly podStartDurationSeconds = this.registry.register(
    new Histogram('kubelet_pod_start_duration_seconds', '[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run', [], POD_STARTUP_BUCKETS),
  );
  readonly podWorkerDurationSeconds = this.registry.register(
    new Histogram('kubelet_pod_worker_duration_seconds', '[ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync', ['operation_type'], DEF_BUCKETS),
  );
  readonly runtimeOperations = this.registry.register(new Counter('kubelet_runtime_operations_total', '[ALPHA] Cumulative number of runtime operations by operation type.', ['operation_type']));
  readonly runtimeOperationsErrors = this.registry.register(
    new Counter('kubelet_runtime_operations_errors_total', '[ALPHA] Cumulative number of runtime operation errors by operation type.', ['operation_type']),
  );
  readonly runtimeOperationsDuration = this.registry.register(
    new Histogram('kubelet_runtime_operations_duration_seconds', '[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.', ['operation_type'], exponentialBuckets(0.005, 2.5, 14)),
  );
  readonly startedPods = this.registry.register(new Counter('kubelet_started_pods_total', '[ALPHA] Cumulative number of pods started', []));
  readonly startedPodsErrors = this.registry.register(new Counter('kubelet_started_pods_errors_total', '[ALPHA] Cumulative number of errors when starting pods', []));
  readonly startedContainers = this.registry.register(new Counter('kubelet_started_containers_total', '[ALPHA] Cumulative number of containers started', ['container_type']));
  readonly startedContainersErrors = this.registry.register(
    new Counter('kubelet_started_containers_errors_total', '[ALPHA] Cumulative number of errors when starting containers', ['container_type', 'code']),
  );
  readonly leaseRenewals = this.registry.register(new Counter('kubelet_node_lease_renew_total', 'Renewals of the node Lease (kube-node-lease/<node>) that the control plane accepted.', []));
  readonly leaseRenewalFailures = this.registry.register(
    new Counter('kubelet_node_lease_renew_failures_total', 'Attempts to renew the node Lease that failed (each is retried with backoff).', []),
  );
  readonly restClientRequests = this.registry.register(new Counter('rest_client_requests_total', '[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.', ['code', 'method', 'host']));
  readonly statsCollections = this.registry.register(
    new Counter('nodelet_stats_collections_total', 'Sets of CRI and host reads made for /stats/summary and /metrics/resource (scrapes within the cache interval share one). result: ok or error.', ['result']),
  );
  readonly statsCollectionDuration = this.registry.register(
    new Histogram('nodelet_stats_collection_duration_seconds', 'Wall time of one set of CRI and host reads for /stats/summary and /metrics/resource.', [], DEF_BUCKETS),
  );

  #gracefulShutdown: NodeShutdownMetrics | undefined;

  constructor(o: { processMetrics?: boolean; startTimeMs?: number; nodeName?: string; loopDelay?: LoopDelaySource } = {}) {
    this.registry.register(new Collected('nodelet_build_info', 'nodelet version; always 1.', 'gauge', ['version'], () => [{ labels: { version: VERSION }, value: 1 }]));
    const nodeName = o.nodeName;
    if (nodeName !== undefined) this.registry.register(new Collected('kubelet_node_name', "[ALPHA] The node's name. The count is always 1.", 'gauge', ['node'], () => [{ labels: { node: nodeName }, value: 1 }]));
    if (o.processMetrics !== false) registerProcessMetrics(this.registry, o.startTimeMs, o.loopDelay);
    // Gauges read before the first relist show 0 rather than nothing.
    this.runningPods.set(undefined, 0);
  }

  /** The CRI client's observer: one call, its duration and whether it failed. */
  runtimeOperation(method: string, seconds: number, failed: boolean): void {
    const labels = { operation_type: operationType(method) };
    this.runtimeOperations.inc(labels);
    this.runtimeOperationsDuration.observe(labels, seconds);
    if (failed) this.runtimeOperationsErrors.inc(labels);
  }

  /** The lease renewer's observer: one renewal attempt and whether the control plane accepted it. */
  leaseRenewed(ok: boolean): void {
    (ok ? this.leaseRenewals : this.leaseRenewalFailures).inc(undefined);
  }

  /**
   * The graceful node shutdown gauges, registered at the first call (the node shutdown manager
   * asks for them when gates GracefulNodeShutdown and GracefulNodeShutdownBasedOnPodPriority
   * are on, as the kubelet registers them), 0 until a shutdown is known. Names, help (the end
   * gauge's help is upstream's, copied from the start gauge's) and stability are upstream's.
   */
  gracefulShutdown(): NodeShutdownMetrics {
    if (!this.#gracefulShutdown) {
      const start = this.registry.register(new Gauge('kubelet_graceful_shutdown_start_time_seconds', '[ALPHA] Last graceful shutdown start time since unix epoch in seconds', []));
      const end = this.registry.register(new Gauge('kubelet_graceful_shutdown_end_time_seconds', '[ALPHA] Last graceful shutdown start time since unix epoch in seconds', []));
      start.set(undefined, 0);
      end.set(undefined, 0);
      this.#gracefulShutdown = {
        setShutdownStartTime: (ms) => start.set(undefined, ms / 1000),
        setShutdownEndTime: (ms) => end.set(undefined, ms / 1000),
      };
    }
    return this.#gracefulShutdown;
  }

  /** The control-plane client's observer: code is the HTTP status, or `<error>` when no answer came. */
  restClientRequest(code: string, method: string, host: string): void {
    this.restClientRequests.inc({ code, method, host });
  }

  relisted(pods: readonly ObservedPod[]): void {
    let running = 0;
    const byState = new Map<string, number>();
    for (const p of pods) {
      if (p.sandboxes.some((s) => s.ready)) running++;
      for (const c of p.containers) byState.set(c.state, (byState.get(c.state) ?? 0) + 1);
    }
    this.runningPods.set(undefined, running);
    this.runningContainers.reset();
    for (const [state, n] of byState) this.runningContainers.set({ container_state: state }, n);
  }

  podWorkerDuration(operation: 'create' | 'sync' | 'kill', seconds: number): void {
    this.podWorkerDurationSeconds.observe({ operation_type: operation }, seconds);
  }

  podStartDuration(seconds: number): void {
    this.podStartDurationSeconds.observe(undefined, seconds);
  }

  podStarted(ok: boolean): void {
    if (ok) this.startedPods.inc();
    else this.startedPodsErrors.inc();
  }

  containerStarted(init: boolean, ok: boolean, code = ''): void {
    const container_type = init ? 'init_container' : 'container';
    if (ok) this.startedContainers.inc({ container_type });
    else this.startedContainersErrors.inc({ container_type, code });
  }

  render(): string {
    return this.registry.render();
  }
}
