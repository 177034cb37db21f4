import { describe, expect, it } from 'vitest';
import { Command } from 'commander';
import { CONFIG_FLAGS, IGNORED_FLAGS, REMOVED_FLAGS, configFlagOverrides, ignoredFlagWarnings, isKubeletLabel, optionKey, parseNodeLabels, parseTaints, refuseRemovedFlags, registrationFlags } from '../../src/kubelet-flags.js';
import { nodeRegistration } from '../../src/node/status.js';

/** What kubeadm writes into /var/lib/kubelet/kubeadm-flags.env (KUBELET_KUBEADM_ARGS), with kubeletExtraArgs a join config commonly adds. */
const KUBEADM_ARGS = [
  '--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock',
  '--pod-infra-container-image=registry.k8s.io/pause:3.10',
  '--register-with-taints=dedicated=gpu:NoSchedule,spot:PreferNoSchedule',
  '--hostname-override=worker-1',
  '--node-ip=10.0.0.7',
  '--node-labels=node.kubernetes.io/pool=gpu,topology.kubernetes.io/zone=eu-1a,example.com/team=ml',
  '--cloud-provider=external',
  '--provider-id=aws:///eu-west-1a/i-0abc',
  '--rotate-server-certificates=true',
];

/** The parse of the daemon's command line as main.ts builds it, minus the action. */
function parse(args: string[]) {
  const cmd = new Command('nodelet').exitOverride().configureOutput({ writeErr: () => {} });
  cmd.option('--container-runtime-endpoint <e>').option('--hostname-override <n>').option('--node-ip <ip>');
  cmd.option('--node-labels <l>').option('--cloud-provider <c>');
  for (const f of CONFIG_FLAGS) cmd.option(`--${f.flag} <value>`);
  for (const f of IGNORED_FLAGS) cmd.option(`--${f.flag} <value>`);
  for (const flag of Object.keys(REMOVED_FLAGS)) cmd.option(`--${flag} <value>`);
  cmd.parse(args, { from: 'user' });
  return cmd.opts();
}

describe("kubeadm's and the managed images' flags", () => {
  it('accepts what kubeadm writes into kubeadm-flags.env and maps it onto the configuration and the registration', () => {
    const o = parse(KUBEADM_ARGS);
    expect(configFlagOverrides(o)).toEqual({
      registerWithTaints: [
        { key: 'dedicated', value: 'gpu', effect: 'NoSchedule' },
        { key: 'spot', effect: 'PreferNoSchedule' },
      ],
      providerID: 'aws:///eu-west-1a/i-0abc',
      serverTLSBootstrap: true,
    });
    expect(registrationFlags(o)).toEqual({
      labels: { 'node.kubernetes.io/pool': 'gpu', 'topology.kubernetes.io/zone': 'eu-1a', 'example.com/team': 'ml' },
      externalCloudProvider: true,
      providedNodeIP: '10.0.0.7',
    });
    expect(ignoredFlagWarnings(o)).toEqual([expect.stringMatching(/^--pod-infra-container-image is deprecated and ignored/)]);
  });

  it.each(CONFIG_FLAGS.map((f) => [f.flag, f.kind] as const))('--%s (%s) is accepted', (flag, kind) => {
    const value = { string: 'x', bool: 'true', int: '5', number: '2.5', map: 'cpu=100m', list: 'pods', eviction: 'memory.available<100Mi', taints: 'a=b:NoSchedule' }[kind];
    const o = parse([`--${flag}=${value}`]);
    const out = configFlagOverrides(o);
    let at: unknown = out;
    for (const k of CONFIG_FLAGS.find((f) => f.flag === flag)!.path) at = (at as Record<string, unknown>)[k];
    expect(at).not.toBeUndefined();
  });

  it('nests the authentication flags as the configuration has them', () => {
    expect(configFlagOverrides(parse(['--anonymous-auth=false', '--authentication-token-webhook=true', '--client-ca-file=/etc/kubernetes/pki/ca.crt', '--authorization-mode=Webhook']))).toEqual({
      authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: '/etc/kubernetes/pki/ca.crt' } },
      authorization: { mode: 'Webhook' },
    });
  });

  it('refuses an unknown flag naming it, as the kubelet', () => {
    expect(() => parse(['--no-such-flag=1'])).toThrow("unknown option '--no-such-flag=1'");
  });

  it('refuses a removed flag naming it and the release that removed it', () => {
    expect(() => refuseRemovedFlags(parse(['--network-plugin=cni']))).toThrow('--network-plugin: this flag was removed from the kubelet in 1.24');
    expect(() => refuseRemovedFlags(parse(['--container-runtime=remote']))).toThrow('--container-runtime: this flag was removed from the kubelet in 1.27');
  });

  it.each([
    [['--register-with-taints=dedicated=gpu'], '--register-with-taints: "dedicated=gpu" is not a taint'],
    [['--register-with-taints=a=b:Sometimes'], 'has effect "Sometimes", not one of NoSchedule, PreferNoSchedule, NoExecute'],
    [['--rotate-server-certificates=yes'], '--rotate-server-certificates: "yes" is not true or false'],
    [['--max-open-files=lots'], '--max-open-files: "lots" is not an integer'],
    [['--kube-reserved=cpu'], '--kube-reserved: "cpu" is not <key>=<value>'],
    [['--eviction-hard=memory.available=100Mi'], '--eviction-hard: "memory.available=100Mi" is not <signal><<quantity>'],
  ])('refuses a bad value naming the flag: %j', (args, message) => {
    expect(() => configFlagOverrides(parse(args))).toThrow(message);
  });

  it('refuses --cloud-provider other than external, naming it', () => {
    expect(() => registrationFlags(parse(['--cloud-provider=aws']))).toThrow('--cloud-provider: "aws" is not supported: only "external"');
    expect(registrationFlags(parse(['--cloud-provider=']))).toEqual({ labels: {}, externalCloudProvider: false });
  });
});

describe('--node-labels', () => {
  it.each([
    ['kubernetes.io/hostname', true],
    ['topology.kubernetes.io/zone', true],
    ['node.kubernetes.io/instance-type', true],
    ['node.kubernetes.io/pool', true],
    ['team.node.kubernetes.io/x', true],
    ['kubelet.kubernetes.io/x', true],
    ['node-role.kubernetes.io/worker', false],
    ['kubernetes.io/role', false],
  ])('isKubeletLabel(%s) = %s', (key, allowed) => expect(isKubeletLabel(key)).toBe(allowed));

  it('refuses labels in the kubernetes.io and k8s.io namespaces outside the allowed set, naming them', () => {
    expect(() => parseNodeLabels('node-role.kubernetes.io/worker=,example.k8s.io/x=y,ok=1')).toThrow("--node-labels: unknown 'kubernetes.io' or 'k8s.io' labels: node-role.kubernetes.io/worker, example.k8s.io/x");
  });

  it('refuses invalid keys and values', () => {
    expect(() => parseNodeLabels('-bad=1')).toThrow('--node-labels: "-bad" is not a valid label key');
    expect(() => parseNodeLabels('a=has space')).toThrow('--node-labels: "a=has space" has an invalid label value');
    expect(() => parseNodeLabels('novalue')).toThrow('--node-labels: "novalue" is not <key>=<value>');
  });

  it('takes an empty value (node-role style markers outside kubernetes.io)', () => {
    expect(parseNodeLabels('example.com/edge=,a=b')).toEqual({ 'example.com/edge': '', a: 'b' });
  });
});

describe('parseTaints', () => {
  it('reads key=value:effect and key:effect', () => {
    expect(parseTaints('register-with-taints', 'a=b:NoExecute, c:NoSchedule')).toEqual([
      { key: 'a', value: 'b', effect: 'NoExecute' },
      { key: 'c', effect: 'NoSchedule' },
    ]);
  });
});

describe('nodeRegistration', () => {
  it('adds the uninitialized taint with an external cloud provider, and the provided node IP', () => {
    expect(nodeRegistration({ labels: { a: 'b' }, registerWithTaints: [{ key: 'x', effect: 'NoSchedule' }], providerID: 'gce://p/z/i', externalCloudProvider: true, providedNodeIP: '10.0.0.7' })).toEqual({
      labels: { a: 'b' },
      taints: [{ key: 'x', effect: 'NoSchedule' }, { key: 'node.cloudprovider.kubernetes.io/uninitialized', value: 'true', effect: 'NoSchedule' }],
      providerID: 'gce://p/z/i',
      annotations: { 'alpha.kubernetes.io/provided-node-ip': '10.0.0.7' },
    });
    expect(nodeRegistration({})).toEqual({});
  });

  it('optionKey is commander\'s', () => expect(optionKey('register-with-taints')).toBe('registerWithTaints'));
});
