/**
 * The kubelet's validation of the soft eviction fields (its ParseThresholdConfig, which stops
 * the kubelet at start on any of these):
 *   - `evictionSoft`: known signals, values as `evictionHard`'s (a positive quantity or a
 *     percentage); each soft threshold needs its `evictionSoftGracePeriod`;
 *   - `evictionSoftGracePeriod`: known signals, Go durations, not negative;
 *   - `evictionMinimumReclaim`: known signals, a quantity not negative or a positive percentage.
 * `evictionMaxPodGracePeriod` is an int32 (the schema checks it); a negative value means the
 * pod's own grace period (docs/kubelet-differences.md). Called by validateConfig (validate.ts).
 */
import { parseDurationNs } from './duration.js';
import { isJsonObject, type Json } from './merge.js';
import { parseQuantity, parseThresholdValue } from './quantity.js';

export function validateEvictionFields(get: (p: readonly string[]) => Json | undefined, add: (p: readonly string[], message: string) => void, signals: ReadonlySet<string>): void {
  const entries = (field: string): [string, Json][] => {
    const v = get([field]);
    if (!isJsonObject(v)) return [];
    const out: [string, Json][] = [];
    for (const [signal, value] of Object.entries(v)) {
      if (!signals.has(signal)) add([field, signal], `unsupported eviction signal ${signal} (known: ${[...signals].join(', ')})`);
      else if (typeof value === 'string') out.push([signal, value]);
    }
    return out;
  };
  const grace = get(['evictionSoftGracePeriod']);
  for (const [signal, value] of entries('evictionSoft')) {
    try {
      parseThresholdValue(value as string);
    } catch (err) {
      add(['evictionSoft', signal], (err as Error).message);
    }
    if (!isJsonObject(grace) || grace[signal] === undefined) add(['evictionSoft', signal], `a grace period must be specified for the soft eviction threshold ${signal} (evictionSoftGracePeriod.${signal})`);
  }
  for (const [signal, value] of entries('evictionSoftGracePeriod')) {
    try {
      if (parseDurationNs(value as string) < 0n) add(['evictionSoftGracePeriod', signal], `must not be negative, got ${JSON.stringify(value)}`);
    } catch (err) {
      add(['evictionSoftGracePeriod', signal], (err as Error).message);
    }
  }
  for (const [signal, value] of entries('evictionMinimumReclaim')) {
    const text = value as string;
    try {
      if (text.endsWith('%')) {
        const v = parseThresholdValue(text);
        if (v.kind !== 'percentage') add(['evictionMinimumReclaim', signal], `eviction percentage minimum reclaim ${signal} must be positive and below 100%: ${text}`);
      } else if (parseQuantity(text).sign < 0) add(['evictionMinimumReclaim', signal], `negative eviction minimum reclaim specified for ${signal}`);
    } catch (err) {
      add(['evictionMinimumReclaim', signal], (err as Error).message);
    }
  }
}
