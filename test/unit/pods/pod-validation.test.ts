import { describe, expect, it } from 'vitest';
import { isDnsLabel, isDnsSubdomain, isPodUid, validatePodManifest } from '../../../src/pods/sources/pod-validation.js';

type Doc = Record<string, any>;

/** A manifest that uses every validated part, valid as it is. */
function base(): Doc {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'web.example', namespace: 'prod', labels: { app: 'web', 'example.com/tier': 'front_1.a' }, annotations: { 'example.com/note': 'anything: at all' } },
    spec: {
      restartPolicy: 'Always',
      terminationGracePeriodSeconds: 0,
      volumes: [
        { name: 'data', hostPath: { path: '/srv/data', type: 'DirectoryOrCreate' } },
        { name: 'scratch', emptyDir: {} },
      ],
      initContainers: [{ name: 'init', image: 'busybox', volumeMounts: [{ name: 'scratch', mountPath: '/s', subPathExpr: 'logs/$(POD)' }] }],
      containers: [
        {
          name: 'app',
          image: 'busybox:1.36',
          imagePullPolicy: 'IfNotPresent',
          ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }, { containerPort: 53, protocol: 'UDP', hostPort: 53 }],
          env: [{ name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }, { name: 'my.var-1', value: 'x' }],
          volumeMounts: [
            { name: 'data', mountPath: '/data', readOnly: true, mountPropagation: 'HostToContainer' },
            { name: 'scratch', mountPath: '/logs', subPath: 'a/b' },
          ],
          livenessProbe: { httpGet: { port: 'http', path: '/' }, initialDelaySeconds: 0, periodSeconds: 1, timeoutSeconds: 1, successThreshold: 1, failureThreshold: 1 },
          readinessProbe: { tcpSocket: { port: 8080 }, successThreshold: 3 },
          startupProbe: { exec: { command: ['true'] }, failureThreshold: 30 },
        },
      ],
    },
  };
}

function mutate(f: (d: Doc) => void): Doc {
  const d = base();
  f(d);
  return d;
}

const c0 = (d: Doc) => d.spec.containers[0];

describe('validatePodManifest', () => {
  it('accepts a manifest using every validated field', () => {
    expect(validatePodManifest(base())).toEqual([]);
  });

  it.each<[string, (d: Doc) => void, string]>([
    // Volumes: names are DNS labels, unique, with exactly one source.
    ['a path as a volume name', (d) => (d.spec.volumes[1].name = '../../../../etc'), 'spec.volumes[1].name: "../../../../etc" is not a valid volume name'],
    ['a volume name of 64 characters', (d) => (d.spec.volumes[1].name = 'a'.repeat(64)), 'spec.volumes[1].name: '],
    ['an upper-case volume name', (d) => (d.spec.volumes[1].name = 'Data'), 'spec.volumes[1].name: "Data" is not a valid volume name'],
    ['a volume without a name', (d) => delete d.spec.volumes[1].name, 'spec.volumes[1].name: undefined is not a valid volume name'],
    ['a duplicate volume name', (d) => (d.spec.volumes[1].name = 'data'), 'spec.volumes[1].name: duplicate volume name "data"'],
    ['a volume with no source', (d) => delete d.spec.volumes[1].emptyDir, 'spec.volumes[1]: must specify a volume source'],
    ['a volume with two sources', (d) => (d.spec.volumes[1].hostPath = { path: '/x' }), 'spec.volumes[1]: must specify exactly one volume source, got hostPath, emptyDir'],
    ['a relative hostPath', (d) => (d.spec.volumes[0].hostPath.path = 'srv/data'), 'spec.volumes[0].hostPath.path: "srv/data" must be an absolute path'],
    ['a hostPath with ..', (d) => (d.spec.volumes[0].hostPath.path = '/srv/../etc'), 'spec.volumes[0].hostPath.path: "/srv/../etc" must not contain ".."'],
    ['a hostPath without path', (d) => (d.spec.volumes[0].hostPath = {}), 'spec.volumes[0].hostPath.path: required'],
    ['an unknown hostPath type', (d) => (d.spec.volumes[0].hostPath.type = 'Pipe'), 'spec.volumes[0].hostPath.type: unsupported value "Pipe"'],
    ['volumes not a list', (d) => (d.spec.volumes = { name: 'x' }), 'spec.volumes: must be a list'],
    ['a volume that is a string', (d) => (d.spec.volumes[1] = 'scratch'), 'spec.volumes[1]: must be an object'],
    // volumeMounts.
    ['a mount of no volume', (d) => (c0(d).volumeMounts[0].name = 'nope'), 'spec.containers[0].volumeMounts[0].name: volume "nope" not found in spec.volumes'],
    ['a relative mountPath', (d) => (c0(d).volumeMounts[0].mountPath = 'data'), 'spec.containers[0].volumeMounts[0].mountPath: "data" must be an absolute path'],
    ['a missing mountPath', (d) => delete c0(d).volumeMounts[0].mountPath, 'spec.containers[0].volumeMounts[0].mountPath: required'],
    ['a mountPath used twice', (d) => (c0(d).volumeMounts[1].mountPath = '/data'), 'spec.containers[0].volumeMounts[1].mountPath: "/data" must be unique in the container'],
    ['an absolute subPath', (d) => (c0(d).volumeMounts[1].subPath = '/etc'), 'spec.containers[0].volumeMounts[1].subPath: "/etc" must be a relative path'],
    ['a subPath with ..', (d) => (c0(d).volumeMounts[1].subPath = 'a/../../etc'), 'spec.containers[0].volumeMounts[1].subPath: "a/../../etc" must not contain ".."'],
    ['a subPathExpr with ..', (d) => (d.spec.initContainers[0].volumeMounts[0].subPathExpr = '..'), 'spec.initContainers[0].volumeMounts[0].subPathExpr: ".." must not contain ".."'],
    ['subPath and subPathExpr', (d) => (c0(d).volumeMounts[1].subPathExpr = 'x'), 'spec.containers[0].volumeMounts[1].subPathExpr: subPathExpr and subPath are mutually exclusive'],
    ['a subPath that is a number', (d) => (c0(d).volumeMounts[1].subPath = 7), 'spec.containers[0].volumeMounts[1].subPath: must be a string, got 7'],
    ['an unknown mountPropagation', (d) => (c0(d).volumeMounts[0].mountPropagation = 'Both'), 'spec.containers[0].volumeMounts[0].mountPropagation: must be None, HostToContainer or Bidirectional, got "Both"'],
    ['readOnly as a string', (d) => (c0(d).volumeMounts[0].readOnly = 'true'), 'spec.containers[0].volumeMounts[0].readOnly: must be a boolean, got "true"'],
    // Names' lengths.
    ['metadata.name of 254 characters', (d) => (d.metadata.name = 'a'.repeat(254)), 'metadata.name: "aaaa'],
    ['a namespace of 64 characters', (d) => (d.metadata.namespace = 'n'.repeat(64)), 'metadata.namespace: "nnnn'],
    ['a container name of 64 characters', (d) => (c0(d).name = 'c'.repeat(64)), 'spec.containers[0].name: "cccc'],
    ['a container name with a slash', (d) => (c0(d).name = '../x'), 'spec.containers[0].name: "../x" is not a valid container name'],
    ['a metadata that is a list', (d) => (d.metadata = ['x']), 'metadata: must be an object'],
    // Ports.
    ['containerPort 0', (d) => (c0(d).ports[0].containerPort = 0), 'spec.containers[0].ports[0].containerPort: must be between 1 and 65535, got 0'],
    ['containerPort 65536', (d) => (c0(d).ports[0].containerPort = 65536), 'spec.containers[0].ports[0].containerPort: must be between 1 and 65535, got 65536'],
    ['containerPort as a string', (d) => (c0(d).ports[0].containerPort = '80'), 'spec.containers[0].ports[0].containerPort: must be an integer, got "80"'],
    ['no containerPort', (d) => delete c0(d).ports[0].containerPort, 'spec.containers[0].ports[0].containerPort: required'],
    ['protocol HTTP', (d) => (c0(d).ports[0].protocol = 'HTTP'), 'spec.containers[0].ports[0].protocol: must be TCP, UDP or SCTP, got "HTTP"'],
    ['a port name of 16 characters', (d) => (c0(d).ports[0].name = 'abcdefghijklmnop'), 'spec.containers[0].ports[0].name: "abcdefghijklmnop" is not a valid port name'],
    ['a port name without a letter', (d) => (c0(d).ports[0].name = '8080'), 'spec.containers[0].ports[0].name: "8080" is not a valid port name'],
    ['a port name with --', (d) => (c0(d).ports[0].name = 'a--b'), 'spec.containers[0].ports[0].name: "a--b" is not a valid port name'],
    ['a duplicate port name', (d) => (c0(d).ports[1].name = 'http'), 'spec.containers[0].ports[1].name: duplicate port name "http"'],
    ['hostPort 70000', (d) => (c0(d).ports[1].hostPort = 70000), 'spec.containers[0].ports[1].hostPort: must be between 0 and 65535, got 70000'],
    // Probes.
    ['periodSeconds 0', (d) => (c0(d).livenessProbe.periodSeconds = 0), 'spec.containers[0].livenessProbe.periodSeconds: must be greater than or equal to 1, got 0'],
    ['periodSeconds as a string', (d) => (c0(d).livenessProbe.periodSeconds = '10'), 'spec.containers[0].livenessProbe.periodSeconds: must be an integer, got "10"'],
    ['timeoutSeconds 0', (d) => (c0(d).readinessProbe.timeoutSeconds = 0), 'spec.containers[0].readinessProbe.timeoutSeconds: must be greater than or equal to 1, got 0'],
    ['initialDelaySeconds -1', (d) => (c0(d).startupProbe.initialDelaySeconds = -1), 'spec.containers[0].startupProbe.initialDelaySeconds: must be greater than or equal to 0, got -1'],
    ['initialDelaySeconds 1.5', (d) => (c0(d).startupProbe.initialDelaySeconds = 1.5), 'spec.containers[0].startupProbe.initialDelaySeconds: must be an integer, got 1.5'],
    ['failureThreshold 0', (d) => (c0(d).startupProbe.failureThreshold = 0), 'spec.containers[0].startupProbe.failureThreshold: must be greater than or equal to 1, got 0'],
    ['successThreshold 2 for liveness', (d) => (c0(d).livenessProbe.successThreshold = 2), 'spec.containers[0].livenessProbe.successThreshold: must be 1 for a liveness probe, got 2'],
    ['successThreshold 2 for startup', (d) => (c0(d).startupProbe.successThreshold = 2), 'spec.containers[0].startupProbe.successThreshold: must be 1 for a startup probe, got 2'],
    ['successThreshold 0 for readiness', (d) => (c0(d).readinessProbe.successThreshold = 0), 'spec.containers[0].readinessProbe.successThreshold: must be greater than or equal to 1, got 0'],
    ['a probe with no handler', (d) => delete c0(d).readinessProbe.tcpSocket, 'spec.containers[0].readinessProbe: must specify a handler'],
    ['a probe with two handlers', (d) => (c0(d).readinessProbe.exec = { command: ['true'] }), 'spec.containers[0].readinessProbe: must specify exactly one handler, got exec, tcpSocket'],
    ['a probe port 0', (d) => (c0(d).readinessProbe.tcpSocket.port = 0), 'spec.containers[0].readinessProbe.tcpSocket.port: must be between 1 and 65535 or a port name, got 0'],
    // Pod-level fields.
    ['terminationGracePeriodSeconds -1', (d) => (d.spec.terminationGracePeriodSeconds = -1), 'spec.terminationGracePeriodSeconds: must be greater than or equal to 0, got -1'],
    ['terminationGracePeriodSeconds "30"', (d) => (d.spec.terminationGracePeriodSeconds = '30'), 'spec.terminationGracePeriodSeconds: must be an integer, got "30"'],
    ['restartPolicy Sometimes', (d) => (d.spec.restartPolicy = 'Sometimes'), 'spec.restartPolicy: must be Always, OnFailure or Never, got "Sometimes"'],
    // Env.
    ['an env name with =', (d) => (c0(d).env[1].name = 'A=B'), 'spec.containers[0].env[1].name: "A=B" is not a valid environment variable name'],
    // RelaxedEnvironmentVariableValidation (GA in 1.35): printable ASCII but "=", so "1A" or "a:b" are names.
    ['an env name with a tab', (d) => (c0(d).env[1].name = 'A\tB'), 'spec.containers[0].env[1].name: "A\\tB" is not a valid environment variable name (printable ASCII characters other than "=")'],
    ['an env name that is not ASCII', (d) => (c0(d).env[1].name = 'CAFÉ'), 'spec.containers[0].env[1].name: "CAFÉ" is not a valid environment variable name'],
    ['an envFrom prefix with =', (d) => (c0(d).envFrom = [{ prefix: 'A=', configMapRef: { name: 'c' } }]), 'spec.containers[0].envFrom[0].prefix: "A=" is not a valid environment variable name'],
    ['an envFrom with both sources', (d) => (c0(d).envFrom = [{ configMapRef: { name: 'c' }, secretRef: { name: 's' } }]), 'spec.containers[0].envFrom[0]: must specify exactly one of configMapRef and secretRef'],
    // Static pods may not refer to API objects (the kubelet's PreventStaticPodAPIReferences).
    ['a configMapKeyRef', (d) => (c0(d).env[0].valueFrom = { configMapKeyRef: { name: 'cfg', key: 'k', optional: true } }), 'spec.containers[0].env[0].valueFrom.configMapKeyRef: a static pod cannot refer to API objects (ConfigMap "cfg")'],
    ['a secretKeyRef', (d) => (c0(d).env[0].valueFrom = { secretKeyRef: { name: 'db', key: 'pw' } }), 'spec.containers[0].env[0].valueFrom.secretKeyRef: a static pod cannot refer to API objects (Secret "db")'],
    ['an envFrom configMapRef', (d) => (c0(d).envFrom = [{ configMapRef: { name: 'cfg' } }]), 'spec.containers[0].envFrom[0].configMapRef: a static pod cannot refer to API objects (ConfigMap "cfg")'],
    ['an envFrom secretRef', (d) => (c0(d).envFrom = [{ prefix: 'DB_', secretRef: { name: 'db', optional: true } }]), 'spec.containers[0].envFrom[0].secretRef: a static pod cannot refer to API objects (Secret "db")'],
    ['a serviceAccountName', (d) => (d.spec.serviceAccountName = 'default'), 'spec.serviceAccountName: a static pod cannot refer to API objects (ServiceAccount "default")'],
    ['a deprecated serviceAccount', (d) => (d.spec.serviceAccount = 'web'), 'spec.serviceAccount: a static pod cannot refer to API objects (ServiceAccount "web")'],
    ['an env without a name', (d) => delete c0(d).env[1].name, 'spec.containers[0].env[1].name: required'],
    ['an env value that is a number', (d) => (c0(d).env[1].value = 3), 'spec.containers[0].env[1].value: must be a string, got 3'],
    ['value and valueFrom', (d) => (c0(d).env[0].value = 'x'), 'spec.containers[0].env[0].valueFrom: may not be specified when value is not empty'],
    // Labels and annotations.
    ['a label value that is a number', (d) => (d.metadata.labels.app = 3), 'metadata.labels["app"]: value must be a string, got 3'],
    ['a label value with a space', (d) => (d.metadata.labels.app = 'a b'), 'metadata.labels["app"]: a label value must consist of alphanumerics'],
    ['a label value of 64 characters', (d) => (d.metadata.labels.app = 'v'.repeat(64)), 'metadata.labels["app"]: a label value must be at most 63 characters'],
    ['a label key with two slashes', (d) => (d.metadata.labels['a/b/c'] = 'x'), 'metadata.labels["a/b/c"]: invalid key: a qualified name has at most one "/"'],
    ['a label key with a bad prefix', (d) => (d.metadata.labels['Example.com/x'] = 'x'), 'metadata.labels["Example.com/x"]: invalid key: its prefix must be a DNS-1123 subdomain'],
    ['an annotation key with a space', (d) => (d.metadata.annotations['a b'] = 'x'), 'metadata.annotations["a b"]: invalid key: its name part must consist of alphanumerics'],
    ['an annotation value that is an object', (d) => (d.metadata.annotations.x = { a: 1 }), 'metadata.annotations["x"]: value must be a string, got {"a":1}'],
    ['labels as a list', (d) => (d.metadata.labels = ['a']), 'metadata.labels: must be a map of strings'],
    ['annotations over 256 KiB', (d) => (d.metadata.annotations.big = 'x'.repeat(262_144)), 'metadata.annotations: may not be more than 262144 bytes in total'],
  ])('%s', (_n, change, problem) => {
    const problems = validatePodManifest(mutate(change));
    expect(problems.some((p) => p.startsWith(problem)), `${JSON.stringify(problems)} has no problem starting with ${JSON.stringify(problem)}`).toBe(true);
  });

  it('takes the relaxed env names of 1.35 (printable ASCII but "="), as the API server does', () => {
    expect(validatePodManifest(mutate((d) => (c0(d).env[1].name = '1A:b.c')))).toEqual([]);
    expect(validatePodManifest(mutate((d) => (c0(d).env[1].name = 'Logging:LogLevel:Default')))).toEqual([]);
  });

  it('reports every problem at once, each with its field path', () => {
    const problems = validatePodManifest(
      mutate((d) => {
        d.apiVersion = 'v2';
        d.spec.volumes[1].name = '../../x';
        c0(d).ports[0].containerPort = 0;
        c0(d).livenessProbe.periodSeconds = '10';
        d.spec.containers.push({ name: 'app' });
      }),
    );
    expect(problems).toEqual([
      'apiVersion: must be v1, got "v2"',
      'spec.volumes[1].name: "../../x" is not a valid volume name (a DNS-1123 label: at most 63 lower-case alphanumerics or "-", starting and ending with an alphanumeric)',
      // The mount of the renamed volume refers to nothing now.
      'spec.initContainers[0].volumeMounts[0].name: volume "scratch" not found in spec.volumes',
      'spec.containers[0].ports[0].containerPort: must be between 1 and 65535, got 0',
      'spec.containers[0].volumeMounts[1].name: volume "scratch" not found in spec.volumes',
      'spec.containers[0].livenessProbe.periodSeconds: must be an integer, got "10"',
      'spec.containers[1].name: duplicate container name "app"',
      'spec.containers[1].image: required',
    ]);
  });

  it.each<[string, unknown]>([
    ['containers of nulls and numbers', [null, 3, 'x']],
    ['a container with lists of nulls', [{ name: 'a', image: 'b', ports: [null], env: [7], volumeMounts: ['v'], livenessProbe: 'yes' }]],
  ])('never throws on hostile shapes: %s', (_n, containers) => {
    const problems = validatePodManifest({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x' }, spec: { containers, volumes: [null, { name: 'v', emptyDir: 'x' }] } });
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.every((p) => /^[a-zA-Z.[\]0-9]+: /.test(p))).toBe(true);
  });

  it('a missing spec or metadata is reported, not thrown', () => {
    expect(validatePodManifest({ apiVersion: 'v1', kind: 'Pod' })).toEqual(['metadata.name: required', 'spec: required']);
  });
});

describe('name checks used for host paths', () => {
  it.each<[unknown, boolean, boolean]>([
    ['web', true, true],
    ['web.example', false, true],
    ['a'.repeat(63), true, true],
    ['a'.repeat(64), false, true],
    ['a'.repeat(254), false, false],
    ['..', false, false],
    ['a/b', false, false],
    ['-a', false, false],
    ['', false, false],
    [7, false, false],
  ])('%j: DNS label %s, subdomain %s', (s, label, sub) => {
    expect(isDnsLabel(s)).toBe(label);
    expect(isDnsSubdomain(s)).toBe(sub);
  });

  it('pod UIDs are letters, digits and dashes', () => {
    expect(isPodUid('0f7e3c1a-8f3e-4c1b-9f0d-2a6b7c8d9e0f')).toBe(true);
    expect(isPodUid('0123456789abcdef0123456789abcdef')).toBe(true);
    for (const bad of ['', '..', 'a/b', 'a.b', 'x'.repeat(129), undefined]) expect(isPodUid(bad)).toBe(false);
  });
});

describe('validatePodManifest: security contexts', () => {
  it('accepts a full pod and container securityContext', () => {
    const d = base();
    d.spec.hostUsers = true;
    d.spec.securityContext = {
      runAsUser: 1000, runAsGroup: 3000, runAsNonRoot: true, fsGroup: 2000, fsGroupChangePolicy: 'OnRootMismatch', supplementalGroups: [4000], supplementalGroupsPolicy: 'Strict',
      sysctls: [{ name: 'net.ipv4.ip_unprivileged_port_start', value: '0' }, { name: 'kernel/shm_rmid_forced', value: '1' }],
      seccompProfile: { type: 'RuntimeDefault' }, appArmorProfile: { type: 'Localhost', localhostProfile: 'k8s-x' }, seLinuxOptions: { level: 's0' },
    };
    d.spec.containers[0].securityContext = { privileged: true, capabilities: { add: ['NET_ADMIN'], drop: ['ALL'] }, readOnlyRootFilesystem: true, procMount: 'Default', runAsUser: 0 };
    expect(validatePodManifest(d)).toEqual([]);
  });

  it('reports every problem with its field path', () => {
    const d = base();
    d.spec.hostUsers = 'no';
    d.spec.securityContext = {
      runAsUser: -1, fsGroup: 2147483648, fsGroupChangePolicy: 'Sometimes', supplementalGroups: [1, 'x'], supplementalGroupsPolicy: 'All',
      sysctls: [{ name: 'Net.Core', value: '1' }, { name: 'net.core.somaxconn', value: 1 }, { name: 'net/core/somaxconn', value: '2' }],
      appArmorProfile: { type: 'Localhost' }, seccompProfile: { type: 'RuntimeDefault', localhostProfile: 'x' },
    };
    d.spec.containers[0].securityContext = { privileged: true, allowPrivilegeEscalation: false, procMount: 'Raw', capabilities: { add: [''] } };
    d.spec.initContainers[0].securityContext = { allowPrivilegeEscalation: false, capabilities: { add: ['SYS_ADMIN'] }, runAsGroup: 1.5 };
    expect(validatePodManifest(d)).toEqual([
      'spec.hostUsers: must be a boolean, got "no"',
      'spec.securityContext.runAsUser: must be between 0 and 2147483647, got -1',
      'spec.securityContext.seccompProfile.localhostProfile: can only be set when type is Localhost',
      'spec.securityContext.appArmorProfile.localhostProfile: required when type is Localhost',
      'spec.securityContext.fsGroup: must be between 0 and 2147483647, got 2147483648',
      'spec.securityContext.supplementalGroups[1]: must be an integer between 0 and 2147483647, got "x"',
      'spec.securityContext.fsGroupChangePolicy: must be OnRootMismatch or Always, got "Sometimes"',
      'spec.securityContext.supplementalGroupsPolicy: must be Merge or Strict, got "All"',
      'spec.securityContext.sysctls[0].name: "Net.Core" is not a valid sysctl name (lower-case segments separated by "." or "/", at most 253 characters)',
      'spec.securityContext.sysctls[1].value: must be a string, got 1',
      'spec.securityContext.sysctls[2].name: duplicate sysctl "net/core/somaxconn"',
      'spec.initContainers[0].securityContext.runAsGroup: must be an integer, got 1.5',
      'spec.initContainers[0].securityContext: cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN',
      'spec.containers[0].securityContext.procMount: must be Default or Unmasked, got "Raw"',
      'spec.containers[0].securityContext.capabilities.add[0]: must be a capability name, got ""',
      'spec.containers[0].securityContext: cannot set `allowPrivilegeEscalation` to false and `privileged` to true',
    ]);
  });
});
