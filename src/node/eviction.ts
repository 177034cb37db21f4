/**
 * The eviction manager, as the kubelet's (pkg/kubelet/eviction/eviction_manager.go): when the
 * node runs low on memory, disk or process IDs, it ends pods so that the node survives.
 *
 * Every 10 s (the kubelet's housekeeping), standalone and connected, one turn:
 * 1. observe the signals (signals.ts: memory.available, nodefs.*, imagefs.*, pid.available);
 * 2. the thresholds met: every hard (`evictionHard`) and soft (`evictionSoft`) threshold whose
 *    signal is below it, plus every threshold acted on last turn that is not yet
 *    `evictionMinimumReclaim` above it (so pressure ends only once that much was reclaimed);
 * 3. the node conditions of those thresholds (MemoryPressure, DiskPressure, PIDPressure),
 *    held for `evictionPressureTransitionPeriod` after they were last met; the eviction
 *    admission handler (evictionAdmitHandler, src/pods/sync/admission.ts) reads them;
 * 4. the thresholds to act on: a hard one at once, a soft one once it has been met for its
 *    `evictionSoftGracePeriod`. Memory first, then the others in configuration order;
 * 5. for a disk signal, node-level reclaim first (unused images, through the image manager)
 *    and a new observation: when no threshold is met any more (minimum reclaim included),
 *    no pod is evicted;
 * 6. the active pods ranked (eviction-rank.ts) and ONE pod evicted: killed with a grace period
 *    of 1 s for a hard threshold (the kubelet's immediateEvictionGracePeriodSeconds) or, for a
 *    soft one, the pod's own bounded by `evictionMaxPodGracePeriod`; it ends `Failed`, reason
 *    `Evicted`, the kubelet's message, a `DisruptionTarget` condition, and an `Evicted`
 *    Warning event. Static, mirror and critical pods (priority 2000000000 and more) are never
 *    evicted: the next in rank is. After an eviction the next turn comes 1 s after the pod was
 *    stopped (the kubelet waits for the pod's cleanup, then turns at once).
 *
 * With `kernelMemcgNotification` (the kubelet's memory threshold notifier), memory is also read
 * every second between turns, and a memory threshold crossed outside MemoryPressure wakes a
 * turn at once: a crossing is seen within a second, not at the next housekeeping. The kubelet
 * arms a cgroup v1 `cgroup.event_control` eventfd for it; Node.js makes no eventfd, so nodelet
 * reads the same two files (and /proc/meminfo) each second, only when the option is set.
 *
 * Before step 4 acts, local storage limits (local-storage.ts, `localStorageCapacityIsolation`):
 * every active pod over an emptyDir `sizeLimit` or an `ephemeral-storage` limit is evicted at
 * once, and such a turn evicts nothing else (the kubelet's localStorageEviction).
 *
 * The thresholds are parsed from a validated configuration (config/validate.ts): a bad value
 * here is a bug and throws. A turn never throws: a failure is logged and the next turn tries
 * again.
 */
import type { Pod } from 'kubernetes-types/core/v1.js';
import { parseQuantity, parseThresholdValue } from '../config/quantity.js';
import type { Clock } from '../clock.js';
import { errorMessage } from '../errors.js';
import { nodeRef, podRef, type EventSink } from '../events.js';
import type { Logger } from '../log.js';
import { Loop } from '../loop.js';
import type { PodStats } from '../metrics/stats.js';
import { evictionAdmitHandler, isCriticalPod, type Eviction, type PodAdmitHandler } from '../pods/sync/admission.js';
import { canonicalText, evictionMessage, formatBinary, formatDecimal, rankForEviction, SIGNAL_RESOURCE, statsByUid, type StarvedResource } from './eviction-rank.js';
import { hasLocalStorageLimit, localStorageViolation, type LocalUsage } from './local-storage.js';
import { PRESSURE_TYPES, SIGNAL_CONDITION, SIGNALS, type Observations, type PressureType, type Signal } from './pressure.js';

/** The kubelet's housekeeping period for the eviction manager (monitoringInterval). */
export const EVICTION_MONITORING_MS = 10_000;
/** Hard evictions: the kubelet's immediateEvictionGracePeriodSeconds. */
export const IMMEDIATE_EVICTION_GRACE_SECONDS = 1;
/** After an eviction, the next turn (the kubelet's podCleanupPollFreq). */
const AFTER_EVICTION_MS = 1000;
export const EVICTED_REASON = 'Evicted';

type Amount = { quantity: number; text: string } | { fraction: number };

/** One threshold the manager acts on. */
export interface EvictionThreshold {
  signal: Signal;
  value: Amount;
  /** 0: hard; otherwise the soft threshold's evictionSoftGracePeriod. */
  gracePeriodMs: number;
  minReclaim?: Amount;
}

function amountOf(text: string): Amount | undefined {
  const v = parseThresholdValue(text);
  if (v.kind === 'disabled') return undefined;
  if (v.kind === 'percentage') return { fraction: v.fraction };
  return { quantity: v.quantity.value, text: v.quantity.text };
}

/** A minimum reclaim (the kubelet's parseMinimumReclaims): a positive percentage, or a quantity that may be 0. */
function minReclaimOf(text: string): Amount | undefined {
  if (text.endsWith('%')) return amountOf(text);
  const q = parseQuantity(text);
  if (q.sign < 0) throw new Error(`negative eviction minimum reclaim ${JSON.stringify(text)}`);
  return q.sign === 0 ? undefined : { quantity: q.value, text: q.text };
}

/** The amount of `a` for a signal of this capacity. */
export function resolveAmount(a: Amount, capacity: number): number {
  return 'quantity' in a ? a.quantity : Math.floor(capacity * a.fraction);
}

export interface EvictionConfig {
  evictionHard: Readonly<Record<string, string>>;
  evictionSoft?: Readonly<Record<string, string>> | undefined;
  evictionSoftGracePeriod?: Readonly<Record<string, string>> | undefined;
  evictionMinimumReclaim?: Readonly<Record<string, string>> | undefined;
}

/**
 * The thresholds of the configuration (the kubelet's ParseThresholdConfig): hard ones, then
 * soft ones with their grace periods, each with its signal's minimum reclaim. Signals nodelet
 * does not measure are returned in `ignored`. Throws for a soft threshold without a grace
 * period (the configuration's validation refuses it first).
 */
export function evictionThresholds(cfg: EvictionConfig, parseDuration: (s: string) => number): { thresholds: EvictionThreshold[]; ignored: string[] } {
  const thresholds: EvictionThreshold[] = [];
  const ignored = new Set<string>();
  const known = (s: string): s is Signal => (SIGNALS as readonly string[]).includes(s);
  const add = (map: Readonly<Record<string, string>>, soft: boolean) => {
    for (const [signal, text] of Object.entries(map)) {
      if (!known(signal)) {
        ignored.add(signal);
        continue;
      }
      const value = amountOf(text);
      if (!value) continue;
      let gracePeriodMs = 0;
      if (soft) {
        const g = cfg.evictionSoftGracePeriod?.[signal];
        if (g === undefined) throw new Error(`evictionSoftGracePeriod.${signal}: a grace period must be specified for the soft eviction threshold ${signal}`);
        gracePeriodMs = parseDuration(g);
      }
      const mr = cfg.evictionMinimumReclaim?.[signal];
      const minReclaim = mr !== undefined ? minReclaimOf(mr) : undefined;
      thresholds.push({ signal, value, gracePeriodMs, ...(minReclaim ? { minReclaim } : {}) });
    }
  };
  add(cfg.evictionHard, false);
  add(cfg.evictionSoft ?? {}, true);
  return { thresholds, ignored: [...ignored] };
}

/** The thresholds met by these observations; with `enforceMinReclaim`, met until available reaches threshold + minimum reclaim. */
export function thresholdsMet(thresholds: readonly EvictionThreshold[], obs: Observations, enforceMinReclaim: boolean): EvictionThreshold[] {
  return thresholds.filter((t) => {
    const o = obs[t.signal];
    if (!o) return false;
    let amount = resolveAmount(t.value, o.capacity);
    if (enforceMinReclaim && t.minReclaim) amount += resolveAmount(t.minReclaim, o.capacity);
    return o.available < amount;
  });
}

/** What the manager keeps between turns. */
export interface EvictionState {
  /** When each threshold met was first seen met (ms). */
  firstObservedAt: ReadonlyMap<EvictionThreshold, number>;
  /** When each condition was last seen (ms). */
  conditionAt: Readonly<Partial<Record<PressureType, number>>>;
  /** The thresholds acted on last turn (their minimum reclaim decides when they end). */
  acted: readonly EvictionThreshold[];
}

export const INITIAL_EVICTION_STATE: EvictionState = { firstObservedAt: new Map(), conditionAt: {}, acted: [] };

export interface EvictionDecision {
  state: EvictionState;
  /** The node's pressure conditions now, in MemoryPressure, DiskPressure, PIDPressure order. */
  conditions: PressureType[];
  /** The thresholds to act on (grace periods over), memory first. */
  act: EvictionThreshold[];
}

/** One turn's decision (pure): steps 2 to 4 of the file comment. */
export function decideEviction(thresholds: readonly EvictionThreshold[], obs: Observations, prev: EvictionState, now: number, transitionMs: number): EvictionDecision {
  const met = thresholdsMet(thresholds, obs, false);
  for (const t of thresholdsMet(prev.acted, obs, true)) if (!met.includes(t)) met.push(t);
  const firstObservedAt = new Map<EvictionThreshold, number>();
  for (const t of met) firstObservedAt.set(t, prev.firstObservedAt.get(t) ?? now);
  const conditionAt: Partial<Record<PressureType, number>> = { ...prev.conditionAt };
  for (const t of met) conditionAt[SIGNAL_CONDITION[t.signal]] = now;
  // A condition met now is under pressure whatever the transition period (also 0).
  const conditions = PRESSURE_TYPES.filter((c) => conditionAt[c] !== undefined && (conditionAt[c] === now || now - conditionAt[c]! < transitionMs));
  const act = met.filter((t) => now - firstObservedAt.get(t)! >= t.gracePeriodMs);
  // Memory before every other resource (the kubelet's byEvictionPriority), otherwise as configured.
  act.sort((a, b) => Number(b.signal === 'memory.available') - Number(a.signal === 'memory.available'));
  return { state: { firstObservedAt, conditionAt, acted: act }, conditions, act };
}

/** What the manager needs of the pod manager. */
export interface EvictionPods {
  /** The admitted pods not finished nor being removed (the kubelet's active pods). */
  activePods(): Pod[];
  /** Ends the pod: resolves once its containers are stopped; false when it is not (any more) a running pod. */
  evict(uid: string, e: Eviction): Promise<boolean>;
}

export interface EvictionManagerOptions {
  thresholds: readonly EvictionThreshold[];
  /** The signals (SignalReader). */
  observe: () => Promise<Observations>;
  /** The pods' usage (the Summary's pods, from CRI stats); a failure ranks every pod as without stats. */
  podStats: () => Promise<readonly PodStats[]>;
  pods: EvictionPods;
  /** With `kernelMemcgNotification`: reads memory.available alone (between turns, every `memoryWatchMs`). */
  observeMemory?: () => Promise<Observations>;
  /** How often observeMemory runs (1 s). */
  memoryWatchMs?: number;
  /** With `localStorageCapacityIsolation`: measures a pod that declares a local storage limit. */
  measureLocalStorage?: (pod: Pod) => Promise<LocalUsage>;
  /** Node-level reclaim for disk signals: removes unused images; resolves when done (never needed to succeed). */
  reclaimImages?: () => Promise<unknown>;
  /** `evictionMaxPodGracePeriod` (seconds): the most a soft eviction gives a pod; negative: the pod's own. */
  maxPodGracePeriodSeconds: number;
  /** `evictionPressureTransitionPeriod` in ms. */
  transitionPeriodMs: number;
  /** The pod's grace period when it sets none (the kubelet's 30 s). */
  defaultGracePeriodSeconds?: number;
  clock: Clock;
  logger: Logger;
  events: EventSink;
  nodeName: string;
  monitoringMs?: number;
}

/** What one turn did (tests, logs). */
export interface EvictionOutcome {
  conditions: PressureType[];
  /** The signal acted on, if any. */
  signal?: Signal;
  /** Node-level reclaim relieved the pressure: no pod evicted. */
  reclaimed?: boolean;
  evicted?: { uid: string; name: string; message: string; gracePeriodSeconds: number };
  /** Pods evicted for their local storage limits this turn (`evicted` is the first). */
  localStorage?: Array<NonNullable<EvictionOutcome['evicted']>>;
}

export class EvictionManager {
  readonly #o: EvictionManagerOptions;
  readonly #loop: Loop;
  readonly #memoryWatch: Loop | undefined;
  #state: EvictionState = INITIAL_EVICTION_STATE;
  #conditions: PressureType[] = [];
  #evictedLastTurn = false;

  constructor(o: EvictionManagerOptions) {
    this.#o = o;
    this.#loop = new Loop({
      name: 'eviction',
      turn: () => this.syncOnce(),
      delayMs: () => (this.#evictedLastTurn ? AFTER_EVICTION_MS : (o.monitoringMs ?? EVICTION_MONITORING_MS)),
      clock: o.clock,
      logger: o.logger,
    });
    const memory = o.thresholds.filter((t) => t.signal === 'memory.available');
    const observeMemory = o.observeMemory;
    if (observeMemory && memory.length) {
      this.#memoryWatch = new Loop({
        name: 'eviction-memory',
        turn: async () => {
          if (this.#conditions.includes('MemoryPressure')) return; // the turns see to it
          if (thresholdsMet(memory, await observeMemory(), false).length) this.#loop.wake();
        },
        delayMs: () => o.memoryWatchMs ?? 1000,
        clock: o.clock,
        logger: o.logger,
      });
    }
  }

  /** The node's pressure conditions as of the last turn (admission, logs). */
  conditions(): readonly PressureType[] {
    return this.#conditions;
  }

  /** The admission handler on this manager's conditions. */
  admitHandler(): PodAdmitHandler {
    return evictionAdmitHandler(() => this.#conditions);
  }

  start(signal?: AbortSignal): void {
    if (this.#o.thresholds.length === 0 && !this.#o.measureLocalStorage) {
      this.#o.logger.info('no eviction thresholds and no local storage isolation: the eviction manager does nothing');
      return;
    }
    this.#loop.start(signal);
    this.#memoryWatch?.start(signal);
  }

  async stop(): Promise<void> {
    await Promise.all([this.#loop.stop(), this.#memoryWatch?.stop()]);
  }

  /** One turn (see the file comment). Never throws. */
  async syncOnce(): Promise<EvictionOutcome> {
    this.#evictedLastTurn = false;
    try {
      const out = await this.#turn();
      this.#evictedLastTurn = out.evicted !== undefined;
      return out;
    } catch (err) {
      this.#o.logger.warn({ err: errorMessage(err) }, `eviction manager turn failed: ${errorMessage(err)}`);
      return { conditions: this.#conditions };
    }
  }

  async #turn(): Promise<EvictionOutcome> {
    const o = this.#o;
    const obs = await o.observe();
    const d = decideEviction(o.thresholds, obs, this.#state, o.clock.now(), o.transitionPeriodMs);
    this.#state = d.state;
    this.#logConditions(d.conditions, obs);
    this.#conditions = d.conditions;
    const out: EvictionOutcome = { conditions: d.conditions };
    const local = await this.#localStorageEviction();
    if (local.length) return { ...out, evicted: local[0], localStorage: local };
    const threshold = d.act[0];
    if (!threshold) return out;
    out.signal = threshold.signal;
    const resource = SIGNAL_RESOURCE[threshold.signal];
    o.logger.info({ signal: threshold.signal, resource }, `eviction manager: attempting to reclaim ${resource}`);
    o.events.emit(nodeRef(o.nodeName), 'Warning', 'EvictionThresholdMet', `Attempting to reclaim ${resource}`);
    if (resource !== 'memory' && resource !== 'pids' && (await this.#reclaimNodeLevel())) {
      o.logger.info({ resource }, `eviction manager: unused images removed; ${resource} pressure relieved without evicting pods`);
      return { ...out, reclaimed: true };
    }
    const evicted = await this.#evictOne(threshold, resource, d.act, obs);
    return evicted ? { ...out, evicted } : out;
  }

  /** Removes unused images, observes again: true when no threshold is met any more (minimum reclaim included). */
  async #reclaimNodeLevel(): Promise<boolean> {
    if (!this.#o.reclaimImages) return false;
    await this.#o.reclaimImages().catch((err) => this.#o.logger.warn({ err: errorMessage(err) }, `eviction manager: removing unused images failed: ${errorMessage(err)}`));
    const after = await this.#o.observe();
    return thresholdsMet(this.#o.thresholds, after, true).length === 0;
  }

  async #evictOne(threshold: EvictionThreshold, resource: StarvedResource, act: readonly EvictionThreshold[], obs: Observations): Promise<EvictionOutcome['evicted']> {
    const o = this.#o;
    const pods = o.pods.activePods();
    if (pods.length === 0) {
      o.logger.warn({ resource }, 'eviction manager: eviction thresholds have been met, but no pods are active to evict');
      return undefined;
    }
    const stats = await o.podStats().catch((err) => {
      o.logger.warn({ err: errorMessage(err) }, `eviction manager: cannot read the pods' usage: ${errorMessage(err)}`);
      return [] as PodStats[];
    });
    const statsOf = statsByUid(stats);
    const ranked = rankForEviction(pods, resource, statsOf);
    o.logger.info({ resource, pods: ranked.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`) }, 'eviction manager: pods ranked for eviction');
    const shown = thresholdShown(resource, act, obs);
    for (const pod of ranked) {
      if (isCriticalPod(pod)) {
        o.logger.warn({ pod: `${pod.metadata?.namespace}/${pod.metadata?.name}` }, 'eviction manager: cannot evict a critical pod');
        continue;
      }
      const grace = threshold.gracePeriodMs === 0 ? IMMEDIATE_EVICTION_GRACE_SECONDS : this.#softGrace(pod);
      const message = evictionMessage(resource, pod, statsOf(pod), shown);
      const uid = pod.metadata?.uid ?? '';
      o.events.emit(podRef(pod), 'Warning', EVICTED_REASON, message);
      o.logger.info({ pod: `${pod.metadata?.namespace}/${pod.metadata?.name}`, uid, gracePeriodSeconds: grace, signal: threshold.signal }, `evicting pod: ${message}`);
      const ok = await o.pods.evict(uid, { reason: EVICTED_REASON, message, gracePeriodSeconds: grace }).catch((err) => {
        o.logger.warn({ uid, err: errorMessage(err) }, `eviction manager: pod failed to evict: ${errorMessage(err)}`);
        return true; // the kubelet counts a failed kill as this turn's eviction too
      });
      if (ok) return { uid, name: `${pod.metadata?.namespace}/${pod.metadata?.name}`, message, gracePeriodSeconds: grace };
    }
    o.logger.warn({ resource }, 'eviction manager: unable to evict any pods from the node');
    return undefined;
  }

  /** Evicts every active pod over a local storage limit (the kubelet's localStorageEviction). */
  async #localStorageEviction(): Promise<Array<NonNullable<EvictionOutcome['evicted']>>> {
    const o = this.#o;
    const evicted: Array<NonNullable<EvictionOutcome['evicted']>> = [];
    if (!o.measureLocalStorage) return evicted;
    const pods = o.pods.activePods().filter(hasLocalStorageLimit);
    if (!pods.length) return evicted;
    const statsOf = statsByUid(await o.podStats().catch(() => [] as PodStats[]));
    for (const pod of pods) {
      const name = `${pod.metadata?.namespace}/${pod.metadata?.name}`;
      const usage = await o.measureLocalStorage(pod).catch((err) => void o.logger.warn({ pod: name, err: errorMessage(err) }, `eviction manager: cannot measure the local storage of ${name}: ${errorMessage(err)}`));
      if (!usage) continue;
      if (usage.truncated) o.logger.warn({ pod: name }, `eviction manager: ${name}'s local storage has too many files to count in one turn; counted in part`);
      const message = localStorageViolation(pod, usage, statsOf(pod));
      if (!message) continue;
      if (isCriticalPod(pod)) {
        o.logger.warn({ pod: name }, 'eviction manager: cannot evict a critical pod');
        continue;
      }
      const uid = pod.metadata?.uid ?? '';
      o.events.emit(podRef(pod), 'Warning', EVICTED_REASON, message);
      o.logger.info({ pod: name, uid, gracePeriodSeconds: IMMEDIATE_EVICTION_GRACE_SECONDS }, `evicting pod: ${message}`);
      const e = { reason: EVICTED_REASON, message, gracePeriodSeconds: IMMEDIATE_EVICTION_GRACE_SECONDS, disruptionTarget: false };
      const ok = await o.pods.evict(uid, e).catch((err) => {
        o.logger.warn({ uid, err: errorMessage(err) }, `eviction manager: pod failed to evict: ${errorMessage(err)}`);
        return true;
      });
      if (ok) evicted.push({ uid, name, message, gracePeriodSeconds: IMMEDIATE_EVICTION_GRACE_SECONDS });
    }
    return evicted;
  }

  /** A soft eviction's grace: the pod's own, at most evictionMaxPodGracePeriod (negative: no bound). */
  #softGrace(pod: Pod): number {
    const own = pod.spec?.terminationGracePeriodSeconds;
    const podGrace = typeof own === 'number' && own >= 0 ? own : (this.#o.defaultGracePeriodSeconds ?? 30);
    const max = this.#o.maxPodGracePeriodSeconds;
    return max < 0 ? podGrace : Math.min(max, podGrace);
  }

  #logConditions(next: readonly PressureType[], obs: Observations): void {
    for (const c of PRESSURE_TYPES) {
      const was = this.#conditions.includes(c);
      const is = next.includes(c);
      if (was === is) continue;
      const detail = Object.fromEntries(this.#o.thresholds.filter((t) => SIGNAL_CONDITION[t.signal] === c).map((t) => [t.signal, obs[t.signal]?.available]));
      if (is) this.#o.logger.warn({ condition: c, available: detail }, `eviction manager: node has ${c}`);
      else this.#o.logger.info({ condition: c, available: detail }, `eviction manager: ${c} ended`);
    }
  }
}

/** The kubelet's getThresholdMetInfo: the first threshold acted on for the resource, with its signal's availability. */
function thresholdShown(resource: StarvedResource, act: readonly EvictionThreshold[], obs: Observations): { quantity: string; available: number } | undefined {
  for (const t of act) {
    if (SIGNAL_RESOURCE[t.signal] !== resource) continue;
    const o = obs[t.signal];
    if (!o) continue;
    const decimal = resource === 'inodes' || resource === 'pids';
    let quantity: string;
    if ('quantity' in t.value) quantity = canonicalText(t.value.text);
    else quantity = decimal ? formatDecimal(resolveAmount(t.value, o.capacity)) : formatBinary(resolveAmount(t.value, o.capacity));
    return { quantity, available: o.available };
  }
  return undefined;
}
