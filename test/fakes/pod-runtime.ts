/**
 * An in-memory PodRuntime (the port the pod workers use; src/pods/cri/runtime-port.ts) with
 * the same contract as the CRI adapter: sandboxes and containers keyed by ID, the kubelet's
 * restart counts and hashes, stops that make running containers exit 137. Records every
 * call in `calls`; tests inject failures (`failStart`, `failSandbox`, `failStopSandbox`),
 * hold pulls open (`pulls`) and end containers (`exit`); `nodeName` and a sandbox's `node`
 * play the adapter's `io.kubernetes.nodelet.node` mark. The port's contract suite
 * (test/integration/runtime/pod-runtime-contract.test.ts) runs the same cases against this
 * fake and the CRI adapter on containerd.
 */
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import type { Clock } from '../../src/clock.js';
import { NodeletError } from '../../src/errors.js';
import type { ObservedContainer, ObservedPod, ObservedSandbox } from '../../src/pods/sync/observed.js';
import { containerHash } from '../../src/pods/sync/plan.js';
import type { PodRuntime, StartSpec } from '../../src/pods/cri/runtime-port.js';

export class MemRuntime implements PodRuntime {
  sandboxes = new Map<string, ObservedSandbox & { uid: string; name: string; namespace: string; node?: string }>();
  /** As the adapter's nodeName: sandboxes it runs are marked with it, and pods marked with another name are `foreign`. */
  nodeName: string | undefined;
  /** The IP a pod with its own network gets in its sandbox (none unless set). */
  podIP: string | undefined;
  containers = new Map<string, ObservedContainer & { uid: string; grace: number }>();
  calls: string[] = [];
  failStart = new Map<string, NodeletError>();
  n = 0;
  constructor(private clock: Clock) {}
  async listPods(): Promise<ObservedPod[]> {
    const uids = new Set([...this.sandboxes.values()].map((s) => s.uid));
    return Promise.all([...uids].map((u) => this.observePod(u)));
  }
  async observePod(uid: string): Promise<ObservedPod> {
    const sbs = [...this.sandboxes.values()].filter((s) => s.uid === uid);
    const cs = [...this.containers.values()].filter((c) => c.uid === uid);
    return {
      uid,
      name: sbs[0]?.name ?? '',
      // As the CRI adapter: a pod the runtime knows nothing of is in `default`.
      namespace: sbs[0]?.namespace ?? 'default',
      sandboxes: sbs.map(({ id, attempt, ready, createdAt, ips }) => ({ id, attempt, ready, createdAt, ...(ready && ips ? { ips } : {}) })),
      containers: cs.map(({ uid: _u, grace: _g, ...c }) => c),
      // The containers carry the pod's grace period (the adapter's terminationGracePeriod annotation).
      ...(cs.length ? { gracePeriodSeconds: cs[0]!.grace } : {}),
      ...(sbs[0]?.node ? { node: sbs[0].node, ...(this.nodeName && sbs[0].node !== this.nodeName ? { foreign: true } : {}) } : {}),
    };
  }
  /** UIDs `adopted` was called for, in order (not in `calls`). */
  adoptedPods: string[] = [];
  async adopted(pod: Pod) {
    this.adoptedPods.push(pod.metadata!.uid!);
  }
  failSandbox: NodeletError | undefined;
  async runSandbox(pod: Pod, attempt: number, sent?: () => void) {
    const id = `s${++this.n}`;
    this.calls.push(`runSandbox ${pod.metadata!.name} ${attempt}`);
    sent?.();
    if (this.failSandbox) throw this.failSandbox;
    this.leftovers.add(pod.metadata!.uid!);
    const ips = this.podIP && !pod.spec?.hostNetwork ? [this.podIP] : undefined;
    this.sandboxes.set(id, { id, attempt, ready: true, createdAt: this.clock.now(), uid: pod.metadata!.uid!, name: pod.metadata!.name!, namespace: pod.metadata!.namespace!, ...(this.nodeName ? { node: this.nodeName } : {}), ...(ips ? { ips } : {}) });
    return id;
  }
  async sandboxIPs(id: string) {
    const s = this.sandboxes.get(id);
    return s?.ready ? (s.ips ?? []) : [];
  }
  /** When set, StopPodSandbox fails with it (a runtime that cannot stop a sandbox). */
  failStopSandbox: NodeletError | undefined;
  async stopSandbox(id: string) {
    this.calls.push(`stopSandbox ${id}`);
    if (this.failStopSandbox) throw this.failStopSandbox;
    const s = this.sandboxes.get(id);
    if (s) s.ready = false;
    for (const c of this.containers.values()) if (c.podSandboxId === id) this.#end(c, 137);
  }
  /** As RemovePodSandbox: the sandbox goes with the containers still in it. */
  async removeSandbox(id: string) {
    this.calls.push(`removeSandbox ${id}`);
    this.sandboxes.delete(id);
    for (const [cid, c] of this.containers) if (c.podSandboxId === id) this.containers.delete(cid);
  }
  /** A running container exits as the runtime reports it: exit code, finish time, reason `Completed` or `Error`. */
  #end(c: ObservedContainer, exitCode: number): void {
    if (c.state === 'running') Object.assign(c, { state: 'exited', exitCode, finishedAt: this.clock.now(), reason: exitCode === 0 ? 'Completed' : 'Error' });
  }
  present = new Set<string>(['busybox']);
  pulls: { image: string; release: () => void }[] = [];
  async ensureImage(_pod: Pod, c: Container, gate: <T>(pull: () => Promise<T>) => Promise<T>) {
    if (this.present.has(c.image!)) return false;
    await gate(
      () =>
        new Promise<void>((resolve) =>
          this.pulls.push({
            image: c.image!,
            release: () => {
              this.present.add(c.image!);
              resolve();
            },
          }),
        ),
    );
    return true;
  }
  /** Every StartSpec asked for, in order (an ephemeral container's target ID among them). */
  readonly startSpecs: StartSpec[] = [];
  async startContainer(s: StartSpec) {
    this.startSpecs.push(s);
    const err = this.failStart.get(s.container.name);
    if (err) throw err;
    const id = `c${++this.n}`;
    this.calls.push(`startContainer ${s.container.name} ${s.restartCount}`);
    this.containers.set(id, {
      id, name: s.container.name, podSandboxId: s.sandboxId, attempt: s.restartCount, state: 'running', restartCount: s.restartCount,
      hash: containerHash(s.container), image: s.container.image!, imageRef: 'sha256:x', createdAt: this.clock.now(), startedAt: this.clock.now(), uid: s.pod.metadata!.uid!,
      grace: s.pod.spec?.terminationGracePeriodSeconds ?? 30,
    });
    return id;
  }
  graces: number[] = [];
  async stopContainer(id: string, grace: number) {
    this.calls.push(`stopContainer ${id}`);
    this.graces.push(grace);
    const c = this.containers.get(id);
    if (c) this.#end(c, 137);
  }
  async removeContainer(id: string) {
    this.calls.push(`removeContainer ${id}`);
    this.containers.delete(id);
  }
  /** Exit code of ExecSync per container name (default 0). */
  execExit = new Map<string, number>();
  async execSync(id: string, cmd: string[]) {
    const c = this.containers.get(id);
    this.calls.push(`exec ${c?.name} ${cmd.join(' ')}`);
    if (!c || c.state !== 'running') throw new NodeletError('INTERNAL', `container ${id} is not running`);
    return { exitCode: this.execExit.get(c.name) ?? 0, stdout: Buffer.from(''), stderr: Buffer.from('') };
  }
  /** UIDs with directories on the node: added when a sandbox runs, gone with cleanupPod. */
  leftovers = new Set<string>();
  async cleanupPod(uid: string) {
    this.calls.push(`cleanupPod ${uid}`);
    this.leftovers.delete(uid);
  }
  /** What the last leftoverPods call was told the caller keeps anyway. */
  leftoverKept: ((uid: string) => boolean) | undefined;
  async leftoverPods(kept?: (uid: string) => boolean) {
    this.leftoverKept = kept;
    return [...this.leftovers];
  }
  runtimeName() {
    return 'containerd';
  }
  exit(name: string, exitCode: number) {
    for (const c of this.containers.values()) if (c.name === name) this.#end(c, exitCode);
  }
}
