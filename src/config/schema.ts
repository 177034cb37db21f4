/**
 * The shape of a v1beta1 KubeletConfiguration document, field by field: what each file is
 * type-checked against before merging (as the kubelet's decoder checks each file), and
 * what `config view` knows is a list (one leaf) or a map (one leaf per key).
 *
 * Fields not listed here are unknown: a warning each, then dropped (the kubelet's lenient
 * decoding fallback). Keep this table in step with KubeletConfiguration in types.ts.
 */

export type FieldSchema =
  | { readonly kind: 'string' }
  | { readonly kind: 'bool' }
  | { readonly kind: 'int'; readonly bits: 32 | 64 }
  | { readonly kind: 'float' }
  /** A Go duration string (metav1.Duration). */
  | { readonly kind: 'duration' }
  /** A list, replaced whole by a later file. */
  | { readonly kind: 'list'; readonly of: 'string' | 'any' }
  /** A map with free keys, merged key by key. */
  | { readonly kind: 'map'; readonly of: 'string' | 'bool' | 'stringList' }
  /** A nested structure with known fields, merged field by field. */
  | { readonly kind: 'object'; readonly fields: Readonly<Record<string, FieldSchema>> }
  /** Any JSON object, merged as JSON merge patch; contents not checked (e.g. `logging`). */
  | { readonly kind: 'anyObject' };

const str = { kind: 'string' } as const;
const bool = { kind: 'bool' } as const;
const int32 = { kind: 'int', bits: 32 } as const;
const int64 = { kind: 'int', bits: 64 } as const;
const float = { kind: 'float' } as const;
const duration = { kind: 'duration' } as const;
const strList = { kind: 'list', of: 'string' } as const;
const anyList = { kind: 'list', of: 'any' } as const;
const strMap = { kind: 'map', of: 'string' } as const;
const obj = (fields: Record<string, FieldSchema>) => ({ kind: 'object', fields }) as const;

/** Top-level fields of KubeletConfiguration (apiVersion and kind are checked separately). */
export const KUBELET_CONFIG_SCHEMA: Readonly<Record<string, FieldSchema>> = {
  enableServer: bool,
  staticPodPath: str,
  podLogsDir: str,
  syncFrequency: duration,
  fileCheckFrequency: duration,
  httpCheckFrequency: duration,
  staticPodURL: str,
  staticPodURLHeader: { kind: 'map', of: 'stringList' },
  address: str,
  port: int32,
  readOnlyPort: int32,
  tlsCertFile: str,
  tlsPrivateKeyFile: str,
  tlsCipherSuites: strList,
  tlsMinVersion: str,
  rotateCertificates: bool,
  serverTLSBootstrap: bool,
  authentication: obj({
    x509: obj({ clientCAFile: str }),
    webhook: obj({ enabled: bool, cacheTTL: duration }),
    anonymous: obj({ enabled: bool }),
  }),
  authorization: obj({
    mode: str,
    webhook: obj({ cacheAuthorizedTTL: duration, cacheUnauthorizedTTL: duration }),
  }),
  registryPullQPS: int32,
  registryBurst: int32,
  imagePullCredentialsVerificationPolicy: str,
  preloadedImagesVerificationAllowlist: strList,
  eventRecordQPS: int32,
  eventBurst: int32,
  enableDebuggingHandlers: bool,
  enableContentionProfiling: bool,
  healthzPort: int32,
  healthzBindAddress: str,
  oomScoreAdj: int32,
  clusterDomain: str,
  clusterDNS: strList,
  streamingConnectionIdleTimeout: duration,
  nodeStatusUpdateFrequency: duration,
  nodeStatusReportFrequency: duration,
  nodeLeaseDurationSeconds: int32,
  imageMinimumGCAge: duration,
  imageMaximumGCAge: duration,
  imageGCHighThresholdPercent: int32,
  imageGCLowThresholdPercent: int32,
  volumeStatsAggPeriod: duration,
  kubeletCgroups: str,
  systemCgroups: str,
  cgroupRoot: str,
  cgroupsPerQOS: bool,
  cgroupDriver: str,
  cpuManagerPolicy: str,
  singleProcessOOMKill: bool,
  cpuManagerPolicyOptions: strMap,
  cpuManagerReconcilePeriod: duration,
  memoryManagerPolicy: str,
  topologyManagerPolicy: str,
  topologyManagerScope: str,
  topologyManagerPolicyOptions: strMap,
  qosReserved: strMap,
  runtimeRequestTimeout: duration,
  hairpinMode: str,
  maxPods: int32,
  podCIDR: str,
  podPidsLimit: int64,
  resolvConf: str,
  runOnce: bool,
  cpuCFSQuota: bool,
  cpuCFSQuotaPeriod: duration,
  nodeStatusMaxImages: int32,
  maxOpenFiles: int64,
  contentType: str,
  kubeAPIQPS: int32,
  kubeAPIBurst: int32,
  serializeImagePulls: bool,
  maxParallelImagePulls: int32,
  evictionHard: strMap,
  evictionSoft: strMap,
  evictionSoftGracePeriod: strMap,
  evictionPressureTransitionPeriod: duration,
  evictionMaxPodGracePeriod: int32,
  evictionMinimumReclaim: strMap,
  mergeDefaultEvictionSettings: bool,
  podsPerCore: int32,
  enableControllerAttachDetach: bool,
  protectKernelDefaults: bool,
  makeIPTablesUtilChains: bool,
  iptablesMasqueradeBit: int32,
  iptablesDropBit: int32,
  featureGates: { kind: 'map', of: 'bool' },
  failSwapOn: bool,
  memorySwap: obj({ swapBehavior: str }),
  containerLogMaxSize: str,
  containerLogMaxFiles: int32,
  containerLogMaxWorkers: int32,
  containerLogMonitorInterval: duration,
  configMapAndSecretChangeDetectionStrategy: str,
  systemReserved: strMap,
  kubeReserved: strMap,
  reservedSystemCPUs: str,
  showHiddenMetricsForVersion: str,
  systemReservedCgroup: str,
  kubeReservedCgroup: str,
  enforceNodeAllocatable: strList,
  allowedUnsafeSysctls: strList,
  volumePluginDir: str,
  providerID: str,
  kernelMemcgNotification: bool,
  logging: { kind: 'anyObject' },
  enableSystemLogHandler: bool,
  enableSystemLogQuery: bool,
  shutdownGracePeriod: duration,
  shutdownGracePeriodCriticalPods: duration,
  shutdownGracePeriodByPodPriority: anyList,
  crashLoopBackOff: obj({ maxContainerRestartPeriod: duration }),
  reservedMemory: anyList,
  enableProfilingHandler: bool,
  enableDebugFlagsHandler: bool,
  seccompDefault: bool,
  memoryThrottlingFactor: float,
  registerWithTaints: anyList,
  registerNode: bool,
  tracing: { kind: 'anyObject' },
  localStorageCapacityIsolation: bool,
  containerRuntimeEndpoint: str,
  imageServiceEndpoint: str,
  failCgroupV1: bool,
  userNamespaces: obj({ idsPerPod: int64 }),
};

/** The schema of a dotted path's segments, or undefined when a segment is unknown or a free map key. */
export function schemaAt(path: readonly string[]): FieldSchema | undefined {
  let fields: Readonly<Record<string, FieldSchema>> | undefined = KUBELET_CONFIG_SCHEMA;
  let s: FieldSchema | undefined;
  for (const seg of path) {
    if (!fields || !Object.hasOwn(fields, seg)) return undefined;
    s = fields[seg];
    fields = s?.kind === 'object' ? s.fields : undefined;
  }
  return s;
}

/** Every duration field, as paths (for normalizing and range checks). */
export function durationPaths(): string[][] {
  const out: string[][] = [];
  const walk = (fields: Readonly<Record<string, FieldSchema>>, prefix: string[]) => {
    for (const [name, s] of Object.entries(fields)) {
      if (s.kind === 'duration') out.push([...prefix, name]);
      else if (s.kind === 'object') walk(s.fields, [...prefix, name]);
    }
  };
  walk(KUBELET_CONFIG_SCHEMA, []);
  return out;
}
