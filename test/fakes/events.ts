/**
 * An in-memory EventApi (src/events.ts), the port the event recorder writes core/v1 Events
 * through, on MemApiObjects (api-objects.ts) with the API's answers (409 for a taken name,
 * 404 for a patch of a missing event). Records what it created (`created`, as passed) and
 * patched (`patches`); `failCreate` makes the next N creates of a reason fail UNAVAILABLE,
 * `failPatch` makes every patch fail with it. Held to the real adapter by
 * test/integration/controlplane/ports-contract.test.ts.
 */
import type { Event as CoreEvent } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../src/errors.js';
import type { EventApi } from '../../src/events.js';
import { MemApiObjects } from './api-objects.js';

export class MemEventApi implements EventApi {
  created: CoreEvent[] = [];
  patches: { name: string; patch: { count: number; lastTimestamp: string } }[] = [];
  /** Per reason: how many more creates fail. */
  failCreate = new Map<string, number>();
  failPatch: NodeletError | undefined;
  constructor(readonly objects = new MemApiObjects()) {}
  async create(e: CoreEvent): Promise<void> {
    const n = this.failCreate.get(e.reason!) ?? 0;
    if (n > 0) {
      this.failCreate.set(e.reason!, n - 1);
      throw new NodeletError('UNAVAILABLE', 'connection refused');
    }
    this.objects.createEvent(e);
    this.created.push(e);
  }
  async patch(namespace: string, name: string, patch: { count: number; lastTimestamp: string }): Promise<void> {
    if (this.failPatch) throw this.failPatch;
    this.objects.patchEvent(namespace, name, patch);
    this.patches.push({ name, patch });
  }
}
