/**
 * Field schemas of the kinds the test control plane serves, with the merge markers upstream
 * publishes (spec: "Merge strategy markers"). Used for three things: server-side apply
 * (list/map merge and ownership), strategic merge patch (merge keys), and field validation
 * (unknown fields and wrong types). A struct with `open: true` and no `values` is a part the
 * schema does not describe: anything goes there and it merges as unstructured.
 */
import type { SchemaNode } from './ssa/schema-types.js';

export type { SchemaNode } from './ssa/schema-types.js';

const S: SchemaNode = { kind: 'scalar' };
/** A part not described here: accepted as is, merged as unstructured. */
const ANY: SchemaNode = { kind: 'struct', fields: {}, open: true };
const stringMap: SchemaNode = { kind: 'struct', fields: {}, open: true, values: S };
const atomicStrings: SchemaNode = { kind: 'list', listType: 'atomic', items: S };
const setOf = (items: SchemaNode): SchemaNode => ({ kind: 'list', listType: 'set', items });
const struct = (fields: Record<string, SchemaNode>, extra: Partial<{ elementType: 'atomic' | 'granular' }> = {}): SchemaNode => ({ kind: 'struct', fields, ...extra });
const mapList = (keys: string[], items: SchemaNode): SchemaNode => ({ kind: 'list', listType: 'map', keys, items });
const atomicList = (items: SchemaNode): SchemaNode => ({ kind: 'list', listType: 'atomic', items });

export const OBJECT_META_SCHEMA: SchemaNode = struct({
  name: S,
  generateName: S,
  namespace: S,
  selfLink: S,
  uid: S,
  resourceVersion: S,
  generation: S,
  creationTimestamp: S,
  deletionTimestamp: S,
  deletionGracePeriodSeconds: S,
  labels: stringMap,
  annotations: stringMap,
  finalizers: setOf(S),
  ownerReferences: mapList(['uid'], struct({ apiVersion: S, kind: S, name: S, uid: S, controller: S, blockOwnerDeletion: S })),
  managedFields: atomicList(ANY),
});

const seccompProfile = struct({ type: S, localhostProfile: S });
const securityContext = struct({
  privileged: S,
  runAsUser: S,
  runAsGroup: S,
  runAsNonRoot: S,
  readOnlyRootFilesystem: S,
  allowPrivilegeEscalation: S,
  procMount: S,
  capabilities: struct({ add: atomicStrings, drop: atomicStrings }),
  seLinuxOptions: ANY,
  windowsOptions: ANY,
  seccompProfile,
  appArmorProfile: ANY,
});
const envVar = struct({ name: S, value: S, valueFrom: ANY });
const containerPort = struct({ name: S, hostPort: S, containerPort: S, protocol: S, hostIP: S });
const volumeMount = struct({ name: S, readOnly: S, recursiveReadOnly: S, mountPath: S, subPath: S, mountPropagation: S, subPathExpr: S });
const resources = struct({ limits: stringMap, requests: stringMap, claims: atomicList(ANY) });
const container = struct({
  name: S,
  image: S,
  command: atomicStrings,
  args: atomicStrings,
  workingDir: S,
  ports: mapList(['containerPort', 'protocol'], containerPort),
  envFrom: atomicList(ANY),
  env: mapList(['name'], envVar),
  resources,
  resizePolicy: atomicList(ANY),
  restartPolicy: S,
  volumeMounts: mapList(['mountPath'], volumeMount),
  volumeDevices: atomicList(ANY),
  livenessProbe: ANY,
  readinessProbe: ANY,
  startupProbe: ANY,
  lifecycle: ANY,
  terminationMessagePath: S,
  terminationMessagePolicy: S,
  imagePullPolicy: S,
  securityContext,
  stdin: S,
  stdinOnce: S,
  tty: S,
  targetContainerName: S,
});
const toleration = struct({ key: S, operator: S, value: S, effect: S, tolerationSeconds: S });
const podCondition = struct({ type: S, status: S, reason: S, message: S, lastProbeTime: S, lastTransitionTime: S, observedGeneration: S });
const containerStatus = struct({
  name: S,
  state: ANY,
  lastState: ANY,
  ready: S,
  restartCount: S,
  image: S,
  imageID: S,
  containerID: S,
  started: S,
  allocatedResources: stringMap,
  resources: ANY,
  volumeMounts: atomicList(ANY),
  user: ANY,
  allocatedResourcesStatus: atomicList(ANY),
  stopSignal: S,
});

export const POD_SCHEMA: SchemaNode = struct({
  apiVersion: S,
  kind: S,
  metadata: OBJECT_META_SCHEMA,
  spec: struct({
    volumes: mapList(['name'], { kind: 'struct', fields: { name: S }, open: true }),
    initContainers: mapList(['name'], container),
    containers: mapList(['name'], container),
    ephemeralContainers: mapList(['name'], container),
    restartPolicy: S,
    terminationGracePeriodSeconds: S,
    activeDeadlineSeconds: S,
    dnsPolicy: S,
    nodeSelector: { kind: 'struct', fields: {}, open: true, values: S, elementType: 'atomic' },
    serviceAccountName: S,
    serviceAccount: S,
    automountServiceAccountToken: S,
    nodeName: S,
    hostNetwork: S,
    hostPID: S,
    hostIPC: S,
    shareProcessNamespace: S,
    securityContext: struct({
      seLinuxOptions: ANY,
      windowsOptions: ANY,
      runAsUser: S,
      runAsGroup: S,
      runAsNonRoot: S,
      supplementalGroups: atomicStrings,
      supplementalGroupsPolicy: S,
      fsGroup: S,
      sysctls: atomicList(struct({ name: S, value: S })),
      fsGroupChangePolicy: S,
      seccompProfile,
      appArmorProfile: ANY,
      seLinuxChangePolicy: S,
    }),
    imagePullSecrets: mapList(['name'], struct({ name: S })),
    hostname: S,
    subdomain: S,
    affinity: ANY,
    schedulerName: S,
    tolerations: atomicList(toleration),
    hostAliases: mapList(['ip'], struct({ ip: S, hostnames: atomicStrings })),
    priorityClassName: S,
    priority: S,
    dnsConfig: ANY,
    readinessGates: atomicList(ANY),
    runtimeClassName: S,
    enableServiceLinks: S,
    preemptionPolicy: S,
    overhead: stringMap,
    topologySpreadConstraints: atomicList(ANY),
    setHostnameAsFQDN: S,
    os: struct({ name: S }),
    hostUsers: S,
    schedulingGates: mapList(['name'], struct({ name: S })),
    resourceClaims: mapList(['name'], ANY),
    resources,
  }),
  status: struct({
    observedGeneration: S,
    phase: S,
    conditions: mapList(['type'], podCondition),
    message: S,
    reason: S,
    nominatedNodeName: S,
    hostIP: S,
    hostIPs: mapList(['ip'], struct({ ip: S })),
    podIP: S,
    podIPs: mapList(['ip'], struct({ ip: S })),
    startTime: S,
    initContainerStatuses: atomicList(containerStatus),
    containerStatuses: atomicList(containerStatus),
    qosClass: S,
    ephemeralContainerStatuses: atomicList(containerStatus),
    resize: S,
    resourceClaimStatuses: atomicList(ANY),
  }),
});

const taint = struct({ key: S, value: S, effect: S, timeAdded: S });
const nodeCondition = struct({ type: S, status: S, lastHeartbeatTime: S, lastTransitionTime: S, reason: S, message: S });
const nodeAddress = struct({ type: S, address: S });

export const NODE_SCHEMA: SchemaNode = struct({
  apiVersion: S,
  kind: S,
  metadata: OBJECT_META_SCHEMA,
  spec: struct({
    podCIDR: S,
    podCIDRs: setOf(S),
    providerID: S,
    unschedulable: S,
    taints: atomicList(taint),
    configSource: ANY,
    externalID: S,
  }),
  status: struct({
    capacity: stringMap,
    allocatable: stringMap,
    phase: S,
    conditions: mapList(['type'], nodeCondition),
    // Upstream marks addresses patchMergeKey=type but listType=atomic-less: SSA treats them by type.
    addresses: mapList(['type'], nodeAddress),
    daemonEndpoints: struct({ kubeletEndpoint: struct({ Port: S }) }),
    nodeInfo: struct({
      machineID: S,
      systemUUID: S,
      bootID: S,
      kernelVersion: S,
      osImage: S,
      containerRuntimeVersion: S,
      kubeletVersion: S,
      kubeProxyVersion: S,
      operatingSystem: S,
      architecture: S,
      swap: ANY,
    }),
    images: atomicList(struct({ names: atomicStrings, sizeBytes: S })),
    volumesInUse: atomicStrings,
    volumesAttached: atomicList(ANY),
    config: ANY,
    runtimeHandlers: atomicList(ANY),
    features: ANY,
    declaredFeatures: atomicStrings,
  }),
});

export const NAMESPACE_SCHEMA: SchemaNode = struct({
  apiVersion: S,
  kind: S,
  metadata: OBJECT_META_SCHEMA,
  spec: struct({ finalizers: atomicStrings }),
  status: struct({ phase: S, conditions: mapList(['type'], struct({ type: S, status: S, lastTransitionTime: S, reason: S, message: S })) }),
});

const objectReference = struct({ kind: S, namespace: S, name: S, uid: S, apiVersion: S, resourceVersion: S, fieldPath: S });

export const EVENT_SCHEMA: SchemaNode = struct({
  apiVersion: S,
  kind: S,
  metadata: OBJECT_META_SCHEMA,
  involvedObject: objectReference,
  reason: S,
  message: S,
  source: struct({ component: S, host: S }),
  firstTimestamp: S,
  lastTimestamp: S,
  count: S,
  type: S,
  eventTime: S,
  series: struct({ count: S, lastObservedTime: S }),
  action: S,
  related: objectReference,
  reportingComponent: S,
  reportingInstance: S,
});

export const LEASE_SCHEMA: SchemaNode = struct({
  apiVersion: S,
  kind: S,
  metadata: OBJECT_META_SCHEMA,
  spec: struct({
    holderIdentity: S,
    leaseDurationSeconds: S,
    acquireTime: S,
    renewTime: S,
    leaseTransitions: S,
    strategy: S,
    preferredHolder: S,
  }),
});

const reviewSchema = (spec: SchemaNode): SchemaNode => struct({ apiVersion: S, kind: S, metadata: OBJECT_META_SCHEMA, spec, status: ANY });

export const TOKEN_REVIEW_SCHEMA = reviewSchema(struct({ token: S, audiences: atomicStrings }));
export const SUBJECT_ACCESS_REVIEW_SCHEMA = reviewSchema(
  struct({
    resourceAttributes: struct({ namespace: S, verb: S, group: S, version: S, resource: S, subresource: S, name: S, fieldSelector: ANY, labelSelector: ANY }),
    nonResourceAttributes: struct({ path: S, verb: S }),
    user: S,
    groups: atomicStrings,
    extra: ANY,
    uid: S,
  }),
);

// Issue 27: what a node reads (configmaps, secrets, service accounts) and Services.
export const CONFIG_MAP_SCHEMA: SchemaNode = struct({ apiVersion: S, kind: S, metadata: OBJECT_META_SCHEMA, immutable: S, data: stringMap, binaryData: stringMap });
export const SECRET_SCHEMA: SchemaNode = struct({ apiVersion: S, kind: S, metadata: OBJECT_META_SCHEMA, immutable: S, data: stringMap, stringData: stringMap, type: S });
export const SERVICE_ACCOUNT_SCHEMA: SchemaNode = struct({
  apiVersion: S,
  kind: S,
  metadata: OBJECT_META_SCHEMA,
  secrets: mapList(['name'], objectReference),
  imagePullSecrets: atomicList(struct({ name: S })),
  automountServiceAccountToken: S,
});
export const SERVICE_SCHEMA: SchemaNode = struct({
  apiVersion: S,
  kind: S,
  metadata: OBJECT_META_SCHEMA,
  spec: struct({
    ports: mapList(['port', 'protocol'], struct({ name: S, protocol: S, appProtocol: S, port: S, targetPort: S, nodePort: S })),
    selector: { kind: 'struct', fields: {}, open: true, values: S, elementType: 'atomic' },
    clusterIP: S,
    clusterIPs: atomicStrings,
    type: S,
    externalIPs: atomicStrings,
    sessionAffinity: S,
    loadBalancerIP: S,
    loadBalancerSourceRanges: atomicStrings,
    externalName: S,
    externalTrafficPolicy: S,
    healthCheckNodePort: S,
    publishNotReadyAddresses: S,
    sessionAffinityConfig: ANY,
    ipFamilies: atomicStrings,
    ipFamilyPolicy: S,
    allocateLoadBalancerNodePorts: S,
    loadBalancerClass: S,
    internalTrafficPolicy: S,
    trafficDistribution: S,
  }),
  status: struct({ loadBalancer: ANY, conditions: atomicList(ANY) }),
});

const BY_KIND: Record<string, SchemaNode> = {
  ConfigMap: CONFIG_MAP_SCHEMA,
  Secret: SECRET_SCHEMA,
  ServiceAccount: SERVICE_ACCOUNT_SCHEMA,
  Service: SERVICE_SCHEMA,
  Pod: POD_SCHEMA,
  Node: NODE_SCHEMA,
  Namespace: NAMESPACE_SCHEMA,
  Event: EVENT_SCHEMA,
  Lease: LEASE_SCHEMA,
  TokenReview: TOKEN_REVIEW_SCHEMA,
  SubjectAccessReview: SUBJECT_ACCESS_REVIEW_SCHEMA,
};

/** The schema of a kind this server serves, or undefined (unstructured). */
export function fieldSchema(kind: string): SchemaNode | undefined {
  return BY_KIND[kind];
}

/** True when the node accepts any content (a part this schema does not describe). */
export function isUndescribed(node: SchemaNode): boolean {
  return node.kind === 'struct' && node.open === true && node.values === undefined && Object.keys(node.fields).length === 0;
}
