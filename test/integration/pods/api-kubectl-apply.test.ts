/**
 * Issue 27's first "Done when" line, as a new user meets it: a pod with no volume at all,
 * created with `kubectl apply` (1.32) against the test control plane, on a real containerd.
 * The API server's ServiceAccount admission injects `kube-api-access-*`; nodelet writes it;
 * the container reads a token that TokenReview accepts, its namespace and the control
 * plane's `ca.crt`, and its environment has `KUBERNETES_SERVICE_HOST`/`_PORT`.
 */
import fs from 'node:fs';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS, type ResourceType } from '../../../src/controlplane/client.js';
import { adminKubectl } from '../../helpers/kubectl.js';
import { eventually } from '../../helpers/nodelet.js';
import type { TestCluster } from '../../helpers/test-cluster.js';
import { shIn, startApiPodNode, type ApiPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-api-kubectl-apply';
const NODE = 'applynode';
const TOKEN_REVIEWS: ResourceType = { group: 'authentication.k8s.io', version: 'v1', resource: 'tokenreviews', namespaced: false };
const SA = '/var/run/secrets/kubernetes.io/serviceaccount';

let connected: ApiPodNode | undefined;
let cluster: TestCluster;
let node: PodNode;

beforeAll(async () => {
  ({ cluster, node } = connected = await startApiPodNode({ prefix: 'nodelet-api-kubectl-', name: NODE, containerdDir: CONTAINERD_DIR }));
}, 120_000);

afterAll(() => connected?.close());

/** kubectl as the admin: its stdout, or an error with its stderr. */
async function kubectl(args: string[], stdin?: string): Promise<string> {
  const r = await adminKubectl(cluster.dir, args, stdin);
  if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.stderr || `exit code ${r.code}`}`);
  return r.stdout;
}

const inside = (id: string, cmd: string) => shIn(node.cri, id, cmd);

describe('a pod from kubectl apply, with no volume', () => {
  it('gets kube-api-access: its container reads a token TokenReview accepts, the namespace and ca.crt; env has KUBERNETES_SERVICE_HOST', async () => {
    const manifest = [
      'apiVersion: v1',
      'kind: Pod',
      'metadata: {name: plain, namespace: default}',
      'spec:',
      `  nodeName: ${NODE}`,
      '  hostNetwork: true',
      '  terminationGracePeriodSeconds: 1',
      '  containers:',
      '  - {name: app, image: docker.io/local/busybox:latest, imagePullPolicy: IfNotPresent, command: [sleep, "3600"]}',
      '',
    ].join('\n');
    expect(await kubectl(['apply', '-f', '-'], manifest)).toContain('pod/plain created');
    const stored = JSON.parse(await kubectl(['get', 'pod', 'plain', '-o', 'json'])) as Pod;
    const vol = stored.spec?.volumes?.find((v) => v.name.startsWith('kube-api-access-'));
    expect(vol?.projected?.sources?.[0]?.serviceAccountToken).toEqual({ expirationSeconds: 3607, path: 'token' });
    expect(stored.spec?.containers[0]?.volumeMounts).toEqual([{ name: vol!.name, mountPath: SA, readOnly: true }]);
    const id = await eventually(async () => {
      const p = await cluster.api.get<Pod>(PODS, { namespace: 'default', name: 'plain' }).catch(() => undefined);
      const s = p?.status?.containerStatuses?.[0];
      return s?.state?.running ? s.containerID?.replace('containerd://', '') : undefined;
    }, 60_000);
    expect(await inside(id, `ls ${SA}; cat ${SA}/namespace`)).toBe('ca.crt\nnamespace\ntoken\ndefault');
    expect(await inside(id, `cat ${SA}/ca.crt`)).toBe(fs.readFileSync(cluster.cp.caFile, 'utf8').trim());
    const token = await inside(id, `cat ${SA}/token`);
    const review = await cluster.api.create<{ metadata?: object; status?: { authenticated?: boolean; user?: { username?: string; extra?: Record<string, string[]> } } }>(TOKEN_REVIEWS, { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } } as never);
    expect(review.status?.authenticated).toBe(true);
    expect(review.status?.user?.username).toBe('system:serviceaccount:default:default');
    expect(review.status?.user?.extra?.['authentication.kubernetes.io/pod-name']).toEqual(['plain']);
    const kubernetes = JSON.parse(await kubectl(['get', 'service', 'kubernetes', '-n', 'default', '-o', 'json'])) as { spec: { clusterIP: string } };
    const env = (await inside(id, 'env')).split('\n');
    expect(env).toContain(`KUBERNETES_SERVICE_HOST=${kubernetes.spec.clusterIP}`);
    expect(env).toContain('KUBERNETES_SERVICE_PORT=443');
  }, 120_000);
});
