/**
 * Validation in two passes, both pure and both collecting every problem:
 *
 * 1. checkDocument(): each file (and the flag overrides) on its own, before merging, as the
 *    kubelet's decoder does: apiVersion/kind, value types, duration syntax. A bad value is
 *    reported against that file and dropped so that merging can go on and later problems
 *    are found too. Unknown fields are warnings (the kubelet's lenient decoding fallback).
 * 2. validateConfig(): the merged, defaulted configuration, as the kubelet's validation
 *    does, one small function per group of fields (SECTIONS, in report order): ranges,
 *    enums, IP addresses, eviction thresholds, feature gates, endpoints.
 *    Each problem names the origin (file, 'flag' or 'default') of the offending value.
 *
 * ConfigError carries all problems of both passes; loadConfig throws it.
 */
import net from 'node:net';
import path from 'node:path';
import { NodeletError } from '../errors.js';
import { parseDurationNs } from './duration.js';
import { featureGateProblem, isFeatureEnabled } from './feature-gates.js';
import { imagePullCredentialsProblems } from './image-pull-credentials.js';
import { validateShutdownFields } from './validate-shutdown.js';
import { validateCgroupFields } from './validate-cgroups.js';
import { validateEvictionFields } from './validate-eviction.js';
import { isJsonObject, pathKey, type Json, type JsonObject } from './merge.js';
import { parseQuantity, parseThresholdValue } from './quantity.js';
import { durationPaths, KUBELET_CONFIG_SCHEMA, type FieldSchema } from './schema.js';
import { KUBELET_API_VERSION, KUBELET_KIND, type ConfigProblem } from './types.js';

/** `<file>: <field>: <message>` (the field part left out for a problem with the file itself). */
export function formatProblem(p: ConfigProblem): string {
  return p.field ? `${p.file}: ${p.field}: ${p.message}` : `${p.file}: ${p.message}`;
}

/**
 * The configuration is invalid. `details.problems` (and `problems`) list every problem
 * found; the message has one formatted line per problem. Thrown by loadConfig before
 * anything is started or written.
 */
export class ConfigError extends NodeletError {
  readonly problems: readonly ConfigProblem[];
  constructor(problems: readonly ConfigProblem[]) {
    super('CONFIG_INVALID', problems.map(formatProblem).join('\n'), { problems });
    this.problems = problems;
  }
}

/** How a JSON value looks, for messages: `string "abc"`, `number 1.5`, `a list`. */
function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (v instanceof Date) return `a timestamp (${v.toISOString()}); quote it to make it a string`;
  if (isJsonObject(v)) return 'an object';
  if (typeof v === 'string') return `string ${JSON.stringify(v)}`;
  if (typeof v === 'number' || typeof v === 'boolean') return `${typeof v} ${String(v)}`;
  return typeof v;
}

const INT_RANGE = {
  32: [-(2 ** 31), 2 ** 31 - 1],
  64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
} as const;

interface DocCheck {
  problems: ConfigProblem[];
  warnings: ConfigProblem[];
}

/** Checks one value against its schema; returns the value to keep or undefined to drop it. */
function checkValue(v: unknown, schema: FieldSchema, file: string, p: string[], out: DocCheck): Json | undefined {
  const bad = (expected: string): undefined => {
    out.problems.push({ file, field: pathKey(p), message: `must be ${expected}, got ${describe(v)}` });
    return undefined;
  };
  // null unsets the field (JSON merge patch); it is never a type error.
  if (v === null) return null;
  switch (schema.kind) {
    case 'string':
      return typeof v === 'string' ? v : bad('a string');
    case 'bool':
      return typeof v === 'boolean' ? v : bad('true or false');
    case 'int': {
      if (typeof v !== 'number' || !Number.isInteger(v)) return bad('an integer');
      const [min, max] = INT_RANGE[schema.bits];
      if (v < min || v > max) return bad(`an integer between ${min} and ${max}`);
      return v;
    }
    case 'float':
      return typeof v === 'number' && Number.isFinite(v) ? v : bad('a number');
    case 'duration': {
      if (typeof v !== 'string') return bad('a duration string such as "10s", "2m0s" or "1h30m"');
      try {
        parseDurationNs(v);
      } catch (err) {
        out.problems.push({ file, field: pathKey(p), message: `invalid duration: ${(err as Error).message}` });
        return undefined;
      }
      return v;
    }
    case 'list': {
      if (!Array.isArray(v)) return bad('a list');
      if (schema.of === 'string') {
        const i = v.findIndex((item) => typeof item !== 'string');
        if (i >= 0) {
          out.problems.push({ file, field: pathKey(p), message: `item ${i} must be a string, got ${describe(v[i])}` });
          return undefined;
        }
      }
      return v as Json[];
    }
    case 'map': {
      if (!isJsonObject(v)) return bad('a map');
      const kept: JsonObject = {};
      for (const [k, item] of Object.entries(v)) {
        const itemSchema: FieldSchema =
          schema.of === 'string' ? { kind: 'string' } : schema.of === 'bool' ? { kind: 'bool' } : { kind: 'list', of: 'string' };
        const r = checkValue(item, itemSchema, file, [...p, k], out);
        if (r !== undefined) kept[k] = r;
      }
      return kept;
    }
    case 'object': {
      if (!isJsonObject(v)) return bad('an object');
      return checkFields(v, schema.fields, file, p, out);
    }
    case 'anyObject':
      return isJsonObject(v) ? structuredClone(v) : bad('an object');
  }
}

function checkFields(doc: JsonObject, fields: Readonly<Record<string, FieldSchema>>, file: string, prefix: string[], out: DocCheck): JsonObject {
  const kept: JsonObject = {};
  for (const [k, v] of Object.entries(doc)) {
    const p = [...prefix, k];
    if (!Object.hasOwn(fields, k)) {
      out.warnings.push({ file, field: pathKey(p), message: `unknown field "${k}" (ignored)` });
      continue;
    }
    const r = checkValue(v, fields[k]!, file, p, out);
    if (r !== undefined) kept[k] = r;
  }
  return kept;
}

/**
 * Pass 1 for one document. `requireHeader`: files must say `apiVersion:
 * kubelet.config.k8s.io/v1beta1` and `kind: KubeletConfiguration`; flag overrides need not.
 * Returns the document without apiVersion/kind, unknown fields and bad values.
 */
export function checkDocument(doc: unknown, file: string, opts: { requireHeader: boolean }): DocCheck & { doc: JsonObject } {
  const out: DocCheck = { problems: [], warnings: [] };
  if (!isJsonObject(doc)) {
    out.problems.push({
      file,
      field: '',
      message: `expected a ${KUBELET_KIND} object (apiVersion: ${KUBELET_API_VERSION}), got ${doc === undefined ? 'an empty document' : describe(doc)}`,
    });
    return { ...out, doc: {} };
  }
  const { apiVersion, kind, ...rest } = doc;
  if (opts.requireHeader) {
    if (apiVersion === undefined) {
      out.problems.push({ file, field: 'apiVersion', message: `missing; expected ${KUBELET_API_VERSION}` });
    } else if (apiVersion !== KUBELET_API_VERSION) {
      out.problems.push({ file, field: 'apiVersion', message: `expected ${KUBELET_API_VERSION}, got ${describe(apiVersion)}` });
    }
    if (kind === undefined) {
      out.problems.push({ file, field: 'kind', message: `missing; expected ${KUBELET_KIND}` });
    } else if (kind !== KUBELET_KIND) {
      out.problems.push({ file, field: 'kind', message: `expected ${KUBELET_KIND}, got ${describe(kind)}` });
    }
  }
  return { ...out, doc: checkFields(rest, KUBELET_CONFIG_SCHEMA, file, [], out) };
}

/** Eviction signals the kubelet knows (pkg/kubelet/eviction/api). */
export const EVICTION_SIGNALS: ReadonlySet<string> = new Set([
  'memory.available',
  'allocatableMemory.available',
  'nodefs.available',
  'nodefs.inodesFree',
  'imagefs.available',
  'imagefs.inodesFree',
  'containerfs.available',
  'containerfs.inodesFree',
  'pid.available',
]);

/** A CRI endpoint as the kubelet takes it on Linux: `unix://<absolute path>`, or a bare absolute path (deprecated, taken as unix). */
function endpointProblem(v: string): string | undefined {
  const bad = `must be a unix socket endpoint with an absolute path, e.g. unix:///run/containerd/containerd.sock; got ${JSON.stringify(v)}`;
  if (v.startsWith('unix://')) return path.isAbsolute(v.slice('unix://'.length)) ? undefined : bad;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(v)) return `only unix:// endpoints are supported on Linux, got ${JSON.stringify(v)}`;
  return path.isAbsolute(v) ? undefined : bad;
}

/**
 * What each section of pass 2 reads and reports through: the effective configuration and one
 * collector of problems, each problem named on its field and on the file that set it.
 * Closures, not methods: the sections hand `get` and `add` on as they are.
 */
interface Checker {
  /** The effective value at `p`, or undefined. */
  readonly get: (p: readonly string[]) => Json | undefined;
  /** A problem of the value at `p`, named on the file that set it. */
  readonly add: (p: readonly string[], message: string) => void;
  /** A problem reported on `p` but named on the file that set `originPath` (a list's item, or a field that another one needs). */
  readonly addAt: (originPath: readonly string[], p: readonly string[], message: string) => void;
  /** Who set the value at `p`: a file, 'flag' or 'default'. */
  readonly originOf: (p: readonly string[]) => string;
  /** Whether feature gate `name` is on with the configured featureGates. */
  readonly gateOn: (name: string) => boolean;
}

function checker(config: JsonObject, originOf: (path: readonly string[]) => string, problems: ConfigProblem[]): Checker {
  const get = (p: readonly string[]): Json | undefined => {
    let cur: Json | undefined = config;
    for (const seg of p) cur = isJsonObject(cur) ? cur[seg] : undefined;
    return cur;
  };
  const addAt = (originPath: readonly string[], p: readonly string[], message: string) => {
    problems.push({ file: originOf(originPath), field: pathKey(p), message });
  };
  const gateOn = (name: string) => {
    const gates = get(['featureGates']);
    return isFeatureEnabled({ featureGates: isJsonObject(gates) ? (gates as Record<string, boolean>) : {} }, name);
  };
  return { get, add: (p, message) => addAt(p, p, message), addAt, originOf, gateOn };
}

/**
 * Pass 2, one section per group of fields, run in this order: the order problems are
 * reported in (feature gates last).
 */
const SECTIONS: readonly ((c: Checker) => void)[] = [
  checkPortsAndLimits,
  checkNetwork,
  checkRegisterWithTaints,
  checkEnums,
  checkParallelImagePulls,
  checkDurations,
  checkRuntimeEndpoints,
  checkServingCertificate,
  checkContainerLogMaxSize,
  checkEvictionHard,
  checkImageGC,
  checkReservations,
  checkCrashLoopBackOff,
  checkImagePullCredentials,
  (c) => validateShutdownFields(c.get, c.add),
  (c) => validateEvictionFields(c.get, c.add, EVICTION_SIGNALS),
  // A problem of a field the operator did not set (kubeReservedCgroup) is named on the file that set the one that needs it.
  (c) => validateCgroupFields(c.get, c.addAt),
  checkFeatureGates,
];

/**
 * Pass 2: the effective configuration. `originOf(path)` names where each value came from.
 * Returns every problem found (empty when valid).
 */
export function validateConfig(config: JsonObject, originOf: (path: readonly string[]) => string): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const c = checker(config, originOf, problems);
  for (const section of SECTIONS) section(c);
  return problems;
}

/** An integer field within [min, max] (the document pass checked it is an integer). */
function intIn(c: Checker, p: readonly string[], min: number, max: number, message: string): void {
  const v = c.get(p);
  if (typeof v === 'number' && (v < min || v > max)) c.add(p, `${message}, got ${v}`);
}

function oneOf(c: Checker, p: readonly string[], allowed: readonly string[], emptyOk = false): void {
  const v = c.get(p);
  if (typeof v === 'string' && !allowed.includes(v) && !(emptyOk && v === '')) {
    c.add(p, `must be one of ${allowed.join(', ')}${emptyOk ? ' (or empty)' : ''}, got ${JSON.stringify(v)}`);
  }
}

function checkPortsAndLimits(c: Checker): void {
  intIn(c, ['port'], 1, 65535, 'must be between 1 and 65535, inclusive');
  intIn(c, ['readOnlyPort'], 0, 65535, 'must be between 0 and 65535, inclusive (0 disables it)');
  intIn(c, ['healthzPort'], 0, 65535, 'must be between 1 and 65535, inclusive, or 0 to disable /healthz');
  intIn(c, ['maxPods'], 1, Infinity, 'must be greater than 0');
  intIn(c, ['nodeLeaseDurationSeconds'], 1, Infinity, 'must be greater than 0');
  intIn(c, ['maxParallelImagePulls'], 1, Infinity, 'must be greater than 0');
  // As the kubelet: no negative rate (0 is client-go's default, 5 a second; src/controlplane/rate-limit.ts).
  intIn(c, ['kubeAPIQPS'], 0, Infinity, 'must not be a negative number');
  intIn(c, ['kubeAPIBurst'], 0, Infinity, 'must not be a negative number');
}

/** Bind addresses, cluster DNS servers and the pod CIDR(s). */
function checkNetwork(c: Checker): void {
  for (const field of ['address', 'healthzBindAddress']) {
    const v = c.get([field]);
    if (typeof v === 'string' && net.isIP(v) === 0) c.add([field], `must be an IP address, got ${JSON.stringify(v)}`);
  }
  const dns = c.get(['clusterDNS']);
  if (Array.isArray(dns)) {
    dns.forEach((item, i) => {
      if (typeof item === 'string' && net.isIP(item) === 0) c.add(['clusterDNS'], `item ${i} must be an IP address, got ${JSON.stringify(item)}`);
    });
  }
  const podCIDR = c.get(['podCIDR']);
  if (typeof podCIDR === 'string' && podCIDR !== '') {
    // Comma-separated CIDRs (dual stack), as the runtime takes them.
    for (const part of podCIDR.split(',')) {
      const [addr = '', bits = ''] = part.trim().split('/');
      const max = net.isIP(addr) === 4 ? 32 : net.isIP(addr) === 6 ? 128 : -1;
      if (max < 0 || !/^\d{1,3}$/.test(bits) || Number(bits) > max) c.add(['podCIDR'], `must be a CIDR or comma-separated CIDRs (such as 10.244.1.0/24), got ${JSON.stringify(podCIDR)}`);
    }
  }
}

/** registerWithTaints: taints as the Node carries them (admission reads their NoExecute ones). Named on the file that set the list. */
function checkRegisterWithTaints(c: Checker): void {
  const taints = c.get(['registerWithTaints']);
  if (!Array.isArray(taints)) return;
  const taintProblem = (i: number, field: string, message: string) => c.addAt(['registerWithTaints'], ['registerWithTaints', String(i), ...(field ? [field] : [])], message);
  taints.forEach((t, i) => {
    if (!isJsonObject(t)) return taintProblem(i, '', `must be a taint object (key, value, effect), got ${describe(t)}`);
    const key = t['key'];
    if (typeof key !== 'string' || !/^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(key)) taintProblem(i, 'key', `must be a qualified name (such as example.com/dedicated), got ${JSON.stringify(key)}`);
    if (!['NoSchedule', 'PreferNoSchedule', 'NoExecute'].includes(t['effect'] as string)) taintProblem(i, 'effect', `must be one of NoSchedule, PreferNoSchedule, NoExecute, got ${JSON.stringify(t['effect'])}`);
    if (t['value'] !== undefined && typeof t['value'] !== 'string') taintProblem(i, 'value', `must be a string, got ${describe(t['value'])}`);
  });
}

/** The fields that take one of a few words. */
function checkEnums(c: Checker): void {
  oneOf(c, ['authorization', 'mode'], ['AlwaysAllow', 'Webhook']);
  oneOf(c, ['memorySwap', 'swapBehavior'], ['NoSwap', 'LimitedSwap'], true);
  oneOf(c, ['cgroupDriver'], ['cgroupfs', 'systemd']);
  oneOf(c, ['hairpinMode'], ['promiscuous-bridge', 'hairpin-veth', 'none']);
}

/** The kubelet's rule: parallel pulls need serializeImagePulls: false. */
function checkParallelImagePulls(c: Checker): void {
  const parallel = c.get(['maxParallelImagePulls']);
  if (typeof parallel === 'number' && parallel > 1 && c.get(['serializeImagePulls']) === true) {
    c.add(['maxParallelImagePulls'], `must be 1 (or unset) when serializeImagePulls is true, got ${parallel}`);
  }
}

/** No duration field is negative (their syntax was checked by the document pass). */
function checkDurations(c: Checker): void {
  for (const p of durationPaths()) {
    const v = c.get(p);
    if (typeof v === 'string' && parseDurationNs(v) < 0n) c.add(p, `must not be negative, got ${JSON.stringify(v)}`);
  }
}

function checkRuntimeEndpoints(c: Checker): void {
  for (const field of ['containerRuntimeEndpoint', 'imageServiceEndpoint']) {
    const v = c.get([field]);
    if (typeof v === 'string' && v !== '') {
      const problem = endpointProblem(v);
      if (problem) c.add([field], problem);
    }
  }
}

/** The serving certificate and its key come together, or neither (a self-signed one). */
function checkServingCertificate(c: Checker): void {
  const cert = c.get(['tlsCertFile']);
  const key = c.get(['tlsPrivateKeyFile']);
  if ((typeof cert === 'string' && cert !== '') !== (typeof key === 'string' && key !== '')) {
    const [set, missing] = cert ? ['tlsCertFile', 'tlsPrivateKeyFile'] : ['tlsPrivateKeyFile', 'tlsCertFile'];
    c.add([set], `is set but ${missing} is not; set both, or neither for a self-signed certificate`);
  }
}

/** A quantity ("10Mi"); the kubelet refuses what it cannot parse (a negative one turns rotation off). */
function checkContainerLogMaxSize(c: Checker): void {
  const logMax = c.get(['containerLogMaxSize']);
  if (typeof logMax !== 'string') return;
  try {
    parseQuantity(logMax);
  } catch (err) {
    c.add(['containerLogMaxSize'], (err as Error).message);
  }
}

/** Known signals, each a positive quantity or a percentage (the soft thresholds: validate-eviction.ts). */
function checkEvictionHard(c: Checker): void {
  const eviction = c.get(['evictionHard']);
  if (!isJsonObject(eviction)) return;
  for (const [signal, value] of Object.entries(eviction)) {
    const p = ['evictionHard', signal];
    if (!EVICTION_SIGNALS.has(signal)) {
      c.add(p, `unsupported eviction signal ${signal} (known: ${[...EVICTION_SIGNALS].join(', ')})`);
      continue;
    }
    if (typeof value !== 'string') continue;
    try {
      parseThresholdValue(value);
    } catch (err) {
      c.add(p, (err as Error).message);
    }
  }
}

/** Image garbage collection and the node's images, as the kubelet validates them. */
function checkImageGC(c: Checker): void {
  intIn(c, ['imageGCHighThresholdPercent'], 0, 100, 'must be between 0 and 100, inclusive');
  intIn(c, ['imageGCLowThresholdPercent'], 0, 100, 'must be between 0 and 100, inclusive');
  const gcHigh = c.get(['imageGCHighThresholdPercent']);
  const gcLow = c.get(['imageGCLowThresholdPercent']);
  if (typeof gcHigh === 'number' && typeof gcLow === 'number' && gcLow >= gcHigh) {
    // Named on the field the operator set (a defaulted low threshold is not what is wrong).
    if (c.originOf(['imageGCLowThresholdPercent']) === 'default') c.add(['imageGCHighThresholdPercent'], `must be greater than imageGCLowThresholdPercent (${gcLow}), got ${gcHigh}`);
    else c.add(['imageGCLowThresholdPercent'], `must be less than imageGCHighThresholdPercent (${gcHigh}), got ${gcLow}`);
  }
  const maxAge = c.get(['imageMaximumGCAge']);
  const minAge = c.get(['imageMinimumGCAge']);
  if (typeof maxAge === 'string' && typeof minAge === 'string') {
    const max = parseDurationNs(maxAge);
    if (max > 0n && max <= parseDurationNs(minAge)) c.add(['imageMaximumGCAge'], `must be greater than imageMinimumGCAge (${minAge}), got ${JSON.stringify(maxAge)}`);
  }
  intIn(c, ['nodeStatusMaxImages'], -1, Infinity, 'must be -1 or greater');
}

/** kubeReserved/systemReserved: the resources the kubelet can reserve, as non-negative quantities. */
function checkReservations(c: Checker): void {
  for (const field of ['kubeReserved', 'systemReserved']) {
    const m = c.get([field]);
    if (!isJsonObject(m)) continue;
    for (const [k, v] of Object.entries(m)) {
      const p = [field, k];
      if (!['cpu', 'memory', 'ephemeral-storage', 'pid'].includes(k)) {
        c.add(p, `cannot reserve ${JSON.stringify(k)} (only cpu, memory, ephemeral-storage and pid)`);
        continue;
      }
      if (typeof v !== 'string') continue;
      try {
        if (parseQuantity(v).sign < 0) c.add(p, `must not be negative, got ${JSON.stringify(v)}`);
      } catch (err) {
        c.add(p, (err as Error).message);
      }
    }
  }
}

/** The kubelet's rule (KubeletCrashLoopBackOffMax): the period only with its gate, and within 1s..300s. */
function checkCrashLoopBackOff(c: Checker): void {
  const p = ['crashLoopBackOff', 'maxContainerRestartPeriod'];
  const restartPeriod = c.get(p);
  if (typeof restartPeriod !== 'string') return;
  const ns = parseDurationNs(restartPeriod);
  if (!c.gateOn('KubeletCrashLoopBackOffMax')) c.add(p, 'must not be set: the feature gate KubeletCrashLoopBackOffMax is not enabled');
  else if (ns < 1_000_000_000n || ns > 300_000_000_000n) c.add(p, `must be between 1s and 300s, got ${JSON.stringify(restartPeriod)}`);
}

/** The kubelet's rules (KubeletEnsureSecretPulledImages): the policy and its allowlist only with the gate; image-pull-credentials.ts. */
function checkImagePullCredentials(c: Checker): void {
  const on = c.gateOn('KubeletEnsureSecretPulledImages');
  for (const [field, message] of imagePullCredentialsProblems(c.get(['imagePullCredentialsVerificationPolicy']), c.get(['preloadedImagesVerificationAllowlist']), on)) c.add([field], message);
}

/** Unknown and locked gates (warnings for GA and deprecated ones: resolve.ts). */
function checkFeatureGates(c: Checker): void {
  const gates = c.get(['featureGates']);
  if (!isJsonObject(gates)) return;
  for (const [name, value] of Object.entries(gates)) {
    if (typeof value !== 'boolean') continue;
    const problem = featureGateProblem(name, value);
    if (problem) c.add(['featureGates', name], problem);
  }
}
