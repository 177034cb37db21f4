import { describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { featureGateProblem, isFeatureEnabled, parseFeatureGates } from '../../../src/config/feature-gates.js';

describe('parseFeatureGates (--feature-gates)', () => {
  it.each([
    ['', {}],
    ['ContainerCheckpoint=false', { ContainerCheckpoint: false }],
    ['ContainerCheckpoint=false,GracefulNodeShutdown=true', { ContainerCheckpoint: false, GracefulNodeShutdown: true }],
    [' ContainerCheckpoint = false , MemoryQoS=True,', { ContainerCheckpoint: false, MemoryQoS: true }],
    ['MemoryQoS=1,GracefulNodeShutdown=F,ImageVolume=TRUE', { MemoryQoS: true, GracefulNodeShutdown: false, ImageVolume: true }],
    ['GracefulNodeShutdown=true,GracefulNodeShutdown=false', { GracefulNodeShutdown: false }],
  ])('%j', (text, expected) => {
    expect(parseFeatureGates(text)).toEqual(expected);
  });

  it.each([
    ['ContainerCheckpoint', /--feature-gates: missing bool value for ContainerCheckpoint/],
    ['ContainerCheckpoint=yes', /--feature-gates: invalid value of ContainerCheckpoint=yes/],
    ['ContainerCheckpoint=', /--feature-gates: invalid value of ContainerCheckpoint=/],
    ['NoSuchGate=true', /--feature-gates: unrecognized feature gate: NoSuchGate/],
    ['containercheckpoint=true', /unrecognized feature gate: containercheckpoint/],
    ['NodeSwap=false', /cannot set feature gate NodeSwap to false, feature is locked to true/],
  ])('rejects %j with INVALID_ARGUMENT', (text, message) => {
    expect(() => parseFeatureGates(text)).toThrow(NodeletError);
    expect(() => parseFeatureGates(text)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(message) }));
  });
});

describe('isFeatureEnabled', () => {
  it.each([
    ['default of a beta gate that is on', {}, 'ContainerCheckpoint', true],
    ['default of an alpha gate', {}, 'MemoryQoS', false],
    ['explicit false', { ContainerCheckpoint: false }, 'ContainerCheckpoint', false],
    ['explicit true', { MemoryQoS: true }, 'MemoryQoS', true],
    ['AllAlpha turns alpha gates on', { AllAlpha: true }, 'MemoryQoS', true],
    ['AllAlpha leaves beta gates alone', { AllAlpha: true }, 'NodeLogQuery', false],
    ['AllBeta=false turns beta gates off', { AllBeta: false }, 'ContainerCheckpoint', false],
    ['an explicit gate wins over AllBeta', { AllBeta: false, ContainerCheckpoint: true }, 'ContainerCheckpoint', true],
    ['AllBeta leaves GA gates alone', { AllBeta: false }, 'NodeSwap', true],
  ])('%s', (_name, featureGates, gate, expected) => {
    expect(isFeatureEnabled({ featureGates }, gate)).toBe(expected);
  });

  it('throws for a gate nodelet does not know (a programming error)', () => {
    expect(() => isFeatureEnabled({ featureGates: {} }, 'NoSuchGate')).toThrow(/unknown feature gate NoSuchGate/);
  });
});

describe('featureGateProblem', () => {
  it('accepts known gates, names unknown and locked ones as the kubelet does', () => {
    expect(featureGateProblem('ContainerCheckpoint', false)).toBeUndefined();
    expect(featureGateProblem('NodeSwap', true)).toBeUndefined();
    expect(featureGateProblem('Nope', true)).toBe('unrecognized feature gate: Nope');
    expect(featureGateProblem('toString', true)).toBe('unrecognized feature gate: toString');
  });
});
