import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { admitPod, appArmorAdmitHandler, containerCountAdmitHandler, MAX_CONTAINERS_PER_POD, podAdmitHandlers, rejectedStatus, safeSysctls, supplementalGroupsPolicyAdmitHandler, sysctlAdmitHandler, userNamespaceAdmitHandler } from '../../../src/pods/sync/admission.js';
import { PodManager } from '../../../src/pods/sync/manager.js';
import { ManualClock } from '../../helpers/clock.js';
import { managerWithEvents } from '../../helpers/pod-manager.js';
import { MemRuntime } from '../../fakes/pod-runtime.js';

const pod = (over: { sysctls?: { name: string; value: string }[]; hostNetwork?: boolean; hostIPC?: boolean; hostUsers?: boolean; annotations?: Record<string, string>; appArmor?: object; podAppArmor?: object; uid?: string } = {}): Pod => ({
  metadata: { name: 'p', namespace: 'default', uid: over.uid ?? 'u1', ...(over.annotations ? { annotations: over.annotations } : {}) },
  spec: {
    ...(over.hostNetwork ? { hostNetwork: true } : {}),
    ...(over.hostIPC ? { hostIPC: true } : {}),
    ...(over.hostUsers !== undefined ? { hostUsers: over.hostUsers } : {}),
    securityContext: { ...(over.sysctls ? { sysctls: over.sysctls } : {}), ...(over.podAppArmor ? { appArmorProfile: over.podAppArmor as never } : {}) },
    containers: [{ name: 'c', image: 'busybox', ...(over.appArmor ? { securityContext: { appArmorProfile: over.appArmor as never } } : {}) }],
  },
});

describe('safeSysctls', () => {
  it('is the kubelet list for the kernel: version-gated names only from their kernel on', () => {
    expect(safeSysctls('6.1.0-18-amd64')).toEqual([
      'kernel.shm_rmid_forced',
      'net.ipv4.ip_local_port_range',
      'net.ipv4.tcp_syncookies',
      'net.ipv4.ping_group_range',
      'net.ipv4.ip_unprivileged_port_start',
      'net.ipv4.ip_local_reserved_ports',
      'net.ipv4.tcp_keepalive_time',
      'net.ipv4.tcp_fin_timeout',
      'net.ipv4.tcp_keepalive_intvl',
      'net.ipv4.tcp_keepalive_probes',
      'net.ipv4.tcp_rmem',
      'net.ipv4.tcp_wmem',
    ]);
    expect(safeSysctls('4.5.0')).not.toContain('net.ipv4.tcp_fin_timeout');
    expect(safeSysctls('4.5.0')).toContain('net.ipv4.tcp_keepalive_time');
    expect(safeSysctls('3.10.0-1160.el7')).not.toContain('net.ipv4.ip_local_reserved_ports');
    expect(safeSysctls('garbage')).toEqual(['kernel.shm_rmid_forced', 'net.ipv4.ip_local_port_range', 'net.ipv4.tcp_syncookies', 'net.ipv4.ping_group_range', 'net.ipv4.ip_unprivileged_port_start', 'net.ipv4.tcp_rmem', 'net.ipv4.tcp_wmem']);
  });
});

describe('sysctl admission (SysctlForbidden)', () => {
  const handler = sysctlAdmitHandler(safeSysctls('6.1.0'), ['kernel.msg*', 'net.core.somaxconn']);
  it.each([
    ['no sysctls', pod(), undefined],
    ['a safe net sysctl on a pod with its own network', pod({ sysctls: [{ name: 'net.ipv4.ip_unprivileged_port_start', value: '0' }] }), undefined],
    ['a safe sysctl with / separators', pod({ sysctls: [{ name: 'net/ipv4/ip_unprivileged_port_start', value: '0' }] }), undefined],
    ['an allowed unsafe one', pod({ sysctls: [{ name: 'net.core.somaxconn', value: '1024' }] }), undefined],
    ['an allowed unsafe pattern', pod({ sysctls: [{ name: 'kernel.msgmax', value: '65536' }] }), undefined],
    ['an unsafe one not allowed', pod({ sysctls: [{ name: 'kernel.sem', value: '250 32000 32 128' }] }), 'forbidden sysctl: "kernel.sem" not allowlisted'],
    ['a non-namespaced one', pod({ sysctls: [{ name: 'vm.swappiness', value: '1' }] }), 'forbidden sysctl: "vm.swappiness" not allowlisted'],
    ['a safe net sysctl on the host network', pod({ hostNetwork: true, sysctls: [{ name: 'net.ipv4.ip_unprivileged_port_start', value: '0' }] }), 'forbidden sysctl: "net.ipv4.ip_unprivileged_port_start" not allowed with host net enabled'],
    ['an allowed ipc sysctl on the host IPC', pod({ hostIPC: true, sysctls: [{ name: 'kernel.msgmax', value: '1' }] }), 'forbidden sysctl: "kernel.msgmax" not allowed with host ipc enabled'],
    ['the first bad one of several', pod({ sysctls: [{ name: 'kernel.shm_rmid_forced', value: '1' }, { name: 'kernel.panic', value: '1' }, { name: 'vm.swappiness', value: '1' }] }), 'forbidden sysctl: "kernel.panic" not allowlisted'],
  ])('%s', (_, p, message) => {
    expect(handler(p)).toEqual(message ? { reason: 'SysctlForbidden', message } : undefined);
  });

  it.each([
    [['vm.swappiness'], 'allowedUnsafeSysctls: the sysctl "vm.swappiness" are not known to be namespaced'],
    [['kernel.*'], 'allowedUnsafeSysctls: the sysctls "kernel.*" are not known to be namespaced'],
    [['Net.Core'], 'allowedUnsafeSysctls: sysctl "Net.Core" must have at most 253 characters'],
    [['net..core'], 'allowedUnsafeSysctls: sysctl "net..core" must have at most 253 characters'],
  ])('refuses allowedUnsafeSysctls %j at start, as the kubelet', (allowed, message) => {
    expect(() => sysctlAdmitHandler([], allowed)).toThrow(message);
    try {
      sysctlAdmitHandler([], allowed);
    } catch (err) {
      expect((err as NodeletError).code).toBe('CONFIG_INVALID');
    }
  });

  it('accepts the patterns the kubelet documents', () => {
    expect(() => sysctlAdmitHandler([], ['kernel.shm*', 'kernel.msg*', 'kernel.sem', 'fs.mqueue.*', 'net.*', 'net/ipv4/tcp_mem'])).not.toThrow();
  });
});

describe('AppArmor admission', () => {
  const noAppArmor = appArmorAdmitHandler(false);
  const withAppArmor = appArmorAdmitHandler(true);
  it.each([
    ['no profile', pod(), undefined],
    ['Unconfined everywhere', pod({ appArmor: { type: 'Unconfined' }, podAppArmor: { type: 'Unconfined' } }), undefined],
    ['a container RuntimeDefault', pod({ appArmor: { type: 'RuntimeDefault' } }), 'Cannot enforce AppArmor: AppArmor is not enabled on the host'],
    ['a pod Localhost', pod({ podAppArmor: { type: 'Localhost', localhostProfile: 'k8s-x' } }), 'Cannot enforce AppArmor: AppArmor is not enabled on the host'],
    ['the deprecated annotation', pod({ annotations: { 'container.apparmor.security.beta.kubernetes.io/c': 'runtime/default' } }), 'Cannot enforce AppArmor: AppArmor is not enabled on the host'],
    ['the annotation unconfined', pod({ annotations: { 'container.apparmor.security.beta.kubernetes.io/c': 'unconfined' } }), undefined],
  ])('on a host without AppArmor: %s', (_, p, message) => {
    expect(noAppArmor(p)).toEqual(message ? { reason: 'AppArmor', message } : undefined);
  });

  it('on a host with AppArmor: profiles pass, an empty Localhost name does not', () => {
    expect(withAppArmor(pod({ appArmor: { type: 'RuntimeDefault' } }))).toBeUndefined();
    expect(withAppArmor(pod({ annotations: { 'container.apparmor.security.beta.kubernetes.io/c': 'localhost/' } }))).toEqual({ reason: 'AppArmor', message: 'Cannot enforce AppArmor: invalid empty AppArmor profile name for container c' });
  });
});

describe('supplementalGroupsPolicy admission', () => {
  const strict = (policy: string): Pod => ({ metadata: { name: 'p', uid: 'u' }, spec: { securityContext: { supplementalGroupsPolicy: policy } as never, containers: [] } });
  const refusal = { reason: 'SupplementalGroupsPolicyNotSupported', message: 'SupplementalGroupsPolicy=Strict is not supported in this node' };
  it.each([
    ['Strict, runtime without the feature (containerd 1.6)', 'Strict', false, refusal],
    ['Strict, runtime not asked yet', 'Strict', undefined, refusal],
    ['Strict, runtime with the feature', 'Strict', true, undefined],
    ['Merge needs nothing', 'Merge', false, undefined],
  ])('%s', (_, policy, supported, want) => {
    expect(supplementalGroupsPolicyAdmitHandler(() => supported)(strict(policy))).toEqual(want);
  });
});

describe('container count admission (nodelet\'s own bound)', () => {
  const withContainers = (apps: number, inits = 0, ephemeral = 0): Pod => ({
    metadata: { name: 'wide', namespace: 'default', uid: 'u-wide' },
    spec: {
      containers: Array.from({ length: apps }, (_, i) => ({ name: `c${i}`, image: 'busybox' })),
      initContainers: Array.from({ length: inits }, (_, i) => ({ name: `i${i}`, image: 'busybox' })),
      ephemeralContainers: Array.from({ length: ephemeral }, (_, i) => ({ name: `e${i}`, image: 'busybox' })),
    },
  });
  it('admits up to the bound counting init, app and ephemeral containers, and names the count past it', () => {
    expect(MAX_CONTAINERS_PER_POD).toBe(1024);
    expect(containerCountAdmitHandler(withContainers(1000, 20, 4))).toBeUndefined();
    expect(containerCountAdmitHandler(withContainers(1000, 20, 5))).toEqual({ reason: 'TooManyContainers', message: 'the pod has 1025 containers; nodelet runs at most 1024 in one pod' });
    // A pod at the API server's size limit (~45,000 minimal containers) is refused first, before any other handler looks at it.
    const huge = withContainers(45_000);
    expect(admitPod(huge, podAdmitHandlers({ kernelRelease: '6.1.0', appArmorEnabled: false }))?.reason).toBe('TooManyContainers');
  });
});

describe('admitPod', () => {
  const handlers = podAdmitHandlers({ kernelRelease: '6.1.0', allowedUnsafeSysctls: [], appArmorEnabled: false });
  it('the first handler that refuses decides; a pod nothing refuses is admitted', () => {
    expect(admitPod(pod(), handlers)).toBeUndefined();
    expect(admitPod(pod({ hostUsers: true }), handlers)).toBeUndefined();
    expect(admitPod(pod({ hostUsers: false, sysctls: [{ name: 'kernel.sem', value: '1' }] }), handlers)?.reason).toBe('SysctlForbidden');
    expect(admitPod(pod({ hostUsers: false }), handlers)).toEqual(userNamespaceAdmitHandler(pod({ hostUsers: false })));
    expect(admitPod(pod({ hostUsers: false }), handlers)?.message).toMatch(/^spec\.hostUsers: false asks for a user namespace, which nodelet does not set up/);
  });

  it("a rejected pod's status is the kubelet's rejectPod status", () => {
    expect(rejectedStatus(pod(), { reason: 'SysctlForbidden', message: 'forbidden sysctl: "kernel.sem" not allowlisted' })).toEqual({
      phase: 'Failed',
      reason: 'SysctlForbidden',
      message: 'Pod was rejected: forbidden sysctl: "kernel.sem" not allowlisted',
      qosClass: 'BestEffort',
    });
  });
});

describe('PodManager admission', () => {
  it('a rejected pod never runs: Failed with the reason, one Warning event; an admitted one runs beside it', async () => {
    const { clock, rt, events, m } = managerWithEvents({ admitHandlers: podAdmitHandlers({ kernelRelease: '6.1.0', allowedUnsafeSysctls: [], appArmorEnabled: false }) });
    const bad = pod({ uid: 'bad', sysctls: [{ name: 'kernel.sem', value: '1' }] });
    bad.metadata!.name = 'bad';
    const good = pod({ uid: 'good' });
    m.setDesired([bad, good]);
    await m.syncOnce();
    clock.t += 60_000;
    m.setDesired([bad, good]);
    await m.syncOnce();
    expect(rt.calls).toEqual(['runSandbox p 0', 'startContainer c 0']);
    expect(m.podStatus('bad')).toEqual({ phase: 'Failed', reason: 'SysctlForbidden', message: 'Pod was rejected: forbidden sysctl: "kernel.sem" not allowlisted', qosClass: 'BestEffort' });
    expect(m.getPod('default', 'bad')!.status!.phase).toBe('Failed');
    expect(m.podStatus('good')!.phase).toBe('Running');
    expect(events.filter((e) => e.startsWith('Warning'))).toEqual(['Warning SysctlForbidden: forbidden sysctl: "kernel.sem" not allowlisted']);
  });

  it('a pod found running that is rejected now (the config changed) is stopped, and stays Failed', async () => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    const p = pod({ uid: 'u9', sysctls: [{ name: 'kernel.sem', value: '1' }] });
    const before = new PodManager({ runtime: rt, logger: silentLogger(), clock, admitHandlers: podAdmitHandlers({ kernelRelease: '6.1.0', allowedUnsafeSysctls: ['kernel.sem'], appArmorEnabled: false }) });
    before.setDesired([p]);
    await before.syncOnce();
    expect(before.podStatus('u9')!.phase).toBe('Running');
    rt.calls = [];
    const after = new PodManager({ runtime: rt, logger: silentLogger(), clock, admitHandlers: podAdmitHandlers({ kernelRelease: '6.1.0', allowedUnsafeSysctls: [], appArmorEnabled: false }) });
    after.setDesired([p]);
    await after.syncOnce();
    expect(rt.calls.filter((c) => c.startsWith('stop'))).toEqual([expect.stringMatching(/^stopContainer /), expect.stringMatching(/^stopSandbox /)]);
    expect(rt.calls.some((c) => c.startsWith('start') || c.startsWith('run'))).toBe(false);
    expect(after.podStatus('u9')!.reason).toBe('SysctlForbidden');
  });
});
