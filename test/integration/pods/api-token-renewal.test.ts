/**
 * Service-account token renewal end to end, on a real containerd (issue 27): the control
 * plane caps every token at 40 s (`serviceAccountTokenMaxSeconds`, as kube-apiserver's
 * `--service-account-max-token-expiration` would with a shorter floor), so a token asked for
 * 10 minutes lives 40 s. nodelet renews it by the lifetime granted, as the kubelet's token
 * manager: the container reads a new token before 80 % of the real lifetime (32 s) has passed,
 * not before 80 % less the 10 s jitter (renewing by the lifetime asked would find it due at
 * once and fetch a new one every 10 s), and the new one passes TokenReview.
 */
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS, type ResourceType } from '../../../src/controlplane/client.js';
import { eventually } from '../../helpers/nodelet.js';
import type { TestCluster } from '../../helpers/test-cluster.js';
import { shIn, startApiPodNode, type ApiPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-api-token-renewal';
const NODE = 'toknode';
const TOKEN_REVIEWS: ResourceType = { group: 'authentication.k8s.io', version: 'v1', resource: 'tokenreviews', namespaced: false };
const LIFETIME_S = 40;
/** The kubelet's renewal point: 80 % of the lifetime, less a jitter of 0-9 whole seconds. */
const DUE_S = LIFETIME_S * 0.8;

let connected: ApiPodNode | undefined;
let cluster: TestCluster;
let node: PodNode;

beforeAll(async () => {
  ({ cluster, node } = connected = await startApiPodNode({ prefix: 'nodelet-api-token-', name: NODE, containerdDir: CONTAINERD_DIR, controlPlane: { serviceAccountTokenMaxSeconds: LIFETIME_S } }));
}, 120_000);

afterAll(() => connected?.close());

const claims = (jwt: string): { iat: number; exp: number } => JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString());

const inside = (id: string, cmd: string) => shIn(node.cri, id, cmd);

async function review(token: string, audiences?: string[]): Promise<{ authenticated?: boolean; error?: string }> {
  const r = await cluster.api.create<{ metadata?: object; status?: { authenticated?: boolean; error?: string } }>(TOKEN_REVIEWS, { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token, ...(audiences ? { audiences } : {}) } } as never);
  return r.status ?? {};
}

describe('service-account token renewal in a running pod', () => {
  it('a token asked for 10 minutes but granted 40 s is renewed in the container between 23 and 32 s; the new one passes TokenReview', async () => {
    await cluster.api.create<Pod>(PODS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'renews', namespace: 'default' },
      spec: {
        nodeName: NODE,
        hostNetwork: true,
        terminationGracePeriodSeconds: 1,
        volumes: [{ name: 'vault', projected: { sources: [{ serviceAccountToken: { path: 'token', audience: 'vault', expirationSeconds: 600 } }] } }],
        containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'], volumeMounts: [{ name: 'vault', mountPath: '/etc/vault' }] }],
      },
    });
    const id = await eventually(async () => {
      const p = await cluster.api.get<Pod>(PODS, { namespace: 'default', name: 'renews' }).catch(() => undefined);
      const s = p?.status?.containerStatuses?.[0];
      return s?.state?.running ? s.containerID?.replace('containerd://', '') : undefined;
    }, 60_000);
    const files = { vault: '/etc/vault/token', injected: '/var/run/secrets/kubernetes.io/serviceaccount/token' };
    const first = { vault: await inside(id, `cat ${files.vault}`), injected: await inside(id, `cat ${files.injected}`) };
    // The control plane granted 40 s for both (600 s asked, and the admission's 3607 s).
    for (const t of Object.values(first)) expect(claims(t).exp - claims(t).iat).toBe(LIFETIME_S);
    expect((await review(first.vault, ['vault'])).authenticated).toBe(true);
    // Both files read together every 100 ms: when did each first change?
    const seen: Partial<Record<'vault' | 'injected', { token: string; at: number }>> = {};
    await eventually(async () => {
      const [v, i] = (await inside(id, `cat ${files.vault}; echo; cat ${files.injected}`)).split('\n');
      const at = Date.now();
      if (!seen.vault && v && v !== first.vault) seen.vault = { token: v, at };
      if (!seen.injected && i && i !== first.injected) seen.injected = { token: i, at };
      return seen.vault && seen.injected ? true : undefined;
    }, 60_000, 100);
    for (const which of ['vault', 'injected'] as const) {
      const old = first[which];
      const renewed = seen[which]!;
      // Seen by the container before 80 % of the real lifetime after the old token's issue, not before that less the jitter (iat is whole seconds).
      const seenAfterS = renewed.at / 1000 - claims(old).iat;
      console.log(`${which} token (${LIFETIME_S} s granted, ${which === 'vault' ? 600 : 3607} s asked) renewed in the container ${seenAfterS.toFixed(1)} s after its issue`);
      expect(seenAfterS).toBeLessThan(DUE_S + 1);
      expect(seenAfterS).toBeGreaterThanOrEqual(DUE_S - 10);
      expect(claims(renewed.token).iat).toBeGreaterThan(claims(old).iat);
      expect(claims(renewed.token).exp - claims(renewed.token).iat).toBe(LIFETIME_S);
      expect((await review(renewed.token, which === 'vault' ? ['vault'] : undefined)).authenticated).toBe(true);
    }
  }, 120_000);
});
