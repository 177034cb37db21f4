import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { parseQuantity } from '../../../src/config/quantity.js';
import { containerEnv, expand } from '../../../src/pods/env.js';

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
        { name: 'OPT', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'k', optional: true } } },
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

  it('refuses what needs the control plane or is unknown, naming the variable', () => {
    const refuse = (c: Partial<Container>) => {
      try {
        containerEnv(pod, { name: 'app', image: 'busybox', ...c }, ctx);
        return 'no error';
      } catch (err) {
        return `${(err as { details: { reason: string } }).details.reason}: ${(err as Error).message}`;
      }
    };
    expect(refuse({ env: [{ name: 'PW', valueFrom: { secretKeyRef: { name: 'db', key: 'pw' } } }] })).toBe(
      'CreateContainerConfigError: env PW: secretKeyRef "db" needs the control plane\'s configMaps or secrets, which nodelet does not read',
    );
    expect(refuse({ envFrom: [{ configMapRef: { name: 'cfg' } }] })).toBe('CreateContainerConfigError: envFrom configMapRef "cfg": nodelet does not read configMaps or secrets from the control plane');
    expect(refuse({ envFrom: [{ secretRef: { name: 's', optional: true } }] })).toBe('no error');
    expect(refuse({ env: [{ name: 'X', valueFrom: { fieldRef: { fieldPath: 'spec.priority' } } }] })).toBe('CreateContainerConfigError: env X: fieldRef.fieldPath "spec.priority" is not supported');
    expect(refuse({ env: [{ name: 'X', valueFrom: { resourceFieldRef: { resource: 'cpu' } } }] })).toBe('CreateContainerConfigError: env X: resourceFieldRef.resource "cpu" is not supported');
  });
});
