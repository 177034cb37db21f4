/**
 * The daemon's services, wired: the runtime (runtime.ts), the pods and connected mode
 * (pods.ts), then the servers (servers.ts), in the order they start (they stop in reverse).
 * daemon.ts loads this module once /healthz answers, and with it every module the services
 * are made of (start-up time: before it, only what the lock, the root dir and the healthz
 * server need is loaded).
 */
import type { HealthRegistry } from '../health/checks.js';
import type { Service } from '../loop.js';
import type { LoopDelaySource } from '../metrics/process.js';
import type { PodManager } from '../pods/sync/manager.js';
import type { RuntimeState } from '../runtime/health.js';
import type { ServerAuth } from '../server/from-config.js';
import type { WiringContext } from './context.js';
import { wirePods, type PodsWiringOptions } from './pods.js';
import { wireRuntime } from './runtime.js';
import { wireServers } from './servers.js';

export type { WiringContext } from './context.js';

export interface Wired {
  services: Service[];
  pods: PodManager;
  runtimeState: () => RuntimeState | undefined;
}

export async function wireServices(
  ctx: WiringContext,
  o: PodsWiringOptions & { auth: ServerAuth; health: HealthRegistry; loopDelay: LoopDelaySource; onRuntimeChange: () => void },
): Promise<Wired> {
  const rt = await wireRuntime(ctx, { loopDelay: o.loopDelay, onChange: o.onRuntimeChange });
  const pods = await wirePods(ctx, rt, o);
  o.health.add(pods.pods.healthCheck());
  const servers = wireServers(ctx, rt, { auth: o.auth, health: o.health, pods: pods.pods });
  return { services: [...rt.services, ...pods.services, ...servers], pods: pods.pods, runtimeState: () => rt.health.state() };
}
