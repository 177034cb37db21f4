import { describe, expect, it } from 'vitest';
import type { KubeObject, WatchEvent } from '../../../src/controlplane/client.js';
import { PODS } from '../../../src/controlplane/client.js';
import { dropManagedFields, Reflector, ReflectorState, type ReflectorClient, type ReflectorEvent } from '../../../src/controlplane/reflector.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { VirtualClock } from '../../helpers/clock.js';
import { ScriptedClient } from '../../fakes/reflector-client.js';

const obj = (name: string, rv: string, extra: Record<string, unknown> = {}): KubeObject => ({ metadata: { name, namespace: 'ns', resourceVersion: rv }, ...extra });

describe('ReflectorState', () => {
  it('replace sets the store and the version', () => {
    const s = new ReflectorState();
    expect(s.replace([obj('a', '1'), obj('b', '2')], '5')).toEqual({ type: 'replace', items: [obj('a', '1'), obj('b', '2')], resourceVersion: '5' });
    expect([s.size, s.resourceVersion]).toEqual([2, '5']);
  });

  const table: Array<[string, WatchEvent[], Array<ReflectorEvent<KubeObject> | undefined>, string, string[]]> = [
    ['add then update', [{ type: 'ADDED', object: obj('c', '6') }, { type: 'MODIFIED', object: obj('c', '7') }], [{ type: 'add', object: obj('c', '6') }, { type: 'update', object: obj('c', '7'), old: obj('c', '6') }], '7', ['a', 'b', 'c']],
    ['replayed event (same rv) is dropped', [{ type: 'MODIFIED', object: obj('a', '1') }], [undefined], '1', ['a', 'b']],
    ['bookmark moves the version only', [{ type: 'BOOKMARK', object: { metadata: { resourceVersion: '9' } } }], [undefined], '9', ['a', 'b']],
    ['delete of a known object', [{ type: 'DELETED', object: obj('a', '8') }], [{ type: 'delete', object: obj('a', '8') }], '8', ['b']],
    ['delete of an unknown object is dropped (already gone)', [{ type: 'DELETED', object: obj('z', '8') }], [undefined], '8', ['a', 'b']],
    ['ADDED for a known object with a new rv is an update', [{ type: 'ADDED', object: obj('b', '6') }], [{ type: 'update', object: obj('b', '6'), old: obj('b', '2') }], '6', ['a', 'b']],
    ['MODIFIED for an unknown object is an add', [{ type: 'MODIFIED', object: obj('d', '6') }], [{ type: 'add', object: obj('d', '6') }], '6', ['a', 'b', 'd']],
  ];
  it.each(table)('%s', (_n, events, want, rv, names) => {
    const s = new ReflectorState();
    s.replace([obj('a', '1'), obj('b', '2')], '5');
    expect(events.map((e) => s.apply(e))).toEqual(want);
    expect(s.resourceVersion).toBe(rv);
    expect(s.items().map((o) => o.metadata!.name).sort()).toEqual(names);
  });
});

describe('ReflectorState with a transform', () => {
  const mf = { managedFields: [{ manager: 'nodelet', operation: 'Update', fieldsType: 'FieldsV1', fieldsV1: { 'f:status': { 'f:phase': {} } } }] };
  const withMf = (name: string, rv: string): KubeObject => ({ metadata: { name, namespace: 'ns', resourceVersion: rv, ...mf } as KubeObject['metadata'], spec: { x: 1 } } as KubeObject);
  const without = (name: string, rv: string): KubeObject => ({ metadata: { name, namespace: 'ns', resourceVersion: rv }, spec: { x: 1 } } as KubeObject);

  it('dropManagedFields: stored, replaced and passed-on objects carry no managedFields, everything else kept', () => {
    const s = new ReflectorState<KubeObject>(dropManagedFields);
    expect(s.replace([withMf('a', '1')], '5')).toEqual({ type: 'replace', items: [without('a', '1')], resourceVersion: '5' });
    expect(s.apply({ type: 'MODIFIED', object: withMf('a', '6') })).toEqual({ type: 'update', object: without('a', '6'), old: without('a', '1') });
    expect(s.apply({ type: 'ADDED', object: withMf('b', '7') })).toEqual({ type: 'add', object: without('b', '7') });
    expect(s.get('ns/b')).toEqual(without('b', '7'));
    // A replayed event is still recognized by its resourceVersion.
    expect(s.apply({ type: 'MODIFIED', object: withMf('b', '7') })).toBeUndefined();
    // Deletions pass the object as the server sent it (nothing stored).
    expect(s.apply({ type: 'DELETED', object: withMf('a', '8') })).toMatchObject({ type: 'delete' });
    expect(s.items().map((o) => o.metadata!.name)).toEqual(['b']);
  });

  it('dropManagedFields leaves an object without metadata or managedFields as it is', () => {
    expect(dropManagedFields({})).toEqual({});
    expect(dropManagedFields(without('c', '1'))).toEqual(without('c', '1'));
  });
});

describe('Reflector loop', () => {
  it('retries faults with backoff, resumes from the last version, relists on 410, never duplicates', async () => {
    const client = new ScriptedClient(
      [new NodeletError('UNAVAILABLE', 'connect ECONNREFUSED'), { items: [obj('a', '1')], rv: '2' }, { items: [obj('b', '4')], rv: '6' }],
      [
        { events: [{ type: 'MODIFIED', object: obj('a', '3') }], end: new NodeletError('UNAVAILABLE', 'socket reset') },
        { events: [{ type: 'MODIFIED', object: obj('a', '3') }, { type: 'ADDED', object: obj('b', '4') }, { type: 'BOOKMARK', object: { metadata: { resourceVersion: '5' } } }], end: 'close' },
        new NodeletError('GONE', 'too old resource version'),
        { events: [{ type: 'ADDED', object: obj('c', '7') }], end: 'hang' },
      ],
    );
    const clock = new VirtualClock();
    const events: Array<ReflectorEvent<KubeObject>> = [];
    const r = new Reflector({ client, type: PODS, clock, logger: silentLogger(), idleTimeoutMs: 0, random: () => 0.5, onEvent: (e) => events.push(e) });
    expect(r.healthy()).toBe(false);
    r.start();
    // Two backoffs of 200 ms: everything after them happens at once.
    await clock.advance(400);
    await r.waitForSync();
    expect(events).toEqual([
      { type: 'replace', items: [obj('a', '1')], resourceVersion: '2' },
      { type: 'update', object: obj('a', '3'), old: obj('a', '1') },
      { type: 'add', object: obj('b', '4') },
      { type: 'replace', items: [obj('b', '4')], resourceVersion: '6' },
      { type: 'add', object: obj('c', '7') },
    ]);
    expect(client.watchCalls.map((w) => [w.resourceVersion, w.allowWatchBookmarks])).toEqual([
      ['2', true],
      ['3', true],
      ['5', true],
      ['6', true],
    ]);
    // Backoff after the refused list and after the reset watch (base 200 ms, jitter 0 at rand 0.5); none for the first 410.
    expect(clock.sleeps).toEqual([200, 200]);
    expect([r.healthy(), r.lists, r.failures, r.lastSyncTime]).toEqual([true, 2, 0, clock.t]);
    await r.stop();
  });

  it('backs off exponentially up to the maximum while the control plane is down, and stays unhealthy', async () => {
    const down = () => new NodeletError('UNAVAILABLE', 'connect ECONNREFUSED');
    const client = new ScriptedClient(Array.from({ length: 8 }, down), []);
    const clock = new VirtualClock();
    const r = new Reflector({ client, type: PODS, clock, logger: silentLogger(), idleTimeoutMs: 0, random: () => 0.5, backoffBaseMs: 100, backoffMaxMs: 1000, onEvent: () => undefined });
    r.start();
    await clock.advance(100 + 200 + 400 + 800 + 1000 + 1000 + 1000);
    await r.stop();
    expect(clock.sleeps.slice(0, 7)).toEqual([100, 200, 400, 800, 1000, 1000, 1000]);
    expect(r.healthy()).toBe(false);
    expect(r.hasSynced).toBe(false);
  });

  it('waits at least the Retry-After of a 429 or 504, capped by the maximum', async () => {
    const client = new ScriptedClient(
      [
        new NodeletError('TOO_MANY_REQUESTS', 'slow down', { status: 429, retryAfterSeconds: 3 }),
        new NodeletError('UNAVAILABLE', 'Too large resource version', { status: 504, retryAfterSeconds: 600 }),
        { items: [], rv: '1' },
      ],
      [],
    );
    const clock = new VirtualClock();
    const r = new Reflector({ client, type: PODS, clock, logger: silentLogger(), idleTimeoutMs: 0, random: () => 0.5, backoffMaxMs: 30_000, onEvent: () => undefined });
    r.start();
    await clock.advance(33_000);
    await r.waitForSync();
    await r.stop();
    expect(clock.sleeps).toEqual([3000, 30_000]);
  });

  it('stop() during the first list ends the loop without starting a watch', async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    const client = new ScriptedClient([{ items: [obj('a', '1')], rv: '1' }], []);
    const slow: ReflectorClient = { listAll: async (t, o) => (await gate, client.listAll(t, o)), watch: (t, o) => client.watch(t, o) };
    const r = new Reflector({ client: slow, type: PODS, clock: new VirtualClock(), logger: silentLogger(), idleTimeoutMs: 0, onEvent: () => undefined });
    r.start();
    const stopped = r.stop();
    release();
    await stopped;
    expect(client.watchCalls).toHaveLength(0);
  });

  it('a consumer that throws does not stop the reflector', async () => {
    const clock = new VirtualClock();
    const client = new ScriptedClient([{ items: [obj('a', '1')], rv: '1' }], [{ events: [{ type: 'ADDED', object: obj('b', '2') }], end: 'hang' }]);
    const seen: string[] = [];
    const r = new Reflector({
      client,
      type: PODS,
      clock,
      logger: silentLogger(),
      idleTimeoutMs: 0,
      onEvent: (e) => {
        seen.push(e.type);
        if (e.type === 'replace') throw new Error('consumer bug');
      },
    });
    r.start();
    await clock.advance(0);
    await r.stop();
    expect(seen).toEqual(['replace', 'add']);
  });

  it('restarts a watch that stays silent past idleTimeoutMs, from the same version', async () => {
    const client = new ScriptedClient([{ items: [], rv: '3' }], [{ events: [], end: 'hang' }, { events: [{ type: 'ADDED', object: obj('x', '4') }], end: 'hang' }]);
    const clock = new VirtualClock();
    const seen: Array<ReflectorEvent<KubeObject>> = [];
    const r = new Reflector({ client, type: PODS, clock, logger: silentLogger(), idleTimeoutMs: 60_000, onEvent: (e) => seen.push(e) });
    r.start();
    // The silent watch is given up at 60 s; the next one starts after the backoff for it (200 ms +/-20 %).
    await clock.advance(61_000);
    await r.stop();
    expect(client.watchCalls.map((w) => w.resourceVersion)).toEqual(['3', '3']);
    expect(seen.at(-1)).toEqual({ type: 'add', object: obj('x', '4') });
  });
});
