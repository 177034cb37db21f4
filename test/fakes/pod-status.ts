/**
 * An in-memory PodStatusApi (src/pods/status/status-writer.ts), the port the pod status writer
 * patches statuses and ends graceful deletions through, on MemApiObjects (api-objects.ts)
 * with the API's answers (404 for a missing pod, 409 for another pod under the name).
 * Records every write that succeeded (`patches`, `deletes`); `fail` makes every call fail
 * with it. Held to the real adapter by test/integration/controlplane/ports-contract.test.ts.
 */
import type { NodeletError } from '../../src/errors.js';
import type { PodStatusApi } from '../../src/pods/status/status-writer.js';
import { MemApiObjects } from './api-objects.js';

export class MemPodStatusApi implements PodStatusApi {
  patches: { name: string; uid: string; status: Record<string, unknown> }[] = [];
  deletes: { name: string; uid: string }[] = [];
  fail: NodeletError | undefined;
  constructor(readonly objects = new MemApiObjects()) {}
  async patchPodStatus(namespace: string, name: string, uid: string, status: Record<string, unknown>): Promise<void> {
    if (this.fail) throw this.fail;
    this.objects.patchPodStatus(namespace, name, uid, status);
    this.patches.push({ name, uid, status });
  }
  async deletePod(namespace: string, name: string, uid: string): Promise<void> {
    if (this.fail) throw this.fail;
    this.objects.deletePod(namespace, name, uid);
    this.deletes.push({ name, uid });
  }
}
