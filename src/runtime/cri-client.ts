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
import { loadCriCodec, type CriCodec, type CriMethod } from './proto.js';
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
  ExecSyncResult,
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

/** The unfiltered lists taken raw (the relist's), each with the type of its entries. */
interface RawLists {
  ListPodSandbox: PodSandbox;
  ListContainers: Container;
}

/** How one unary call is made: its deadline (`'none'`: no deadline), raw decoding, cancellation. */
interface CallSettings {
  deadlineMs?: number | 'none';
  decode?: (b: Buffer) => unknown;
  signal?: AbortSignal;
}

/** Builds the client; validates the options (INVALID_ARGUMENT naming the parameter) and connects nothing. */
export function createCriClient(opts: CriClientOptions): CriClient {
  return new GrpcCriClient(opts);
}

/**
 * The CriClient over gRPC: one short method per CRI call, each shaping its request and
 * answer; the deadline, metrics, logging and error mapping of every call are in #call.
 */
class GrpcCriClient implements CriClient {
  readonly runtimeEndpoint: string;
  readonly imageEndpoint: string;
  readonly #opts: CriClientOptions;
  readonly #requestTimeoutMs: number;
  readonly #pullTimeoutMs: number;
  readonly #log: Logger;
  readonly #codec: CriCodec;
  readonly #runtimeChannel: UnaryChannel;
  readonly #imageChannel: UnaryChannel;
  // The relist's unfiltered lists: answers taken raw and decoded by ListDecoder, which hands
  // back an unchanged entry as the same frozen object as the previous answer (list-decoder.ts).
  readonly #lists: { [K in keyof RawLists]: ListDecoder<RawLists[K]> };
  /** The last unfiltered ListContainers answer and when it came (recentContainers). */
  #lastContainers: { at: number; items: Container[] } | undefined;
  #closed = false;

  constructor(opts: CriClientOptions) {
    this.runtimeEndpoint = parseEndpoint('containerRuntimeEndpoint', opts.runtimeEndpoint);
    this.imageEndpoint = opts.imageEndpoint ? parseEndpoint('imageServiceEndpoint', opts.imageEndpoint) : this.runtimeEndpoint;
    if (!(opts.requestTimeoutMs > 0)) {
      throw new NodeletError('INVALID_ARGUMENT', `requestTimeoutMs must be a positive number of milliseconds, got ${opts.requestTimeoutMs}`, { param: 'requestTimeoutMs' });
    }
    this.#opts = opts;
    this.#log = (opts.logger ?? silentLogger()).child({ component: 'cri-client' });
    this.#requestTimeoutMs = opts.requestTimeoutMs;
    this.#pullTimeoutMs = opts.pullTimeoutMs ?? Math.max(opts.requestTimeoutMs, 10 * 60_000);
    this.#codec = loadCriCodec();
    this.#runtimeChannel = new UnaryChannel(this.runtimeEndpoint, CHANNEL_OPTIONS);
    this.#imageChannel = this.imageEndpoint === this.runtimeEndpoint ? this.#runtimeChannel : new UnaryChannel(this.imageEndpoint, CHANNEL_OPTIONS);
    this.#lists = {
      ListPodSandbox: new ListDecoder(this.#codec.decoder('PodSandbox') as (b: Uint8Array) => PodSandbox),
      ListContainers: new ListDecoder(this.#codec.decoder('Container') as (b: Uint8Array) => Container),
    };
  }

  // ---------------------------------------------------------------- RuntimeService

  async version(): Promise<VersionInfo> {
    return (await this.#rt('Version', { version: CRI_API_VERSION })) as unknown as VersionInfo;
  }

  async status(verbose = false): Promise<RuntimeStatusInfo> {
    const res = await this.#rt('Status', { verbose });
    const status = res.status as { conditions: RuntimeStatusInfo['conditions'] } | null;
    const features = res.features as { supplementalGroupsPolicy?: boolean } | null;
    return { conditions: status?.conditions ?? [], info: (res.info as Record<string, string>) ?? {}, features: { supplementalGroupsPolicy: features?.supplementalGroupsPolicy === true } };
  }

  async runtimeConfig(): Promise<RuntimeCgroupConfig> {
    const res = await this.#rt('RuntimeConfig', {});
    const linux = res.linux as { cgroupDriver?: string } | null;
    // proto3: SYSTEMD is 0, so an answer without `linux` reads as systemd, as the kubelet reads it.
    return { cgroupDriver: linux?.cgroupDriver === 'CGROUPFS' ? 'cgroupfs' : 'systemd' } as RuntimeCgroupConfig;
  }

  async updateRuntimeConfig(podCIDR: string): Promise<void> {
    await this.#rt('UpdateRuntimeConfig', { runtimeConfig: { networkConfig: { podCidr: podCIDR } } });
  }

  async runPodSandbox(config: PodSandboxConfig, runtimeHandler = ''): Promise<string> {
    const res = await this.#rt('RunPodSandbox', { config, runtimeHandler });
    return res.podSandboxId as string;
  }

  async stopPodSandbox(id: string): Promise<void> {
    await this.#rt('StopPodSandbox', { podSandboxId: id });
  }

  async removePodSandbox(id: string): Promise<void> {
    await this.#rt('RemovePodSandbox', { podSandboxId: id });
  }

  async podSandboxStatus(id: string): Promise<PodSandboxStatus> {
    const res = await this.#rt('PodSandboxStatus', { podSandboxId: id, verbose: false });
    if (!res.status) throw new NodeletError('INTERNAL', `PodSandboxStatus: runtime returned no status for sandbox ${id}`, { method: 'PodSandboxStatus', id });
    return res.status as PodSandboxStatus;
  }

  async listPodSandbox(filter?: PodSandboxFilter, o?: CallOptions): Promise<PodSandbox[]> {
    if (!filter) return this.#rawList('ListPodSandbox');
    const f = { id: filter.id ?? '', labelSelector: filter.labelSelector ?? {}, ...(filter.state ? { state: { state: filter.state } } : {}) };
    const res = await this.#rt('ListPodSandbox', { filter: f }, undefined, o?.signal);
    return (res.items as PodSandbox[]) ?? [];
  }

  async createContainer(podSandboxId: string, config: ContainerConfig, sandboxConfig: PodSandboxConfig): Promise<string> {
    const res = await this.#rt('CreateContainer', { podSandboxId, config, sandboxConfig });
    return res.containerId as string;
  }

  async startContainer(id: string): Promise<void> {
    await this.#rt('StartContainer', { containerId: id });
  }

  async stopContainer(id: string, timeoutSec: number): Promise<void> {
    // The runtime waits up to timeoutSec before it kills: the deadline must cover that.
    const grace = Math.max(0, Math.floor(timeoutSec));
    await this.#rt('StopContainer', { containerId: id, timeout: grace }, this.#requestTimeoutMs + grace * 1000);
  }

  async removeContainer(id: string): Promise<void> {
    await this.#rt('RemoveContainer', { containerId: id });
  }

  async listContainers(filter?: ContainerFilter, o?: CallOptions): Promise<Container[]> {
    if (!filter) {
      const items = await this.#rawList('ListContainers');
      this.#lastContainers = { at: performance.now(), items };
      return items;
    }
    const f = {
      id: filter.id ?? '',
      podSandboxId: filter.podSandboxId ?? '',
      labelSelector: filter.labelSelector ?? {},
      ...(filter.state ? { state: { state: filter.state } } : {}),
    };
    const res = await this.#rt('ListContainers', { filter: f }, undefined, o?.signal);
    return (res.containers as Container[]) ?? [];
  }

  recentContainers(maxAgeMs: number): Container[] | undefined {
    const last = this.#lastContainers;
    return last && performance.now() - last.at <= maxAgeMs ? last.items : undefined;
  }

  async containerStatus(id: string): Promise<ContainerStatus> {
    const res = await this.#rt('ContainerStatus', { containerId: id, verbose: false });
    if (!res.status) throw new NodeletError('INTERNAL', `ContainerStatus: runtime returned no status for container ${id}`, { method: 'ContainerStatus', id });
    return res.status as ContainerStatus;
  }

  async execSync(id: string, cmd: string[], timeoutSec: number, o?: CallOptions): Promise<ExecSyncResult> {
    const t = Math.max(0, Math.floor(timeoutSec));
    // As the kubelet's CRI client: timeout 0 sets no deadline (the call ends with the
    // command, or with o.signal); otherwise the runtime's timeout plus runtimeRequestTimeout.
    const res = await this.#rt('ExecSync', { containerId: id, cmd, timeout: t }, t === 0 ? 'none' : this.#requestTimeoutMs + t * 1000, o?.signal);
    return { stdout: Buffer.from((res.stdout as Uint8Array | undefined) ?? []), stderr: Buffer.from((res.stderr as Uint8Array | undefined) ?? []), exitCode: Number(res.exitCode ?? 0) };
  }

  async exec(req: StreamExecRequest, o?: CallOptions): Promise<string> {
    return streamUrl('Exec', await this.#rt('Exec', req, undefined, o?.signal));
  }

  async attach(req: StreamAttachRequest, o?: CallOptions): Promise<string> {
    return streamUrl('Attach', await this.#rt('Attach', req, undefined, o?.signal));
  }

  async portForward(podSandboxId: string, ports: number[], o?: CallOptions): Promise<string> {
    return streamUrl('PortForward', await this.#rt('PortForward', { podSandboxId, port: ports }, undefined, o?.signal));
  }

  async reopenContainerLog(id: string): Promise<void> {
    await this.#rt('ReopenContainerLog', { containerId: id });
  }

  async listContainerStats(): Promise<ContainerStats[]> {
    const res = await this.#rt('ListContainerStats', {});
    return (res.stats as ContainerStats[]) ?? [];
  }

  async listPodSandboxStats(): Promise<PodSandboxStats[]> {
    const res = await this.#rt('ListPodSandboxStats', {});
    return (res.stats as PodSandboxStats[]) ?? [];
  }

  async checkpointContainer(req: CheckpointRequest, o: { deadlineMs?: number } & CallOptions = {}): Promise<void> {
    const timeoutSec = Math.max(0, Math.floor(req.timeoutSec));
    const deadlineMs = o.deadlineMs ?? Math.max(this.#requestTimeoutMs, timeoutSec * 1000);
    await this.#rt('CheckpointContainer', { containerId: req.containerId, location: req.location, timeout: timeoutSec }, deadlineMs, o.signal);
  }

  serverStream(path: string, body: Uint8Array, onMessage: (message: Buffer) => void, signal: AbortSignal): Promise<void> {
    return this.#runtimeChannel.serverStream(path, body, onMessage, signal);
  }

  // ---------------------------------------------------------------- ImageService

  async imageStatus(image: string): Promise<Image | undefined> {
    const res = await this.#img('ImageStatus', { image: { image }, verbose: false });
    return (res.image as Image | null) ?? undefined;
  }

  async pullImage(image: string, sandboxConfig?: PodSandboxConfig, auth?: AuthConfig): Promise<string> {
    // The credentials go only in the request: never logged, never in an error (the codec's errors name the method, not the fields).
    const res = await this.#img('PullImage', { image: { image }, ...(auth ? { auth } : {}), ...(sandboxConfig ? { sandboxConfig } : {}) }, this.#pullTimeoutMs);
    return res.imageRef as string;
  }

  async listImages(): Promise<Image[]> {
    const res = await this.#img('ListImages', {});
    return (res.images as Image[]) ?? [];
  }

  async removeImage(image: string): Promise<void> {
    await this.#img('RemoveImage', { image: { image } });
  }

  async imageFsInfo(): Promise<string[]> {
    const res = await this.#img('ImageFsInfo', {});
    return ((res.imageFilesystems as { fsId?: { mountpoint?: string } }[] | undefined) ?? []).map((f) => f.fsId?.mountpoint ?? '').filter((m) => m !== '');
  }

  async imageFsUsage(): Promise<FilesystemUsage[]> {
    const res = await this.#img('ImageFsInfo', {});
    return (res.imageFilesystems as FilesystemUsage[] | undefined) ?? [];
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#imageChannel.close();
    this.#runtimeChannel.close();
  }

  // ---------------------------------------------------------------- the calls

  /** A RuntimeService call answered as its decoded message. */
  #rt(method: string, req: object, deadlineMs?: number | 'none', signal?: AbortSignal): Promise<Record<string, unknown>> {
    return this.#call('RuntimeService', method, req, { deadlineMs, signal });
  }

  /** An ImageService call answered as its decoded message. */
  #img(method: string, req: object, deadlineMs?: number): Promise<Record<string, unknown>> {
    return this.#call('ImageService', method, req, { deadlineMs });
  }

  /** An unfiltered list (the relist's), decoded by its ListDecoder. */
  async #rawList<K extends keyof RawLists>(method: K): Promise<RawLists[K][]> {
    const raw = await this.#call<Buffer>('RuntimeService', method, {}, { decode: (b) => b });
    try {
      return this.#lists[method].decode(raw);
    } catch (err) {
      throw new NodeletError('INTERNAL', `${method}: cannot decode the runtime's answer: ${err instanceof Error ? err.message : String(err)}`, { method });
    }
  }

  /**
   * One unary call of CRI `method` of `service`; `decode` turns the raw answer into the
   * result (the method's response decoder by default; the raw lists keep the bytes).
   */
  async #call<Res>(service: Service, method: string, req: object, o: CallSettings = {}): Promise<Res> {
    const { decode, signal } = o;
    const deadlineMs = o.deadlineMs === 'none' ? undefined : (o.deadlineMs ?? this.#requestTimeoutMs);
    if (this.#closed) throw new NodeletError('CANCELLED', `${method}: CRI client closed`, { method });
    const m: CriMethod = this.#codec.method(service, method);
    const channel = service === 'RuntimeService' ? this.#runtimeChannel : this.#imageChannel;
    const started = Date.now();
    const done = (err: unknown, res?: unknown): Res => this.#finish(method, started, err, res) as Res;
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

  /** The end of a call started at `started`: observed and logged; `err` thrown as a NodeletError, else `res` answered. */
  #finish(method: string, started: number, err: unknown, res: unknown): unknown {
    const ms = Date.now() - started;
    this.#opts.observe?.(method, ms / 1000, !!err);
    if (err) {
      const e = fromGrpcError(method, err);
      this.#log.debug({ method, ms, code: e.code, err: e.message }, 'CRI call failed');
      throw e;
    }
    this.#log.trace({ method, ms }, 'CRI call');
    return res;
  }
}
