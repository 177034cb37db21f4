/**
 * Connected mode: mirror pods, the control plane's read-only view of this node's static
 * pods, as the kubelet keeps them. For each static pod there is a pod of the same name and
 * namespace in the API, annotated `kubernetes.io/config.mirror: <config.hash>` and owned by
 * the Node; its status is the static pod's (the status writer reads it through the mirror
 * annotation). A mirror pod of an older version of the file (another hash), one being
 * deleted, or one whose static pod is gone is deleted (UID precondition) and, when the
 * static pod still exists, created again. A name already held by a pod that is not a mirror
 * is left alone and reported. Mirror pods are never run: the pods the agent runs come from
 * the files.
 *
 * The Node's UID is read for each round of creations, as the kubelet's mirror client reads
 * it (from its Node informer) for each mirror pod it creates: a Node deleted and registered
 * again has a new UID, and the API server's NodeRestriction admission refuses a mirror pod
 * owned by another. A mirror pod already owned by an earlier Node of this name is deleted
 * and created again with the current UID (a node may not update a pod, only create and
 * delete it): in a cluster the garbage collector deletes it anyway (its owner is gone) and
 * the kubelet creates it again; nodelet does not wait for the collector. The Node's UID is
 * looked at again every `nodeCheckMs` (10 s) while mirror pods exist (the Node watch's cache:
 * no request while it is healthy).
 */
import type { Pod } from 'kubernetes-types/core/v1.js';
import { realClock, type Clock } from '../../clock.js';
import { errorMessage, NodeletError } from '../../errors.js';
import type { Logger } from '../../log.js';
import { LoopOwner } from '../../loop.js';
import { podKey } from '../sources/lookup.js';
import { ANN_CONFIG_HASH } from '../sources/static-source.js';

export const ANN_CONFIG_MIRROR = 'kubernetes.io/config.mirror';

export function isMirrorPod(pod: Pod): boolean {
  return pod.metadata?.annotations?.[ANN_CONFIG_MIRROR] !== undefined;
}

/** The UID of the static pod a mirror pod stands for (its config hash, which is nodelet's static pod UID). */
export function mirroredUid(mirror: Pod): string | undefined {
  return mirror.metadata?.annotations?.[ANN_CONFIG_MIRROR];
}

/** The mirror pod to create for a static pod, owned by the Node. */
export function mirrorPodOf(staticPod: Pod, node: { name: string; uid: string }): Pod {
  const m = staticPod.metadata!;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: m.name!,
      namespace: m.namespace ?? 'default',
      ...(m.labels ? { labels: m.labels } : {}),
      annotations: { ...m.annotations, [ANN_CONFIG_MIRROR]: m.annotations?.[ANN_CONFIG_HASH] ?? m.uid! },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: node.name, uid: node.uid, controller: true }],
    },
    spec: { ...staticPod.spec!, nodeName: node.name },
  };
}

export interface MirrorPlan {
  /** Static pods without a mirror pod. */
  create: Pod[];
  /** Mirror pods to delete: outdated, being deleted, or orphaned. */
  remove: { pod: Pod; why: string }[];
  /** Static pods whose name a regular (non-mirror) pod holds in the API. */
  blocked: { pod: Pod; holder: Pod }[];
}

/** The UID of the Node a mirror pod is owned by (its `Node` ownerReference); undefined without one. */
export function mirrorOwnerUid(mirror: Pod): string | undefined {
  return mirror.metadata?.ownerReferences?.find((r) => r.kind === 'Node' && r.apiVersion === 'v1')?.uid;
}

/**
 * Pure: what to create and delete so that each static pod has exactly its current mirror.
 * With `nodeUid` (the Node's UID now), a mirror owned by another Node UID (an earlier Node of
 * this name, deleted since) is deleted too, to be created again with this one.
 */
export function planMirrorPods(staticPods: readonly Pod[], apiPods: readonly Pod[], nodeUid?: string): MirrorPlan {
  const plan: MirrorPlan = { create: [], remove: [], blocked: [] };
  const inApi = new Map(apiPods.map((p) => [podKey(p), p]));
  const wanted = new Set<string>();
  for (const sp of staticPods) {
    const key = podKey(sp);
    wanted.add(key);
    const ap = inApi.get(key);
    if (!ap) plan.create.push(sp);
    else if (!isMirrorPod(ap)) plan.blocked.push({ pod: sp, holder: ap });
    else if (ap.metadata?.deletionTimestamp) plan.remove.push({ pod: ap, why: 'it is being deleted' });
    else if (mirroredUid(ap) !== (sp.metadata?.annotations?.[ANN_CONFIG_HASH] ?? sp.metadata?.uid)) plan.remove.push({ pod: ap, why: 'its static pod changed' });
    else {
      const owner = mirrorOwnerUid(ap);
      if (nodeUid && owner !== undefined && owner !== nodeUid) plan.remove.push({ pod: ap, why: `it is owned by an earlier Node of this name (uid ${owner}; the Node's uid is now ${nodeUid})` });
    }
  }
  for (const ap of apiPods) if (isMirrorPod(ap) && !wanted.has(podKey(ap))) plan.remove.push({ pod: ap, why: 'its static pod is gone' });
  return plan;
}

export interface MirrorPodApi {
  nodeUid(name: string): Promise<string | undefined>;
  createPod(pod: Pod): Promise<void>;
  /** DELETE with `gracePeriodSeconds: 0` and `preconditions.uid`. */
  deletePod(namespace: string, name: string, uid: string): Promise<void>;
}

export interface MirrorPodsOptions {
  api: MirrorPodApi;
  nodeName: string;
  logger: Logger;
  clock?: Clock;
  periodMs?: number;
  /** How often the Node's UID is looked at while nothing else changed and mirror pods exist (default 10 s). */
  nodeCheckMs?: number;
}

export class MirrorPods extends LoopOwner {
  readonly #o: Required<MirrorPodsOptions>;
  #static: Pod[] = [];
  #api: Pod[] | undefined;
  /** The Node's UID as last read (undefined: no Node, or not read yet), and when. */
  #nodeUid: string | undefined;
  #nodeReadAt = -Infinity;
  readonly #reported = new Map<string, string>();
  /** Something changed (the static pods, the API's pods) or the last turn left work undone: plan again. */
  #dirty = true;

  constructor(o: MirrorPodsOptions) {
    // Every second (a turn with nothing changed returns at once, no request): a change of the
    // static pods or of the API's pods reaches the API within a second, a burst of watch
    // events in one plan.
    super({ name: 'mirror-pods', clock: o.clock ?? realClock, periodMs: o.periodMs ?? 1000 });
    this.#o = { clock: realClock, periodMs: 1000, nodeCheckMs: 10_000, ...o };
  }

  setStaticPods(pods: Pod[]): void {
    this.#static = pods;
    this.#dirty = true;
  }

  /** This node's pods in the API (mirror pods among them). Until the first set, nothing is done. */
  setApiPods(pods: Pod[]): void {
    this.#api = pods;
    this.#dirty = true;
  }

  /** One turn. Never throws: failures are logged once each and retried on the next turn. */
  async syncOnce(): Promise<void> {
    if (!this.#api) return;
    const due = this.#o.clock.now() - this.#nodeReadAt >= this.#o.nodeCheckMs;
    if (!this.#dirty) {
      // Nothing changed since a turn that had nothing to do: no plan (it would be the same),
      // unless the Node was registered again meanwhile (a new UID) while mirror pods exist.
      if (!due || !this.#api.some(isMirrorPod)) return;
      const before = this.#nodeUid;
      if (!(await this.#readNodeUid()) || this.#nodeUid === before) return;
    } else if (due) await this.#readNodeUid();
    this.#dirty = false;
    const plan = planMirrorPods(this.#static, this.#api, this.#nodeUid);
    // Blocked names are reported once and wait for a change; deletions and creations wait for
    // the watch to show them done (a change), failures are retried next turn.
    if (plan.remove.length > 0 || plan.create.length > 0) this.#dirty = true;
    for (const { pod, why } of plan.remove) {
      const { namespace = 'default', name = '', uid = '' } = pod.metadata ?? {};
      await this.#try(`delete:${uid}`, pod, `cannot delete mirror pod`, async () => {
        await this.#o.api.deletePod(namespace, name, uid);
        this.#o.logger.info({ pod: podKey(pod), uid }, `mirror pod deleted: ${why}`);
      });
    }
    for (const { pod, holder } of plan.blocked) {
      this.#report(`blocked:${podKey(pod)}`, pod, `no mirror pod for static pod ${podKey(pod)}: the name is taken by a pod that is not a mirror (uid ${holder.metadata?.uid})`);
    }
    if (plan.create.length === 0) return;
    // The Node's UID now, as the kubelet's mirror client reads it for each creation. Not read
    // (no answer), or no Node (not registered yet, or again: the node status loop does it): next turn.
    if (!(await this.#readNodeUid()) || !this.#nodeUid) return;
    const node = { name: this.#o.nodeName, uid: this.#nodeUid };
    for (const sp of plan.create) {
      const mirror = mirrorPodOf(sp, node);
      await this.#try(`create:${podKey(sp)}`, sp, 'cannot create mirror pod', async () => {
        try {
          await this.#o.api.createPod(mirror);
          this.#o.logger.info({ pod: podKey(sp), uid: sp.metadata?.uid }, 'mirror pod created');
        } catch (err) {
          // Created by an earlier turn, not watched yet.
          if (err instanceof NodeletError && err.code === 'ALREADY_EXISTS') return;
          throw err;
        }
      });
    }
  }

  /**
   * Reads the Node's UID (the watch's cache, or a GET): false when the control plane did not
   * answer (the last UID is kept; the periodic look waits nodeCheckMs all the same).
   */
  async #readNodeUid(): Promise<boolean> {
    this.#nodeReadAt = this.#o.clock.now();
    try {
      this.#nodeUid = await this.#o.api.nodeUid(this.#o.nodeName);
      return true;
    } catch {
      return false;
    }
  }

  async #try(key: string, pod: Pod, what: string, fn: () => Promise<void>): Promise<void> {
    try {
      await fn();
      this.#reported.delete(key);
    } catch (err) {
      if (err instanceof NodeletError && (err.code === 'NOT_FOUND' || err.code === 'CONFLICT') && key.startsWith('delete:')) return;
      this.#report(key, pod, `${what} ${podKey(pod)}: ${errorMessage(err)}; will retry`);
    }
  }

  #report(key: string, pod: Pod, msg: string): void {
    if (this.#reported.get(key) === msg) return;
    this.#reported.set(key, msg);
    this.#o.logger.warn({ pod: podKey(pod), uid: pod.metadata?.uid }, msg);
  }
}
