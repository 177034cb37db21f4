/**
 * A Pod-shaped schema with the upstream markers the tests rely on (containers a map list keyed
 * by name, ports keyed by containerPort+protocol, args atomic, finalizers a set, labels a
 * granular map, tolerations atomic, nodeSelector an atomic map). Kept here so the engine's
 * tests do not depend on the server's schema file.
 */
import type { SchemaNode } from '../../../control-plane/ssa/index.js';

const S: SchemaNode = { kind: 'scalar' };
const stringMap: SchemaNode = { kind: 'struct', fields: {}, open: true, values: S };

const container: SchemaNode = {
  kind: 'struct',
  fields: {
    name: S,
    image: S,
    imagePullPolicy: S,
    args: { kind: 'list', listType: 'atomic', items: S },
    ports: {
      kind: 'list',
      listType: 'map',
      keys: ['containerPort', 'protocol'],
      items: { kind: 'struct', fields: { containerPort: S, protocol: S, name: S } },
    },
    resources: {
      kind: 'struct',
      fields: { limits: stringMap, requests: stringMap },
    },
  },
};

export const podSchema: SchemaNode = {
  kind: 'struct',
  fields: {
    apiVersion: S,
    kind: S,
    metadata: {
      kind: 'struct',
      fields: {
        name: S,
        namespace: S,
        uid: S,
        resourceVersion: S,
        creationTimestamp: S,
        generation: S,
        labels: stringMap,
        annotations: stringMap,
        finalizers: { kind: 'list', listType: 'set', items: S },
      },
    },
    spec: {
      kind: 'struct',
      fields: {
        replicas: S,
        nodeName: S,
        containers: { kind: 'list', listType: 'map', keys: ['name'], items: container },
        tolerations: { kind: 'list', listType: 'atomic', items: { kind: 'struct', fields: { key: S, operator: S, effect: S } } },
        nodeSelector: { kind: 'struct', fields: {}, open: true, values: S, elementType: 'atomic' },
        securityContext: { kind: 'struct', fields: { runAsUser: S, runAsGroup: S }, elementType: 'atomic' },
      },
    },
    status: {
      kind: 'struct',
      fields: {
        phase: S,
        conditions: { kind: 'list', listType: 'map', keys: ['type'], items: { kind: 'struct', fields: { type: S, status: S } } },
      },
    },
  },
};
