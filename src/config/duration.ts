/**
 * Go `time.Duration` text, as the kubelet reads (`metav1.Duration` -> `time.ParseDuration`)
 * and prints (`Duration.String()`) it. A small strict parser of our own: the npm parsers
 * we tried were wrong on edge cases (`1h2m3.5s`, `-0s`, overflow). Pure functions, no state.
 *
 * Internally everything is integer nanoseconds (bigint), like Go; the `ms` API is what the
 * rest of nodelet uses for timers.
 */

const NS = 1n;
const US = 1000n * NS;
const MS = 1000n * US;
const SEC = 1000n * MS;
const MIN = 60n * SEC;
const HOUR = 60n * MIN;

/** Go's unitMap: both micro signs (U+00B5, U+03BC) are accepted, as Go does. */
const UNITS: ReadonlyMap<string, bigint> = new Map([
  ['ns', NS],
  ['us', US],
  ['\u00b5s', US],
  ['\u03bcs', US],
  ['ms', MS],
  ['s', SEC],
  ['m', MIN],
  ['h', HOUR],
]);

const MAX_NS = (1n << 63n) - 1n; // time.Duration is an int64

/** Thrown (as a plain Error) by the parsers; callers turn it into a ConfigProblem. */
export class DurationSyntaxError extends Error {
  override readonly name = 'DurationSyntaxError';
}

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= '0' && c <= '9';
}

/**
 * Parses a Go duration (`300ms`, `-1.5h`, `2h45m`, `1h2m3.5s`, `0`) into integer nanoseconds,
 * with Go's grammar: an optional sign, then one or more `<number><unit>` with units
 * ns, us (µs), ms, s, m, h; a fractional part is truncated to whole nanoseconds; a bare `0`
 * is the only unit-less value. Throws DurationSyntaxError with Go's wording otherwise.
 */
export function parseDurationNs(text: string): bigint {
  const quoted = JSON.stringify(text);
  let s = text;
  let neg = false;
  if (s[0] === '-' || s[0] === '+') {
    neg = s[0] === '-';
    s = s.slice(1);
  }
  if (s === '0') return 0n;
  if (s === '') throw new DurationSyntaxError(`time: invalid duration ${quoted}`);
  let total = 0n;
  while (s !== '') {
    if (!(s[0] === '.' || isDigit(s[0]))) throw new DurationSyntaxError(`time: invalid duration ${quoted}`);
    let i = 0;
    while (isDigit(s[i])) i++;
    const intDigits = s.slice(0, i);
    s = s.slice(i);
    let fracDigits = '';
    if (s[0] === '.') {
      s = s.slice(1);
      let j = 0;
      while (isDigit(s[j])) j++;
      fracDigits = s.slice(0, j);
      s = s.slice(j);
    }
    if (intDigits === '' && fracDigits === '') throw new DurationSyntaxError(`time: invalid duration ${quoted}`);
    let k = 0;
    while (k < s.length && s[k] !== '.' && !isDigit(s[k])) k++;
    if (k === 0) throw new DurationSyntaxError(`time: missing unit in duration ${quoted}`);
    const unitText = s.slice(0, k);
    s = s.slice(k);
    const unit = UNITS.get(unitText);
    if (unit === undefined) throw new DurationSyntaxError(`time: unknown unit ${JSON.stringify(unitText)} in duration ${quoted}`);
    const whole = intDigits === '' ? 0n : BigInt(intDigits);
    // Go truncates the fraction to whole nanoseconds.
    const frac = fracDigits === '' ? 0n : (BigInt(fracDigits) * unit) / 10n ** BigInt(fracDigits.length);
    total += whole * unit + frac;
    if (total > MAX_NS + (neg ? 1n : 0n)) throw new DurationSyntaxError(`time: invalid duration ${quoted}`);
  }
  return neg ? -total : total;
}

/** Go's fmtFrac: `prec` fractional digits of v, trailing zeros (and a bare point) dropped. */
function fracText(v: bigint, prec: number): { text: string; rest: bigint } {
  const scale = 10n ** BigInt(prec);
  const frac = v % scale;
  const rest = v / scale;
  if (frac === 0n) return { text: '', rest };
  const digits = frac.toString().padStart(prec, '0').replace(/0+$/, '');
  return { text: `.${digits}`, rest };
}

/**
 * Formats integer nanoseconds exactly as Go's `time.Duration.String()`: `0s`, `1ns`,
 * `1.5µs`, `500ms`, `30s`, `2m0s`, `1h0m0s`, `1h2m3.5s`, `-1s`.
 */
export function formatDurationNs(ns: bigint): string {
  if (ns === 0n) return '0s';
  const neg = ns < 0n;
  let u = neg ? -ns : ns;
  let out: string;
  if (u < SEC) {
    if (u < US) out = `${u}ns`;
    else if (u < MS) {
      const f = fracText(u, 3);
      out = `${f.rest}${f.text}\u00b5s`;
    } else {
      const f = fracText(u, 6);
      out = `${f.rest}${f.text}ms`;
    }
  } else {
    const f = fracText(u, 9);
    u = f.rest;
    out = `${u % 60n}${f.text}s`;
    u /= 60n;
    if (u > 0n) {
      out = `${u % 60n}m${out}`;
      u /= 60n;
      if (u > 0n) out = `${u}h${out}`;
    }
  }
  return neg ? `-${out}` : out;
}

/** Parses a Go duration into milliseconds (fractions of a millisecond kept). See parseDurationNs. */
export function parseDuration(text: string): number {
  return Number(parseDurationNs(text)) / 1e6;
}

/** Formats milliseconds as Go's `Duration.String()` (rounded to whole nanoseconds). */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) throw new RangeError(`formatDuration: ${ms} is not a finite number of milliseconds`);
  return formatDurationNs(BigInt(Math.round(ms * 1e6)));
}

/** The canonical text of a valid duration (`2m` -> `2m0s`), as the kubelet prints it back. */
export function normalizeDuration(text: string): string {
  return formatDurationNs(parseDurationNs(text));
}
