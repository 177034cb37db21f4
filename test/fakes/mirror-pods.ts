/**
 * An in-memory MirrorPodApi (src/pods/status/mirror.ts), the port MirrorPods writes mirror pods
 * through, on MemApiObjects (api-objects.ts) with the API's answers. Records what it created
 * (`created`, as passed) and deleted (`deleted`, the UIDs); `createError` makes every create
 * fail with it. Held to the real adapter by test/integration/controlplane/ports-contract.test.ts.
 */
import type { Pod } from 'kubernetes-types/core/v1.js';
import type { NodeletError } from '../../src/errors.js';
import type { MirrorPodApi } from '../../src/pods/status/mirror.js';
import { MemApiObjects } from './api-objects.js';

export class MemMirrorPodApi implements MirrorPodApi {
  created: Pod[] = [];
  deleted: string[] = [];
  createError: NodeletError | undefined;
  constructor(readonly objects = new MemApiObjects()) {}
  async nodeUid(name: string): Promise<string | undefined> {
    return this.objects.nodes.get(name)?.metadata?.uid;
  }
  async createPod(pod: Pod): Promise<void> {
    if (this.createError) throw this.createError;
    // The API assigns the UID.
    const { uid: _uid, ...metadata } = pod.metadata ?? {};
    this.objects.createPod({ ...pod, metadata });
    this.created.push(pod);
  }
  async deletePod(namespace: string, name: string, uid: string): Promise<void> {
    this.objects.deletePod(namespace, name, uid);
    this.deleted.push(uid);
  }
}
