import { describe, expect, it } from 'vitest';
import {
  formatDuration,
  formatDurationNs,
  normalizeDuration,
  parseDuration,
  parseDurationNs,
} from '../../../src/config/duration.js';

// Expected values are Go's time.ParseDuration / Duration.String() results.
describe('parseDurationNs (Go time.ParseDuration)', () => {
  const valid: Array<[string, bigint]> = [
    ['0', 0n],
    ['0s', 0n],
    ['-0', 0n],
    ['+0s', 0n],
    ['1ns', 1n],
    ['1us', 1_000n],
    ['1\u00b5s', 1_000n], // micro sign
    ['1\u03bcs', 1_000n], // greek mu
    ['500ms', 500_000_000n],
    ['10s', 10_000_000_000n],
    ['2m', 120_000_000_000n],
    ['1.5h', 5_400_000_000_000n],
    ['1h2m3.5s', 3_723_500_000_000n],
    ['2h45m', 9_900_000_000_000n],
    ['.5s', 500_000_000n],
    ['1.s', 1_000_000_000n],
    ['-1s', -1_000_000_000n],
    ['+5s', 5_000_000_000n],
    ['1m30s500ms', 90_500_000_000n],
    ['1.0000000001s', 1_000_000_000n], // below a nanosecond: truncated
    ['0.3333333333s', 333_333_333n],
    ['9223372036854775807ns', 9223372036854775807n],
    ['-9223372036854775808ns', -9223372036854775808n],
  ];
  it.each(valid)('%j -> %s ns', (text, ns) => {
    expect(parseDurationNs(text)).toBe(ns);
  });

  const invalid: Array<[string, RegExp]> = [
    ['', /invalid duration ""/],
    ['1', /missing unit in duration "1"/],
    ['10', /missing unit/],
    ['s', /invalid duration "s"/],
    ['.s', /invalid duration/],
    ['-', /invalid duration/],
    ['1x', /unknown unit "x" in duration "1x"/],
    ['1S', /unknown unit "S"/],
    ['1.5.3s', /missing unit/],
    ['1h-2m', /unknown unit "h-" in duration "1h-2m"/],
    [' 1s', /invalid duration/],
    ['1s ', /unknown unit "s "/],
    ['1 s', /unknown unit " s"/],
    ['9223372036854775808ns', /invalid duration/],
    ['3000000h', /invalid duration/],
  ];
  it.each(invalid)('rejects %j', (text, message) => {
    expect(() => parseDurationNs(text)).toThrow(message);
  });
});

describe('formatDurationNs (Go Duration.String)', () => {
  const cases: Array<[bigint, string]> = [
    [0n, '0s'],
    [1n, '1ns'],
    [999n, '999ns'],
    [1_500n, '1.5\u00b5s'],
    [1_000_000n, '1ms'],
    [1_500_000n, '1.5ms'],
    [500_000_000n, '500ms'],
    [1_000_000_000n, '1s'],
    [1_000_000_001n, '1.000000001s'],
    [30_000_000_000n, '30s'],
    [90_000_000_000n, '1m30s'],
    [120_000_000_000n, '2m0s'],
    [300_000_000_000n, '5m0s'],
    [3_600_000_000_000n, '1h0m0s'],
    [3_723_500_000_000n, '1h2m3.5s'],
    [14_400_000_000_000n, '4h0m0s'],
    [-1_000_000_000n, '-1s'],
    [-1_500n, '-1.5\u00b5s'],
    [9223372036854775807n, '2562047h47m16.854775807s'],
    [-9223372036854775808n, '-2562047h47m16.854775808s'],
  ];
  it.each(cases)('%s ns -> %j', (ns, text) => {
    expect(formatDurationNs(ns)).toBe(text);
  });

  it('formats whatever it parses back to the same value', () => {
    for (const [ns] of cases) expect(parseDurationNs(formatDurationNs(ns))).toBe(ns);
  });
});

describe('millisecond API', () => {
  it.each([
    ['500ms', 500],
    ['1h2m3.5s', 3_723_500],
    ['1.5h', 5_400_000],
    ['1us', 0.001],
    ['0', 0],
    ['-1s', -1000],
  ])('parseDuration(%j) = %s ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each([
    [120_000, '2m0s'],
    [10_000, '10s'],
    [0.5, '500\u00b5s'],
    [3_723_500, '1h2m3.5s'],
    [0, '0s'],
  ])('formatDuration(%s) = %j', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  it('refuses a non-finite number of milliseconds', () => {
    expect(() => formatDuration(Number.NaN)).toThrow(/not a finite number/);
  });

  it.each([
    ['2m', '2m0s'],
    ['120s', '2m0s'],
    ['1.5h', '1h30m0s'],
    ['90m', '1h30m0s'],
    ['0', '0s'],
    ['5m0s', '5m0s'],
  ])('normalizeDuration(%j) = %j (as the kubelet prints it)', (text, canonical) => {
    expect(normalizeDuration(text)).toBe(canonical);
  });
});
