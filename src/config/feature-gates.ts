/**
 * Feature gates nodelet knows, with the kubelet's defaults (Kubernetes 1.32 unless noted),
 * and the rules the kubelet applies to them: an unknown name is an error
 * ("unrecognized feature gate"), a gate locked to its default cannot be changed, and
 * `AllAlpha` / `AllBeta` switch every alpha / beta gate not set explicitly.
 *
 * The effective config's `featureGates` holds only explicit settings; code asks
 * isFeatureEnabled() for the value in force.
 */
import { NodeletError } from '../errors.js';

export type FeatureStage = 'ALPHA' | 'BETA' | 'GA' | 'DEPRECATED';

export interface FeatureSpec {
  readonly default: boolean;
  readonly stage: FeatureStage;
  /** GA (or removed-behaviour) gates the kubelet refuses to set to anything but the default. */
  readonly lockToDefault?: boolean;
}

/** Meta gates: set every alpha / beta gate that is not set explicitly. */
const ALL_ALPHA = 'AllAlpha';
const ALL_BETA = 'AllBeta';

export const KNOWN_FEATURE_GATES: Readonly<Record<string, FeatureSpec>> = Object.freeze({
  [ALL_ALPHA]: { default: false, stage: 'ALPHA' },
  [ALL_BETA]: { default: false, stage: 'BETA' },
  /** POST /checkpoint/{ns}/{pod}/{container} (beta and on by default since 1.30). */
  ContainerCheckpoint: { default: true, stage: 'BETA' },
  KubeletSeparateDiskGC: { default: true, stage: 'BETA' },
  SidecarContainers: { default: true, stage: 'BETA' },
  GracefulNodeShutdown: { default: true, stage: 'BETA' },
  GracefulNodeShutdownBasedOnPodPriority: { default: true, stage: 'BETA' },
  NodeSwap: { default: true, stage: 'BETA' },
  KubeletTracing: { default: true, stage: 'BETA' },
  SystemdWatchdog: { default: true, stage: 'BETA' },
  RecursiveReadOnlyMounts: { default: true, stage: 'BETA' },
  CPUManagerPolicyBetaOptions: { default: true, stage: 'BETA' },
  TopologyManagerPolicyOptions: { default: true, stage: 'BETA' },
  MemoryManager: { default: true, stage: 'BETA' },
  ProcMountType: { default: false, stage: 'BETA' },
  UserNamespacesSupport: { default: false, stage: 'BETA' },
  InPlacePodVerticalScaling: { default: false, stage: 'ALPHA' },
  MemoryQoS: { default: false, stage: 'ALPHA' },
  PodAndContainerStatsFromCRI: { default: false, stage: 'ALPHA' },
  ImageVolume: { default: false, stage: 'ALPHA' },
  KubeletCrashLoopBackOffMax: { default: false, stage: 'ALPHA' },
  KubeletEnsureSecretPulledImages: { default: false, stage: 'ALPHA' },
  CPUManagerPolicyAlphaOptions: { default: false, stage: 'ALPHA' },
  KubeletPodResourcesGet: { default: false, stage: 'ALPHA' },
  KubeletPodResourcesDynamicResources: { default: false, stage: 'ALPHA' },
  DynamicResourceAllocation: { default: false, stage: 'BETA' },
  KubeletCgroupDriverFromCRI: { default: true, stage: 'BETA' },
  PodLifecycleSleepAction: { default: true, stage: 'BETA' },
  LocalStorageCapacityIsolationFSQuotaMonitoring: { default: false, stage: 'BETA' },
  CPUCFSQuotaPeriod: { default: false, stage: 'ALPHA' },
  // GA since 1.31 and locked on: setting them false is an error, as in the kubelet.
  DisableCloudProviders: { default: true, stage: 'GA', lockToDefault: true },
  DisableKubeletCloudCredentialProviders: { default: true, stage: 'GA', lockToDefault: true },
} satisfies Record<string, FeatureSpec>);

/**
 * Why `name=value` cannot be set, in the kubelet's words, or undefined when it can.
 * Used for files and --feature-gates alike.
 */
export function featureGateProblem(name: string, value: boolean): string | undefined {
  const spec = Object.hasOwn(KNOWN_FEATURE_GATES, name) ? KNOWN_FEATURE_GATES[name] : undefined;
  if (!spec) return `unrecognized feature gate: ${name}`;
  if (spec.lockToDefault && value !== spec.default) {
    return `cannot set feature gate ${name} to ${value}, feature is locked to ${spec.default}`;
  }
  return undefined;
}

/**
 * Whether feature `name` is on for this configuration: the explicit setting, else
 * AllAlpha/AllBeta for a gate of that stage, else the gate's default. Throws
 * INVALID_ARGUMENT for a name not in KNOWN_FEATURE_GATES (a programming error: code asks
 * only about gates it knows).
 */
export function isFeatureEnabled(config: { readonly featureGates?: Readonly<Record<string, boolean>> }, name: string): boolean {
  const spec = Object.hasOwn(KNOWN_FEATURE_GATES, name) ? KNOWN_FEATURE_GATES[name] : undefined;
  if (!spec) throw new NodeletError('INVALID_ARGUMENT', `isFeatureEnabled: unknown feature gate ${name}`);
  const gates = config.featureGates ?? {};
  if (Object.hasOwn(gates, name)) return gates[name] === true;
  if (name !== ALL_ALPHA && name !== ALL_BETA) {
    if (spec.stage === 'ALPHA' && gates[ALL_ALPHA] === true) return true;
    if (spec.stage === 'BETA' && Object.hasOwn(gates, ALL_BETA)) return gates[ALL_BETA] === true;
  }
  return spec.default;
}

/** strconv.ParseBool's accepted spellings, as the kubelet's --feature-gates flag uses. */
const TRUE_WORDS = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const FALSE_WORDS = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

/**
 * Parses the `--feature-gates` flag (`A=true,B=false`, spaces around items allowed, empty
 * items skipped, a later duplicate wins) as the kubelet does. Throws
 * NodeletError('INVALID_ARGUMENT') naming --feature-gates for a missing `=`, a value that
 * is not a boolean, an unknown gate or a locked one.
 */
export function parseFeatureGates(text: string): Record<string, boolean> {
  const out: Record<string, boolean> = {};
  for (const raw of text.split(',')) {
    const item = raw.trim();
    if (item === '') continue;
    const eq = item.indexOf('=');
    if (eq < 0) throw new NodeletError('INVALID_ARGUMENT', `--feature-gates: missing bool value for ${item}`, { flag: '--feature-gates' });
    const name = item.slice(0, eq).trim();
    const valueText = item.slice(eq + 1).trim();
    let value: boolean;
    if (TRUE_WORDS.has(valueText)) value = true;
    else if (FALSE_WORDS.has(valueText)) value = false;
    else {
      throw new NodeletError('INVALID_ARGUMENT', `--feature-gates: invalid value of ${name}=${valueText}: not a boolean (true or false)`, {
        flag: '--feature-gates',
      });
    }
    const problem = featureGateProblem(name, value);
    if (problem) throw new NodeletError('INVALID_ARGUMENT', `--feature-gates: ${problem}`, { flag: '--feature-gates' });
    out[name] = value;
  }
  return out;
}
