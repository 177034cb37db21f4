import { describe, expect, it } from 'vitest';
import { NodeletError } from '../../src/errors.js';
import { decodeStatus } from '../../src/controlplane/errors.js';
import { ApiEventRecorder, podRef } from '../../src/events.js';
import { silentLogger } from '../../src/log.js';
import { MemEventApi } from '../fakes/events.js';
import { ManualClock } from '../helpers/clock.js';

function setup(o: { maxQueue?: number } = {}) {
  const clock = new ManualClock(Date.parse('2026-11-23T05:00:00Z'));
  const api = new MemEventApi();
  const rec = new ApiEventRecorder({ api, host: 'n1', logger: silentLogger(), clock, ...o });
  return { api, rec, clock };
}

const pod = { metadata: { name: 'web-n1', namespace: 'kube-system', uid: 'u1' } };

describe('ApiEventRecorder', () => {
  it('creates a core/v1 Event about the object from source kubelet on this host', async () => {
    const { api, rec } = setup();
    rec.emit(podRef(pod, { name: 'app' }), 'Normal', 'Started', 'Started container app');
    await rec.flushed();
    expect(api.created).toEqual([
      {
        apiVersion: 'v1',
        kind: 'Event',
        metadata: { name: expect.stringMatching(/^web-n1\.[0-9a-f]+$/), namespace: 'kube-system' },
        involvedObject: { kind: 'Pod', apiVersion: 'v1', name: 'web-n1', namespace: 'kube-system', uid: 'u1', fieldPath: 'spec.containers{app}' },
        reason: 'Started',
        message: 'Started container app',
        type: 'Normal',
        source: { component: 'kubelet', host: 'n1' },
        firstTimestamp: '2026-11-23T05:00:00Z',
        lastTimestamp: '2026-11-23T05:00:00Z',
        count: 1,
        reportingComponent: 'kubelet',
        reportingInstance: 'n1',
      },
    ]);
  });

  it('a repeat within the window raises count and lastTimestamp of the first; after it, a new event', async () => {
    const { api, rec, clock } = setup();
    const ref = podRef(pod, { name: 'app' });
    rec.emit(ref, 'Warning', 'BackOff', 'Back-off restarting failed container app');
    clock.t += 10_000;
    rec.emit(ref, 'Warning', 'BackOff', 'Back-off restarting failed container app');
    clock.t += 10_000;
    rec.emit(ref, 'Warning', 'BackOff', 'Back-off restarting failed container app');
    rec.emit(ref, 'Warning', 'BackOff', 'another message');
    await rec.flushed();
    expect(api.created.map((e) => e.message)).toEqual(['Back-off restarting failed container app', 'another message']);
    expect(api.patches).toEqual([
      { name: api.created[0]!.metadata!.name, patch: { count: 2, lastTimestamp: '2026-11-23T05:00:10Z' } },
      { name: api.created[0]!.metadata!.name, patch: { count: 3, lastTimestamp: '2026-11-23T05:00:20Z' } },
    ]);
    clock.t += 600_000;
    rec.emit(ref, 'Warning', 'BackOff', 'Back-off restarting failed container app');
    await rec.flushed();
    expect(api.created).toHaveLength(3);
    // The first event expired in the API: the repeat starts a new one.
    api.failPatch = new NodeletError('NOT_FOUND', 'events "x" not found');
    rec.emit(ref, 'Warning', 'BackOff', 'Back-off restarting failed container app');
    await rec.flushed();
    expect(api.created).toHaveLength(4);
  });

  it('retries a failed write, then drops the event; the ones after it still go', async () => {
    const { api, rec, clock } = setup();
    api.failCreate.set('A', 1).set('B', 3);
    rec.emit(podRef(pod), 'Normal', 'A', 'first');
    rec.emit(podRef(pod), 'Normal', 'B', 'second');
    rec.emit(podRef(pod), 'Normal', 'C', 'third');
    // The retries wait their backoff on the clock: well within 10 s.
    const flushed = rec.flushed();
    await clock.advance(10_000);
    await flushed;
    // first: fails once, then sent after its backoff; second: fails three times, dropped;
    // third: sent while the first waits for its retry.
    expect(api.created.map((e) => e.reason)).toEqual(['C', 'A']);
  });

  it('an event the server refuses is dropped at once, and the next events go without waiting', async () => {
    const { api, rec, clock } = setup();
    const create = api.create.bind(api);
    let calls = 0;
    api.create = async (e) => {
      calls++;
      if (e.reason === 'Gone') throw decodeStatus(404, { kind: 'Status', reason: 'NotFound', message: 'namespaces "old" not found' }, { method: 'POST', path: '/api/v1/namespaces/old/events' });
      await create(e);
    };
    rec.emit({ ...podRef(pod), namespace: 'old' }, 'Normal', 'Gone', 'its namespace was deleted');
    for (const r of ['Pulled', 'Created', 'Started']) rec.emit(podRef(pod, { name: 'app' }), 'Normal', r, r);
    await rec.flushed(); // no clock advance: nothing waits for a backoff
    expect(api.created.map((e) => e.reason)).toEqual(['Pulled', 'Created', 'Started']);
    expect(calls).toBe(4); // the refused one was tried once
    expect(clock.now()).toBe(Date.parse('2026-11-23T05:00:00Z'));
  });

  it('a 429 or 5xx with Retry-After is transient: retried after it, the others first', async () => {
    const { api, rec, clock } = setup();
    const create = api.create.bind(api);
    let busy = 1;
    api.create = async (e) => {
      if (e.reason === 'A' && busy-- > 0) throw decodeStatus(429, { kind: 'Status', reason: 'TooManyRequests', message: 'slow down' }, { method: 'POST', path: '/api/v1/namespaces/kube-system/events', retryAfter: '3' });
      await create(e);
    };
    rec.emit(podRef(pod), 'Normal', 'A', 'first');
    rec.emit(podRef(pod), 'Normal', 'B', 'second');
    const flushed = rec.flushed();
    await clock.advance(2_900);
    expect(api.created.map((e) => e.reason)).toEqual(['B']);
    await clock.advance(200);
    await flushed;
    expect(api.created.map((e) => e.reason)).toEqual(['B', 'A']);
  });

  it('an event emitted just as a flush ends is sent (at whatever microtask it comes)', async () => {
    // The flush used to clear its flag in a `finally` callback a microtask after finding the
    // queue empty: an event emitted in between waited for the next emit (lost if none came).
    for (let depth = 0; depth < 12; depth++) {
      const { api, rec } = setup();
      rec.emit(podRef(pod), 'Normal', 'A', 'first');
      let p = Promise.resolve();
      for (let i = 0; i < depth; i++) p = p.then(() => undefined);
      await p.then(() => rec.emit(podRef(pod), 'Normal', 'B', 'second'));
      await rec.flushed();
      await new Promise((r) => setImmediate(r)); // a macrotask later: any flush has had its turn
      expect(api.created.map((e) => e.reason), `B emitted after ${depth} microtasks`).toEqual(['A', 'B']);
    }
  });

  it('a create whose answer was lost is retried under the same name: AlreadyExists means sent, one object', async () => {
    const { api, rec, clock } = setup();
    // The first attempt reaches the API, but its answer is lost (a connection reset).
    const create = api.create.bind(api);
    let lost = 1;
    api.create = async (e) => {
      await create(e);
      if (lost-- > 0) throw new NodeletError('UNAVAILABLE', 'read ECONNRESET');
    };
    const ref = podRef(pod, { name: 'app' });
    rec.emit(ref, 'Normal', 'Started', 'Started container app');
    const flushed = rec.flushed();
    await clock.advance(10_000);
    await flushed;
    expect(api.created).toHaveLength(1);
    expect([...api.objects.events.values()].map((e) => [e.metadata!.name, e.count])).toEqual([[api.created[0]!.metadata!.name, 1]]);
    // Counted as sent: a repeat raises its count.
    rec.emit(ref, 'Normal', 'Started', 'Started container app');
    await rec.flushed();
    expect([...api.objects.events.values()].map((e) => e.count)).toEqual([2]);
  });

  it('a full queue drops the oldest, and emitting never throws or waits', async () => {
    const { api, rec } = setup({ maxQueue: 2 });
    for (const r of ['A', 'B', 'C', 'D']) rec.emit(podRef(pod), 'Normal', r, r);
    await rec.flushed();
    // A was already being sent when B, C, D came: B and C were dropped for C and D.
    expect(api.created.map((e) => e.reason)).toEqual(['A', 'C', 'D']);
  });
});
