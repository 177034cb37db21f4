/**
 * Registration and node status, as the kubelet does them: create the Node (an existing one
 * is taken over: its status is ours to report), then every nodeStatusUpdateFrequency
 * (10 s, with jitter) compute the status and patch `nodes/<name>/status` only when it
 * changed (heartbeat times aside) or nodeStatusReportFrequency (5 min) has passed. Right
 * after start, until the node is first reported Ready, it checks every 100 ms (for at most
 * 2 min) so a fresh node turns Ready quickly.
 *
 * Contract: `syncOnce()` is one turn (tests call it); `start`/`stop` run the loop. A
 * control-plane fault never throws out of the loop: it is logged and retried next turn.
 */
import type { Node, NodeStatus } from 'kubernetes-types/core/v1.js';
import { backoffDelay, type Clock } from '../clock.js';
import { Loop } from '../loop.js';
import { NodeletError, errorMessage } from '../errors.js';
import { nodeRef, type EventSink } from '../events.js';
import type { Logger } from '../log.js';
import { nodeStatus, registrationNode, statusChanged, type NodeFacts } from './status.js';

/** What the reporter needs of the control plane. */
export interface NodeApi {
  getNode(name: string): Promise<Node | undefined>;
  /** ALREADY_EXISTS when the node is there. */
  createNode(node: Node): Promise<Node>;
  /** Merge patch of the status subresource. */
  patchNodeStatus(name: string, status: NodeStatus): Promise<Node>;
}

export interface NodeReporterOptions {
  api: NodeApi;
  /** Fresh facts for each turn (runtime state, capacity). */
  facts: () => NodeFacts;
  clock: Clock;
  logger: Logger;
  updateFrequencyMs: number;
  reportFrequencyMs: number;
  rand?: () => number;
  /** Ready transitions go here as NodeReady / NodeNotReady events. */
  events?: EventSink;
}

const FAST_MS = 100;
const FAST_FOR_MS = 120_000;

export class NodeReporter {
  readonly #o: NodeReporterOptions;
  #registered = false;
  #last: NodeStatus | undefined;
  #lastReport = 0;
  #startedAt = 0;
  #everReady = false;
  readonly #loop: Loop;

  constructor(o: NodeReporterOptions) {
    this.#o = o;
    this.#loop = new Loop({ name: 'node-status', turn: () => this.syncOnce(), delayMs: () => this.nextDelayMs(), clock: o.clock });
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
      await api.createNode(registrationNode(facts, now));
      this.#o.logger.info({ node: facts.nodeName }, `registered node ${facts.nodeName}`);
    } catch (err) {
      if (!(err instanceof NodeletError && (err.code === 'ALREADY_EXISTS' || err.code === 'CONFLICT'))) throw err;
      const existing = await api.getNode(facts.nodeName);
      if (!existing) throw err;
      this.#last = existing.status;
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
      const facts = this.#o.facts();
      if (!this.#registered) await this.#register(facts, stamp);
      const next = nodeStatus(facts, this.#last, stamp);
      const due = now - this.#lastReport >= this.#o.reportFrequencyMs;
      if (!statusChanged(this.#last, next) && !due) return;
      const node = await this.#o.api.patchNodeStatus(facts.nodeName, next);
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
    } catch (err) {
      this.#o.logger.warn({ err: errorMessage(err) }, `cannot update node status: ${errorMessage(err)}`);
    }
  }

  nextDelayMs(): number {
    const now = this.#o.clock.now();
    if (!this.#everReady && now - this.#startedAt < FAST_FOR_MS) return FAST_MS;
    return backoffDelay(0, this.#o.updateFrequencyMs, Number.MAX_SAFE_INTEGER, 0.04, this.#o.rand);
  }

  start(signal?: AbortSignal): void {
    this.#startedAt = this.#o.clock.now();
    this.#loop.start(signal);
  }

  stop(): Promise<void> {
    return this.#loop.stop();
  }

}
