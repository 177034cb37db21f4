import type { Pod } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { PodSources, runnableApiPods } from '../../../src/pods/sources/sources.js';

const pod = (uid: string, extra: Partial<Pod> = {}): Pod => ({ metadata: { name: uid, namespace: 'default', uid }, spec: { nodeName: 'n1', containers: [] }, ...extra });

describe('PodSources', () => {
  it('delivers the union, and says all ready only once every expected source delivered', () => {
    const got: [string[], boolean][] = [];
    const s = new PodSources(['file', 'api'], (pods, ready) => got.push([pods.map((p) => p.metadata!.uid!), ready]));
    s.update('file', [pod('a')]);
    s.update('api', [pod('b'), pod('a')]);
    s.update('api', []);
    expect(got).toEqual([
      [['a'], false],
      [['a', 'b'], true],
      [['a'], true],
    ]);
  });

  it('with no source at all, an empty set that is ready at once', () => {
    const got: [number, boolean][] = [];
    new PodSources([], (pods, ready) => got.push([pods.length, ready]));
    expect(got).toEqual([[0, true]]);
  });
});

describe('runnableApiPods', () => {
  it('keeps the pods bound to this node, finished ones too (their containers and logs stay until deleted), and never mirror pods (their static pods run from files)', () => {
    const pods = [
      pod('run'),
      pod('other', { spec: { nodeName: 'n2', containers: [] } }),
      pod('done', { status: { phase: 'Succeeded' } }),
      pod('failed', { status: { phase: 'Failed' } }),
      pod('pending', { status: { phase: 'Pending' } }),
      pod('mirror', { metadata: { name: 'mirror', namespace: 'default', uid: 'mirror', annotations: { 'kubernetes.io/config.mirror': 'abc' } } }),
    ];
    expect(runnableApiPods(pods, 'n1').map((p) => p.metadata!.uid)).toEqual(['run', 'done', 'failed', 'pending']);
  });
});
