/**
 * Discovery and OpenAPI documents (what kubectl reads before anything else, FACTS.md
 * "kubectl against a control plane of your own"): /version, /api, /apis, the group-version
 * resource lists, and an OpenAPI v3 index with one document per group-version whose write
 * operations list the `fieldValidation` query parameter, so kubectl leaves field validation
 * to this server.
 */
import { RESOURCES, apiVersionOf, groupVersions, resourcesOf, type ResourceDef } from './resources.js';
import type { SchemaNode } from './ssa/schema-types.js';

export const SERVER_VERSION = { major: '1', minor: '32', gitVersion: 'v1.32.0-nodelet-test', gitCommit: '0000000000000000000000000000000000000000', gitTreeState: 'clean', buildDate: '2026-01-01T00:00:00Z', goVersion: 'go1.23.0', compiler: 'gc', platform: 'linux/amd64' };

export function apiVersions(serverAddress: string): object {
  return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress }] };
}

function groupDoc(group: string): object {
  const versions = groupVersions()
    .filter((g) => g.group === group)
    .map((g) => ({ groupVersion: `${group}/${g.version}`, version: g.version }));
  return { name: group, versions, preferredVersion: versions[0] };
}

export function apiGroupList(): object {
  const groups = [...new Set(RESOURCES.filter((r) => r.group !== '').map((r) => r.group))];
  return { kind: 'APIGroupList', apiVersion: 'v1', groups: groups.map(groupDoc) };
}

export function apiGroup(group: string): object | undefined {
  if (!RESOURCES.some((r) => r.group === group && group !== '')) return undefined;
  return { kind: 'APIGroup', apiVersion: 'v1', ...groupDoc(group) };
}

export function apiResourceList(group: string, version: string): object | undefined {
  const defs = resourcesOf(group, version);
  if (defs.length === 0) return undefined;
  const resources: object[] = [];
  for (const d of defs) {
    resources.push({
      name: d.resource,
      singularName: d.singular,
      namespaced: d.namespaced,
      kind: d.kind,
      verbs: d.verbs,
      ...(d.shortNames ? { shortNames: d.shortNames } : {}),
      ...(d.categories ? { categories: d.categories } : {}),
    });
    for (const s of d.subresources) {
      // serviceaccounts/token is a create-only TokenRequest (issue 27).
      if (s === 'token') resources.push({ name: `${d.resource}/token`, singularName: '', namespaced: d.namespaced, group: 'authentication.k8s.io', version: 'v1', kind: 'TokenRequest', verbs: ['create'] });
      else resources.push({ name: `${d.resource}/${s}`, singularName: '', namespaced: d.namespaced, kind: d.kind, verbs: ['get', 'patch', 'update'] });
    }
  }
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: group === '' ? version : `${group}/${version}`, resources };
}

function gvPath(g: { group: string; version: string }): string {
  return g.group === '' ? `api/${g.version}` : `apis/${g.group}/${g.version}`;
}

export function openApiIndex(): object {
  const paths: Record<string, object> = {};
  for (const g of groupVersions()) paths[gvPath(g)] = { serverRelativeURL: `/openapi/v3/${gvPath(g)}?hash=${g.group || 'core'}${g.version}` };
  return { paths };
}

function schemaToOpenApi(node: SchemaNode): object {
  switch (node.kind) {
    case 'scalar':
      return {};
    case 'list': {
      const out: Record<string, unknown> = { type: 'array', items: schemaToOpenApi(node.items), 'x-kubernetes-list-type': node.listType };
      if (node.keys) out['x-kubernetes-list-map-keys'] = node.keys;
      return out;
    }
    case 'struct': {
      const out: Record<string, unknown> = { type: 'object' };
      const props: Record<string, object> = {};
      for (const [k, v] of Object.entries(node.fields)) props[k] = schemaToOpenApi(v);
      if (Object.keys(props).length > 0) out['properties'] = props;
      if (node.open) out['additionalProperties'] = node.values ? schemaToOpenApi(node.values) : {};
      if (node.elementType) out['x-kubernetes-map-type'] = node.elementType;
      return out;
    }
  }
}

const WRITE_PARAMS = ['dryRun', 'fieldManager', 'fieldValidation'].map((name) => ({ name, in: 'query', schema: { type: 'string', uniqueItems: true } }));

/** The OpenAPI v3 document of one group-version ("api/v1" or "apis/<group>/<version>"). */
export function openApiDocument(path: string): object | undefined {
  const g = groupVersions().find((x) => gvPath(x) === path);
  if (!g) return undefined;
  const paths: Record<string, object> = {};
  const schemas: Record<string, object> = {};
  const prefix = `/${path}`;
  for (const d of resourcesOf(g.group, g.version)) {
    const gvk = { group: d.group, version: d.version, kind: d.kind };
    const ref = { $ref: `#/components/schemas/${schemaName(d)}` };
    const op = (action: string, params: object[] = []): object => ({
      'x-kubernetes-action': action,
      'x-kubernetes-group-version-kind': gvk,
      parameters: params,
      responses: { '200': { description: 'OK', content: { 'application/json': { schema: ref } } } },
    });
    const patchParams = [...WRITE_PARAMS, { name: 'force', in: 'query', schema: { type: 'boolean' } }];
    const coll = d.namespaced ? `${prefix}/namespaces/{namespace}/${d.resource}` : `${prefix}/${d.resource}`;
    if (d.virtual) paths[coll] = { post: op('post', WRITE_PARAMS) };
    else {
      paths[coll] = { get: op('list'), post: op('post', WRITE_PARAMS), delete: op('deletecollection') };
      paths[`${coll}/{name}`] = { get: op('get'), put: op('put', WRITE_PARAMS), patch: op('patch', patchParams), delete: op('delete') };
      for (const s of d.subresources) paths[`${coll}/{name}/${s}`] = s === 'token' ? { post: op('post', WRITE_PARAMS) } : { get: op('get'), put: op('put', WRITE_PARAMS), patch: op('patch', patchParams) };
    }
    schemas[schemaName(d)] = { ...schemaToOpenApi(d.schema), 'x-kubernetes-group-version-kind': [gvk] };
  }
  return { openapi: '3.0.0', info: { title: 'Kubernetes', version: SERVER_VERSION.gitVersion }, paths, components: { schemas } };
}

function schemaName(d: ResourceDef): string {
  const g = d.group === '' ? 'core' : d.group.split('.')[0]!;
  return `io.k8s.api.${g}.${d.version}.${d.kind}`;
}

export { apiVersionOf };
