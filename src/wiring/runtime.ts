/**
 * The container runtime's part of the daemon: the CRI client (it never fails at
 * construction: the socket may appear later), the health loop that reports the runtime and
 * recovers by itself, the pod CIDR sent to it, and what operators scrape (metrics, stats),
 * which the CRI client, the control-plane client and the pod manager record into.
 */
import { parseDuration } from '../config/duration.js';
import type { LoopDelaySource } from '../metrics/process.js';
import { configzBody } from '../metrics/configz.js';
import { Metrics } from '../metrics/kubelet.js';
import { renderResourceMetrics } from '../metrics/resource.js';
import { StatsProvider } from '../metrics/stats.js';
import type { Service } from '../loop.js';
import { createCriClient, type CriClient } from '../runtime/cri-client.js';
import { RuntimeHealth } from '../runtime/health.js';
import { PodCidrUpdater } from '../runtime/pod-cidr.js';
import type { Observability } from '../server/https-server.js';
import type { WiringContext } from './context.js';

export interface RuntimeWiring {
  metrics: Metrics;
  cri: CriClient;
  health: RuntimeHealth;
  podCidr: PodCidrUpdater;
  observability: Observability;
  /** runtimeRequestTimeout, in ms. */
  requestTimeoutMs: number;
  services: Service[];
}

/** `onChange`: the runtime's state changed (ready, not ready): the daemon's STATUS= line. */
export async function wireRuntime(ctx: WiringContext, o: { loopDelay: LoopDelaySource; onChange: () => void }): Promise<RuntimeWiring> {
  const { cfg, identity, flags, clock, log } = ctx;
  const services: Service[] = [];
  const requestTimeoutMs = parseDuration(cfg.runtimeRequestTimeout);
  const metrics = new Metrics({ nodeName: identity.nodeName, loopDelay: o.loopDelay });
  // The control-plane client is loaded only when connected.
  const unobserve = ctx.mode.name === 'connected' ? (await import('../controlplane/client.js')).observeControlPlaneRequests((code, method, host) => metrics.restClientRequest(code, method, host)) : () => {};
  services.push({ name: 'metrics', start: () => {}, stop: async () => unobserve() });

  const cri = createCriClient({
    runtimeEndpoint: cfg.containerRuntimeEndpoint,
    ...(cfg.imageServiceEndpoint ? { imageEndpoint: cfg.imageServiceEndpoint } : {}),
    requestTimeoutMs,
    logger: log,
    observe: (method, seconds, failed) => metrics.runtimeOperation(method, seconds, failed),
  });
  const stats = new StatsProvider({ runtime: cri, nodeName: identity.nodeName, rootDir: flags.rootDir, clock, onCollect: (s, ok) => (metrics.statsCollections.inc({ result: ok ? 'ok' : 'error' }), metrics.statsCollectionDuration.observe(undefined, s)) });
  const observability: Observability = {
    metrics: () => metrics.render(),
    stats: () => stats.get(),
    resourceMetrics: renderResourceMetrics,
    ...(cfg.enableDebuggingHandlers ? { configz: (origin: boolean) => configzBody(ctx.loaded, origin) } : {}),
  };
  // The pod CIDR for the runtime: the config's podCIDR, then (connected) the Node's; resent when the runtime comes back.
  const podCidr = new PodCidrUpdater({ runtime: cri, logger: log.child({ component: 'pod-cidr' }) });
  const health = new RuntimeHealth({
    runtime: cri,
    clock,
    logger: log.child({ component: 'runtime-health' }),
    endpoint: cfg.containerRuntimeEndpoint,
    onChange: () => {
      o.onChange();
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
  return { metrics, cri, health, podCidr, observability, requestTimeoutMs, services };
}
