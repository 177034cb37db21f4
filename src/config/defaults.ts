/**
 * The kubelet's v1beta1 defaults (SetDefaults_KubeletConfiguration in
 * pkg/kubelet/apis/config/v1beta1/defaults.go, Kubernetes v1.35), field by field, applied to
 * the merged document AFTER all layers, so a drop-in never wipes a default it did not
 * mention. Pure.
 *
 * As in the kubelet, fields that are plain values in the Go struct (not pointers) take their
 * default when unset OR zero: `port: 0`, `maxPods: 0`, `address: ""` and a zero duration
 * (`0s`, as kubeadm writes for many fields) all mean "the default". Pointer fields keep an
 * explicit zero: `healthzPort: 0` disables /healthz, `failSwapOn: false` stays false,
 * `cpuCFSQuotaPeriod: 0s` stays. Fields the kubelet does not default (`readOnlyPort`,
 * `imageMaximumGCAge`, `shutdownGracePeriod`, ...) stay as given; nodelet gives
 * `readOnlyPort` its 0, `featureGates`, `memorySwap` and `authentication.x509` an empty
 * object, as the kubelet's zero values print.
 */
import { isFeatureEnabled } from './feature-gates.js';
import { parseDurationNs } from './duration.js';
import { isJsonObject, setOrigin, type Json, type JsonObject, type OriginTree } from './merge.js';

/** The kubelet's hard eviction thresholds when `evictionHard` is not set at all. */
export const DEFAULT_EVICTION_HARD: Readonly<Record<string, string>> = Object.freeze({
  'memory.available': '100Mi',
  'nodefs.available': '10%',
  'nodefs.inodesFree': '5%',
  'imagefs.available': '15%',
  'imagefs.inodesFree': '5%',
});

/**
 * Whether a zero value counts as unset: never (pointer fields: only an absent value),
 * 0 or "" ('zero'), or a zero duration ('zeroDuration').
 */
type Zero = 'never' | 'zero' | 'zeroDuration';

/** SetDefaults_KubeletConfiguration's unconditional defaults, in its order. */
export const SIMPLE_DEFAULTS: ReadonlyArray<readonly [path: readonly string[], value: Json, zero: Zero]> = [
  [['enableServer'], true, 'never'],
  [['syncFrequency'], '1m0s', 'zeroDuration'],
  [['fileCheckFrequency'], '20s', 'zeroDuration'],
  [['httpCheckFrequency'], '20s', 'zeroDuration'],
  [['address'], '0.0.0.0', 'zero'],
  [['port'], 10250, 'zero'],
  [['authentication', 'anonymous', 'enabled'], false, 'never'],
  [['authentication', 'webhook', 'enabled'], true, 'never'],
  [['authentication', 'webhook', 'cacheTTL'], '2m0s', 'zeroDuration'],
  [['authorization', 'mode'], 'Webhook', 'zero'],
  [['authorization', 'webhook', 'cacheAuthorizedTTL'], '5m0s', 'zeroDuration'],
  [['authorization', 'webhook', 'cacheUnauthorizedTTL'], '30s', 'zeroDuration'],
  [['registryPullQPS'], 5, 'never'],
  [['registryBurst'], 10, 'zero'],
  [['eventRecordQPS'], 50, 'never'],
  [['eventBurst'], 100, 'zero'],
  [['enableDebuggingHandlers'], true, 'never'],
  [['healthzPort'], 10248, 'never'],
  [['healthzBindAddress'], '127.0.0.1', 'zero'],
  // qos.KubeletOOMScoreAdj
  [['oomScoreAdj'], -999, 'never'],
  [['streamingConnectionIdleTimeout'], '4h0m0s', 'zeroDuration'],
  // nodeStatusReportFrequency: see applyDefaults (follows nodeStatusUpdateFrequency when that is set)
  [['nodeStatusUpdateFrequency'], '10s', 'zeroDuration'],
  [['nodeLeaseDurationSeconds'], 40, 'zero'],
  [['imageMinimumGCAge'], '2m0s', 'zeroDuration'],
  [['imageGCHighThresholdPercent'], 85, 'never'],
  [['imageGCLowThresholdPercent'], 80, 'never'],
  [['volumeStatsAggPeriod'], '1m0s', 'zeroDuration'],
  [['cgroupsPerQOS'], true, 'never'],
  [['cgroupDriver'], 'cgroupfs', 'zero'],
  [['cpuManagerPolicy'], 'none', 'zero'],
  [['cpuManagerReconcilePeriod'], '10s', 'zeroDuration'],
  [['memoryManagerPolicy'], 'None', 'zero'],
  [['topologyManagerPolicy'], 'none', 'zero'],
  [['topologyManagerScope'], 'container', 'zero'],
  [['runtimeRequestTimeout'], '2m0s', 'zeroDuration'],
  [['hairpinMode'], 'promiscuous-bridge', 'zero'],
  [['maxPods'], 110, 'zero'],
  // podPidsLimit: see applyDefaults (absent or negative -> -1)
  // A pointer in the kubelet: an explicit "" (no host resolver config) stays.
  [['resolvConf'], '/etc/resolv.conf', 'never'],
  [['cpuCFSQuota'], true, 'never'],
  [['cpuCFSQuotaPeriod'], '100ms', 'never'],
  [['nodeStatusMaxImages'], 50, 'never'],
  [['maxOpenFiles'], 1000000, 'zero'],
  [['contentType'], 'application/vnd.kubernetes.protobuf', 'zero'],
  [['kubeAPIQPS'], 50, 'never'],
  [['kubeAPIBurst'], 100, 'zero'],
  // serializeImagePulls: see applyDefaults (false when maxParallelImagePulls >= 2)
  [['evictionPressureTransitionPeriod'], '5m0s', 'zeroDuration'],
  [['mergeDefaultEvictionSettings'], false, 'never'],
  [['enableControllerAttachDetach'], true, 'never'],
  [['makeIPTablesUtilChains'], true, 'never'],
  [['iptablesMasqueradeBit'], 14, 'never'],
  [['iptablesDropBit'], 15, 'never'],
  [['failSwapOn'], true, 'never'],
  [['containerLogMaxSize'], '10Mi', 'zero'],
  [['containerLogMaxFiles'], 5, 'never'],
  [['containerLogMaxWorkers'], 1, 'never'],
  [['containerLogMonitorInterval'], '10s', 'never'],
  [['configMapAndSecretChangeDetectionStrategy'], 'Watch', 'zero'],
  [['enforceNodeAllocatable'], ['pods'], 'never'],
  [['volumePluginDir'], '/usr/libexec/kubernetes/kubelet-plugins/volume/exec/', 'zero'],
  // logsapi.SetRecommendedLoggingConfiguration
  [['logging', 'format'], 'text', 'zero'],
  [['logging', 'flushFrequency'], '5s', 'zeroDuration'],
  [['logging', 'options', 'text', 'infoBufferSize'], '0', 'zero'],
  [['logging', 'options', 'json', 'infoBufferSize'], '0', 'zero'],
  [['enableSystemLogHandler'], true, 'never'],
  [['enableProfilingHandler'], true, 'never'],
  [['enableDebugFlagsHandler'], true, 'never'],
  [['seccompDefault'], false, 'never'],
  [['failCgroupV1'], false, 'never'],
  [['memoryThrottlingFactor'], 0.9, 'never'],
  [['registerNode'], true, 'never'],
  [['localStorageCapacityIsolation'], true, 'never'],
  [['containerRuntimeEndpoint'], 'unix:///run/containerd/containerd.sock', 'zero'],
  [['podLogsDir'], '/var/log/pods', 'zero'],
  // The kubelet's zero values, as its /configz prints them.
  [['readOnlyPort'], 0, 'never'],
  [['authentication', 'x509'], {}, 'never'],
  [['featureGates'], {}, 'never'],
  [['memorySwap'], {}, 'never'],
];

function isZero(v: Json | undefined): boolean {
  return v === undefined || v === null || v === 0 || v === '';
}

function isZeroDuration(v: Json | undefined): boolean {
  if (v === undefined || v === null || v === '' || v === 0) return true;
  if (typeof v !== 'string') return false;
  try {
    return parseDurationNs(v) === 0n;
  } catch {
    return false;
  }
}

function getAt(doc: JsonObject, path: readonly string[]): Json | undefined {
  let cur: Json | undefined = doc;
  for (const seg of path) {
    if (!isJsonObject(cur)) return undefined;
    cur = cur[seg];
  }
  return cur;
}

/** Sets doc[path] (creating objects on the way) and records origin 'default'. */
function setDefault(doc: JsonObject, tree: OriginTree, path: readonly string[], value: Json): void {
  let cur = doc;
  for (const seg of path.slice(0, -1)) {
    const next = cur[seg];
    if (!isJsonObject(next)) cur[seg] = {};
    cur = cur[seg] as JsonObject;
  }
  cur[path[path.length - 1]!] = structuredClone(value);
  setOrigin(tree, path, 'default');
}

/**
 * Fills the kubelet's defaults into `doc` (mutated; it is the freshly merged document) and
 * marks each filled leaf with origin 'default' in `tree`. Expects a document whose present
 * fields already have the right types (checkDocument ran on every layer).
 *
 * evictionHard, following the kubelet: unset -> DEFAULT_EVICTION_HARD; set (even `{}`) ->
 * exactly the signals given, the others are off; with `mergeDefaultEvictionSettings: true`
 * the defaults fill the signals not given (the kubelet's 1.34+ switch).
 */
export function applyDefaults(doc: JsonObject, tree: OriginTree): JsonObject {
  // Decided before the simple defaults fill nodeStatusUpdateFrequency.
  const updateFrequencySet = !isZeroDuration(doc.nodeStatusUpdateFrequency);
  for (const [path, value, zero] of SIMPLE_DEFAULTS) {
    const current = getAt(doc, path);
    const unset =
      current === undefined || (zero === 'zero' && isZero(current)) || (zero === 'zeroDuration' && isZeroDuration(current));
    if (unset) setDefault(doc, tree, path, value);
  }
  if (isZeroDuration(doc.nodeStatusReportFrequency)) {
    // The kubelet's backward-compatible rule: report as often as updates when those are set.
    setDefault(doc, tree, ['nodeStatusReportFrequency'], updateFrequencySet ? doc.nodeStatusUpdateFrequency! : '5m0s');
  }
  if (typeof doc.podPidsLimit !== 'number' || doc.podPidsLimit < 0) {
    // Absent or negative: -1, the node allocatable's pid limit.
    if (doc.podPidsLimit !== -1) setDefault(doc, tree, ['podPidsLimit'], -1);
  }
  // Defaults that exist only while their gate is on (with the file's own featureGates).
  const gates = { featureGates: isJsonObject(doc.featureGates) ? (doc.featureGates as Record<string, boolean>) : {} };
  if (isFeatureEnabled(gates, 'KubeletCrashLoopBackOffMax') && getAt(doc, ['crashLoopBackOff', 'maxContainerRestartPeriod']) === undefined) {
    setDefault(doc, tree, ['crashLoopBackOff', 'maxContainerRestartPeriod'], '5m0s');
  }
  if (isFeatureEnabled(gates, 'KubeletEnsureSecretPulledImages') && isZero(doc.imagePullCredentialsVerificationPolicy)) {
    setDefault(doc, tree, ['imagePullCredentialsVerificationPolicy'], 'NeverVerifyPreloadedImages');
  }
  if (doc.serializeImagePulls === undefined) {
    const parallel = doc.maxParallelImagePulls;
    setDefault(doc, tree, ['serializeImagePulls'], !(typeof parallel === 'number' && parallel >= 2));
  }
  if (doc.evictionHard === undefined) {
    setDefault(doc, tree, ['evictionHard'], { ...DEFAULT_EVICTION_HARD });
  } else if (doc.mergeDefaultEvictionSettings === true && isJsonObject(doc.evictionHard)) {
    for (const [signal, value] of Object.entries(DEFAULT_EVICTION_HARD)) {
      if (!(signal in doc.evictionHard)) setDefault(doc, tree, ['evictionHard', signal], value);
    }
  }
  return doc;
}
