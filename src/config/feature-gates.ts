/**
 * Feature gates as the kubelet has them: every gate a Kubernetes kubelet registers (its
 * own, component-base's, the apiserver's and client-go's; the table is
 * feature-gates-table.ts, for KUBERNETES_VERSION), and the rules the kubelet applies to
 * them: an unknown name is an error ("unrecognized feature gate"), a gate locked to its
 * default cannot be changed, setting a GA or deprecated gate is a warning, and
 * `AllAlpha` / `AllBeta` switch every alpha / beta gate not set explicitly.
 *
 * The effective config's `featureGates` holds only explicit settings; code asks
 * isFeatureEnabled() for the value in force.
 */
import { NodeletError } from '../errors.js';
import { FEATURE_GATE_TABLE, KUBERNETES_VERSION, REMOVED_FEATURE_GATES, type FeatureGateEntry, type FeatureStage } from './feature-gates-table.js';

export { KUBERNETES_VERSION, type FeatureStage };

export type FeatureSpec = FeatureGateEntry;

/** Meta gates: set every alpha / beta gate that is not set explicitly. */
const ALL_ALPHA = 'AllAlpha';
const ALL_BETA = 'AllBeta';

export const KNOWN_FEATURE_GATES: Readonly<Record<string, FeatureSpec>> = FEATURE_GATE_TABLE;

/**
 * Why `name=value` cannot be set, in the kubelet's words, or undefined when it can.
 * Used for files and --feature-gates alike.
 */
export function featureGateProblem(name: string, value: boolean): string | undefined {
  const spec = Object.hasOwn(KNOWN_FEATURE_GATES, name) ? KNOWN_FEATURE_GATES[name] : undefined;
  if (!spec) {
    if (Object.hasOwn(REMOVED_FEATURE_GATES, name)) {
      const removedIn = REMOVED_FEATURE_GATES[name]!.removedIn;
      return `unrecognized feature gate: ${name} (it was removed from Kubernetes ${removedIn ? `in ${removedIn}` : `before ${KUBERNETES_VERSION}`})`;
    }
    return `unrecognized feature gate: ${name}`;
  }
  if (spec.lockToDefault && value !== spec.default) {
    return `cannot set feature gate ${name} to ${value}, feature is locked to ${spec.default}`;
  }
  return undefined;
}

/**
 * The kubelet's warning for setting `name` to `value`, or undefined: GA and deprecated
 * gates still accepted are going away. Words as component-base's featuregate logs them.
 */
export function featureGateWarning(name: string, value: boolean): string | undefined {
  const spec = Object.hasOwn(KNOWN_FEATURE_GATES, name) ? KNOWN_FEATURE_GATES[name] : undefined;
  if (spec?.stage === 'DEPRECATED') return `Setting deprecated feature gate ${name}=${value}. It will be removed in a future release.`;
  if (spec?.stage === 'GA') return `Setting GA feature gate ${name}=${value}. It will be removed in a future release.`;
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
