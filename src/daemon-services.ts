/**
 * What the daemon's services are made of (the runtime client (gRPC over node:http2, protobufjs), the pod manager,
 * metrics, stats, log rotation, node shutdown), loaded by daemon.ts with one import() once
 * /healthz answers: before it, only what the lock, the root dir and the healthz server need
 * is loaded (start-up time, BENCHMARKS.md "Process start → /healthz").
 */
export { createCriClient } from './runtime/cri-client.js';
export { RuntimeHealth } from './runtime/health.js';
export { PodCidrUpdater } from './runtime/pod-cidr.js';
export { CriPodRuntime } from './pods/cri-pod-runtime.js';
export { ContainerLogManager, parseLogMaxSize } from './pods/log-rotation.js';
export { DEFAULT_CONTAINER_LOG_DIR } from './pods/log-symlinks.js';
export { PodManager } from './pods/manager.js';
export { RuntimeEvents } from './runtime/runtime-events.js';
export { backoffPolicy } from './pods/plan.js';
export { StaticPodSource } from './pods/static-source.js';
export { nodeShutdownFor } from './node/shutdown-manager.js';
export { Metrics } from './metrics/kubelet.js';
export { StatsProvider } from './metrics/stats.js';
export { renderResourceMetrics } from './metrics/resource.js';
export { configzBody } from './metrics/configz.js';
export { PodSources } from './pods/sources.js';
export { ImageManager, imageGcPolicy } from './pods/image-gc.js';
