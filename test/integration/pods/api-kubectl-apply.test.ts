/**
 * Issue 27's first "Done when" line, as a new user meets it: a pod with no volume at all,
 * created with `kubectl apply` (1.32) against the test control plane, on a real containerd.
 * The API server's ServiceAccount admission injects `kube-api-access-*`; nodelet writes it;
 * the container reads a token that TokenReview accepts, its namespace and the control
 * plane's `ca.crt`, and its environment has `KUBERNETES_SERVICE_HOST`/`_PORT`.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS, type ResourceType } from '../../../src/controlplane/client.js';
import { eventually } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { startPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-api-kubectl-apply';
const NODE = 'applynode';
const KUBECTL = '/usr/bin/kubectl';
const TOKEN_REVIEWS: ResourceType = { group: 'authentication.k8s.io', version: 'v1', resource: 'tokenreviews', namespaced: false };
const SA = '/var/run/secrets/kubernetes.io/serviceaccount';

let cluster: TestCluster;
let node: PodNode;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-api-kubectl-' });
  node = await startPodNode({ kubeconfig: cluster.nodeKubeconfig(NODE), containerdDir: CONTAINERD_DIR, name: NODE });
}, 120_000);

afterAll(async () => {
  await cluster?.deletePods();
  await node?.close();
  await cluster?.close();
});

function kubectl(args: string[], stdin?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(KUBECTL, ['--kubeconfig', path.join(cluster.dir, 'admin.kubeconfig'), ...args], { timeout: 20_000, env: { ...process.env, HOME: cluster.dir, KUBECACHEDIR: path.join(cluster.dir, 'kubectl-cache') } }, (err, stdout, stderr) =>
      err ? reject(new Error(`kubectl ${args.join(' ')}: ${stderr || err.message}`)) : resolve(stdout),
    );
    if (stdin !== undefined) child.stdin!.end(stdin);
  });
}

async function inside(id: string, cmd: string): Promise<string> {
  const r = await node.cri.execSync(id, ['sh', '-c', cmd], 10);
  return `${r.stdout.toString()}${r.stderr.toString()}`.trim();
}

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
