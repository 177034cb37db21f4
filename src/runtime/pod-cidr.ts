/**
 * The node's pod CIDR, given to the runtime with CRI UpdateRuntimeConfig as the kubelet's
 * updatePodCIDR does: sent when it differs from what the runtime last accepted, so calling
 * `update` on every node status turn costs nothing once it went through. A failure (runtime
 * down) is logged once per distinct error and retried at the next `update` or `retry`.
 * Standalone the CIDR is the config's `podCIDR`; connected, the Node's spec.podCIDRs.
 */
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import type { RuntimeService } from './types.js';

export class PodCidrUpdater {
  readonly #runtime: Pick<RuntimeService, 'updateRuntimeConfig'>;
  readonly #log: Logger;
  /** What the runtime accepted last ('' before anything). */
  #sent = '';
  #wanted = '';
  #lastError = '';
  #inFlight: Promise<void> | undefined;

  constructor(o: { runtime: Pick<RuntimeService, 'updateRuntimeConfig'>; logger: Logger }) {
    this.#runtime = o.runtime;
    this.#log = o.logger;
  }

  /** The CIDR the runtime has accepted ('' when none yet). */
  get sent(): string {
    return this.#sent;
  }

  /** Wants `cidr` (comma-separated for dual stack; '' = none) in the runtime; resolves once tried. Never throws. */
  update(cidr: string): Promise<void> {
    this.#wanted = cidr;
    return this.retry();
  }

  /** Sends the wanted CIDR again if the runtime has not accepted it (for example once the runtime is back). */
  retry(): Promise<void> {
    if (this.#inFlight) return this.#inFlight.then(() => (this.#wanted !== this.#sent ? this.retry() : undefined));
    const cidr = this.#wanted;
    if (cidr === '' || cidr === this.#sent) return Promise.resolve();
    this.#inFlight = this.#runtime
      .updateRuntimeConfig(cidr)
      .then(() => {
        this.#sent = cidr;
        this.#lastError = '';
        this.#log.info({ podCIDR: cidr }, `pod CIDR ${cidr} given to the runtime`);
      })
      .catch((err: unknown) => {
        const msg = errorMessage(err);
        if (msg !== this.#lastError) this.#log.warn({ podCIDR: cidr, err: msg }, `cannot give the pod CIDR ${cidr} to the runtime: ${msg}`);
        this.#lastError = msg;
      })
      .finally(() => {
        this.#inFlight = undefined;
      });
    return this.#inFlight;
  }
}
