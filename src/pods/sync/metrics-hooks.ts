/**
 * Hooks the pod manager records through: a no-op default (tests, and a manager built
 * without metrics) and the wrapper that counts started sandboxes and containers at the
 * one place they are started (the PodRuntime port), as the kubelet counts them around
 * its own RunPodSandbox and StartContainer steps.
 */
import { NodeletError } from '../../errors.js';
import type { ObservedPod } from './observed.js';
import type { PodRuntime } from '../cri/runtime-port.js';

/** What the pod manager records (all optional to call; each is O(1)). */
export interface PodManagerMetrics {
  /** Every relist's view of the runtime: running pods and containers by state. */
  relisted(pods: readonly ObservedPod[]): void;
  /** One pod worker turn: `create` (first sync of a pod), `sync`, or `kill` (termination). */
  podWorkerDuration(operation: 'create' | 'sync' | 'kill', seconds: number): void;
  /** A pod ran for the first time, `seconds` after nodelet first saw it. */
  podStartDuration(seconds: number): void;
  /** A sandbox was created (`ok` false: the runtime refused). */
  podStarted(ok: boolean): void;
  /** A container was started (`ok` false: the runtime refused). */
  containerStarted(init: boolean, ok: boolean, code?: string): void;
}

export const noPodMetrics: PodManagerMetrics = {
  relisted: () => {},
  podWorkerDuration: () => {},
  podStartDuration: () => {},
  podStarted: () => {},
  containerStarted: () => {},
};

/**
 * The runtime port with `runSandbox` and `startContainer` counted. Every other method is
 * the original, bound to it (the port may be a class with private fields). With the no-op
 * metrics the port itself is returned.
 */
export function countingPodRuntime(rt: PodRuntime, m: PodManagerMetrics): PodRuntime {
  if (m === noPodMetrics) return rt;
  const runSandbox: PodRuntime['runSandbox'] = async (pod, attempt, sent) => {
    try {
      const id = await rt.runSandbox(pod, attempt, sent);
      m.podStarted(true);
      return id;
    } catch (err) {
      m.podStarted(false);
      throw err;
    }
  };
  const startContainer: PodRuntime['startContainer'] = async (spec) => {
    try {
      const id = await rt.startContainer(spec);
      m.containerStarted(spec.init, true);
      return id;
    } catch (err) {
      // The kubelet labels errors with the gRPC code; nodelet's error code is its equivalent.
      m.containerStarted(spec.init, false, err instanceof NodeletError ? err.code : 'UNKNOWN');
      throw err;
    }
  };
  return new Proxy(rt, {
    get(target, prop) {
      if (prop === 'runSandbox') return runSandbox;
      if (prop === 'startContainer') return startContainer;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
