/**
 * A NodeShutdownManager for tests of what is wired to it (the node status reporter's wake-up,
 * the runtime state it reports), not of the shutdown itself: the kubelet's 20 s / 8 s grace
 * periods, no pods, and a logind it never reaches (connect rejects), so no shutdown starts
 * unless the test drives one.
 */
import type { Clock } from '../../src/clock.js';
import { silentLogger } from '../../src/log.js';
import { NodeShutdownManager } from '../../src/node/shutdown-manager.js';
import { shutdownGroups } from '../../src/node/shutdown-plan.js';

export function idleShutdownManager(rootDir: string, clock: Clock): NodeShutdownManager {
  return new NodeShutdownManager({
    groups: shutdownGroups({ shutdownGracePeriod: '20s', shutdownGracePeriodCriticalPods: '8s' }),
    rootDir,
    connect: () => Promise.reject(new Error('not used')),
    setDesired: () => {},
    podStatus: () => undefined,
    logger: silentLogger(),
    clock,
  });
}
