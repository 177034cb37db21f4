import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/server.js';
import { TOKEN, request } from './helpers.js';

let now = Date.UTC(2026, 0, 1);
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
let cp: ControlPlane;
beforeAll(async () => {
  cp = await startControlPlane({ clock: { now: () => now, sleep: () => Promise.resolve() }, nodeMonitorGracePeriodMs: 10_000, nodeLifecycleIntervalMs: 0 });
  cp.addToken(TOKEN, 'admin');
});
afterAll(async () => {
  await cp.close();
});

describe('node lifecycle through the API', () => {
  it('lease not renewed -> Ready=Unknown + unreachable taint; renewed and Ready=True -> taint removed', async () => {
    await request(cp, 'POST', '/api/v1/nodes', { body: { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' }, status: { conditions: [{ type: 'Ready', status: 'True', lastHeartbeatTime: iso(now), lastTransitionTime: iso(now) }] } } });
    const lease = { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'n1' }, spec: { holderIdentity: 'n1', leaseDurationSeconds: 40, renewTime: new Date(now).toISOString() } };
    await request(cp, 'POST', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', { body: lease });
    now += 10_001;
    cp.syncNodeLifecycle();
    const n = (await request(cp, 'GET', '/api/v1/nodes/n1')).json;
    expect(n.status.conditions.find((c: { type: string }) => c.type === 'Ready').status).toBe('Unknown');
    expect(n.spec.taints.map((t: { key: string }) => t.key)).toEqual(['node.kubernetes.io/unreachable']);
    expect(n.metadata.managedFields.some((m: { manager: string }) => m.manager === 'node-controller')).toBe(true);

    await request(cp, 'PATCH', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1', { contentType: 'application/merge-patch+json', body: { spec: { renewTime: new Date(now).toISOString() } } });
    await request(cp, 'PATCH', '/api/v1/nodes/n1/status', { contentType: 'application/strategic-merge-patch+json', body: { status: { conditions: [{ type: 'Ready', status: 'True', lastHeartbeatTime: iso(now), lastTransitionTime: iso(now) }] } } });
    cp.syncNodeLifecycle();
    const healthy = (await request(cp, 'GET', '/api/v1/nodes/n1')).json;
    expect(healthy.spec.taints).toBeUndefined();
  });
});
