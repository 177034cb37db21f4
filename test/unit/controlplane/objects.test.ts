import type { ConfigMap, Pod, Volume } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import type { KubeObject, ListOptions, ResourceType, WatchEvent, WatchOptions } from '../../../src/controlplane/client.js';
import { ControlPlaneObjects, type ObjectsClient } from '../../../src/controlplane/objects.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import type { ObjectRef } from '../../../src/pods/objects/objects.js';
import { settle, VirtualClock } from '../../helpers/clock.js';

/** One open watch: the test pushes its events or ends it with an error. */
interface OpenWatch {
  type: string;
  o: WatchOptions;
  push(ev: WatchEvent): void;
  fail(err: Error): void;
  closed: boolean;
}

/**
 * A control-plane client over a map of objects: GET, list (namespace and metadata.name
 * field selector), watches the test feeds, POST answered by `answer`; `down` fails every call.
 */
class FakeClient {
  readonly objects = new Map<string, KubeObject>();
  readonly gets: string[] = [];
  readonly lists: string[] = [];
  readonly posts: { path: string; body: unknown }[] = [];
  readonly watches: OpenWatch[] = [];
  down = false;
  answer: unknown = { status: { token: 'jwt', expirationTimestamp: '2026-11-23T03:00:00Z' } };
  #rv = 10;

  put(type: string, o: KubeObject): KubeObject {
    const obj = { ...o, metadata: { ...o.metadata, resourceVersion: String(++this.#rv) } };
    this.objects.set(`${type}/${o.metadata!.namespace}/${o.metadata!.name}`, obj);
    return obj;
  }

  #check(): void {
    if (this.down) throw new NodeletError('UNAVAILABLE', 'connect ECONNREFUSED');
  }

  async get<T extends KubeObject>(t: ResourceType, ref: { namespace?: string; name: string }): Promise<T> {
    this.gets.push(`${t.resource}/${ref.namespace}/${ref.name}`);
    this.#check();
    const o = this.objects.get(`${t.resource}/${ref.namespace}/${ref.name}`);
    if (!o) throw new NodeletError('NOT_FOUND', `${t.resource} "${ref.name}" not found`, { status: 404 });
    return o as T;
  }

  async listAll<T extends KubeObject>(t: ResourceType, o: ListOptions = {}): Promise<{ items: T[]; resourceVersion: string }> {
    this.lists.push(`${t.resource}/${o.namespace}?${o.fieldSelector}`);
    this.#check();
    const name = o.fieldSelector?.replace(/^metadata\.name=/, '');
    const items = [...this.objects.entries()].filter(([k]) => k.startsWith(`${t.resource}/${o.namespace}/`) && (!name || k.endsWith(`/${name}`))).map(([, v]) => v as T);
    return { items, resourceVersion: String(this.#rv) };
  }

  async watch<T extends KubeObject>(t: ResourceType, o: WatchOptions = {}): Promise<AsyncIterable<WatchEvent<T>>> {
    this.#check();
    const queue: WatchEvent[] = [];
    let wake: (() => void) | undefined;
    let error: Error | undefined;
    const w: OpenWatch = {
      type: `${t.resource}/${o.namespace}?${o.fieldSelector}`,
      o,
      closed: false,
      push: (ev) => {
        queue.push(ev);
        wake?.();
      },
      fail: (err) => {
        error = err;
        wake?.();
      },
    };
    this.watches.push(w);
    o.signal?.addEventListener('abort', () => w.fail(new NodeletError('CANCELLED', 'aborted')), { once: true });
    return (async function* () {
      try {
        for (;;) {
          while (queue.length) yield queue.shift() as WatchEvent<T>;
          if (error) throw error;
          await new Promise<void>((r) => (wake = r));
        }
      } finally {
        w.closed = true;
      }
    })();
  }

  async request<T>(r: { method: string; path: string; body?: unknown }): Promise<T> {
    this.posts.push({ path: r.path, body: r.body });
    this.#check();
    return this.answer as T;
  }
}

const open = (c: FakeClient) => c.watches.filter((w) => !w.closed).map((w) => w.type).sort();
const pod = (uid: string, volumes: Volume[], extra: Partial<NonNullable<Pod['spec']>> = {}): Pod => ({
  metadata: { name: `p-${uid}`, namespace: 'shop', uid },
  spec: { containers: [{ name: 'app', image: 'busybox', ...extra.containers?.[0] }], volumes, ...(extra.imagePullSecrets ? { imagePullSecrets: extra.imagePullSecrets } : {}) },
});

function setup() {
  const client = new FakeClient();
  const clock = new VirtualClock();
  const objects = new ControlPlaneObjects({ client: client as unknown as ObjectsClient, logger: silentLogger(), clock });
  const changes: ObjectRef[] = [];
  objects.onChange((r) => changes.push(r));
  return { client, clock, objects, changes };
}

describe('API objects over the control plane', () => {
  it('reads an object no pod registered with a GET; not found is undefined; errors name the object', async () => {
    const { client, objects } = setup();
    client.put('configmaps', { metadata: { namespace: 'shop', name: 'cfg' }, data: { a: '1' } } as ConfigMap);
    expect((await objects.configMap('shop', 'cfg'))?.data).toEqual({ a: '1' });
    expect(await objects.secret('shop', 'nope')).toBeUndefined();
    expect(client.gets).toEqual(['configmaps/shop/cfg', 'secrets/shop/nope']);
    client.down = true;
    await expect(objects.configMap('shop', 'cfg')).rejects.toThrow('cannot get configmap "shop/cfg": connect ECONNREFUSED');
    await expect(objects.serviceAccount('shop', 'builder')).rejects.toMatchObject({ code: 'UNAVAILABLE', message: 'cannot get serviceaccount "shop/builder": connect ECONNREFUSED' });
  });

  it('watches each referenced object by name, once for all the pods that use it, and stops when no pod does', async () => {
    const { client, objects } = setup();
    const a = pod('a', [{ name: 'c', configMap: { name: 'cfg' } }, { name: 's', secret: { secretName: 'db' } }]);
    const b = pod('b', [{ name: 'p', projected: { sources: [{ configMap: { name: 'cfg' } }] } }], { containers: [{ name: 'app', env: [{ name: 'X', valueFrom: { secretKeyRef: { name: 'api-key', key: 'k' } } }] }], imagePullSecrets: [{ name: 'regcred' }] });
    objects.registerPod(a);
    objects.registerPod(b);
    objects.registerPod(b); // again: idempotent
    await settle();
    expect(open(client)).toEqual(['configmaps/shop?metadata.name=cfg', 'secrets/shop?metadata.name=api-key', 'secrets/shop?metadata.name=db', 'secrets/shop?metadata.name=regcred']);
    expect(client.lists.sort()).toEqual(open(client));
    objects.unregisterPod('a');
    await settle();
    expect(open(client)).toEqual(['configmaps/shop?metadata.name=cfg', 'secrets/shop?metadata.name=api-key', 'secrets/shop?metadata.name=regcred']);
    // b no longer refers to its env secret: that watch stops.
    objects.registerPod(pod('b', b.spec!.volumes!, { imagePullSecrets: [{ name: 'regcred' }] }));
    await settle();
    expect(open(client)).toEqual(['configmaps/shop?metadata.name=cfg', 'secrets/shop?metadata.name=regcred']);
    objects.unregisterPod('b');
    await settle();
    expect([open(client), objects.watchedCount()]).toEqual([[], 0]);
    // A name the API would not allow never becomes a field selector.
    objects.registerPod(pod('c', [{ name: 'c', configMap: { name: 'x,metadata.name!=y' } }]));
    await settle();
    expect(open(client)).toEqual([]);
  });

  it('answers from the watch once listed (no GET), tells every change, and keeps the last state while the control plane is down', async () => {
    const { client, objects, changes } = setup();
    const v1 = client.put('configmaps', { metadata: { namespace: 'shop', name: 'cfg' }, data: { a: '1' } } as ConfigMap);
    objects.registerPod(pod('a', [{ name: 'c', configMap: { name: 'cfg' } }]));
    await settle();
    expect((await objects.configMap('shop', 'cfg'))?.data).toEqual({ a: '1' });
    expect(client.gets).toEqual([]);
    // The first list is told (a volume written from a GET before it may be behind).
    expect(changes).toEqual([{ kind: 'ConfigMap', namespace: 'shop', name: 'cfg' }]);
    const w = client.watches[0]!;
    w.push({ type: 'MODIFIED', object: { ...v1, metadata: { ...v1.metadata, resourceVersion: '50' }, data: { a: '2' } } as KubeObject });
    // A replayed event (same resourceVersion) tells nothing.
    w.push({ type: 'MODIFIED', object: { ...v1, metadata: { ...v1.metadata, resourceVersion: '50' }, data: { a: '2' } } as KubeObject });
    await settle();
    expect(changes).toHaveLength(2);
    expect((await objects.configMap('shop', 'cfg'))?.data).toEqual({ a: '2' });
    // The control plane goes away: the watch breaks, relists fail; the store keeps answering.
    client.down = true;
    w.fail(new NodeletError('UNAVAILABLE', 'connection reset'));
    await settle();
    expect((await objects.configMap('shop', 'cfg'))?.data).toEqual({ a: '2' });
    expect(client.gets).toEqual([]);
  });

  it('a deletion is told, and the object is then not found (no GET)', async () => {
    const { client, objects, changes } = setup();
    client.put('secrets', { metadata: { namespace: 'shop', name: 'db' }, data: { a: 'MQ==' } } as KubeObject);
    objects.registerPod(pod('a', [{ name: 's', secret: { secretName: 'db' } }]));
    await settle();
    client.watches[0]!.push({ type: 'DELETED', object: { metadata: { namespace: 'shop', name: 'db', resourceVersion: '60' } } });
    await settle();
    expect(changes).toEqual([{ kind: 'Secret', namespace: 'shop', name: 'db' }, { kind: 'Secret', namespace: 'shop', name: 'db' }]);
    expect(await objects.secret('shop', 'db')).toBeUndefined();
    expect(client.gets).toEqual([]);
  });

  it('an immutable object is read once and not watched after', async () => {
    const { client, objects } = setup();
    client.put('secrets', { metadata: { namespace: 'shop', name: 'frozen' }, immutable: true, data: { a: 'MQ==' } } as KubeObject);
    objects.registerPod(pod('a', [{ name: 's', secret: { secretName: 'frozen' } }]));
    await settle();
    expect(objects.watchedCount()).toBe(0);
    expect(open(client)).toEqual([]);
    client.objects.clear();
    expect((await objects.secret('shop', 'frozen'))?.data).toEqual({ a: 'MQ==' });
    expect(client.gets).toEqual([]);
  });

  it('requests a token bound to the pod; an answer without a token is an error naming the service account', async () => {
    const { client, objects } = setup();
    expect(await objects.requestToken('shop', 'builder', { audiences: [], expirationSeconds: 3607, boundPod: { name: 'web', uid: 'u1' } })).toEqual({ token: 'jwt', expirationTimestamp: '2026-11-23T03:00:00Z' });
    expect(client.posts).toEqual([
      {
        path: '/api/v1/namespaces/shop/serviceaccounts/builder/token',
        body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { audiences: [], expirationSeconds: 3607, boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: 'web', uid: 'u1' } } },
      },
    ]);
    client.answer = { status: {} };
    await expect(objects.requestToken('shop', 'builder', { audiences: [], expirationSeconds: 600, boundPod: { name: 'web', uid: 'u1' } })).rejects.toThrow('cannot request a token for service account "shop/builder": the answer has no status.token');
    client.down = true;
    await expect(objects.requestToken('shop', 'builder', { audiences: [], expirationSeconds: 600, boundPod: { name: 'web', uid: 'u1' } })).rejects.toThrow('cannot request a token for service account "shop/builder": connect ECONNREFUSED');
  });
});
