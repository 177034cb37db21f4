import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { parseQuantity } from '../../../src/config/quantity.js';
import { containerEnv, expand } from '../../../src/pods/cri/env.js';

const quantity = (q: string | number) => parseQuantity(String(q)).value;
const pod: Pod = {
  metadata: { name: 'web-n1', namespace: 'shop', uid: 'u-1', labels: { app: 'web' }, annotations: { 'example.com/tier': 'front' } },
  spec: { nodeName: 'n1', serviceAccountName: 'web', hostNetwork: true, containers: [] },
};
const ctx = { nodeName: 'n1', hostIP: '192.0.2.10', podIP: '192.0.2.10', quantity };

describe('expand', () => {
  it('replaces defined $(VAR), keeps undefined ones, and $$ escapes', () => {
    const vars = new Map([['A', 'x'], ['B', 'y']]);
    expect(expand('$(A)-$(B)/$(C)', vars)).toBe('x-y/$(C)');
    expect(expand('$$(A) costs $5 $(A', vars)).toBe('$(A) costs $5 $(A');
    expect(expand('', vars)).toBe('');
  });
});

describe('containerEnv', () => {
  it('values expand earlier variables; the downward API fills fields and resources; command and args are expanded', () => {
    const c: Container = {
      name: 'app',
      image: 'busybox',
      command: ['/bin/run', '--node=$(NODE)'],
      args: ['$(GREETING)', '$$(GREETING)', '$(UNSET)'],
      resources: { limits: { cpu: '1500m', memory: '64Mi' }, requests: { cpu: '250m' } },
      env: [
        { name: 'NODE', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
        { name: 'GREETING', value: 'hello from $(NODE)' },
        { name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
        { name: 'NS', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
        { name: 'UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } },
        { name: 'APP', valueFrom: { fieldRef: { fieldPath: "metadata.labels['app']" } } },
        { name: 'TIER', valueFrom: { fieldRef: { fieldPath: "metadata.annotations['example.com/tier']" } } },
        { name: 'SA', valueFrom: { fieldRef: { fieldPath: 'spec.serviceAccountName' } } },
        { name: 'HOST_IP', valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } },
        { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
        { name: 'CPU_LIMIT', valueFrom: { resourceFieldRef: { resource: 'limits.cpu' } } },
        { name: 'CPU_REQ_M', valueFrom: { resourceFieldRef: { resource: 'requests.cpu', divisor: '1m' } } },
        { name: 'MEM_MI', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: '1Mi' } } },
      ],
    };
    const r = containerEnv(pod, c, ctx);
    expect(Object.fromEntries(r.envs.map((e) => [e.key, e.value]))).toEqual({
      NODE: 'n1',
      GREETING: 'hello from n1',
      POD: 'web-n1',
      NS: 'shop',
      UID: 'u-1',
      APP: 'web',
      TIER: 'front',
      SA: 'web',
      HOST_IP: '192.0.2.10',
      POD_IP: '192.0.2.10',
      CPU_LIMIT: '2',
      CPU_REQ_M: '250',
      MEM_MI: '64',
    });
    expect(r.envs.map((e) => e.key).slice(0, 3)).toEqual(['NODE', 'GREETING', 'POD']);
    expect(r.command).toEqual(['/bin/run', '--node=n1']);
    expect(r.args).toEqual(['hello from n1', '$(GREETING)', '$(UNSET)']);
  });

  it('refuses, on a standalone node, every API reference (optional too, as the kubelet without a client), and what is unknown, naming the variable', () => {
    const refuse = (c: Partial<Container>) => {
      try {
        containerEnv(pod, { name: 'app', image: 'busybox', ...c }, ctx);
        return 'no error';
      } catch (err) {
        return `${(err as { details: { reason: string } }).details.reason}: ${(err as Error).message}`;
      }
    };
    expect(refuse({ env: [{ name: 'PW', valueFrom: { secretKeyRef: { name: 'db', key: 'pw' } } }] })).toBe(
      "CreateContainerConfigError: env PW: couldn't get secret shop/db, no kubeClient defined (a standalone node reads no API objects)",
    );
    expect(refuse({ env: [{ name: 'C', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'k', optional: true } } }] })).toBe(
      "CreateContainerConfigError: env C: couldn't get configMap shop/cfg, no kubeClient defined (a standalone node reads no API objects)",
    );
    expect(refuse({ envFrom: [{ configMapRef: { name: 'cfg' } }] })).toBe(
      'CreateContainerConfigError: envFrom configMapRef "cfg": couldn\'t get configMap shop/cfg, no kubeClient defined (a standalone node reads no API objects)',
    );
    expect(refuse({ envFrom: [{ secretRef: { name: 's', optional: true } }] })).toBe(
      'CreateContainerConfigError: envFrom secretRef "s": couldn\'t get secret shop/s, no kubeClient defined (a standalone node reads no API objects)',
    );
    expect(refuse({ env: [{ name: 'F', valueFrom: { fileKeyRef: { volumeName: 'v', path: 'p', key: 'k' } } as never }] })).toBe(
      'CreateContainerConfigError: env F: valueFrom has no source nodelet supports (fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef)',
    );
    expect(refuse({ env: [{ name: 'X', valueFrom: { fieldRef: { fieldPath: 'spec.priority' } } }] })).toBe('CreateContainerConfigError: env X: fieldRef.fieldPath "spec.priority" is not supported');
    expect(refuse({ env: [{ name: 'X', valueFrom: { resourceFieldRef: { resource: 'cpu' } } }] })).toBe('CreateContainerConfigError: env X: resourceFieldRef.resource "cpu" is not supported');
  });
});

describe('bounded expansion', () => {
  const reasonOf = (f: () => unknown): string => {
    try {
      f();
      return 'no error';
    } catch (err) {
      const e = err as Error & { details?: { reason?: string; bound?: number } };
      return `${e.details?.reason} (${e.details?.bound}): ${e.message}`;
    }
  };
  /** E0 = 1,000 × x, then E<i> = $(E<i-1>)$(E<i-1>): each level doubles the value. */
  const doubling = (levels: number): Container => ({
    name: 'bomb',
    image: 'busybox',
    env: [{ name: 'E0', value: 'x'.repeat(1000) }, ...Array.from({ length: levels }, (_, i) => ({ name: `E${i + 1}`, value: `$(E${i})$(E${i})` }))],
  });

  it('follows the kubelet on its edge cases: unclosed references, $ before other characters, runs of $', () => {
    const vars = new Map([['A', 'a'], ['BIG_MONEY', '$$']]);
    expect(expand('$(A $$', vars)).toBe('$(A $');
    expect(expand('$(A $$ $(A)', vars)).toBe('$(A $$ $(A)');
    expect(expand('$$$$$$(BIG_MONEY)', vars)).toBe('$$$(BIG_MONEY)');
    expect(expand('$$$$$$$(BIG_MONEY)', vars)).toBe('$$$$$');
    expect(expand('$A)$(A)$', vars)).toBe('$A)a$');
    expect(expand('$()', new Map([['', 'empty']]))).toBe('empty');
  });

  it('expand stops at its limit before building the value', () => {
    const vars = new Map([['X', 'x'.repeat(100)]]);
    expect(expand('$(X)$(X)', vars, 200)).toHaveLength(200);
    expect(() => expand('$(X)$(X)!', vars, 200)).toThrow('expansion exceeds 200 bytes');
    expect(() => expand('y'.repeat(201), vars, 200)).toThrow('expansion exceeds 200 bytes');
  });

  it('a doubling env of 18 and 19 levels is refused at the first value past 128 KiB, naming it', () => {
    for (const levels of [18, 19, 40]) {
      expect(reasonOf(() => containerEnv(pod, doubling(levels), ctx))).toBe(
        'CreateContainerConfigError (131072): env E8: the value would exceed 131072 bytes, the most one environment variable (with its name) can hold (Linux MAX_ARG_STRLEN: execve refuses it with E2BIG)',
      );
    }
    // Seven levels (128,000 bytes) still fit: the bound refuses nothing a container could start with.
    expect(containerEnv(pod, doubling(7), ctx).envs.at(-1)!.value).toHaveLength(128_000);
  });

  it('the environment, command and args together stop at 4 MiB, naming the value that passes it', () => {
    const big = 'x'.repeat(120_000);
    const c: Container = { name: 'wide', image: 'busybox', env: [{ name: 'B', value: big }, ...Array.from({ length: 40 }, (_, i) => ({ name: `V${i}`, value: '$(B)' }))] };
    // 4 MiB holds 34 such entries (B and V0..V32); V33 passes it.
    expect(reasonOf(() => containerEnv(pod, c, ctx))).toBe(
      "CreateContainerConfigError (4194304): env V33: the container's environment, command and args would exceed 4194304 bytes together, nodelet's bound on them",
    );
    const args: Container = { name: 'args', image: 'busybox', env: [{ name: 'B', value: big }], args: Array.from({ length: 40 }, () => '$(B)') };
    expect(reasonOf(() => containerEnv(pod, args, ctx))).toMatch(/^CreateContainerConfigError \(4194304\): args\[33\]: the container's environment/);
    expect(reasonOf(() => containerEnv(pod, { ...args, args: ['$(B)$(B)'] }, ctx))).toBe(
      'CreateContainerConfigError (131072): args[0]: the value would exceed 131072 bytes, the most one argument can hold (Linux MAX_ARG_STRLEN: execve refuses it with E2BIG)',
    );
  });

  it('counts bytes, not characters; downward API values count but are never expanded', () => {
    const euro: Container = { name: 'e', image: 'busybox', env: [{ name: 'E', value: '€'.repeat(50_000) }] };
    expect(reasonOf(() => containerEnv(pod, euro, ctx))).toMatch(/^CreateContainerConfigError \(131072\): env E: the value would exceed/);
    const dollars = { ...pod, metadata: { ...pod.metadata, annotations: { a: '$$(x)' } } };
    const r = containerEnv(dollars, { name: 'd', image: 'busybox', env: [{ name: 'A', valueFrom: { fieldRef: { fieldPath: "metadata.annotations['a']" } } }] }, ctx);
    expect(r.envs).toEqual([{ key: 'A', value: '$$(x)' }]);
  });
});
