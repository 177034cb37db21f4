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
 *
 * Network: a pod with its own network gets its IPs from its sandbox (PodSandboxStatus,
 * `network.ip` then `additional_ips`), read once per sandbox; they go into ObservedPod
 * (for status.podIP), the downward API and the kubelet-managed /etc/hosts, written to
 * `<root-dir>/pods/<uid>/etc-hosts` at each container creation and mounted at /etc/hosts
 * (not in a container that mounts its own). The sandbox's DNS follows dnsPolicy (dns.ts)
 * over the host's resolvConf, read bounded and never from anything but a regular file.
 *
 * Termination messages (termination-message.ts): each container instance gets an empty
 * file under `<root-dir>/pods/<uid>/containers/<name>/` mounted at its
 * `terminationMessagePath`; an exited container's message is read back once, when its
 * exited ContainerStatus is first seen, from the host path of that mount.
 */
import { constants as fsc } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { parseQuantity } from '../../config/quantity.js';
import { NodeletError, errorMessage } from '../../errors.js';
import { nodeRef, podRef, type EventSink } from '../../events.js';
import { silentLogger, type Logger } from '../../log.js';
import type { ContainerEvent, ContainerExitEvent } from '../../runtime/containerd-event.js';
import type { CriClient } from '../../runtime/cri-client.js';
import type { ContainerConfig, ContainerState, DNSConfig, Image, Mount, PodSandboxConfig } from '../../runtime/types.js';
import type { ApiObjects } from '../objects/objects.js';
import { containerConfig, sandboxConfig } from './cri-config.js';
import { together } from '../together.js';
import type { EnvObjects } from './env.js';
import { needsAllocatable, readEnvObjects } from './env-sources.js';
import { ServiceEnvSource } from './service-env.js';
import { lookupRuntimeHandler } from './runtime-class.js';
import * as K from './labels.js'; // K.LABEL_* / K.ANN_*: the kubelet's label and annotation names
import { hostsFileContent, mountsOwnEtcHosts, parseResolvConf, podDnsConfig, RESOLV_CONF_MAX_BYTES, type DnsWarning, type HostDns } from './dns.js';
import { isDnsLabel } from '../sources/pod-validation.js';
import type { ObservedContainer, ObservedContainerState, ObservedPod } from '../sync/observed.js';
import type { PodRuntime, StartSpec } from './runtime-port.js';
import { checkLocalhostProfile, resolveSeccomp, seccompDir } from './seccomp.js';
import { imageUser, runAsNonRootProblem, type ImageUser } from './security-context.js';
import { hostMounter, type Mounter } from '../volumes/subpath.js';
import type { NodeSwap } from './swap.js';
import type { PodCgroupsPort } from '../cgroups/pod-cgroups.js';
import { containerOomScoreAdjust } from '../cgroups/resources.js';
import { writeFileAtomic, type ImagePullRecords } from '../../system/root-dir.js';
import { ensurePodImage, type CredentialVerification, type PullRecordsPort } from '../images/image-puller.js';
import { containerResources, podResourceInfo, type AllocationRecords } from '../sync/allocation.js';
import { ApiVolumes } from '../volumes/api-volumes.js';
import { containerMounts, leftoverPodUids, podDir, podLogDir, removePodDir, removePodLogDirs } from '../volumes/volumes.js';
import { containerLogSymlink, createLogSymlink, removeLogSymlink, removePodLogSymlinks } from '../logs/log-symlinks.js';
import { removeContainerLogFiles } from '../logs/log-rotation.js';
import { createTerminationLogFile, DEFAULT_TERMINATION_MESSAGE_PATH, terminationMessage } from '../logs/termination-message.js';

export interface CriPodRuntimeOptions {
  cri: CriClient;
  rootDir: string;
  /** podLogsDir: container logs go to `<podLogsDir>/<ns>_<name>_<uid>/<container>/<n>.log`. */
  podLogsDir: string;
  seccompDefault: boolean;
  clusterDNS?: string[];
  clusterDomain?: string;
  /** The host's resolver config for `Default` DNS (the kubelet's resolvConf); '' = none. Default /etc/resolv.conf. */
  resolvConf?: string;
  /** For the downward API in env (spec.nodeName, status.hostIP, a hostNetwork pod's status.podIP). */
  nodeName?: string;
  hostIP?: string;
  /** Mounts for subPath binds; default the host's (util-linux mount). */
  mounter?: Mounter;
  /** The kubelet's DNS warnings (MissingClusterDNS, DNSConfigForming) go here as events and logs. */
  events?: EventSink;
  logger?: Logger;
  /** The node's swap (memorySwap.swapBehavior and host facts): containers' swap limits (swap.ts). */
  swap?: NodeSwap;
  /** Image pull records under <root-dir>/image_manager (root-dir.ts); unset: none written. */
  imageRecords?: Pick<ImagePullRecords, 'pulling' | 'pulled' | 'failed'> & Partial<PullRecordsPort>;
  /** KubeletEnsureSecretPulledImages' verification policy (image-puller.ts); unset (gate off): present images are used as they are. */
  imageCredentialVerification?: CredentialVerification;
  /** Where the kubelet's `<pod>_<ns>_<container>-<id>.log` links to live logs go (log-symlinks.ts); unset: none made. */
  containerLogDir?: string;
  /** `allocated_pods_state` and `actuated_pods_state` under the root dir (allocation.ts); unset: none kept. */
  allocation?: AllocationRecords;
  /** The API objects pods refer to (connected mode's); unset on a standalone node, where a pod that refers to one is refused. */
  objects?: ApiObjects;
  /** The node's allocatable as `status.allocatable` has it (node-view.ts): what the downward API gives for an unset limit. */
  nodeAllocatable?: () => Readonly<Record<string, string>> | undefined;
  /** The kubelet's pod cgroups (src/pods/cgroups): made before the sandbox, its cgroup_parent, removed with the pod; unset: none (cgroupsPerQOS false). */
  cgroups?: PodCgroupsPort;
  /** The node's memory capacity in bytes, for each container's oom_score_adj (Burstable); unset: oom_score_adj not sent. */
  memoryCapacityBytes?: number;
}

/**
 * The host's resolv.conf, parsed. Opened non-blocking and required to be a regular file (a
 * FIFO or a device there never blocks the event loop), read up to RESOLV_CONF_MAX_BYTES; a
 * bigger file is refused. '' gives an empty config. Errors name the file.
 */
export async function readResolvConf(file: string): Promise<HostDns> {
  if (file === '') return { servers: [], searches: [], options: [] };
  const fail = (why: string, cause?: unknown): never => {
    throw new NodeletError('INVALID_ARGUMENT', `resolvConf ${file}: ${why}`, { param: 'resolvConf', file }, cause ? { cause } : undefined);
  };
  let h: fs.FileHandle;
  try {
    h = await fs.open(file, fsc.O_RDONLY | fsc.O_NONBLOCK | fsc.O_NOCTTY);
  } catch (err) {
    return fail(`cannot open: ${errorMessage(err)}`, err);
  }
  try {
    if (!(await h.stat()).isFile()) fail('not a regular file');
    const buf = Buffer.alloc(RESOLV_CONF_MAX_BYTES + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await h.read(buf, n, buf.length - n, null);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n > RESOLV_CONF_MAX_BYTES) fail(`larger than ${RESOLV_CONF_MAX_BYTES} bytes`);
    }
    return parseResolvConf(buf.subarray(0, n).toString('utf8'));
  } finally {
    await h.close();
  }
}

const STATE: Record<ContainerState, ObservedContainerState> = {
  CONTAINER_CREATED: 'created',
  CONTAINER_RUNNING: 'running',
  CONTAINER_EXITED: 'exited',
  CONTAINER_UNKNOWN: 'unknown',
};

const nsToMs = (ns: number) => (ns > 0 ? Math.floor(ns / 1e6) : undefined);

/** The same entry objects, in any order (the runtime lists in no fixed order). */
function sameEntries(a: readonly object[], b: readonly object[]): boolean {
  if (a.length !== b.length) return false;
  // In order (the usual case) without a set; otherwise a set, never a search per entry
  // (quadratic: a pod may have ~45,000 containers, and this runs at every relist).
  if (a.every((x, i) => x === b[i])) return true;
  const inA = new Set(a);
  return b.every((x) => inA.has(x));
}

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
/** A ContainerStatus answer with the message nodelet shows for it (an exited container's includes its termination message). */
interface KnownStatus {
  listed: ContainerState;
  st: CriContainerStatus;
  message: string;
}

/** A container start's key in CriPodRuntime's present images: pod UID, container name, image. */
const presentKey = (pod: Pod, c: Container) => `${pod.metadata?.uid ?? ''}\0${c.name}\0${c.image ?? ''}`;

type SandboxEntry = Awaited<ReturnType<CriClient['listPodSandbox']>>[number];
type ContainerEntry = Awaited<ReturnType<CriClient['listContainers']>>[number];

/** A pod's observation kept from the relist; `noted`: an exit told by an event since (observeNoted builds it again). */
interface Relisted {
  sandboxes: readonly SandboxEntry[];
  containers: readonly ContainerEntry[];
  observed: ObservedPod;
  noted?: boolean;
}

/** What the runtime's events said of a container still listed running; `known`: its exited status, made once. */
interface NotedExit {
  oom: boolean;
  exit?: ContainerExitEvent;
  known?: Promise<KnownStatus>;
}

export class CriPodRuntime implements PodRuntime {
  readonly #o: CriPodRuntimeOptions;
  #runtimeName = 'containerd';
  /**
   * ContainerStatus answers by container ID, with the state ListContainers reported when
   * they were read. What ContainerStatus adds (start and finish times, exit code, reason)
   * does not change while the state stays the same, so a relist asks only about containers
   * that are new or changed state: the kubelet's PLEG idea, on ListContainers' states.
   * An exited container's termination message is read once, with its exited status.
   */
  readonly #statuses = new Map<string, KnownStatus>();
  /** A ready sandbox's IPs do not change for its life: asked once (PodSandboxStatus), forgotten with it. */
  readonly #sandboxIPs = new Map<string, string[]>();
  /**
   * Each pod's last observation from the relist, with the list entries it was built from.
   * The CRI client hands back an unchanged list entry as the same object (list-decoder.ts),
   * so while a pod's entries are the same objects, and its observation was built wholly from
   * the caches above, the observation is the same too: kept, and the same object handed to
   * the pod manager (which then knows at once that nothing changed).
   */
  readonly #relisted = new Map<string, Relisted>();
  /**
   * Exits (and OOM kills) the runtime's events told of (noteContainerEvent), by container ID,
   * while the runtime still lists the container running: only for containers last known
   * running (so at most one per container nodelet knows), forgotten once the listing shows
   * the container exited or gone.
   */
  readonly #exits = new Map<string, NotedExit>();
  readonly #log: Logger;
  /** configMap, secret, downwardAPI and projected volumes, kept up to date (api-volumes.ts). */
  readonly #apiVolumes: ApiVolumes;

  constructor(o: CriPodRuntimeOptions) {
    this.#o = o;
    this.#log = o.logger ?? silentLogger();
    this.#apiVolumes = new ApiVolumes({
      rootDir: o.rootDir,
      quantity: (q) => parseQuantity(String(q)).value,
      ...(o.objects ? { objects: o.objects } : {}),
      mounter: o.mounter ?? hostMounter,
      ...(o.events ? { events: o.events } : {}),
      logger: this.#log.child({ component: 'volumes' }),
    });
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

  /** The pod's DNS over the host's resolv.conf (read at each sandbox, as the kubelet does). */
  async #dnsConfig(pod: Pod): Promise<{ config: DNSConfig; warnings: DnsWarning[] }> {
    const resolvConf = this.#o.resolvConf ?? '/etc/resolv.conf';
    const host = await readResolvConf(resolvConf);
    return podDnsConfig(pod, { clusterDNS: this.#o.clusterDNS ?? [], clusterDomain: this.#o.clusterDomain ?? '', resolvConf, nodeIPs: this.#o.hostIP ? [this.#o.hostIP] : [] }, host);
  }

  async #sandboxConfig(pod: Pod, attempt: number, warn = false): Promise<PodSandboxConfig> {
    const dns = await this.#dnsConfig(pod);
    if (warn) {
      for (const w of dns.warnings) {
        this.#log.warn({ pod: `${pod.metadata?.namespace ?? 'default'}/${pod.metadata?.name}`, reason: w.reason }, w.message);
        this.#o.events?.emit(podRef(pod), 'Warning', w.reason, w.node ? `pod: "${pod.metadata?.name}_${pod.metadata?.namespace ?? 'default'}(${pod.metadata?.uid})". ${w.message}` : w.message);
        if (w.node && this.#o.nodeName) this.#o.events?.emit(nodeRef(this.#o.nodeName), 'Warning', w.reason, w.message);
      }
    }
    return sandboxConfig(pod, attempt, {
      logDirectory: this.#logDirectory(pod),
      dnsConfig: dns.config,
      ...(this.#o.clusterDomain ? { clusterDomain: this.#o.clusterDomain } : {}),
      ...(this.#o.nodeName ? { nodeName: this.#o.nodeName } : {}),
      ...(this.#o.cgroups?.parentOf(pod) ? { cgroupParent: this.#o.cgroups.parentOf(pod)! } : {}),
    }) as unknown as PodSandboxConfig;
  }

  refreshVolumes(pod: Pod): Promise<void> {
    return this.#apiVolumes.refresh(pod);
  }

  sandboxIPs(id: string): Promise<string[]> {
    return this.#podIPs(id);
  }

  /** The sandbox's IPs (network.ip, then additional_ips); [] for a hostNetwork or gone sandbox. */
  async #podIPs(sandboxId: string): Promise<string[]> {
    const known = this.#sandboxIPs.get(sandboxId);
    if (known) return known;
    const st = await this.#o.cri.podSandboxStatus(sandboxId).catch((err) => {
      ignoreNotFound(err);
      return undefined;
    });
    if (!st || st.state !== 'SANDBOX_READY') return [];
    const ips = [st.network?.ip ?? '', ...(st.network?.additionalIps ?? []).map((a) => a.ip)].filter((ip) => ip !== '');
    // Remembered even when empty: a hostNetwork sandbox has none, and asking again every sync cost a PodSandboxStatus per pod per second.
    this.#sandboxIPs.set(sandboxId, ips);
    return ips;
  }

  async listPods(): Promise<ObservedPod[]> {
    const [sandboxes, containers] = await Promise.all([this.#o.cri.listPodSandbox(), this.#o.cri.listContainers()]);
    // A full list: forget the statuses of containers the runtime no longer has.
    const ids = new Set(containers.map((c) => c.id));
    for (const id of this.#statuses.keys()) if (!ids.has(id)) this.#statuses.delete(id);
    for (const id of this.#exits.keys()) if (!ids.has(id)) this.#exits.delete(id);
    const sandboxIds = new Set(sandboxes.map((s) => s.id));
    for (const id of this.#sandboxIPs.keys()) if (!sandboxIds.has(id)) this.#sandboxIPs.delete(id);
    // Grouped by pod once (each pod filtering the whole list was quadratic: 110 pods, 330
    // entries, every second).
    const byUid = new Map<string, { sandboxes: typeof sandboxes; containers: typeof containers }>();
    const group = (uid: string) => {
      let g = byUid.get(uid);
      if (!g) byUid.set(uid, (g = { sandboxes: [], containers: [] }));
      return g;
    };
    for (const s of sandboxes) if (s.labels[K.LABEL_POD_UID]) group(s.labels[K.LABEL_POD_UID]).sandboxes.push(s);
    for (const c of containers) if (c.labels[K.LABEL_POD_UID]) group(c.labels[K.LABEL_POD_UID]).containers.push(c);
    for (const uid of this.#relisted.keys()) if (!byUid.has(uid)) this.#relisted.delete(uid);
    const out: (ObservedPod | Promise<ObservedPod>)[] = [];
    for (const [uid, g] of byUid) {
      const kept = this.#relisted.get(uid);
      if (kept && !kept.noted && sameEntries(kept.sandboxes, g.sandboxes) && sameEntries(kept.containers, g.containers)) out.push(kept.observed);
      else out.push(this.#observeListed(uid, g.sandboxes, g.containers));
    }
    return Promise.all(out);
  }

  /** A pod's observation from the relist's entries, kept for the next relist when nothing in it came from outside the caches. */
  async #observeListed(uid: string, sandboxes: Awaited<ReturnType<CriClient['listPodSandbox']>>, containers: Awaited<ReturnType<CriClient['listContainers']>>): Promise<ObservedPod> {
    this.#relisted.delete(uid);
    const observed = await this.#observe(uid, sandboxes, containers);
    // Kept only when every container's status is cached for the state listed (none caught
    // mid-transition, none gone between list and status) and every ready sandbox's IPs are known.
    const complete =
      containers.every((c) => this.#statuses.get(c.id)?.listed === c.state && !this.#exits.get(c.id)?.exit) &&
      sandboxes.every((sb) => sb.state !== 'SANDBOX_READY' || this.#sandboxIPs.has(sb.id));
    if (complete) this.#relisted.set(uid, { sandboxes, containers, observed });
    return observed;
  }

  async observePod(uid: string): Promise<ObservedPod> {
    const sel = { labelSelector: { [K.LABEL_POD_UID]: uid } };
    const [sandboxes, containers] = await Promise.all([this.#o.cri.listPodSandbox(sel), this.#o.cri.listContainers(sel)]);
    return this.#observe(uid, sandboxes, containers);
  }

  async #observe(
    uid: string,
    allSandboxes: readonly SandboxEntry[],
    allContainers: readonly ContainerEntry[],
  ): Promise<ObservedPod> {
    const sandboxes = allSandboxes.filter((s) => s.labels[K.LABEL_POD_UID] === uid);
    const list = allContainers.filter((c) => c.labels[K.LABEL_POD_UID] === uid);
    const containers: ObservedContainer[] = [];
    for (const c of list) {
      // Exit code, start/finish times and reason are only in ContainerStatus (cached while the state holds).
      const cached = this.#statuses.get(c.id);
      let known = cached && cached.listed === c.state ? cached : await this.#containerStatus(c.id, c.state);
      if (!known) continue;
      if (this.#exits.size) known = await this.#exitFromEvent(c.id, c.state, known);
      const { st, message } = known;
      containers.push({
        id: c.id,
        name: c.labels[K.LABEL_CONTAINER_NAME] ?? c.metadata.name,
        podSandboxId: c.podSandboxId,
        attempt: c.metadata.attempt,
        state: STATE[st.state],
        restartCount: Number(c.annotations[K.ANN_RESTART_COUNT] ?? c.metadata.attempt) || 0,
        hash: c.annotations[K.ANN_CONTAINER_HASH] ?? '',
        image: c.image?.image ?? st.image?.image ?? '',
        imageRef: st.imageRef || c.imageRef,
        createdAt: nsToMs(st.createdAt) ?? 0,
        ...(nsToMs(st.startedAt) !== undefined ? { startedAt: nsToMs(st.startedAt)! } : {}),
        ...(nsToMs(st.finishedAt) !== undefined ? { finishedAt: nsToMs(st.finishedAt)! } : {}),
        ...(st.state === 'CONTAINER_EXITED' ? { exitCode: st.exitCode } : {}),
        ...(st.reason ? { reason: st.reason } : {}),
        ...(message ? { message } : {}),
      });
    }
    const labels = sandboxes[0]?.labels ?? list[0]?.labels ?? {};
    const grace = list.map((c) => Number(c.annotations[K.ANN_GRACE_PERIOD])).find((g) => Number.isFinite(g) && g >= 0);
    const node = sandboxes.map((s) => s.labels[K.LABEL_NODELET_NODE]).find((n) => n !== undefined && n !== '');
    return {
      uid,
      name: labels[K.LABEL_POD_NAME] ?? sandboxes[0]?.metadata.name ?? '',
      namespace: labels[K.LABEL_POD_NAMESPACE] ?? sandboxes[0]?.metadata.namespace ?? 'default',
      sandboxes: await Promise.all(
        sandboxes.map(async (s) => {
          const ready = s.state === 'SANDBOX_READY';
          const ips = ready ? (this.#sandboxIPs.get(s.id) ?? (await this.#podIPs(s.id))) : [];
          return { id: s.id, attempt: s.metadata.attempt, ready, createdAt: nsToMs(s.createdAt) ?? 0, ...(ips.length ? { ips } : {}) };
        }),
      ),
      containers,
      ...(grace !== undefined ? { gracePeriodSeconds: grace } : {}),
      ...(node !== undefined ? { node, ...(this.#o.nodeName && node !== this.#o.nodeName ? { foreign: true } : {}) } : {}),
    };
  }

  /**
   * containerd's event of a container's exit or OOM kill (runtime-events.ts, containerd-event.ts).
   * Its CRI plugin lists the container exited only once it deleted the task; until then the
   * relist shows the exit as the event tells it: exit code, finish time, and the reason the
   * plugin will give (`OOMKilled` after an OOM event, else `Completed` for 0, `Error`). Only
   * for a container last known running; any other ID (an unknown or already exited one) is
   * ignored.
   */
  noteContainerEvent(e: ContainerEvent): string | undefined {
    const running = this.#statuses.get(e.containerId);
    if (running?.listed !== 'CONTAINER_RUNNING') return undefined;
    const noted = this.#exits.get(e.containerId) ?? { oom: false };
    if (e.kind === 'oom') noted.oom = true;
    else noted.exit = e;
    noted.known = undefined;
    this.#exits.set(e.containerId, noted);
    if (e.kind === 'oom') return undefined;
    // Its pod's kept observation shows it running: built again at the next look (observeNoted).
    const uid = running.st.labels[K.LABEL_POD_UID];
    const kept = uid === undefined ? undefined : this.#relisted.get(uid);
    if (kept?.containers.some((c) => c.id === e.containerId)) kept.noted = true;
    return uid;
  }

  /**
   * A pod whose container's exit an event told (noteContainerEvent) since the relist kept its
   * observation: that observation again, with the exit, without asking the runtime (its
   * listing still shows the container running). Undefined when there is none.
   */
  observeNoted(uid: string): Promise<ObservedPod> | undefined {
    const kept = this.#relisted.get(uid);
    return kept?.noted ? this.#observe(uid, kept.sandboxes, kept.containers) : undefined;
  }

  /** A container the runtime still lists running, as its noted exit says it is now (or as listed, when none). */
  async #exitFromEvent(id: string, listed: ContainerState, known: KnownStatus): Promise<KnownStatus> {
    const noted = this.#exits.get(id);
    if (!noted) return known;
    // The runtime's own record caught up (or it was never running): it is the truth from now on.
    if (listed !== 'CONTAINER_RUNNING' || known.st.state !== 'CONTAINER_RUNNING') {
      this.#exits.delete(id);
      return known;
    }
    if (!noted.exit) return known;
    // Made once (the event's sync and the relist after it may ask at the same time).
    if (!noted.known) {
      const made = this.#exitedStatus(listed, known.st, noted.exit, noted.oom);
      // A failure is not kept: the next look tries again.
      made.catch(() => noted.known === made && (noted.known = undefined));
      noted.known = made;
    }
    return noted.known;
  }

  /** The status the CRI plugin will give a container that exited as `exit` says (its termination message read now). */
  async #exitedStatus(listed: ContainerState, running: CriContainerStatus, exit: ContainerExitEvent, oom: boolean): Promise<KnownStatus> {
    const { exitCode, exitedAtNs } = exit;
    const reason = oom ? 'OOMKilled' : exitCode === 0 ? 'Completed' : 'Error';
    const st: CriContainerStatus = { ...running, state: 'CONTAINER_EXITED', exitCode, finishedAt: exitedAtNs, reason };
    return { listed, st, message: await this.#terminationMessage(st) };
  }

  async #containerStatus(id: string, listed: ContainerState): Promise<KnownStatus | undefined> {
    const cached = this.#statuses.get(id);
    if (cached && cached.listed === listed) return cached;
    const st = await this.#o.cri.containerStatus(id).catch((err) => {
      ignoreNotFound(err);
      return undefined; // removed between list and status
    });
    if (!st) {
      this.#statuses.delete(id);
      return undefined;
    }
    const known: KnownStatus = { listed, st, message: st.state === 'CONTAINER_EXITED' ? await this.#terminationMessage(st) : st.message };
    // Kept only when both calls agree on the state (not caught mid-transition) and it is a known one.
    if (st.state === listed && listed !== 'CONTAINER_UNKNOWN') this.#statuses.set(id, known);
    else this.#statuses.delete(id);
    return known;
  }

  /** An exited container's message: the runtime's, then its termination-log file or its log's end (termination-message.ts). */
  #terminationMessage(st: CriContainerStatus): Promise<string> {
    return terminationMessage({
      exitCode: st.exitCode,
      reason: st.reason,
      message: st.message,
      terminationMessagePath: st.annotations[K.ANN_TERMINATION_MESSAGE_PATH],
      terminationMessagePolicy: st.annotations[K.ANN_TERMINATION_MESSAGE_POLICY],
      mounts: st.mounts ?? [],
      logPath: st.logPath,
    });
  }

  /**
   * A pod found running (nodelet restarted): its `allocated_pods_state` entry and its running
   * containers' `actuated_pods_state` entries are written again where missing (the files were
   * rebuilt empty after a crash or a corruption), as a kubelet re-admits every pod at start.
   * Writes only what is missing; a write failure is logged by the record, never the pod's.
   */
  async adopted(pod: Pod, observed: ObservedPod): Promise<void> {
    const a = this.#o.allocation;
    const uid = pod.metadata?.uid ?? '';
    if (uid && observed.sandboxes.some((s) => s.ready)) this.#o.cgroups?.track(pod);
    if (!a || !uid || !observed.sandboxes.some((s) => s.ready)) return;
    if (!a.allocated.get(uid)) await a.allocated.setPod(uid, podResourceInfo(pod));
    // By name, the first of each, as a search would find it (a search per container was quadratic).
    const specs = new Map<string, Container>();
    for (const s of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]) if (!specs.has(s.name)) specs.set(s.name, s);
    for (const c of observed.containers) {
      const spec = c.state === 'running' ? specs.get(c.name) : undefined;
      if (spec && !a.actuated.get(uid)?.ContainerResources[c.name]) await a.actuated.setContainer(uid, c.name, containerResources(spec));
    }
  }

  /**
   * What the kubelet does before RunPodSandbox, at once instead of one after the other (they do
   * not depend on each other; in a row they were most of a start's own time): the pod's cgroup
   * with its limits, which exists before the sandbox is put in it (the kubelet's EnsureExists,
   * made before the config, as its SyncPod does); the config; the log directory; the pod's
   * RuntimeClass to its CRI handler (runtime-class.ts: a missing class refuses the sandbox,
   * naming the class). A failure of any is the sandbox's, the first in that order. Meanwhile
   * what the pod is allocated is recorded (admitted; a write failure is logged, never the
   * pod's), and written before the sandbox exists: a restart finds no sandbox without its record.
   */
  async runSandbox(pod: Pod, attempt: number, sent?: () => void): Promise<string> {
    const [, cfg, , rc] = await together(
      this.#o.cgroups?.ensurePod(pod).catch((err: unknown) => {
        throw withReason(err, 'CreatePodSandboxError', 'cannot create the pod cgroup');
      }) ?? Promise.resolve(undefined),
      this.#sandboxConfig(pod, attempt, true).catch((err: unknown) => {
        throw withReason(err, 'CreatePodSandboxError', 'cannot make the pod sandbox config');
      }),
      // A name that cannot be a path fails the config first (the same check, withReason).
      Promise.resolve().then(() => fs.mkdir(this.#logDirectory(pod), { recursive: true, mode: 0o755 })),
      lookupRuntimeHandler(pod, this.#o.objects),
      this.#o.allocation?.allocated.setPod(pod.metadata?.uid ?? '', podResourceInfo(pod)) ?? Promise.resolve(),
    );
    if (rc.ignored) this.#log.warn({ pod: `${pod.metadata?.namespace ?? 'default'}/${pod.metadata?.name}` }, rc.ignored);
    const made = this.#o.cri.runPodSandbox(cfg, rc.handler);
    sent?.();
    return made.catch((err: unknown) => {
      throw withReason(err, 'CreatePodSandboxError', 'cannot create the pod sandbox');
    });
  }

  async stopSandbox(id: string): Promise<void> {
    await this.#o.cri.stopPodSandbox(id).catch(ignoreNotFound);
  }

  async removeSandbox(id: string): Promise<void> {
    await this.#o.cri.removePodSandbox(id);
  }

  async ensureImage(pod: Pod, c: Container, gate: <T>(pull: () => Promise<T>) => Promise<T>): Promise<boolean> {
    // Pull policy, pull secrets as CRI AuthConfig, and who may use a present image: image-puller.ts.
    const ensured = await ensurePodImage(
      {
        cri: this.#o.cri,
        ...(this.#o.imageRecords ? { records: this.#o.imageRecords } : {}),
        ...(this.#o.objects ? { objects: this.#o.objects } : {}),
        ...(this.#o.imageCredentialVerification ? { verification: this.#o.imageCredentialVerification } : {}),
        ...(this.#o.events ? { events: this.#o.events } : {}),
        log: this.#log,
      },
      pod,
      c,
      gate,
    );
    const key = presentKey(pod, c);
    if (ensured.present) this.#present.set(key, ensured.present);
    else this.#present.delete(key);
    return ensured.pulled;
  }

  /**
   * The status of a present image ensureImage used as it is, by pod UID, container and image,
   * until the container's creation reads its user from it (taken once): ImageStatus is asked
   * once per start, as the kubelet's EnsureImageExists asks. An entry whose start went no
   * further is replaced by the container's next ensureImage, or goes with the pod (cleanupPod).
   */
  readonly #present = new Map<string, Image>();

  /** The image's status for the container being created: the one ensureImage just found, else asked now (after a pull). */
  async #imageForStart(pod: Pod, c: Container): Promise<Image | undefined> {
    const key = presentKey(pod, c);
    const found = this.#present.get(key);
    this.#present.delete(key);
    return found ?? (await this.#o.cri.imageStatus(c.image!));
  }

  /** The Service variables' lists (service-env.ts), made on first use; none on a standalone node. */
  #serviceEnv: ServiceEnvSource | undefined;

  async startContainer(s: StartSpec): Promise<string> {
    const { pod, container } = s;
    // The name becomes a path element (the log directory, subPath binds): an API pod's is checked here.
    if (!isDnsLabel(container.name)) throw new NodeletError('INVALID_ARGUMENT', `container name ${JSON.stringify(container.name)} is not a valid DNS-1123 label`, { reason: 'CreateContainerConfigError' });
    // The sandbox's config (CreateContainer takes it again) and the instance's termination-log
    // file are made while the container's config is; a start refused on a config removes the file.
    const messageFile = this.#terminationLogFile(pod, container);
    let config: ContainerConfig;
    let sandboxCfg: PodSandboxConfig;
    try {
      [config, sandboxCfg] = await together(
        this.#containerConfig(s, messageFile),
        this.#sandboxConfig(pod, s.sandboxAttempt).catch((err: unknown) => {
          throw withReason(err, 'CreateContainerConfigError', `container ${container.name}: the pod sandbox config`);
        }),
      );
    } catch (err) {
      await messageFile.then((m) => m && fs.rm(m.hostPath, { force: true })).catch(() => undefined);
      throw err;
    }
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
    await this.#o.allocation?.actuated.setContainer(pod.metadata?.uid ?? '', container.name, containerResources(container));
    if (this.#o.containerLogDir !== undefined && config.logPath) {
      const link = containerLogSymlink(this.#o.containerLogDir, pod.metadata?.name ?? '', pod.metadata?.namespace ?? 'default', container.name, id);
      await createLogSymlink(link, path.join(sandboxCfg.logDirectory!, config.logPath)).catch((err) => this.#log.warn({ link, err: errorMessage(err) }, `cannot create the container log link ${link}: ${errorMessage(err)}`));
    }
    return id;
  }

  /**
   * The container's CRI config with its mounts: seccomp, the image's user (who it runs as
   * unless runAsUser says otherwise, and what runAsNonRoot is checked against, as the
   * kubelet), env with what it reads from the API, volumes, /etc/hosts, the termination log.
   */
  async #containerConfig(s: StartSpec, messageFile: Promise<Mount | undefined>): Promise<ContainerConfig> {
    const { pod, container } = s;
    const seccomp = resolveSeccomp(pod, container, { rootDir: this.#o.rootDir, seccompDefault: this.#o.seccompDefault });
    if (seccomp.profileType === 'Localhost') await checkLocalhostProfile(seccomp.localhostRef!, container.name, seccompDir(this.#o.rootDir));
    let user: ImageUser;
    try {
      user = imageUser(await this.#imageForStart(pod, container));
    } catch (err) {
      throw withReason(err, 'CreateContainerConfigError', `cannot read the user of image "${container.image}"`);
    }
    const nonRoot = runAsNonRootProblem(pod, container, user);
    if (nonRoot) throw new NodeletError('INVALID_ARGUMENT', nonRoot, { reason: 'CreateContainerConfigError' });
    // The sandbox exists before its containers: its IPs are known for env and /etc/hosts.
    const podIPs = pod.spec?.hostNetwork ? [] : await this.#podIPs(s.sandboxId);
    // What env reads from the API (env-sources.ts): each object once for this start, and the Services.
    let envObjects: EnvObjects | undefined;
    try {
      if (this.#o.objects) this.#serviceEnv ??= new ServiceEnvSource(this.#o.objects);
      envObjects = await readEnvObjects(pod, container, this.#o.objects, this.#serviceEnv);
    } catch (err) {
      throw withReason(err, 'CreateContainerConfigError', `container ${container.name}: env`);
    }
    const allocatable = needsAllocatable(container) ? this.#o.nodeAllocatable?.() : undefined;
    let config: ContainerConfig;
    try {
      config = containerConfig(pod, container, {
        restartCount: s.restartCount,
        seccomp,
        imageUser: user,
        quantity: (q) => parseQuantity(String(q)).value,
        ...(this.#o.nodeName ? { nodeName: this.#o.nodeName } : {}),
        ...(this.#o.hostIP ? { hostIP: this.#o.hostIP } : {}),
        ...(podIPs.length ? { podIPs } : {}),
        ...(this.#o.swap ? { swap: this.#o.swap } : {}),
        ...(s.targetContainerId ? { targetContainerId: s.targetContainerId } : {}),
        ...(this.#o.memoryCapacityBytes ? { oomScoreAdj: containerOomScoreAdjust(pod, container, this.#o.memoryCapacityBytes) } : {}),
        ...(envObjects ? { envObjects } : {}),
        ...(allocatable ? { allocatable } : {}),
        onEnvWarning: (w) => this.#o.events?.emit(podRef(pod), 'Warning', w.reason, w.message),
      }) as unknown as ContainerConfig;
    } catch (err) {
      throw withReason(err, 'CreateContainerConfigError', `container ${container.name}`);
    }
    await this.#addMounts(pod, container, config, podIPs);
    const message = await messageFile;
    if (message) (config.mounts ??= []).push(message);
    return config;
  }

  /** The container's volume mounts (subPath binds redone at every creation from the volume as it is now) and /etc/hosts. */
  async #addMounts(pod: Pod, container: Container, config: ContainerConfig, podIPs: string[]): Promise<void> {
    try {
      const env = new Map((config.envs ?? []).map((e) => [e.key, e.value] as const));
      config.mounts = await containerMounts(pod, container, this.#o.rootDir, { env, apiVolumes: this.#apiVolumes, ...(this.#o.mounter ? { mounter: this.#o.mounter } : {}) });
      if (podIPs.length && !mountsOwnEtcHosts(container)) {
        config.mounts.push({ containerPath: '/etc/hosts', hostPath: await this.#writeHostsFile(pod, podIPs), readonly: false });
      }
    } catch (err) {
      throw withReason(err, 'CreateContainerConfigError', `container ${container.name}: volumes`);
    }
  }

  /**
   * The mount of the container's termination-log file, new for each instance, as the
   * kubelet's (which, too, runs the container without it when it cannot be made: logged, and
   * undefined). Never rejects.
   */
  async #terminationLogFile(pod: Pod, container: Container): Promise<Mount | undefined> {
    const messagePath = container.terminationMessagePath ?? DEFAULT_TERMINATION_MESSAGE_PATH;
    if (messagePath === '') return undefined;
    try {
      return { containerPath: messagePath, hostPath: await createTerminationLogFile(this.#o.rootDir, pod.metadata?.uid ?? '', container.name), readonly: false };
    } catch (err) {
      this.#log.warn({ pod: `${pod.metadata?.namespace ?? 'default'}/${pod.metadata?.name}`, container: container.name, err: errorMessage(err) }, `cannot create the termination-log file of container ${container.name}: ${errorMessage(err)}`);
      return undefined;
    }
  }

  /** `<root-dir>/pods/<uid>/etc-hosts`, (re)written whole by rename: a container never sees half a file. */
  async #writeHostsFile(pod: Pod, podIPs: string[]): Promise<string> {
    const content = hostsFileContent(pod, podIPs, this.#o.clusterDomain ?? '');
    const dir = podDir(this.#o.rootDir, pod.metadata?.uid ?? '');
    await fs.mkdir(dir, { recursive: true, mode: 0o750 });
    const file = path.join(dir, 'etc-hosts');
    await writeFileAtomic(file, content, 0o644);
    return file;
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
    this.#apiVolumes.forget(uid);
    for (const key of this.#present.keys()) if (key.startsWith(`${uid}\0`)) this.#present.delete(key);
    const results = await Promise.allSettled([
      removePodDir(this.#o.rootDir, uid, this.#o.mounter),
      removePodLogDirs(this.#o.podLogsDir, uid, this.#o.mounter),
      ...(this.#o.containerLogDir !== undefined ? [removePodLogSymlinks(this.#o.containerLogDir, this.#o.podLogsDir, uid)] : []),
      ...(this.#o.allocation ? [this.#o.allocation.allocated.removePod(uid), this.#o.allocation.actuated.removePod(uid)] : []),
      ...(this.#o.cgroups ? [this.#o.cgroups.removePod(uid)] : []),
    ]);
    const errors = results.flatMap((r) => (r.status === 'rejected' ? [errorMessage(r.reason)] : []));
    if (errors.length) throw new NodeletError('INTERNAL', errors.join('; '));
  }

  /** Pods that left directories, or entries in the resource records (a previous agent's included). */
  async leftoverPods(kept?: (uid: string) => boolean): Promise<string[]> {
    const dirs = await leftoverPodUids(this.#o.rootDir, this.#o.podLogsDir);
    // Orphaned pod cgroups too (the kubelet's cleanupOrphanedPodCgroups at housekeeping).
    const cgroups = (await this.#o.cgroups?.podUids(kept).catch(() => [])) ?? [];
    const a = this.#o.allocation;
    return [...new Set([...dirs, ...cgroups, ...(a ? [...a.allocated.uids(), ...a.actuated.uids()] : [])])];
  }

  async removeContainer(id: string): Promise<void> {
    for (const [uid, kept] of this.#relisted) if (kept.observed.containers.some((c) => c.id === id)) this.#relisted.delete(uid);
    const st = this.#statuses.get(id)?.st ?? (await this.#o.cri.containerStatus(id).catch(() => undefined));
    const labels = this.#o.containerLogDir !== undefined ? st?.labels : undefined;
    this.#statuses.delete(id);
    await this.#o.cri.removeContainer(id);
    // As the kubelet's container GC: the removed container's log file and its rotated ones go
    // too (only under podLogsDir, whatever path the runtime reports).
    const logPath = st?.logPath ? path.resolve(st.logPath) : '';
    if (logPath && logPath.startsWith(path.resolve(this.#o.podLogsDir) + path.sep)) {
      await removeContainerLogFiles(logPath).catch((err) => this.#log.warn({ logPath, err: errorMessage(err) }, `cannot remove the log files of container ${id}: ${errorMessage(err)}`));
    }
    if (labels && this.#o.containerLogDir !== undefined) {
      const link = containerLogSymlink(this.#o.containerLogDir, labels[K.LABEL_POD_NAME] ?? '', labels[K.LABEL_POD_NAMESPACE] ?? 'default', labels[K.LABEL_CONTAINER_NAME] ?? '', id);
      await removeLogSymlink(link).catch((err) => this.#log.warn({ link, err: errorMessage(err) }, `cannot remove the container log link ${link}: ${errorMessage(err)}`));
    }
  }
}
