import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Node } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../helpers/clock.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { LeaseRenewer, microTime, type LeaseApi } from '../../../src/node/lease.js';

/** An in-memory lease store with resourceVersion checks, as the API server's. */
class MemLeases implements LeaseApi {
  leases = new Map<string, Lease>();
  nodes = new Map<string, Node>();
  rv = 1;
  calls: string[] = [];
  fail: NodeletError | undefined;
  async getNode(name: string) {
    this.calls.push('getNode');
    return this.nodes.get(name);
  }
  async getLease(ns: string, name: string) {
    this.calls.push('get');
    if (this.fail) throw this.fail;
    return this.leases.get(`${ns}/${name}`);
  }
  async createLease(l: Lease) {
    this.calls.push('create');
    const key = `${l.metadata!.namespace}/${l.metadata!.name}`;
    if (this.leases.has(key)) throw new NodeletError('ALREADY_EXISTS', 'exists');
    const stored = { ...l, metadata: { ...l.metadata, resourceVersion: String(++this.rv) } };
    this.leases.set(key, stored);
    return stored;
  }
  async updateLease(l: Lease) {
    this.calls.push('update');
    if (this.fail) throw this.fail;
    const key = `${l.metadata!.namespace}/${l.metadata!.name}`;
    const cur = this.leases.get(key);
    if (!cur) throw new NodeletError('NOT_FOUND', 'no lease');
    if (cur.metadata!.resourceVersion !== l.metadata!.resourceVersion) throw new NodeletError('CONFLICT', 'stale');
    const stored = { ...l, metadata: { ...l.metadata, resourceVersion: String(++this.rv) } };
    this.leases.set(key, stored);
    return stored;
  }
}

function setup() {
  const api = new MemLeases();
  const clock = new ManualClock();
  const r = new LeaseRenewer({ api, nodeName: 'n1', leaseDurationSeconds: 40, clock, logger: silentLogger(), rand: () => 0.5 });
  return { api, clock, r };
}

describe('LeaseRenewer', () => {
  it('waits for the Node, then creates kube-node-lease/<node> owned by it, with holder, duration and a MicroTime renewTime', async () => {
    const { api, r } = setup();
    expect(await r.syncOnce()).toBe(false);
    expect(api.leases.size).toBe(0);
    api.nodes.set('n1', { metadata: { name: 'n1', uid: 'node-uid' } });
    expect(await r.syncOnce()).toBe(true);
    const l = api.leases.get('kube-node-lease/n1')!;
    expect(l.metadata!.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'node-uid' }]);
    expect(l.spec).toEqual({ holderIdentity: 'n1', leaseDurationSeconds: 40, renewTime: '2026-11-23T02:00:00.000000Z' });
  });

  it('renews the cached lease without a GET', async () => {
    const { api, clock, r } = setup();
    api.nodes.set('n1', { metadata: { name: 'n1', uid: 'u' } });
    await r.syncOnce();
    api.calls = [];
    clock.t += 10_000;
    expect(await r.syncOnce()).toBe(true);
    expect(api.calls).toEqual(['update']);
    expect(api.leases.get('kube-node-lease/n1')!.spec!.renewTime).toBe(microTime(clock.t));
  });

  it('a conflict (someone else wrote the lease) re-reads and renews', async () => {
    const { api, r } = setup();
    api.nodes.set('n1', { metadata: { name: 'n1', uid: 'u' } });
    await r.syncOnce();
    const cur = api.leases.get('kube-node-lease/n1')!;
    api.leases.set('kube-node-lease/n1', { ...cur, metadata: { ...cur.metadata, resourceVersion: '999' } });
    api.calls = [];
    expect(await r.syncOnce()).toBe(true);
    expect(api.calls).toEqual(['update', 'get', 'update']);
  });

  it('the interval is a quarter of the duration with jitter; failures back off from 200 ms doubling to 7 s', async () => {
    const { api, r } = setup();
    expect(r.nextDelayMs()).toBe(10_000);
    const jittered = new LeaseRenewer({ api, nodeName: 'n1', leaseDurationSeconds: 40, clock: new ManualClock(), logger: silentLogger(), rand: () => 1 });
    expect(jittered.nextDelayMs()).toBe(10_400);
    api.nodes.set('n1', { metadata: { name: 'n1', uid: 'u' } });
    // A server that answers with an error gets the kubelet's whole backoff.
    api.fail = new NodeletError('UNAVAILABLE', 'PUT lease: 503 the server is shutting down', { status: 503 });
    const delays: number[] = [];
    for (let i = 0; i < 7; i++) {
      expect(await r.syncOnce()).toBe(false);
      delays.push(r.nextDelayMs());
    }
    expect(delays).toEqual([200, 400, 800, 1600, 3200, 6400, 7000]);
    api.fail = undefined;
    expect(await r.syncOnce()).toBe(true);
    expect(r.nextDelayMs()).toBe(10_000);
  });

  it('a server that does not answer at all (refused, reset) is asked again within 1 s, so the lease follows its return at once', async () => {
    const { api, r } = setup();
    api.nodes.set('n1', { metadata: { name: 'n1', uid: 'u' } });
    api.fail = new NodeletError('UNAVAILABLE', 'PUT lease: connect ECONNREFUSED 127.0.0.1:6443');
    const delays: number[] = [];
    for (let i = 0; i < 7; i++) {
      expect(await r.syncOnce()).toBe(false);
      delays.push(r.nextDelayMs());
    }
    expect(delays).toEqual([200, 400, 800, 1000, 1000, 1000, 1000]);
  });
});
