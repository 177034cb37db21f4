/**
 * Merge rules, defaults and provenance, on in-memory layers (resolveConfig is the pure core
 * of loadConfig). Paths stand for files; nothing is read.
 */
import { describe, expect, it } from 'vitest';
import { resolveConfig, type ConfigLayer } from '../../../src/config/resolve.js';

const HEADER = { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration' };
const MAIN = '/etc/kubernetes/kubelet.yaml';
const A = '/etc/kubernetes/kubelet.conf.d/10-a.conf';
const B = '/etc/kubernetes/kubelet.conf.d/20-b.conf';

type Doc = Record<string, unknown>;
function layers(main?: Doc, a?: Doc, b?: Doc, flags?: Doc): ConfigLayer[] {
  const out: ConfigLayer[] = [];
  if (main) out.push({ origin: MAIN, doc: { ...HEADER, ...main }, requireHeader: true });
  if (a) out.push({ origin: A, doc: { ...HEADER, ...a }, requireHeader: true });
  if (b) out.push({ origin: B, doc: { ...HEADER, ...b }, requireHeader: true });
  if (flags) out.push({ origin: 'flag', doc: flags, requireHeader: false });
  return out;
}

function at(obj: unknown, dotted: string): unknown {
  // Map keys with dots (evictionHard.memory.available) are matched greedily from the left.
  let cur = obj as Record<string, unknown> | undefined;
  let rest = dotted;
  while (rest !== '') {
    if (cur === undefined || cur === null || typeof cur !== 'object') return undefined;
    if (Object.hasOwn(cur, rest)) return cur[rest];
    const i = rest.indexOf('.');
    if (i < 0) return undefined;
    cur = cur[rest.slice(0, i)] as Record<string, unknown> | undefined;
    rest = rest.slice(i + 1);
  }
  return cur;
}

/** The kubelet's default hard eviction thresholds. */
const DEFAULT_EVICTION_HARD = {
  'memory.available': '100Mi',
  'nodefs.available': '10%',
  'nodefs.inodesFree': '5%',
  'imagefs.available': '15%',
  'imagefs.inodesFree': '5%',
};

const DEFAULT_CONFIG = {
  address: '0.0.0.0',
  authentication: { anonymous: { enabled: false }, webhook: { cacheTTL: '2m0s', enabled: true }, x509: {} },
  authorization: { mode: 'Webhook', webhook: { cacheAuthorizedTTL: '5m0s', cacheUnauthorizedTTL: '30s' } },
  cgroupDriver: 'cgroupfs',
  cgroupsPerQOS: true,
  configMapAndSecretChangeDetectionStrategy: 'Watch',
  containerLogMaxFiles: 5,
  containerLogMaxSize: '10Mi',
  containerLogMaxWorkers: 1,
  containerLogMonitorInterval: '10s',
  containerRuntimeEndpoint: 'unix:///run/containerd/containerd.sock',
  contentType: 'application/vnd.kubernetes.protobuf',
  cpuCFSQuota: true,
  cpuCFSQuotaPeriod: '100ms',
  cpuManagerPolicy: 'none',
  cpuManagerReconcilePeriod: '10s',
  crashLoopBackOff: { maxContainerRestartPeriod: '5m0s' },
  enableControllerAttachDetach: true,
  enableDebugFlagsHandler: true,
  enableDebuggingHandlers: true,
  enableProfilingHandler: true,
  enableServer: true,
  enableSystemLogHandler: true,
  enforceNodeAllocatable: ['pods'],
  eventBurst: 100,
  eventRecordQPS: 50,
  evictionHard: DEFAULT_EVICTION_HARD,
  evictionPressureTransitionPeriod: '5m0s',
  failCgroupV1: false,
  failSwapOn: true,
  featureGates: {},
  fileCheckFrequency: '20s',
  hairpinMode: 'promiscuous-bridge',
  healthzBindAddress: '127.0.0.1',
  healthzPort: 10248,
  httpCheckFrequency: '20s',
  imageGCHighThresholdPercent: 85,
  imageGCLowThresholdPercent: 80,
  imageMinimumGCAge: '2m0s',
  imagePullCredentialsVerificationPolicy: 'NeverVerifyPreloadedImages',
  iptablesDropBit: 15,
  iptablesMasqueradeBit: 14,
  kubeAPIBurst: 100,
  kubeAPIQPS: 50,
  localStorageCapacityIsolation: true,
  logging: { flushFrequency: '5s', format: 'text', options: { json: { infoBufferSize: '0' }, text: { infoBufferSize: '0' } } },
  makeIPTablesUtilChains: true,
  maxOpenFiles: 1000000,
  maxPods: 110,
  memoryManagerPolicy: 'None',
  memorySwap: {},
  memoryThrottlingFactor: 0.9,
  mergeDefaultEvictionSettings: false,
  nodeLeaseDurationSeconds: 40,
  nodeStatusMaxImages: 50,
  nodeStatusReportFrequency: '5m0s',
  nodeStatusUpdateFrequency: '10s',
  oomScoreAdj: -999,
  podLogsDir: '/var/log/pods',
  podPidsLimit: -1,
  port: 10250,
  readOnlyPort: 0,
  registerNode: true,
  registryBurst: 10,
  registryPullQPS: 5,
  resolvConf: '/etc/resolv.conf',
  runtimeRequestTimeout: '2m0s',
  seccompDefault: false,
  serializeImagePulls: true,
  streamingConnectionIdleTimeout: '4h0m0s',
  syncFrequency: '1m0s',
  topologyManagerPolicy: 'none',
  topologyManagerScope: 'container',
  volumePluginDir: '/usr/libexec/kubernetes/kubelet-plugins/volume/exec/',
  volumeStatsAggPeriod: '1m0s',
};

describe('defaults', () => {
  it('with no file and no flag, the configuration is the kubelet v1beta1 defaults, every leaf from "default"', () => {
    const r = resolveConfig([]);
    expect(r.problems).toEqual([]);
    expect(r.config).toEqual(DEFAULT_CONFIG);
    const leaves = [...r.origins.keys()].sort();
    // Every leaf of the defaults (a list or an empty map is one leaf).
    const expectedLeaves: string[] = [];
    const walk = (v: unknown, p: string[]) => {
      if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0) {
        for (const [k, c] of Object.entries(v)) walk(c, [...p, k]);
      } else expectedLeaves.push(p.join('.'));
    };
    walk(DEFAULT_CONFIG, []);
    expect(leaves).toEqual(expectedLeaves.sort());
    expect(new Set(r.origins.values())).toEqual(new Set(['default']));
  });

  it('deep-freezes the configuration', () => {
    const { config } = resolveConfig(layers({ clusterDNS: ['10.0.0.10'] }));
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.authorization.webhook)).toBe(true);
    expect(Object.isFrozen(config.clusterDNS)).toBe(true);
    expect(() => {
      (config as { port: number }).port = 1;
    }).toThrow(TypeError);
  });
});

interface MergeCase {
  name: string;
  main?: Doc;
  a?: Doc;
  b?: Doc;
  flags?: Doc;
  /** dotted path -> expected value (undefined: absent) */
  values: Record<string, unknown>;
  /** dotted path -> expected origin (undefined: not a leaf) */
  origins: Record<string, string | undefined>;
}

const MERGE_CASES: MergeCase[] = [
  {
    name: 'a scalar in a drop-in replaces the main value',
    main: { port: 11250, maxPods: 50 },
    a: { port: 12250 },
    values: { port: 12250, maxPods: 50 },
    origins: { port: A, maxPods: MAIN },
  },
  {
    name: 'a later drop-in wins over an earlier one (lexical order), and flags win over all',
    main: { port: 11250, healthzPort: 11248, readOnlyPort: 11255 },
    a: { port: 12250, healthzPort: 12248, readOnlyPort: 12255 },
    b: { port: 13250, healthzPort: 13248 },
    flags: { port: 14250 },
    values: { port: 14250, healthzPort: 13248, readOnlyPort: 12255 },
    origins: { port: 'flag', healthzPort: B, readOnlyPort: A },
  },
  {
    name: 'nested structures merge field by field: siblings not mentioned keep their value',
    main: { authorization: { mode: 'AlwaysAllow', webhook: { cacheAuthorizedTTL: '1m', cacheUnauthorizedTTL: '10s' } } },
    a: { authorization: { webhook: { cacheAuthorizedTTL: '7m' } } },
    values: {
      'authorization.mode': 'AlwaysAllow',
      'authorization.webhook.cacheAuthorizedTTL': '7m0s',
      'authorization.webhook.cacheUnauthorizedTTL': '10s',
    },
    origins: {
      'authorization.mode': MAIN,
      'authorization.webhook.cacheAuthorizedTTL': A,
      'authorization.webhook.cacheUnauthorizedTTL': MAIN,
      authorization: undefined,
      'authorization.webhook': undefined,
    },
  },
  {
    name: 'defaults are applied after merging: a drop-in mentioning one nested field keeps the defaults of the others',
    a: { authorization: { mode: 'AlwaysAllow' }, authentication: { webhook: { enabled: false } } },
    values: {
      'authorization.mode': 'AlwaysAllow',
      'authorization.webhook.cacheAuthorizedTTL': '5m0s',
      'authorization.webhook.cacheUnauthorizedTTL': '30s',
      'authentication.webhook.enabled': false,
      'authentication.webhook.cacheTTL': '2m0s',
    },
    origins: {
      'authorization.mode': A,
      'authorization.webhook.cacheAuthorizedTTL': 'default',
      'authorization.webhook.cacheUnauthorizedTTL': 'default',
      'authentication.webhook.enabled': A,
      'authentication.webhook.cacheTTL': 'default',
    },
  },
  {
    name: 'a list is replaced whole, and is one leaf owned by the file that set it',
    main: { clusterDNS: ['10.96.0.10', '10.96.0.11'] },
    a: { clusterDNS: ['10.96.0.53'] },
    values: { clusterDNS: ['10.96.0.53'] },
    origins: { clusterDNS: A, 'clusterDNS.0': undefined },
  },
  {
    name: 'a list replaced by an empty list is empty',
    main: { clusterDNS: ['10.96.0.10'] },
    b: { clusterDNS: [] },
    values: { clusterDNS: [] },
    origins: { clusterDNS: B },
  },
  {
    name: 'a list a drop-in does not mention is kept',
    main: { clusterDNS: ['10.96.0.10'] },
    a: { clusterDomain: 'cluster.local' },
    values: { clusterDNS: ['10.96.0.10'], clusterDomain: 'cluster.local' },
    origins: { clusterDNS: MAIN, clusterDomain: A },
  },
  {
    name: 'a map merges key by key: overridden keys change, other keys stay, new keys are added',
    main: { featureGates: { ContainerCheckpoint: false, GracefulNodeShutdown: true } },
    a: { featureGates: { GracefulNodeShutdown: false, MemoryQoS: true } },
    values: { featureGates: { ContainerCheckpoint: false, GracefulNodeShutdown: false, MemoryQoS: true } },
    origins: { 'featureGates.ContainerCheckpoint': MAIN, 'featureGates.GracefulNodeShutdown': A, 'featureGates.MemoryQoS': A, featureGates: undefined },
  },
  {
    name: 'flag feature gates merge over the files key by key',
    main: { featureGates: { ContainerCheckpoint: false, GracefulNodeShutdown: true } },
    flags: { featureGates: { ContainerCheckpoint: true } },
    values: { featureGates: { ContainerCheckpoint: true, GracefulNodeShutdown: true } },
    origins: { 'featureGates.ContainerCheckpoint': 'flag', 'featureGates.GracefulNodeShutdown': MAIN },
  },
  {
    name: 'a map of lists: the overridden key gets the new list whole, the other keys stay',
    main: { staticPodURLHeader: { 'site-a': ['a1', 'a2'], 'site-b': ['b1'] } },
    a: { staticPodURLHeader: { 'site-a': ['a3'] } },
    b: { staticPodURLHeader: { 'site-c': ['c1'] } },
    values: { staticPodURLHeader: { 'site-a': ['a3'], 'site-b': ['b1'], 'site-c': ['c1'] } },
    origins: { 'staticPodURLHeader.site-a': A, 'staticPodURLHeader.site-b': MAIN, 'staticPodURLHeader.site-c': B },
  },
  {
    name: 'JSON null in a drop-in removes the value, so the default comes back',
    main: { port: 11250, maxPods: 50 },
    a: { port: null },
    values: { port: 10250, maxPods: 50 },
    origins: { port: 'default', maxPods: MAIN },
  },
  {
    name: 'JSON null on a map key removes that key only',
    main: { featureGates: { ContainerCheckpoint: false, GracefulNodeShutdown: false } },
    a: { featureGates: { GracefulNodeShutdown: null } },
    values: { featureGates: { ContainerCheckpoint: false } },
    origins: { 'featureGates.ContainerCheckpoint': MAIN, 'featureGates.GracefulNodeShutdown': undefined },
  },
  {
    name: 'JSON null on the last map key leaves an empty map owned by that drop-in',
    main: { featureGates: { GracefulNodeShutdown: false } },
    a: { featureGates: { GracefulNodeShutdown: null } },
    values: { featureGates: {} },
    origins: { featureGates: A },
  },
  {
    name: 'JSON null in the main file means unset',
    main: { port: null, clusterDNS: null },
    values: { port: 10250, clusterDNS: undefined },
    origins: { port: 'default', clusterDNS: undefined },
  },
  {
    name: 'an empty object in a drop-in changes nothing',
    main: { featureGates: { GracefulNodeShutdown: false } },
    a: { featureGates: {}, authorization: {} },
    values: { featureGates: { GracefulNodeShutdown: false }, 'authorization.mode': 'Webhook' },
    origins: { 'featureGates.GracefulNodeShutdown': MAIN, 'authorization.mode': 'default' },
  },
  {
    name: 'evictionHard unset: all kubelet default thresholds',
    main: { maxPods: 50 },
    values: { evictionHard: DEFAULT_EVICTION_HARD },
    origins: { 'evictionHard.memory.available': 'default', 'evictionHard.imagefs.inodesFree': 'default' },
  },
  {
    name: 'evictionHard set in a drop-in: only the signals given (the kubelet does not fill the others)',
    a: { evictionHard: { 'memory.available': '500Mi' } },
    values: { evictionHard: { 'memory.available': '500Mi' } },
    origins: { 'evictionHard.memory.available': A, 'evictionHard.nodefs.available': undefined },
  },
  {
    name: 'evictionHard with mergeDefaultEvictionSettings: the defaults fill the signals not given',
    main: { mergeDefaultEvictionSettings: true },
    a: { evictionHard: { 'memory.available': '500Mi', 'nodefs.available': '20%' } },
    values: { evictionHard: { ...DEFAULT_EVICTION_HARD, 'memory.available': '500Mi', 'nodefs.available': '20%' } },
    origins: { 'evictionHard.memory.available': A, 'evictionHard.nodefs.available': A, 'evictionHard.imagefs.available': 'default' },
  },
  {
    name: 'evictionHard: {} turns hard eviction off, as in the kubelet',
    main: { evictionHard: {} },
    values: { evictionHard: {} },
    origins: { evictionHard: MAIN },
  },
  {
    name: 'evictionHard keys merge across drop-ins like any map',
    main: { evictionHard: { 'memory.available': '200Mi', 'nodefs.available': '10%' } },
    a: { evictionHard: { 'memory.available': '300Mi' } },
    values: { evictionHard: { 'memory.available': '300Mi', 'nodefs.available': '10%' } },
    origins: { 'evictionHard.memory.available': A, 'evictionHard.nodefs.available': MAIN },
  },
  {
    name: 'zero values of plain Go fields mean "default" (kubeadm writes 0s durations)',
    main: { port: 0, maxPods: 0, address: '', nodeStatusUpdateFrequency: '0s', runtimeRequestTimeout: '0', authorization: { webhook: { cacheAuthorizedTTL: '0s' } } },
    values: {
      port: 10250,
      maxPods: 110,
      address: '0.0.0.0',
      nodeStatusUpdateFrequency: '10s',
      nodeStatusReportFrequency: '5m0s',
      runtimeRequestTimeout: '2m0s',
      'authorization.webhook.cacheAuthorizedTTL': '5m0s',
    },
    origins: { port: 'default', maxPods: 'default', nodeStatusUpdateFrequency: 'default', 'authorization.webhook.cacheAuthorizedTTL': 'default' },
  },
  {
    name: 'zero values of Go pointer fields are kept (healthzPort 0 disables /healthz, false stays false)',
    main: { healthzPort: 0, failSwapOn: false, enableDebuggingHandlers: false, readOnlyPort: 0 },
    values: { healthzPort: 0, failSwapOn: false, enableDebuggingHandlers: false, readOnlyPort: 0 },
    origins: { healthzPort: MAIN, failSwapOn: MAIN, enableDebuggingHandlers: MAIN, readOnlyPort: MAIN },
  },
  {
    name: 'nodeStatusReportFrequency follows an explicit nodeStatusUpdateFrequency (kubelet compatibility rule)',
    main: { nodeStatusUpdateFrequency: '20s' },
    values: { nodeStatusUpdateFrequency: '20s', nodeStatusReportFrequency: '20s' },
    origins: { nodeStatusUpdateFrequency: MAIN, nodeStatusReportFrequency: 'default' },
  },
  {
    name: 'serializeImagePulls defaults to false when maxParallelImagePulls allows parallel pulls',
    main: { maxParallelImagePulls: 5 },
    values: { serializeImagePulls: false, maxParallelImagePulls: 5 },
    origins: { serializeImagePulls: 'default', maxParallelImagePulls: MAIN },
  },
  {
    name: 'durations are printed back in Go canonical form',
    main: { runtimeRequestTimeout: '10m', syncFrequency: '90s', nodeStatusReportFrequency: '1.5h' },
    values: { runtimeRequestTimeout: '10m0s', syncFrequency: '1m30s', nodeStatusReportFrequency: '1h30m0s' },
    origins: { runtimeRequestTimeout: MAIN, syncFrequency: MAIN },
  },
  {
    name: 'accepted kubelet fields nodelet does not act on are kept as given, the others get the kubelet defaults',
    main: { cpuManagerPolicy: 'static', imageGCHighThresholdPercent: 90, logging: { format: 'json' } },
    values: { cpuManagerPolicy: 'static', imageGCHighThresholdPercent: 90, 'logging.format': 'json', 'logging.flushFrequency': '5s', imageGCLowThresholdPercent: 80 },
    origins: { cpuManagerPolicy: MAIN, 'logging.format': MAIN, 'logging.flushFrequency': 'default', imageGCLowThresholdPercent: 'default' },
  },
];

describe('merge rules and origins', () => {
  it.each(MERGE_CASES)('$name', ({ main, a, b, flags, values, origins }) => {
    const r = resolveConfig(layers(main, a, b, flags));
    expect(r.problems).toEqual([]);
    expect(r.warnings).toEqual([]);
    const got: Record<string, unknown> = {};
    for (const p of Object.keys(values)) got[p] = at(r.config, p);
    expect(got).toEqual(values);
    const gotOrigins: Record<string, string | undefined> = {};
    for (const p of Object.keys(origins)) gotOrigins[p] = r.origins.get(p);
    expect(gotOrigins).toEqual(origins);
  });

  it('every leaf of the effective config has exactly one origin entry, and nothing else has one', () => {
    const r = resolveConfig(
      layers(
        { clusterDNS: ['10.0.0.10'], staticPodURLHeader: { x: ['1'] }, authorization: { mode: 'AlwaysAllow' } },
        { featureGates: { GracefulNodeShutdown: false } },
        undefined,
        { maxPods: 20 },
      ),
    );
    const leaves: string[] = [];
    const walk = (v: unknown, p: string[]) => {
      if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0) {
        for (const [k, c] of Object.entries(v)) walk(c, [...p, k]);
      } else leaves.push(p.join('.'));
    };
    walk(r.config, []);
    expect([...r.origins.keys()].sort()).toEqual(leaves.sort());
  });

  it('does not modify the documents it is given', () => {
    const main = { ...HEADER, featureGates: { GracefulNodeShutdown: false }, clusterDNS: ['10.0.0.10'] };
    const drop = { ...HEADER, featureGates: { GracefulNodeShutdown: null }, clusterDNS: ['10.0.0.11'] };
    const before = structuredClone([main, drop]);
    resolveConfig([
      { origin: MAIN, doc: main, requireHeader: true },
      { origin: A, doc: drop, requireHeader: true },
    ]);
    expect([main, drop]).toEqual(before);
  });
});
