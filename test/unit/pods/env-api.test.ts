import type { ConfigMap, Container, Pod, Secret, Service } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { parseQuantity } from '../../../src/config/quantity.js';
import { NodeletError } from '../../../src/errors.js';
import { containerEnv, MAX_ARG_STRLEN, type EnvContext } from '../../../src/pods/cri/env.js';
import { envObjectNames, needsAllocatable, readEnvObjects } from '../../../src/pods/cri/env-sources.js';
import { ServiceEnvSource, serviceEnvVars } from '../../../src/pods/cri/service-env.js';
import type { ApiObjects } from '../../../src/pods/objects/objects.js';

const quantity = (q: string | number) => parseQuantity(String(q)).value;
const pod: Pod = { metadata: { name: 'web', namespace: 'shop', uid: 'u-1' }, spec: { containers: [] } };
const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64');

/** An ApiObjects that answers from maps, counts every call, and fails a read when told to. */
class FakeObjects implements ApiObjects {
  readonly calls: string[] = [];
  readonly cms = new Map<string, ConfigMap>();
  readonly secs = new Map<string, Secret>();
  readonly svcs = new Map<string, Service[]>();
  readonly failing = new Set<string>();

  #read<T>(what: string, v: T): Promise<T> {
    this.calls.push(what);
    if (this.failing.has(what)) return Promise.reject(new NodeletError('UNAVAILABLE', `${what}: connect ECONNREFUSED 127.0.0.1:6443`));
    return Promise.resolve(v);
  }
  configMap(ns: string, name: string) {
    return this.#read(`configmap ${ns}/${name}`, this.cms.get(`${ns}/${name}`));
  }
  secret(ns: string, name: string) {
    return this.#read(`secret ${ns}/${name}`, this.secs.get(`${ns}/${name}`));
  }
  serviceAccount() {
    return Promise.resolve(undefined);
  }
  services(ns: string) {
    return this.#read(`services ${ns}`, this.svcs.get(ns) ?? []);
  }
  requestToken(): never {
    throw new Error('not used');
  }
}

const svc = (namespace: string, name: string, clusterIP: string, ports: Service['spec'] extends infer S ? (S extends { ports?: infer P } ? P : never) : never): Service => ({ metadata: { namespace, name }, spec: { clusterIP, ports } });
const kubernetes = svc('default', 'kubernetes', '10.96.0.1', [{ name: 'https', port: 443, protocol: 'TCP', targetPort: 6443 }]);

/** Builds the env of `c` as the runtime does: read the objects through the port, then build. */
async function envOf(objects: FakeObjects | undefined, c: Partial<Container>, extra: Partial<EnvContext> = {}, p: Pod = pod) {
  const container: Container = { name: 'app', image: 'busybox', ...c };
  const read = await readEnvObjects(p, container, objects, objects ? new ServiceEnvSource(objects) : undefined);
  const r = containerEnv(p, container, { quantity, ...(read ? { objects: read } : {}), ...extra });
  return { ...r, env: Object.fromEntries(r.envs.map((e) => [e.key, e.value])) };
}

async function errorOf(f: () => Promise<unknown>): Promise<string> {
  try {
    await f();
    return 'no error';
  } catch (err) {
    return `${(err as NodeletError).details?.reason}: ${(err as Error).message}`;
  }
}

describe('env from ConfigMaps and Secrets', () => {
  const objects = () => {
    const o = new FakeObjects();
    o.cms.set('shop/cfg', { metadata: { name: 'cfg' }, data: { MODE: 'cfg-mode', LEVEL: 'info', SHARED: 'from-cfg' } });
    o.cms.set('shop/more', { metadata: { name: 'more' }, data: { SHARED: 'from-more', EXTRA: 'x' } });
    o.secs.set('shop/db', { metadata: { name: 'db' }, data: { user: b64('admin'), password: b64('s3cr=t é') } });
    return o;
  };

  it('envFrom first, in order, then env: a later source replaces an earlier one; prefix applies to every key', async () => {
    const r = await envOf(objects(), {
      envFrom: [{ configMapRef: { name: 'cfg' } }, { configMapRef: { name: 'more' } }, { prefix: 'DB_', secretRef: { name: 'db' } }],
      env: [
        { name: 'MODE', value: 'env-mode' },
        { name: 'PW', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } },
        { name: 'LVL', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'LEVEL' } } },
        { name: 'URL', value: 'db://$(DB_user)@$(EXTRA)/$(MODE)' },
      ],
    });
    expect(r.env).toEqual({
      MODE: 'env-mode',
      LEVEL: 'info',
      SHARED: 'from-more',
      EXTRA: 'x',
      DB_user: 'admin',
      DB_password: 's3cr=t é',
      PW: 's3cr=t é',
      LVL: 'info',
      URL: 'db://admin@x/env-mode',
    });
    expect(r.warnings).toEqual([]);
  });

  it('reads each object once per container start, however many references name it', async () => {
    const o = objects();
    await envOf(o, {
      envFrom: [{ configMapRef: { name: 'cfg' } }, { secretRef: { name: 'db' } }],
      env: [
        { name: 'A', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'MODE' } } },
        { name: 'B', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'LEVEL' } } },
        { name: 'C', valueFrom: { secretKeyRef: { name: 'db', key: 'user' } } },
        { name: 'D', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } },
      ],
    });
    expect(o.calls.filter((c) => !c.startsWith('services')).sort()).toEqual(['configmap shop/cfg', 'secret shop/db']);
    expect(envObjectNames({ name: 'x', envFrom: [{ configMapRef: { name: 'a' } }, { configMapRef: { name: 'a' } }], env: [{ name: 'v', value: 'set', valueFrom: { secretKeyRef: { name: 'ignored', key: 'k' } } }] })).toEqual({ configMaps: ['a'], secrets: [] });
  });

  it("gives the kubelet's errors word for word, and skips what is optional", async () => {
    const o = objects();
    const refuse = (c: Partial<Container>) => errorOf(() => envOf(o, c));
    expect(await refuse({ env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'nope', key: 'k' } } }] })).toBe('CreateContainerConfigError: configmap "nope" not found');
    expect(await refuse({ env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'k' } } }] })).toBe("CreateContainerConfigError: couldn't find key k in ConfigMap shop/cfg");
    expect(await refuse({ env: [{ name: 'X', valueFrom: { secretKeyRef: { name: 'nope', key: 'k' } } }] })).toBe('CreateContainerConfigError: secret "nope" not found');
    expect(await refuse({ env: [{ name: 'X', valueFrom: { secretKeyRef: { name: 'db', key: 'k' } } }] })).toBe("CreateContainerConfigError: couldn't find key k in Secret shop/db");
    expect(await refuse({ envFrom: [{ configMapRef: { name: 'nope' } }] })).toBe('CreateContainerConfigError: configmap "nope" not found');
    expect(await refuse({ envFrom: [{ secretRef: { name: 'nope' } }] })).toBe('CreateContainerConfigError: secret "nope" not found');
    // A key that is not an own property is missing (never Object.prototype's).
    expect(await refuse({ env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'constructor' } } }] })).toBe("CreateContainerConfigError: couldn't find key constructor in ConfigMap shop/cfg");
    // envFrom is processed first, as the kubelet: its error is the one reported.
    expect(await refuse({ envFrom: [{ secretRef: { name: 'gone' } }], env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'nope', key: 'k' } } }] })).toBe('CreateContainerConfigError: secret "gone" not found');

    const r = await envOf(o, {
      envFrom: [{ configMapRef: { name: 'nope', optional: true } }, { secretRef: { name: 'nope', optional: true } }],
      env: [
        { name: 'A', valueFrom: { configMapKeyRef: { name: 'nope', key: 'k', optional: true } } },
        { name: 'B', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'k', optional: true } } },
        { name: 'C', valueFrom: { secretKeyRef: { name: 'db', key: 'k', optional: true } } },
        { name: 'D', valueFrom: { secretKeyRef: { name: 'db', key: 'user', optional: true } } },
      ],
    });
    expect(r.env).toEqual({ D: 'admin' });
  });

  it('a read that fails is an error even for an optional reference, naming what failed', async () => {
    const o = objects();
    o.failing.add('configmap shop/cfg');
    expect(await errorOf(() => envOf(o, { env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'MODE', optional: true } } }] }))).toBe(
      'CreateContainerConfigError: configmap shop/cfg: connect ECONNREFUSED 127.0.0.1:6443',
    );
  });

  it('skips envFrom keys that are not environment names and says which, once per source (InvalidEnvironmentVariableNames)', async () => {
    const o = objects();
    // The API admits only [-._a-zA-Z0-9]+ keys; these come from a hostile or broken source.
    o.cms.set('shop/odd', { metadata: { name: 'odd' }, data: { 'ok.key-1': 'a', 'b=c': 'x', 'tab\there': 'y', 'é': 'z', '1digit': 'd' } });
    o.secs.set('shop/odd', { metadata: { name: 'odd' }, data: { 'x=y': b64('1'), good: b64('2') } });
    const r = await envOf(o, { envFrom: [{ configMapRef: { name: 'odd' } }, { prefix: 'S_', secretRef: { name: 'odd' } }] });
    // 1.35's relaxed names: '1digit' and 'ok.key-1' are names.
    expect(r.env).toEqual({ 'ok.key-1': 'a', '1digit': 'd', S_good: '2' });
    expect(r.warnings).toEqual([
      { reason: 'InvalidEnvironmentVariableNames', message: 'Keys [b=c, tab\there, é] from the EnvFrom configMap shop/odd were skipped since they are considered invalid environment variable names.' },
      { reason: 'InvalidEnvironmentVariableNames', message: 'Keys [S_x=y] from the EnvFrom secret shop/odd were skipped since they are considered invalid environment variable names.' },
    ]);
  });

  it('refuses a Secret value that is not UTF-8 and a value with a NUL byte, naming the variable and the key', async () => {
    const o = objects();
    o.secs.set('shop/bin', { metadata: { name: 'bin' }, data: { raw: Buffer.from([0xff, 0xfe, 0x00]).toString('base64'), nul: b64('a\0b') } });
    o.cms.set('shop/nul', { metadata: { name: 'nul' }, data: { k: 'a\u0000b' } });
    expect(await errorOf(() => envOf(o, { env: [{ name: 'R', valueFrom: { secretKeyRef: { name: 'bin', key: 'raw' } } }] }))).toBe(
      'CreateContainerConfigError: env R: the value of key "raw" in Secret shop/bin is not UTF-8, which an environment value must be',
    );
    expect(await errorOf(() => envOf(o, { env: [{ name: 'N', valueFrom: { secretKeyRef: { name: 'bin', key: 'nul' } } }] }))).toBe(
      'CreateContainerConfigError: env N: the value of key "nul" in Secret shop/bin holds a NUL byte, which an environment variable cannot carry',
    );
    expect(await errorOf(() => envOf(o, { envFrom: [{ configMapRef: { name: 'nul' } }] }))).toBe(
      'CreateContainerConfigError: env k (envFrom configMap shop/nul): the value of key "k" in ConfigMap shop/nul holds a NUL byte, which an environment variable cannot carry',
    );
  });

  it('counts fetched values against the bounds: one value past 128 KiB, or all past 4 MiB, is refused naming the variable', async () => {
    const o = objects();
    // A Secret value past the bound is refused before it is decoded.
    o.secs.set('shop/big', { metadata: { name: 'big' }, data: { k: b64('x'.repeat(MAX_ARG_STRLEN)) } });
    expect(await errorOf(() => envOf(o, { env: [{ name: 'BIG', valueFrom: { secretKeyRef: { name: 'big', key: 'k' } } }] }))).toMatch(
      /^CreateContainerConfigError: env BIG: the value would exceed 131072 bytes, the most one environment variable \(with its name\) can hold/,
    );
    // 40 keys of 120 KB each: 4.8 MB in all.
    o.cms.set('shop/many', { metadata: { name: 'many' }, data: Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`K${String(i).padStart(2, '0')}`, 'v'.repeat(120_000)])) });
    expect(await errorOf(() => envOf(o, { envFrom: [{ configMapRef: { name: 'many' } }] }))).toBe(
      "CreateContainerConfigError: env K34 (envFrom configMap shop/many): the container's environment, command and args would exceed 4194304 bytes together, nodelet's bound on them",
    );
  });

  it('on a standalone node nothing is read: no objects and no Services', async () => {
    expect(await readEnvObjects(pod, { name: 'app', envFrom: [{ configMapRef: { name: 'cfg' } }] }, undefined, undefined)).toBeUndefined();
    const r = await envOf(undefined, { env: [{ name: 'A', value: 'a' }] });
    expect(r.env).toEqual({ A: 'a' });
  });
});

describe('Service environment variables', () => {
  const web = svc('shop', 'web-front', '10.96.7.8', [
    { name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 },
    { name: 'dns-udp', port: 53, protocol: 'UDP', targetPort: 53 },
  ]);
  const headless = svc('shop', 'db', 'None', [{ port: 5432, targetPort: 5432 }]);
  const noIP = svc('shop', 'pending', '', [{ port: 1, targetPort: 1 }]);

  it('the kubelet names and values: a Service with two ports, the master Service, none for headless ones', () => {
    const env = serviceEnvVars('shop', true, [kubernetes], [web, headless, noIP]);
    expect(Object.fromEntries(env)).toEqual({
      KUBERNETES_SERVICE_HOST: '10.96.0.1',
      KUBERNETES_SERVICE_PORT: '443',
      KUBERNETES_SERVICE_PORT_HTTPS: '443',
      KUBERNETES_PORT: 'tcp://10.96.0.1:443',
      KUBERNETES_PORT_443_TCP: 'tcp://10.96.0.1:443',
      KUBERNETES_PORT_443_TCP_PROTO: 'tcp',
      KUBERNETES_PORT_443_TCP_PORT: '443',
      KUBERNETES_PORT_443_TCP_ADDR: '10.96.0.1',
      WEB_FRONT_SERVICE_HOST: '10.96.7.8',
      WEB_FRONT_SERVICE_PORT: '80',
      WEB_FRONT_SERVICE_PORT_HTTP: '80',
      WEB_FRONT_SERVICE_PORT_DNS_UDP: '53',
      WEB_FRONT_PORT: 'tcp://10.96.7.8:80',
      WEB_FRONT_PORT_80_TCP: 'tcp://10.96.7.8:80',
      WEB_FRONT_PORT_80_TCP_PROTO: 'tcp',
      WEB_FRONT_PORT_80_TCP_PORT: '80',
      WEB_FRONT_PORT_80_TCP_ADDR: '10.96.7.8',
      WEB_FRONT_PORT_53_UDP: 'udp://10.96.7.8:53',
      WEB_FRONT_PORT_53_UDP_PROTO: 'udp',
      WEB_FRONT_PORT_53_UDP_PORT: '53',
      WEB_FRONT_PORT_53_UDP_ADDR: '10.96.7.8',
    });
  });

  it('enableServiceLinks: false keeps only the master Service; the master one is kept over a namespace one of the same name; IPv6 in brackets', () => {
    expect([...serviceEnvVars('shop', false, [kubernetes], [web]).keys()].every((k) => k.startsWith('KUBERNETES_'))).toBe(true);
    const shadow = svc('shop', 'kubernetes', '10.0.0.99', [{ port: 1, targetPort: 1 }]);
    expect(serviceEnvVars('shop', true, [kubernetes], [shadow]).get('KUBERNETES_SERVICE_HOST')).toBe('10.96.0.1');
    const v6 = svc('shop', 'six', 'fd00::10', [{ port: 8443, targetPort: 1 }]);
    expect(serviceEnvVars('shop', true, [], [v6]).get('SIX_PORT_8443_TCP')).toBe('tcp://[fd00::10]:8443');
    // In namespace default every Service of it is the pod's own.
    const other = svc('default', 'other', '10.96.9.9', [{ port: 9, targetPort: 9 }]);
    expect(serviceEnvVars('default', true, [kubernetes, other], []).get('OTHER_SERVICE_HOST')).toBe('10.96.9.9');
    expect(serviceEnvVars('default', false, [kubernetes, other], []).has('OTHER_SERVICE_HOST')).toBe(false);
  });

  it('a malformed Service makes no variable (no ports, a bad port, a name that is not a label, an IP that is not one)', () => {
    const bad = [
      svc('shop', 'noports', '10.1.1.1', []),
      svc('shop', 'badport', '10.1.1.2', [{ port: 70000, targetPort: 1 }]),
      svc('shop', 'Bad_Name', '10.1.1.3', [{ port: 80, targetPort: 1 }]),
      svc('shop', 'badip', '10.1.1', [{ port: 80, targetPort: 1 }]),
      svc('shop', 'badproto', '10.1.1.4', [{ port: 80, protocol: 'HTTP' as 'TCP', targetPort: 1 }]),
    ];
    expect(serviceEnvVars('shop', true, [], bad).size).toBe(0);
  });

  it('in a container: after its own variables, never replacing one it sets, and $(VAR) sees them', async () => {
    const o = new FakeObjects();
    o.svcs.set('default', [kubernetes]);
    o.svcs.set('shop', [web, headless]);
    const r = await envOf(o, {
      command: ['connect', '$(WEB_FRONT_SERVICE_HOST):$(WEB_FRONT_SERVICE_PORT)'],
      env: [
        { name: 'KUBERNETES_SERVICE_HOST', value: 'mine' },
        { name: 'API', value: 'https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)' },
      ],
    });
    expect(r.envs.slice(0, 2)).toEqual([
      { key: 'KUBERNETES_SERVICE_HOST', value: 'mine' },
      { key: 'API', value: 'https://mine:443' },
    ]);
    expect(r.env.KUBERNETES_PORT).toBe('tcp://10.96.0.1:443');
    expect(r.envs.filter((e) => e.key === 'KUBERNETES_SERVICE_HOST')).toHaveLength(1);
    expect(r.command).toEqual(['connect', '10.96.7.8:80']);
    expect(Object.keys(r.env).some((k) => k.startsWith('DB_'))).toBe(false);
    expect(o.calls.sort()).toEqual(['services default', 'services shop']);
  });

  it('enableServiceLinks: false lists only namespace default; a pod of default lists it once', async () => {
    const o = new FakeObjects();
    o.svcs.set('default', [kubernetes]);
    o.svcs.set('shop', [web]);
    const r = await envOf(o, {}, {}, { ...pod, spec: { containers: [], enableServiceLinks: false } });
    expect(Object.keys(r.env).sort()).toEqual(Object.keys(Object.fromEntries(serviceEnvVars('shop', false, [kubernetes], []))).sort());
    expect(o.calls).toEqual(['services default']);
    o.calls.length = 0;
    await envOf(o, {}, {}, { ...pod, metadata: { ...pod.metadata, namespace: 'default' } });
    expect(o.calls).toEqual(['services default']);
  });

  it('a namespace of many Services gives the same variables when built in slices (the event loop turns between them)', async () => {
    const many = Array.from({ length: 450 }, (_, i) => svc('shop', `s${i}`, `10.97.${i >> 8}.${i & 255}`, [{ port: 80, targetPort: 80 }]));
    const o = new FakeObjects();
    o.svcs.set('default', [kubernetes]);
    o.svcs.set('shop', many);
    const built = await new ServiceEnvSource(o).envFor('shop', true);
    expect([...built]).toEqual([...serviceEnvVars('shop', true, [kubernetes], many)]);
    expect(built.size).toBe(8 + 450 * 7);
  });

  it('container starts at the same moment share one list per namespace', async () => {
    const o = new FakeObjects();
    o.svcs.set('default', [kubernetes]);
    o.svcs.set('shop', [web]);
    const source = new ServiceEnvSource(o);
    const all = await Promise.all([source.envFor('shop', true), source.envFor('shop', true), source.envFor('shop', false)]);
    expect(o.calls.sort()).toEqual(['services default', 'services shop']);
    expect(all[0]).toEqual(all[1]);
    await source.envFor('shop', true);
    expect(o.calls).toHaveLength(4);
  });

  it('a failed list uses the last list of that namespace; with none yet, the container waits naming the failure', async () => {
    const o = new FakeObjects();
    o.svcs.set('default', [kubernetes]);
    o.svcs.set('shop', [web]);
    const source = new ServiceEnvSource(o);
    o.failing.add('services shop');
    expect(await errorOf(() => source.envFor('shop', true))).toBe(
      'CreateContainerConfigError: failed to list services when setting up env vars: services of namespace shop: services shop: connect ECONNREFUSED 127.0.0.1:6443',
    );
    o.failing.clear();
    const before = await source.envFor('shop', true);
    o.failing.add('services shop');
    o.failing.add('services default');
    expect(await source.envFor('shop', true)).toEqual(before);
    expect(before.get('WEB_FRONT_SERVICE_HOST')).toBe('10.96.7.8');
  });
});

describe("the downward API's unset limits: the node's allocatable", () => {
  const allocatable = { cpu: '1900m', memory: '3951232Ki', 'ephemeral-storage': '45Gi', pods: '110' };
  const c: Partial<Container> = {
    resources: { limits: { cpu: '0' }, requests: { memory: '64Mi' } },
    env: [
      { name: 'CPU', valueFrom: { resourceFieldRef: { resource: 'limits.cpu' } } },
      { name: 'CPU_M', valueFrom: { resourceFieldRef: { resource: 'limits.cpu', divisor: '1m' } } },
      { name: 'MEM', valueFrom: { resourceFieldRef: { resource: 'limits.memory' } } },
      { name: 'MEM_MI', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: '1Mi' } } },
      { name: 'EPH_GI', valueFrom: { resourceFieldRef: { resource: 'limits.ephemeral-storage', divisor: '1Gi' } } },
      { name: 'REQ_CPU', valueFrom: { resourceFieldRef: { resource: 'requests.cpu' } } },
      { name: 'REQ_MEM_MI', valueFrom: { resourceFieldRef: { resource: 'requests.memory', divisor: '1Mi' } } },
    ],
  };

  it('an unset or zero limit gives allocatable, rounded up in the divisor; an unset request stays 0', async () => {
    const r = await envOf(undefined, c, { allocatable });
    expect(r.env).toEqual({ CPU: '2', CPU_M: '1900', MEM: String(3951232 * 1024), MEM_MI: '3859', EPH_GI: '45', REQ_CPU: '0', REQ_MEM_MI: '64' });
    expect(needsAllocatable(c as Container)).toBe(true);
    expect(needsAllocatable({ name: 'x', env: [{ name: 'R', valueFrom: { resourceFieldRef: { resource: 'requests.cpu' } } }] })).toBe(false);
  });

  it('a pod-level limit comes before the node allocatable; without the allocatable an unset limit is 0', async () => {
    const podLevel = { ...pod, spec: { containers: [], resources: { limits: { cpu: '500m', memory: '1Gi' } } } } as Pod;
    const r = await envOf(undefined, c, { allocatable }, podLevel);
    expect([r.env.CPU_M, r.env.MEM_MI, r.env.EPH_GI]).toEqual(['500', '1024', '45']);
    expect((await envOf(undefined, c)).env.CPU_M).toBe('0');
  });
});
