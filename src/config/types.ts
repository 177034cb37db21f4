/**
 * The effective nodelet configuration: the kubelet's `kubelet.config.k8s.io/v1beta1`
 * `KubeletConfiguration`, field names in camelCase exactly as in its YAML.
 *
 * Contract of the effective config produced by loadConfig():
 * - every field with a kubelet default is present (required in this type);
 * - durations are Go duration strings in canonical form (`2m0s`, `30s`), as the kubelet
 *   prints them; use parseDuration() for milliseconds;
 * - `featureGates` holds only the gates set explicitly (as the kubelet's /configz does);
 *   ask isFeatureEnabled() for the effective value of a gate, defaults included;
 * - the object is deep-frozen.
 *
 * Fields marked "accepted" (and the block of other v1beta1 fields at the end) are kubelet
 * fields nodelet reads (type-checked, kept, shown by `config view`) but does not act on;
 * they are accepted so that existing kubelet configuration files load unchanged. Those the
 * kubelet defaults are defaulted the same way (defaults.ts), so they are required here;
 * `crashLoopBackOff.maxContainerRestartPeriod` and `imagePullCredentialsVerificationPolicy`
 * are defaulted only while their feature gate is on, as in the kubelet.
 */

export const KUBELET_API_VERSION = 'kubelet.config.k8s.io/v1beta1';
export const KUBELET_KIND = 'KubeletConfiguration';

export type AuthorizationMode = 'AlwaysAllow' | 'Webhook';
export type SwapBehavior = 'NoSwap' | 'LimitedSwap' | '';
export type CgroupDriver = 'cgroupfs' | 'systemd';
export type HairpinMode = 'promiscuous-bridge' | 'hairpin-veth' | 'none';

export interface KubeletAuthentication {
  x509: { clientCAFile?: string };
  webhook: { enabled: boolean; cacheTTL: string };
  anonymous: { enabled: boolean };
}

export interface KubeletAuthorization {
  mode: AuthorizationMode;
  webhook: { cacheAuthorizedTTL: string; cacheUnauthorizedTTL: string };
}

export interface KubeletConfiguration {
  // --- pods and their sources
  /** Directory of static pod manifests; unset: no static pods. */
  staticPodPath?: string;
  /** accepted */ staticPodURL?: string;
  /** HTTP headers for staticPodURL; a map of lists (merged key by key, a key's list replaced whole). */
  staticPodURLHeader?: Record<string, string[]>;
  /** How often pods are resynced (default 1m0s). */
  syncFrequency: string;
  /** How often staticPodPath is re-read (default 20s). */
  fileCheckFrequency: string;
  /** accepted */ httpCheckFrequency: string;
  maxPods: number;
  /** accepted */ podsPerCore?: number;
  /** accepted */ podPidsLimit: number;
  podLogsDir: string;

  // --- container runtime
  containerRuntimeEndpoint: string;
  /** Unset: the runtime endpoint serves images too. */
  imageServiceEndpoint?: string;
  runtimeRequestTimeout: string;
  serializeImagePulls: boolean;
  maxParallelImagePulls?: number;
  cgroupDriver: CgroupDriver;
  hairpinMode: HairpinMode;
  seccompDefault: boolean;
  failSwapOn: boolean;
  memorySwap: { swapBehavior?: SwapBehavior };

  // --- servers
  /** accepted */ enableServer: boolean;
  address: string;
  port: number;
  /** 0 disables the read-only port. */
  readOnlyPort: number;
  healthzBindAddress: string;
  /** 0 disables /healthz. */
  healthzPort: number;
  tlsCertFile?: string;
  tlsPrivateKeyFile?: string;
  /** accepted */ tlsCipherSuites?: string[];
  /** accepted */ tlsMinVersion?: string;
  /** accepted */ rotateCertificates?: boolean;
  /** A serving certificate from the cluster (kubelet-serving CSR), src/server/serving-cert.ts. */ serverTLSBootstrap?: boolean;
  authentication: KubeletAuthentication;
  authorization: KubeletAuthorization;
  enableDebuggingHandlers: boolean;
  /** accepted */ enableContentionProfiling?: boolean;
  /** accepted */ enableProfilingHandler: boolean;
  /** accepted */ enableDebugFlagsHandler: boolean;
  /** accepted */ enableSystemLogHandler: boolean;
  /** accepted */ enableSystemLogQuery?: boolean;

  // --- cluster
  clusterDomain?: string;
  clusterDNS?: string[];
  /** The host's resolver config for `Default` DNS; '' = none. Default /etc/resolv.conf. */
  resolvConf: string;
  /** accepted */ providerID?: string;
  /** accepted */ registerNode: boolean;
  /** accepted */ registerWithTaints?: unknown[];
  /** Standalone: the pod CIDR nodelet gives the runtime (UpdateRuntimeConfig); connected, the Node's spec.podCIDR. */
  podCIDR?: string;

  // --- node status and lease
  nodeStatusUpdateFrequency: string;
  nodeStatusReportFrequency: string;
  nodeLeaseDurationSeconds: number;
  /** At most this many images in the Node's status.images (-1: all). */
  nodeStatusMaxImages: number;

  // --- image garbage collection (src/pods/images/image-gc.ts)
  imageMinimumGCAge: string;
  /** 0 or unset: off. */
  imageMaximumGCAge?: string;
  imageGCHighThresholdPercent: number;
  imageGCLowThresholdPercent: number;

  // --- eviction and reservations
  /** Signal -> quantity or percentage. Unset: the kubelet defaults; set: only the signals given (see defaults.ts). */
  evictionHard: Record<string, string>;
  mergeDefaultEvictionSettings: boolean;
  /** accepted */ evictionSoft?: Record<string, string>;
  /** accepted */ evictionSoftGracePeriod?: Record<string, string>;
  /** accepted */ evictionPressureTransitionPeriod: string;
  /** accepted */ evictionMaxPodGracePeriod?: number;
  /** accepted */ evictionMinimumReclaim?: Record<string, string>;
  /** Subtracted from the Node's allocatable (cpu, memory, ephemeral-storage; pid accepted), and from what kubepods is limited to (src/pods/cgroups). */
  systemReserved?: Record<string, string>;
  kubeReserved?: Record<string, string>;
  /** accepted */ reservedSystemCPUs?: string;
  /** `pods`: kubepods limited to allocatable; `kube-reserved`/`system-reserved`: their cgroups to the reservation (src/pods/cgroups). */
  enforceNodeAllocatable: string[];

  // --- features
  /** Gates set explicitly (file or --feature-gates). Effective values: isFeatureEnabled(). */
  featureGates: Record<string, boolean>;

  // --- other kubelet v1beta1 fields: accepted (type-checked and kept), not acted on
  oomScoreAdj: number;
  streamingConnectionIdleTimeout: string;
  registryPullQPS: number;
  registryBurst: number;
  eventRecordQPS: number;
  eventBurst: number;
  kubeAPIQPS: number;
  kubeAPIBurst: number;
  contentType: string;
  imagePullCredentialsVerificationPolicy?: string;
  preloadedImagesVerificationAllowlist?: string[];
  volumeStatsAggPeriod: string;
  volumePluginDir: string;
  kubeletCgroups?: string;
  systemCgroups?: string;
  cgroupRoot?: string;
  cgroupsPerQOS: boolean;
  cpuManagerPolicy: string;
  cpuManagerPolicyOptions?: Record<string, string>;
  cpuManagerReconcilePeriod: string;
  memoryManagerPolicy: string;
  topologyManagerPolicy: string;
  topologyManagerScope: string;
  topologyManagerPolicyOptions?: Record<string, string>;
  qosReserved?: Record<string, string>;
  singleProcessOOMKill?: boolean;
  runOnce?: boolean;
  cpuCFSQuota: boolean;
  cpuCFSQuotaPeriod: string;
  maxOpenFiles: number;
  enableControllerAttachDetach: boolean;
  protectKernelDefaults?: boolean;
  makeIPTablesUtilChains: boolean;
  iptablesMasqueradeBit: number;
  iptablesDropBit: number;
  containerLogMaxSize: string;
  containerLogMaxFiles: number;
  containerLogMaxWorkers: number;
  containerLogMonitorInterval: string;
  configMapAndSecretChangeDetectionStrategy: string;
  showHiddenMetricsForVersion?: string;
  systemReservedCgroup?: string;
  kubeReservedCgroup?: string;
  allowedUnsafeSysctls?: string[];
  kernelMemcgNotification?: boolean;
  logging: Record<string, unknown>;
  shutdownGracePeriod?: string;
  shutdownGracePeriodCriticalPods?: string;
  shutdownGracePeriodByPodPriority?: ShutdownGracePeriodByPodPriority[];
  crashLoopBackOff?: { maxContainerRestartPeriod?: string };
  reservedMemory?: unknown[];
  memoryThrottlingFactor: number;
  tracing?: Record<string, unknown>;
  localStorageCapacityIsolation: boolean;
  failCgroupV1: boolean;
  userNamespaces?: { idsPerPod?: number };
}

/** One problem with the configuration (an error, or a warning in LoadedConfig.warnings). */
export interface ConfigProblem {
  /** Where the offending value came from: an absolute file path, 'flag' or 'default'. */
  file: string;
  /** Dotted field path (`authorization.webhook.cacheAuthorizedTTL`, `evictionHard.memory.available`); '' for the file itself. */
  field: string;
  message: string;
}

/** Origin of a value: an absolute file path, 'flag' or 'default'. */
export type ConfigOrigin = string;

export interface LoadedConfig {
  /** The effective configuration, defaults applied, deep-frozen. */
  readonly config: Readonly<KubeletConfiguration>;
  /**
   * Dotted leaf path -> origin, for every leaf of `config`. A list is one leaf; each map key
   * is a leaf (`featureGates.ContainerCheckpoint`, `staticPodURLHeader.site-a`); an empty
   * map or object is a leaf of its own.
   */
  readonly origins: ReadonlyMap<string, ConfigOrigin>;
  /** Non-fatal findings (unknown fields), each naming the file and field. */
  readonly warnings: readonly ConfigProblem[];
  /** Files read, in the order applied: --config, then the drop-ins. */
  readonly sources: readonly string[];
}

/** One entry of `shutdownGracePeriodByPodPriority` (the kubelet's ShutdownGracePeriodByPodPriority). */
export interface ShutdownGracePeriodByPodPriority {
  /** The lowest pod priority of this group. */
  priority: number;
  /** How long the pods of this group get to stop. */
  shutdownGracePeriodSeconds: number;
}
