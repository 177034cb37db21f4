/**
 * A pod's runtimeClassName to the sandbox's CRI runtime_handler (src/pods/cri/runtime-class.ts),
 * and ControlPlaneObjects.runtimeClass's shared, short-lived read.
 */
import type { Pod } from 'kubernetes-types/core/v1.js';
import type { RuntimeClass } from 'kubernetes-types/node/v1.js';
import { describe, expect, it } from 'vitest';
import type { KubeObject, ResourceType } from '../../../src/controlplane/client.js';
import { ControlPlaneObjects, RUNTIME_CLASS_CACHE_MS, type ObjectsClient } from '../../../src/controlplane/objects.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { lookupRuntimeHandler } from '../../../src/pods/cri/runtime-class.js';
import type { ApiObjects } from '../../../src/pods/objects/objects.js';
import { VirtualClock } from '../../helpers/clock.js';

const pod = (runtimeClassName?: unknown): Pod => ({ metadata: { name: 'p', namespace: 'default', uid: 'u1' }, spec: { containers: [{ name: 'c', image: 'i' }], ...(runtimeClassName !== undefined ? { runtimeClassName: runtimeClassName as string } : {}) } });

/** An ApiObjects with only RuntimeClasses (the other reads are never made here). */
function objectsWith(classes: Record<string, RuntimeClass>, fail?: Error): ApiObjects & { reads: string[] } {
  const reads: string[] = [];
  const never = () => Promise.reject(new Error('not used'));
  return {
    reads,
    configMap: never,
    secret: never,
    serviceAccount: never,
    services: never,
    requestToken: never,
    async runtimeClass(name: string) {
      reads.push(name);
      if (fail) throw fail;
      return classes[name];
    },
  };
}

const gvisor: RuntimeClass = { metadata: { name: 'gvisor' }, handler: 'runsc' };

async function refusal(p: Promise<unknown>): Promise<{ code: string; message: string; reason: unknown }> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(NodeletError);
  const e = err as NodeletError;
  return { code: e.code, message: e.message, reason: e.details.reason };
}

describe('lookupRuntimeHandler', () => {
  it.each([
    ['no runtimeClassName', undefined],
    ['an empty runtimeClassName', ''],
  ])('%s: the default handler, no read', async (_, name) => {
    const objects = objectsWith({ gvisor });
    expect(await lookupRuntimeHandler(pod(name), objects)).toEqual({ handler: '' });
    expect(objects.reads).toEqual([]);
  });

  it("a class that exists: its handler", async () => {
    const objects = objectsWith({ gvisor });
    expect(await lookupRuntimeHandler(pod('gvisor'), objects)).toEqual({ handler: 'runsc' });
    expect(objects.reads).toEqual(['gvisor']);
  });

  it("a missing class: refused with the API's NotFound naming it, as the kubelet's sandbox error", async () => {
    expect(await refusal(lookupRuntimeHandler(pod('kata'), objectsWith({ gvisor })))).toEqual({ code: 'NOT_FOUND', message: 'runtimeclasses.node.k8s.io "kata" not found', reason: 'CreatePodSandboxError' });
  });

  it('a control plane that fails the read: refused, naming the class and the cause, keeping its code', async () => {
    const r = await refusal(lookupRuntimeHandler(pod('gvisor'), objectsWith({}, new NodeletError('UNAVAILABLE', 'connect ECONNREFUSED 127.0.0.1:6443'))));
    expect(r).toEqual({ code: 'UNAVAILABLE', message: 'failed to lookup RuntimeClass gvisor: connect ECONNREFUSED 127.0.0.1:6443', reason: 'CreatePodSandboxError' });
  });

  it.each([
    ['a name with a slash', '../x'],
    ['capitals', 'GVisor'],
    ['not a string', 42],
  ])('an invalid runtimeClassName (%s) is refused naming the field, without a read', async (_, name) => {
    const objects = objectsWith({ gvisor });
    const r = await refusal(lookupRuntimeHandler(pod(name), objects));
    expect(r.code).toBe('INVALID_ARGUMENT');
    expect(r.message).toMatch(/^spec\.runtimeClassName: Invalid value: .*lowercase RFC 1123 subdomain/);
    expect(objects.reads).toEqual([]);
  });

  it('a class whose handler is not a DNS label (a broken answer) never reaches the runtime', async () => {
    const r = await refusal(lookupRuntimeHandler(pod('bad'), objectsWith({ bad: { metadata: { name: 'bad' }, handler: 'a b;rm' } })));
    expect(r.message).toBe('RuntimeClass "bad" has an invalid handler "a b;rm": must be a DNS label');
  });

  it('a standalone node (no control plane) uses the default handler and says the class is ignored, as the kubelet without an API client', async () => {
    expect(await lookupRuntimeHandler(pod('gvisor'), undefined)).toEqual({ handler: '', ignored: expect.stringContaining('runtimeClassName "gvisor" is ignored') });
  });

  it('API access that cannot read RuntimeClasses refuses a pod naming one', async () => {
    const { runtimeClass: _, ...without } = objectsWith({ gvisor });
    expect((await refusal(lookupRuntimeHandler(pod('gvisor'), without))).message).toBe("failed to lookup RuntimeClass gvisor: this node's API access cannot read RuntimeClasses");
  });
});

/** GETs of cluster-scoped objects from a map; `down` fails them. */
class Client {
  readonly gets: string[] = [];
  readonly objects = new Map<string, KubeObject>();
  down = false;
  async get<T extends KubeObject>(t: ResourceType, ref: { namespace?: string; name: string }): Promise<T> {
    this.gets.push(`${t.group}/${t.resource}/${ref.namespace ?? ''}/${ref.name}`);
    if (this.down) throw new NodeletError('UNAVAILABLE', 'connect ECONNREFUSED');
    const o = this.objects.get(ref.name);
    if (!o) throw new NodeletError('NOT_FOUND', `${t.resource} "${ref.name}" not found`, { status: 404 });
    return o as T;
  }
}

function controlPlaneObjects() {
  const client = new Client();
  const clock = new VirtualClock(1_700_000_000_000);
  const objects = new ControlPlaneObjects({ client: client as unknown as ObjectsClient, logger: silentLogger(), clock });
  return { client, clock, objects };
}

describe('ControlPlaneObjects.runtimeClass', () => {
  it('GETs node.k8s.io/v1 runtimeclasses/<name> (cluster-scoped) and shares the answer for a short while', async () => {
    const { client, clock, objects } = controlPlaneObjects();
    client.objects.set('gvisor', gvisor as KubeObject);
    const [a, b] = await Promise.all([objects.runtimeClass('gvisor'), objects.runtimeClass('gvisor')]);
    expect(a).toEqual(gvisor);
    expect(b).toEqual(gvisor);
    expect(client.gets).toEqual(['node.k8s.io/runtimeclasses//gvisor']);
    await clock.advance(RUNTIME_CLASS_CACHE_MS - 1);
    await objects.runtimeClass('gvisor');
    expect(client.gets).toHaveLength(1);
    await clock.advance(1);
    await objects.runtimeClass('gvisor');
    expect(client.gets).toHaveLength(2);
  });

  it('not found is undefined, and a class created afterwards is seen once the short cache ends', async () => {
    const { client, clock, objects } = controlPlaneObjects();
    expect(await objects.runtimeClass('kata')).toBeUndefined();
    client.objects.set('kata', { metadata: { name: 'kata' }, handler: 'kata' } as KubeObject);
    expect(await objects.runtimeClass('kata')).toBeUndefined();
    await clock.advance(RUNTIME_CLASS_CACHE_MS);
    expect(await objects.runtimeClass('kata')).toEqual({ metadata: { name: 'kata' }, handler: 'kata' });
  });

  it('a failed read names the class and is not kept: the next read asks again', async () => {
    const { client, objects } = controlPlaneObjects();
    client.down = true;
    await expect(objects.runtimeClass('gvisor')).rejects.toThrow('cannot get runtimeclass "gvisor": connect ECONNREFUSED');
    client.down = false;
    client.objects.set('gvisor', gvisor as KubeObject);
    expect(await objects.runtimeClass('gvisor')).toEqual(gvisor);
    expect(client.gets).toHaveLength(2);
  });
});
