/**
 * The pod manager's desired set is the union of its sources: static pods from files, and,
 * connected, the pods the control plane binds to this node. Each source delivers its full
 * set; the union goes to the manager, and once every source has delivered its first set
 * the manager may remove runtime pods nobody wants (the kubelet's sourcesReady).
 */
import type { Pod } from 'kubernetes-types/core/v1.js';
import { isMirrorPod } from '../status/mirror.js';

/** The control plane's pods for this node, as a stream of full sets (a reflector behind it). */
export interface PodFeed {
  /** Starts; resolves after the first full set was delivered to `onPods` (or rejects when it cannot list). */
  start(onPods: (pods: Pod[]) => void): Promise<void>;
  stop(): Promise<void>;
}

export type SourceName = 'file' | 'api';

/**
 * The API pods the agent keeps: bound to this node, and not mirror pods (those stand for
 * static pods, which run from their files). A finished one (phase Succeeded or Failed in
 * the API) stays, as the kubelet keeps it: its containers and logs remain (`kubectl logs`
 * of a completed pod) until it is deleted, and it never runs again (see finishedInApi).
 */
export function runnableApiPods(pods: readonly Pod[], nodeName: string): Pod[] {
  return pods.filter((p) => p.spec?.nodeName === nodeName && !isMirrorPod(p));
}

/** The control plane says the pod is over (Succeeded or Failed): nothing of it is started again. */
export function finishedInApi(pod: Pod): boolean {
  return pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';
}

export class PodSources {
  readonly #sets = new Map<SourceName, Pod[]>();
  readonly #expected: Set<SourceName>;
  readonly #deliver: (pods: Pod[], allReady: boolean) => void;

  constructor(expected: readonly SourceName[], deliver: (pods: Pod[], allReady: boolean) => void) {
    this.#expected = new Set(expected);
    this.#deliver = deliver;
    if (this.#expected.size === 0) deliver([], true);
  }

  /** A source's full set. The union (by UID, first source wins) goes to the manager. */
  update(source: SourceName, pods: Pod[]): void {
    this.#sets.set(source, pods);
    const byUid = new Map<string, Pod>();
    for (const s of ['file', 'api'] as const) for (const p of this.#sets.get(s) ?? []) if (!byUid.has(p.metadata!.uid!)) byUid.set(p.metadata!.uid!, p);
    this.#deliver([...byUid.values()], [...this.#expected].every((s) => this.#sets.has(s)));
  }
}
