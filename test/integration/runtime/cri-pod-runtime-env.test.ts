/**
 * CriPodRuntime's env from the API against the test CRI server: what reaches CreateContainer
 * (envFrom, key references, the Service variables, the allocatable of an unset limit), the
 * InvalidEnvironmentVariableNames event on the pod, and the waiting reason of a missing
 * object, with the objects read through a fake ApiObjects port.
 */
import type { ConfigMap, ObjectReference, Pod, Secret, Service } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import type { CriPodRuntime } from '../../../src/pods/cri/cri-pod-runtime.js';
import type { ApiObjects } from '../../../src/pods/objects/objects.js';
import type { FakeRuntime } from '../../cri/fake-runtime.js';
import { startFakeCriPodRuntime, type FakeCriPodRuntime } from '../../helpers/fake-cri-runtime.js';

const configMaps: Record<string, ConfigMap> = { app: { metadata: { name: 'app' }, data: { MODE: 'blue', 'bad=key': 'x' } } };
const secrets: Record<string, Secret> = { db: { metadata: { name: 'db' }, data: { pw: Buffer.from('s3cret').toString('base64') } } };
const services: Record<string, Service[]> = {
  default: [{ metadata: { name: 'kubernetes' }, spec: { clusterIP: '10.96.0.1', ports: [{ name: 'https', port: 443, protocol: 'TCP' }] } }],
  shop: [{ metadata: { name: 'web' }, spec: { clusterIP: '10.96.3.4', ports: [{ port: 80 }] } }],
};
const reads: string[] = [];
const objects: ApiObjects = {
  configMap: async (ns, name) => (reads.push(`cm ${ns}/${name}`), configMaps[name]),
  secret: async (ns, name) => (reads.push(`secret ${ns}/${name}`), secrets[name]),
  serviceAccount: async () => undefined,
  services: async (ns) => (reads.push(`services ${ns}`), services[ns] ?? []),
  requestToken: async () => {
    throw new NodeletError('UNIMPLEMENTED', 'not used');
  },
};
const events: { ref: ObjectReference; type: string; reason: string; message: string }[] = [];

let bench: FakeCriPodRuntime | undefined;
let cri: FakeRuntime;
let rt: CriPodRuntime;

beforeAll(async () => {
  ({ cri, rt } = bench = await startFakeCriPodRuntime('nodelet-cripodruntime-env-', {
    objects,
    nodeAllocatable: () => ({ cpu: '3500m', memory: '8Gi', pods: '110' }),
    events: { emit: (ref, type, reason, message) => events.push({ ref, type, reason, message }) },
  }));
});

afterAll(() => bench?.close());

const image = 'docker.io/local/busybox:latest';

describe('CriPodRuntime env from the API', () => {
  it('CreateContainer gets envFrom, key references, the Service variables and the allocatable; skipped keys are an event on the pod', async () => {
    const pod: Pod = {
      metadata: { name: 'web', namespace: 'shop', uid: 'u-env' },
      spec: {
        hostNetwork: true,
        containers: [
          {
            name: 'app',
            image,
            command: ['sleep', '3600'],
            envFrom: [{ prefix: 'APP_', configMapRef: { name: 'app' } }],
            env: [
              { name: 'PW', valueFrom: { secretKeyRef: { name: 'db', key: 'pw' } } },
              { name: 'MODE', valueFrom: { configMapKeyRef: { name: 'app', key: 'MODE' } } },
              { name: 'CPUS', valueFrom: { resourceFieldRef: { resource: 'limits.cpu' } } },
            ],
          },
        ],
      },
    };
    const sandboxId = await rt.runSandbox(pod, 0);
    await rt.startContainer({ pod, container: pod.spec!.containers[0]!, sandboxId, sandboxAttempt: 0, restartCount: 0, init: false });
    const create = cri.calls.filter((c) => c.method === 'CreateContainer').at(-1)!;
    const envs = Object.fromEntries(((create.request.config as { envs: { key: string; value: string }[] }).envs ?? []).map((e) => [e.key, e.value]));
    expect(envs).toMatchObject({ APP_MODE: 'blue', PW: 's3cret', MODE: 'blue', CPUS: '4', KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443', WEB_SERVICE_HOST: '10.96.3.4', WEB_PORT_80_TCP: 'tcp://10.96.3.4:80' });
    expect(reads.sort()).toEqual(['cm shop/app', 'secret shop/db', 'services default', 'services shop']);
    expect(events).toEqual([
      {
        ref: { kind: 'Pod', apiVersion: 'v1', name: 'web', namespace: 'shop', uid: 'u-env' },
        type: 'Warning',
        reason: 'InvalidEnvironmentVariableNames',
        message: 'Keys [APP_bad=key] from the EnvFrom configMap shop/app were skipped since they are considered invalid environment variable names.',
      },
    ]);
  });

  it('a missing Secret: CreateContainerConfigError with the kubelet message, and no CreateContainer', async () => {
    const pod: Pod = { metadata: { name: 'late', namespace: 'shop', uid: 'u-late' }, spec: { hostNetwork: true, containers: [{ name: 'app', image, env: [{ name: 'X', valueFrom: { secretKeyRef: { name: 'gone', key: 'k' } } }] }] } };
    const sandboxId = await rt.runSandbox(pod, 0);
    const before = cri.calls.filter((c) => c.method === 'CreateContainer').length;
    const err = await rt.startContainer({ pod, container: pod.spec!.containers[0]!, sandboxId, sandboxAttempt: 0, restartCount: 0, init: false }).catch((e: unknown) => e as NodeletError);
    expect([(err as NodeletError).details.reason, (err as Error).message]).toEqual(['CreateContainerConfigError', 'secret "gone" not found']);
    expect(cri.calls.filter((c) => c.method === 'CreateContainer').length).toBe(before);
  });
});
