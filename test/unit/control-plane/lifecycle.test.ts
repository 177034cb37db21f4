import { describe, expect, it } from 'vitest';
import { NOT_READY_TAINT, UNREACHABLE_TAINT, nodeLifecycle } from '../../control-plane/lifecycle.js';

const T0 = Date.UTC(2026, 0, 1, 0, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
const GRACE = 50_000;

function node(ready: string, heartbeat: number, transition = heartbeat, taints?: object[]): Record<string, any> { // eslint-disable-line @typescript-eslint/no-explicit-any
  return {
    metadata: { name: 'n', creationTimestamp: iso(T0 - 3600_000) },
    spec: taints ? { taints } : {},
    status: { conditions: [{ type: 'Ready', status: ready, lastHeartbeatTime: iso(heartbeat), lastTransitionTime: iso(transition) }] },
  };
}
const lease = (renew: number): object => ({ spec: { renewTime: new Date(renew).toISOString() } });
const taintKeys = (n: Record<string, any> | undefined): string[] => (n?.['spec']?.['taints'] ?? []).map((t: { key: string }) => t.key); // eslint-disable-line @typescript-eslint/no-explicit-any

describe('node Ready state table', () => {
  it('True, no message for longer than the grace period -> Unknown with the unreachable taint', () => {
    const out = nodeLifecycle(node('True', T0), lease(T0), T0 + GRACE + 1, GRACE)!;
    const ready = out['status']['conditions'].find((c: { type: string }) => c.type === 'Ready');
    expect(ready).toMatchObject({ status: 'Unknown', reason: 'NodeStatusUnknown', lastTransitionTime: iso(T0 + GRACE + 1) });
    expect(out['spec']['taints']).toEqual([{ key: UNREACHABLE_TAINT, effect: 'NoExecute', timeAdded: iso(T0 + GRACE + 1) }]);
  });

  it('a renewed lease keeps the node as it is (exactly at the grace period too)', () => {
    expect(nodeLifecycle(node('True', T0), lease(T0 + 40_000), T0 + GRACE + 1, GRACE)).toBeUndefined();
    expect(nodeLifecycle(node('True', T0), undefined, T0 + GRACE, GRACE)).toBeUndefined();
  });

  it('False longer than the grace period -> not-ready taint; shorter -> nothing', () => {
    expect(nodeLifecycle(node('False', T0 + 40_000, T0), lease(T0 + 40_000), T0 + 45_000, GRACE)).toBeUndefined();
    const out = nodeLifecycle(node('False', T0 + 49_000, T0), lease(T0 + 49_000), T0 + GRACE + 1, GRACE);
    expect(taintKeys(out)).toEqual([NOT_READY_TAINT]);
    expect(out!['status']['conditions'][0].status).toBe('False');
  });

  it('healthy again: both taints are removed', () => {
    const tainted = [{ key: UNREACHABLE_TAINT, effect: 'NoExecute' }, { key: NOT_READY_TAINT, effect: 'NoExecute' }, { key: 'other', effect: 'NoSchedule' }];
    const out = nodeLifecycle(node('True', T0, T0, tainted), lease(T0), T0 + 1000, GRACE);
    expect(taintKeys(out)).toEqual(['other']);
  });

  it('an Unknown node that reports again but stays Unknown keeps its unreachable taint', () => {
    const tainted = [{ key: UNREACHABLE_TAINT, effect: 'NoExecute' }];
    expect(nodeLifecycle(node('Unknown', T0, T0, tainted), lease(T0), T0 + 1000, GRACE)).toBeUndefined();
  });
});
