/**
 * Every validation class, on in-memory layers: the problem names the origin of the bad
 * value (file, 'flag' or 'default') and its dotted field path.
 */
import { describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { resolveConfig, type ConfigLayer } from '../../../src/config/resolve.js';
import { ConfigError, formatProblem } from '../../../src/config/validate.js';
import type { ConfigProblem } from '../../../src/config/types.js';

const HEADER = { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration' };
const MAIN = '/etc/kubernetes/kubelet.yaml';
const A = '/etc/kubernetes/kubelet.conf.d/10-a.conf';

function file(origin: string, doc: Record<string, unknown>): ConfigLayer {
  return { origin, doc: { ...HEADER, ...doc }, requireHeader: true };
}

/** [case name, document of MAIN, expected problem (field, message pattern)] */
const PROBLEMS: Array<[string, Record<string, unknown>, string, RegExp]> = [
  // types (pass 1, per file)
  ['port as a string', { port: 'abc' }, 'port', /^must be an integer, got string "abc"$/],
  ['port as a float', { port: 1.5 }, 'port', /^must be an integer, got number 1\.5$/],
  ['port beyond int32', { port: 3_000_000_000 }, 'port', /^must be an integer between -2147483648 and 2147483647/],
  ['bool as a string', { failSwapOn: 'false' }, 'failSwapOn', /^must be true or false, got string "false"$/],
  ['list as a string', { clusterDNS: '10.0.0.10' }, 'clusterDNS', /^must be a list, got string "10\.0\.0\.10"$/],
  ['list item not a string', { clusterDNS: ['10.0.0.10', 53] }, 'clusterDNS', /^item 1 must be a string, got number 53$/],
  ['map value of the wrong type', { featureGates: { ContainerCheckpoint: 'true' } }, 'featureGates.ContainerCheckpoint', /^must be true or false/],
  ['map of lists with a scalar value', { staticPodURLHeader: { 'site-a': 'x' } }, 'staticPodURLHeader.site-a', /^must be a list/],
  ['nested object as a scalar', { authorization: 'Webhook' }, 'authorization', /^must be an object, got string "Webhook"$/],
  ['map as a list', { evictionHard: ['memory.available<100Mi'] }, 'evictionHard', /^must be a map, got a list$/],
  ['duration as a number', { syncFrequency: 10 }, 'syncFrequency', /^must be a duration string such as "10s"/],
  ['duration without unit', { nodeStatusUpdateFrequency: '10' }, 'nodeStatusUpdateFrequency', /^invalid duration: time: missing unit in duration "10"$/],
  ['duration garbage', { authorization: { webhook: { cacheAuthorizedTTL: 'five minutes' } } }, 'authorization.webhook.cacheAuthorizedTTL', /^invalid duration: time: invalid duration "five minutes"$/],
  // ranges (pass 2, on the effective config)
  ['port above 65535', { port: 70000 }, 'port', /^must be between 1 and 65535, inclusive, got 70000$/],
  ['negative port', { port: -1 }, 'port', /^must be between 1 and 65535/],
  ['readOnlyPort above 65535', { readOnlyPort: 65536 }, 'readOnlyPort', /^must be between 0 and 65535/],
  ['healthzPort negative', { healthzPort: -5 }, 'healthzPort', /or 0 to disable \/healthz, got -5$/],
  ['maxPods negative', { maxPods: -1 }, 'maxPods', /^must be greater than 0, got -1$/],
  ['maxContainerRestartPeriod below 1s', { crashLoopBackOff: { maxContainerRestartPeriod: '500ms' } }, 'crashLoopBackOff.maxContainerRestartPeriod', /^must be between 1s and 300s, got "500ms"$/],
  ['maxContainerRestartPeriod above 300s', { crashLoopBackOff: { maxContainerRestartPeriod: '10m' } }, 'crashLoopBackOff.maxContainerRestartPeriod', /^must be between 1s and 300s, got "10m0s"$/],
  ['maxContainerRestartPeriod without its gate', { featureGates: { KubeletCrashLoopBackOffMax: false }, crashLoopBackOff: { maxContainerRestartPeriod: '30s' } }, 'crashLoopBackOff.maxContainerRestartPeriod', /feature gate KubeletCrashLoopBackOffMax is not enabled$/],
  ['imagePullCredentialsVerificationPolicy unknown', { imagePullCredentialsVerificationPolicy: 'Sometimes' }, 'imagePullCredentialsVerificationPolicy', /^unsupported value "Sometimes": must be one of NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify$/],
  ['imagePullCredentialsVerificationPolicy without its gate', { featureGates: { KubeletEnsureSecretPulledImages: false }, imagePullCredentialsVerificationPolicy: 'AlwaysVerify' }, 'imagePullCredentialsVerificationPolicy', /^must not be set if the KubeletEnsureSecretPulledImages feature gate is not enabled$/],
  ['preloadedImagesVerificationAllowlist with another policy', { imagePullCredentialsVerificationPolicy: 'AlwaysVerify', preloadedImagesVerificationAllowlist: ['r.example/team/*'] }, 'preloadedImagesVerificationAllowlist', /^can only be set when imagePullCredentialsVerificationPolicy is NeverVerifyAllowlistedImages$/],
  ['preloadedImagesVerificationAllowlist with a tag', { imagePullCredentialsVerificationPolicy: 'NeverVerifyAllowlistedImages', preloadedImagesVerificationAllowlist: ['r.example/team/app', 'r.example/team/app:v1'] }, 'preloadedImagesVerificationAllowlist', /^item 1: neither tag nor digest is accepted in an image reference: r\.example\/team\/app:v1$/],
  ['preloadedImagesVerificationAllowlist with a wildcard mid-path', { imagePullCredentialsVerificationPolicy: 'NeverVerifyAllowlistedImages', preloadedImagesVerificationAllowlist: ['r.example/*/app'] }, 'preloadedImagesVerificationAllowlist', /^item 0: only a trailing full path segment wildcard/],
  ['preloadedImagesVerificationAllowlist with a partial-segment wildcard', { imagePullCredentialsVerificationPolicy: 'NeverVerifyAllowlistedImages', preloadedImagesVerificationAllowlist: ['r.example/team*'] }, 'preloadedImagesVerificationAllowlist', /^item 0: only a full path segment wildcard '\/\*' is allowed/],
  ['nodeLeaseDurationSeconds negative', { nodeLeaseDurationSeconds: -40 }, 'nodeLeaseDurationSeconds', /^must be greater than 0/],
  ['kubeAPIQPS negative (the kubelet refuses it; 0 is client-go\'s default)', { kubeAPIQPS: -1 }, 'kubeAPIQPS', /^must not be a negative number, got -1$/],
  ['kubeAPIBurst negative', { kubeAPIBurst: -10 }, 'kubeAPIBurst', /^must not be a negative number, got -10$/],
  ['negative duration', { runtimeRequestTimeout: '-1s' }, 'runtimeRequestTimeout', /^must not be negative, got "-1s"$/],
  ['negative accepted duration', { imageMinimumGCAge: '-2m' }, 'imageMinimumGCAge', /^must not be negative/],
  // enums
  ['authorization.mode', { authorization: { mode: 'Always' } }, 'authorization.mode', /^must be one of AlwaysAllow, Webhook, got "Always"$/],
  ['memorySwap.swapBehavior', { memorySwap: { swapBehavior: 'UnlimitedSwap' } }, 'memorySwap.swapBehavior', /^must be one of NoSwap, LimitedSwap \(or empty\), got "UnlimitedSwap"$/],
  ['cgroupDriver', { cgroupDriver: 'docker' }, 'cgroupDriver', /^must be one of cgroupfs, systemd/],
  ['hairpinMode', { hairpinMode: 'yes-please' }, 'hairpinMode', /^must be one of promiscuous-bridge, hairpin-veth, none/],
  ['registerWithTaints effect', { registerWithTaints: [{ key: 'dedicated', effect: 'NoRun' }] }, 'registerWithTaints.0.effect', /^must be one of NoSchedule, PreferNoSchedule, NoExecute, got "NoRun"$/],
  ['registerWithTaints key', { registerWithTaints: [{ key: 'a b', effect: 'NoExecute' }] }, 'registerWithTaints.0.key', /^must be a qualified name/],
  // IP addresses
  ['address not an IP', { address: 'localhost' }, 'address', /^must be an IP address, got "localhost"$/],
  ['healthzBindAddress not an IP', { healthzBindAddress: '127.0.0' }, 'healthzBindAddress', /^must be an IP address/],
  ['clusterDNS item not an IP', { clusterDNS: ['10.96.0.10', 'kube-dns'] }, 'clusterDNS', /^item 1 must be an IP address, got "kube-dns"$/],
  // eviction thresholds
  ['eviction quantity garbage', { evictionHard: { 'memory.available': '1.5.3Gi' } }, 'evictionHard.memory.available', /"1\.5\.3Gi" is not a valid quantity/],
  ['eviction percentage above 100', { evictionHard: { 'nodefs.available': '110%' } }, 'evictionHard.nodefs.available', /must be <= 100%/],
  ['eviction zero quantity', { evictionHard: { 'memory.available': '0' } }, 'evictionHard.memory.available', /must be positive/],
  ['eviction unknown signal', { evictionHard: { 'disk.available': '1Gi' } }, 'evictionHard.disk.available', /^unsupported eviction signal disk\.available/],
  ['container log max size garbage', { containerLogMaxSize: '10 megs' }, 'containerLogMaxSize', /"10 megs" is not a valid quantity/],
  // feature gates
  ['unknown feature gate', { featureGates: { NoSuchGate: true } }, 'featureGates.NoSuchGate', /^unrecognized feature gate: NoSuchGate$/],
  ['locked feature gate', { featureGates: { NodeSwap: false } }, 'featureGates.NodeSwap', /locked to true/],
  // endpoints and pairs
  ['tcp runtime endpoint', { containerRuntimeEndpoint: 'tcp://10.0.0.1:1234' }, 'containerRuntimeEndpoint', /only unix:\/\/ endpoints/],
  ['relative unix endpoint', { imageServiceEndpoint: 'unix://run/x.sock' }, 'imageServiceEndpoint', /absolute path/],
  ['certificate without key', { tlsCertFile: '/etc/kubelet/tls.crt' }, 'tlsCertFile', /^is set but tlsPrivateKeyFile is not/],
  ['parallel pulls while serialized', { serializeImagePulls: true, maxParallelImagePulls: 3 }, 'maxParallelImagePulls', /serializeImagePulls is true/],
  // header
  ['missing apiVersion', { apiVersion: undefined }, 'apiVersion', /^missing; expected kubelet\.config\.k8s\.io\/v1beta1$/],
  ['other apiVersion', { apiVersion: 'kubelet.config.k8s.io/v1alpha1' }, 'apiVersion', /^expected kubelet\.config\.k8s\.io\/v1beta1, got string "kubelet\.config\.k8s\.io\/v1alpha1"$/],
  ['wrong kind', { kind: 'KubeProxyConfiguration' }, 'kind', /^expected KubeletConfiguration, got string "KubeProxyConfiguration"$/],
  ['missing kind', { kind: undefined }, 'kind', /^missing; expected KubeletConfiguration$/],
];

describe('validation problems name file and field', () => {
  it.each(PROBLEMS)('%s', (_name, doc, field, message) => {
    const layer = file(MAIN, doc);
    const cleaned = Object.fromEntries(Object.entries(layer.doc as object).filter(([, v]) => v !== undefined));
    const r = resolveConfig([{ ...layer, doc: cleaned }]);
    expect(r.problems).toHaveLength(1);
    expect(r.problems[0]).toEqual({ file: MAIN, field, message: expect.stringMatching(message) });
  });

  it.each([
    ['a YAML list', [1, 2], /expected a KubeletConfiguration object .*got a list/],
    ['an empty document', undefined, /got an empty document/],
    ['a scalar', 'port: 1', /got string "port: 1"/],
  ])('a document that is %s is one problem naming the file', (_n, doc, message) => {
    const r = resolveConfig([{ origin: MAIN, doc, requireHeader: true }]);
    expect(r.problems).toEqual([{ file: MAIN, field: '', message: expect.stringMatching(message) }]);
  });

  it('accepts the valid values next to each rejected one', () => {
    const r = resolveConfig([
      file(MAIN, {
        port: 65535,
        readOnlyPort: 0,
        healthzPort: 0,
        address: '::',
        healthzBindAddress: '::1',
        clusterDNS: ['10.96.0.10', 'fd00::a'],
        authorization: { mode: 'AlwaysAllow' },
        memorySwap: { swapBehavior: '' },
        evictionHard: { 'memory.available': '1.5Gi', 'nodefs.available': '0%', 'pid.available': '10%' },
        featureGates: { NodeSwap: true, ContainerCheckpoint: false },
        containerRuntimeEndpoint: '/run/containerd/containerd.sock',
        imageServiceEndpoint: 'unix:///run/images.sock',
        tlsCertFile: '/etc/kubelet/tls.crt',
        tlsPrivateKeyFile: '/etc/kubelet/tls.key',
        serializeImagePulls: false,
        maxParallelImagePulls: 3,
        kubeAPIQPS: 0,
        kubeAPIBurst: 1,
        registerWithTaints: [{ key: 'example.com/dedicated', value: 'db', effect: 'NoExecute' }, { key: 'gpu', effect: 'NoSchedule' }],
      }),
    ]);
    expect(r.problems).toEqual([]);
  });
});

describe('origin of a problem is the layer that set the effective value', () => {
  it('a bad value from a drop-in names the drop-in, not the main file', () => {
    const r = resolveConfig([file(MAIN, { address: '10.0.0.1' }), file(A, { address: 'not-an-ip' })]);
    expect(r.problems).toEqual([{ file: A, field: 'address', message: 'must be an IP address, got "not-an-ip"' }]);
  });

  it('a bad value from a flag names "flag"', () => {
    const r = resolveConfig([file(MAIN, {}), { origin: 'flag', doc: { port: 70000, featureGates: { Nope: true } }, requireHeader: false }]);
    expect(r.problems).toEqual([
      { file: 'flag', field: 'port', message: 'must be between 1 and 65535, inclusive, got 70000' },
      { file: 'flag', field: 'featureGates.Nope', message: 'unrecognized feature gate: Nope' },
    ]);
  });

  it('a bad value overridden by a later file is still reported against its own file (each file is decoded on its own)', () => {
    const r = resolveConfig([file(MAIN, { port: 'abc' }), file(A, { port: 10251 })]);
    expect(r.problems).toEqual([{ file: MAIN, field: 'port', message: 'must be an integer, got string "abc"' }]);
  });
});

describe('all problems are reported together', () => {
  it('two bad fields in two files: both named, in file order', () => {
    const r = resolveConfig([
      file(MAIN, { port: 'abc', nodeStatusUpdateFrequency: '10' }),
      file(A, { authorization: { mode: 'Sometimes' }, kind: 'Pod' }),
    ]);
    expect(r.problems.map((p) => [p.file, p.field])).toEqual([
      [MAIN, 'port'],
      [MAIN, 'nodeStatusUpdateFrequency'],
      [A, 'kind'],
      [A, 'authorization.mode'],
    ]);
  });
});

describe('unknown fields are warnings, not errors', () => {
  it('warns once per unknown field path, at any depth, and drops the field', () => {
    const r = resolveConfig([
      file(MAIN, { bogus: 1, authorization: { mode: 'Webhook', modee: 'x' } }),
      file(A, { authentication: { webhook: { cacheTtl: '1m' } } }),
    ]);
    expect(r.problems).toEqual([]);
    expect(r.warnings).toEqual([
      { file: MAIN, field: 'bogus', message: 'unknown field "bogus" (ignored)' },
      { file: MAIN, field: 'authorization.modee', message: 'unknown field "modee" (ignored)' },
      { file: A, field: 'authentication.webhook.cacheTtl', message: 'unknown field "cacheTtl" (ignored)' },
    ]);
    expect(r.config).not.toHaveProperty('bogus');
    expect(r.config.authorization).not.toHaveProperty('modee');
  });
});

describe('ConfigError', () => {
  it('is a NodeletError CONFIG_INVALID with one "<file>: <field>: <message>" line per problem', () => {
    const problems: ConfigProblem[] = [
      { file: MAIN, field: 'port', message: 'must be an integer, got string "abc"' },
      { file: A, field: '', message: 'malformed YAML/JSON at line 3, column 1: oops' },
    ];
    const err = new ConfigError(problems);
    expect(err).toBeInstanceOf(NodeletError);
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.details).toEqual({ problems });
    expect(err.message).toBe(
      `${MAIN}: port: must be an integer, got string "abc"\n${A}: malformed YAML/JSON at line 3, column 1: oops`,
    );
    expect(formatProblem(problems[0]!)).toBe(`${MAIN}: port: must be an integer, got string "abc"`);
  });
});
