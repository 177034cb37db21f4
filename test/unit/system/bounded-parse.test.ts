import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { thrown as refusal } from '../../helpers/errors.js';
import { parseJsonBounded, parseYaml, parseYamlSync, PARSE_LIMITS } from '../../../src/system/bounded-parse.js';

const o = { file: '/m/x.yaml', what: 'static pod manifest' };

const manifest = `apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: kube-system
  labels: {component: kube-apiserver, tier: control-plane}
  annotations:
    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 10.0.0.1:6443
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: kube-apiserver
    image: registry.k8s.io/kube-apiserver:v1.30.0
    command: [kube-apiserver, --advertise-address=10.0.0.1, --allow-privileged=true, "--etcd-servers=https://127.0.0.1:2379"]
    livenessProbe:
      httpGet: {host: 10.0.0.1, path: /livez, port: 6443, scheme: HTTPS}
      initialDelaySeconds: 10
    volumeMounts:
    - {mountPath: /etc/kubernetes/pki, name: k8s-certs, readOnly: true}
  volumes:
  - name: k8s-certs
    hostPath: {path: /etc/kubernetes/pki, type: DirectoryOrCreate}
    configMap: {name: c, defaultMode: 0644}
`;

describe('parseYamlSync', () => {
  it('valid manifests come out as the yaml library reads them (YAML 1.1: 0644 is 420), JSON too', () => {
    const [doc] = parseYamlSync(manifest, o);
    expect(doc).toEqual(parse(manifest, { version: '1.1' }));
    expect((doc as { spec: { volumes: { configMap: { defaultMode: number } }[] } }).spec.volumes[0]!.configMap.defaultMode).toBe(420);
    expect(parseYamlSync(JSON.stringify({ a: [1, { b: null }] }), o)).toEqual([{ a: [1, { b: null }] }]);
    expect(parseYamlSync('', o)).toEqual([]);
    expect(parseYamlSync('a: 1\n---\nb: 2\n', o)).toEqual([{ a: 1 }, { b: 2 }]);
  });

  it('a billion-laughs alias bomb is refused before it expands', () => {
    const bomb = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
    for (let i = 1; i < 9; i++) bomb.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9).fill(`*${String.fromCharCode(96 + i)}`).join(',')}]`);
    const err = refusal(() => parseYamlSync(bomb.join('\n'), o));
    expect(err.message).toBe(`static pod manifest /m/x.yaml: has more than ${PARSE_LIMITS.maxNodes} YAML nodes, aliases expanded (the limit for a static pod manifest)`);
  });

  it('an alias inside the node it names is refused (no circular value)', () => {
    expect(refusal(() => parseYamlSync('a: &x\n  b: *x\n', o)).message).toMatch(/an alias refers to a node that contains it at line 2, column 6/);
  });

  it('deep nesting is refused: 10,000 flow levels on the tokens, block nesting on the document', () => {
    const flow = refusal(() => parseYamlSync('['.repeat(10_000) + ']'.repeat(10_000), o));
    expect(flow.message).toBe(`static pod manifest /m/x.yaml: nested deeper than ${PARSE_LIMITS.maxDepth} levels (the limit for a static pod manifest)`);
    const block = Array.from({ length: 150 }, (_, i) => `${' '.repeat(i)}k:`).join('\n') + ' 1\n';
    expect(refusal(() => parseYamlSync(block, o)).message).toMatch(/nested deeper than 100 levels/);
    const compact = `${'- '.repeat(5000)}x\n`;
    expect(refusal(() => parseYamlSync(compact, o)).message).toMatch(/nested deeper than 100 levels/);
    // An alias that reaches past the depth through the node it names.
    const viaAlias = `base: &b ${'['.repeat(60)}${']'.repeat(60)}\nuse: ${'['.repeat(60)}*b${']'.repeat(60)}\n`;
    expect(refusal(() => parseYamlSync(viaAlias, o)).message).toMatch(/nested deeper than 100 levels/);
  });

  it('node count: a 100,000-key map (~3 MB) and a long list are refused, without parsing them to the end', () => {
    const keys = Array.from({ length: 100_000 }, (_, i) => `key${i}: value${i}`).join('\n');
    expect(keys.length).toBeGreaterThan(2_000_000);
    const start = performance.now();
    expect(refusal(() => parseYamlSync(keys, o)).message).toMatch(/has more than 20000 YAML nodes/);
    // Stopped on the tokens: the library needs minutes for this map.
    expect(performance.now() - start).toBeLessThan(2000);
    expect(refusal(() => parseYamlSync('- 1\n'.repeat(25_000), o)).details).toMatchObject({ limit: 20_000 });
  });

  it('duplicate keys are malformed, with their position', () => {
    expect(refusal(() => parseYamlSync('a: 1\nb: 2\na: 3\n', o)).message).toBe('static pod manifest /m/x.yaml: malformed YAML/JSON at line 3, column 1: map keys must be unique (a key is repeated)');
  });

  it('malformed text: the position and the library generic reason, not the text', () => {
    const err = refusal(() => parseYamlSync('password: hunter2\n  bad: [indent', o));
    expect(err.message).toMatch(/^static pod manifest \/m\/x\.yaml: malformed YAML\/JSON at line \d+, column \d+: /);
    expect(err.message).not.toContain('hunter2');
    expect(err.details).toMatchObject({ file: '/m/x.yaml', what: 'static pod manifest' });
  });

  it('limits can be tightened per call', () => {
    expect(refusal(() => parseYamlSync('[1, 2, 3, 4]', { ...o, limits: { maxNodes: 3 } })).message).toMatch(/more than 3 YAML nodes/);
  });
});

describe('parseYaml', () => {
  it('parses small texts on the calling thread with the same result and refusals', async () => {
    expect(await parseYaml(manifest, o)).toEqual([parse(manifest, { version: '1.1' })]);
    await expect(parseYaml('['.repeat(1000), o)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/nested deeper/) });
  });
});

describe('parseJsonBounded', () => {
  const j = { file: '/var/lib/kubelet/seccomp/x.json', what: 'seccomp profile' };

  it('parses a profile', () => {
    expect(parseJsonBounded('{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[]}', j)).toEqual({ defaultAction: 'SCMP_ACT_ALLOW', syscalls: [] });
  });

  it('refuses deep nesting before JSON.parse, and brackets inside strings do not count', () => {
    expect(refusal(() => parseJsonBounded('['.repeat(500_000) + ']'.repeat(500_000), j)).message).toBe(
      'seccomp profile /var/lib/kubelet/seccomp/x.json: nested deeper than 100 levels (the limit for a seccomp profile)',
    );
    expect(parseJsonBounded(JSON.stringify({ a: '[[[[{{{{'.repeat(100) }), j)).toEqual({ a: '[[[[{{{{'.repeat(100) });
  });

  it('refuses too many values', () => {
    expect(refusal(() => parseJsonBounded(`[${'1,'.repeat(50_000)}1]`, j)).message).toMatch(/more than 20000 JSON values/);
  });

  it('a syntax error gives a position, never the text (JSON.parse quotes it)', () => {
    const err = refusal(() => parseJsonBounded('root:x:0:0:secret\n', j));
    expect(err.message).toMatch(/^seccomp profile \/var\/lib\/kubelet\/seccomp\/x\.json: is not valid JSON: it has an unexpected character/);
    expect(err.message).not.toMatch(/root|secret/);
    expect(refusal(() => parseJsonBounded('{"a":', j)).message).toMatch(/ends too early/);
  });
});
