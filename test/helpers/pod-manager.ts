/**
 * A PodManager for unit tests: on the in-memory runtime (test/fakes/pod-runtime.ts) and a
 * manual clock, its events recorded as `<type> <reason>: <message>` lines. Sources are not
 * marked ready: a test that needs it calls `m.setSourcesReady()`.
 */
import { silentLogger } from '../../src/log.js';
import { PodManager, type PodManagerOptions } from '../../src/pods/sync/manager.js';
import { MemRuntime } from '../fakes/pod-runtime.js';
import { ManualClock } from './clock.js';

/** `more`: further options (admit handlers, ...) over the runtime, logger, clock and events. */
export function managerWithEvents(more: Partial<PodManagerOptions> = {}): { clock: ManualClock; rt: MemRuntime; events: string[]; m: PodManager } {
  const clock = new ManualClock();
  const rt = new MemRuntime(clock);
  const events: string[] = [];
  const m = new PodManager({
    runtime: rt,
    logger: silentLogger(),
    clock,
    events: { emit: (_ref, type, reason, message) => void events.push(`${type} ${reason}: ${message}`) },
    ...more,
  });
  return { clock, rt, events, m };
}
