/**
 * The CRI client: nodelet's only connection to the container runtime (containerd,
 * CRI-O, or the test CRI server), over gRPC on `unix://` sockets.
 *
 * - Built by the composition root once; shared by the pod workers, the runtime health
 *   loop and the checkpoint endpoint. Constructing it connects nothing: the channel
 *   connects on the first call.
 * - Every call has a deadline (requestTimeoutMs; longer for stop, pull and checkpoint),
 *   except ExecSync with timeout 0 (none, as the kubelet's: `/run`), and never waits for
 *   the runtime to appear: with the socket missing or dead a call
 *   fails at once with UNAVAILABLE instead of hanging.
 * - A restarted runtime on the same socket is picked up by the same client: the channel
 *   (grpc-unary.ts, gRPC over node:http2, no grpc-js) connects again on the first call
 *   after its connection was lost, so that call already reaches the runtime that is back.
 * - The calls a request handler makes on a client's behalf take a `signal` (CallOptions):
 *   the client going cancels the call (RST_STREAM CANCEL), as the kubelet's request context does.
 * - A call the runtime never processed (refused by its GOAWAY, e.g. containerd stopping
 *   gracefully, or by REFUSED_STREAM) is sent again once on a new connection by the
 *   channel (gRFC A6's transparent retry); one it may have processed is never sent twice.
 *   Calls without a deadline (the runtime event stream, ExecSync of `/run`) are kept honest
 *   by an HTTP/2 PING after 5 min of silence, answered within 20 s or the connection is
 *   given up (grpc-unary.ts).
 * - Errors are NodeletErrors mapped in errors.ts. No other retries here.
 */
import { NodeletError } from '../errors.js';
import { silentLogger, type Logger } from '../log.js';
import { fromGrpcError } from './errors.js';
import { ListDecoder } from './list-decoder.js';
import { MAX_MESSAGE_BYTES, UnaryChannel, GrpcError, GrpcStatus } from './grpc-unary.js';
import { loadCriCodec, type CriMethod } from './proto.js';
import { parseEndpoint } from './endpoint.js';
import type {
  AuthConfig,
  CallOptions,
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
  /**
   * A server-streaming call on the runtime endpoint (runtime-events.ts): raw messages to
   * `onMessage`; resolves when the runtime ends the stream, rejects with the GrpcError.
   */
  serverStream(path: string, body: Uint8Array, onMessage: (message: Buffer) => void, signal: AbortSignal): Promise<void>;
}

/** Normalizes an endpoint flag value to a `unix:///path` target, or throws INVALID_ARGUMENT naming `param` (endpoint.ts). */
export { parseEndpoint } from './endpoint.js';

/** The kubelet's message limit both ways: ListContainers on a busy node exceeds grpc's 4 MiB default. */
const CHANNEL_OPTIONS = { maxSendMessageBytes: MAX_MESSAGE_BYTES, maxReceiveMessageBytes: MAX_MESSAGE_BYTES };

type Service = 'RuntimeService' | 'ImageService';

export function createCriClient(opts: CriClientOptions): CriClient {
  const runtimeEndpoint = parseEndpoint('containerRuntimeEndpoint', opts.runtimeEndpoint);
  const imageEndpoint = opts.imageEndpoint ? parseEndpoint('imageServiceEndpoint', opts.imageEndpoint) : runtimeEndpoint;
  if (!(opts.requestTimeoutMs > 0)) {
    throw new NodeletError('INVALID_ARGUMENT', `requestTimeoutMs must be a positive number of milliseconds, got ${opts.requestTimeoutMs}`, { param: 'requestTimeoutMs' });
  }
  const log = (opts.logger ?? silentLogger()).child({ component: 'cri-client' });
  const requestTimeoutMs = opts.requestTimeoutMs;
  const pullTimeoutMs = opts.pullTimeoutMs ?? Math.max(requestTimeoutMs, 10 * 60_000);

  const codec = loadCriCodec();
  const runtimeChannel = new UnaryChannel(runtimeEndpoint, CHANNEL_OPTIONS);
  const imageChannel = imageEndpoint === runtimeEndpoint ? runtimeChannel : new UnaryChannel(imageEndpoint, CHANNEL_OPTIONS);
  let closed = false;

  /**
   * One unary call of CRI `method` of `service`; `decode` turns the raw answer into the
   * result (the method's response decoder by default; the raw lists keep the bytes).
   */
  async function call<Res>(service: Service, method: string, req: object, o: { deadlineMs?: number | 'none'; decode?: (b: Buffer) => unknown; signal?: AbortSignal } = {}): Promise<Res> {
    const { decode, signal } = o;
    const deadlineMs = o.deadlineMs === 'none' ? undefined : (o.deadlineMs ?? requestTimeoutMs);
    if (closed) throw new NodeletError('CANCELLED', `${method}: CRI client closed`, { method });
    const m: CriMethod = codec.method(service, method);
    const channel = service === 'RuntimeService' ? runtimeChannel : imageChannel;
    const started = Date.now();
    const done = (err: unknown, res?: unknown): Res => {
      const ms = Date.now() - started;
      opts.observe?.(method, ms / 1000, !!err);
      if (err) {
        const e = fromGrpcError(method, err);
        log.debug({ method, ms, code: e.code, err: e.message }, 'CRI call failed');
        throw e;
      }
      log.trace({ method, ms }, 'CRI call');
      return res as Res;
    };
    let body: Buffer;
    try {
      body = m.serialize(req);
    } catch (err) {
      return done(new GrpcError(GrpcStatus.INTERNAL, `Request message serialization failure: ${err instanceof Error ? err.message : String(err)}`));
    }
    return channel.call(m.path, body, deadlineMs, signal).then(
      (raw) => {
        let res: unknown;
        try {
          res = decode ? decode(raw) : m.deserialize(raw);
        } catch (err) {
          return done(new GrpcError(GrpcStatus.INTERNAL, `Response message parsing error: ${err instanceof Error ? err.message : String(err)}`));
        }
        return done(undefined, res);
      },
      (err) => done(err),
    );
  }

  const rt = (method: string, req: object, deadlineMs?: number | 'none', signal?: AbortSignal) => call<Record<string, unknown>>('RuntimeService', method, req, { deadlineMs, signal });

  // The relist's unfiltered lists: answers taken raw and decoded by ListDecoder, which hands
  // back an unchanged entry as the same frozen object as the previous answer (list-decoder.ts).
  const lists = {
    ListPodSandbox: new ListDecoder(codec.decoder('PodSandbox') as (b: Uint8Array) => PodSandbox),
    ListContainers: new ListDecoder(codec.decoder('Container') as (b: Uint8Array) => Container),
  };
  async function rawList<K extends keyof typeof lists>(method: K): Promise<ReturnType<(typeof lists)[K]['decode']>> {
    const raw = await call<Buffer>('RuntimeService', method, {}, { decode: (b) => b });
    try {
      return lists[method].decode(raw) as ReturnType<(typeof lists)[K]['decode']>;
    } catch (err) {
      throw new NodeletError('INTERNAL', `${method}: cannot decode the runtime's answer: ${err instanceof Error ? err.message : String(err)}`, { method });
    }
  }
  /** The last unfiltered ListContainers answer and when it came (recentContainers). */
  let lastContainers: { at: number; items: Container[] } | undefined;
  const img = (method: string, req: object, deadlineMs?: number) => call<Record<string, unknown>>('ImageService', method, req, { deadlineMs });

  return {
    runtimeEndpoint,
    imageEndpoint,

    async version() {
      return (await rt('Version', { version: CRI_API_VERSION })) as unknown as VersionInfo;
    },
    async status(verbose = false) {
      const res = await rt('Status', { verbose });
      const status = res.status as { conditions: RuntimeStatusInfo['conditions'] } | null;
      const features = res.features as { supplementalGroupsPolicy?: boolean } | null;
      return { conditions: status?.conditions ?? [], info: (res.info as Record<string, string>) ?? {}, features: { supplementalGroupsPolicy: features?.supplementalGroupsPolicy === true } };
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
    async listPodSandbox(filter?: PodSandboxFilter, o?: CallOptions) {
      if (!filter) return rawList('ListPodSandbox');
      const f = filter && { id: filter.id ?? '', labelSelector: filter.labelSelector ?? {}, ...(filter.state ? { state: { state: filter.state } } : {}) };
      const res = await rt('ListPodSandbox', f ? { filter: f } : {}, undefined, o?.signal);
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
    async listContainers(filter?: ContainerFilter, o?: CallOptions) {
      if (!filter) {
        const items = await rawList('ListContainers');
        lastContainers = { at: performance.now(), items };
        return items;
      }
      const f = filter && {
        id: filter.id ?? '',
        podSandboxId: filter.podSandboxId ?? '',
        labelSelector: filter.labelSelector ?? {},
        ...(filter.state ? { state: { state: filter.state } } : {}),
      };
      const res = await rt('ListContainers', f ? { filter: f } : {}, undefined, o?.signal);
      return (res.containers as Container[]) ?? [];
    },
    recentContainers(maxAgeMs: number) {
      return lastContainers && performance.now() - lastContainers.at <= maxAgeMs ? lastContainers.items : undefined;
    },
    async containerStatus(id: string) {
      const res = await rt('ContainerStatus', { containerId: id, verbose: false });
      if (!res.status) throw new NodeletError('INTERNAL', `ContainerStatus: runtime returned no status for container ${id}`, { method: 'ContainerStatus', id });
      return res.status as ContainerStatus;
    },
    async execSync(id: string, cmd: string[], timeoutSec: number, o?: CallOptions) {
      const t = Math.max(0, Math.floor(timeoutSec));
      // As the kubelet's CRI client: timeout 0 sets no deadline (the call ends with the
      // command, or with o.signal); otherwise the runtime's timeout plus runtimeRequestTimeout.
      const res = await rt('ExecSync', { containerId: id, cmd, timeout: t }, t === 0 ? 'none' : requestTimeoutMs + t * 1000, o?.signal);
      return { stdout: Buffer.from((res.stdout as Uint8Array | undefined) ?? []), stderr: Buffer.from((res.stderr as Uint8Array | undefined) ?? []), exitCode: Number(res.exitCode ?? 0) };
    },
    async exec(req: StreamExecRequest, o?: CallOptions) {
      return streamUrl('Exec', await rt('Exec', req, undefined, o?.signal));
    },
    async attach(req: StreamAttachRequest, o?: CallOptions) {
      return streamUrl('Attach', await rt('Attach', req, undefined, o?.signal));
    },
    async portForward(podSandboxId: string, ports: number[], o?: CallOptions) {
      return streamUrl('PortForward', await rt('PortForward', { podSandboxId, port: ports }, undefined, o?.signal));
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
    async checkpointContainer(req: CheckpointRequest, o: { deadlineMs?: number } & CallOptions = {}) {
      const timeoutSec = Math.max(0, Math.floor(req.timeoutSec));
      const deadlineMs = o.deadlineMs ?? Math.max(requestTimeoutMs, timeoutSec * 1000);
      await rt('CheckpointContainer', { containerId: req.containerId, location: req.location, timeout: timeoutSec }, deadlineMs, o.signal);
    },

    async imageStatus(image: string) {
      const res = await img('ImageStatus', { image: { image }, verbose: false });
      return (res.image as Image | null) ?? undefined;
    },
    async pullImage(image: string, sandboxConfig?: PodSandboxConfig, auth?: AuthConfig) {
      // The credentials go only in the request: never logged, never in an error (the codec's errors name the method, not the fields).
      const res = await img('PullImage', { image: { image }, ...(auth ? { auth } : {}), ...(sandboxConfig ? { sandboxConfig } : {}) }, pullTimeoutMs);
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

    serverStream(path: string, body: Uint8Array, onMessage: (message: Buffer) => void, signal: AbortSignal) {
      return runtimeChannel.serverStream(path, body, onMessage, signal);
    },

    close() {
      if (closed) return;
      closed = true;
      imageChannel.close();
      runtimeChannel.close();
    },
  };
}
