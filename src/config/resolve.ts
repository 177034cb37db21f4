/**
 * From parsed layers to the effective configuration: check each layer, merge them in
 * order with provenance, apply defaults, normalize durations, validate. Pure: loadConfig
 * reads the files and calls this; unit tests call it directly.
 */
import { applyDefaults } from './defaults.js';
import { normalizeDuration } from './duration.js';
import { applyMergePatch, flattenOrigins, isJsonObject, originOf, type JsonObject, type OriginTree } from './merge.js';
import { featureGateProblem, featureGateWarning } from './feature-gates.js';
import { durationPaths } from './schema.js';
import type { ConfigProblem, KubeletConfiguration } from './types.js';
import { checkDocument, validateConfig } from './validate.js';

export interface ConfigLayer {
  /** Who provides this layer: an absolute file path, or 'flag'. */
  readonly origin: string;
  /** The parsed document (any JSON value; checked here). */
  readonly doc: unknown;
  /** Files must carry apiVersion/kind; flag overrides do not. */
  readonly requireHeader: boolean;
}

export interface ResolvedConfig {
  readonly config: Readonly<KubeletConfiguration>;
  readonly origins: Map<string, string>;
  /** Errors: the configuration is unusable when non-empty. */
  readonly problems: ConfigProblem[];
  readonly warnings: ConfigProblem[];
}

/** Freezes an object graph in place and returns it. */
export function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const child of Object.values(v)) deepFreeze(child);
  }
  return v;
}

/**
 * Resolves layers given in precedence order (lowest first: --config, drop-ins in order,
 * flags last). Always returns a configuration; when `problems` is non-empty it is only
 * good for reporting (bad values were left out).
 */
export function resolveConfig(layers: readonly ConfigLayer[]): ResolvedConfig {
  const problems: ConfigProblem[] = [];
  const warnings: ConfigProblem[] = [];
  const tree: OriginTree = { children: new Map() };
  let merged: JsonObject = {};
  for (const layer of layers) {
    const checked = checkDocument(layer.doc, layer.origin, { requireHeader: layer.requireHeader });
    problems.push(...checked.problems);
    warnings.push(...checked.warnings);
    const next = applyMergePatch(merged, checked.doc, layer.origin, tree);
    merged = isJsonObject(next) ? next : {};
  }
  applyDefaults(merged, tree);
  for (const p of durationPaths()) {
    const parent = p.slice(0, -1).reduce<unknown>((cur, seg) => (isJsonObject(cur) ? cur[seg] : undefined), merged);
    const leaf = p[p.length - 1]!;
    if (isJsonObject(parent) && typeof parent[leaf] === 'string') {
      // Canonical text, as the kubelet prints it (`2m` -> `2m0s`); syntax was checked per layer.
      parent[leaf] = normalizeDuration(parent[leaf]);
    }
  }
  problems.push(...validateConfig(merged, (p) => originOf(tree, p) ?? 'default'));
  // The kubelet warns when a GA or deprecated gate is set (it is going away); a gate that
  // cannot be set at all is already a problem above.
  const gates = merged.featureGates;
  if (isJsonObject(gates)) {
    for (const [name, value] of Object.entries(gates)) {
      if (typeof value !== 'boolean' || featureGateProblem(name, value)) continue;
      const message = featureGateWarning(name, value);
      if (message) warnings.push({ file: originOf(tree, ['featureGates', name]) ?? 'default', field: `featureGates.${name}`, message });
    }
  }
  const origins = flattenOrigins(merged, tree);
  return { config: deepFreeze(merged) as unknown as KubeletConfiguration, origins, problems, warnings };
}
