/**
 * The kubelet's validation of the graceful node shutdown fields (src/config/validate-shutdown.ts),
 * through the configuration resolver as a file would be checked: every problem names its field.
 */
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../../src/config/resolve.js';

const HEADER = { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration' };
const MAIN = '/var/lib/kubelet/config.yaml';

function problems(doc: Record<string, unknown>) {
  return resolveConfig([{ origin: MAIN, doc: { ...HEADER, ...doc }, requireHeader: true }]).problems.map((p) => [p.field, p.message]);
}

describe('graceful node shutdown configuration', () => {
  it.each([
    ['nothing set (off)', {}],
    ['both zero (off)', { shutdownGracePeriod: '0s', shutdownGracePeriodCriticalPods: '0s' }],
    ['total only', { shutdownGracePeriod: '30s' }],
    ['critical equal to total', { shutdownGracePeriod: '30s', shutdownGracePeriodCriticalPods: '30s' }],
    ['byPodPriority alone', { shutdownGracePeriodByPodPriority: [{ priority: 0, shutdownGracePeriodSeconds: 30 }, { priority: 2000000000, shutdownGracePeriodSeconds: 10 }] }],
    ['byPodPriority with zero periods', { shutdownGracePeriod: '0s', shutdownGracePeriodByPodPriority: [{ priority: 0, shutdownGracePeriodSeconds: 30 }] }],
    ['an empty byPodPriority list with periods', { shutdownGracePeriod: '10s', shutdownGracePeriodByPodPriority: [] }],
    ['gate off, nothing set', { featureGates: { GracefulNodeShutdown: false } }],
  ])('accepts %s', (_name, doc) => {
    expect(problems(doc)).toEqual([]);
  });

  it.each([
    ['critical above total', { shutdownGracePeriod: '10s', shutdownGracePeriodCriticalPods: '20s' }, [['shutdownGracePeriodCriticalPods', 'must be <= shutdownGracePeriod (10s), got "20s"']]],
    ['critical without total', { shutdownGracePeriodCriticalPods: '5s' }, [['shutdownGracePeriodCriticalPods', 'must be <= shutdownGracePeriod (0s), got "5s"']]],
    ['total under a second', { shutdownGracePeriod: '500ms' }, [['shutdownGracePeriod', 'must be either zero or otherwise >= 1 sec, got "500ms"']]],
    [
      'critical under a second',
      { shutdownGracePeriod: '10s', shutdownGracePeriodCriticalPods: '100ms' },
      [['shutdownGracePeriodCriticalPods', 'must be either zero or otherwise >= 1 sec, got "100ms"']],
    ],
    ['negative total', { shutdownGracePeriod: '-5s' }, [['shutdownGracePeriod', 'must not be negative, got "-5s"']]],
    [
      'byPodPriority with shutdownGracePeriod',
      { shutdownGracePeriod: '30s', shutdownGracePeriodByPodPriority: [{ priority: 0, shutdownGracePeriodSeconds: 30 }] },
      [['shutdownGracePeriodByPodPriority', 'cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time']],
    ],
    [
      'byPodPriority with the critical period',
      { shutdownGracePeriod: '30s', shutdownGracePeriodCriticalPods: '10s', shutdownGracePeriodByPodPriority: [{ priority: 0, shutdownGracePeriodSeconds: 30 }] },
      [['shutdownGracePeriodByPodPriority', 'cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time']],
    ],
    [
      'periods with gate GracefulNodeShutdown off',
      { featureGates: { GracefulNodeShutdown: false }, shutdownGracePeriod: '30s' },
      [['shutdownGracePeriod', 'specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown']],
    ],
    [
      'byPodPriority with its gate off',
      { featureGates: { GracefulNodeShutdownBasedOnPodPriority: false }, shutdownGracePeriodByPodPriority: [{ priority: 0, shutdownGracePeriodSeconds: 30 }] },
      [['shutdownGracePeriodByPodPriority', 'specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority']],
    ],
    [
      'malformed byPodPriority entries',
      { shutdownGracePeriodByPodPriority: ['x', { priority: 1.5, shutdownGracePeriodSeconds: '30' }, { priority: 3000000000, grace: 1 }] },
      [
        ['shutdownGracePeriodByPodPriority.0', 'must be an object with priority and shutdownGracePeriodSeconds'],
        ['shutdownGracePeriodByPodPriority.1.priority', 'must be an integer between -2147483648 and 2147483647, got 1.5'],
        ['shutdownGracePeriodByPodPriority.1.shutdownGracePeriodSeconds', 'must be an integer, got "30"'],
        ['shutdownGracePeriodByPodPriority.2.grace', 'unknown field "grace"'],
        ['shutdownGracePeriodByPodPriority.2.priority', 'must be an integer between -2147483648 and 2147483647, got 3000000000'],
      ],
    ],
  ])('refuses %s', (_name, doc, want) => {
    expect(problems(doc)).toEqual(want);
  });
});
