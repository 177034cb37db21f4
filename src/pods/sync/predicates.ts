/**
 * The kubelet's predicate admission (pkg/kubelet/lifecycle/predicate.go): whether a pod bound
 * to this node fits it, judged once when the pod comes, against the node as it is (labels,
 * taints, allocatable) and the pods already admitted and not yet finished. The checks and
 * their order are the kubelet's, and the first failure is the pod's reason:
 *
 * 1. the pod's `kubernetes.io/os` label and `spec.os.name` against this node's OS (linux):
 *    `PodOSSelectorNodeLabelDoesNotMatch`, `PodOSNotSupported`;
 * 2. resources (the scheduler's noderesources.Fits): one more pod than `pods` allows is
 *    `OutOfpods`; requests of cpu, memory, ephemeral-storage and hugepages beyond what the
 *    admitted pods leave of allocatable are `OutOfcpu`, `OutOfmemory`, `OutOfephemeral-storage`,
 *    `OutOfhugepages-2Mi`, with the kubelet's message "Node didn't have enough resource: cpu,
 *    requested: 2000, used: 100, capacity: 1900". Extended resources the node does not have
 *    are dropped from the request first (cluster-level resources), as the kubelet;
 * 3. `nodeSelector` and required node affinity against the node's labels: `NodeAffinity`;
 * 4. `spec.nodeName` against this node: `NodeName`;
 * 5. host ports already taken by an admitted pod (same protocol and port, overlapping host IP):
 *    `NodePorts`;
 * 6. an untolerated `NoExecute` taint of the node (not for static pods): `TaintToleration`.
 *
 * Pure. A pod's requests are computed once per pod object (a WeakMap), so admitting pod n
 * against n-1 others costs additions, not n container walks.
 */
import type { Container, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration } from 'kubernetes-types/core/v1.js';
import { parseQuantity } from '../../config/quantity.js';
import type { Rejection } from './admission.js';

/** The node as admission sees it: the API's Node when connected, else the kubelet's initial node. */
export interface NodeView {
  name: string;
  labels: Readonly<Record<string, string>>;
  taints: readonly Taint[];
  /** As `status.allocatable`: quantities by resource name. */
  allocatable: Readonly<Record<string, string>>;
}

/** A resource list in base units: cpu in millicores, everything else in whole units. */
export type Amounts = Map<string, number>;

/** A quantity of `resource` in base units (cpu in millicores, the rest rounded up to whole units); 0 when absent or malformed (validation refused those). */
export function resourceAmount(resource: string, text: unknown): number {
  if (typeof text !== 'string' && typeof text !== 'number') return 0;
  try {
    const q = parseQuantity(String(text));
    return resource === 'cpu' ? Number(q.millis) : Number(q.roundedUp);
  } catch {
    return 0;
  }
}

/** A container's requests; a resource with a limit and no request requests its limit (the API's defaulting). */
function containerRequests(c: Container): Amounts {
  const out: Amounts = new Map();
  const req = c.resources?.requests ?? {};
  const lim = c.resources?.limits ?? {};
  for (const [k, v] of Object.entries(lim)) out.set(k, resourceAmount(k, v));
  for (const [k, v] of Object.entries(req)) out.set(k, resourceAmount(k, v));
  return out;
}

function add(into: Amounts, from: Amounts): void {
  for (const [k, v] of from) into.set(k, (into.get(k) ?? 0) + v);
}

function max(into: Amounts, from: Amounts): void {
  for (const [k, v] of from) if (v > (into.get(k) ?? 0)) into.set(k, v);
}

/** A container's limits in base units. */
function containerLimits(c: Container): Amounts {
  return new Map(Object.entries(c.resources?.limits ?? {}).map(([k, v]) => [k, resourceAmount(k, v)]));
}

/**
 * component-helpers' rule for a pod's amounts, of the containers' own (`of`): the app
 * containers summed; each init container in order needs its own plus the sidecars started
 * before it; sidecars (restartPolicy Always) run beside the app containers, so they add to the
 * sum; the pod needs the larger of the two.
 */
function containersAmounts(pod: Pod, of: (c: Container) => Amounts): Amounts {
  const sum: Amounts = new Map();
  for (const c of pod.spec?.containers ?? []) add(sum, of(c));
  const sidecars: Amounts = new Map();
  const inits: Amounts = new Map();
  for (const c of pod.spec?.initContainers ?? []) {
    const own = of(c);
    if (c.restartPolicy === 'Always') {
      add(sum, own);
      add(sidecars, own);
      max(inits, sidecars);
    } else {
      const need = new Map(own);
      add(need, sidecars);
      max(inits, need);
    }
  }
  max(sum, inits);
  return sum;
}

const requestsCache = new WeakMap<Pod, Amounts>();

/**
 * The pod's effective requests, as component-helpers' PodRequests: the containers' as
 * containersAmounts sums them, then `overhead`. Pod-level `spec.resources.requests`
 * (PodLevelResources) replace the containers' for the resources they name.
 */
export function podRequests(pod: Pod): Amounts {
  const cached = requestsCache.get(pod);
  if (cached) return cached;
  const reqs = containersAmounts(pod, containerRequests);
  const podLevel = (pod.spec as { resources?: { requests?: Record<string, unknown> } } | undefined)?.resources?.requests ?? {};
  for (const [k, v] of Object.entries(podLevel)) reqs.set(k, resourceAmount(k, v));
  for (const [k, v] of Object.entries(pod.spec?.overhead ?? {})) reqs.set(k, (reqs.get(k) ?? 0) + resourceAmount(k, v));
  requestsCache.set(pod, reqs);
  return reqs;
}

/** The pod's limits, as component-helpers' PodLimits: the containers' (containersAmounts), `overhead` added to those set. */
export function podLimitAmounts(pod: Pod): Amounts {
  const limits = containersAmounts(pod, containerLimits);
  for (const [k, v] of Object.entries(pod.spec?.overhead ?? {})) if (limits.has(k)) limits.set(k, limits.get(k)! + resourceAmount(k, v));
  return limits;
}

/** Resources every node has; any other name in a request is scalar (hugepages-*, extended). */
const NATIVE = ['cpu', 'memory', 'ephemeral-storage'] as const;

/** An extended resource (`example.com/gpu`): a name with a domain that is not kubernetes.io's, nor a native or hugepages one. */
function isExtended(name: string): boolean {
  if (!name.includes('/')) return false;
  const domain = name.slice(0, name.indexOf('/'));
  return !(domain === 'kubernetes.io' || domain.endsWith('.kubernetes.io')) && !name.startsWith('requests.');
}

function outOf(resource: string, requested: number, used: number, capacity: number): Rejection {
  return { reason: `OutOf${resource}`, message: `Node didn't have enough resource: ${resource}, requested: ${requested}, used: ${used}, capacity: ${capacity}` };
}

function predicate(name: string, desc: string): Rejection {
  return { reason: name, message: `Predicate ${name} failed: ${desc}` };
}

/** noderesources.Fits, first failure in its order (pods, cpu, memory, ephemeral-storage, scalar resources). */
export function resourceFit(pod: Pod, others: readonly Pod[], allocatable: Readonly<Record<string, string>>): Rejection | undefined {
  const allowedPods = resourceAmount('pods', allocatable['pods']);
  if (others.length + 1 > allowedPods) return outOf('pods', 1, others.length, allowedPods);
  const req = podRequests(pod);
  const wanted = [...req].filter(([name, v]) => v > 0 && name !== 'pods' && !(isExtended(name) && !(name in allocatable)));
  if (wanted.length === 0) return undefined;
  const used: Amounts = new Map();
  for (const o of others) add(used, podRequests(o));
  const order = [...NATIVE, ...wanted.map(([n]) => n).filter((n) => !(NATIVE as readonly string[]).includes(n)).sort()];
  for (const name of order) {
    const r = req.get(name) ?? 0;
    if (r <= 0 || !wanted.some(([n]) => n === name)) continue;
    // Not measured yet (the root dir's filesystem unread): not judged, rather than taken for 0.
    if (name === 'ephemeral-storage' && !(name in allocatable)) continue;
    const cap = resourceAmount(name, allocatable[name]);
    const u = used.get(name) ?? 0;
    if (r > cap - u) return outOf(name, r, u, cap);
  }
  return undefined;
}

function requirementMatches(r: NodeSelectorRequirement, value: string | undefined): boolean {
  const values = r.values ?? [];
  switch (r.operator) {
    case 'In':
      return value !== undefined && values.includes(value);
    case 'NotIn':
      return value === undefined || !values.includes(value);
    case 'Exists':
      return value !== undefined;
    case 'DoesNotExist':
      return value === undefined;
    case 'Gt':
    case 'Lt': {
      if (value === undefined || values.length !== 1 || !/^-?\d+$/.test(value) || !/^-?\d+$/.test(values[0]!)) return false;
      const a = BigInt(value);
      const b = BigInt(values[0]!);
      return r.operator === 'Gt' ? a > b : a < b;
    }
    default:
      return false;
  }
}

/** One term: every expression on labels and every field (only metadata.name) matches; an empty term matches nothing. */
function termMatches(t: NodeSelectorTerm, node: NodeView): boolean {
  const exprs = t.matchExpressions ?? [];
  const fields = t.matchFields ?? [];
  if (exprs.length === 0 && fields.length === 0) return false;
  return exprs.every((e) => requirementMatches(e, Object.hasOwn(node.labels, e.key) ? node.labels[e.key] : undefined)) && fields.every((f) => f.key === 'metadata.name' && (f.operator === 'In' || f.operator === 'NotIn') && requirementMatches(f, node.name));
}

/** `nodeSelector` (every label equal) and the required node affinity (any term). */
export function nodeAffinityMatches(pod: Pod, node: NodeView): boolean {
  for (const [k, v] of Object.entries(pod.spec?.nodeSelector ?? {})) if (!Object.hasOwn(node.labels, k) || node.labels[k] !== v) return false;
  const terms = pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  return terms === undefined || terms.some((t) => termMatches(t, node));
}

interface HostPort {
  ip: string;
  protocol: string;
  port: number;
}

/** The host ports a pod takes: its app containers' and its sidecars' (schedutil.GetHostPorts). */
function hostPorts(pod: Pod): HostPort[] {
  const out: HostPort[] = [];
  const cs = [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === 'Always')];
  for (const c of cs) for (const p of c.ports ?? []) if ((p.hostPort ?? 0) > 0) out.push({ ip: p.hostIP || '0.0.0.0', protocol: p.protocol || 'TCP', port: p.hostPort! });
  return out;
}

function portsConflict(a: HostPort, b: HostPort): boolean {
  return a.port === b.port && a.protocol === b.protocol && (a.ip === b.ip || a.ip === '0.0.0.0' || b.ip === '0.0.0.0');
}

/** corev1's ToleratesTaint: effect and key match (empty: any), Exists or an equal value. */
export function tolerates(t: Toleration, taint: Taint): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (t.key && t.key !== taint.key) return false;
  if (t.operator === 'Exists') return true;
  if (t.operator !== undefined && t.operator !== '' && t.operator !== 'Equal') return false;
  return (t.value ?? '') === (taint.value ?? '');
}

export interface PredicateOptions {
  /** The node as it is now (called for each admission). */
  node: () => NodeView;
  /** Whether a pod comes from a file or URL (static): the taint check skips those, as the kubelet. */
  isStatic: (pod: Pod) => boolean;
}

/** The predicate admission check: the first failure, or undefined when the pod fits beside `others`. */
export function checkPredicates(pod: Pod, others: readonly Pod[], o: PredicateOptions): Rejection | undefined {
  const node = o.node();
  const osLabel = pod.metadata?.labels?.['kubernetes.io/os'];
  if (osLabel !== undefined && osLabel !== 'linux') return { reason: 'PodOSSelectorNodeLabelDoesNotMatch', message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label" };
  const osName = pod.spec?.os?.name;
  if (osName !== undefined && osName !== 'linux') return { reason: 'PodOSNotSupported', message: "Failed to admit pod as the OS field doesn't match node OS" };
  const fit = resourceFit(pod, others, node.allocatable);
  if (fit) return fit;
  if (!nodeAffinityMatches(pod, node)) return predicate('NodeAffinity', "node(s) didn't match Pod's node affinity/selector");
  if (pod.spec?.nodeName && pod.spec.nodeName !== node.name) return predicate('NodeName', "node(s) didn't match the requested node name");
  const mine = hostPorts(pod);
  if (mine.length > 0 && others.some((other) => hostPorts(other).some((p) => mine.some((m) => portsConflict(m, p))))) {
    return predicate('NodePorts', "node(s) didn't have free ports for the requested pod ports");
  }
  if (!o.isStatic(pod)) {
    const tolerations = pod.spec?.tolerations ?? [];
    if (node.taints.some((taint) => taint.effect === 'NoExecute' && !tolerations.some((t) => tolerates(t, taint)))) {
      return predicate('TaintToleration', "node(s) had taints that the pod didn't tolerate");
    }
  }
  return undefined;
}
