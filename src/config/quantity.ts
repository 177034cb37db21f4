/**
 * Kubernetes `resource.Quantity` text (`100Mi`, `1.5Gi`, `500m`, `1e3`, `2k`) and the
 * kubelet's eviction threshold values (a quantity, or a percentage such as `10%`).
 * A small strict parser of our own (the npm parsers we tried were wrong on edge cases).
 * Exact arithmetic in bigint; pure functions.
 *
 * Grammar (apimachinery's resource package):
 *   quantity ::= [+-] number suffix
 *   number   ::= digits | digits "." [digits] | "." digits
 *   suffix   ::= "" | binarySI (Ki Mi Gi Ti Pi Ei) | decimalSI (m k M G T P E)
 *              | ("e" | "E") [+-] digits          (decimal exponent: 1e3, 5E-3)
 * `1E` is exa, `1E3` is an exponent, as in Go.
 */

export type QuantityFormat = 'BinarySI' | 'DecimalSI' | 'DecimalExponent';

/** A parsed quantity. Base units: bytes for memory and storage, cores for CPU. */
export interface Quantity {
  /** The text as given. */
  readonly text: string;
  readonly format: QuantityFormat;
  /** Value in base units as a float (`1.5Gi` -> 1610612736, `500m` -> 0.5); exact for ordinary sizes. */
  readonly value: number;
  /** Exact value in thousandths of a base unit, rounded away from zero (Go's `MilliValue()`). */
  readonly millis: bigint;
  /** Exact value in whole base units, rounded away from zero (Go's `Value()`). */
  readonly roundedUp: bigint;
  /** -1, 0 or 1. */
  readonly sign: -1 | 0 | 1;
}

export class QuantitySyntaxError extends Error {
  override readonly name = 'QuantitySyntaxError';
}

const BINARY: Readonly<Record<string, number>> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 };
const DECIMAL: Readonly<Record<string, number>> = { m: -3, '': 0, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
/** Go keeps exponents in an int32 but no real resource needs more than this; a bound keeps bigint work small. */
const MAX_EXPONENT = 100;

const QUANTITY_RE = /^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:(Ki|Mi|Gi|Ti|Pi|Ei)|[eE]([+-]?\d+)|(m|k|M|G|T|P|E)?)$/;

const HINT = 'expected a number with an optional suffix (Ki, Mi, Gi, Ti, Pi, Ei, m, k, M, G, T, P, E) or exponent (1e3), e.g. 100Mi, 1.5Gi, 500m';

/** Divides rounding away from zero (den > 0). */
function divAway(num: bigint, den: bigint): bigint {
  const q = num / den;
  if (num % den === 0n) return q;
  return num < 0n ? q - 1n : q + 1n;
}

/**
 * Parses a Kubernetes quantity. Throws QuantitySyntaxError naming the text for anything
 * else: `1.5.3Gi`, `Mi`, `-`, ``, `10%` (a percentage is not a quantity), `1 Gi`, `1gi`.
 */
export function parseQuantity(text: string): Quantity {
  const m = QUANTITY_RE.exec(text);
  if (!m) {
    if (typeof text === 'string' && text.endsWith('%')) {
      throw new QuantitySyntaxError(`${JSON.stringify(text)} is a percentage, not a quantity (${HINT})`);
    }
    throw new QuantitySyntaxError(`${JSON.stringify(text)} is not a valid quantity: ${HINT}`);
  }
  const [, signText, numberText, binSuffix, expText, decSuffix] = m;
  const [intPart, fracPart = ''] = numberText!.split('.');
  const mantissa = BigInt(`${intPart || '0'}${fracPart}`) * (signText === '-' ? -1n : 1n);
  let num = mantissa;
  let den = 10n ** BigInt(fracPart.length);
  let format: QuantityFormat;
  let scale: number; // float multiplier for `value`
  if (binSuffix !== undefined) {
    format = 'BinarySI';
    const bits = BINARY[binSuffix]!;
    num *= 1n << BigInt(bits);
    scale = 2 ** bits;
  } else {
    let exp: number;
    if (expText !== undefined) {
      format = 'DecimalExponent';
      exp = Number(expText);
      if (!Number.isSafeInteger(exp) || Math.abs(exp) > MAX_EXPONENT) {
        throw new QuantitySyntaxError(`${JSON.stringify(text)}: exponent out of range (at most ${MAX_EXPONENT})`);
      }
    } else {
      format = 'DecimalSI';
      exp = DECIMAL[decSuffix ?? '']!;
    }
    if (exp >= 0) num *= 10n ** BigInt(exp);
    else den *= 10n ** BigInt(-exp);
    scale = 10 ** exp;
  }
  const value = Number(`${signText}${intPart || '0'}.${fracPart || '0'}`) * scale;
  const sign = mantissa === 0n ? 0 : mantissa < 0n ? -1 : 1;
  return { text, format, value, millis: divAway(num * 1000n, den), roundedUp: divAway(num, den), sign };
}

/** An eviction threshold value: a quantity, a percentage of capacity, or disabled. */
export type ThresholdValue =
  | { readonly kind: 'quantity'; readonly quantity: Quantity }
  | { readonly kind: 'percentage'; /** fraction of capacity, 0 < p < 1 */ readonly fraction: number }
  /** `0%` and `100%`: the kubelet ignores the threshold (no eviction on that signal). */
  | { readonly kind: 'disabled' };

const PERCENT_RE = /^(\d+(?:\.\d*)?|\.\d+)%$/;

/**
 * Parses an eviction threshold value as the kubelet does (pkg/kubelet/eviction helpers):
 * a value ending in `%` is a percentage in [0, 100] (`0%`/`100%` disable the signal);
 * anything else is a quantity that must be positive. Throws QuantitySyntaxError otherwise.
 */
export function parseThresholdValue(text: string): ThresholdValue {
  if (text.endsWith('%')) {
    if (text === '0%' || text === '100%') return { kind: 'disabled' };
    const m = PERCENT_RE.exec(text);
    if (!m) {
      if (/^-/.test(text)) throw new QuantitySyntaxError(`eviction percentage ${JSON.stringify(text)} must be >= 0%`);
      throw new QuantitySyntaxError(`${JSON.stringify(text)} is not a valid percentage (expected e.g. 10% or 7.5%)`);
    }
    const pct = Number(m[1]);
    if (pct > 100) throw new QuantitySyntaxError(`eviction percentage ${JSON.stringify(text)} must be <= 100%`);
    if (pct === 0 || pct === 100) return { kind: 'disabled' };
    return { kind: 'percentage', fraction: pct / 100 };
  }
  const quantity = parseQuantity(text);
  if (quantity.sign <= 0) throw new QuantitySyntaxError(`eviction threshold ${JSON.stringify(text)} must be positive`);
  return { kind: 'quantity', quantity };
}
