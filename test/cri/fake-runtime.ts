/**
 * A CRI server for tests: speaks proto/api.proto (the same runtime.v1 services nodelet's
 * client uses) over a unix socket with grpc-js, and keeps sandboxes, containers and images
 * in memory. It behaves like containerd 1.6 where nodelet depends on it (FACTS.md):
 * reserved names, NOT_FOUND for Stop of an unknown ID, OK for Remove of an unknown ID,
 * ImageStatus of an absent image answers no image, PullImage asks a "registry" (only
 * `pullable` images succeed, present or not), a missing Localhost seccomp file fails
 * CreateContainer with UNKNOWN and containerd's message, exit reasons `Completed`/`Error`.
 *
 * Containers run nothing. A container whose command is `sh -c "exit N"` (or `true` /
 * `false`) exits with N right after StartContainer, like the real one would; any other
 * keeps running until `exitContainer(id, code)`, StopContainer (exit 137, as a SIGKILL
 * after the grace period), or a stop of its sandbox.
 *
 * A sandbox with its own network gets the next IP of the pod CIDR UpdateRuntimeConfig
 * gave (`podCIDR`; 10.88.0.0/16, containerd's default, before any), from .2 on; a
 * hostNetwork sandbox none.
 *
 * ExecSync answers the same scripted exit codes (any other command exits 0), or what
 * `execResult` says for the container.
 *
 * Test controls: `failWith` (error per method, optionally N times), `setLatency` (per
 * method), `hold`/`release` (calls of a method wait until released, or until their client
 * goes: a pull a test keeps in flight), `allowPull` (more images "in the registry"),
 * `setConditions` (Status), `checkpointDelayMs`, `kill()`/`restart()` (a crashed
 * and restarted runtime on the same socket), `calls` (every request, in order),
 * `requireAuth` (a private registry refusing pulls without its credentials) and
 * `pullAuths` (the AuthConfig each PullImage carried), `runtimeHandlers` (the handlers
 * RunPodSandbox accepts; each sandbox records the `runtime_handler` it was run with).
 * CheckpointContainer writes a real tar archive (tar-stream) at `location`, or what
 * `checkpointArchive` says (truncated, empty, garbage, none).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import tar from 'tar-stream';
import { loadCriPackage } from './proto-grpc.js';
import type {
  ContainerConfig,
  ContainerState,
  Image,
  PodSandboxConfig,
  PodSandboxState,
  RuntimeCondition,
} from '../../src/runtime/types.js';

export interface RecordedCall {
  method: string;
  request: Record<string, unknown>;
  /** Date.now() when the server received it. */
  at: number;
}

export interface InjectedError {
  code: grpc.status;
  message: string;
  /** How many calls fail; default: every call until cleared. */
  times?: number;
}

interface FakeSandbox {
  id: string;
  config: PodSandboxConfig;
  name: string;
  state: PodSandboxState;
  createdAt: number;
  runtimeHandler: string;
  /** '' for a hostNetwork sandbox. */
  ip: string;
}

interface FakeContainer {
  id: string;
  sandboxId: string;
  name: string;
  config: ContainerConfig;
  state: ContainerState;
  createdAt: number;
  startedAt: number;
  finishedAt: number;
  exitCode: number;
  reason: string;
  message: string;
  imageId: string;
  imageRef: string;
}

export interface FakeRuntimeOptions {
  /** Socket path; default a fresh temporary directory's `cri.sock` (removed on stop). */
  socketPath?: string;
  /** Images present at start, by full reference; default docker.io/local/{busybox,pause}:latest. */
  images?: string[];
  /** Images PullImage can fetch (besides present ones); others fail like an unreachable registry. */
  pullable?: string[];
}

const NANOS_PER_MS = 1_000_000;
const nowNanos = () => Date.now() * NANOS_PER_MS;
const newId = () => crypto.randomBytes(32).toString('hex');

/** Normalizes an image reference the way containerd does: docker.io/library, :latest. */
export function normalizeImageRef(ref: string): string {
  if (ref.startsWith('sha256:')) return ref;
  let name = ref;
  const slash = name.indexOf('/');
  const first = slash < 0 ? '' : name.slice(0, slash);
  if (slash < 0) name = `docker.io/library/${name}`;
  else if (!first.includes('.') && !first.includes(':') && first !== 'localhost') name = `docker.io/${name}`;
  const lastPart = name.slice(name.lastIndexOf('/') + 1);
  if (!lastPart.includes(':') && !lastPart.includes('@')) name += ':latest';
  return name;
}

function grpcError(code: grpc.status, details: string): grpc.ServiceError {
  const err = new Error(details) as grpc.ServiceError;
  err.code = code;
  err.details = details;
  err.metadata = new grpc.Metadata();
  return err;
}

function labelsMatch(labels: Record<string, string>, selector: Record<string, string> | undefined): boolean {
  return Object.entries(selector ?? {}).every(([k, v]) => labels[k] === v);
}

/** Exit code of commands the fake can "run": `sh -c "exit N"`, `true`, `false`. */
function scriptedExit(cfg: ContainerConfig): number | undefined {
  const argv = [...(cfg.command ?? []), ...(cfg.args ?? [])];
  const bin = (s: string | undefined) => (s ?? '').replace(/^\/(usr\/)?bin\//, '');
  if (argv.length === 1 && bin(argv[0]) === 'true') return 0;
  if (argv.length === 1 && bin(argv[0]) === 'false') return 1;
  if (argv.length === 3 && bin(argv[0]) === 'sh' && argv[1] === '-c') {
    const m = /^\s*exit\s+(\d+)\s*$/.exec(argv[2]!);
    if (m) return Number(m[1]) & 0xff;
  }
  return undefined;
}

export class FakeRuntime {
  readonly calls: RecordedCall[] = [];
  readonly sandboxes = new Map<string, FakeSandbox>();
  readonly containers = new Map<string, FakeContainer>();
  /** Present images by ID. */
  readonly images = new Map<string, Image>();
  /** Runtime conditions Status reports. */
  conditions: RuntimeCondition[] = [
    { type: 'RuntimeReady', status: true, reason: '', message: '' },
    { type: 'NetworkReady', status: true, reason: '', message: '' },
  ];
  /** Delay before CheckpointContainer writes its archive and answers. */
  checkpointDelayMs = 0;
  /**
   * What CheckpointContainer leaves at `location` while answering OK: `whole` (default, a
   * real tar archive), `truncated` (that archive cut in the middle of a member, as a
   * runtime that died or ran out of disk while writing), `empty` (a zero-byte file),
   * `garbage` (bytes that are no tar) or `none` (nothing at all).
   */
  checkpointArchive: 'whole' | 'truncated' | 'empty' | 'garbage' | 'none' = 'whole';
  /** What ExecSync answers for a container name and command (undefined: the scripted default). */
  execResult: ((container: string, cmd: string[]) => { exitCode: number; stdout?: string } | undefined) | undefined;
  version = { version: '0.1.0', runtimeName: 'fake-cri', runtimeVersion: '1.0.0', runtimeApiVersion: 'v1' };
  /** The pod CIDR of the last UpdateRuntimeConfig that carried one ('' before). */
  podCIDR = '';
  /**
   * The runtime handlers configured besides the default (""): RunPodSandbox with another
   * fails as containerd's does. Undefined (the default): any handler is accepted.
   */
  runtimeHandlers: string[] | undefined;
  #nextIp = 2;

  readonly #errors = new Map<string, InjectedError>();
  readonly #latency = new Map<string, number>();
  readonly #holds = new Map<string, { times: number; waiting: Set<() => void> }>();
  readonly #reserved = new Map<string, string>(); // name -> owner id
  readonly #pullable: Set<string>;
  readonly #private = new Map<string, { username: string; password: string }>();
  #server: grpc.Server | undefined;
  #ownedDir: string | undefined;

  constructor(
    readonly socketPath: string,
    o: FakeRuntimeOptions,
  ) {
    for (const ref of o.images ?? ['docker.io/local/busybox:latest', 'docker.io/local/pause:latest']) this.addImage(ref);
    this.#pullable = new Set((o.pullable ?? []).map(normalizeImageRef));
  }

  get endpoint(): string {
    return `unix://${this.socketPath}`;
  }

  // ------------------------------------------------------------------ test API

  /** Every call of `method` fails with this error (`times` calls, or until cleared with undefined). */
  failWith(method: string, err: InjectedError | undefined): void {
    if (err) this.#errors.set(method, { ...err });
    else this.#errors.delete(method);
  }

  /** Adds latency (ms) before `method` answers; 0 clears. */
  setLatency(method: string, ms: number): void {
    if (ms > 0) this.#latency.set(method, ms);
    else this.#latency.delete(method);
  }

  /**
   * The next `times` calls of `method` (default: every one until released) are recorded,
   * then wait until `release(method)`; a held call whose client went away (cancelled, e.g. a
   * killed nodelet) fails CANCELLED without running, as a runtime stops on a cancelled context.
   */
  hold(method: string, times = Number.POSITIVE_INFINITY): void {
    this.release(method);
    this.#holds.set(method, { times, waiting: new Set() });
  }

  /** Lets the held calls of `method` run, and holds no more. */
  release(method: string): void {
    const h = this.#holds.get(method);
    this.#holds.delete(method);
    for (const go of h?.waiting ?? []) go();
  }

  /** Calls of `method` held now. */
  held(method: string): number {
    return this.#holds.get(method)?.waiting.size ?? 0;
  }

  /**
   * A private registry: PullImage of an image whose normalized reference starts with
   * `prefix` (a host with port, `registry.example:5000/`, or a repository path) succeeds only
   * with these credentials in its AuthConfig (username and password, or `auth` as base64
   * `user:password`, as containerd takes either); otherwise it fails UNKNOWN with
   * containerd 1.6's words for a registry's 401. The image must still be pullable.
   * `undefined` removes the requirement.
   */
  requireAuth(prefix: string, cred: { username: string; password: string } | undefined): void {
    if (cred) this.#private.set(prefix, { ...cred });
    else this.#private.delete(prefix);
  }

  /** The AuthConfig of each PullImage, in order (null: none sent). */
  pullAuths(): ({ username: string; password: string; auth: string; serverAddress: string; identityToken: string; registryToken: string } | null)[] {
    return this.callsOf('PullImage').map((c) => (c.request.auth as never) ?? null);
  }

  /** More images PullImage can fetch (as the `pullable` option). */
  allowPull(...refs: string[]): void {
    for (const r of refs) this.#pullable.add(normalizeImageRef(r));
  }

  setConditions(conditions: RuntimeCondition[]): void {
    this.conditions = conditions.map((c) => ({ ...c }));
  }

  /** Makes a running (or created) container exit with `code`, as if its process ended. */
  exitContainer(id: string, code: number): void {
    const c = this.containers.get(id);
    if (!c) throw new Error(`fake runtime: no container ${id}`);
    if (c.state === 'CONTAINER_EXITED') return;
    this.#finish(c, code);
  }

  /** Adds a present image; returns its ID. */
  addImage(ref: string): string {
    const full = normalizeImageRef(ref);
    const existing = this.#findImage(full);
    if (existing) return existing.id;
    const id = `sha256:${crypto.createHash('sha256').update(full).digest('hex')}`;
    this.images.set(id, { id, repoTags: [full], repoDigests: [], size: 1_048_576, uid: null, username: '', pinned: false });
    return id;
  }

  /** Calls of one method, in order. */
  callsOf(method: string): RecordedCall[] {
    return this.calls.filter((c) => c.method === method);
  }

  // ------------------------------------------------------------------ lifecycle

  async listen(ownedDir?: string): Promise<void> {
    this.#ownedDir = ownedDir;
    await fsp.rm(this.socketPath, { force: true });
    const server = new grpc.Server();
    const pkg = loadCriPackage();
    server.addService(pkg.RuntimeService.service, this.#handlers(RUNTIME_METHODS));
    server.addService(pkg.ImageService.service, this.#handlers(IMAGE_METHODS));
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(this.endpoint, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
    );
    this.#server = server;
  }

  /**
   * Stops serving as a crashed runtime would: open calls are cancelled and the socket is
   * removed; the state (sandboxes, containers, images) stays for `restart()`.
   */
  async kill(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    if (server) server.forceShutdown();
    await fsp.rm(this.socketPath, { force: true });
  }

  /** Serves again on the same socket with the same state, as a restarted runtime would. */
  async restart(): Promise<void> {
    await this.kill();
    await this.listen(this.#ownedDir);
  }

  /** Stops serving for good and removes the temporary directory it made. Idempotent. */
  async stop(): Promise<void> {
    await this.kill();
    if (this.#ownedDir) await fsp.rm(this.#ownedDir, { recursive: true, force: true });
  }

  // ------------------------------------------------------------------ gRPC plumbing

  #handlers(methods: readonly string[]): grpc.UntypedServiceImplementation {
    const impl: grpc.UntypedServiceImplementation = {};
    for (const method of methods) {
      impl[method] = (call: grpc.ServerUnaryCall<Record<string, unknown>, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        void this.#dispatch(method, call, cb);
      };
    }
    return impl;
  }

  async #dispatch(method: string, call: grpc.ServerUnaryCall<Record<string, unknown>, unknown>, cb: grpc.sendUnaryData<unknown>): Promise<void> {
    this.calls.push({ method, request: call.request, at: Date.now() });
    let cancelled = false;
    call.on('cancelled', () => {
      cancelled = true;
    });
    try {
      const hold = this.#holds.get(method);
      if (hold && hold.times > 0) {
        hold.times--;
        await new Promise<void>((resolve) => {
          const go = () => {
            hold.waiting.delete(go);
            resolve();
          };
          hold.waiting.add(go);
          call.on('cancelled', go);
        });
        if (cancelled) throw grpcError(grpc.status.CANCELLED, 'context canceled');
      }
      const latency = this.#latency.get(method);
      if (latency) await new Promise((r) => setTimeout(r, latency));
      const injected = this.#errors.get(method);
      if (injected) {
        if (injected.times !== undefined && --injected.times <= 0) this.#errors.delete(method);
        throw grpcError(injected.code, injected.message);
      }
      const handler = (this as unknown as Record<string, (req: Record<string, unknown>, isCancelled: () => boolean) => Promise<unknown> | unknown>)[`rpc${method}`]!;
      const res = await handler.call(this, call.request, () => cancelled);
      cb(null, res ?? {});
    } catch (err) {
      const e = err as Partial<grpc.ServiceError>;
      cb(typeof e.code === 'number' ? (err as grpc.ServiceError) : grpcError(grpc.status.UNKNOWN, String((err as Error)?.message ?? err)));
    }
  }

  #findImage(ref: string): Image | undefined {
    if (this.images.has(ref)) return this.images.get(ref);
    const full = normalizeImageRef(ref);
    for (const img of this.images.values()) if (img.repoTags.includes(full) || img.id === ref) return img;
    return undefined;
  }

  /** containerd 1.6 words NOT_FOUND differently per call; `msg` is its message for this one. */
  #sandbox(id: string, msg = `an error occurred when try to find sandbox "${id}": not found`): FakeSandbox {
    const s = this.sandboxes.get(id);
    if (!s) throw grpcError(grpc.status.NOT_FOUND, msg);
    return s;
  }

  #container(id: string): FakeContainer {
    const c = this.containers.get(id);
    if (!c) throw grpcError(grpc.status.NOT_FOUND, `an error occurred when try to find container "${id}": not found`);
    return c;
  }

  #reserve(name: string, id: string, what: 'sandbox' | 'container'): void {
    const owner = this.#reserved.get(name);
    if (owner !== undefined) {
      throw grpcError(grpc.status.UNKNOWN, `failed to reserve ${what} name "${name}": name "${name}" is reserved for "${owner}"`);
    }
    this.#reserved.set(name, id);
  }

  #finish(c: FakeContainer, code: number): void {
    c.state = 'CONTAINER_EXITED';
    c.exitCode = code;
    c.finishedAt = nowNanos();
    if (!c.startedAt) c.startedAt = c.finishedAt;
    c.reason = code === 0 ? 'Completed' : 'Error';
  }

  // ------------------------------------------------------------------ RuntimeService

  rpcVersion() {
    return this.version;
  }

  rpcStatus() {
    return { status: { conditions: this.conditions }, info: {} };
  }

  rpcUpdateRuntimeConfig(req: Record<string, unknown>) {
    const cidr = String((req.runtimeConfig as { networkConfig?: { podCidr?: string } | null } | null)?.networkConfig?.podCidr ?? '');
    // As containerd: an empty CIDR changes nothing; a bad one is refused.
    if (cidr === '') return {};
    for (const part of cidr.split(',').map((c) => c.trim())) {
      const [addr = '', bits = ''] = part.split('/');
      const max = net.isIP(addr) === 4 ? 32 : net.isIP(addr) === 6 ? 128 : -1;
      if (max < 0 || !/^\d{1,3}$/.test(bits) || Number(bits) > max) throw grpcError(grpc.status.UNKNOWN, `get routes: invalid CIDR address: ${part}`);
    }
    if (cidr !== this.podCIDR) this.#nextIp = 2;
    this.podCIDR = cidr;
    return {};
  }

  /** The next pod IP: the n-th address of the pod CIDR's first IPv4 range. */
  #allocateIp(): string {
    const v4 = this.podCIDR.split(',').map((c) => c.trim()).find((c) => net.isIP(c.split('/')[0]!) === 4);
    const [addr] = (v4 ?? '10.88.0.0/16').split('/') as [string];
    const base = addr.split('.').reduce((n, o) => n * 256 + Number(o), 0);
    const ip = base + this.#nextIp++;
    return [24, 16, 8, 0].map((s) => (ip >>> s) & 255).join('.');
  }

  rpcRunPodSandbox(req: Record<string, unknown>) {
    const config = req.config as PodSandboxConfig | null;
    const md = config?.metadata;
    if (!config || !md || !md.name || !md.uid || !md.namespace) {
      throw grpcError(grpc.status.UNKNOWN, 'failed to generate sandbox name: sandbox config must include metadata with name, uid and namespace');
    }
    if (config.linux?.securityContext?.namespaceOptions?.network === 'NODE' && config.hostname) {
      throw grpcError(grpc.status.UNKNOWN, 'failed to create containerd task: failed to create shim task: OCI runtime create failed: unable to set hostname without a private UTS namespace: unknown');
    }
    const handler = String(req.runtimeHandler ?? '');
    if (handler !== '' && this.runtimeHandlers && !this.runtimeHandlers.includes(handler)) {
      throw grpcError(grpc.status.UNKNOWN, `failed to get sandbox runtime: no runtime for ${JSON.stringify(handler)} is configured`);
    }
    const id = newId();
    const name = `${md.name}_${md.namespace}_${md.uid}_${md.attempt}`;
    this.#reserve(name, id, 'sandbox');
    const hostNet = config.linux?.securityContext?.namespaceOptions?.network === 'NODE';
    this.sandboxes.set(id, { id, config, name, state: 'SANDBOX_READY', createdAt: nowNanos(), runtimeHandler: handler, ip: hostNet ? '' : this.#allocateIp() });
    return { podSandboxId: id };
  }

  rpcStopPodSandbox(req: Record<string, unknown>) {
    const s = this.#sandbox(String(req.podSandboxId));
    for (const c of this.containers.values()) {
      if (c.sandboxId === s.id && c.state !== 'CONTAINER_EXITED') this.#finish(c, 137);
    }
    s.state = 'SANDBOX_NOTREADY';
    return {};
  }

  rpcRemovePodSandbox(req: Record<string, unknown>) {
    const s = this.sandboxes.get(String(req.podSandboxId));
    if (!s) return {};
    for (const c of [...this.containers.values()]) {
      if (c.sandboxId === s.id) {
        this.containers.delete(c.id);
        this.#reserved.delete(c.name);
      }
    }
    this.sandboxes.delete(s.id);
    this.#reserved.delete(s.name);
    return {};
  }

  #sandboxView(s: FakeSandbox) {
    return {
      id: s.id,
      metadata: s.config.metadata,
      state: s.state,
      createdAt: s.createdAt,
      labels: s.config.labels ?? {},
      annotations: s.config.annotations ?? {},
      runtimeHandler: s.runtimeHandler,
    };
  }

  rpcPodSandboxStatus(req: Record<string, unknown>) {
    const s = this.#sandbox(String(req.podSandboxId), 'an error occurred when try to find sandbox: not found');
    return {
      status: {
        ...this.#sandboxView(s),
        network: { ip: s.ip, additionalIps: [] },
        linux: { namespaces: { options: s.config.linux?.securityContext?.namespaceOptions ?? {} } },
      },
      info: {},
    };
  }

  rpcListPodSandbox(req: Record<string, unknown>) {
    const f = (req.filter ?? null) as { id?: string; state?: { state: PodSandboxState } | null; labelSelector?: Record<string, string> } | null;
    const items = [...this.sandboxes.values()]
      .filter((s) => !f?.id || s.id.startsWith(f.id))
      .filter((s) => !f?.state || s.state === f.state.state)
      .filter((s) => labelsMatch(s.config.labels ?? {}, f?.labelSelector))
      .map((s) => this.#sandboxView(s));
    return { items };
  }

  async rpcCreateContainer(req: Record<string, unknown>) {
    const s = this.#sandbox(String(req.podSandboxId), `failed to find sandbox id "${String(req.podSandboxId)}": not found`);
    const config = req.config as ContainerConfig | null;
    if (!config?.metadata?.name) throw grpcError(grpc.status.UNKNOWN, 'container config must include metadata');
    const image = this.#findImage(config.image?.image ?? '');
    if (!image) {
      throw grpcError(grpc.status.NOT_FOUND, `failed to resolve image "${normalizeImageRef(config.image?.image ?? '')}": not found`);
    }
    const seccomp = config.linux?.securityContext?.seccomp;
    if (seccomp?.profileType === 'Localhost' && !config.linux?.securityContext?.privileged) {
      const p = seccomp.localhostRef ?? '';
      try {
        await fsp.access(p, fs.constants.R_OK);
      } catch {
        throw grpcError(grpc.status.UNKNOWN, `failed to create containerd container: cannot load seccomp profile "${p}": open ${p}: no such file or directory`);
      }
    }
    const id = newId();
    const md = s.config.metadata;
    const name = `${config.metadata.name}_${md.name}_${md.namespace}_${md.uid}_${config.metadata.attempt}`;
    this.#reserve(name, id, 'container');
    this.containers.set(id, {
      id,
      sandboxId: s.id,
      name,
      config,
      state: 'CONTAINER_CREATED',
      createdAt: nowNanos(),
      startedAt: 0,
      finishedAt: 0,
      exitCode: 0,
      reason: '',
      message: '',
      imageId: image.id,
      imageRef: image.id,
    });
    return { containerId: id };
  }

  rpcStartContainer(req: Record<string, unknown>) {
    const c = this.#container(String(req.containerId));
    if (c.state !== 'CONTAINER_CREATED') {
      throw grpcError(grpc.status.UNKNOWN, `container is in ${c.state} state`);
    }
    const s = this.#sandbox(c.sandboxId);
    if (s.state !== 'SANDBOX_READY') throw grpcError(grpc.status.UNKNOWN, `sandbox container "${s.id}" is not running`);
    c.state = 'CONTAINER_RUNNING';
    c.startedAt = nowNanos();
    const code = scriptedExit(c.config);
    if (code !== undefined) this.#finish(c, code);
    return {};
  }

  rpcStopContainer(req: Record<string, unknown>) {
    const c = this.#container(String(req.containerId));
    if (c.state !== 'CONTAINER_EXITED') this.#finish(c, 137);
    return {};
  }

  rpcRemoveContainer(req: Record<string, unknown>) {
    const c = this.containers.get(String(req.containerId));
    if (!c) return {};
    this.containers.delete(c.id);
    this.#reserved.delete(c.name);
    return {};
  }

  #containerView(c: FakeContainer) {
    return {
      id: c.id,
      podSandboxId: c.sandboxId,
      metadata: c.config.metadata,
      image: { image: c.imageId },
      imageRef: c.imageRef,
      state: c.state,
      createdAt: c.createdAt,
      labels: c.config.labels ?? {},
      annotations: c.config.annotations ?? {},
      imageId: c.imageId,
    };
  }

  rpcListContainers(req: Record<string, unknown>) {
    const f = (req.filter ?? null) as {
      id?: string;
      podSandboxId?: string;
      state?: { state: ContainerState } | null;
      labelSelector?: Record<string, string>;
    } | null;
    const containers = [...this.containers.values()]
      .filter((c) => !f?.id || c.id.startsWith(f.id))
      .filter((c) => !f?.podSandboxId || c.sandboxId.startsWith(f.podSandboxId))
      .filter((c) => !f?.state || c.state === f.state.state)
      .filter((c) => labelsMatch(c.config.labels ?? {}, f?.labelSelector))
      .map((c) => this.#containerView(c));
    return { containers };
  }

  // ---- stats (metrics work): synthetic but moving usage, as a runtime reports it.

  /** Usage of a running container: 10 ms of CPU per second since its start, a fixed 1 MiB working set. */
  #containerStats(c: FakeContainer, now: number) {
    const ran = c.startedAt ? Math.max(0, now - c.startedAt) : 0;
    return {
      attributes: { id: c.id, metadata: c.config.metadata, labels: c.config.labels ?? {}, annotations: c.config.annotations ?? {} },
      cpu: { timestamp: now, usageCoreNanoSeconds: { value: Math.round(ran / 100) }, usageNanoCores: { value: 10_000_000 } },
      memory: { timestamp: now, workingSetBytes: { value: 1_048_576 }, usageBytes: { value: 1_048_576 }, rssBytes: { value: 524_288 } },
      writableLayer: { timestamp: now, fsId: { mountpoint: '/' }, usedBytes: { value: 4096 }, inodesUsed: { value: 1 } },
    };
  }

  rpcListContainerStats() {
    const now = nowNanos();
    return { stats: [...this.containers.values()].map((c) => this.#containerStats(c, now)) };
  }

  rpcListPodSandboxStats() {
    const now = nowNanos();
    return {
      stats: [...this.sandboxes.values()]
        .filter((s) => s.state === 'SANDBOX_READY')
        .map((s) => {
          const cs = [...this.containers.values()].filter((c) => c.sandboxId === s.id && c.state === 'CONTAINER_RUNNING').map((c) => this.#containerStats(c, now));
          const cpu = cs.reduce((a, c) => a + c.cpu.usageCoreNanoSeconds.value, 0);
          return {
            attributes: { id: s.id, metadata: s.config.metadata, labels: s.config.labels ?? {}, annotations: s.config.annotations ?? {} },
            linux: { cpu: { timestamp: now, usageCoreNanoSeconds: { value: cpu } }, memory: { timestamp: now, workingSetBytes: { value: 1_048_576 * (cs.length + 1) } }, containers: cs },
          };
        }),
    };
  }

  rpcContainerStatus(req: Record<string, unknown>) {
    const c = this.#container(String(req.containerId));
    const s = this.sandboxes.get(c.sandboxId);
    return {
      status: {
        id: c.id,
        metadata: c.config.metadata,
        state: c.state,
        createdAt: c.createdAt,
        startedAt: c.startedAt,
        finishedAt: c.finishedAt,
        exitCode: c.exitCode,
        image: { image: c.config.image.image },
        imageRef: c.imageRef,
        reason: c.reason,
        message: c.message,
        labels: c.config.labels ?? {},
        annotations: c.config.annotations ?? {},
        mounts: c.config.mounts ?? [],
        logPath: s?.config.logDirectory && c.config.logPath ? path.join(s.config.logDirectory, c.config.logPath) : '',
        imageId: c.imageId,
      },
      info: {},
    };
  }

  /**
   * ExecSync "runs" the scripted commands (`true`, `false`, `sh -c "exit N"`, plus whatever
   * `execResult` answers for the container) in a running container; others exit 0.
   */
  rpcExecSync(req: Record<string, unknown>) {
    const c = this.#container(String(req.containerId));
    if (c.state !== 'CONTAINER_RUNNING') throw grpcError(grpc.status.UNKNOWN, `container ${c.id} is not running`);
    const cmd = (req.cmd as string[]) ?? [];
    const scripted = this.execResult?.(c.config.metadata.name, cmd);
    const exitCode = scripted?.exitCode ?? scriptedExit({ ...c.config, command: cmd, args: [] }) ?? 0;
    return { stdout: Buffer.from(scripted?.stdout ?? ''), stderr: Buffer.from(''), exitCode };
  }

  async rpcCheckpointContainer(req: Record<string, unknown>, isCancelled: () => boolean) {
    const c = this.#container(String(req.containerId));
    if (c.state !== 'CONTAINER_RUNNING') {
      throw grpcError(grpc.status.UNKNOWN, `container ${c.id} not running`);
    }
    const location = String(req.location ?? '');
    if (!path.isAbsolute(location)) throw grpcError(grpc.status.INVALID_ARGUMENT, `checkpoint location "${location}" must be an absolute path`);
    const timeoutSec = Number(req.timeout ?? 0);
    if (timeoutSec > 0 && this.checkpointDelayMs > timeoutSec * 1000) {
      await new Promise((r) => setTimeout(r, timeoutSec * 1000));
      throw grpcError(grpc.status.DEADLINE_EXCEEDED, `checkpointing container ${c.id} did not finish within ${timeoutSec}s`);
    }
    if (this.checkpointDelayMs > 0) await new Promise((r) => setTimeout(r, this.checkpointDelayMs));
    // A client that gave up gets no archive, as a runtime cancels on the context.
    if (isCancelled()) throw grpcError(grpc.status.CANCELLED, 'context canceled');
    if (this.checkpointArchive === 'none') return {};
    if (this.checkpointArchive === 'empty') await fsp.writeFile(location, '', { mode: 0o600 });
    else if (this.checkpointArchive === 'garbage') await fsp.writeFile(location, crypto.randomBytes(4096).fill(0x41, 0, 512), { mode: 0o600 });
    else await writeCheckpointArchive(location, c, this.checkpointArchive === 'truncated');
    return {};
  }

  // ------------------------------------------------------------------ ImageService

  rpcListImages() {
    return { images: [...this.images.values()] };
  }

  rpcImageStatus(req: Record<string, unknown>) {
    const spec = req.image as { image?: string } | null;
    const img = this.#findImage(spec?.image ?? '');
    return img ? { image: img, info: {} } : { info: {} };
  }

  rpcPullImage(req: Record<string, unknown>) {
    const ref = (req.image as { image?: string } | null)?.image ?? '';
    const full = normalizeImageRef(ref);
    for (const [prefix, want] of this.#private) {
      if (!full.startsWith(prefix)) continue;
      const a = req.auth as { username?: string; password?: string; auth?: string } | null | undefined;
      let user = a?.username ?? '';
      let pass = a?.password ?? '';
      if (a?.auth) {
        const decoded = Buffer.from(a.auth, 'base64').toString('utf8');
        const i = decoded.indexOf(':');
        if (i >= 0) [user, pass] = [decoded.slice(0, i), decoded.slice(i + 1)];
      }
      if (user !== want.username || pass !== want.password) {
        const tag = /:([^:/@]+)$/.exec(full)?.[1] ?? 'latest';
        throw grpcError(grpc.status.UNKNOWN, `failed to pull and unpack image "${full}": failed to resolve reference "${full}": unexpected status code [manifests ${tag}]: 401 Unauthorized`);
      }
    }
    // Like containerd, a pull always asks the registry, even for a present image: callers
    // must check ImageStatus first (FACTS.md). Only `pullable` images are "in a registry".
    if (!this.#pullable.has(full)) {
      // containerd's words when no registry answers (seen on these machines).
      const slash = full.indexOf('/');
      const host = full.slice(0, slash) === 'docker.io' ? 'registry-1.docker.io' : full.slice(0, slash);
      const m = /^(.*?)(?::([^:/@]+))?$/.exec(full.slice(slash + 1))!;
      const hostName = host.replace(/:\d+$/, '');
      throw grpcError(
        grpc.status.UNKNOWN,
        `failed to pull and unpack image "${full}": failed to resolve reference "${full}": failed to do request: Head "https://${host}/v2/${m[1]}/manifests/${m[2] ?? 'latest'}": dial tcp: lookup ${hostName}: no such host`,
      );
    }
    return { imageRef: this.addImage(full) };
  }

  rpcRemoveImage(req: Record<string, unknown>) {
    const img = this.#findImage((req.image as { image?: string } | null)?.image ?? '');
    if (img) this.images.delete(img.id);
    return {};
  }
}

const RUNTIME_METHODS = [
  'Version',
  'Status',
  'UpdateRuntimeConfig',
  'RunPodSandbox',
  'StopPodSandbox',
  'RemovePodSandbox',
  'PodSandboxStatus',
  'ListPodSandbox',
  'CreateContainer',
  'StartContainer',
  'StopContainer',
  'RemoveContainer',
  'ListContainers',
  'ContainerStatus',
  'ExecSync',
  'CheckpointContainer',
  'ListContainerStats',
  'ListPodSandboxStats',
] as const;
const IMAGE_METHODS = ['ListImages', 'ImageStatus', 'PullImage', 'RemoveImage'] as const;

/** Writes a small but real checkpoint archive (CRI-O's layout) at `location`, atomically. */
async function writeCheckpointArchive(location: string, c: FakeContainer, truncated = false): Promise<void> {
  const pack = tar.pack();
  const entries: [string, Buffer][] = [
    ['config.dump', Buffer.from(JSON.stringify({ id: c.id, name: c.config.metadata.name, rootfsImageRef: c.imageRef, createdTime: new Date(c.createdAt / NANOS_PER_MS).toISOString() }))],
    ['spec.dump', Buffer.from(JSON.stringify({ ociVersion: '1.0.2', process: { args: [...(c.config.command ?? []), ...(c.config.args ?? [])] }, annotations: c.config.annotations ?? {} }))],
    ['checkpoint/pages-1.img', crypto.randomBytes(64 * 1024)],
    ['checkpoint/inventory.img', Buffer.from('fake-criu-inventory')],
  ];
  const tmp = `${location}.${process.pid}.tmp`;
  const out = fs.createWriteStream(tmp, { mode: 0o600 });
  const done = new Promise<void>((resolve, reject) => {
    out.on('finish', resolve);
    out.on('error', reject);
  });
  pack.pipe(out);
  for (const [name, data] of entries) {
    await new Promise<void>((resolve, reject) => pack.entry({ name, size: data.length, mode: 0o600 }, data, (err) => (err ? reject(err) : resolve())));
  }
  pack.finalize();
  await done;
  // Cut half-way into checkpoint/pages-1.img (after three headers and two small members).
  if (truncated) await fsp.truncate(tmp, (await fsp.stat(tmp)).size - 1024 - 512 - 512 - 32 * 1024);
  await fsp.rename(tmp, location);
}

/** Starts a fake CRI server; `stop()` it in afterAll/afterEach. */
export async function startFakeRuntime(o: FakeRuntimeOptions = {}): Promise<FakeRuntime> {
  let owned: string | undefined;
  let socketPath = o.socketPath;
  if (!socketPath) {
    owned = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-fakecri-'));
    socketPath = path.join(owned, 'cri.sock');
  }
  const rt = new FakeRuntime(socketPath, o);
  await rt.listen(owned);
  return rt;
}
