/**
 * The kubelet's v1beta1 defaults (pkg/kubelet/apis/config/v1beta1/defaults.go), applied to
 * the merged document AFTER all layers, so a drop-in never wipes a default it did not
 * mention. Pure.
 *
 * As in the kubelet, fields that are plain values in the Go struct (not pointers) take their
 * default when unset OR zero: `port: 0`, `maxPods: 0`, `address: ""` and a zero duration
 * (`0s`, as kubeadm writes for many fields) all mean "the default". Pointer fields keep an
 * explicit zero: `healthzPort: 0` disables /healthz, `failSwapOn: false` stays false.
 *
 * Only fields nodelet acts on are defaulted; the other accepted kubelet fields stay as
 * given (absent when unset), so `config view` does not claim settings nodelet ignores.
 */
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

/** Whether a zero value counts as unset: never (pointer fields), 0 or "" ('zero'), or a zero duration. */
type Zero = 'never' | 'zero' | 'zeroDuration';

const SIMPLE_DEFAULTS: ReadonlyArray<readonly [path: readonly string[], value: Json, zero: Zero]> = [
  [['syncFrequency'], '1m0s', 'zeroDuration'],
  [['fileCheckFrequency'], '20s', 'zeroDuration'],
  [['address'], '0.0.0.0', 'zero'],
  [['port'], 10250, 'zero'],
  [['readOnlyPort'], 0, 'never'],
  [['authentication', 'x509'], {}, 'never'],
  [['authentication', 'anonymous', 'enabled'], false, 'never'],
  [['authentication', 'webhook', 'enabled'], true, 'never'],
  [['authentication', 'webhook', 'cacheTTL'], '2m0s', 'zeroDuration'],
  [['authorization', 'mode'], 'Webhook', 'zero'],
  [['authorization', 'webhook', 'cacheAuthorizedTTL'], '5m0s', 'zeroDuration'],
  [['authorization', 'webhook', 'cacheUnauthorizedTTL'], '30s', 'zeroDuration'],
  [['enableDebuggingHandlers'], true, 'never'],
  [['healthzPort'], 10248, 'never'],
  [['healthzBindAddress'], '127.0.0.1', 'zero'],
  // nodeStatusReportFrequency: see applyDefaults (follows nodeStatusUpdateFrequency when that is set)
  [['nodeStatusUpdateFrequency'], '10s', 'zeroDuration'],
  [['nodeLeaseDurationSeconds'], 40, 'zero'],
  [['cgroupDriver'], 'cgroupfs', 'zero'],
  [['runtimeRequestTimeout'], '2m0s', 'zeroDuration'],
  [['hairpinMode'], 'promiscuous-bridge', 'zero'],
  [['maxPods'], 110, 'zero'],
  // serializeImagePulls: see applyDefaults (false when maxParallelImagePulls >= 2)
  [['mergeDefaultEvictionSettings'], false, 'never'],
  [['featureGates'], {}, 'never'],
  [['failSwapOn'], true, 'never'],
  [['memorySwap'], {}, 'never'],
  [['seccompDefault'], false, 'never'],
  [['containerRuntimeEndpoint'], 'unix:///run/containerd/containerd.sock', 'zero'],
  [['podLogsDir'], '/var/log/pods', 'zero'],
];

function isZero(v: Json | undefined): boolean {
  return v === undefined || v === null || v === 0 || v === '';
}

function isZeroDuration(v: Json | undefined): boolean {
  if (v === undefined || v === null || v === '') return true;
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
