/**
 * The resource types the test control plane serves (issue 5): where they live (group,
 * version, scope), their kinds, subresources, verbs and schemas. Discovery, OpenAPI,
 * routing and the write strategies all read this one table.
 */
import type { SchemaNode } from './ssa/schema-types.js';
import { CSR_SCHEMA } from './certificates.js';
import { RUNTIME_CLASS_SCHEMA } from './runtime-classes.js';
import { CONFIG_MAP_SCHEMA, EVENT_SCHEMA, LEASE_SCHEMA, SECRET_SCHEMA, SERVICE_ACCOUNT_SCHEMA, SERVICE_SCHEMA, NAMESPACE_SCHEMA, NODE_SCHEMA, POD_SCHEMA, SUBJECT_ACCESS_REVIEW_SCHEMA, TOKEN_REVIEW_SCHEMA } from './schema.js';

export interface ResourceDef {
  group: string; // '' for core
  version: string;
  resource: string; // plural, used in URLs
  singular: string;
  kind: string;
  namespaced: boolean;
  /** Subresources with their verbs (status: get, patch, update). */
  subresources: string[];
  verbs: string[];
  shortNames?: string[];
  categories?: string[];
  /** Virtual: an operation object answered at once (create only), never stored. */
  virtual?: boolean;
  schema: SchemaNode;
}

const OBJECT_VERBS = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'];

export const RESOURCES: ResourceDef[] = [
  { group: '', version: 'v1', resource: 'namespaces', singular: 'namespace', kind: 'Namespace', namespaced: false, subresources: ['status'], verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'], shortNames: ['ns'], schema: NAMESPACE_SCHEMA },
  { group: '', version: 'v1', resource: 'nodes', singular: 'node', kind: 'Node', namespaced: false, subresources: ['status'], verbs: OBJECT_VERBS, shortNames: ['no'], schema: NODE_SCHEMA },
  { group: '', version: 'v1', resource: 'pods', singular: 'pod', kind: 'Pod', namespaced: true, subresources: ['status', 'ephemeralcontainers'], verbs: OBJECT_VERBS, shortNames: ['po'], categories: ['all'], schema: POD_SCHEMA },
  { group: '', version: 'v1', resource: 'events', singular: 'event', kind: 'Event', namespaced: true, subresources: [], verbs: OBJECT_VERBS, shortNames: ['ev'], schema: EVENT_SCHEMA },
  { group: '', version: 'v1', resource: 'configmaps', singular: 'configmap', kind: 'ConfigMap', namespaced: true, subresources: [], verbs: OBJECT_VERBS, shortNames: ['cm'], schema: CONFIG_MAP_SCHEMA },
  { group: '', version: 'v1', resource: 'secrets', singular: 'secret', kind: 'Secret', namespaced: true, subresources: [], verbs: OBJECT_VERBS, schema: SECRET_SCHEMA },
  { group: '', version: 'v1', resource: 'serviceaccounts', singular: 'serviceaccount', kind: 'ServiceAccount', namespaced: true, subresources: ['token'], verbs: OBJECT_VERBS, shortNames: ['sa'], schema: SERVICE_ACCOUNT_SCHEMA },
  { group: '', version: 'v1', resource: 'services', singular: 'service', kind: 'Service', namespaced: true, subresources: ['status'], verbs: ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'], shortNames: ['svc'], categories: ['all'], schema: SERVICE_SCHEMA },
  { group: 'coordination.k8s.io', version: 'v1', resource: 'leases', singular: 'lease', kind: 'Lease', namespaced: true, subresources: [], verbs: OBJECT_VERBS, schema: LEASE_SCHEMA },
  { group: 'certificates.k8s.io', version: 'v1', resource: 'certificatesigningrequests', singular: 'certificatesigningrequest', kind: 'CertificateSigningRequest', namespaced: false, subresources: ['approval', 'status'], verbs: OBJECT_VERBS, shortNames: ['csr'], schema: CSR_SCHEMA },
  { group: 'node.k8s.io', version: 'v1', resource: 'runtimeclasses', singular: 'runtimeclass', kind: 'RuntimeClass', namespaced: false, subresources: [], verbs: ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'], schema: RUNTIME_CLASS_SCHEMA },
  { group: 'authentication.k8s.io', version: 'v1', resource: 'tokenreviews', singular: 'tokenreview', kind: 'TokenReview', namespaced: false, subresources: [], verbs: ['create'], virtual: true, schema: TOKEN_REVIEW_SCHEMA },
  { group: 'authorization.k8s.io', version: 'v1', resource: 'subjectaccessreviews', singular: 'subjectaccessreview', kind: 'SubjectAccessReview', namespaced: false, subresources: [], verbs: ['create'], virtual: true, schema: SUBJECT_ACCESS_REVIEW_SCHEMA },
];

export function apiVersionOf(def: ResourceDef): string {
  return def.group === '' ? def.version : `${def.group}/${def.version}`;
}

/** The group-versions served, core first. */
export function groupVersions(): Array<{ group: string; version: string }> {
  const seen = new Map<string, { group: string; version: string }>();
  for (const r of RESOURCES) seen.set(apiVersionOf(r), { group: r.group, version: r.version });
  return [...seen.values()];
}

export function findResource(group: string, version: string, resource: string): ResourceDef | undefined {
  return RESOURCES.find((r) => r.group === group && r.version === version && r.resource === resource);
}

export function resourcesOf(group: string, version: string): ResourceDef[] {
  return RESOURCES.filter((r) => r.group === group && r.version === version);
}
