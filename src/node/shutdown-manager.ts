/**
 * Graceful node shutdown (the kubelet's node shutdown manager, Linux).
 *
 * With `shutdownGracePeriod` (or `shutdownGracePeriodByPodPriority`) set, nodelet:
 * 1. at start, reads back `<root-dir>/graceful_node_shutdown_state` and logs the last shutdown;
 * 2. connects to systemd-logind; when its `InhibitDelayMaxSec` is below the period asked for,
 *    writes `/etc/systemd/logind.conf.d/99-kubelet.conf` and has logind reload, then checks;
 * 3. takes a `shutdown` delay inhibitor and watches `PrepareForShutdown`;
 * 4. on PrepareForShutdown(true): the node goes not ready (Ready False, `node is shutting down`,
 *    reported at once: onShutdownStart), the state file gets the start time,
 *    the pods stop group by group (shutdown-plan.ts: lowest priority first, each group within
 *    its period, each pod within min(group, own grace)) and end Failed with reason `Terminated`;
 *    new pods are refused (`NodeShutdown`); then the end time is written and the inhibitor
 *    released, so logind goes on. PrepareForShutdown(false) (cancelled) takes the lock again.
 *
 * No D-Bus or no logind (a container, CI without systemd): logged, and nodelet runs without
 * the feature (retried in the background, quietly). Nothing here ever stops startup.
 *
 * The manager sits between the pod sources and the pod manager (setDesired): a pod it stops
 * is handed to the pod manager as over (phase Failed), which stops it with the pod's
 * `terminationGracePeriodSeconds` (set to the shutdown's) and never starts it again.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Pod, PodCondition, PodStatus } from 'kubernetes-types/core/v1.js';
import { realClock, type Clock } from '../clock.js';
import { isFeatureEnabled } from '../config/feature-gates.js';
import { errorMessage } from '../errors.js';
import { nodeRef, noEvents, type EventSink } from '../events.js';
import type { Logger } from '../log.js';
import type { NodeShutdownMetrics } from '../metrics/kubelet.js';
import type { RuntimeState } from '../runtime/health.js';
import { Loop } from '../loop.js';
import { writeFileAtomic } from '../system/root-dir.js';
import type { Inhibitor, Logind } from './shutdown-logind.js';
import {
  decodeShutdownState,
  encodeShutdownState,
  groupByPriority,
  NODE_SHUTDOWN_MESSAGE,
  NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE,
  NODE_SHUTDOWN_NOT_ADMITTED_REASON,
  NODE_SHUTDOWN_REASON,
  NODE_SHUTTING_DOWN_ERROR,
  periodRequestedSeconds,
  podGraceSeconds,
  SHUTDOWN_STATE_FILE,
  shutdownGroups,
  type ShutdownGroup,
  type ShutdownSettings,
  type ShutdownState,
} from './shutdown-plan.js';
import type { ReadinessState } from './status.js';

export interface NodeShutdownOptions {
  /** The priority groups (shutdownGroups()); empty: the feature is off and this only passes pods through. */
  groups: ShutdownGroup[];
  rootDir: string;
  /** Connects to logind (connectLogind; a fake in tests). */
  connect: () => Promise<Logind>;
  /** The pod manager's setDesired. */
  setDesired: (pods: Pod[]) => void;
  /** The pod manager's last status of a pod. */
  podStatus: (uid: string) => PodStatus | undefined;
  logger: Logger;
  clock?: Clock;
  events?: EventSink;
  nodeName?: string;
  /** How often stopped pods are looked for while a group stops (default 200 ms). */
  pollMs?: number;
  /** Reconnection backoff after logind could not be reached or was lost: first, max (default 1 s, 60 s). */
  retryMs?: [number, number];
  /**
   * The kubelet's `kubelet_graceful_shutdown_{start,end}_time_seconds` (gates GracefulNodeShutdown
   * and GracefulNodeShutdownBasedOnPodPriority, as the kubelet registers them): set from the
   * state file read back at start, and when a shutdown starts and ends.
   */
  metrics?: NodeShutdownMetrics;
}

type Override = { kind: 'terminated'; graceSeconds: number } | { kind: 'refused' };

export class NodeShutdownManager {
  readonly #o: Required<Omit<NodeShutdownOptions, 'nodeName' | 'metrics'>> & Pick<NodeShutdownOptions, 'nodeName' | 'metrics'>;
  readonly #onStart: (() => void)[] = [];
  #desired: Pod[] = [];
  readonly #overrides = new Map<string, Override>();
  /** UIDs the node ran when the shutdown started: any other one is refused while it lasts. */
  #admitted: Set<string> | undefined;
  #shuttingDown = false;
  #processing: Promise<void> | undefined;
  #logind: Logind | undefined;
  #inhibitor: Inhibitor | undefined;
  #life = new AbortController();
  /** Connects to logind; after a lost connection or a failure, again after the backoff (retryMs). */
  readonly #connector: Loop;
  #failures = 0;

  constructor(o: NodeShutdownOptions) {
    this.#o = { clock: realClock, events: noEvents, pollMs: 200, retryMs: [1000, 60_000], ...o };
    const [first, max] = this.#o.retryMs;
    this.#connector = new Loop({
      name: 'logind',
      clock: this.#o.clock,
      logger: this.#log,
      turn: (signal) => this.#connectTurn(signal),
      delayMs: () => (this.#failures === 0 ? first : Math.min(max, first * 2 ** (this.#failures - 1))),
    });
  }

  get enabled(): boolean {
    return this.#o.groups.length > 0;
  }

  /** The node is shutting down (PrepareForShutdown(true) seen, not cancelled). */
  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  get #log(): Logger {
    return this.#o.logger;
  }

  get stateFile(): string {
    return path.join(this.#o.rootDir, SHUTDOWN_STATE_FILE);
  }

  /** The pod sources' full set: passed on, with the pods this manager stopped or refused marked as over. */
  setDesired(pods: Pod[]): void {
    this.#desired = pods;
    if (this.#admitted) {
      for (const p of pods) {
        const uid = p.metadata?.uid;
        if (uid && !this.#admitted.has(uid) && !this.#overrides.has(uid)) {
          this.#overrides.set(uid, { kind: 'refused' });
          this.#log.info({ pod: `${p.metadata?.namespace ?? 'default'}/${p.metadata?.name}`, uid }, `pod refused: ${NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE}`);
        }
      }
    }
    this.#o.setDesired(this.#overrides.size ? pods.map((p) => this.#apply(p)) : pods);
  }

  #apply(pod: Pod): Pod {
    const o = this.#overrides.get(pod.metadata?.uid ?? '');
    if (!o) return pod;
    const [reason, message] = o.kind === 'terminated' ? [NODE_SHUTDOWN_REASON, NODE_SHUTDOWN_MESSAGE] : [NODE_SHUTDOWN_NOT_ADMITTED_REASON, NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE];
    return {
      ...pod,
      spec: { ...pod.spec!, ...(o.kind === 'terminated' ? { terminationGracePeriodSeconds: o.graceSeconds } : {}) },
      status: { ...pod.status, phase: pod.status?.phase === 'Succeeded' ? 'Succeeded' : 'Failed', reason, message },
    };
  }

  /**
   * The status to report for a pod (connected mode's status writer): the pod manager's, with
   * the kubelet's phase, reason, message and DisruptionTarget condition for a pod this manager
   * stopped or refused.
   */
  statusOf(uid: string, status: PodStatus | undefined): PodStatus | undefined {
    const o = this.#overrides.get(uid);
    if (!o) return status;
    const now = new Date(this.#o.clock.now()).toISOString();
    if (o.kind === 'refused') return { ...status, phase: 'Failed', reason: NODE_SHUTDOWN_NOT_ADMITTED_REASON, message: NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE };
    const prev = status?.conditions?.find((c) => c.type === 'DisruptionTarget');
    const disruption: PodCondition = { type: 'DisruptionTarget', status: 'True', reason: 'TerminationByKubelet', message: NODE_SHUTDOWN_MESSAGE, lastTransitionTime: prev?.status === 'True' ? prev.lastTransitionTime! : now };
    return {
      ...status,
      phase: status?.phase === 'Succeeded' ? 'Succeeded' : 'Failed',
      reason: NODE_SHUTDOWN_REASON,
      message: NODE_SHUTDOWN_MESSAGE,
      conditions: [...(status?.conditions ?? []).filter((c) => c.type !== 'DisruptionTarget'), disruption],
    };
  }

  /**
   * What the Node's Ready condition is computed from: the runtime's state, with this manager's
   * error while the node shuts down (the kubelet's `ShutdownStatus()`), so Ready is False with
   * the message `node is shutting down` (src/node/status.ts), the runtime's own state untouched.
   */
  runtimeState(rt: RuntimeState): ReadinessState {
    return this.#shuttingDown ? { ...rt, nodeShutdownError: NODE_SHUTTING_DOWN_ERROR } : rt;
  }

  /**
   * `listener` is called when a shutdown starts, right after the node went not ready: the node
   * status reporter's reportNow, so the Ready=False goes out at once (the kubelet's
   * `go syncNodeStatus()`), not at the next nodeStatusUpdateFrequency.
   */
  onShutdownStart(listener: () => void): void {
    this.#onStart.push(listener);
  }

  /** Reads the last shutdown's state back (logged), then connects to logind in the background. Never throws. */
  async start(signal?: AbortSignal): Promise<void> {
    signal?.addEventListener('abort', () => this.#life.abort(), { once: true });
    await this.#readState();
    if (!this.enabled) {
      this.#log.info('graceful node shutdown is off (shutdownGracePeriod and shutdownGracePeriodByPodPriority unset): a node shutdown stops no pod first');
      return;
    }
    this.#log.info({ groups: this.#o.groups, periodRequestedSeconds: periodRequestedSeconds(this.#o.groups) }, 'graceful node shutdown: taking a logind delay inhibitor');
    this.#connector.start(this.#life.signal);
  }

  async #readState(): Promise<void> {
    let text: string;
    try {
      text = await fs.readFile(this.stateFile, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.#log.warn({ file: this.stateFile, err: errorMessage(err) }, `cannot read the graceful node shutdown state: ${errorMessage(err)}`);
      return;
    }
    try {
      const s = decodeShutdownState(text);
      // As the kubelet at start: the gauges show the last shutdown (only when the feature is on).
      if (this.enabled) {
        if (s.startTime) this.#o.metrics?.setShutdownStartTime(s.startTime.getTime());
        if (s.endTime) this.#o.metrics?.setShutdownEndTime(s.endTime.getTime());
      }
      this.#log.info(
        { file: this.stateFile, startTime: s.startTime?.toISOString(), endTime: s.endTime?.toISOString() },
        s.startTime
          ? `last graceful node shutdown: started ${s.startTime.toISOString()}, ${s.endTime ? `ended ${s.endTime.toISOString()} (${((s.endTime.getTime() - s.startTime.getTime()) / 1000).toFixed(1)} s)` : 'did not end (the node went down first)'}`
          : 'no graceful node shutdown recorded',
      );
    } catch (err) {
      this.#log.warn({ file: this.stateFile, err: errorMessage(err) }, `the graceful node shutdown state is not valid: ${errorMessage(err)}`);
    }
  }

  async #writeState(s: ShutdownState): Promise<void> {
    try {
      await writeFileAtomic(this.stateFile, encodeShutdownState(s), 0o644);
    } catch (err) {
      this.#log.error({ file: this.stateFile, err: errorMessage(err) }, `cannot store the graceful node shutdown state: ${errorMessage(err)}`);
    }
  }

  /** One connection: made, then held until it is lost (or the manager stops). Never throws. */
  async #connectTurn(signal: AbortSignal): Promise<void> {
    let lost!: (why: string) => void;
    const lostP = new Promise<string>((r) => (lost = r));
    try {
      await this.#connectOnce(lost);
      if (this.#failures > 0) this.#log.info('systemd-logind reachable again: graceful node shutdown is on');
      this.#failures = 0;
      const why = await Promise.race([lostP, new Promise<string>((r) => (signal.aborted ? r('') : signal.addEventListener('abort', () => r(''), { once: true })))]);
      if (signal.aborted) return;
      this.#log.warn({ err: why }, `lost the connection to systemd-logind (${why}); reconnecting`);
      this.#closeBus();
    } catch (err) {
      this.#closeBus();
      if (signal.aborted) return;
      const msg = errorMessage(err);
      if (this.#failures === 0) this.#log.warn({ err: msg }, `graceful node shutdown is unavailable: ${msg}; nodelet runs without it (a node shutdown will not stop pods first) and tries again in the background`);
      else this.#log.debug({ err: msg, failures: this.#failures }, 'systemd-logind still unreachable');
      this.#failures++;
    }
  }

  async #connectOnce(onLost: (why: string) => void): Promise<void> {
    const logind = await this.#o.connect();
    this.#logind = logind;
    const requested = periodRequestedSeconds(this.#o.groups);
    const current = await logind.inhibitDelayMaxSeconds();
    if (requested > current) {
      // The kubelet's override: a logind.conf.d drop-in, then logind rereads its configuration.
      await logind.overrideInhibitDelay(requested);
      await logind.reloadConfig();
      // logind rereads on SIGHUP asynchronously: look again for up to 2 s.
      let updated = await logind.inhibitDelayMaxSeconds();
      for (let i = 0; i < 20 && updated < requested; i++) {
        await this.#o.clock.sleep(100, this.#life.signal);
        updated = await logind.inhibitDelayMaxSeconds();
      }
      if (updated < requested) throw new Error(`unable to raise logind's InhibitDelayMaxSec to ${requested} s (the shutdown grace period): it is ${updated} s`);
      this.#log.info({ from: current, to: updated }, `raised logind's InhibitDelayMaxSec from ${current} s to ${updated} s (/etc/systemd/logind.conf.d/99-kubelet.conf)`);
    }
    await this.#acquire();
    await logind.watchShutdown((active) => this.#onEvent(active), onLost);
    this.#log.info({ inhibitDelayMaxSeconds: Math.max(current, requested) }, 'watching for node shutdown (logind PrepareForShutdown) with a delay inhibitor held');
  }

  async #acquire(): Promise<void> {
    const next = await this.#logind!.inhibitShutdown();
    const prev = this.#inhibitor;
    this.#inhibitor = next;
    if (prev) await prev.release();
  }

  #onEvent(shuttingDown: boolean): void {
    this.#log.info({ shuttingDown }, shuttingDown ? 'node shutdown detected (logind PrepareForShutdown)' : 'node shutdown cancelled');
    if (this.#o.nodeName) this.#o.events.emit(nodeRef(this.#o.nodeName), 'Normal', 'NodeShutdown', shuttingDown ? 'Shutdown manager detected shutdown event' : 'Shutdown manager detected shutdown cancellation');
    if (shuttingDown) {
      if (this.#processing) return;
      this.#processing = this.processShutdown().finally(() => (this.#processing = undefined));
    } else {
      this.#shuttingDown = false;
      this.#admitted = undefined;
      void this.#acquire().catch((err) => this.#log.error({ err: errorMessage(err) }, `cannot take the shutdown inhibitor again: ${errorMessage(err)}`));
    }
  }

  /**
   * The shutdown: not ready, state file, the groups in order, state file, inhibitor released.
   * Called on PrepareForShutdown(true); tests call it directly. Never throws.
   */
  async processShutdown(): Promise<void> {
    const clock = this.#o.clock;
    this.#shuttingDown = true;
    for (const listener of this.#onStart) {
      try {
        listener();
      } catch (err) {
        this.#log.warn({ err: errorMessage(err) }, `a node shutdown listener failed: ${errorMessage(err)}`);
      }
    }
    const start = new Date(clock.now());
    // As the kubelet: the start time, and no end time until this one ends.
    this.#o.metrics?.setShutdownStartTime(start.getTime());
    this.#o.metrics?.setShutdownEndTime(0);
    // The active pods: not over in the API, nor by what the pod manager saw.
    const over = (phase: string | undefined) => phase === 'Succeeded' || phase === 'Failed';
    const active = this.#desired.filter((p) => !over(p.status?.phase) && !over(this.statusOf(p.metadata?.uid ?? '', this.#o.podStatus(p.metadata?.uid ?? ''))?.phase));
    this.#admitted = new Set(this.#desired.map((p) => p.metadata?.uid ?? ''));
    try {
      await this.#writeState({ startTime: start });
      const groups = groupByPriority(this.#o.groups, active);
      this.#log.info({ groups: groups.map((g) => ({ priority: g.priority, gracePeriodSeconds: g.shutdownGracePeriodSeconds, pods: g.pods.map(key) })) }, `node is shutting down: stopping ${active.length} pods by priority`);
      for (const group of groups) {
        if (group.pods.length === 0) continue;
        const t0 = clock.now();
        for (const pod of group.pods) {
          const grace = podGraceSeconds(pod, group);
          this.#overrides.set(pod.metadata!.uid!, { kind: 'terminated', graceSeconds: grace });
          this.#log.info({ pod: key(pod), uid: pod.metadata?.uid, priority: group.priority, gracePeriodSeconds: grace }, `shutdown: stopping pod ${key(pod)} with grace period ${grace} s`);
        }
        this.setDesired(this.#desired);
        const done = await this.#waitStopped(group.pods, t0 + group.shutdownGracePeriodSeconds * 1000);
        const ms = clock.now() - t0;
        if (done) this.#log.info({ priority: group.priority, pods: group.pods.map(key), ms }, `shutdown: pods of priority ${group.priority} stopped in ${ms} ms`);
        else this.#log.warn({ priority: group.priority, gracePeriodSeconds: group.shutdownGracePeriodSeconds }, `shutdown: pods of priority ${group.priority} not all stopped within ${group.shutdownGracePeriodSeconds} s; going on`);
      }
    } catch (err) {
      this.#log.error({ err: errorMessage(err) }, `graceful node shutdown failed: ${errorMessage(err)}`);
    } finally {
      const end = new Date(clock.now());
      await this.#writeState({ startTime: start, endTime: end });
      this.#o.metrics?.setShutdownEndTime(end.getTime());
      this.#log.info({ startTime: start.toISOString(), endTime: end.toISOString(), ms: end.getTime() - start.getTime() }, 'graceful node shutdown done: releasing the inhibitor, the node will shut down shortly');
      await this.#inhibitor?.release().catch(() => undefined);
      this.#inhibitor = undefined;
    }
  }

  /** True once none of the pods has a running container; false at the deadline. */
  async #waitStopped(pods: Pod[], deadline: number): Promise<boolean> {
    const clock = this.#o.clock;
    for (;;) {
      const running = pods.filter((p) => this.#o.podStatus(p.metadata!.uid!)?.containerStatuses?.some((c) => c.state?.running));
      if (running.length === 0) return true;
      const left = deadline - clock.now();
      if (left <= 0) return false;
      await clock.sleep(Math.min(this.#o.pollMs, left));
    }
  }

  #closeBus(): void {
    try {
      this.#logind?.close();
    } catch {
      /* closing anyway */
    }
    this.#logind = undefined;
  }

  /** Stops watching, releases the inhibitor, waits for a shutdown in progress (bounded by the caller). */
  async stop(): Promise<void> {
    this.#life.abort();
    await this.#connector.stop();
    await this.#processing;
    this.#closeBus();
    await this.#inhibitor?.release().catch(() => undefined);
    this.#inhibitor = undefined;
  }
}

function key(pod: Pod): string {
  return `${pod.metadata?.namespace ?? 'default'}/${pod.metadata?.name}`;
}

/**
 * The manager the configuration asks for (composition root: src/daemon.ts). Off (a pass-through)
 * without a period or with gate GracefulNodeShutdown off; logind is connected lazily.
 */
export function nodeShutdownFor(
  cfg: ShutdownSettings & { readonly featureGates?: Readonly<Record<string, boolean>> },
  o: Omit<NodeShutdownOptions, 'groups' | 'connect' | 'metrics'> & { connect?: NodeShutdownOptions['connect']; metrics?: { gracefulShutdown(): NodeShutdownMetrics } },
): NodeShutdownManager {
  const { metrics: registry, ...rest } = o;
  const on = isFeatureEnabled(cfg, 'GracefulNodeShutdown');
  const byPriority = isFeatureEnabled(cfg, 'GracefulNodeShutdownBasedOnPodPriority');
  const groups = on ? shutdownGroups(cfg, { byPodPriority: byPriority }) : [];
  // The kubelet registers its two gauges with both gates on (shown as 0 until a shutdown is known).
  const metrics = on && byPriority ? registry?.gracefulShutdown() : undefined;
  const logger = o.logger;
  return new NodeShutdownManager({ ...rest, groups, ...(metrics ? { metrics } : {}), connect: o.connect ?? (async () => (await import('./shutdown-logind.js')).connectLogind({ logger })) });
}
