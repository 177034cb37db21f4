/**
 * Runtime health: polls the runtime's Status and Version and keeps what the node's Ready
 * condition and the health detail need (RuntimeReady, NetworkReady, reason, message).
 *
 * A loop object (src/loop.ts): constructing it starts nothing; `start(signal)` runs the loop
 * until the signal aborts or `stop()` is called; `syncOnce()` is one check, for tests and
 * for callers that want a fresh answer. The loop never throws: a missing or dead runtime
 * is a state (`ContainerRuntimeDown`), retried with a capped backoff so that recovery is
 * seen within a few seconds of the runtime coming back.
 */
import type { Clock } from '../clock.js';
import { backoffDelay } from '../clock.js';
import { LoopOwner } from '../loop.js';
import { errorMessage } from '../errors.js';
import { silentLogger, type Logger } from '../log.js';
import type { RuntimeService, RuntimeStatusInfo, VersionInfo } from './types.js';

export interface RuntimeState {
  /** The runtime answers and its `RuntimeReady` condition is true. */
  runtimeReady: boolean;
  /** The runtime's `NetworkReady` condition (false without CNI config; hostNetwork pods run anyway). */
  networkReady: boolean;
  /**
   * CamelCase summary, worst first: `ContainerRuntimeUnknown` (not checked yet),
   * `ContainerRuntimeDown` (no answer), `ContainerRuntimeNotReady` (RuntimeReady false),
   * the runtime's NetworkReady reason (e.g. `NetworkPluginNotReady`) when only the network
   * is not ready, `ContainerRuntimeReady` when both are.
   */
  reason: string;
  /** Human-readable, in the kubelet's wording (`container runtime is down: ...`). */
  message: string;
  /** The runtime's NetworkReady reason and message, kept apart for the node condition. */
  networkReason?: string;
  networkMessage?: string;
  runtimeName?: string;
  runtimeVersion?: string;
  runtimeApiVersion?: string;
  /** Clock time (ms) of the last check. */
  lastChecked?: number;
  /** Error of the last failed check; cleared by a successful one. */
  lastError?: string;
}

export const INITIAL_RUNTIME_STATE: RuntimeState = Object.freeze({
  runtimeReady: false,
  networkReady: false,
  reason: 'ContainerRuntimeUnknown',
  message: 'container runtime status check may not have completed yet',
});

/**
 * Pure: the state after one check. `status`/`version` are the answers, or `error` when a
 * call failed. Names and versions from the previous state are kept while the runtime is down.
 */
export function deriveRuntimeState(
  prev: RuntimeState,
  now: number,
  r: { status: RuntimeStatusInfo; version: VersionInfo } | { error: unknown },
): RuntimeState {
  const keep = {
    ...(prev.runtimeName !== undefined ? { runtimeName: prev.runtimeName } : {}),
    ...(prev.runtimeVersion !== undefined ? { runtimeVersion: prev.runtimeVersion } : {}),
    ...(prev.runtimeApiVersion !== undefined ? { runtimeApiVersion: prev.runtimeApiVersion } : {}),
  };
  if ('error' in r) {
    const msg = errorMessage(r.error);
    return { ...keep, runtimeReady: false, networkReady: false, reason: 'ContainerRuntimeDown', message: `container runtime is down: ${msg}`, lastChecked: now, lastError: msg };
  }
  const cond = (type: string) => r.status.conditions.find((c) => c.type === type);
  const rt = cond('RuntimeReady');
  const net = cond('NetworkReady');
  const runtimeReady = rt?.status === true;
  const networkReady = net?.status === true;
  const base = {
    runtimeReady,
    networkReady,
    runtimeName: r.version.runtimeName,
    runtimeVersion: r.version.runtimeVersion,
    runtimeApiVersion: r.version.runtimeApiVersion,
    lastChecked: now,
    ...(net && !networkReady ? { networkReason: net.reason, networkMessage: net.message } : {}),
    ...(!net ? { networkReason: 'NetworkConditionMissing', networkMessage: 'the runtime reports no NetworkReady condition' } : {}),
  };
  if (!rt) {
    return { ...base, reason: 'ContainerRuntimeNotReady', message: 'container runtime not ready: the runtime reports no RuntimeReady condition' };
  }
  if (!runtimeReady) {
    return { ...base, reason: 'ContainerRuntimeNotReady', message: `container runtime not ready: RuntimeReady=false reason:${rt.reason} message:${rt.message}` };
  }
  if (!networkReady) {
    const reason = net?.reason || 'NetworkNotReady';
    return { ...base, reason, message: `container runtime network not ready: NetworkReady=false reason:${net?.reason ?? ''} message:${net?.message ?? ''}` };
  }
  return { ...base, reason: 'ContainerRuntimeReady', message: 'container runtime is ready' };
}

function sameState(a: RuntimeState, b: RuntimeState): boolean {
  return (
    a.runtimeReady === b.runtimeReady &&
    a.networkReady === b.networkReady &&
    a.reason === b.reason &&
    a.message === b.message &&
    a.networkReason === b.networkReason &&
    a.networkMessage === b.networkMessage &&
    a.runtimeName === b.runtimeName &&
    a.runtimeVersion === b.runtimeVersion
  );
}

export interface RuntimeHealthOptions {
  runtime: Pick<RuntimeService, 'status' | 'version'>;
  clock: Clock;
  logger?: Logger;
  /** Poll period while the runtime answers (the kubelet checks every 5 s). */
  intervalMs?: number;
  /** Retry backoff while it does not: base doubling to max. */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** Named in the log lines (the configured endpoint). */
  endpoint?: string;
  /** Called after a check that changed the state (not for lastChecked alone). Errors are logged, never thrown. */
  onChange?: (state: RuntimeState, previous: RuntimeState) => void;
}

export class RuntimeHealth extends LoopOwner {
  #state: RuntimeState = INITIAL_RUNTIME_STATE;
  #failures = 0;
  /** What the runtime's last Status answer said it implements (undefined until one came). */
  #features: RuntimeStatusInfo['features'];
  readonly #o: Required<Omit<RuntimeHealthOptions, 'onChange' | 'logger' | 'endpoint'>> & Pick<RuntimeHealthOptions, 'onChange' | 'endpoint'>;
  readonly #log: Logger;

  constructor(o: RuntimeHealthOptions) {
    const log = (o.logger ?? silentLogger()).child({ component: 'runtime-health' });
    super({ name: 'runtime-health', clock: o.clock, logger: log });
    this.#o = { intervalMs: 5000, backoffBaseMs: 1000, backoffMaxMs: 5000, ...o };
    this.#log = log;
  }

  /** The last known state (a frozen snapshot). */
  state(): RuntimeState {
    return this.#state;
  }

  /** StatusResponse.features of the last answer (pod admission asks: supplementalGroupsPolicy); undefined before one. */
  features(): RuntimeStatusInfo['features'] {
    return this.#features;
  }

  /** Consecutive failed checks (0 while the runtime answers). */
  failures(): number {
    return this.#failures;
  }

  /** One check: Status then Version. Never throws; returns the new state. */
  async syncOnce(): Promise<RuntimeState> {
    let next: RuntimeState;
    try {
      const status = await this.#o.runtime.status(false);
      const version = await this.#o.runtime.version();
      next = deriveRuntimeState(this.#state, this.#o.clock.now(), { status, version });
      this.#features = status.features ?? { supplementalGroupsPolicy: false };
      this.#failures = 0;
    } catch (err) {
      next = deriveRuntimeState(this.#state, this.#o.clock.now(), { error: err });
      this.#failures++;
    }
    const prev = this.#state;
    this.#state = Object.freeze(next);
    if (!sameState(prev, next)) {
      const fields = { runtimeReady: next.runtimeReady, networkReady: next.networkReady, reason: next.reason, message: next.message, runtime: next.runtimeName, version: next.runtimeVersion };
      const which = this.#o.endpoint ? `container runtime ${this.#o.endpoint}` : 'container runtime';
      if (next.runtimeReady) {
        const network = next.networkReady ? '' : ` (network not ready: ${next.networkReason ?? next.reason}; hostNetwork pods still run)`;
        this.#log.info(fields, `${which} is ready: ${next.runtimeName} ${next.runtimeVersion}${network}`);
      } else this.#log.warn(fields, `${which} is not ready: ${next.message}`);
      try {
        this.#o.onChange?.(next, prev);
      } catch (err) {
        this.#log.error({ err: errorMessage(err) }, 'runtime state listener failed');
      }
    }
    return next;
  }

  /** Delay before the next check: the interval while answering, else the capped backoff. */
  override nextDelayMs(): number {
    if (this.#failures === 0) return this.#o.intervalMs;
    return backoffDelay(this.#failures - 1, this.#o.backoffBaseMs, this.#o.backoffMaxMs);
  }
}
