/**
 * nodelet's configuration layer: what the rest of the app uses.
 *   loadConfig()        files + drop-ins + flags -> frozen effective config with origins
 *   renderConfig()      `nodelet config view [--show-origin]`
 *   ConfigError         thrown by loadConfig, code CONFIG_INVALID, all problems at once
 *   parseFeatureGates() the `--feature-gates` flag; isFeatureEnabled() for a gate in force
 *   parseDuration()/formatDuration(), parseQuantity()/parseThresholdValue() for values
 */
export { loadConfig, parseConfigText, type LoadConfigOptions } from './load.js';
export { renderConfig, type RenderOptions } from './view.js';
export { ConfigError, formatProblem, EVICTION_SIGNALS } from './validate.js';
export { resolveConfig, type ConfigLayer, type ResolvedConfig } from './resolve.js';
export { DEFAULT_EVICTION_HARD } from './defaults.js';
export { parseFeatureGates, isFeatureEnabled, featureGateProblem, KNOWN_FEATURE_GATES, type FeatureSpec, type FeatureStage } from './feature-gates.js';
export { parseDuration, formatDuration, parseDurationNs, formatDurationNs, normalizeDuration, DurationSyntaxError } from './duration.js';
export { parseQuantity, parseThresholdValue, QuantitySyntaxError, type Quantity, type QuantityFormat, type ThresholdValue } from './quantity.js';
export {
  KUBELET_API_VERSION,
  KUBELET_KIND,
  type KubeletConfiguration,
  type KubeletAuthentication,
  type KubeletAuthorization,
  type AuthorizationMode,
  type SwapBehavior,
  type CgroupDriver,
  type HairpinMode,
  type ConfigProblem,
  type ConfigOrigin,
  type LoadedConfig,
} from './types.js';
