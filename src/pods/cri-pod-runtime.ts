/**
 * PodRuntime over the CRI client: the edge where pod workers' intents become CRI calls and
 * CRI answers become ObservedPods. Everything observed is read back from the runtime by
 * the kubelet's labels, so a restarted nodelet sees exactly what it left.
 *
 * Waiting reasons (details.reason on thrown errors), as the kubelet names them:
 * ErrImagePull / ErrImageNeverPull (image), CreateContainerConfigError (the pod spec
 * cannot be turned into a config, e.g. a Localhost profile without a name),
 * CreateContainerError (the runtime or a Localhost profile refused creation),
 * RunContainerError (the runtime could not start a created container).
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { parseQuantity } from '../config/quantity.js';
import { NodeletError, errorMessage } from '../errors.js';
import type { CriClient } from '../runtime/cri-client.js';
import type { ContainerConfig, ContainerState, PodSandboxConfig } from '../runtime/types.js';
import {
  ANN_CONTAINER_HASH,
  ANN_GRACE_PERIOD,
  ANN_RESTART_COUNT,
  LABEL_CONTAINER_NAME,
  LABEL_POD_NAME,
  LABEL_POD_NAMESPACE,
  LABEL_POD_UID,
  containerConfig,
  sandboxConfig,
} from './cri-config.js';
import { isDnsLabel } from './pod-validation.js';
import type { ObservedContainer, ObservedContainerState, ObservedPod } from './observed.js';
import type { PodRuntime, StartSpec } from './runtime-port.js';
import { checkLocalhostProfile, resolveSeccomp } from './seccomp.js';
import type { Mounter } from './subpath.js';
import { containerMounts, podLogDir, removePodDir, removePodLogDirs } from './volumes.js';

export interface CriPodRuntimeOptions {
  cri: CriClient;
  rootDir: string;
  /** podLogsDir: container logs go to `<podLogsDir>/<ns>_<name>_<uid>/<container>/<n>.log`. */
  podLogsDir: string;
  seccompDefault: boolean;
  clusterDNS?: string[];
  clusterDomain?: string;
  /** For the downward API in env (spec.nodeName, status.hostIP, a hostNetwork pod's status.podIP). */
  nodeName?: string;
  hostIP?: string;
  /** Mounts for subPath binds; default the host's (util-linux mount). */
  mounter?: Mounter;
}

const STATE: Record<ContainerState, ObservedContainerState> = {
  CONTAINER_CREATED: 'created',
  CONTAINER_RUNNING: 'running',
  CONTAINER_EXITED: 'exited',
  CONTAINER_UNKNOWN: 'unknown',
};

const nsToMs = (ns: number) => (ns > 0 ? Math.floor(ns / 1e6) : undefined);

function withReason(err: unknown, reason: string, prefix: string): NodeletError {
  if (err instanceof NodeletError && typeof err.details.reason === 'string') return err;
  const code = err instanceof NodeletError ? err.code : 'INTERNAL';
  return new NodeletError(code, `${prefix}: ${errorMessage(err)}`, { reason }, { cause: err });
}

function ignoreNotFound(err: unknown): void {
  if (err instanceof NodeletError && err.code === 'NOT_FOUND') return;
  throw err;
}

type CriContainerStatus = Awaited<ReturnType<CriClient['containerStatus']>>;

export class CriPodRuntime implements PodRuntime {
  readonly #o: CriPodRuntimeOptions;
  #runtimeName = 'containerd';
  /**
   * ContainerStatus answers by container ID, with the state ListContainers reported when
   * they were read. What ContainerStatus adds (start and finish times, exit code, reason)
   * does not change while the state stays the same, so a relist asks only about containers
   * that are new or changed state: the kubelet's PLEG idea, on ListContainers' states.
   */
  readonly #statuses = new Map<string, { listed: ContainerState; st: CriContainerStatus }>();

  constructor(o: CriPodRuntimeOptions) {
    this.#o = o;
  }

  /** Learns the runtime's name (for `containerd://<id>` container IDs in status). */
  async init(): Promise<void> {
    try {
      this.#runtimeName = (await this.#o.cri.version()).runtimeName || this.#runtimeName;
    } catch {
      // Keeps the default until the runtime answers; RuntimeHealth reports the outage.
    }
  }

  runtimeName(): string {
    return this.#runtimeName;
  }

  #logDirectory(pod: Pod): string {
    const m = pod.metadata!;
    // Checked names only: an API pod's name and UID become a path under podLogsDir.
    return podLogDir(this.#o.podLogsDir, m.namespace ?? 'default', m.name ?? '', m.uid ?? '');
  }

  #sandboxConfig(pod: Pod, attempt: number): PodSandboxConfig {
    return sandboxConfig(pod, attempt, {
      logDirectory: this.#logDirectory(pod),
      ...(this.#o.clusterDNS ? { clusterDNS: this.#o.clusterDNS } : {}),
      ...(this.#o.clusterDomain ? { clusterDomain: this.#o.clusterDomain } : {}),
    }) as unknown as PodSandboxConfig;
  }

  async listPods(): Promise<ObservedPod[]> {
    const [sandboxes, containers] = await Promise.all([this.#o.cri.listPodSandbox(), this.#o.cri.listContainers()]);
    // A full list: forget the statuses of containers the runtime no longer has.
    const ids = new Set(containers.map((c) => c.id));
    for (const id of this.#statuses.keys()) if (!ids.has(id)) this.#statuses.delete(id);
    const uids = new Set<string>();
    for (const s of sandboxes) if (s.labels[LABEL_POD_UID]) uids.add(s.labels[LABEL_POD_UID]);
    for (const c of containers) if (c.labels[LABEL_POD_UID]) uids.add(c.labels[LABEL_POD_UID]);
    return Promise.all([...uids].map((uid) => this.#observe(uid, sandboxes, containers)));
  }

  async observePod(uid: string): Promise<ObservedPod> {
    const sel = { labelSelector: { [LABEL_POD_UID]: uid } };
    const [sandboxes, containers] = await Promise.all([this.#o.cri.listPodSandbox(sel), this.#o.cri.listContainers(sel)]);
    return this.#observe(uid, sandboxes, containers);
  }

  async #observe(
    uid: string,
    allSandboxes: Awaited<ReturnType<CriClient['listPodSandbox']>>,
    allContainers: Awaited<ReturnType<CriClient['listContainers']>>,
  ): Promise<ObservedPod> {
    const sandboxes = allSandboxes.filter((s) => s.labels[LABEL_POD_UID] === uid);
    const list = allContainers.filter((c) => c.labels[LABEL_POD_UID] === uid);
    const containers: ObservedContainer[] = [];
    for (const c of list) {
      // Exit code, start/finish times and reason are only in ContainerStatus.
      const st = await this.#containerStatus(c.id, c.state);
      if (!st) continue;
      containers.push({
        id: c.id,
        name: c.labels[LABEL_CONTAINER_NAME] ?? c.metadata.name,
        podSandboxId: c.podSandboxId,
        attempt: c.metadata.attempt,
        state: STATE[st.state],
        restartCount: Number(c.annotations[ANN_RESTART_COUNT] ?? c.metadata.attempt) || 0,
        hash: c.annotations[ANN_CONTAINER_HASH] ?? '',
        image: c.image?.image ?? st.image?.image ?? '',
        imageRef: st.imageRef || c.imageRef,
        createdAt: nsToMs(st.createdAt) ?? 0,
        ...(nsToMs(st.startedAt) !== undefined ? { startedAt: nsToMs(st.startedAt)! } : {}),
        ...(nsToMs(st.finishedAt) !== undefined ? { finishedAt: nsToMs(st.finishedAt)! } : {}),
        ...(st.state === 'CONTAINER_EXITED' ? { exitCode: st.exitCode } : {}),
        ...(st.reason ? { reason: st.reason } : {}),
        ...(st.message ? { message: st.message } : {}),
      });
    }
    const labels = sandboxes[0]?.labels ?? list[0]?.labels ?? {};
    const grace = list.map((c) => Number(c.annotations[ANN_GRACE_PERIOD])).find((g) => Number.isFinite(g) && g >= 0);
    return {
      uid,
      name: labels[LABEL_POD_NAME] ?? sandboxes[0]?.metadata.name ?? '',
      namespace: labels[LABEL_POD_NAMESPACE] ?? sandboxes[0]?.metadata.namespace ?? 'default',
      sandboxes: sandboxes.map((s) => ({ id: s.id, attempt: s.metadata.attempt, ready: s.state === 'SANDBOX_READY', createdAt: nsToMs(s.createdAt) ?? 0 })),
      containers,
      ...(grace !== undefined ? { gracePeriodSeconds: grace } : {}),
    };
  }

  async #containerStatus(id: string, listed: ContainerState): Promise<CriContainerStatus | undefined> {
    const cached = this.#statuses.get(id);
    if (cached && cached.listed === listed) return cached.st;
    const st = await this.#o.cri.containerStatus(id).catch((err) => {
      ignoreNotFound(err);
      return undefined; // removed between list and status
    });
    // Kept only when both calls agree on the state (not caught mid-transition) and it is a known one.
    if (st && st.state === listed && listed !== 'CONTAINER_UNKNOWN') this.#statuses.set(id, { listed, st });
    else this.#statuses.delete(id);
    return st;
  }

  async runSandbox(pod: Pod, attempt: number): Promise<string> {
    const cfg = this.#sandboxConfig(pod, attempt);
    await fs.mkdir(cfg.logDirectory!, { recursive: true, mode: 0o755 });
    try {
      return await this.#o.cri.runPodSandbox(cfg);
    } catch (err) {
      throw withReason(err, 'CreatePodSandboxError', 'cannot create the pod sandbox');
    }
  }

  async stopSandbox(id: string): Promise<void> {
    await this.#o.cri.stopPodSandbox(id).catch(ignoreNotFound);
  }

  async removeSandbox(id: string): Promise<void> {
    await this.#o.cri.removePodSandbox(id);
  }

  async ensureImage(_pod: Pod, c: Container, gate: <T>(pull: () => Promise<T>) => Promise<T>): Promise<boolean> {
    const image = c.image!;
    const policy = c.imagePullPolicy ?? 'IfNotPresent';
    if (policy !== 'Always') {
      let present: boolean;
      try {
        present = (await this.#o.cri.imageStatus(image)) !== undefined;
      } catch (err) {
        throw withReason(err, 'ErrImagePull', `cannot check image "${image}"`);
      }
      if (present) return false;
      if (policy === 'Never') {
        throw new NodeletError('NOT_FOUND', `container image "${image}" is not present with pull policy of Never`, { reason: 'ErrImageNeverPull' });
      }
    }
    try {
      await gate(() => this.#o.cri.pullImage(image));
    } catch (err) {
      throw withReason(err, 'ErrImagePull', `failed to pull image "${image}"`);
    }
    return true;
  }

  async startContainer(s: StartSpec): Promise<string> {
    const { pod, container } = s;
    // The name becomes a path element (the log directory, subPath binds): an API pod's is checked here.
    if (!isDnsLabel(container.name)) throw new NodeletError('INVALID_ARGUMENT', `container name ${JSON.stringify(container.name)} is not a valid DNS-1123 label`, { reason: 'CreateContainerConfigError' });
    const seccomp = resolveSeccomp(pod, container, { rootDir: this.#o.rootDir, seccompDefault: this.#o.seccompDefault });
    if (seccomp.profileType === 'Localhost') await checkLocalhostProfile(seccomp.localhostRef!, container.name);
    let config: ContainerConfig;
    try {
      config = containerConfig(pod, container, {
        restartCount: s.restartCount,
        seccomp,
        quantity: (q) => parseQuantity(String(q)).value,
        ...(this.#o.nodeName ? { nodeName: this.#o.nodeName } : {}),
        ...(this.#o.hostIP ? { hostIP: this.#o.hostIP } : {}),
      }) as unknown as ContainerConfig;
    } catch (err) {
      throw withReason(err, 'CreateContainerConfigError', `container ${container.name}`);
    }
    try {
      // Set up at every creation: subPath binds are redone from the volume as it is now.
      const env = new Map((config.envs ?? []).map((e) => [e.key, e.value] as const));
      config.mounts = await containerMounts(pod, container, this.#o.rootDir, { env, ...(this.#o.mounter ? { mounter: this.#o.mounter } : {}) });
    } catch (err) {
      throw withReason(err, 'CreateContainerConfigError', `container ${container.name}: volumes`);
    }
    const sandboxCfg = this.#sandboxConfig(pod, s.sandboxAttempt);
    await fs.mkdir(path.join(sandboxCfg.logDirectory!, container.name), { recursive: true, mode: 0o755 });
    let id: string;
    try {
      id = await this.#o.cri.createContainer(s.sandboxId, config, sandboxCfg);
    } catch (err) {
      throw withReason(err, 'CreateContainerError', 'failed to create the container');
    }
    try {
      await this.#o.cri.startContainer(id);
    } catch (err) {
      throw withReason(err, 'RunContainerError', 'failed to start the container');
    }
    return id;
  }

  async stopContainer(id: string, gracePeriodSeconds: number): Promise<void> {
    await this.#o.cri.stopContainer(id, gracePeriodSeconds).catch(ignoreNotFound);
  }

  execSync(id: string, cmd: string[], timeoutSeconds: number): Promise<{ exitCode: number; stdout: Buffer; stderr: Buffer }> {
    return this.#o.cri.execSync(id, cmd, timeoutSeconds);
  }

  /**
   * Removes every per-pod directory nodelet made: `<root-dir>/pods/<uid>` (its subPath
   * binds unmounted first) and the pod's log directory. Both are tried; the errors are joined.
   */
  async cleanupPod(uid: string): Promise<void> {
    const results = await Promise.allSettled([removePodDir(this.#o.rootDir, uid, this.#o.mounter), removePodLogDirs(this.#o.podLogsDir, uid, this.#o.mounter)]);
    const errors = results.flatMap((r) => (r.status === 'rejected' ? [errorMessage(r.reason)] : []));
    if (errors.length) throw new NodeletError('INTERNAL', errors.join('; '));
  }

  async removeContainer(id: string): Promise<void> {
    this.#statuses.delete(id);
    await this.#o.cri.removeContainer(id);
  }
}
