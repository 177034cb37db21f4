/**
 * The kubelet's cgroup hierarchy on this node (pkg/kubelet/cm: the container manager's node
 * allocatable cgroup, the QoS container manager, the pod container manager), on the cgroup
 * filesystem directly:
 *
 *   <cgroupRoot>/kubepods                  node allocatable (enforceNodeAllocatable: pods)
 *   <cgroupRoot>/kubepods/burstable        CPU shares of the Burstable pods' requests
 *   <cgroupRoot>/kubepods/besteffort       2 shares
 *   <cgroupRoot>/kubepods[/<qos>]/pod<uid> the pod's limits (ResourceConfigForPod)
 *
 * (systemd driver: the same as slices, `kubepods.slice/kubepods-burstable.slice/...`, made as
 * directories by those names; nodelet does not ask systemd over D-Bus.)
 *
 * Who calls: the wiring starts it before the pods (`start`: the hierarchy, idempotent); the
 * CRI adapter makes a pod's cgroup before its sandbox (`ensurePod`) and removes it after the
 * pod's sandboxes are gone (`removePod`, also for orphans found at housekeeping through
 * `podUids`). A host where the hierarchy cannot be made leaves nodelet running without pod
 * cgroups (logged, and an event on the Node), not stopped as the kubelet is.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import type { CgroupDriver } from '../../config/types.js';
import { together } from '../together.js';
import { errorMessage, NodeletError } from '../../errors.js';
import { nodeRef, type EventSink } from '../../events.js';
import type { Logger } from '../../log.js';
import { cgroupPath, kubepodsName, parseCgroupfsName, parseDriverName, podCgroupName, podUidFromDir, qosCgroupName, type CgroupName, type QosClass } from './names.js';
import { nodeAllocatableConfig, podQos, podResourceConfig, qosResourceConfigs, v1Files, v2Files, type PodCgroupOptions, type ResourceConfig } from './resources.js';

/** Where the cgroup hierarchies are mounted. */
export interface CgroupLayout {
  version: 1 | 2;
  /** v1: controller (`cpu`, `memory`, `pids`, `cpuset`, `name=systemd`) -> mount point. */
  controllers: Map<string, string>;
  /** v2: the unified mount (/sys/fs/cgroup). */
  unified?: string;
  /** Every cgroup mount point (v1 hierarchies, and a hybrid host's controller-less cgroup2): where a pod cgroup is removed from. */
  mounts: string[];
}

/** Reads the cgroup mounts from mountinfo (the first mount of each hierarchy). */
export async function readCgroupLayout(mountinfo = '/proc/self/mountinfo'): Promise<CgroupLayout> {
  const text = await fs.readFile(mountinfo, 'utf8');
  const controllers = new Map<string, string>();
  const mounts: string[] = [];
  let v2Mount: string | undefined;
  for (const line of text.split('\n')) {
    const [pre, post] = line.split(' - ');
    if (!pre || !post) continue;
    const mountPoint = pre.split(' ')[4];
    const [fstype, , superOpts = ''] = post.split(' ');
    if (!mountPoint || (fstype !== 'cgroup' && fstype !== 'cgroup2')) continue;
    const mp = mountPoint.replace(/\\040/g, ' ');
    if (mounts.includes(mp)) continue;
    if (fstype === 'cgroup2') {
      v2Mount ??= mp;
      mounts.push(mp);
      continue;
    }
    let added = false;
    for (const opt of superOpts.split(',')) {
      if (['rw', 'ro'].includes(opt) || opt.startsWith('release_agent') || opt === 'clone_children' || opt === 'xattr' || opt === 'noprefix') continue;
      if (!controllers.has(opt)) {
        controllers.set(opt, mp);
        added = true;
      }
    }
    if (added) mounts.push(mp);
  }
  const unifiedOnly = v2Mount !== undefined && controllers.size === 0;
  if (unifiedOnly) return { version: 2, controllers, unified: v2Mount!, mounts };
  if (controllers.size === 0) throw new NodeletError('UNAVAILABLE', `no cgroup hierarchy is mounted (${mountinfo})`);
  return { version: 1, controllers, mounts };
}

export interface NodeAllocatableAbsolute {
  cpuMillis: number;
  memoryBytes: number;
  pids?: number;
}

export interface PodCgroupsOptions {
  layout: CgroupLayout;
  driver: CgroupDriver;
  /** `cgroupRoot` (cgroupfs form, `/` by default). */
  cgroupRoot: string;
  /** What kubepods gets: capacity, or capacity minus kubeReserved and systemReserved with enforceNodeAllocatable `pods` (setup.ts kubepodsLimits). */
  nodeAllocatable: () => NodeAllocatableAbsolute;
  pod: PodCgroupOptions;
  /** enforceNodeAllocatable `system-reserved` / `kube-reserved`: the existing cgroup (driver form) limited to the reservation. */
  reserved?: { who: 'System' | 'Kube'; cgroup: string; config: ResourceConfig }[];
  logger: Logger;
  events?: EventSink;
  nodeName?: string;
}

/** What the CRI adapter needs of the pod cgroups. */
export interface PodCgroupsPort {
  /** The pod's cgroup as the sandbox's `cgroup_parent`; undefined without pod cgroups. Pure. */
  parentOf(pod: Pod): string | undefined;
  /** Makes the pod's cgroup with its limits (idempotent) and returns `parentOf(pod)`. Throws when it cannot. */
  ensurePod(pod: Pod): Promise<string | undefined>;
  /** A running pod found at start (adopted): counted in the QoS cgroups' shares. */
  track(pod: Pod): void;
  /** Removes the pod's cgroup (after its sandboxes are gone); a missing one is fine. */
  removePod(uid: string): Promise<void>;
  /**
   * UIDs of the idle pod cgroups under kubepods (housekeeping removes the orphans). `kept`:
   * pods the caller keeps anyway, whose cgroups are not looked into (a directory listing
   * each: 110 every housekeeping turn on a full node).
   */
  podUids(kept?: (uid: string) => boolean): Promise<string[]>;
}

const V1_WRITE_ORDER = ['cpu', 'memory', 'pids'];
/** What a pod UID may be to name a cgroup directory (no `/`, no `..`). */
const UID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9-]{0,127}$/;
const V2_CONTROLLERS = ['cpuset', 'cpu', 'io', 'memory', 'hugetlb', 'pids'];

export class PodCgroups implements PodCgroupsPort {
  readonly #o: PodCgroupsOptions;
  readonly #kubepods: CgroupName;
  readonly #pods = new Map<string, Pod>();
  /** v2 cgroups whose subtree_control was set. */
  readonly #delegated = new Set<string>();
  #ready = false;
  #lastBurstableShares: number | undefined;

  constructor(o: PodCgroupsOptions) {
    this.#o = o;
    this.#kubepods = kubepodsName(o.cgroupRoot);
  }

  /** The driver's path of kubepods (for logs and tests). */
  kubepodsPath(): string {
    return cgroupPath(this.#kubepods, this.#o.driver);
  }

  /** Creates cgroupRoot, kubepods (with node allocatable) and the QoS cgroups. Never throws: a failure leaves nodelet without pod cgroups, reported. */
  async start(): Promise<void> {
    const log = this.#o.logger;
    try {
      const root = parseCgroupfsName(this.#o.cgroupRoot);
      // cgroupRoot itself, in cgroupfs form under the driver's naming (the kubelet requires it to exist; nodelet makes it).
      await this.#mkdir(root);
      await this.#enforceNodeAllocatable();
      for (const qos of ['Burstable', 'BestEffort'] as const) await this.#mkdir(qosCgroupName(this.#kubepods, qos));
      for (const r of this.#o.reserved ?? []) await this.#enforceReserved(r);
      // The QoS cgroups take their CPU weights now: a hierarchy nodelet may make directories in
      // but not write (a container's delegated cgroup without its controllers, a read-only
      // mount) would refuse every pod cgroup's limits later, so pods run without any instead.
      const cfg = qosResourceConfigs(this.#pods.values());
      await this.#write(qosCgroupName(this.#kubepods, 'Burstable'), cfg.Burstable);
      await this.#write(qosCgroupName(this.#kubepods, 'BestEffort'), cfg.BestEffort);
      this.#lastBurstableShares = cfg.Burstable.cpuShares;
      this.#ready = true;
      log.info({ kubepods: this.kubepodsPath(), driver: this.#o.driver, cgroupVersion: this.#o.layout.version }, `pod cgroups under ${this.kubepodsPath()} (${this.#o.driver}, cgroup v${this.#o.layout.version})`);
    } catch (err) {
      this.#ready = false;
      const message = `cannot create the pod cgroup hierarchy ${this.kubepodsPath()}: ${errorMessage(err)}; pods run without pod cgroups`;
      log.error({ err: errorMessage(err) }, message);
      if (this.#o.nodeName) this.#o.events?.emit(nodeRef(this.#o.nodeName), 'Warning', 'FailedNodeAllocatableEnforcement', message);
    }
  }

  async #enforceNodeAllocatable(): Promise<void> {
    const a = this.#o.nodeAllocatable();
    const config = nodeAllocatableConfig(a);
    await this.#mkdir(this.#kubepods);
    try {
      await this.#write(this.#kubepods, config);
      if (this.#o.nodeName) this.#o.events?.emit(nodeRef(this.#o.nodeName), 'Normal', 'NodeAllocatableEnforced', 'Updated Node Allocatable limit across pods');
    } catch (err) {
      // As the kubelet: the limit may be under what pods use now; the cgroup stays, reported.
      const message = `Failed to update Node Allocatable Limits ${JSON.stringify(this.kubepodsPath())}: ${errorMessage(err)}`;
      this.#o.logger.warn(message);
      if (this.#o.nodeName) this.#o.events?.emit(nodeRef(this.#o.nodeName), 'Warning', 'FailedNodeAllocatableEnforcement', message);
    }
  }

  /** The kubelet's enforceExistingCgroup: the cgroup must exist; its limits become the reservation. Reported, never thrown. */
  async #enforceReserved(r: NonNullable<PodCgroupsOptions['reserved']>[number]): Promise<void> {
    const name = parseDriverName(r.cgroup, this.#o.driver);
    const rel = cgroupPath(name, this.#o.driver);
    const l = this.#o.layout;
    const probe = l.version === 2 ? path.join(l.unified!, rel) : path.join(l.controllers.get('memory') ?? l.mounts[0]!, rel);
    const ref = this.#o.nodeName ? nodeRef(this.#o.nodeName) : undefined;
    try {
      await fs.access(probe);
    } catch {
      const message = `Failed to enforce ${r.who} Reserved Cgroup Limits on ${JSON.stringify(r.cgroup)}: ${JSON.stringify(rel)} cgroup does not exist`;
      this.#o.logger.warn(message);
      if (ref) this.#o.events?.emit(ref, 'Warning', 'FailedNodeAllocatableEnforcement', message);
      return;
    }
    try {
      await this.#write(name, r.config);
      if (ref) this.#o.events?.emit(ref, 'Normal', 'NodeAllocatableEnforced', `Updated limits on ${r.who.toLowerCase()} reserved cgroup ${r.cgroup}`);
    } catch (err) {
      const message = `Failed to enforce ${r.who} Reserved Cgroup Limits on ${JSON.stringify(r.cgroup)}: ${errorMessage(err)}`;
      this.#o.logger.warn(message);
      if (ref) this.#o.events?.emit(ref, 'Warning', 'FailedNodeAllocatableEnforcement', message);
    }
  }

  parentOf(pod: Pod): string | undefined {
    if (!this.#ready) return undefined;
    return cgroupPath(podCgroupName(this.#kubepods, podQos(pod), pod.metadata?.uid ?? ''), this.#o.driver);
  }

  async ensurePod(pod: Pod): Promise<string | undefined> {
    if (!this.#ready) return undefined;
    const uid = pod.metadata?.uid ?? '';
    // A UID becomes a directory name: only what a UID can be.
    if (!UID_PATTERN.test(uid)) throw new NodeletError('INVALID_ARGUMENT', `pod UID ${JSON.stringify(uid)} cannot name a cgroup`);
    const name = podCgroupName(this.#kubepods, podQos(pod), uid);
    await this.#mkdir(name);
    await this.#write(name, podResourceConfig(pod, this.#o.pod));
    this.#pods.set(uid, pod);
    await this.#updateQos(false);
    return cgroupPath(name, this.#o.driver);
  }

  track(pod: Pod): void {
    const uid = pod.metadata?.uid;
    if (!uid || this.#pods.has(uid)) return;
    this.#pods.set(uid, pod);
    void this.#updateQos(false);
  }

  async removePod(uid: string): Promise<void> {
    const known = this.#pods.get(uid);
    this.#pods.delete(uid);
    if (!UID_PATTERN.test(uid)) return; // never a cgroup nodelet made (ensurePod refuses it)
    // Processes left in a pod cgroup are killed only for a pod this nodelet ran: an orphan
    // found at housekeeping may be another agent's on a shared cgroupRoot (podUids lists only
    // idle ones; a busy one is left).
    if (!this.#ready) return;
    const classes: QosClass[] = known ? [podQos(known)] : ['Guaranteed', 'Burstable', 'BestEffort'];
    const errors: string[] = [];
    for (const qos of classes) {
      const rel = cgroupPath(podCgroupName(this.#kubepods, qos, uid), this.#o.driver);
      for (const mount of this.#o.layout.mounts) {
        try {
          await removeTree(path.join(mount, rel), known !== undefined);
        } catch (err) {
          errors.push(`${path.join(mount, rel)}: ${errorMessage(err)}`);
        }
      }
    }
    await this.#updateQos(false);
    if (errors.length) throw new NodeletError('UNAVAILABLE', `cannot remove the cgroup of pod ${uid}: ${errors.join('; ')}`);
  }

  async podUids(kept?: (uid: string) => boolean): Promise<string[]> {
    if (!this.#ready) return [];
    const base = this.#o.layout.version === 2 ? this.#o.layout.unified! : (this.#o.layout.controllers.get('memory') ?? this.#o.layout.mounts[0]!);
    const out = new Set<string>();
    for (const qos of ['Guaranteed', 'Burstable', 'BestEffort'] as const) {
      let entries: import('node:fs').Dirent[];
      try {
        entries = await fs.readdir(path.join(base, cgroupPath(qosCgroupName(this.#kubepods, qos), this.#o.driver)), { withFileTypes: true });
      } catch {
        continue;
      }
      for (const e of entries) {
        const uid = e.isDirectory() ? podUidFromDir(e.name, this.#o.driver) : undefined;
        // Only idle pod cgroups (no container cgroup under them): a pod being set up or run by
        // anyone keeps its cgroup.
        if (uid && !kept?.(uid) && !(await hasSubdirectory(path.join(base, cgroupPath(qosCgroupName(this.#kubepods, qos), this.#o.driver), e.name)))) out.add(uid);
      }
    }
    return [...out];
  }

  /** The QoS cgroups' CPU shares from the pods now known (written when they changed, or `force`). */
  async #updateQos(force: boolean): Promise<void> {
    if (!this.#ready) return;
    const cfg = qosResourceConfigs(this.#pods.values());
    if (!force && cfg.Burstable.cpuShares === this.#lastBurstableShares) return;
    try {
      await this.#write(qosCgroupName(this.#kubepods, 'Burstable'), cfg.Burstable);
      if (force) await this.#write(qosCgroupName(this.#kubepods, 'BestEffort'), cfg.BestEffort);
      this.#lastBurstableShares = cfg.Burstable.cpuShares;
    } catch (err) {
      this.#o.logger.warn({ err: errorMessage(err) }, `cannot update the QoS cgroups: ${errorMessage(err)}`);
    }
  }

  /** Makes the cgroup (and its parents) in every hierarchy nodelet writes to. */
  async #mkdir(name: CgroupName): Promise<void> {
    const rel = cgroupPath(name, this.#o.driver);
    const l = this.#o.layout;
    if (l.version === 2) {
      // Each parent hands its controllers down (cgroup.subtree_control), root first.
      const parts = rel.split('/').filter(Boolean);
      for (let i = 0; i < parts.length; i++) {
        const parent = path.join(l.unified!, ...parts.slice(0, i));
        await this.#delegate(parent);
        await fs.mkdir(path.join(parent, parts[i]!), { recursive: true });
      }
      return;
    }
    // Every hierarchy at once (a v1 host has a dozen; one after the other they were most of a
    // pod start's own time). Each waits for its own mkdir only.
    const make = async (mount: string) => {
      await fs.mkdir(path.join(mount, rel), { recursive: true });
      if (mount === l.controllers.get('cpuset')) await initCpuset(mount, rel);
    };
    await together(...l.mounts.filter((mount) => mount !== l.unified).map(make));
  }

  async #delegate(dir: string): Promise<void> {
    if (this.#delegated.has(dir)) return;
    const available = ((await fs.readFile(path.join(dir, 'cgroup.controllers'), 'utf8').catch(() => '')) as string).split(/\s+/);
    const enabled = ((await fs.readFile(path.join(dir, 'cgroup.subtree_control'), 'utf8').catch(() => '')) as string).split(/\s+/);
    for (const c of V2_CONTROLLERS) {
      if (!available.includes(c) || enabled.includes(c)) continue;
      await fs.writeFile(path.join(dir, 'cgroup.subtree_control'), `+${c}`).catch((err: unknown) => this.#o.logger.debug({ dir, controller: c, err: errorMessage(err) }, 'cannot enable a cgroup controller'));
    }
    this.#delegated.add(dir);
  }

  async #write(name: CgroupName, r: ResourceConfig): Promise<void> {
    const rel = cgroupPath(name, this.#o.driver);
    const l = this.#o.layout;
    if (l.version === 2) {
      for (const [file, value] of Object.entries(v2Files(r))) await writeControl(path.join(l.unified!, rel, file), value);
      return;
    }
    const files = v1Files(r);
    for (const ctl of V1_WRITE_ORDER) {
      const mount = l.controllers.get(ctl);
      if (!mount || !files[ctl]) continue;
      for (const [file, value] of Object.entries(files[ctl]!)) await writeControl(path.join(mount, rel, file), value);
    }
  }
}

async function writeControl(file: string, value: string): Promise<void> {
  try {
    await fs.writeFile(file, value);
  } catch (err) {
    throw new NodeletError('UNAVAILABLE', `cannot write ${value} to ${file}: ${errorMessage(err)}`);
  }
}

/**
 * cgroup v1 cpuset: a new cgroup has no CPUs or memory nodes until given its parent's (a
 * process cannot join it before). As libcontainer's cpusetEnsureParent: a cgroup without
 * them takes its parent's, the parent seen to first the same way, up to the hierarchy's root.
 * Only what is empty is looked above: a new pod's cgroup reads its own files and its parent's
 * (made at start), and writes its own. A file that cannot be read gives nothing to inherit.
 */
async function initCpuset(mount: string, rel: string): Promise<void> {
  const leaf = path.join(mount, rel);
  await Promise.all(['cpuset.cpus', 'cpuset.mems'].map((f) => ensureCpuset(mount, leaf, f)));
}

/** `dir`'s value of cpuset file `f`: its own, or its parent's written to it ('' when there is none to give). */
async function ensureCpuset(mount: string, dir: string, f: string): Promise<string> {
  const own = await fs.readFile(path.join(dir, f), 'utf8').then((t) => t.trim(), () => undefined);
  if (own !== '') return own ?? '';
  if (path.relative(mount, dir) === '') return '';
  const inherited = await ensureCpuset(mount, path.dirname(dir), f);
  if (!inherited) return '';
  return fs.writeFile(path.join(dir, f), inherited).then(() => inherited, () => '');
}

async function hasSubdirectory(dir: string): Promise<boolean> {
  try {
    return (await fs.readdir(dir, { withFileTypes: true })).some((e) => e.isDirectory());
  } catch {
    return false;
  }
}

/**
 * Removes a cgroup directory and the cgroups under it, deepest first (rmdir: a cgroup's
 * control files go with it). A cgroup that still has processes is busy: with `kill`, its
 * processes are killed (as the kubelet's pod container manager does before Destroy) and the
 * removal tried again, a few times. A missing directory is fine.
 */
async function removeTree(dir: string, kill: boolean): Promise<void> {
  let entries: import('node:fs').Dirent[];
  try {
    entries = await fs.readdir(dir, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  for (const e of entries) if (e.isDirectory()) await removeTree(path.join(dir, e.name), kill);
  for (let attempt = 0; ; attempt++) {
    try {
      await fs.rmdir(dir);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'EBUSY' || !kill || attempt >= 5) throw err;
      const procs = await fs.readFile(path.join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
      for (const pid of procs.split('\n').map(Number).filter((n) => Number.isInteger(n) && n > 1)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
      await new Promise((r) => setTimeout(r, 50 * (attempt + 1)));
    }
  }
}
