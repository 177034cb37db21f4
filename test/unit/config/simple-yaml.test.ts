import { describe, expect, it } from 'vitest';
import { parseSimpleYaml } from '../../../src/config/simple-yaml.js';
import { parseYamlSync } from '../../../src/system/bounded-parse.js';

const full = (text: string) => parseYamlSync(text, { file: 't', what: 'configuration file' })[0];

describe('parseSimpleYaml (the fast path for plain configuration files)', () => {
  const simple = [
    'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\n',
    'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nmaxPods: 110\nevictionHard: {memory.available: 100Mi}\n',
    [
      '# a drop-in',
      'apiVersion: kubelet.config.k8s.io/v1beta1',
      'kind: KubeletConfiguration',
      'maxPods: 199',
      'eventRecordQPS: 50',
      'nodeStatusUpdateFrequency: 14s',
      '',
      'evictionHard:',
      '  nodefs.available: "14%"',
      "  imagefs.available: '19%'",
      'featureGates:',
      '  ContainerCheckpoint: false',
      '  Other: true',
      'systemReserved:',
      '    cpu: 199m',
      '    memory: 299Mi',
      'logging:',
      '  options:',
      '    json:',
      '      infoBufferSize: "0"',
      '  verbosity: 0',
      'cgroupDriver: systemd',
      'podPidsLimit: -1',
      'empty: {}',
      'authentication: {anonymous: {enabled: true}, webhook: {enabled: false, cacheTTL: 2m0s}}',
      'authorization: {mode: AlwaysAllow}',
      'nested: { a: {b: {}}, c: "x y" }',
      'resolvConf: /run/systemd/resolve/resolv.conf',
      'swapBehavior: NoSwap',
      'period: 1m0s',
      'timeout: 10.5s',
      'containerRuntimeEndpoint: unix:///run/containerd/containerd.sock',
      'imageServiceEndpoint: unix:///var/run/crio/crio.sock',
      'server: https://10.0.0.1:6443/path',
      '',
    ].join('\n'),
  ];
  it.each(simple.map((t, i) => [i, t]))('reads simple text %i exactly as the bounded YAML 1.1 parser', (_i, text) => {
    const fast = parseSimpleYaml(text as string);
    expect(fast).toBeDefined();
    expect(fast).toEqual(full(text as string));
  });

  // Each of these YAML 1.1 reads otherwise, or is not a plain map: the full parser decides.
  const notSimple = [
    'a: yes\n', 'a: on\n', 'a: y\n', 'a: ~\n', 'a: null\n', 'a: 0644\n', 'a: 0x1F\n', 'a: 1e3\n', 'a: 1.5\n', 'a: 1:20\n', 'a: 2001-12-14\n',
    'a: .inf\n', 'a: True\n', 'on: 1\n', 'a:\n', '', '# only a comment\n', 'a: 1 # comment\n', 'a: "x\\ty"\n', 'a:\n- b\n', 'a: [1, 2]\n',
    'a: &x 1\n', 'a: !!str 1\n', 'a: |\n  x\n', '---\na: 1\n', 'a: 1\na: 2\n', '"a": 1\n', 'a:\tb\n', 'a: 1\r\n', '  a: 1\n', 'a: 1\n  b: 2\n',
    'a:\n  b: 1\n c: 2\n', 'a: {b: {c: 1}\n', 'a: {b: 1}}\n', 'a: {b: [1]}\n', 'a: {b: "x,y"}\n', 'a: {b: }\n', 'a: {b: 1, b: 2}\n', 'a: {b: 1} x\n', 'a: {b: yes}\n', 'a: b: c\n', 'a: {b: unix:///run/containerd/containerd.sock}\n', 'a: unix://x:\n', 'a: unix:\n', 'a: x:y\n', 'a: unix:// x\n', 'a: 1://x\n', 'a: 12345678901234567890\n', 'y: 1\n', 'a: 1e3s\n'.replace('s', ''),
  ];
  it.each(notSimple)('leaves %j to the full parser', (text) => {
    expect(parseSimpleYaml(text)).toBeUndefined();
  });
});
