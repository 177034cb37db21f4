/**
 * The Node authorizer and the NodeRestriction admission plugin (issue 27), as
 * kube-apiserver runs them with `--authorization-mode=Node,RBAC` and
 * AuthorizeNodeWithSelectors on (plugin/pkg/auth/authorizer/node,
 * plugin/pkg/admission/noderestriction). A caller is a node when its user is
 * `system:node:<name>` and it is in the group `system:nodes`; other callers are not judged
 * here (the test control plane has no RBAC: they keep full access).
 *
 * A node may read only the secrets and configmaps its pods refer to (get, or list/watch with
 * `fieldSelector=metadata.name=<name>`), create tokens only for the service account of a pod
 * bound to it (NodeRestriction: bound to that pod), read its own Node and write it, use only
 * its own Lease in kube-node-lease, list/watch pods with `spec.nodeName=<itself>`, get pods
 * bound to it, write the status of those, create and delete mirror pods on itself, and what
 * upstream's static node rules allow (events, services, reviews, CSRs). The relationships are
 * read from the store at each request (upstream keeps a graph fed by informers: the same
 * answer, without its propagation delay).
 */
import { podReferences } from './service-accounts.js';
import { forbidden, notFoundError, type StatusError } from './status-error.js';
import type { Obj, Store } from './store.js';

export interface Attributes {
  user: string;
  verb: string;
  group: string;
  resource: string;
  subresource: string;
  namespace: string;
  name: string;
  /** fieldSelector requirements `field=value` (equality only). */
  fieldEquals: Array<{ field: string; value: string }>;
}

export type Decision = { allowed: true } | { allowed: false; reason: string };

/** The node name of a node caller (NodeIdentifier), '' when its name is empty, undefined for other callers. */
export function nodeIdentity(user: string, groups: string[]): string | undefined {
  if (!user.startsWith('system:node:') || !groups.includes('system:nodes')) return undefined;
  return user.slice('system:node:'.length);
}

/** The verb and name of a request, as the API server's RequestInfo derives them. */
export function requestVerb(method: string, hasName: boolean, watch: boolean): string {
  switch (method) {
    case 'GET':
    case 'HEAD':
      return watch ? 'watch' : hasName ? 'get' : 'list';
    case 'POST':
      return 'create';
    case 'PUT':
      return 'update';
    case 'PATCH':
      return 'patch';
    case 'DELETE':
      return hasName ? 'delete' : 'deletecollection';
    default:
      return method.toLowerCase();
  }
}

/** Equality requirements of a fieldSelector (RequestInfo takes a list's name from `metadata.name=`). */
export function fieldEquals(sel: string): Array<{ field: string; value: string }> {
  const out: Array<{ field: string; value: string }> = [];
  for (const part of sel.split(',')) {
    const m = /^\s*([^!=\s]+)\s*==?\s*(.*?)\s*$/.exec(part);
    if (m) out.push({ field: m[1]!, value: m[2]! });
  }
  return out;
}

/** Upstream's static node rules (bootstrappolicy.NodeRules) for the resources not judged one by one. */
const NODE_RULES: Array<{ group: string; resources: string[]; verbs: string[] }> = [
  { group: 'authentication.k8s.io', resources: ['tokenreviews'], verbs: ['create'] },
  { group: 'authorization.k8s.io', resources: ['subjectaccessreviews', 'localsubjectaccessreviews'], verbs: ['create'] },
  { group: '', resources: ['services'], verbs: ['get', 'list', 'watch'] },
  { group: '', resources: ['events'], verbs: ['create', 'update', 'patch'] },
  { group: 'events.k8s.io', resources: ['events'], verbs: ['create', 'update', 'patch'] },
  { group: 'certificates.k8s.io', resources: ['certificatesigningrequests'], verbs: ['create', 'get', 'list', 'watch'] },
  { group: 'certificates.k8s.io', resources: ['certificatesigningrequests/nodeclient', 'certificatesigningrequests/selfnodeclient'], verbs: ['create'] },
  { group: 'storage.k8s.io', resources: ['volumeattachments'], verbs: ['get'] },
  { group: 'storage.k8s.io', resources: ['csidrivers'], verbs: ['get', 'list', 'watch'] },
  { group: 'node.k8s.io', resources: ['runtimeclasses'], verbs: ['get', 'list', 'watch'] },
];

const deny = (reason: string): Decision => ({ allowed: false, reason });
const ALLOW: Decision = { allowed: true };

/** The name a request is about: the URL's, else a list/watch's `metadata.name=` selector. */
function requestName(a: Attributes): string {
  if (a.name !== '') return a.name;
  if (a.verb === 'list' || a.verb === 'watch') return a.fieldEquals.find((f) => f.field === 'metadata.name')?.value ?? '';
  return '';
}

function boundPods(store: Store, node: string, ns: string): Obj[] {
  return store.list('pods', ns).filter((p) => p['spec']?.['nodeName'] === node);
}

/** Whether a pod bound to `node` refers to the object (the authorizer graph's path to the node). */
function related(store: Store, node: string, kind: 'secret' | 'configmap' | 'serviceaccount' | 'pod', ns: string, name: string): boolean {
  for (const pod of boundPods(store, node, ns)) {
    if (kind === 'pod' && pod['metadata']['name'] === name) return true;
    const refs = podReferences(pod);
    if (kind === 'secret' && refs.secrets.has(name)) return true;
    if (kind === 'configmap' && refs.configMaps.has(name)) return true;
    if (kind === 'serviceaccount' && refs.serviceAccount === name) return true;
  }
  return false;
}

export function authorizeNode(store: Store, node: string, a: Attributes): Decision {
  if (node === '') return deny(`unknown node for user "${a.user}"`);
  const name = requestName(a);
  const noRelation = `no relationship found between node '${node}' and this object`;
  const gr = `${a.group}/${a.resource}`;
  if (gr === '/secrets' || gr === '/configmaps') {
    if (!['get', 'list', 'watch'].includes(a.verb)) return deny('can only read resources of this type');
    if (a.subresource !== '') return deny('cannot read subresource');
    if (a.namespace === '') return deny('can only read namespaced object of this type');
    if (name === '') return deny('No Object name found');
    return related(store, node, a.resource === 'secrets' ? 'secret' : 'configmap', a.namespace, name) ? ALLOW : deny(noRelation);
  }
  if (gr === '/serviceaccounts') {
    if (a.verb !== 'create' || name === '') return deny('can only create tokens for individual service accounts');
    if (a.subresource !== 'token') return deny('can only create token subresource of serviceaccount');
    return related(store, node, 'serviceaccount', a.namespace, name) ? ALLOW : deny(noRelation);
  }
  if (gr === '/persistentvolumeclaims' || gr === '/persistentvolumes') {
    if (a.verb !== 'get') return deny('can only get individual resources of this type');
    return deny(noRelation);
  }
  if (gr === 'coordination.k8s.io/leases') {
    if (!['get', 'create', 'update', 'patch', 'delete'].includes(a.verb)) return deny('can only get, create, update, patch, or delete a node lease');
    if (a.namespace !== 'kube-node-lease') return deny('can only access leases in the "kube-node-lease" system namespace');
    if (a.verb !== 'create' && a.name !== node) return deny('can only access node lease with the same name as the requesting node');
    return ALLOW;
  }
  if (gr === '/nodes') {
    if (a.subresource === '') {
      if (['create', 'update', 'patch'].includes(a.verb)) return ALLOW;
      if (['get', 'list', 'watch'].includes(a.verb)) {
        if (name === node) return ALLOW;
        return deny(name === '' ? `node '${node}' cannot read all nodes, only its own Node object` : `node '${node}' cannot read '${name}', only its own Node object`);
      }
    } else if (a.subresource === 'status' && (a.verb === 'update' || a.verb === 'patch')) return ALLOW;
    return deny('');
  }
  if (gr === '/pods') {
    if (a.subresource === '') {
      if (a.verb === 'get') return related(store, node, 'pod', a.namespace, a.name) ? ALLOW : deny(noRelation);
      if (a.verb === 'list' || a.verb === 'watch') {
        if (a.fieldEquals.some((f) => f.field === 'spec.nodeName' && f.value === node)) return ALLOW;
        if (name !== '') return related(store, node, 'pod', a.namespace, name) ? ALLOW : deny(noRelation);
        return deny('can only list/watch pods with spec.nodeName field selector');
      }
      if (a.verb === 'create' || a.verb === 'delete') return ALLOW;
    } else if (a.subresource === 'status' && (a.verb === 'update' || a.verb === 'patch')) return ALLOW;
    else if (a.subresource === 'eviction' && a.verb === 'create') return ALLOW;
    return deny('');
  }
  const combined = a.subresource === '' ? a.resource : `${a.resource}/${a.subresource}`;
  if (NODE_RULES.some((r) => r.group === a.group && r.resources.includes(combined) && r.verbs.includes(a.verb))) return ALLOW;
  return deny('');
}

/** The 403 of a denied request (responsewriters.ForbiddenStatusError). */
export function forbiddenRequest(a: Attributes, reason: string): StatusError {
  const res = a.subresource === '' ? a.resource : `${a.resource}/${a.subresource}`;
  const scope = a.namespace !== '' ? `in the namespace "${a.namespace}"` : 'at the cluster scope';
  const msg = `User "${a.user}" cannot ${a.verb} resource "${res}" in API group "${a.group}" ${scope}${reason !== '' ? `: ${reason}` : ''}`;
  return forbidden(a.group, a.resource, a.name, msg);
}

// ------------------------------------------------------------------ NodeRestriction

export interface AdmissionRequest {
  operation: 'create' | 'update' | 'delete';
  group: string;
  resource: string;
  subresource: string;
  namespace: string;
  /** The URL's name (empty on create). */
  name: string;
  /** The object sent (create; the TokenRequest for tokens). */
  object?: Obj;
}

/** NodeRestriction: throws a 403 (or the 404 of a missing object) when a node oversteps. */
export function admitNodeRequest(store: Store, node: string, r: AdmissionRequest): void {
  const objName = String(r.object?.['metadata']?.['name'] || r.object?.['metadata']?.['generateName'] || '');
  const who = r.name !== '' ? r.name : objName !== '' ? objName : 'Unknown';
  const refuse = (msg: string): never => {
    throw forbidden(r.group, r.resource, who, msg);
  };
  if (node === '') refuse(`could not determine node from user "system:node:"`);
  const gr = `${r.group}/${r.resource}`;
  if (gr === '/pods') {
    if (r.subresource === 'status') {
      if (r.operation !== 'update') refuse(`unexpected operation "${r.operation}"`);
      const old = store.get('pods', r.namespace, r.name);
      if (old && old['spec']?.['nodeName'] !== node) refuse(`node "${node}" can only update pod status for pods with spec.nodeName set to itself`);
      return;
    }
    if (r.subresource === 'eviction') {
      const old = store.get('pods', r.namespace, r.name);
      if (old && old['spec']?.['nodeName'] !== node) refuse(`node ${node} can only evict pods with spec.nodeName set to itself`);
      return;
    }
    if (r.subresource !== '') refuse(`unexpected pod subresource "${r.subresource}", only 'status' and 'eviction' are allowed`);
    if (r.operation === 'delete') {
      const old = store.get('pods', r.namespace, r.name);
      if (old && old['spec']?.['nodeName'] !== node) refuse(`node "${node}" can only delete pods with spec.nodeName set to itself`);
      return;
    }
    if (r.operation !== 'create') refuse(`unexpected operation "${r.operation}", node "${node}" can only create and delete mirror pods`);
    const pod = r.object ?? {};
    const ann = pod['metadata']?.['annotations'];
    if (!ann || typeof ann !== 'object' || ann['kubernetes.io/config.mirror'] === undefined) refuse(`pod does not have "kubernetes.io/config.mirror" annotation, node "${node}" can only create mirror pods`);
    if (pod['spec']?.['nodeName'] !== node) refuse(`node "${node}" can only create pods with spec.nodeName set to itself`);
    const owners = Array.isArray(pod['metadata']?.['ownerReferences']) ? (pod['metadata']['ownerReferences'] as Obj[]) : [];
    if (owners.length > 1) refuse(`node "${node}" can only create pods with a single owner reference set to itself`);
    if (owners.length === 0) refuse(`node "${node}" can only create pods with an owner reference set to itself`);
    const o = owners[0]!;
    if (o['apiVersion'] !== 'v1' || o['kind'] !== 'Node' || o['name'] !== node) refuse(`node "${node}" can only create pods with an owner reference set to itself`);
    if (o['controller'] !== true) refuse(`node "${node}" can only create pods with a controller owner reference set to itself`);
    if (o['blockOwnerDeletion'] === true) refuse(`node "${node}" must not set blockOwnerDeletion on an owner reference`);
    const nodeObj = store.get('nodes', '', node);
    if (!nodeObj) throw notFoundError('', 'nodes', node);
    if (o['uid'] !== nodeObj['metadata']['uid']) refuse(`node ${node} UID mismatch: expected ${String(o['uid'])} got ${String(nodeObj['metadata']['uid'])}`);
    const refs = podReferences(pod);
    if (refs.serviceAccount !== undefined) refuse(`node "${node}" can not create pods that reference a service account`);
    if (refs.secrets.size > 0) refuse(`node "${node}" can not create pods that reference secrets`);
    if (refs.configMaps.size > 0) refuse(`node "${node}" can not create pods that reference configmaps`);
    for (const v of Array.isArray(pod['spec']?.['volumes']) ? (pod['spec']['volumes'] as Obj[]) : []) if (v?.['persistentVolumeClaim']) refuse(`node "${node}" can not create pods that reference persistentvolumeclaims`);
    return;
  }
  if (gr === '/nodes') {
    const target = r.operation === 'create' ? objName : r.name;
    if (target !== node) refuse(`node "${node}" is not allowed to modify node "${target}"`);
    if (r.operation === 'create' && r.object?.['spec']?.['configSource']) refuse(`node "${node}" is not allowed to create pods with a non-nil configSource`);
    return;
  }
  if (gr === '/serviceaccounts') {
    if (r.operation !== 'create' || r.subresource !== 'token') return;
    const ref = r.object?.['spec']?.['boundObjectRef'];
    if (!ref || ref['apiVersion'] !== 'v1' || ref['kind'] !== 'Pod' || !ref['name']) refuse('node requested token not bound to a pod');
    if (!ref['uid']) refuse('node requested token with a pod binding without a uid');
    const pod = store.get('pods', r.namespace, String(ref['name']));
    if (!pod) throw notFoundError('', 'pods', String(ref['name']));
    if (pod['metadata']['uid'] !== ref['uid']) refuse(`the UID in the bound object reference (${String(ref['uid'])}) does not match the UID in record. The object might have been deleted and then recreated`);
    if (pod['spec']?.['nodeName'] !== node) refuse('node requested token bound to a pod scheduled on a different node');
    return;
  }
  if (gr === 'coordination.k8s.io/leases') {
    if (r.namespace !== 'kube-node-lease') refuse('can only access leases in the "kube-node-lease" system namespace');
    if ((r.operation === 'create' ? objName : r.name) !== node) refuse('can only access node lease with the same name as the requesting node');
  }
}
