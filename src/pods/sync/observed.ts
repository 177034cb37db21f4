/**
 * What the runtime holds for one pod, in nodelet's own terms. Built from CRI
 * ListPodSandbox / ListContainers / ContainerStatus answers (see runtime-view.ts);
 * everything here is derived from the runtime alone, so nodelet keeps no state of its
 * own and rebuilds it after a restart.
 */
export type ObservedContainerState = 'created' | 'running' | 'exited' | 'unknown';

export interface ObservedContainer {
  id: string;
  /** `io.kubernetes.container.name`. */
  name: string;
  podSandboxId: string;
  /** CRI metadata attempt (nodelet sets it to the restart count). */
  attempt: number;
  state: ObservedContainerState;
  /** `io.kubernetes.container.restartCount` annotation. */
  restartCount: number;
  /** `io.kubernetes.container.hash` annotation. */
  hash: string;
  image: string;
  imageRef: string;
  createdAt: number; // ms since epoch
  startedAt?: number;
  finishedAt?: number;
  exitCode?: number;
  reason?: string;
  /** The runtime's message; for an exited container, followed by its termination message (termination-message.ts). */
  message?: string;
}

export interface ObservedSandbox {
  id: string;
  attempt: number;
  ready: boolean;
  createdAt: number;
  /** A ready sandbox's own IPs (PodSandboxStatus network.ip, then additional_ips); absent on the host network. */
  ips?: string[];
}

export interface ObservedPod {
  uid: string;
  name: string;
  namespace: string;
  sandboxes: ObservedSandbox[];
  containers: ObservedContainer[];
  /** `io.kubernetes.pod.terminationGracePeriod` from the containers, for orphans. */
  gracePeriodSeconds?: number;
  /** The node name its sandbox is marked with (`io.kubernetes.nodelet.node`); absent when unmarked (a kubelet's pod). */
  node?: string;
  /**
   * True when `node` names another node than the reader's: another agent's pod on a shared
   * runtime. Never removed, never synced; reported.
   */
  foreign?: boolean;
}

/** The newest sandbox by creation time (then attempt). */
export function latestSandbox(p: ObservedPod): ObservedSandbox | undefined {
  return [...p.sandboxes].sort((a, b) => b.createdAt - a.createdAt || b.attempt - a.attempt)[0];
}

const newestFirst = (a: ObservedContainer, b: ObservedContainer) => b.restartCount - a.restartCount || b.createdAt - a.createdAt;

/** Containers of one name, newest first. */
export function containersNamed(p: ObservedPod, name: string): ObservedContainer[] {
  return p.containers.filter((c) => c.name === name).sort(newestFirst);
}

/**
 * Every name's containers, newest first (containersNamed of each name), grouped in one pass:
 * a sync that asks for each of a pod's containers by name uses this, as asking the whole
 * list once per name is quadratic (a pod the API accepts may have ~45,000 containers).
 */
export function containersByName(p: ObservedPod): ReadonlyMap<string, readonly ObservedContainer[]> {
  const m = new Map<string, ObservedContainer[]>();
  for (const c of p.containers) {
    const list = m.get(c.name);
    if (list) list.push(c);
    else m.set(c.name, [c]);
  }
  for (const list of m.values()) if (list.length > 1) list.sort(newestFirst);
  return m;
}

/**
 * What the runtime holds of a pod it has nothing of, as `observePod` answers it then (no
 * labels to read a name from: name '', namespace `default`). The pod manager syncs a pod on
 * this when its relist's listing found nothing for the UID, instead of asking again.
 */
export function notInRuntime(uid: string): ObservedPod {
  return { uid, name: '', namespace: 'default', sandboxes: [], containers: [] };
}
