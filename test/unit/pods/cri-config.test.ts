import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { containerConfig, sandboxConfig } from '../../../src/pods/cri/cri-config.js';

const pod = (hostNetwork: boolean): Pod => ({
  metadata: { name: 'web-node1', namespace: 'prod', uid: 'u-1', labels: { app: 'web' } },
  spec: {
    hostNetwork,
    terminationGracePeriodSeconds: 7,
    containers: [
      {
        name: 'app',
        image: 'docker.io/local/busybox:latest',
        command: ['/bin/sh'],
        args: ['-c', 'sleep 1'],
        workingDir: '/tmp',
        env: [{ name: 'A', value: '1' }],
        ports: [{ containerPort: 8080, hostPort: 18080 }],
        resources: { limits: { cpu: '250m', memory: '64Mi' }, requests: { cpu: '100m' } },
      },
    ],
  },
});
const quantity = (q: string | number) => {
  const s = String(q);
  if (s.endsWith('m')) return Number(s.slice(0, -1)) / 1000;
  if (s.endsWith('Mi')) return Number(s.slice(0, -2)) * 1024 * 1024;
  return Number(s);
};

describe('sandboxConfig', () => {
  it('carries the kubelet labels, host network and no hostname for hostNetwork pods', () => {
    const c = sandboxConfig(pod(true), 2, { logDirectory: '/var/log/pods/prod_web-node1_u-1' });
    expect(c.metadata).toEqual({ name: 'web-node1', uid: 'u-1', namespace: 'prod', attempt: 2 });
    expect(c.labels).toEqual({ app: 'web', 'io.kubernetes.pod.name': 'web-node1', 'io.kubernetes.pod.namespace': 'prod', 'io.kubernetes.pod.uid': 'u-1' });
    expect(c.hostname).toBeUndefined();
    expect((c.linux as any).securityContext.namespaceOptions).toEqual({ network: 'NODE', pid: 'CONTAINER', ipc: 'POD' });
    expect(c.portMappings).toEqual([{ protocol: 'TCP', containerPort: 8080, hostPort: 18080, hostIp: '' }]);
  });

  it('sets the hostname (spec.hostname over the name) and the DNS config it is given for pods with their own network', () => {
    const dnsConfig = { servers: ['10.96.0.10'], searches: ['prod.svc.cluster.local', 'svc.cluster.local', 'cluster.local'], options: ['ndots:5'] };
    const c = sandboxConfig(pod(false), 0, { logDirectory: '/l', dnsConfig, clusterDomain: 'cluster.local' });
    expect(c.hostname).toBe('web-node1');
    expect(c.dnsConfig).toEqual(dnsConfig);
    const named = pod(false);
    named.spec!.hostname = 'web';
    expect(sandboxConfig(named, 0, { logDirectory: '/l' }).hostname).toBe('web');
  });

  it('gives a hostNetwork pod its DNS config too (the host-like one), and no hostname', () => {
    const c = sandboxConfig(pod(true), 0, { logDirectory: '/l', dnsConfig: { servers: ['192.0.2.53'], searches: [], options: [] } });
    expect(c.hostname).toBeUndefined();
    expect(c.dnsConfig).toEqual({ servers: ['192.0.2.53'], searches: [], options: [] });
  });
});

describe('containerConfig downward API IPs', () => {
  const envPod = (hostNetwork: boolean): Pod => {
    const p = pod(hostNetwork);
    p.spec!.containers[0]!.env = [
      { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
      { name: 'POD_IPS', valueFrom: { fieldRef: { fieldPath: 'status.podIPs' } } },
      { name: 'HOST_IP', valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } },
    ];
    return p;
  };
  const envOf = (p: Pod, podIPs?: string[]) =>
    Object.fromEntries((containerConfig(p, p.spec!.containers[0]!, { restartCount: 0, seccomp: { profileType: 'RuntimeDefault' }, quantity, hostIP: '192.0.2.10', ...(podIPs ? { podIPs } : {}) }).envs as { key: string; value: string }[]).map((e) => [e.key, e.value]));

  it('a pod with its own network sees its sandbox IPs; a hostNetwork pod the node IP', () => {
    expect(envOf(envPod(false), ['10.244.7.5', 'fd00::5'])).toEqual({ POD_IP: '10.244.7.5', POD_IPS: '10.244.7.5,fd00::5', HOST_IP: '192.0.2.10' });
    expect(envOf(envPod(true), ['10.244.7.5'])).toEqual({ POD_IP: '192.0.2.10', POD_IPS: '192.0.2.10', HOST_IP: '192.0.2.10' });
    expect(envOf(envPod(false))).toEqual({ POD_IP: '', POD_IPS: '', HOST_IP: '192.0.2.10' });
  });
});

describe('containerConfig', () => {
  it('maps command, env, resources, seccomp and the kubelet container labels/annotations', () => {
    const p = pod(true);
    const c = containerConfig(p, p.spec!.containers[0]!, { restartCount: 3, seccomp: { profileType: 'Localhost', localhostRef: '/r/seccomp/a.json' }, quantity });
    expect(c).toMatchObject({
      metadata: { name: 'app', attempt: 3 },
      image: { image: 'docker.io/local/busybox:latest' },
      command: ['/bin/sh'],
      args: ['-c', 'sleep 1'],
      workingDir: '/tmp',
      envs: [{ key: 'A', value: '1' }],
      labels: { 'io.kubernetes.container.name': 'app', 'io.kubernetes.pod.uid': 'u-1', 'io.kubernetes.pod.name': 'web-node1', 'io.kubernetes.pod.namespace': 'prod' },
      logPath: 'app/3.log',
      linux: {
        resources: { cpuPeriod: 100000, cpuQuota: 25000, cpuShares: 102, memoryLimitInBytes: 67108864 },
        securityContext: { privileged: false, seccomp: { profileType: 'Localhost', localhostRef: '/r/seccomp/a.json' } },
      },
    });
    expect((c.annotations as Record<string, string>)['io.kubernetes.container.restartCount']).toBe('3');
    expect((c.annotations as Record<string, string>)['io.kubernetes.pod.terminationGracePeriod']).toBe('7');
    expect(JSON.parse((c.annotations as Record<string, string>)['io.kubernetes.container.ports']!)).toEqual([{ containerPort: 8080, protocol: 'TCP' }]);
  });
});
