/**
 * The control-plane client as connected mode's ports: nodes, leases, reviews and this
 * node's pods (a reflector with `fieldSelector=spec.nodeName=<node>`). Built from
 * `--kubeconfig` before the lock is taken (a bad kubeconfig stops startup naming file and
 * field); makes no request until the daemon starts its services.
 *
 * Three clients, as the kubelet has (its `kubeClient`, `eventClient` and `heartbeatClient`):
 * - the main one, rate-limited by `kubeAPIQPS`/`kubeAPIBurst` (`apiLimiter`): pods, their
 *   status and mirror pods, the watches, node registration, reviews;
 * - the events', with a limiter of its own (`eventLimiter`: `eventRecordQPS`/`eventBurst`),
 *   so events never spend the main client's tokens;
 * - the heartbeat: the Lease and the Node's status (its GET and PATCH), with no rate limit
 *   (the kubelet sets its heartbeat client's QPS to -1), connections of its own and a
 *   deadline of its own (the kubelet's: min(nodeStatusUpdateFrequency,
 *   nodeLeaseDurationSeconds), at least 2 s: src/connected.ts), so a renewal never waits
 *   behind the status writes, events, mirror pods, the watches or the main client's tokens.
 *
 * The node status reporter reads its Node from a watch of that one Node
 * (`fieldSelector=metadata.name=<node>`, a reflector: resumed on its resourceVersion,
 * listed again on 410), as an informer would, instead of a GET every turn.
 */
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Node, NodeStatus, Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../errors.js';
import type { Logger } from '../log.js';
import type { EventApi } from '../events.js';
import type { LeaseApi } from '../node/lease.js';
import type { NodeApi } from '../node/reporter.js';
import type { MirrorPodApi } from '../pods/status/mirror.js';
import type { PodFeed } from '../pods/sources/sources.js';
import type { PodStatusApi } from '../pods/status/status-writer.js';
import type { ReviewClient, SubjectAccessReviewSpec } from '../server/auth.js';
import { ControlPlaneClient, EVENTS, LEASES, NODES, PODS, type ResourceType } from './client.js';
import { loadKubeconfig, type ClusterAccess } from './kubeconfig.js';
import { sharedExecCredentials } from './exec-credential.js';
import { dropManagedFields, Reflector } from './reflector.js';
import type { RateLimiter } from './rate-limit.js';
import { ThrottledDelivery } from './throttle.js';
import { ControlPlaneObjects } from './objects.js';
import type { ApiObjects } from '../pods/objects/objects.js';

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

/**
 * After a delivery of this node's pods, the next waits at least this long: the events of a
 * burst meanwhile make one delivery. The first change after a quiet spell goes at once (an API
 * pod start waits for nothing); under a burst of 5,000 events, each delivery (the pod
 * manager's desired set, a relist of the runtime) happens at most 10 times a second, not once
 * per chunk of the watch stream (~100 a second).
 */
export const POD_DELIVERY_GAP_MS = 100;

export interface PortsOptions {
  /** Deadline of a Lease request (default 10 s, the kubelet's for its defaults). */
  leaseTimeoutMs?: number;
  /** The main client's rate limit (`kubeAPIQPS`/`kubeAPIBurst`); default none. */
  apiLimiter?: RateLimiter;
  /** The event client's rate limit (`eventRecordQPS`/`eventBurst`); default none. */
  eventLimiter?: RateLimiter;
  /** A client certificate and key to use instead of the kubeconfig's (the rotated one in `--cert-dir`). */
  clientCertificate?: { cert: string; key: string };
}

/** What connected mode (connected.ts) uses of the control plane: one port per kind of object it reads or writes. */
export interface ControlPlanePorts {
  /** The API server URL, for logs. */
  readonly server: string;
  nodes: NodeApi;
  leases: LeaseApi;
  reviews: ReviewClient;
  pods: PodFeed;
  podStatus: PodStatusApi;
  mirrorPods: MirrorPodApi;
  events: EventApi;
  /** The ConfigMaps, Secrets, ServiceAccounts, Services and tokens pods refer to (objects.ts: watched per object, on the main client). */
  objects?: ApiObjects;
  /** Every client presents this certificate from now on (certificate rotation). */
  setClientCertificate?(cert: string, key: string): void;
  close(): Promise<void>;
}

/** The three clients (see the top of this file), what every port is built from. */
interface Clients {
  /** The main client, rate-limited by `apiLimiter`. */
  client: ControlPlaneClient;
  /** The events', rate-limited by `eventLimiter`. */
  eventClient: ControlPlaneClient;
  /** The Lease's and the Node status', without a rate limit. */
  heartbeat: ControlPlaneClient;
}

/** This node's Node, watched: started at the first look (the reporter's, the lease's or the mirror pods'), stopped with the reporter and at close. */
interface NodeWatch {
  /** NodeApi.watchedNode: undefined for another node, before the watch listed, or while it fails. */
  watched(name: string): { node: Node | undefined } | undefined;
  stop(): Promise<void>;
}

/**
 * Builds the ports, each by its own function below from the client it must use; loads the
 * kubeconfig (throws naming file and field) and makes no request.
 */
export function controlPlanePorts(kubeconfig: string, nodeName: string, logger: Logger, o: PortsOptions = {}): ControlPlanePorts {
  const access = { ...loadKubeconfig(kubeconfig), ...(o.clientCertificate ?? {}) };
  const log = logger.child({ component: 'control-plane' });
  const clients = buildClients(access, log, o);
  const { client, eventClient, heartbeat } = clients;
  const objects = new ControlPlaneObjects({ client, logger: log.child({ component: 'api-objects' }) });
  const nodeWatch = watchNode(client, nodeName, log);
  return {
    server: client.server,
    nodes: nodePort(clients, nodeWatch),
    leases: leasePort(heartbeat, nodeWatch),
    reviews: reviewPort(client),
    pods: podFeed(client, nodeName, log),
    podStatus: podStatusPort(client),
    mirrorPods: mirrorPodPort(client, nodeWatch),
    events: eventPort(eventClient),
    objects,
    setClientCertificate(cert, key) {
      for (const c of [client, eventClient, heartbeat]) c.setClientCertificate(cert, key);
    },
    close: async () => {
      await objects.close();
      await nodeWatch.stop();
      await Promise.all([client.close(), eventClient.close(), heartbeat.close()]);
    },
  };
}

/** The three clients of `access`; constructing them connects nothing. */
function buildClients(access: ClusterAccess, log: Logger, o: PortsOptions): Clients {
  // A credential plugin (kubeconfig `exec`): one for the three clients, its failures logged.
  const credentials = access.exec ? sharedExecCredentials(access.exec, { logger: log.child({ component: 'credential-plugin' }) }) : undefined;
  const cred = credentials ? { credentials } : {};
  const client = new ControlPlaneClient({ access, ...cred, ...(o.apiLimiter ? { limiter: o.apiLimiter } : {}) });
  // Events: best effort, a queue sending one at a time (src/events.ts); two connections.
  const eventClient = new ControlPlaneClient({ access, ...cred, connections: 2, ...(o.eventLimiter ? { limiter: o.eventLimiter } : {}) });
  // The heartbeat client: no rate limit; two connections of its own, so a Lease renewal and a
  // Node status patch never queue behind each other.
  const heartbeat = new ControlPlaneClient({ access, ...cred, connections: 2, timeoutMs: o.leaseTimeoutMs ?? 10_000 });
  return { client, eventClient, heartbeat };
}

function watchNode(client: ControlPlaneClient, nodeName: string, log: Logger): NodeWatch {
  let reflector: Reflector<Node> | undefined;
  return {
    watched(name) {
      if (name !== nodeName) return undefined;
      if (!reflector) {
        reflector = new Reflector<Node>({ client, type: NODES, fieldSelector: `metadata.name=${nodeName}`, logger: log, onEvent: () => {}, transform: dropManagedFields });
        reflector.start();
        return undefined;
      }
      // Not listed yet, or failing: the reporter asks with a GET instead.
      if (!reflector.healthy()) return undefined;
      return { node: reflector.state.get(`/${nodeName}`) };
    },
    async stop() {
      await reflector?.stop();
    },
  };
}

function nodePort({ client, heartbeat }: Clients, nodeWatch: NodeWatch): NodeApi {
  return {
    // The reporter's read of its Node when the watch cannot tell (and registration's): the heartbeat's, as the kubelet's.
    getNode: (name) => orUndefined(heartbeat.get<Node>(NODES, { name })),
    createNode: (node) => client.create(NODES, node),
    // Strategic merge: conditions and addresses merge by type, as the kubelet patches them.
    // On the heartbeat client, as the kubelet's node status: never held by the main client's rate limit.
    patchNodeStatus: (name, status: NodeStatus) => heartbeat.patch<Node>(NODES, { name }, { status }, { type: 'strategic', subresource: 'status' }),
    watchedNode: (name) => nodeWatch.watched(name),
    stopWatch: () => nodeWatch.stop(),
  };
}

function leasePort(heartbeat: ControlPlaneClient, nodeWatch: NodeWatch): LeaseApi {
  return {
    getNode: async (name) => nodeWatch.watched(name)?.node ?? orUndefined(heartbeat.get<Node>(NODES, { name })),
    getLease: (namespace, name) => orUndefined(heartbeat.get<Lease>(LEASES, { namespace, name })),
    createLease: (lease) => heartbeat.create(LEASES, lease),
    updateLease: (lease) => heartbeat.update(LEASES, lease),
  };
}

function reviewPort(client: ControlPlaneClient): ReviewClient {
  return {
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
  };
}

/** This node's pods: a reflector with `fieldSelector=spec.nodeName=<node>`, its full set delivered after each burst of events. */
function podFeed(client: ControlPlaneClient, nodeName: string, log: Logger): PodFeed {
  let reflector: Reflector<Pod> | undefined;
  let deliveries: ThrottledDelivery | undefined;
  return {
    async start(onPods) {
      // The consumers take full sets: a burst of watch events (a chunk of the stream holds
      // many) is handed on as one set after the burst, not one set per event, so 5,000
      // events do not cost 5,000 walks of every pod, and timers (the Lease) still run; and
      // at most one set every POD_DELIVERY_GAP_MS while events keep coming.
      const d = new ThrottledDelivery(() => onPods(reflector!.state.items()), { gapMs: POD_DELIVERY_GAP_MS });
      deliveries = d;
      reflector = new Reflector<Pod>({
        client,
        type: PODS,
        fieldSelector: `spec.nodeName=${nodeName}`,
        logger: log,
        // Only the fields nodelet reads are kept: managedFields go (about half of a pod's JSON once its status was written).
        transform: dropManagedFields,
        onEvent: () => d.request(),
      });
      reflector.start();
      await reflector.waitForSync();
      // The first full set is delivered before start resolves (PodFeed's contract).
      if (d.pending) d.flush();
    },
    async stop() {
      await reflector?.stop();
      deliveries?.cancel();
    },
  };
}

function podStatusPort(client: ControlPlaneClient): PodStatusApi {
  return {
    async patchPodStatus(namespace, name, uid, status) {
      // The UID in the patch: a pod recreated under the same name refuses the old one's status.
      await client.patch<Pod>(PODS, { namespace, name }, { metadata: { uid }, status }, { type: 'strategic', subresource: 'status' });
    },
    deletePod: (namespace, name, uid) => deletePod(client, namespace, name, uid),
  };
}

function mirrorPodPort(client: ControlPlaneClient, nodeWatch: NodeWatch): MirrorPodApi {
  return {
    nodeUid: async (name) => (nodeWatch.watched(name)?.node ?? (await orUndefined(client.get<Node>(NODES, { name }))))?.metadata?.uid,
    async createPod(pod) {
      await client.create<Pod>(PODS, pod);
    },
    deletePod: (namespace, name, uid) => deletePod(client, namespace, name, uid),
  };
}

/** Grace period 0 ends a graceful deletion; the UID precondition spares a pod recreated under the name. */
async function deletePod(client: ControlPlaneClient, namespace: string, name: string, uid: string): Promise<void> {
  await client.delete(PODS, { namespace, name }, { body: { gracePeriodSeconds: 0, preconditions: { uid } } });
}

function eventPort(eventClient: ControlPlaneClient): EventApi {
  return {
    async create(event) {
      await eventClient.create(EVENTS, event as never);
    },
    async patch(namespace, name, patch) {
      await eventClient.mergePatch(EVENTS, { namespace, name }, patch);
    },
  };
}
