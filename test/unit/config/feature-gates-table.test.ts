/**
 * The kubelet's whole feature gate table (v1.35): real nodes' configuration files name gates
 * beyond the node ones, and a kubelet accepts every gate it registers.
 */
import { describe, expect, it } from 'vitest';
import { featureGateProblem, featureGateWarning, isFeatureEnabled, KNOWN_FEATURE_GATES, KUBERNETES_VERSION, parseFeatureGates } from '../../../src/config/feature-gates.js';
import { resolveConfig } from '../../../src/config/resolve.js';

const HEADER = { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration' };

/**
 * Gates set in public example configurations of node distributions, with the values they set.
 * A v1.35 kubelet starts with most of them; `refused` names those it refuses too
 * (the example was written for an older release whose gates have since been removed, or it
 * sets a gate locked to its default): nodelet must refuse them in the kubelet's words, never
 * silently drop them.
 */
interface PublicExample {
  readonly source: string;
  /** Every gate the example sets, with its value. */
  readonly gates: Readonly<Record<string, boolean>>;
  /** Of those, the ones a v1.35 kubelet refuses, with its message. */
  readonly refused?: Readonly<Record<string, string>>;
}
const unrecognized = (name: string): string => `unrecognized feature gate: ${name}`;
const PUBLIC_EXAMPLES: readonly PublicExample[] = [
  {
    source: 'EKS: awslabs/amazon-eks-ami templates/al2/runtime/kubelet-config.json',
    gates: { RotateKubeletServerCertificate: true, NodeSwap: false },
    refused: { NodeSwap: 'cannot set feature gate NodeSwap to false, feature is locked to true' },
  },
  { source: 'CIS benchmark rules for EKS and kubeadm kubelets (cis_eks 3.2.11, cis_k8s 4.2.12)', gates: { RotateKubeletServerCertificate: true } },
  { source: 'kubernetes.io feature gate page: kubelet --feature-gates=GracefulNodeShutdown=true', gates: { GracefulNodeShutdown: true } },
  { source: 'issue 14 (kept /var/lib/kubelet/config.yaml files)', gates: { RotateKubeletServerCertificate: true, ImageMaximumGCAge: true } },
  // siderolabs/talos website knowledge base: "Disabling GracefulNodeShutdown on a node"
  { source: 'Talos: machine.kubelet.extraArgs feature-gates', gates: { GracefulNodeShutdown: false } },
  // k3s and k3d documentation and node setups: rootless mode, swap, resize, image volumes
  {
    source: 'k3s: --kubelet-arg=feature-gates=...',
    gates: { KubeletInUserNamespace: true, NodeSwap: true, InPlacePodVerticalScaling: true, ImageVolume: true, LocalStorageCapacityIsolationFSQuotaMonitoring: true },
  },
  // a kubeadm chart's featureGates for every component, the kubelet's KubeletConfiguration included
  {
    source: 'kubeadm: KubeletConfiguration featureGates of a kubeadm cluster chart',
    gates: { CustomCPUCFSQuotaPeriod: true, VolumeAttributesClass: true, MutatingAdmissionPolicy: true, ListFromCacheSnapshot: true, DisableAllocatorDualWrite: true },
  },
  // Bottlerocket's settings.kubernetes.feature-gates, as documented by a Bottlerocket-style node agent
  { source: 'Bottlerocket: settings.kubernetes.feature-gates', gates: { ImageVolume: true, MemoryQoS: true } },
  // a GKE 1.26 node's /home/kubernetes/kubelet-config.yaml (captured in a compliance tool's test fixtures)
  {
    source: 'GKE 1.26 node: /home/kubernetes/kubelet-config.yaml',
    gates: {
      CSIMigrationGCE: true,
      DisableKubeletCloudCredentialProviders: false,
      ExecProbeTimeout: false,
      InTreePluginAWSUnregister: true,
      InTreePluginAzureDiskUnregister: true,
      InTreePluginvSphereUnregister: true,
      RotateKubeletServerCertificate: true,
    },
    refused: {
      CSIMigrationGCE: unrecognized('CSIMigrationGCE'),
      DisableKubeletCloudCredentialProviders: unrecognized('DisableKubeletCloudCredentialProviders'),
      InTreePluginAWSUnregister: unrecognized('InTreePluginAWSUnregister'),
      InTreePluginAzureDiskUnregister: unrecognized('InTreePluginAzureDiskUnregister'),
      InTreePluginvSphereUnregister: unrecognized('InTreePluginvSphereUnregister'),
      ExecProbeTimeout: 'cannot set feature gate ExecProbeTimeout to false, feature is locked to true',
    },
  },
  // an AKSUbuntu-1804 (2022) node's kubelet command line (same fixtures)
  {
    source: 'AKS 2022 node: kubelet --feature-gates',
    gates: { CSIMigration: true, CSIMigrationAzureDisk: true, CSIMigrationAzureFile: true, DelegateFSGroupToCSIDriver: true, DisableAcceleratorUsageMetrics: false, DynamicKubeletConfig: false },
    refused: Object.fromEntries(
      ['CSIMigration', 'CSIMigrationAzureDisk', 'CSIMigrationAzureFile', 'DelegateFSGroupToCSIDriver', 'DisableAcceleratorUsageMetrics', 'DynamicKubeletConfig'].map((n) => [n, unrecognized(n)]),
    ),
  },
];

describe(`the feature gate table (Kubernetes ${KUBERNETES_VERSION})`, () => {
  it('holds every gate a kubelet registers: its own, component-base, apiserver, client-go', () => {
    for (const name of [
      'ContainerCheckpoint', // kubelet (pkg/features)
      'RotateKubeletServerCertificate',
      'CustomCPUCFSQuotaPeriod', // the gate's string, not the Go identifier CPUCFSQuotaPeriod
      'RuntimeClassInImageCriApi',
      'APIServerTracing', // apiserver
      'WatchListClient', // client-go
      'ContextualLogging', // component-base logs
      'LoggingBetaOptions',
      'InformerMetrics', // component-base metrics
      'AllAlpha',
      'AllBeta',
    ]) {
      expect(featureGateProblem(name, KNOWN_FEATURE_GATES[name]?.default ?? false), name).toBeUndefined();
    }
    expect(Object.keys(KNOWN_FEATURE_GATES).length).toBeGreaterThan(200);
    expect(featureGateProblem('CPUCFSQuotaPeriod', true)).toBe('unrecognized feature gate: CPUCFSQuotaPeriod');
  });

  it.each([
    ['RotateKubeletServerCertificate', 'BETA', true, false],
    ['ImageMaximumGCAge', 'GA', true, true],
    ['KubeletCrashLoopBackOffMax', 'BETA', true, false],
    ['MemoryQoS', 'ALPHA', false, false],
    ['KubeletPodResourcesListUseActivePods', 'DEPRECATED', true, false],
    ['AllowOverwriteTerminationGracePeriodSeconds', 'DEPRECATED', false, true],
    ['VolumeAttributesClass', 'GA', true, false], // locked only from 1.36
    ['InformerResourceVersion', 'GA', true, false],
  ])('%s is %s, default %s, locked %s', (name, stage, def, locked) => {
    expect(KNOWN_FEATURE_GATES[name]).toEqual({ stage, default: def, ...(locked ? { lockToDefault: true } : {}) });
  });

  it.each(PUBLIC_EXAMPLES.map((e) => [e.source, e] as const))('%s: what a v1.35 kubelet accepts is accepted, what it refuses is refused in its words', (_source, example) => {
    const refused = example.refused ?? {};
    for (const [name, value] of Object.entries(example.gates)) {
      expect(featureGateProblem(name, value), name).toBe(refused[name]);
    }
    const text = Object.entries(example.gates).map(([n, v]) => `${n}=${v}`).join(',');
    if (Object.keys(refused).length > 0) expect(() => parseFeatureGates(text)).toThrow(Object.values(refused)[0]);
    else expect(parseFeatureGates(text)).toEqual(example.gates);
  });

  it('refuses a value a v1.35 kubelet refuses: NodeSwap=false (EKS AL2) is locked to true', () => {
    expect(featureGateProblem('NodeSwap', false)).toBe('cannot set feature gate NodeSwap to false, feature is locked to true');
  });

  it('names an unknown gate as the kubelet does, and a removed one as removed', () => {
    expect(featureGateProblem('NoSuchGate', true)).toBe('unrecognized feature gate: NoSuchGate');
    expect(featureGateProblem('LoadBalancerIPMode', true)).toBe(
      `unrecognized feature gate: LoadBalancerIPMode (it was removed from Kubernetes before ${KUBERNETES_VERSION})`,
    );
    expect(() => parseFeatureGates('CronJobsScheduledAnnotation=true')).toThrow(/unrecognized feature gate: CronJobsScheduledAnnotation \(it was removed/);
  });

  it("warns in the kubelet's words when a GA or deprecated gate is set", () => {
    expect(featureGateWarning('ImageMaximumGCAge', true)).toBe('Setting GA feature gate ImageMaximumGCAge=true. It will be removed in a future release.');
    expect(featureGateWarning('KMSv1', false)).toBe('Setting deprecated feature gate KMSv1=false. It will be removed in a future release.');
    expect(featureGateWarning('RotateKubeletServerCertificate', true)).toBeUndefined();
  });

  it('AllBeta switches a beta gate of another component too', () => {
    expect(isFeatureEnabled({ featureGates: {} }, 'WatchListClient')).toBe(true);
    expect(isFeatureEnabled({ featureGates: { AllBeta: false } }, 'WatchListClient')).toBe(false);
  });
});

describe('loading a real node configuration', () => {
  it('loads, with the GA gate warned about (file and field) and no problem', () => {
    const file = '/var/lib/kubelet/config.yaml';
    const r = resolveConfig([
      { origin: file, doc: { ...HEADER, featureGates: { RotateKubeletServerCertificate: true, ImageMaximumGCAge: true } }, requireHeader: true },
      { origin: 'flag', doc: { featureGates: { KMSv1: false } }, requireHeader: false },
    ]);
    expect(r.problems).toEqual([]);
    expect(r.config.featureGates).toEqual({ RotateKubeletServerCertificate: true, ImageMaximumGCAge: true, KMSv1: false });
    expect(r.warnings).toEqual([
      { file, field: 'featureGates.ImageMaximumGCAge', message: 'Setting GA feature gate ImageMaximumGCAge=true. It will be removed in a future release.' },
      { file: 'flag', field: 'featureGates.KMSv1', message: 'Setting deprecated feature gate KMSv1=false. It will be removed in a future release.' },
    ]);
  });

  it('stops on a locked gate set against its default, naming file and field', () => {
    const file = '/etc/eks/kubelet-config.json';
    const r = resolveConfig([{ origin: file, doc: { ...HEADER, featureGates: { NodeSwap: false } }, requireHeader: true }]);
    expect(r.problems).toEqual([{ file, field: 'featureGates.NodeSwap', message: 'cannot set feature gate NodeSwap to false, feature is locked to true' }]);
    expect(r.warnings).toEqual([]);
  });
});
