/**
 * The kubelet's rules for image garbage collection, the node's images and the reserved
 * resources: each bad value is one problem naming its field; the edge values pass.
 */
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../../src/config/resolve.js';

const MAIN = '/etc/kubernetes/kubelet.yaml';
const resolve = (doc: Record<string, unknown>) => resolveConfig([{ origin: MAIN, doc: { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', ...doc }, requireHeader: true }]);

describe('image GC, node images and reservations: validation', () => {
  it.each<[string, Record<string, unknown>, string, RegExp]>([
    ['high threshold above 100', { imageGCHighThresholdPercent: 101 }, 'imageGCHighThresholdPercent', /^must be between 0 and 100, inclusive, got 101$/],
    ['low threshold negative', { imageGCLowThresholdPercent: -1 }, 'imageGCLowThresholdPercent', /^must be between 0 and 100, inclusive, got -1$/],
    ['low threshold equal to the high one', { imageGCHighThresholdPercent: 50, imageGCLowThresholdPercent: 50 }, 'imageGCLowThresholdPercent', /^must be less than imageGCHighThresholdPercent \(50\), got 50$/],
    ['low threshold above the default high one', { imageGCLowThresholdPercent: 90 }, 'imageGCLowThresholdPercent', /^must be less than imageGCHighThresholdPercent \(85\), got 90$/],
    ['high threshold under the default low one: named on the field set', { imageGCHighThresholdPercent: 50 }, 'imageGCHighThresholdPercent', /^must be greater than imageGCLowThresholdPercent \(80\), got 50$/],
    ['maximum age not above the minimum age', { imageMinimumGCAge: '5m', imageMaximumGCAge: '5m' }, 'imageMaximumGCAge', /^must be greater than imageMinimumGCAge \(5m0s\), got "5m0s"$/],
    ['maximum age below the default minimum age', { imageMaximumGCAge: '1m' }, 'imageMaximumGCAge', /^must be greater than imageMinimumGCAge/],
    ['nodeStatusMaxImages below -1', { nodeStatusMaxImages: -2 }, 'nodeStatusMaxImages', /^must be -1 or greater, got -2$/],
    ['a resource the kubelet cannot reserve', { kubeReserved: { 'nvidia.com/gpu': '1' } }, 'kubeReserved.nvidia.com/gpu', /^cannot reserve "nvidia\.com\/gpu"/],
    ['a negative reservation', { systemReserved: { 'ephemeral-storage': '-1Gi' } }, 'systemReserved.ephemeral-storage', /^must not be negative, got "-1Gi"$/],
    ['a reservation that is no quantity', { kubeReserved: { memory: 'lots' } }, 'kubeReserved.memory', /"lots" is not a valid quantity/],
  ])('%s', (_n, doc, field, message) => {
    const r = resolve(doc);
    expect(r.problems).toEqual([{ file: MAIN, field, message: expect.stringMatching(message) }]);
  });

  it('accepts the edges: thresholds 1 and 0, an age above the minimum, no image cap, every reservable resource', () => {
    const r = resolve({
      imageGCHighThresholdPercent: 1,
      imageGCLowThresholdPercent: 0,
      imageMinimumGCAge: '1s',
      imageMaximumGCAge: '2s',
      nodeStatusMaxImages: -1,
      kubeReserved: { cpu: '100m', memory: '256Mi', 'ephemeral-storage': '1Gi', pid: '100' },
      systemReserved: { 'ephemeral-storage': '0' },
    });
    expect(r.problems).toEqual([]);
    expect(resolve({ imageGCHighThresholdPercent: 100, imageGCLowThresholdPercent: 99, imageMaximumGCAge: '0s' }).problems).toEqual([]);
  });
});
