/**
 * Registration and node status, as the kubelet does them: create the Node (an existing one
 * is taken over: its status is ours to report), then every nodeStatusUpdateFrequency
 * (10 s, with jitter) compute the status and patch `nodes/<name>/status` only when it
 * changed (heartbeat times aside) or nodeStatusReportFrequency (5 min) has passed. Right
 * after start, until the node is first reported Ready, it checks every 100 ms (for at most
 * 2 min) so a fresh node turns Ready quickly.
 *
 * Contract: `syncOnce()` is one turn (tests call it); `start`/`stop` run the loop;
 * `reportNow()` has the running loop turn at once instead of at the end of its sleep (the
 * node shutdown manager: the not-ready status goes out when the shutdown starts, as the
 * kubelet's syncNodeStatus). A control-plane fault never throws out of the loop: it is
 * logged and retried next turn.
 */
import type { Node, NodeStatus } from 'kubernetes-types/core/v1.js';
import { backoffDelay, type Clock } from '../clock.js';
import { LoopOwner } from '../loop.js';
import { NodeletError, errorMessage } from '../errors.js';
import { nodeRef, type EventSink } from '../events.js';
import type { Logger } from '../log.js';
import { nodeStatus, registrationNode, statusChanges, type NodeFacts } from './status.js';

/** What the reporter needs of the control plane. */
export interface NodeApi {
  getNode(name: string): Promise<Node | undefined>;
  /** ALREADY_EXISTS when the node is there. */
  createNode(node: Node): Promise<Node>;
  /** Merge patch of the status subresource. */
  patchNodeStatus(name: string, status: NodeStatus): Promise<Node>;
  /**
   * The Node as a watch of this one Node last saw it (an informer's cache: `fieldSelector=
   * metadata.name=<node>`, resumed on its resourceVersion, listed again on 410): `undefined`
   * while that watch has not listed yet or is failing (the reporter then GETs), `{ node:
   * undefined }` when the watch says there is no such Node (deleted: registered again).
   * Without it, the reporter GETs its Node every turn.
   */
  watchedNode?(name: string): { node: Node | undefined } | undefined;
  /** Ends that watch (when the reporter stops). */
  stopWatch?(): Promise<void>;
}

export interface NodeReporterOptions {
  api: NodeApi;
  /** Fresh facts for each turn (runtime state, capacity, measured pressure); must not reject. */
  facts: () => NodeFacts | Promise<NodeFacts>;
  clock: Clock;
  logger: Logger;
  updateFrequencyMs: number;
  reportFrequencyMs: number;
  rand?: () => number;
  /** Ready transitions go here as NodeReady / NodeNotReady events. */
  events?: EventSink;
  /**
   * The Node's spec.podCIDRs (comma-joined; spec.podCIDR when only that is set), from every
   * Node the control plane answers with (create, get, status patch), as the kubelet reads
   * its Node's pod CIDR on each status turn.
   */
  onPodCIDR?: (cidr: string) => void;
}

/** The Node's pod CIDRs as the kubelet passes them on: podCIDRs joined by commas, else podCIDR. */
export function nodePodCIDR(node: Node | undefined): string {
  const list = node?.spec?.podCIDRs?.filter((c) => typeof c === 'string' && c !== '') ?? [];
  return list.length ? list.join(',') : typeof node?.spec?.podCIDR === 'string' ? node.spec.podCIDR : '';
}

const FAST_MS = 100;
const FAST_FOR_MS = 120_000;

export class NodeReporter extends LoopOwner {
  readonly #o: NodeReporterOptions;
  #registered = false;
  #last: NodeStatus | undefined;
  #lastReport = 0;
  #startedAt = 0;
  #everReady = false;
  #failures = 0;

  constructor(o: NodeReporterOptions) {
    super({ name: 'node-status', clock: o.clock, logger: o.logger });
    this.#o = o;
  }

  get registered(): boolean {
    return this.#registered;
  }

  /** The status last accepted by the control plane. */
  get lastReported(): NodeStatus | undefined {
    return this.#last;
  }

  async #register(facts: NodeFacts, now: string): Promise<void> {
    const { api } = this.#o;
    try {
      this.#notePodCIDR(await api.createNode(registrationNode(facts, now)));
      this.#o.logger.info({ node: facts.nodeName }, `registered node ${facts.nodeName}`);
    } catch (err) {
      if (!(err instanceof NodeletError && (err.code === 'ALREADY_EXISTS' || err.code === 'CONFLICT'))) throw err;
      const existing = await api.getNode(facts.nodeName);
      if (!existing) throw err;
      this.#last = existing.status;
      this.#notePodCIDR(existing);
      this.#o.logger.info({ node: facts.nodeName }, `node ${facts.nodeName} already registered; reporting its status`);
    }
    this.#registered = true;
  }

  /** One turn: register if needed, then patch the status when it changed or is due. Never throws. */
  async syncOnce(): Promise<void> {
    const { clock } = this.#o;
    const now = clock.now();
    const stamp = new Date(now).toISOString().replace(/\.\d{3}Z$/, 'Z');
    try {
      const facts = await this.#o.facts();
      if (this.#registered) {
        // As the kubelet: the Node as the control plane has it now is what the new status is
        // compared with, so a change made by someone else (the node lifecycle controller's
        // Unknown after an outage) is corrected at once, not at the next report interval.
        // The Node comes from the watch of it when there is one (no request), else a GET.
        const watched = this.#o.api.watchedNode?.(facts.nodeName);
        const current = watched ? watched.node : await this.#o.api.getNode(facts.nodeName);
        if (current) {
          this.#notePodCIDR(current);
          this.#last = current.status;
        } else {
          // Deleted (by an administrator, or a node controller cleaning up): register again,
          // as a fresh Node, now.
          this.#o.logger.warn({ node: facts.nodeName }, `node ${facts.nodeName} is gone from the control plane; registering it again`);
          this.#registered = false;
          this.#last = undefined;
        }
      }
      if (!this.#registered) await this.#register(facts, stamp);
      const next = nodeStatus(facts, this.#last, stamp);
      const due = now - this.#lastReport >= this.#o.reportFrequencyMs;
      const changes = statusChanges(this.#last, next);
      if (changes.length === 0 && !due) return this.#answered();
      this.#o.logger.debug({ changes, due }, changes.length ? `node status changed (${changes.join(', ')}): reporting it` : 'node status report due');
      const node = await this.#o.api.patchNodeStatus(facts.nodeName, next);
      this.#notePodCIDR(node);
      const before = this.#last?.conditions?.find((c) => c.type === 'Ready')?.status;
      this.#last = node.status ?? next;
      this.#lastReport = now;
      const ready = next.conditions?.find((c) => c.type === 'Ready');
      if (ready && ready.status !== before) {
        const what = ready.status === 'True' ? 'NodeReady' : 'NodeNotReady';
        this.#o.events?.emit(nodeRef(facts.nodeName), 'Normal', what, `Node ${facts.nodeName} status is now: ${what}`);
      }
      if (ready?.status === 'True' && !this.#everReady) this.#o.logger.info({ node: facts.nodeName }, `node ${facts.nodeName} is Ready`);
      if (ready?.status === 'True') this.#everReady = true;
      this.#answered();
    } catch (err) {
      // An unreachable control plane: said once, then every tenth turn.
      if (++this.#failures === 1 || this.#failures % 10 === 0) this.#o.logger.warn({ err: errorMessage(err), failures: this.#failures }, `cannot update node status: ${errorMessage(err)}`);
    }
  }

  /** The control plane answered the turn: the failure streak, if any, is over. */
  #answered(): void {
    if (this.#failures > 0) this.#o.logger.info({ after: this.#failures }, 'node status updated again');
    this.#failures = 0;
  }

  #notePodCIDR(node: Node | undefined): void {
    const cidr = nodePodCIDR(node);
    if (cidr !== '') this.#o.onPodCIDR?.(cidr);
  }

  /**
   * The next turn now (right after the one in flight, if any) rather than after the period:
   * for a change that must reach the control plane at once (a node shutdown starting).
   * Before start, the first turn runs at once anyway.
   */
  reportNow(): void {
    this.wake();
  }

  override nextDelayMs(): number {
    const now = this.#o.clock.now();
    if (!this.#everReady && now - this.#startedAt < FAST_FOR_MS) return FAST_MS;
    return backoffDelay(0, this.#o.updateFrequencyMs, Number.MAX_SAFE_INTEGER, 0.04, this.#o.rand);
  }

  override start(signal?: AbortSignal): void {
    this.#startedAt = this.#o.clock.now();
    super.start(signal);
  }

  override async stop(): Promise<void> {
    await super.stop();
    await this.#o.api.stopWatch?.();
  }
}
