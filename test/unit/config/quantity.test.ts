import { describe, expect, it } from 'vitest';
import { parseQuantity, parseThresholdValue, type Quantity } from '../../../src/config/quantity.js';

describe('parseQuantity (resource.Quantity)', () => {
  const valid: Array<[string, Omit<Quantity, 'text'>]> = [
    ['0', { format: 'DecimalSI', value: 0, millis: 0n, roundedUp: 0n, sign: 0 }],
    ['100Mi', { format: 'BinarySI', value: 104857600, millis: 104857600000n, roundedUp: 104857600n, sign: 1 }],
    ['1.5Gi', { format: 'BinarySI', value: 1610612736, millis: 1610612736000n, roundedUp: 1610612736n, sign: 1 }],
    ['.5Ki', { format: 'BinarySI', value: 512, millis: 512000n, roundedUp: 512n, sign: 1 }],
    ['1Ei', { format: 'BinarySI', value: 2 ** 60, millis: 1152921504606846976000n, roundedUp: 1152921504606846976n, sign: 1 }],
    ['500m', { format: 'DecimalSI', value: 0.5, millis: 500n, roundedUp: 1n, sign: 1 }],
    ['0.1m', { format: 'DecimalSI', value: 0.0001, millis: 1n, roundedUp: 1n, sign: 1 }],
    ['2k', { format: 'DecimalSI', value: 2000, millis: 2000000n, roundedUp: 2000n, sign: 1 }],
    ['1M', { format: 'DecimalSI', value: 1e6, millis: 1000000000n, roundedUp: 1000000n, sign: 1 }],
    ['1E', { format: 'DecimalSI', value: 1e18, millis: 10n ** 21n, roundedUp: 10n ** 18n, sign: 1 }],
    ['1.5', { format: 'DecimalSI', value: 1.5, millis: 1500n, roundedUp: 2n, sign: 1 }],
    ['1.', { format: 'DecimalSI', value: 1, millis: 1000n, roundedUp: 1n, sign: 1 }],
    ['+1Ki', { format: 'BinarySI', value: 1024, millis: 1024000n, roundedUp: 1024n, sign: 1 }],
    ['-1.5', { format: 'DecimalSI', value: -1.5, millis: -1500n, roundedUp: -2n, sign: -1 }],
    ['1e3', { format: 'DecimalExponent', value: 1000, millis: 1000000n, roundedUp: 1000n, sign: 1 }],
    ['1E3', { format: 'DecimalExponent', value: 1000, millis: 1000000n, roundedUp: 1000n, sign: 1 }],
    ['5E-3', { format: 'DecimalExponent', value: 0.005, millis: 5n, roundedUp: 1n, sign: 1 }],
    ['1.5e+2', { format: 'DecimalExponent', value: 150, millis: 150000n, roundedUp: 150n, sign: 1 }],
  ];
  it.each(valid)('%j', (text, expected) => {
    expect(parseQuantity(text)).toEqual({ text, ...expected });
  });

  const invalid: Array<[string, RegExp]> = [
    ['1.5.3Gi', /"1\.5\.3Gi" is not a valid quantity/],
    ['Mi', /"Mi" is not a valid quantity/],
    ['-', /"-" is not a valid quantity/],
    ['', /"" is not a valid quantity/],
    ['.', /not a valid quantity/],
    ['10%', /"10%" is a percentage, not a quantity/],
    ['1 Gi', /not a valid quantity/],
    [' 1Gi', /not a valid quantity/],
    ['1gi', /not a valid quantity/],
    ['1KI', /not a valid quantity/],
    ['1Kib', /not a valid quantity/],
    ['1e', /not a valid quantity/],
    ['e3', /not a valid quantity/],
    ['1e3.5', /not a valid quantity/],
    ['0x10', /not a valid quantity/],
    ['1_000', /not a valid quantity/],
    ['1e1000', /exponent out of range/],
  ];
  it.each(invalid)('rejects %j', (text, message) => {
    expect(() => parseQuantity(text)).toThrow(message);
  });
});

describe('parseThresholdValue (evictionHard values)', () => {
  it.each([
    ['10%', { kind: 'percentage', fraction: 0.1 }],
    ['7.5%', { kind: 'percentage', fraction: 0.075 }],
    ['0%', { kind: 'disabled' }],
    ['100%', { kind: 'disabled' }],
    ['0.0%', { kind: 'disabled' }],
  ])('%j is a percentage', (text, expected) => {
    expect(parseThresholdValue(text)).toEqual(expected);
  });

  it('takes anything without % as a quantity', () => {
    expect(parseThresholdValue('100Mi')).toEqual({ kind: 'quantity', quantity: parseQuantity('100Mi') });
  });

  it.each([
    ['101%', /must be <= 100%/],
    ['-5%', /must be >= 0%/],
    ['abc%', /not a valid percentage/],
    ['%', /not a valid percentage/],
    ['10 %', /not a valid percentage/],
    ['0', /must be positive/],
    ['-1Gi', /must be positive/],
    ['1.5.3Gi', /not a valid quantity/],
  ])('rejects %j', (text, message) => {
    expect(() => parseThresholdValue(text)).toThrow(message);
  });
});
