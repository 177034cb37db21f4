/**
 * The kubelet's rules for the soft eviction fields: each bad value is one problem naming its
 * field (the kubelet would not start with it); good ones pass.
 */
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../../src/config/resolve.js';

const MAIN = '/etc/kubernetes/kubelet.yaml';
const resolve = (doc: Record<string, unknown>) => resolveConfig([{ origin: MAIN, doc: { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', ...doc }, requireHeader: true }]);

describe('soft eviction, grace periods and minimum reclaim: validation', () => {
  it.each<[string, Record<string, unknown>, string, RegExp]>([
    ['a soft threshold without its grace period', { evictionSoft: { 'memory.available': '1Gi' } }, 'evictionSoft.memory.available', /^a grace period must be specified for the soft eviction threshold memory\.available/],
    ['a soft threshold that is no quantity', { evictionSoft: { 'memory.available': 'lots' }, evictionSoftGracePeriod: { 'memory.available': '1m' } }, 'evictionSoft.memory.available', /"lots" is not a valid quantity/],
    ['an unknown soft signal', { evictionSoft: { 'memory.free': '1Gi' } }, 'evictionSoft.memory.free', /^unsupported eviction signal memory\.free/],
    ['a grace period that is no duration', { evictionSoftGracePeriod: { 'memory.available': 'soon' } }, 'evictionSoftGracePeriod.memory.available', /soon/],
    ['a negative grace period', { evictionSoftGracePeriod: { 'memory.available': '-1m' } }, 'evictionSoftGracePeriod.memory.available', /^must not be negative/],
    ['a negative minimum reclaim', { evictionMinimumReclaim: { 'memory.available': '-1Mi' } }, 'evictionMinimumReclaim.memory.available', /^negative eviction minimum reclaim specified for memory\.available$/],
    ['a minimum reclaim of 0%', { evictionMinimumReclaim: { 'nodefs.available': '0%' } }, 'evictionMinimumReclaim.nodefs.available', /must be positive/],
  ])('%s', (_n, doc, field, message) => {
    expect(resolve(doc).problems).toEqual([{ file: MAIN, field, message: expect.stringMatching(message) }]);
  });

  it('accepts soft thresholds with their grace periods, minimum reclaims and a negative evictionMaxPodGracePeriod', () => {
    const r = resolve({
      evictionSoft: { 'memory.available': '1.5Gi', 'nodefs.available': '15%' },
      evictionSoftGracePeriod: { 'memory.available': '1m30s', 'nodefs.available': '2m' },
      evictionMinimumReclaim: { 'memory.available': '0Mi', 'nodefs.available': '500Mi', 'imagefs.available': '2%' },
      evictionMaxPodGracePeriod: -1,
    });
    expect(r.problems).toEqual([]);
  });
});
