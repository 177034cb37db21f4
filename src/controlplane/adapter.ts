/**
 * The control-plane client as connected mode's ports: nodes, leases, reviews and this
 * node's pods (a reflector with `fieldSelector=spec.nodeName=<node>`). Built from
 * `--kubeconfig` before the lock is taken (a bad kubeconfig stops startup naming file and
 * field); makes no request until the daemon starts its services.
 */
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Node, NodeStatus, Pod } from 'kubernetes-types/core/v1.js';
import type { ControlPlanePorts } from '../connected.js';
import { NodeletError } from '../errors.js';
import type { Logger } from '../log.js';
import type { SubjectAccessReviewSpec } from '../server/auth.js';
import { ControlPlaneClient, EVENTS, LEASES, NODES, PODS, type ResourceType } from './client.js';
import { loadKubeconfig } from './kubeconfig.js';
import { Reflector } from './reflector.js';

const TOKEN_REVIEWS: ResourceType = { group: 'authentication.k8s.io', version: 'v1', resource: 'tokenreviews', namespaced: false };
const SUBJECT_ACCESS_REVIEWS: ResourceType = { group: 'authorization.k8s.io', version: 'v1', resource: 'subjectaccessreviews', namespaced: false };

async function orUndefined<T>(p: Promise<T>): Promise<T | undefined> {
  try {
    return await p;
  } catch (err) {
    if (err instanceof NodeletError && err.code === 'NOT_FOUND') return undefined;
    throw err;
  }
}

export function controlPlanePorts(kubeconfig: string, nodeName: string, logger: Logger): ControlPlanePorts {
  const client = new ControlPlaneClient({ access: loadKubeconfig(kubeconfig) });
  const log = logger.child({ component: 'control-plane' });
  const getNode = (name: string) => orUndefined(client.get<Node>(NODES, { name }));
  let reflector: Reflector<Pod> | undefined;
  // Grace period 0 ends a graceful deletion; the UID precondition spares a pod recreated under the name.
  const deletePod = async (namespace: string, name: string, uid: string) => {
    await client.delete(PODS, { namespace, name }, { body: { gracePeriodSeconds: 0, preconditions: { uid } } });
  };
  return {
    server: client.server,
    nodes: {
      getNode,
      createNode: (node) => client.create(NODES, node),
      // Strategic merge: conditions and addresses merge by type, as the kubelet patches them.
      patchNodeStatus: (name, status: NodeStatus) => client.patch<Node>(NODES, { name }, { status }, { type: 'strategic', subresource: 'status' }),
    },
    leases: {
      getNode,
      getLease: (namespace, name) => orUndefined(client.get<Lease>(LEASES, { namespace, name })),
      createLease: (lease) => client.create(LEASES, lease),
      updateLease: (lease) => client.update(LEASES, lease),
    },
    reviews: {
      async tokenReview(token) {
        const r = await client.create<{ metadata?: object; status?: { authenticated?: boolean; user?: { username: string; uid?: string; groups?: string[] }; error?: string } }>(TOKEN_REVIEWS, {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenReview',
          spec: { token },
        } as never);
        return { authenticated: !!r.status?.authenticated, ...(r.status?.user ? { user: r.status.user } : {}), ...(r.status?.error ? { error: r.status.error } : {}) };
      },
      async subjectAccessReview(spec: SubjectAccessReviewSpec) {
        const r = await client.create<{ metadata?: object; status?: { allowed?: boolean; denied?: boolean; reason?: string; evaluationError?: string } }>(SUBJECT_ACCESS_REVIEWS, {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SubjectAccessReview',
          spec,
        } as never);
        return {
          allowed: !!r.status?.allowed,
          ...(r.status?.denied ? { denied: true } : {}),
          ...(r.status?.reason ? { reason: r.status.reason } : {}),
          ...(r.status?.evaluationError ? { evaluationError: r.status.evaluationError } : {}),
        };
      },
    },
    pods: {
      async start(onPods) {
        reflector = new Reflector<Pod>({
          client,
          type: PODS,
          fieldSelector: `spec.nodeName=${nodeName}`,
          logger: log,
          onEvent: () => onPods(reflector!.state.items()),
        });
        reflector.start();
        await reflector.waitForSync();
      },
      async stop() {
        await reflector?.stop();
      },
    },
    podStatus: {
      async patchPodStatus(namespace, name, uid, status) {
        // The UID in the patch: a pod recreated under the same name refuses the old one's status.
        await client.patch<Pod>(PODS, { namespace, name }, { metadata: { uid }, status }, { type: 'strategic', subresource: 'status' });
      },
      deletePod: (namespace, name, uid) => deletePod(namespace, name, uid),
    },
    mirrorPods: {
      nodeUid: async (name) => (await getNode(name))?.metadata?.uid,
      async createPod(pod) {
        await client.create<Pod>(PODS, pod);
      },
      deletePod: (namespace, name, uid) => deletePod(namespace, name, uid),
    },
    events: {
      async create(event) {
        await client.create(EVENTS, event as never);
      },
      async patch(namespace, name, patch) {
        await client.mergePatch(EVENTS, { namespace, name }, patch);
      },
    },
    close: () => client.close(),
  };
}
