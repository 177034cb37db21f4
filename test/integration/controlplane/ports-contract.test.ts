/**
 * Connected mode's control-plane ports (src/connected.ts ControlPlanePorts) that unit tests
 * fake: mirror pods, pod status, events. ONE suite runs against the in-memory fakes
 * (test/fakes/mirror-pods.ts, pod-status.ts, events.ts on api-objects.ts) and against the
 * real adapter (controlPlanePorts, src/controlplane/adapter.ts) on the test API server
 * (test/control-plane). When one passes and the other fails, the fake lies and the unit
 * tests of MirrorPods, PodStatusWriter and ApiEventRecorder cannot be trusted.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Event as CoreEvent, Node, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ControlPlanePorts } from '../../../src/connected.js';
import { controlPlanePorts } from '../../../src/controlplane/adapter.js';
import { ControlPlaneClient, EVENTS, NAMESPACES, NODES, PODS } from '../../../src/controlplane/client.js';
import { loadKubeconfig } from '../../../src/controlplane/kubeconfig.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { startControlPlane } from '../../control-plane/server.js';
import { MemApiObjects } from '../../fakes/api-objects.js';
import { MemEventApi } from '../../fakes/events.js';
import { MemMirrorPodApi } from '../../fakes/mirror-pods.js';
import { MemPodStatusApi } from '../../fakes/pod-status.js';
import { rejection } from '../../helpers/errors.js';
import { tempDir } from '../../helpers/nodelet.js';

type Ports = Pick<ControlPlanePorts, 'mirrorPods' | 'podStatus' | 'events'>;

/** The ports under test, and what the test needs besides them: the API's state, read and seeded as an admin. */
interface World {
  ports: Ports;
  namespace: string;
  addNode(name: string): Promise<string>;
  /** Creates a pod as another client would; resolves its UID. */
  addPod(pod: Pod): Promise<string>;
  getPod(namespace: string, name: string): Promise<Pod | undefined>;
  getEvent(namespace: string, name: string): Promise<CoreEvent | undefined>;
  close(): Promise<void>;
}

async function orUndefined<T>(p: Promise<T>): Promise<T | undefined> {
  return p.catch((err: unknown) => {
    if (err instanceof NodeletError && err.code === 'NOT_FOUND') return undefined;
    throw err;
  });
}

const backends: { name: string; start(): Promise<World> }[] = [
  {
    name: 'in-memory fakes',
    async start() {
      const objects = new MemApiObjects();
      return {
        ports: { mirrorPods: new MemMirrorPodApi(objects), podStatus: new MemPodStatusApi(objects), events: new MemEventApi(objects) },
        namespace: 'contract',
        addNode: async (name) => objects.addNode(name),
        addPod: async (pod) => objects.createPod(pod).metadata!.uid!,
        getPod: async (ns, name) => objects.pod(ns, name),
        getEvent: async (ns, name) => objects.event(ns, name),
        close: async () => undefined,
      };
    },
  },
  {
    name: 'controlPlanePorts on the test API server',
    async start() {
      const cp = await startControlPlane({ nodeLifecycleIntervalMs: 0 });
      const dir = tempDir('nodelet-ports-contract-');
      cp.writeKubeconfig(path.join(dir, 'node.kubeconfig'), { user: 'system:node:n1', groups: ['system:nodes'] });
      cp.writeKubeconfig(path.join(dir, 'admin.kubeconfig'), { user: 'admin', groups: ['system:masters'] });
      const ports = controlPlanePorts(path.join(dir, 'node.kubeconfig'), 'n1', silentLogger());
      const admin = new ControlPlaneClient({ access: loadKubeconfig(path.join(dir, 'admin.kubeconfig')) });
      const namespace = 'contract';
      await admin.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } });
      return {
        ports,
        namespace,
        addNode: async (name) => (await admin.create<Node>(NODES, { apiVersion: 'v1', kind: 'Node', metadata: { name } })).metadata!.uid!,
        addPod: async (pod) => (await admin.create<Pod>(PODS, { apiVersion: 'v1', kind: 'Pod', ...pod })).metadata!.uid!,
        getPod: (ns, name) => orUndefined(admin.get<Pod>(PODS, { namespace: ns, name })),
        getEvent: (ns, name) => orUndefined(admin.get<CoreEvent>(EVENTS, { namespace: ns, name })),
        async close() {
          await ports.close();
          await admin.close();
          await cp.close();
          fs.rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  },
];

let seq = 0;
const fresh = (prefix: string) => `${prefix}-${++seq}`;

const podIn = (namespace: string, name: string, annotations: Record<string, string> = {}): Pod => ({
  metadata: { name, namespace, labels: { app: 'web' }, annotations },
  spec: { nodeName: 'n1', containers: [{ name: 'app', image: 'busybox' }] },
});

/** A Node event as the recorder writes one (its pod events differ only in involvedObject). */
const eventIn = (namespace: string, name: string): CoreEvent => ({
  apiVersion: 'v1', kind: 'Event', metadata: { name, namespace }, involvedObject: { kind: 'Node', name: 'n1', uid: 'n1' },
  reason: 'NodeReady', message: 'Node n1 status is now: NodeReady', type: 'Normal', count: 1,
  firstTimestamp: '2026-11-23T05:00:00Z', lastTimestamp: '2026-11-23T05:00:00Z',
  source: { component: 'kubelet', host: 'n1' }, reportingComponent: 'kubelet', reportingInstance: 'n1',
});

for (const backend of backends) {
  describe(`control-plane ports contract: ${backend.name}`, () => {
    let w: World;
    let ns: string;
    beforeAll(async () => {
      w = await backend.start();
      ns = w.namespace;
    });
    afterAll(async () => {
      await w?.close();
    });

    describe('mirror pods', () => {
      // The node's own Node (the Node authorizer lets a node read no other): n1.
      let nodeUid = '';
      it('nodeUid: undefined for a Node not registered yet, its UID once it is', async () => {
        expect(await w.ports.mirrorPods.nodeUid('n1')).toBeUndefined();
        nodeUid = await w.addNode('n1');
        expect(await w.ports.mirrorPods.nodeUid('n1')).toBe(nodeUid);
      });

      it('createPod creates the pod as given, with a UID of the API\'s; a taken name is ALREADY_EXISTS', async () => {
        const name = fresh('mirror');
        // A mirror pod as nodelet makes one: owned by its Node (NodeRestriction requires it).
        const mirror = (): Pod => {
          const p = podIn(ns, name, { 'kubernetes.io/config.mirror': 'h1' });
          p.metadata!.ownerReferences = [{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: nodeUid, controller: true }];
          return p;
        };
        await w.ports.mirrorPods.createPod(mirror());
        const got = await w.getPod(ns, name);
        expect(got?.metadata).toMatchObject({ name, namespace: ns, labels: { app: 'web' }, annotations: { 'kubernetes.io/config.mirror': 'h1' }, uid: expect.any(String) });
        expect(got?.spec?.containers.map((c) => c.name)).toEqual(['app']);
        expect((await rejection(w.ports.mirrorPods.createPod(mirror()))).code).toBe('ALREADY_EXISTS');
      });

      it('deletePod with the pod\'s UID removes it at once; another UID is CONFLICT and the pod stays; a missing pod is NOT_FOUND', async () => {
        const name = fresh('mirror');
        const uid = await w.addPod(podIn(ns, name));
        expect((await rejection(w.ports.mirrorPods.deletePod(ns, name, 'not-its-uid'))).code).toBe('CONFLICT');
        expect((await w.getPod(ns, name))?.metadata?.uid).toBe(uid);
        await w.ports.mirrorPods.deletePod(ns, name, uid);
        expect(await w.getPod(ns, name)).toBeUndefined();
        expect((await rejection(w.ports.mirrorPods.deletePod(ns, name, uid))).code).toBe('NOT_FOUND');
      });
    });

    describe('pod status', () => {
      it('patchPodStatus merges: conditions by type, container statuses replaced as a list; null clears a field', async () => {
        const name = fresh('web');
        const uid = await w.addPod(podIn(ns, name));
        await w.ports.podStatus.patchPodStatus(ns, name, uid, {
          phase: 'Pending',
          reason: 'SyncError',
          message: 'runtime down',
          conditions: [{ type: 'Ready', status: 'False' }, { type: 'PodScheduled', status: 'True' }],
          containerStatuses: [{ name: 'app', ready: false, restartCount: 0, image: 'busybox', imageID: '', state: { waiting: { reason: 'ContainerCreating' } } }],
        });
        await w.ports.podStatus.patchPodStatus(ns, name, uid, {
          phase: 'Running',
          reason: null,
          message: null,
          conditions: [{ type: 'Ready', status: 'True' }],
          containerStatuses: [{ name: 'app', ready: true }],
        });
        const st = (await w.getPod(ns, name))?.status;
        expect(st).toMatchObject({ phase: 'Running' });
        expect(st?.reason).toBeUndefined();
        expect(st?.message).toBeUndefined();
        expect(st?.conditions?.map((c) => [c.type, c.status]).sort()).toEqual([['PodScheduled', 'True'], ['Ready', 'True']]);
        expect(st?.containerStatuses).toEqual([{ name: 'app', ready: true }]);
      });

      it('patchPodStatus of a missing pod is NOT_FOUND; with another pod\'s UID it is refused and changes nothing', async () => {
        const name = fresh('web');
        expect((await rejection(w.ports.podStatus.patchPodStatus(ns, name, 'u-x', { phase: 'Running' }))).code).toBe('NOT_FOUND');
        const uid = await w.addPod(podIn(ns, name));
        const err = await rejection(w.ports.podStatus.patchPodStatus(ns, name, 'an-older-pods-uid', { phase: 'Running' }));
        expect(err.code).toBe('CONFLICT');
        const got = await w.getPod(ns, name);
        expect(got?.metadata?.uid).toBe(uid);
        expect(got?.status?.phase).not.toBe('Running');
      });

      it('deletePod ends a deletion: with the UID it is gone; another UID is CONFLICT', async () => {
        const name = fresh('web');
        const uid = await w.addPod(podIn(ns, name));
        expect((await rejection(w.ports.podStatus.deletePod(ns, name, 'u-other'))).code).toBe('CONFLICT');
        await w.ports.podStatus.deletePod(ns, name, uid);
        expect(await w.getPod(ns, name)).toBeUndefined();
      });
    });

    describe('events', () => {
      it('create stores the Event as given; a taken name is ALREADY_EXISTS', async () => {
        const name = fresh('n1.17a');
        await w.ports.events.create(eventIn(ns, name));
        expect(await w.getEvent(ns, name)).toMatchObject({ ...eventIn(ns, name), metadata: { name, namespace: ns } });
        expect((await rejection(w.ports.events.create(eventIn(ns, name)))).code).toBe('ALREADY_EXISTS');
      });

      it('patch raises count and lastTimestamp and keeps the rest; a missing event is NOT_FOUND', async () => {
        const name = fresh('n1.17b');
        await w.ports.events.create(eventIn(ns, name));
        await w.ports.events.patch(ns, name, { count: 2, lastTimestamp: '2026-11-23T05:00:10Z' });
        expect(await w.getEvent(ns, name)).toMatchObject({ ...eventIn(ns, name), metadata: { name, namespace: ns }, count: 2, lastTimestamp: '2026-11-23T05:00:10Z' });
        expect((await rejection(w.ports.events.patch(ns, fresh('gone'), { count: 2, lastTimestamp: '2026-11-23T05:00:10Z' }))).code).toBe('NOT_FOUND');
      });
    });
  });
}
