/**
 * The control-plane client as connected mode's ports: nodes, leases, reviews and this
 * node's pods (a reflector with `fieldSelector=spec.nodeName=<node>`). Built from
 * `--kubeconfig` before the lock is taken (a bad kubeconfig stops startup); makes no
 * request until the daemon starts its services.
 */
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Node, NodeStatus, Pod } from 'kubernetes-types/core/v1.js';
import type { ControlPlanePorts } from '../daemon.js';
import { NodeletError } from '../errors.js';
import type { Logger } from '../log.js';
import type { SubjectAccessReviewSpec } from '../server/auth.js';
import { KubeClient, LEASES, NODES, PODS, SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS, resourcePath } from './client.js';
import { loadKubeconfig } from './kubeconfig.js';
import { Reflector } from './reflector.js';

async function orUndefined<T>(p: Promise<T>): Promise<T | undefined> {
  try {
    return await p;
  } catch (err) {
    if (err instanceof NodeletError && err.code === 'NOT_FOUND') return undefined;
    throw err;
  }
}

export function controlPlanePorts(kubeconfig: string, nodeName: string, logger: Logger): ControlPlanePorts {
  const access = loadKubeconfig(kubeconfig);
  const client = new KubeClient({ access });
  const log = logger.child({ component: 'control-plane' });
  let reflector: Reflector<Pod> | undefined;
  return {
    server: access.server,
    nodes: {
      getNode: (name) => orUndefined(client.do<Node>('GET', resourcePath(NODES, { name }))),
      createNode: (node) => client.do<Node>('POST', resourcePath(NODES), { body: node, query: { fieldManager: 'nodelet' } }),
      patchNodeStatus: (name, status: NodeStatus) =>
        client.do<Node>('PATCH', resourcePath(NODES, { name, subresource: 'status' }), {
          body: { status },
          contentType: 'application/strategic-merge-patch+json',
          query: { fieldManager: 'nodelet' },
        }),
    },
    leases: {
      getNode: (name) => orUndefined(client.do<Node>('GET', resourcePath(NODES, { name }))),
      getLease: (namespace, name) => orUndefined(client.do<Lease>('GET', resourcePath(LEASES, { namespace, name }))),
      createLease: (lease) => client.do<Lease>('POST', resourcePath(LEASES, { namespace: lease.metadata!.namespace! }), { body: lease, query: { fieldManager: 'nodelet' } }),
      updateLease: (lease) =>
        client.do<Lease>('PUT', resourcePath(LEASES, { namespace: lease.metadata!.namespace!, name: lease.metadata!.name! }), { body: lease, query: { fieldManager: 'nodelet' } }),
    },
    reviews: {
      async tokenReview(token) {
        const r = await client.do<{ status?: { authenticated?: boolean; user?: { username: string; uid?: string; groups?: string[] }; error?: string } }>(
          'POST',
          resourcePath(TOKEN_REVIEWS),
          { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } } },
        );
        return { authenticated: !!r.status?.authenticated, ...(r.status?.user ? { user: r.status.user } : {}), ...(r.status?.error ? { error: r.status.error } : {}) };
      },
      async subjectAccessReview(spec: SubjectAccessReviewSpec) {
        const r = await client.do<{ status?: { allowed?: boolean; denied?: boolean; reason?: string; evaluationError?: string } }>('POST', resourcePath(SUBJECT_ACCESS_REVIEWS), {
          body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', spec },
        });
        return { allowed: !!r.status?.allowed, ...(r.status?.denied ? { denied: true } : {}), ...(r.status?.reason ? { reason: r.status.reason } : {}), ...(r.status?.evaluationError ? { evaluationError: r.status.evaluationError } : {}) };
      },
    },
    pods: {
      start(onPods) {
        reflector = new Reflector<Pod>({ client, type: PODS, fieldSelector: `spec.nodeName=${nodeName}`, logger: log });
        return reflector.start(onPods);
      },
      async stop() {
        await reflector?.stop();
      },
    },
    close: () => client.close(),
  };
}
