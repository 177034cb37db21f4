/**
 * What the pod workers need from the container runtime, in nodelet's terms. The CRI
 * adapter (cri-pod-runtime.ts) implements it over the CRI client; unit tests implement
 * it in memory. Errors are NodeletErrors; `reason` in details (CreateContainerError,
 * ErrImagePull, ...) becomes the container's waiting reason.
 */
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import type { ObservedPod } from '../sync/observed.js';

export interface StartSpec {
  pod: Pod;
  container: Container;
  sandboxId: string;
  /** The sandbox's metadata attempt: CreateContainer needs the config the sandbox was run with. */
  sandboxAttempt: number;
  restartCount: number;
  init: boolean;
  /** An ephemeral container's target (targetContainerName): the ID of the container whose PID namespace it joins (CRI NamespaceMode TARGET). */
  targetContainerId?: string;
}

export interface PodRuntime {
  /** Every pod the runtime holds that carries the kubelet's `io.kubernetes.pod.uid` label. */
  listPods(): Promise<ObservedPod[]>;
  /** What the runtime holds for one pod UID (sandboxes and containers, any state). */
  observePod(uid: string): Promise<ObservedPod>;
  /**
   * A pod whose container's exit the runtime's event told since the last listPods: that
   * listing's observation of it with the exit, without asking the runtime (whose listing
   * may still show the container running). Undefined when nothing was told. Optional.
   */
  observeNoted?(uid: string): Promise<ObservedPod> | undefined;
  /**
   * At a worker's first sync of a pod the runtime already runs (adopted after a restart):
   * fills what the node records about it where missing (a record rebuilt after a crash).
   * Optional; best effort (never fails the sync).
   */
  adopted?(pod: Pod, observed: ObservedPod): Promise<void>;
  /**
   * Creates and starts a sandbox; returns its ID. `sent`, when given, is called once the
   * runtime was asked (the node-side work before it done): what waits for the sandbox may
   * prepare meanwhile.
   */
  runSandbox(pod: Pod, attempt: number, sent?: () => void): Promise<string>;
  /** A ready sandbox's own IPs ([] on the host network or when gone): where hooks and probes connect. Optional. */
  sandboxIPs?(id: string): Promise<string[]>;
  stopSandbox(id: string): Promise<void>;
  removeSandbox(id: string): Promise<void>;
  /**
   * Makes the image present per imagePullPolicy; throws with reason
   * ErrImagePull/ErrImageNeverPull. Only an actual pull goes through `gate` (the manager
   * serializes pulls with it when serializeImagePulls): presence checks never wait.
   * Resolves true when it pulled, false when the image was present.
   */
  ensureImage(pod: Pod, container: Container, gate: <T>(pull: () => Promise<T>) => Promise<T>): Promise<boolean>;
  /** Creates and starts a container; throws with reason CreateContainerConfigError/CreateContainerError/RunContainerError. */
  startContainer(spec: StartSpec): Promise<string>;
  stopContainer(id: string, gracePeriodSeconds: number): Promise<void>;
  /** Runs a command in a running container (exec probes); a failing command is its exit code, not an error. */
  execSync(id: string, cmd: string[], timeoutSeconds: number): Promise<{ exitCode: number; stdout: Buffer; stderr: Buffer }>;
  removeContainer(id: string): Promise<void>;
  /** Brings the files of the pod's set-up downwardAPI/projected volumes up to date with the pod (its labels changed). Optional; never throws. */
  refreshVolumes?(pod: Pod): Promise<void>;
  /** Removes what the pod left on the node besides the runtime (its directories, volumes, logs), once it is gone. */
  cleanupPod(uid: string): Promise<void>;
  /**
   * UIDs of pods that left directories on the node (cleanupPod removes them). `kept`: pods
   * the caller keeps whatever is found (wanted, or in the runtime): what costs a look per pod
   * (a pod cgroup's subdirectories) is not looked at for them. They may still be listed.
   */
  leftoverPods(kept?: (uid: string) => boolean): Promise<string[]>;
  /** `containerd`, `cri-o`: the prefix of container IDs in pod status. */
  runtimeName(): string;
}
