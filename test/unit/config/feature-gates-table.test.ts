/**
 * The kubelet's whole feature gate table (v1.35): real nodes' configuration files name gates
 * beyond the node ones, and a kubelet accepts every gate it registers.
 */
import { describe, expect, it } from 'vitest';
import { featureGateProblem, featureGateWarning, isFeatureEnabled, KNOWN_FEATURE_GATES, KUBERNETES_VERSION, parseFeatureGates } from '../../../src/config/feature-gates.js';
import { resolveConfig } from '../../../src/config/resolve.js';

const HEADER = { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration' };

/** Gate names set in public example configurations of node distributions, by source. */
const PUBLIC_EXAMPLES: ReadonlyArray<readonly [source: string, names: readonly string[]]> = [
  // awslabs/amazon-eks-ami templates/al2/runtime/kubelet-config.json (EKS AL2 nodes)
  ['EKS: amazon-eks-ami templates/al2/runtime/kubelet-config.json', ['RotateKubeletServerCertificate', 'NodeSwap']],
  // CIS EKS / Kubernetes benchmark checks of kubelet configs (cis_eks 3.2.11, cis_k8s 4.2.12)
  ['CIS benchmark rules for EKS and kubeadm kubelets', ['RotateKubeletServerCertificate']],
  // kubernetes/website feature gate pages the kubelet docs link for node setups
  ['kubernetes.io kubelet docs: --feature-gates=GracefulNodeShutdown=true', ['GracefulNodeShutdown']],
  // names the issue reports from kept /var/lib/kubelet/config.yaml files
  ['issue 14 (real configs)', ['RotateKubeletServerCertificate', 'ImageMaximumGCAge']],
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

  it.each(PUBLIC_EXAMPLES)('accepts every gate name of %s', (_source, names) => {
    for (const name of names) {
      expect(featureGateProblem(name, KNOWN_FEATURE_GATES[name]?.default ?? true), name).toBeUndefined();
    }
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
