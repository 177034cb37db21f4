/**
 * Defaulting exactly as the kubelet's SetDefaults_KubeletConfiguration (v1.35): every
 * default, every zero value the kubelet treats as unset (kubeadm writes `0s` and `0` for
 * fields it does not set), and the zero values it keeps (pointer fields).
 */
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../../src/config/resolve.js';

const HEADER = { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration' };
const FILE = '/var/lib/kubelet/config.yaml';

function resolved(doc: Record<string, unknown>) {
  const r = resolveConfig([{ origin: FILE, doc: { ...HEADER, ...doc }, requireHeader: true }]);
  expect(r.problems).toEqual([]);
  return r;
}

function at(obj: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((cur, k) => (cur && typeof cur === 'object' ? (cur as Record<string, unknown>)[k] : undefined), obj);
}

function docAt(path: string, value: unknown): Record<string, unknown> {
  return path
    .split('.')
    .reverse()
    .reduce<unknown>((v, k) => ({ [k]: v }), value) as Record<string, unknown>;
}

/** [field, kubelet default, zero value the kubelet replaces by the default (or undefined: a pointer, zero kept)]. */
const DEFAULTS: ReadonlyArray<readonly [field: string, def: unknown, zero: unknown]> = [
  ['enableServer', true, undefined],
  ['syncFrequency', '1m0s', '0s'],
  ['fileCheckFrequency', '20s', '0s'],
  ['httpCheckFrequency', '20s', '0s'],
  ['address', '0.0.0.0', ''],
  ['port', 10250, 0],
  ['authentication.anonymous.enabled', false, undefined],
  ['authentication.webhook.enabled', true, undefined],
  ['authentication.webhook.cacheTTL', '2m0s', '0s'],
  ['authorization.mode', 'Webhook', ''],
  ['authorization.webhook.cacheAuthorizedTTL', '5m0s', '0s'],
  ['authorization.webhook.cacheUnauthorizedTTL', '30s', '0s'],
  ['registryPullQPS', 5, undefined],
  ['registryBurst', 10, 0],
  ['eventRecordQPS', 50, undefined],
  ['eventBurst', 100, 0],
  ['enableDebuggingHandlers', true, undefined],
  ['healthzPort', 10248, undefined],
  ['healthzBindAddress', '127.0.0.1', ''],
  ['oomScoreAdj', -999, undefined],
  ['streamingConnectionIdleTimeout', '4h0m0s', '0s'],
  ['nodeStatusUpdateFrequency', '10s', '0s'],
  ['nodeStatusReportFrequency', '5m0s', '0s'],
  ['nodeLeaseDurationSeconds', 40, 0],
  ['imageMinimumGCAge', '2m0s', '0s'],
  ['imageGCHighThresholdPercent', 85, undefined],
  ['imageGCLowThresholdPercent', 80, undefined],
  ['volumeStatsAggPeriod', '1m0s', '0s'],
  ['cgroupsPerQOS', true, undefined],
  ['cgroupDriver', 'cgroupfs', ''],
  ['cpuManagerPolicy', 'none', ''],
  ['cpuManagerReconcilePeriod', '10s', '0s'],
  ['memoryManagerPolicy', 'None', ''],
  ['topologyManagerPolicy', 'none', ''],
  ['topologyManagerScope', 'container', ''],
  ['runtimeRequestTimeout', '2m0s', '0s'],
  ['hairpinMode', 'promiscuous-bridge', ''],
  ['maxPods', 110, 0],
  ['resolvConf', '/etc/resolv.conf', undefined],
  ['cpuCFSQuota', true, undefined],
  ['cpuCFSQuotaPeriod', '100ms', undefined],
  ['nodeStatusMaxImages', 50, undefined],
  ['maxOpenFiles', 1000000, 0],
  ['contentType', 'application/vnd.kubernetes.protobuf', ''],
  ['kubeAPIQPS', 50, undefined],
  ['kubeAPIBurst', 100, 0],
  ['serializeImagePulls', true, undefined],
  ['evictionPressureTransitionPeriod', '5m0s', '0s'],
  ['mergeDefaultEvictionSettings', false, undefined],
  ['enableControllerAttachDetach', true, undefined],
  ['makeIPTablesUtilChains', true, undefined],
  ['iptablesMasqueradeBit', 14, undefined],
  ['iptablesDropBit', 15, undefined],
  ['failSwapOn', true, undefined],
  ['containerLogMaxSize', '10Mi', ''],
  ['containerLogMaxFiles', 5, undefined],
  ['containerLogMaxWorkers', 1, undefined],
  ['containerLogMonitorInterval', '10s', undefined],
  ['configMapAndSecretChangeDetectionStrategy', 'Watch', ''],
  ['enforceNodeAllocatable', ['pods'], undefined],
  ['volumePluginDir', '/usr/libexec/kubernetes/kubelet-plugins/volume/exec/', ''],
  ['logging.format', 'text', ''],
  ['logging.flushFrequency', '5s', '0s'],
  ['logging.options.text.infoBufferSize', '0', undefined],
  ['logging.options.json.infoBufferSize', '0', undefined],
  ['enableSystemLogHandler', true, undefined],
  ['enableProfilingHandler', true, undefined],
  ['enableDebugFlagsHandler', true, undefined],
  ['seccompDefault', false, undefined],
  ['failCgroupV1', false, undefined],
  ['memoryThrottlingFactor', 0.9, undefined],
  ['registerNode', true, undefined],
  ['localStorageCapacityIsolation', true, undefined],
  ['containerRuntimeEndpoint', 'unix:///run/containerd/containerd.sock', ''],
  ['podLogsDir', '/var/log/pods', ''],
  ['podPidsLimit', -1, undefined],
  // gated defaults, with the gates' v1.35 defaults (both beta, on)
  ['crashLoopBackOff.maxContainerRestartPeriod', '5m0s', undefined],
  ['imagePullCredentialsVerificationPolicy', 'NeverVerifyPreloadedImages', ''],
];

/** Zero values the kubelet keeps: pointer fields, or fields it does not default at all. */
const KEPT_ZEROS: ReadonlyArray<readonly [field: string, zero: unknown]> = [
  ['readOnlyPort', 0],
  ['healthzPort', 0],
  ['registryPullQPS', 0],
  ['eventRecordQPS', 0],
  ['kubeAPIQPS', 0],
  ['oomScoreAdj', 0],
  ['nodeStatusMaxImages', 0],
  ['iptablesMasqueradeBit', 0],
  ['containerLogMaxWorkers', 0],
  ['memoryThrottlingFactor', 0],
  ['cpuCFSQuotaPeriod', '0s'],
  ['containerLogMonitorInterval', '0s'],
  ['imageMaximumGCAge', '0s'],
  ['shutdownGracePeriod', '0s'],
  ['resolvConf', ''],
  ['enforceNodeAllocatable', []],
  ['failSwapOn', false],
  ['enableServer', false],
  ['podPidsLimit', 0],
];

describe('SetDefaults_KubeletConfiguration, field by field', () => {
  it.each(DEFAULTS)('%s defaults to %j', (field, def) => {
    const r = resolved({});
    expect(at(r.config, field)).toEqual(def);
    expect(r.origins.get(field)).toBe('default');
  });

  it.each(DEFAULTS.filter(([, , zero]) => zero !== undefined))('%s: the zero value %j is unset, so it becomes %j', (field, def, zero) => {
    const r = resolved(docAt(field, zero as never));
    expect(at(r.config, field)).toEqual(def);
    expect(r.origins.get(field)).toBe('default');
  });

  it.each(KEPT_ZEROS)('%s: %j is kept, as the kubelet keeps it', (field, zero) => {
    const r = resolved(docAt(field, zero));
    expect(at(r.config, field)).toEqual(zero);
    expect(r.origins.get(field)).toBe(FILE);
  });

  it('crashLoopBackOff.maxContainerRestartPeriod: "0s" is kept (a set value), then refused by validation, as the kubelet does', () => {
    const r = resolveConfig([{ origin: FILE, doc: { ...HEADER, crashLoopBackOff: { maxContainerRestartPeriod: '0s' } }, requireHeader: true }]);
    expect(at(r.config, 'crashLoopBackOff.maxContainerRestartPeriod')).toBe('0s');
    expect(r.problems).toEqual([{ file: FILE, field: 'crashLoopBackOff.maxContainerRestartPeriod', message: 'must be between 1s and 300s, got "0s"' }]);
  });

  it('imageGCHighThresholdPercent: 0 is kept (a set value), then refused by validation against the low threshold, as the kubelet does', () => {
    const r = resolveConfig([{ origin: FILE, doc: { ...HEADER, imageGCHighThresholdPercent: 0 }, requireHeader: true }]);
    expect(at(r.config, 'imageGCHighThresholdPercent')).toBe(0);
    expect(r.problems).toEqual([{ file: FILE, field: 'imageGCHighThresholdPercent', message: 'must be greater than imageGCLowThresholdPercent (80), got 0' }]);
  });

  it('a negative podPidsLimit becomes -1; a positive one stays', () => {
    expect(resolved({ podPidsLimit: -5 }).config.podPidsLimit).toBe(-1);
    expect(resolved({ podPidsLimit: 4096 }).config.podPidsLimit).toBe(4096);
  });

  it('nodeStatusReportFrequency follows an explicit nodeStatusUpdateFrequency', () => {
    expect(resolved({ nodeStatusUpdateFrequency: '20s' }).config.nodeStatusReportFrequency).toBe('20s');
    expect(resolved({ nodeStatusUpdateFrequency: '0s', nodeStatusReportFrequency: '0s' }).config.nodeStatusReportFrequency).toBe('5m0s');
  });

  it('serializeImagePulls is false when maxParallelImagePulls >= 2', () => {
    expect(resolved({ maxParallelImagePulls: 5 }).config.serializeImagePulls).toBe(false);
    expect(resolved({ maxParallelImagePulls: 1 }).config.serializeImagePulls).toBe(true);
  });

  it('gated defaults are left out while their gate is off', () => {
    const r = resolved({ featureGates: { KubeletCrashLoopBackOffMax: false, KubeletEnsureSecretPulledImages: false } });
    expect(r.config.crashLoopBackOff).toBeUndefined();
    expect(r.config.imagePullCredentialsVerificationPolicy).toBeUndefined();
    const allBetaOff = resolved({ featureGates: { AllBeta: false } });
    expect(allBetaOff.config.crashLoopBackOff).toBeUndefined();
  });

  it('a kubeadm-written file (zeros for what it does not set) ends up with the kubelet defaults', () => {
    const r = resolved({
      authentication: { anonymous: { enabled: false }, webhook: { cacheTTL: '0s', enabled: true }, x509: { clientCAFile: '/etc/kubernetes/pki/ca.crt' } },
      authorization: { mode: 'Webhook', webhook: { cacheAuthorizedTTL: '0s', cacheUnauthorizedTTL: '0s' } },
      cgroupDriver: 'systemd',
      clusterDNS: ['10.96.0.10'],
      clusterDomain: 'cluster.local',
      containerRuntimeEndpoint: '',
      cpuManagerReconcilePeriod: '0s',
      evictionPressureTransitionPeriod: '0s',
      fileCheckFrequency: '0s',
      healthzBindAddress: '127.0.0.1',
      healthzPort: 10248,
      httpCheckFrequency: '0s',
      imageMaximumGCAge: '0s',
      imageMinimumGCAge: '0s',
      logging: { flushFrequency: 0, options: { json: { infoBufferSize: '0' }, text: { infoBufferSize: '0' } }, verbosity: 0 },
      memorySwap: {},
      nodeStatusReportFrequency: '0s',
      nodeStatusUpdateFrequency: '0s',
      rotateCertificates: true,
      runtimeRequestTimeout: '0s',
      shutdownGracePeriod: '0s',
      shutdownGracePeriodCriticalPods: '0s',
      staticPodPath: '/etc/kubernetes/manifests',
      streamingConnectionIdleTimeout: '0s',
      syncFrequency: '0s',
      volumeStatsAggPeriod: '0s',
    });
    expect(r.config).toMatchObject({
      authentication: { webhook: { cacheTTL: '2m0s' } },
      authorization: { webhook: { cacheAuthorizedTTL: '5m0s', cacheUnauthorizedTTL: '30s' } },
      containerRuntimeEndpoint: 'unix:///run/containerd/containerd.sock',
      cpuManagerReconcilePeriod: '10s',
      evictionPressureTransitionPeriod: '5m0s',
      fileCheckFrequency: '20s',
      httpCheckFrequency: '20s',
      imageMaximumGCAge: '0s',
      imageMinimumGCAge: '2m0s',
      logging: { flushFrequency: '5s', format: 'text', verbosity: 0 },
      nodeStatusReportFrequency: '5m0s',
      nodeStatusUpdateFrequency: '10s',
      runtimeRequestTimeout: '2m0s',
      shutdownGracePeriod: '0s',
      streamingConnectionIdleTimeout: '4h0m0s',
      syncFrequency: '1m0s',
      volumeStatsAggPeriod: '1m0s',
    });
  });
});
