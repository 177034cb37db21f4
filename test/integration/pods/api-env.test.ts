/**
 * A container's environment from the API on a real containerd, connected to the test
 * control plane (issue 27, "Environment from the API"):
 * - envFrom (ConfigMap with a prefix, Secret), configMapKeyRef / secretKeyRef (an optional
 *   missing one skipped), the Service variables of the pod's namespace and the `kubernetes`
 *   Service's, and the node's allocatable for an unset limit: the container's `env` shows them;
 * - a missing ConfigMap makes the container wait in CreateContainerConfigError with the
 *   kubelet's message, and it starts once the ConfigMap exists.
 */
import type { ConfigMap, Node, Pod, Secret, Service } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS, type ResourceType } from '../../../src/controlplane/client.js';
import { parseQuantity } from '../../../src/config/quantity.js';
import { eventually } from '../../helpers/nodelet.js';
import type { TestCluster } from '../../helpers/test-cluster.js';
import { startApiPodNode, type ApiPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-api-env';
const NODE = 'envnode';
const NS = 'default';
const CONFIGMAPS: ResourceType = { group: '', version: 'v1', resource: 'configmaps', namespaced: true };
const SECRETS: ResourceType = { group: '', version: 'v1', resource: 'secrets', namespaced: true };
const SERVICES: ResourceType = { group: '', version: 'v1', resource: 'services', namespaced: true };
const NODES: ResourceType = { group: '', version: 'v1', resource: 'nodes', namespaced: false };

let connected: ApiPodNode | undefined;
let cluster: TestCluster;
let node: PodNode;

beforeAll(async () => {
  ({ cluster, node } = connected = await startApiPodNode({ prefix: 'nodelet-api-env-', name: NODE, containerdDir: CONTAINERD_DIR }));
}, 120_000);

afterAll(() => connected?.close());

const getPod = (name: string) => cluster.api.get<Pod>(PODS, { namespace: NS, name }).catch(() => undefined);
const b64 = (s: string) => Buffer.from(s).toString('base64');

function envPod(name: string, spec: Partial<Pod['spec']> & { containers: NonNullable<Pod['spec']>['containers'] }): Pod {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: NS }, spec: { nodeName: NODE, hostNetwork: true, terminationGracePeriodSeconds: 1, ...spec } };
}

async function runningId(name: string, timeoutMs = 60_000): Promise<string> {
  try {
    return await eventually(async () => {
      const s = (await getPod(name))?.status?.containerStatuses?.[0];
      return s?.state?.running ? s.containerID?.replace('containerd://', '') : undefined;
    }, timeoutMs);
  } catch (err) {
    throw new Error(`pod ${name} is not running: ${JSON.stringify((await getPod(name))?.status)}`, { cause: err });
  }
}

async function containerEnv(id: string): Promise<Record<string, string>> {
  const r = await node.cri.execSync(id, ['env'], 10);
  const out: Record<string, string> = {};
  for (const line of r.stdout.toString().split('\n')) {
    const eq = line.indexOf('=');
    if (eq > 0) out[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return out;
}

describe('environment from the API on containerd', () => {
  it('envFrom, key references, the Service variables and the allocatable of an unset limit reach the container', async () => {
    await cluster.api.create<ConfigMap>(CONFIGMAPS, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'app', namespace: NS }, data: { MODE: 'blue', LEVEL: 'debug' } });
    await cluster.api.create<Secret>(SECRETS, { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'db', namespace: NS }, type: 'Opaque', data: { user: b64('admin'), password: b64('s3cr=t') } });
    const web = await cluster.api.create<Service>(SERVICES, {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'web-front', namespace: NS },
      spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }, { name: 'dns', port: 53, protocol: 'UDP', targetPort: 53 }] },
    });
    await cluster.api.create<Service>(SERVICES, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'headless', namespace: NS }, spec: { clusterIP: 'None', selector: { app: 'db' }, ports: [{ port: 5432, targetPort: 5432 }] } });
    const kubernetes = await cluster.api.get<Service>(SERVICES, { namespace: 'default', name: 'kubernetes' });
    await cluster.api.create<Pod>(
      PODS,
      envPod('env', {
        containers: [
          {
            name: 'app',
            image: 'docker.io/local/busybox:latest',
            imagePullPolicy: 'IfNotPresent',
            command: ['sleep', '3600'],
            envFrom: [{ prefix: 'APP_', configMapRef: { name: 'app' } }, { secretRef: { name: 'db' } }],
            env: [
              { name: 'MODE', valueFrom: { configMapKeyRef: { name: 'app', key: 'MODE' } } },
              { name: 'PW', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } },
              { name: 'MISSING', valueFrom: { configMapKeyRef: { name: 'app', key: 'nope', optional: true } } },
              { name: 'MEM_MI', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: '1Mi' } } },
              { name: 'API', value: 'https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)' },
            ],
          },
        ],
      }),
    );
    const env = await containerEnv(await runningId('env'));
    expect(env).toMatchObject({ APP_MODE: 'blue', APP_LEVEL: 'debug', user: 'admin', password: 's3cr=t', MODE: 'blue', PW: 's3cr=t' });
    expect(env.MISSING).toBeUndefined();
    const ip = kubernetes.spec!.clusterIP!;
    expect(env).toMatchObject({
      KUBERNETES_SERVICE_HOST: ip,
      KUBERNETES_SERVICE_PORT: '443',
      KUBERNETES_SERVICE_PORT_HTTPS: '443',
      KUBERNETES_PORT: `tcp://${ip}:443`,
      KUBERNETES_PORT_443_TCP: `tcp://${ip}:443`,
      KUBERNETES_PORT_443_TCP_PROTO: 'tcp',
      KUBERNETES_PORT_443_TCP_PORT: '443',
      KUBERNETES_PORT_443_TCP_ADDR: ip,
      API: `https://${ip}:443`,
    });
    const webIP = web.spec!.clusterIP!;
    expect(webIP).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    expect(env).toMatchObject({
      WEB_FRONT_SERVICE_HOST: webIP,
      WEB_FRONT_SERVICE_PORT: '80',
      WEB_FRONT_SERVICE_PORT_HTTP: '80',
      WEB_FRONT_SERVICE_PORT_DNS: '53',
      WEB_FRONT_PORT: `tcp://${webIP}:80`,
      WEB_FRONT_PORT_53_UDP: `udp://${webIP}:53`,
      WEB_FRONT_PORT_53_UDP_ADDR: webIP,
    });
    expect(Object.keys(env).some((k) => k.startsWith('HEADLESS_'))).toBe(false);
    // The unset memory limit is the Node's allocatable memory, in MiB rounded up.
    const apiNode = await cluster.api.get<Node>(NODES, { name: NODE });
    const allocatable = apiNode.status!.allocatable!.memory!;
    expect(env.MEM_MI).toBe(String(Math.ceil(parseQuantity(allocatable).value / 1024 / 1024)));
  }, 120_000);

  it('a missing ConfigMap: CreateContainerConfigError with the kubelet message, then the container starts once it exists', async () => {
    await cluster.api.create<Pod>(
      PODS,
      envPod('late', {
        containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'], env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'late-config', key: 'x' } } }] }],
      }),
    );
    const waiting = await eventually(async () => {
      const w = (await getPod('late'))?.status?.containerStatuses?.[0]?.state?.waiting;
      return w?.reason === 'CreateContainerConfigError' ? w : undefined;
    }, 60_000);
    expect(waiting.message).toBe('configmap "late-config" not found');
    await cluster.api.create<ConfigMap>(CONFIGMAPS, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'late-config', namespace: NS }, data: { x: 'arrived' } });
    const env = await containerEnv(await runningId('late', 90_000));
    expect(env.X).toBe('arrived');
  }, 150_000);
});
