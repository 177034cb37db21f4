/**
 * The in-memory API objects behind the control-plane port fakes (mirror-pods.ts,
 * pod-status.ts, events.ts): pods, nodes and events by namespace/name, with UIDs, and the
 * API's answers the ports rely on: 409 AlreadyExists on a create of a taken name, 404 on a
 * missing object, 409 on a UID precondition that does not hold, strategic merge of a pod's
 * status (conditions by type, other lists replaced whole, null clears a field). The fakes
 * of one test share one MemApiObjects when they must see each other's writes.
 * test/integration/controlplane/ports-contract.test.ts holds them to the real adapter on
 * the test API server.
 */
import type { Event as CoreEvent, Node, Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../src/errors.js';

type Obj = Record<string, unknown>;

const key = (namespace: string, name: string) => `${namespace}/${name}`;

/**
 * The PodStatus lists a strategic merge patch merges by key (patchMergeKey in core/v1);
 * every other list, container statuses included, is replaced whole.
 */
const MERGE_KEYS: Record<string, string> = { conditions: 'type', podIPs: 'ip', hostIPs: 'ip' };

/** Strategic merge of `patch` onto `base` (new objects; `null` removes a field). */
export function strategicMerge(base: Obj, patch: Obj): Obj {
  const out: Obj = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else if (Array.isArray(v) && MERGE_KEYS[k] && Array.isArray(out[k])) {
      const by = MERGE_KEYS[k]!;
      const merged = [...(out[k] as Obj[])];
      for (const item of v as Obj[]) {
        const i = merged.findIndex((x) => x[by] === item[by]);
        if (i >= 0) merged[i] = strategicMerge(merged[i]!, item);
        else merged.push(item);
      }
      out[k] = merged;
    } else if (v && typeof v === 'object' && !Array.isArray(v) && out[k] && typeof out[k] === 'object' && !Array.isArray(out[k])) out[k] = strategicMerge(out[k] as Obj, v as Obj);
    else out[k] = structuredClone(v);
  }
  return out;
}

export class MemApiObjects {
  readonly pods = new Map<string, Pod>();
  readonly nodes = new Map<string, Node>();
  readonly events = new Map<string, CoreEvent>();
  #n = 0;

  newUid(): string {
    return `uid-${++this.#n}`;
  }

  /** A Node named `name` (with `uid`, or a new one); returns its UID. */
  addNode(name: string, uid = this.newUid()): string {
    this.nodes.set(name, { apiVersion: 'v1', kind: 'Node', metadata: { name, uid } });
    return uid;
  }

  /** Creates a pod as the API does: a taken name is ALREADY_EXISTS; the stored copy gets a UID (its own, if it has one). */
  createPod(pod: Pod): Pod {
    const ns = pod.metadata?.namespace ?? 'default';
    const name = pod.metadata!.name!;
    if (this.pods.has(key(ns, name))) throw new NodeletError('ALREADY_EXISTS', `pods "${name}" already exists`, { status: 409, reason: 'AlreadyExists' });
    const stored: Pod = { ...structuredClone(pod), metadata: { ...structuredClone(pod.metadata), namespace: ns, uid: pod.metadata?.uid ?? this.newUid() } };
    this.pods.set(key(ns, name), stored);
    return stored;
  }

  pod(namespace: string, name: string): Pod | undefined {
    return this.pods.get(key(namespace, name));
  }

  /** The pod, when it exists and has this UID: NOT_FOUND, or CONFLICT (the UID precondition). */
  #podWithUid(namespace: string, name: string, uid: string): Pod {
    const p = this.pod(namespace, name);
    if (!p) throw new NodeletError('NOT_FOUND', `pods "${name}" not found`, { status: 404, reason: 'NotFound' });
    if (p.metadata!.uid !== uid) {
      throw new NodeletError('CONFLICT', `Precondition failed: UID in precondition: ${uid}, UID in object meta: ${p.metadata!.uid}`, { status: 409, reason: 'Conflict' });
    }
    return p;
  }

  /** DELETE with grace period 0 and a UID precondition. */
  deletePod(namespace: string, name: string, uid: string): void {
    this.#podWithUid(namespace, name, uid);
    this.pods.delete(key(namespace, name));
  }

  /** Strategic merge patch of `pods/<name>/status` carrying the pod's UID. */
  patchPodStatus(namespace: string, name: string, uid: string, status: Obj): void {
    const p = this.#podWithUid(namespace, name, uid);
    Object.assign(p, { status: strategicMerge((p.status ?? {}) as Obj, status) });
  }

  createEvent(e: CoreEvent): void {
    const ns = e.metadata?.namespace ?? 'default';
    const name = e.metadata!.name!;
    if (this.events.has(key(ns, name))) throw new NodeletError('ALREADY_EXISTS', `events "${name}" already exists`, { status: 409, reason: 'AlreadyExists' });
    this.events.set(key(ns, name), structuredClone(e));
  }

  event(namespace: string, name: string): CoreEvent | undefined {
    return this.events.get(key(namespace, name));
  }

  /** JSON merge patch of an event. */
  patchEvent(namespace: string, name: string, patch: Obj): void {
    const e = this.event(namespace, name);
    if (!e) throw new NodeletError('NOT_FOUND', `events "${name}" not found`, { status: 404, reason: 'NotFound' });
    Object.assign(e, structuredClone(patch));
  }
}
