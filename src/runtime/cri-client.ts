/**
 * The CRI client: nodelet's only connection to the container runtime (containerd,
 * CRI-O, or the test CRI server), over gRPC on `unix://` sockets.
 *
 * - Built by the composition root once; shared by the pod workers, the runtime health
 *   loop and the checkpoint endpoint. Constructing it connects nothing: the channel
 *   connects on the first call.
 * - Every call has a deadline (requestTimeoutMs; longer for stop, pull and checkpoint)
 *   and never waits for the runtime to appear: with the socket missing or dead a call
 *   fails at once with UNAVAILABLE instead of hanging.
 * - A restarted runtime on the same socket is picked up by the same client: grpc-js
 *   reconnects by itself, and the reconnect backoff is capped at ~1 s so the first call
 *   after the runtime is back succeeds within about a second.
 * - Errors are NodeletErrors mapped in errors.ts. No retries here.
 */
import * as grpc from '@grpc/grpc-js';
import { NodeletError } from '../errors.js';
import { silentLogger, type Logger } from '../log.js';
import { fromGrpcError } from './errors.js';
import { ListDecoder } from './list-decoder.js';
import { loadCriPackage } from './proto.js';
import { parseEndpoint } from './endpoint.js';
import type {
  CheckpointRequest,
  Container,
  ContainerStats,
  FilesystemUsage,
  PodSandboxStats,
  ContainerConfig,
  ContainerFilter,
  ContainerStatus,
  Image,
  ImageService,
  PodSandbox,
  PodSandboxConfig,
  PodSandboxFilter,
  PodSandboxStatus,
  RuntimeCgroupConfig,
  RuntimeService,
  RuntimeStatusInfo,
  StreamAttachRequest,
  StreamExecRequest,
  VersionInfo,
} from './types.js';

/** The streaming URL of an Exec/Attach/PortForward answer; a runtime answering none is a runtime fault. */
function streamUrl(method: string, res: Record<string, unknown>): string {
  const url = res.url;
  if (typeof url !== 'string' || url === '') throw new NodeletError('INTERNAL', `${method}: runtime returned no streaming URL`, { method });
  return url;
}

/** The CRI API version nodelet speaks, sent in VersionRequest like the kubelet's. */
export const CRI_API_VERSION = 'v1';

export interface CriClientOptions {
  /** `unix:///run/containerd/containerd.sock` (a bare absolute path is accepted too). */
  runtimeEndpoint: string;
  /** Defaults to runtimeEndpoint. */
  imageEndpoint?: string;
  /** Deadline of each call (the kubelet's runtimeRequestTimeout, 2 min by default). */
  requestTimeoutMs: number;
  /** Deadline of PullImage; default max(requestTimeoutMs, 10 min): pulls of big images are slow. */
  pullTimeoutMs?: number;
  logger?: Logger;
  /** Called after every call with its CRI method name, duration and outcome (metrics). Must not throw. */
  observe?: (method: string, seconds: number, failed: boolean) => void;
}

export interface CriClient extends RuntimeService, ImageService {
  readonly runtimeEndpoint: string;
  readonly imageEndpoint: string;
  /** Closes the channels; later calls fail. Idempotent. */
  close(): void;
  /**
   * CRI RuntimeConfig: the runtime's cgroup driver (`linux.cgroup_driver`). Throws
   * NodeletError UNIMPLEMENTED from a runtime without it (containerd 1.6), UNAVAILABLE when down.
   */
  runtimeConfig(): Promise<RuntimeCgroupConfig>;
}

/** Normalizes an endpoint flag value to a grpc-js target, or throws INVALID_ARGUMENT naming `param` (endpoint.ts). */
export { parseEndpoint } from './endpoint.js';

const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  // grpc-js backs off reconnects up to 120 s by default, which would leave a restarted
  // runtime unused for minutes. A local socket is cheap to retry.
  'grpc.initial_reconnect_backoff_ms': 200,
  'grpc.max_reconnect_backoff_ms': 1000,
  // The kubelet's limit: ListContainers on a busy node exceeds grpc's 4 MiB default.
  'grpc.max_receive_message_length': 16 * 1024 * 1024,
  'grpc.max_send_message_length': 16 * 1024 * 1024,
};

type Callback = (err: grpc.ServiceError | null, res: unknown) => void;
type UnaryMethod = (req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback) => grpc.ClientUnaryCall;

export function createCriClient(opts: CriClientOptions): CriClient {
  const runtimeEndpoint = parseEndpoint('containerRuntimeEndpoint', opts.runtimeEndpoint);
  const imageEndpoint = opts.imageEndpoint ? parseEndpoint('imageServiceEndpoint', opts.imageEndpoint) : runtimeEndpoint;
  if (!(opts.requestTimeoutMs > 0)) {
    throw new NodeletError('INVALID_ARGUMENT', `requestTimeoutMs must be a positive number of milliseconds, got ${opts.requestTimeoutMs}`, { param: 'requestTimeoutMs' });
  }
  const log = (opts.logger ?? silentLogger()).child({ component: 'cri-client' });
  const requestTimeoutMs = opts.requestTimeoutMs;
  const pullTimeoutMs = opts.pullTimeoutMs ?? Math.max(requestTimeoutMs, 10 * 60_000);

  const pkg = loadCriPackage();
  const creds = grpc.credentials.createInsecure();
  const runtimeClient = new pkg.RuntimeService(runtimeEndpoint, creds, CHANNEL_OPTIONS);
  const imageClient =
    imageEndpoint === runtimeEndpoint
      ? new pkg.ImageService(imageEndpoint, creds, { ...CHANNEL_OPTIONS, channelOverride: runtimeClient.getChannel() })
      : new pkg.ImageService(imageEndpoint, creds, CHANNEL_OPTIONS);
  let closed = false;

  /** One unary call of CRI `method`; `fnName`: the client's function for it (the raw lists have their own). */
  function call<Res>(client: grpc.Client, method: string, req: object, deadlineMs = requestTimeoutMs, fnName = method): Promise<Res> {
    if (closed) return Promise.reject(new NodeletError('CANCELLED', `${method}: CRI client closed`, { method }));
    const fn = (client as unknown as Record<string, UnaryMethod>)[fnName]!;
    const started = Date.now();
    return new Promise<Res>((resolve, reject) => {
      // waitForReady false: fail fast with UNAVAILABLE while the runtime is away.
      const md = new grpc.Metadata({ waitForReady: false });
      fn.call(client, req, md, { deadline: started + deadlineMs }, (err, res) => {
        const ms = Date.now() - started;
        opts.observe?.(method, ms / 1000, !!err);
        if (err) {
          const e = fromGrpcError(method, err);
          log.debug({ method, ms, code: e.code, err: e.message }, 'CRI call failed');
          reject(e);
          return;
        }
        log.trace({ method, ms }, 'CRI call');
        resolve(res as Res);
      });
    });
  }

  const rt = (method: string, req: object, deadlineMs?: number) => call<Record<string, unknown>>(runtimeClient, method, req, deadlineMs);

  // The relist's unfiltered lists: answers taken raw and decoded by ListDecoder, which hands
  // back an unchanged entry as the same frozen object as the previous answer (list-decoder.ts).
  const lists = {
    ListPodSandbox: new ListDecoder(pkg.decoder('PodSandbox') as (b: Uint8Array) => PodSandbox),
    ListContainers: new ListDecoder(pkg.decoder('Container') as (b: Uint8Array) => Container),
  };
  const rawClient = runtimeClient as unknown as Record<string, unknown>;
  for (const method of Object.keys(lists) as (keyof typeof lists)[]) {
    const def = pkg.RuntimeService.service[method]!;
    // A method of its own on the client (a `raw` name), so call() times, observes and maps its errors as any other.
    rawClient[`${method}Raw`] = function (this: grpc.Client, req: object, md: grpc.Metadata, o: grpc.CallOptions, cb: Callback) {
      return this.makeUnaryRequest(def.path, def.requestSerialize, (b: Buffer) => b, req, md, o, cb as (err: grpc.ServiceError | null, res?: Buffer) => void);
    };
  }
  async function rawList<K extends keyof typeof lists>(method: K): Promise<ReturnType<(typeof lists)[K]['decode']>> {
    const raw = await call<Buffer>(runtimeClient, method, {}, requestTimeoutMs, `${method}Raw`);
    try {
      return lists[method].decode(raw) as ReturnType<(typeof lists)[K]['decode']>;
    } catch (err) {
      throw new NodeletError('INTERNAL', `${method}: cannot decode the runtime's answer: ${err instanceof Error ? err.message : String(err)}`, { method });
    }
  }
  const img = (method: string, req: object, deadlineMs?: number) => call<Record<string, unknown>>(imageClient, method, req, deadlineMs);

  return {
    runtimeEndpoint,
    imageEndpoint,

    async version() {
      return (await rt('Version', { version: CRI_API_VERSION })) as unknown as VersionInfo;
    },
    async status(verbose = false) {
      const res = await rt('Status', { verbose });
      const status = res.status as { conditions: RuntimeStatusInfo['conditions'] } | null;
      return { conditions: status?.conditions ?? [], info: (res.info as Record<string, string>) ?? {} };
    },
    async runtimeConfig() {
      const res = await rt('RuntimeConfig', {});
      const linux = res.linux as { cgroupDriver?: string } | null;
      // proto3: SYSTEMD is 0, so an answer without `linux` reads as systemd, as the kubelet reads it.
      return { cgroupDriver: linux?.cgroupDriver === 'CGROUPFS' ? 'cgroupfs' : 'systemd' } as RuntimeCgroupConfig;
    },
    async updateRuntimeConfig(podCIDR: string) {
      await rt('UpdateRuntimeConfig', { runtimeConfig: { networkConfig: { podCidr: podCIDR } } });
    },
    async runPodSandbox(config: PodSandboxConfig, runtimeHandler = '') {
      const res = await rt('RunPodSandbox', { config, runtimeHandler });
      return res.podSandboxId as string;
    },
    async stopPodSandbox(id: string) {
      await rt('StopPodSandbox', { podSandboxId: id });
    },
    async removePodSandbox(id: string) {
      await rt('RemovePodSandbox', { podSandboxId: id });
    },
    async podSandboxStatus(id: string) {
      const res = await rt('PodSandboxStatus', { podSandboxId: id, verbose: false });
      if (!res.status) throw new NodeletError('INTERNAL', `PodSandboxStatus: runtime returned no status for sandbox ${id}`, { method: 'PodSandboxStatus', id });
      return res.status as PodSandboxStatus;
    },
    async listPodSandbox(filter?: PodSandboxFilter) {
      if (!filter) return rawList('ListPodSandbox');
      const f = filter && { id: filter.id ?? '', labelSelector: filter.labelSelector ?? {}, ...(filter.state ? { state: { state: filter.state } } : {}) };
      const res = await rt('ListPodSandbox', f ? { filter: f } : {});
      return (res.items as PodSandbox[]) ?? [];
    },
    async createContainer(podSandboxId: string, config: ContainerConfig, sandboxConfig: PodSandboxConfig) {
      const res = await rt('CreateContainer', { podSandboxId, config, sandboxConfig });
      return res.containerId as string;
    },
    async startContainer(id: string) {
      await rt('StartContainer', { containerId: id });
    },
    async stopContainer(id: string, timeoutSec: number) {
      // The runtime waits up to timeoutSec before it kills: the deadline must cover that.
      const grace = Math.max(0, Math.floor(timeoutSec));
      await rt('StopContainer', { containerId: id, timeout: grace }, requestTimeoutMs + grace * 1000);
    },
    async removeContainer(id: string) {
      await rt('RemoveContainer', { containerId: id });
    },
    async listContainers(filter?: ContainerFilter) {
      if (!filter) return rawList('ListContainers');
      const f = filter && {
        id: filter.id ?? '',
        podSandboxId: filter.podSandboxId ?? '',
        labelSelector: filter.labelSelector ?? {},
        ...(filter.state ? { state: { state: filter.state } } : {}),
      };
      const res = await rt('ListContainers', f ? { filter: f } : {});
      return (res.containers as Container[]) ?? [];
    },
    async containerStatus(id: string) {
      const res = await rt('ContainerStatus', { containerId: id, verbose: false });
      if (!res.status) throw new NodeletError('INTERNAL', `ContainerStatus: runtime returned no status for container ${id}`, { method: 'ContainerStatus', id });
      return res.status as ContainerStatus;
    },
    async execSync(id: string, cmd: string[], timeoutSec: number) {
      const t = Math.max(0, Math.floor(timeoutSec));
      const res = await rt('ExecSync', { containerId: id, cmd, timeout: t }, requestTimeoutMs + t * 1000);
      return { stdout: Buffer.from((res.stdout as Uint8Array | undefined) ?? []), stderr: Buffer.from((res.stderr as Uint8Array | undefined) ?? []), exitCode: Number(res.exitCode ?? 0) };
    },
    async exec(req: StreamExecRequest) {
      return streamUrl('Exec', await rt('Exec', req));
    },
    async attach(req: StreamAttachRequest) {
      return streamUrl('Attach', await rt('Attach', req));
    },
    async portForward(podSandboxId: string, ports: number[]) {
      return streamUrl('PortForward', await rt('PortForward', { podSandboxId, port: ports }));
    },
    async reopenContainerLog(id: string) {
      await rt('ReopenContainerLog', { containerId: id });
    },
    async listContainerStats() {
      const res = await rt('ListContainerStats', {});
      return (res.stats as ContainerStats[]) ?? [];
    },
    async listPodSandboxStats() {
      const res = await rt('ListPodSandboxStats', {});
      return (res.stats as PodSandboxStats[]) ?? [];
    },
    async checkpointContainer(req: CheckpointRequest, o: { deadlineMs?: number } = {}) {
      const timeoutSec = Math.max(0, Math.floor(req.timeoutSec));
      const deadlineMs = o.deadlineMs ?? Math.max(requestTimeoutMs, timeoutSec * 1000);
      await rt('CheckpointContainer', { containerId: req.containerId, location: req.location, timeout: timeoutSec }, deadlineMs);
    },

    async imageStatus(image: string) {
      const res = await img('ImageStatus', { image: { image }, verbose: false });
      return (res.image as Image | null) ?? undefined;
    },
    async pullImage(image: string, sandboxConfig?: PodSandboxConfig) {
      const res = await img('PullImage', { image: { image }, ...(sandboxConfig ? { sandboxConfig } : {}) }, pullTimeoutMs);
      return res.imageRef as string;
    },
    async listImages() {
      const res = await img('ListImages', {});
      return (res.images as Image[]) ?? [];
    },
    async removeImage(image: string) {
      await img('RemoveImage', { image: { image } });
    },
    async imageFsInfo() {
      const res = await img('ImageFsInfo', {});
      return ((res.imageFilesystems as { fsId?: { mountpoint?: string } }[] | undefined) ?? []).map((f) => f.fsId?.mountpoint ?? '').filter((m) => m !== '');
    },

    async imageFsUsage() {
      const res = await img('ImageFsInfo', {});
      return (res.imageFilesystems as FilesystemUsage[] | undefined) ?? [];
    },

    close() {
      if (closed) return;
      closed = true;
      imageClient.close();
      runtimeClient.close();
    },
  };
}
