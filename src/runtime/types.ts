/**
 * nodelet's view of the CRI (runtime.v1), as the pod workers, the node status and the
 * checkpoint endpoint call it.
 *
 * Shapes are those @grpc/proto-loader produces for proto/api.proto with
 * `keepCase: false` (camelCase field names), `enums: String` (enum values are their
 * names), `longs: Number` (int64/uint64 as JS numbers: nanosecond timestamps near 1.7e18
 * keep ~256 ns precision, plenty for status times) and `defaults: true` (absent scalars
 * read as 0 / '' / false, absent maps and lists as {} / []). Request types mark optional
 * what the runtime defaults; response types are complete.
 *
 * Every method of RuntimeService and ImageService throws NodeletError (src/errors.ts) with
 * the code mapped from the gRPC status in src/runtime/errors.ts; `details.grpcCode` and
 * `details.runtimeMessage` keep what the runtime said. No method retries: retries belong
 * to the loops that call them (pod workers, runtime health).
 */

export type NamespaceMode = 'POD' | 'CONTAINER' | 'NODE' | 'TARGET';
export type Protocol = 'TCP' | 'UDP' | 'SCTP';
export type MountPropagation = 'PROPAGATION_PRIVATE' | 'PROPAGATION_HOST_TO_CONTAINER' | 'PROPAGATION_BIDIRECTIONAL';
export type SecurityProfileType = 'RuntimeDefault' | 'Unconfined' | 'Localhost';
export type SupplementalGroupsPolicy = 'Merge' | 'Strict';
export type PodSandboxState = 'SANDBOX_READY' | 'SANDBOX_NOTREADY';
export type ContainerState = 'CONTAINER_CREATED' | 'CONTAINER_RUNNING' | 'CONTAINER_EXITED' | 'CONTAINER_UNKNOWN';

// ------------------------------------------------------------------ shared pieces

export interface Int64Value {
  value: number;
}

export interface NamespaceOption {
  network?: NamespaceMode;
  pid?: NamespaceMode;
  ipc?: NamespaceMode;
  targetId?: string;
}

export interface SecurityProfile {
  profileType: SecurityProfileType;
  /** Absolute path of the profile file; only with `Localhost`. */
  localhostRef?: string;
}

export interface SELinuxOption {
  user?: string;
  role?: string;
  type?: string;
  level?: string;
}

export interface KeyValue {
  key: string;
  value: string;
}

export interface ImageSpec {
  image: string;
  annotations?: Record<string, string>;
  userSpecifiedImage?: string;
  runtimeHandler?: string;
}

export interface DNSConfig {
  servers?: string[];
  searches?: string[];
  options?: string[];
}

export interface PortMapping {
  protocol?: Protocol;
  containerPort: number;
  hostPort?: number;
  hostIp?: string;
}

export interface Mount {
  containerPath: string;
  hostPath: string;
  readonly?: boolean;
  selinuxRelabel?: boolean;
  propagation?: MountPropagation;
}

/** Linux cgroup settings; 0 / '' means "not set". */
export interface LinuxContainerResources {
  cpuPeriod?: number;
  cpuQuota?: number;
  cpuShares?: number;
  memoryLimitInBytes?: number;
  oomScoreAdj?: number;
  cpusetCpus?: string;
  cpusetMems?: string;
  unified?: Record<string, string>;
  memorySwapLimitInBytes?: number;
}

/** CRI RuntimeConfigResponse, `linux.cgroup_driver` as the kubelet's config names it. */
export interface RuntimeCgroupConfig {
  cgroupDriver: 'systemd' | 'cgroupfs';
}

// ------------------------------------------------------------------ sandboxes

export interface PodSandboxMetadata {
  name: string;
  uid: string;
  namespace: string;
  /** A replacement sandbox for the same pod takes the next attempt: the runtime reserves names per attempt. */
  attempt: number;
}

export interface LinuxSandboxSecurityContext {
  namespaceOptions?: NamespaceOption;
  selinuxOptions?: SELinuxOption;
  runAsUser?: Int64Value;
  runAsGroup?: Int64Value;
  readonlyRootfs?: boolean;
  supplementalGroups?: number[];
  supplementalGroupsPolicy?: SupplementalGroupsPolicy;
  privileged?: boolean;
  seccomp?: SecurityProfile;
  apparmor?: SecurityProfile;
}

export interface LinuxPodSandboxConfig {
  cgroupParent?: string;
  securityContext?: LinuxSandboxSecurityContext;
  sysctls?: Record<string, string>;
  overhead?: LinuxContainerResources;
  resources?: LinuxContainerResources;
}

export interface PodSandboxConfig {
  metadata: PodSandboxMetadata;
  /** Leave empty for `network: NODE` sandboxes: containerd 1.6 refuses a hostname there. */
  hostname?: string;
  logDirectory?: string;
  dnsConfig?: DNSConfig;
  portMappings?: PortMapping[];
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  linux?: LinuxPodSandboxConfig;
}

/** ListPodSandbox item. */
export interface PodSandbox {
  id: string;
  metadata: PodSandboxMetadata;
  state: PodSandboxState;
  /** Nanoseconds since the epoch. */
  createdAt: number;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtimeHandler: string;
}

export interface PodSandboxStatus extends PodSandbox {
  network: { ip: string; additionalIps: { ip: string }[] } | null;
  linux: { namespaces: { options: NamespaceOption | null } | null } | null;
}

/** ANDed; `state` is unwrapped from CRI's PodSandboxStateValue. */
export interface PodSandboxFilter {
  id?: string;
  state?: PodSandboxState;
  labelSelector?: Record<string, string>;
}

// ------------------------------------------------------------------ containers

export interface LinuxContainerSecurityContext {
  capabilities?: { addCapabilities?: string[]; dropCapabilities?: string[]; addAmbientCapabilities?: string[] };
  privileged?: boolean;
  namespaceOptions?: NamespaceOption;
  selinuxOptions?: SELinuxOption;
  runAsUser?: Int64Value;
  runAsGroup?: Int64Value;
  runAsUsername?: string;
  readonlyRootfs?: boolean;
  supplementalGroups?: number[];
  supplementalGroupsPolicy?: SupplementalGroupsPolicy;
  noNewPrivs?: boolean;
  maskedPaths?: string[];
  readonlyPaths?: string[];
  seccomp?: SecurityProfile;
  apparmor?: SecurityProfile;
  /** Deprecated string form of `apparmor` (runtime/default, unconfined, localhost/<name>): what containerd 1.6 reads. */
  apparmorProfile?: string;
}

export interface ContainerMetadata {
  name: string;
  /** Restart count: (name, attempt) is unique within a sandbox for its lifetime. */
  attempt: number;
}

export interface ContainerConfig {
  metadata: ContainerMetadata;
  image: ImageSpec;
  command?: string[];
  args?: string[];
  workingDir?: string;
  envs?: KeyValue[];
  mounts?: Mount[];
  devices?: { containerPath: string; hostPath: string; permissions: string }[];
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  /** Relative to PodSandboxConfig.logDirectory. */
  logPath?: string;
  stdin?: boolean;
  stdinOnce?: boolean;
  tty?: boolean;
  linux?: { resources?: LinuxContainerResources; securityContext?: LinuxContainerSecurityContext };
}

/** ListContainers item. */
export interface Container {
  id: string;
  podSandboxId: string;
  metadata: ContainerMetadata;
  image: ImageSpec | null;
  imageRef: string;
  state: ContainerState;
  createdAt: number;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  imageId: string;
}

export interface ContainerStatus {
  id: string;
  metadata: ContainerMetadata;
  state: ContainerState;
  /** Nanoseconds since the epoch; 0 = not applicable. */
  createdAt: number;
  startedAt: number;
  finishedAt: number;
  exitCode: number;
  image: ImageSpec | null;
  imageRef: string;
  /** containerd: `Completed` (exit 0), `Error`, `OOMKilled`. */
  reason: string;
  message: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  mounts: Mount[];
  logPath: string;
  imageId: string;
}

/** ANDed; `state` is unwrapped from CRI's ContainerStateValue. */
export interface ContainerFilter {
  id?: string;
  state?: ContainerState;
  podSandboxId?: string;
  labelSelector?: Record<string, string>;
}

export interface CheckpointRequest {
  containerId: string;
  /** Path of the archive the runtime writes. */
  location: string;
  /** Seconds the runtime may take; 0 = its default. */
  timeoutSec: number;
}

// ------------------------------------------------------------------ runtime and images

export interface VersionInfo {
  /** CRI API version the runtime speaks, e.g. `0.1.0`. */
  version: string;
  /** e.g. `containerd`. */
  runtimeName: string;
  /** e.g. `1.6.20~ds1`. */
  runtimeVersion: string;
  /** e.g. `v1`. */
  runtimeApiVersion: string;
}

export interface RuntimeCondition {
  /** `RuntimeReady`, `NetworkReady`, or an informative type. */
  type: string;
  status: boolean;
  reason: string;
  message: string;
}

export interface RuntimeStatusInfo {
  conditions: RuntimeCondition[];
  /** Only filled when asked with verbose. */
  info: Record<string, string>;
  /** StatusResponse.features: what the runtime says it implements (all false when it says nothing, as containerd 1.6). */
  features?: { supplementalGroupsPolicy: boolean };
}

export interface Image {
  id: string;
  repoTags: string[];
  repoDigests: string[];
  size: number;
  uid: Int64Value | null;
  username: string;
  pinned: boolean;
}

/**
 * What a call made on a client's behalf (an HTTPS request handler) passes: `signal` aborts
 * when the client goes, and the call ends at once with CANCELLED (the runtime sees its
 * request cancelled), as the kubelet passes its request's context down to the CRI call.
 */
export interface CallOptions {
  signal?: AbortSignal;
}

/** The CRI RuntimeService as nodelet uses it. Every call has a deadline (the client's requestTimeoutMs unless noted). */
export interface RuntimeService {
  version(): Promise<VersionInfo>;
  status(verbose?: boolean): Promise<RuntimeStatusInfo>;
  /**
   * Gives the runtime the node's pod CIDR (`runtime_config.network_config.pod_cidr`;
   * comma-separated for dual stack), as the kubelet does once its Node has one. containerd
   * uses it only to render a `conf_template`; with a CNI config in place it answers OK and
   * ignores it.
   */
  updateRuntimeConfig(podCIDR: string): Promise<void>;
  /** Creates and starts a sandbox; returns its ID. Fails (containerd: `name is reserved`) while a sandbox with the same metadata exists. */
  runPodSandbox(config: PodSandboxConfig, runtimeHandler?: string): Promise<string>;
  /** Stops the sandbox and its containers. NOT_FOUND for an unknown ID (containerd 1.6). */
  stopPodSandbox(id: string): Promise<void>;
  /** Removes the sandbox and its containers. OK for an unknown ID. */
  removePodSandbox(id: string): Promise<void>;
  /** NOT_FOUND for an unknown ID. */
  podSandboxStatus(id: string): Promise<PodSandboxStatus>;
  listPodSandbox(filter?: PodSandboxFilter, opts?: CallOptions): Promise<PodSandbox[]>;
  /** Returns the container ID. `sandboxConfig` must be the config the sandbox was run with. */
  createContainer(podSandboxId: string, config: ContainerConfig, sandboxConfig: PodSandboxConfig): Promise<string>;
  startContainer(id: string): Promise<void>;
  /** Signals the container, kills it after `timeoutSec`; deadline = requestTimeoutMs + timeoutSec. NOT_FOUND for an unknown ID. */
  stopContainer(id: string, timeoutSec: number): Promise<void>;
  /** OK for an unknown ID; a running container is killed first. */
  removeContainer(id: string): Promise<void>;
  listContainers(filter?: ContainerFilter, opts?: CallOptions): Promise<Container[]>;
  /**
   * The last unfiltered `listContainers()` answer (the pod relist's) when it came at most
   * `maxAgeMs` ago, else undefined: for readers that can use a list that old instead of
   * asking the runtime again (log rotation). Optional: a client may keep none.
   */
  recentContainers?(maxAgeMs: number): Container[] | undefined;
  /** NOT_FOUND for an unknown ID. */
  containerStatus(id: string): Promise<ContainerStatus>;
  /**
   * Runs `cmd` in a running container and waits up to `timeoutSec` for it; the call's
   * deadline is requestTimeoutMs + that timeout. `timeoutSec` 0: no timeout and no deadline,
   * as the kubelet's CRI client (its `/run`): the call ends with the command or with
   * `opts.signal` (containerd then kills the command). A command that runs and fails is an
   * answer (its exit code), not an error.
   */
  execSync(id: string, cmd: string[], timeoutSec: number, opts?: CallOptions): Promise<ExecSyncResult>;
  /**
   * Asks the runtime to write a checkpoint archive of a running container at
   * `req.location`. The call's deadline is `opts.deadlineMs` when given, else the larger
   * of requestTimeoutMs and `req.timeoutSec`. containerd 1.6: UNIMPLEMENTED.
   */
  checkpointContainer(req: CheckpointRequest, opts?: { deadlineMs?: number } & CallOptions): Promise<void>;
  /**
   * CRI Exec, Attach, PortForward: the URL of the runtime's streaming server for one
   * session (containerd: `http://127.0.0.1:<port>/exec/<token>`, valid for one use within
   * about a minute), which the node agent proxies the client's upgraded connection to.
   * Optional for fakes.
   */
  exec?(req: StreamExecRequest, opts?: CallOptions): Promise<string>;
  attach?(req: StreamAttachRequest, opts?: CallOptions): Promise<string>;
  portForward?(podSandboxId: string, ports: number[], opts?: CallOptions): Promise<string>;
  /** CRI ReopenContainerLog: the runtime reopens the container's log file (after a rotation). Optional for fakes. */
  reopenContainerLog?(id: string): Promise<void>;
  /** CRI ListContainerStats: usage of the runtime's containers (containerd 1.6: every container it has, cpu, memory and writable layer; swap null). Optional for fakes. */
  listContainerStats?(): Promise<ContainerStats[]>;
  /** CRI ListPodSandboxStats. containerd 1.6 fails it (UNKNOWN, "cgroupPath is empty") for sandboxes without a cgroup parent (nodelet's with `cgroupsPerQOS: false`). Optional for fakes. */
  listPodSandboxStats?(): Promise<PodSandboxStats[]>;
}

export interface StreamExecRequest {
  containerId: string;
  cmd: string[];
  tty: boolean;
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
}

export type StreamAttachRequest = Omit<StreamExecRequest, 'cmd'>;

export interface ExecSyncResult {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number;
}

/** CRI AuthConfig (PullImageRequest.auth, field 2): registry credentials for one pull. Empty fields are not sent. */
export interface AuthConfig {
  username?: string;
  password?: string;
  /** base64 of `username:password`. */
  auth?: string;
  serverAddress?: string;
  identityToken?: string;
  registryToken?: string;
}

/** The CRI ImageService as nodelet uses it. */
export interface ImageService {
  /** The image when present, `undefined` when not (absence is not an error). */
  imageStatus(image: string): Promise<Image | undefined>;
  /**
   * Pulls the image; returns its image ref. containerd contacts the registry even for a
   * present image: call imageStatus first. Deadline: the client's pullTimeoutMs.
   */
  pullImage(image: string, sandboxConfig?: PodSandboxConfig, auth?: AuthConfig): Promise<string>;
  listImages(): Promise<Image[]>;
  /** OK for an absent image. */
  removeImage(image: string): Promise<void>;
  /**
   * The mountpoints of the runtime's image filesystems (CRI ImageFsInfo), for the imagefs
   * eviction signals. Optional: a runtime (or fake) without it leaves the caller to use the
   * root dir's filesystem.
   */
  imageFsInfo?(): Promise<string[]>;
  /** The whole CRI ImageFsInfo answer (mountpoint, used bytes and inodes), for /stats/summary. */
  imageFsUsage?(): Promise<FilesystemUsage[]>;
}

// ------------------------------------------------------------------ stats (metrics/resource, stats/summary)

/** CRI UInt64Value: absent (null) means "not reported". */
export interface UInt64Value {
  value: number;
}

export interface CpuUsage {
  /** Nanoseconds since the epoch. */
  timestamp: number;
  usageCoreNanoSeconds: UInt64Value | null;
  usageNanoCores: UInt64Value | null;
}

export interface MemoryUsage {
  timestamp: number;
  workingSetBytes: UInt64Value | null;
  availableBytes: UInt64Value | null;
  usageBytes: UInt64Value | null;
  rssBytes: UInt64Value | null;
  pageFaults: UInt64Value | null;
  majorPageFaults: UInt64Value | null;
}

export interface SwapUsage {
  timestamp: number;
  swapAvailableBytes: UInt64Value | null;
  swapUsageBytes: UInt64Value | null;
}

export interface FilesystemUsage {
  timestamp: number;
  fsId: { mountpoint: string } | null;
  usedBytes: UInt64Value | null;
  inodesUsed: UInt64Value | null;
}

export interface ContainerStats {
  attributes: { id: string; metadata: ContainerMetadata | null; labels: Record<string, string>; annotations: Record<string, string> } | null;
  cpu: CpuUsage | null;
  memory: MemoryUsage | null;
  writableLayer: FilesystemUsage | null;
  swap: SwapUsage | null;
}

export interface PodSandboxStats {
  attributes: { id: string; metadata: PodSandboxMetadata | null; labels: Record<string, string>; annotations: Record<string, string> } | null;
  linux: {
    cpu: CpuUsage | null;
    memory: MemoryUsage | null;
    network: { timestamp: number; defaultInterface: NetworkInterfaceUsage | null; interfaces: NetworkInterfaceUsage[] } | null;
    process: { timestamp: number; processCount: UInt64Value | null } | null;
    containers: ContainerStats[];
  } | null;
}

export interface NetworkInterfaceUsage {
  name: string;
  rxBytes: UInt64Value | null;
  rxErrors: UInt64Value | null;
  txBytes: UInt64Value | null;
  txErrors: UInt64Value | null;
}
