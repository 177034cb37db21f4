/**
 * The kubelet's labels and annotations on CRI sandboxes and containers: the one home of
 * their names. nodelet writes them as the kubelet does and reads everything back from
 * them (it keeps no state of its own), so a restarted nodelet, or one replacing a
 * kubelet, finds and adopts what runs.
 */
export const LABEL_POD_NAME = 'io.kubernetes.pod.name';
export const LABEL_POD_NAMESPACE = 'io.kubernetes.pod.namespace';
export const LABEL_POD_UID = 'io.kubernetes.pod.uid';
export const LABEL_CONTAINER_NAME = 'io.kubernetes.container.name';
export const ANN_CONTAINER_HASH = 'io.kubernetes.container.hash';
export const ANN_RESTART_COUNT = 'io.kubernetes.container.restartCount';
export const ANN_TERMINATION_MESSAGE_PATH = 'io.kubernetes.container.terminationMessagePath';
export const ANN_TERMINATION_MESSAGE_POLICY = 'io.kubernetes.container.terminationMessagePolicy';
export const ANN_PORTS = 'io.kubernetes.container.ports';
export const ANN_GRACE_PERIOD = 'io.kubernetes.pod.terminationGracePeriod';
/**
 * nodelet's own label beside the kubelet's, on the sandboxes it creates: the name of the
 * node whose agent created the pod. A runtime shared by two agents (a misconfigured
 * second node pointing at the same socket) would otherwise have each remove the other's
 * pods; a pod marked with another node's name is never removed, and reported. A pod
 * without it (a kubelet's, when nodelet replaces it on a live node) is adopted or removed
 * as the kubelet would.
 */
export const LABEL_NODELET_NODE = 'io.kubernetes.nodelet.node';
/** Marks what nodelet created, like the kubelet's `io.kubernetes.container.*` set; CRI labels only take strings. */
export const LABEL_MANAGED_BY = 'io.kubernetes.pod.managed-by';
