/**
 * The graceful node shutdown's decisions (src/node/shutdown-plan.ts), table-driven: the
 * groups the configuration makes, which group each pod goes in, each pod's grace period,
 * what logind is asked for, and the state file's JSON.
 */
import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import {
  decodeShutdownState,
  encodeShutdownState,
  groupByPriority,
  logindDropIn,
  periodRequestedSeconds,
  podGraceSeconds,
  podPriority,
  shutdownGroups,
  SYSTEM_CRITICAL_PRIORITY,
} from '../../../src/node/shutdown-plan.js';

function pod(name: string, spec: Partial<NonNullable<Pod['spec']>> = {}): Pod {
  return { metadata: { name, namespace: 'default', uid: `uid-${name}` }, spec: { containers: [{ name: 'c' }], ...spec } };
}

describe('shutdownGroups', () => {
  it.each([
    ['off: nothing set', {}, []],
    ['off: both zero', { shutdownGracePeriod: '0s', shutdownGracePeriodCriticalPods: '0s' }, []],
    ['total only: everything for regular pods, 0 s for critical ones', { shutdownGracePeriod: '30s' }, [{ priority: 0, shutdownGracePeriodSeconds: 30 }, { priority: SYSTEM_CRITICAL_PRIORITY, shutdownGracePeriodSeconds: 0 }]],
    ['total and critical', { shutdownGracePeriod: '20s', shutdownGracePeriodCriticalPods: '8s' }, [{ priority: 0, shutdownGracePeriodSeconds: 12 }, { priority: SYSTEM_CRITICAL_PRIORITY, shutdownGracePeriodSeconds: 8 }]],
    ['minutes, whole seconds kept', { shutdownGracePeriod: '1m30.5s', shutdownGracePeriodCriticalPods: '10s' }, [{ priority: 0, shutdownGracePeriodSeconds: 80 }, { priority: SYSTEM_CRITICAL_PRIORITY, shutdownGracePeriodSeconds: 10 }]],
    ['critical above total (refused by validation): off', { shutdownGracePeriod: '5s', shutdownGracePeriodCriticalPods: '10s' }, []],
    [
      'byPodPriority, sorted by priority',
      { shutdownGracePeriodByPodPriority: [{ priority: 100000, shutdownGracePeriodSeconds: 5 }, { priority: 0, shutdownGracePeriodSeconds: 30 }, { priority: 10000, shutdownGracePeriodSeconds: 10 }] },
      [{ priority: 0, shutdownGracePeriodSeconds: 30 }, { priority: 10000, shutdownGracePeriodSeconds: 10 }, { priority: 100000, shutdownGracePeriodSeconds: 5 }],
    ],
    ['byPodPriority, a field left out is zero', { shutdownGracePeriodByPodPriority: [{ shutdownGracePeriodSeconds: 7 }, { priority: 5 }] as never }, [{ priority: 0, shutdownGracePeriodSeconds: 7 }, { priority: 5, shutdownGracePeriodSeconds: 0 }]],
  ])('%s', (_name, cfg, want) => {
    expect(shutdownGroups(cfg)).toEqual(want);
  });

  it('ignores byPodPriority when its gate is off (the periods rule)', () => {
    expect(shutdownGroups({ shutdownGracePeriod: '10s', shutdownGracePeriodByPodPriority: [{ priority: 5, shutdownGracePeriodSeconds: 3 }] }, { byPodPriority: false })).toEqual([
      { priority: 0, shutdownGracePeriodSeconds: 10 },
      { priority: SYSTEM_CRITICAL_PRIORITY, shutdownGracePeriodSeconds: 0 },
    ]);
  });

  it('asks logind for the sum of the groups', () => {
    expect(periodRequestedSeconds(shutdownGroups({ shutdownGracePeriod: '20s', shutdownGracePeriodCriticalPods: '8s' }))).toBe(20);
    expect(periodRequestedSeconds([{ priority: 0, shutdownGracePeriodSeconds: 30 }, { priority: 1, shutdownGracePeriodSeconds: 5 }])).toBe(35);
    expect(periodRequestedSeconds([])).toBe(0);
  });
});

describe('podPriority', () => {
  it.each([
    ['no priority', {}, 0],
    ['spec.priority', { priority: 42 }, 42],
    ['spec.priority wins over the class', { priority: 7, priorityClassName: 'system-node-critical' }, 7],
    ['system-node-critical without spec.priority (a static pod)', { priorityClassName: 'system-node-critical' }, 2_000_001_000],
    ['system-cluster-critical', { priorityClassName: 'system-cluster-critical' }, 2_000_000_000],
    ['another class without spec.priority', { priorityClassName: 'high' }, 0],
  ])('%s', (_name, spec, want) => {
    expect(podPriority(pod('p', spec))).toBe(want);
  });
});

describe('groupByPriority', () => {
  const two = shutdownGroups({ shutdownGracePeriod: '20s', shutdownGracePeriodCriticalPods: '8s' });
  it('regular pods first, critical ones (by class or priority) last', () => {
    const pods = [pod('web'), pod('dns', { priorityClassName: 'system-cluster-critical' }), pod('proxy', { priorityClassName: 'system-node-critical' }), pod('batch', { priority: 1000 })];
    const groups = groupByPriority(two, pods);
    expect(groups.map((g) => [g.priority, g.shutdownGracePeriodSeconds, g.pods.map((p) => p.metadata!.name)])).toEqual([
      [0, 12, ['web', 'batch']],
      [SYSTEM_CRITICAL_PRIORITY, 8, ['dns', 'proxy']],
    ]);
  });

  it('byPodPriority: each pod in the highest group not above it; below the lowest: the lowest', () => {
    const groups = groupByPriority(
      [
        { priority: 10, shutdownGracePeriodSeconds: 30 },
        { priority: 100, shutdownGracePeriodSeconds: 20 },
        { priority: 1000, shutdownGracePeriodSeconds: 10 },
      ],
      [pod('neg', { priority: -5 }), pod('ten', { priority: 10 }), pod('fifty', { priority: 50 }), pod('hundred', { priority: 100 }), pod('huge', { priority: 5000 })],
    );
    expect(groups.map((g) => [g.priority, g.pods.map((p) => p.metadata!.name)])).toEqual([
      [10, ['neg', 'ten', 'fifty']],
      [100, ['hundred']],
      [1000, ['huge']],
    ]);
  });

  it('keeps empty groups (the manager skips them without waiting) and has no group when off', () => {
    expect(groupByPriority(two, []).map((g) => g.pods.length)).toEqual([0, 0]);
    expect(groupByPriority([], [pod('a')])).toEqual([]);
  });
});

describe('podGraceSeconds', () => {
  const group = { priority: 0, shutdownGracePeriodSeconds: 12 };
  it.each([
    ['default (unset): the group\'s', undefined, 12],
    ['its own when smaller', 5, 5],
    ['its own when equal', 12, 12],
    ['the group\'s when its own is larger', 30, 12],
    ['zero', 0, 0],
  ])('%s', (_name, own, want) => {
    expect(podGraceSeconds(pod('p', own === undefined ? {} : { terminationGracePeriodSeconds: own }), group)).toBe(want);
  });
});

describe('the state file', () => {
  it('is the kubelet\'s JSON: start and end times, Go\'s zero time when unset', () => {
    const start = new Date('2026-11-24T07:00:00.123Z');
    const end = new Date('2026-11-24T07:00:04.5Z');
    expect(encodeShutdownState({ startTime: start })).toBe('{"startTime":"2026-11-24T07:00:00.123Z","endTime":"0001-01-01T00:00:00Z"}');
    expect(encodeShutdownState({ startTime: start, endTime: end })).toBe('{"startTime":"2026-11-24T07:00:00.123Z","endTime":"2026-11-24T07:00:04.500Z"}');
    expect(decodeShutdownState(encodeShutdownState({ startTime: start, endTime: end }))).toEqual({ startTime: start, endTime: end });
    expect(decodeShutdownState(encodeShutdownState({ startTime: start }))).toEqual({ startTime: start, endTime: undefined });
    // What a kubelet wrote (Go's RFC 3339 with nanoseconds and a zone offset) reads back too.
    expect(decodeShutdownState('{"startTime":"2026-11-24T08:00:00.123456789+01:00","endTime":"0001-01-01T00:00:00Z"}').startTime?.toISOString()).toBe('2026-11-24T07:00:00.123Z');
  });

  it.each([['[]'], ['{"startTime": 5}'], ['{"endTime": "yesterday"}'], ['not json']])('refuses %s', (text) => {
    expect(() => decodeShutdownState(text)).toThrow();
  });

  it('logind drop-in is the kubelet\'s', () => {
    expect(logindDropIn(20)).toBe('# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=20\n');
  });
});
