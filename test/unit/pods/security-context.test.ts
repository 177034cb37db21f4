import { describe, expect, it } from 'vitest';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { containerConfig, sandboxConfig } from '../../../src/pods/cri/cri-config.js';
import {
  containerSecurityContext,
  DEFAULT_MASKED_PATHS,
  DEFAULT_READONLY_PATHS,
  imageUser,
  normalizeSysctlName,
  runAsNonRootProblem,
  sandboxSecurityContext,
} from '../../../src/pods/cri/security-context.js';

const NS = { network: 'POD', pid: 'CONTAINER', ipc: 'POD' };
const RD = { profileType: 'RuntimeDefault' };

const mk = (psc: object | undefined, containers: Container[], extra: Partial<NonNullable<Pod['spec']>> = {}, annotations?: Record<string, string>): Pod => ({
  metadata: { name: 'web', namespace: 'prod', uid: 'u-1', ...(annotations ? { annotations } : {}) },
  spec: { ...(psc ? { securityContext: psc as never } : {}), containers, ...extra },
});

describe('sandboxSecurityContext', () => {
  it('a pod without settings: not privileged, the runtime default seccomp, nothing else', () => {
    expect(sandboxSecurityContext(mk(undefined, [{ name: 'a', image: 'i' }]), NS)).toEqual({ namespaceOptions: NS, privileged: false, seccomp: { profileType: 'RuntimeDefault', localhostRef: '' } });
  });

  it('is privileged when any container is, init containers included (containerd refuses a privileged container otherwise)', () => {
    expect(sandboxSecurityContext(mk(undefined, [{ name: 'a', image: 'i' }, { name: 'b', image: 'i', securityContext: { privileged: true } }]), NS).privileged).toBe(true);
    expect(sandboxSecurityContext(mk(undefined, [{ name: 'a', image: 'i' }], { initContainers: [{ name: 'i', image: 'i', securityContext: { privileged: true } }] }), NS).privileged).toBe(true);
    expect(sandboxSecurityContext(mk(undefined, [{ name: 'a', image: 'i', securityContext: { privileged: false } }]), NS).privileged).toBe(false);
  });

  it('carries the pod-level user, group, fsGroup then supplementalGroups, their policy and SELinux options', () => {
    const p = mk({ runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000, supplementalGroups: [4000, 5000], supplementalGroupsPolicy: 'Strict', seLinuxOptions: { level: 's0:c1,c2' } }, [{ name: 'a', image: 'i' }]);
    expect(sandboxSecurityContext(p, NS)).toEqual({
      namespaceOptions: NS,
      privileged: false,
      seccomp: { profileType: 'RuntimeDefault', localhostRef: '' },
      runAsUser: { value: 1000 },
      runAsGroup: { value: 3000 },
      supplementalGroups: [2000, 4000, 5000],
      supplementalGroupsPolicy: 'Strict',
      selinuxOptions: { user: '', role: '', type: '', level: 's0:c1,c2' },
    });
  });

  it('sandboxConfig puts it in linux.securityContext, with the sysctls normalized', () => {
    const p = mk({ sysctls: [{ name: 'net/ipv4/conf/eth0.100/rp_filter', value: '1' }, { name: 'kernel.shm_rmid_forced', value: '1' }] }, [{ name: 'a', image: 'i', securityContext: { privileged: true } }]);
    const c = sandboxConfig(p, 0, { logDirectory: '/l' });
    expect(c.linux).toEqual({
      securityContext: { namespaceOptions: NS, privileged: true, seccomp: { profileType: 'RuntimeDefault', localhostRef: '' } },
      sysctls: { 'net.ipv4.conf.eth0/100.rp_filter': '1', 'kernel.shm_rmid_forced': '1' },
    });
  });
});

describe('containerSecurityContext', () => {
  it('defaults: the image user, default masked and read-only paths, nothing dropped or added', () => {
    const p = mk(undefined, [{ name: 'a', image: 'i' }]);
    expect(containerSecurityContext(p, p.spec!.containers[0]!, { namespaceOptions: NS, seccomp: RD, image: { uid: 0 } })).toEqual({
      privileged: false,
      namespaceOptions: NS,
      runAsUser: { value: 0 },
      readonlyRootfs: false,
      noNewPrivs: false,
      maskedPaths: [...DEFAULT_MASKED_PATHS],
      readonlyPaths: [...DEFAULT_READONLY_PATHS],
      seccomp: { profileType: 'RuntimeDefault', localhostRef: '' },
    });
  });

  it('the whole context: capabilities as named, container settings over the pod, groups, policy, no_new_privs, Unmasked, AppArmor', () => {
    const c: Container = {
      name: 'a',
      image: 'i',
      securityContext: {
        capabilities: { add: ['NET_ADMIN'], drop: ['ALL'] },
        runAsUser: 1001,
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        procMount: 'Unmasked',
        seLinuxOptions: { type: 'spc_t' },
        appArmorProfile: { type: 'Localhost', localhostProfile: 'k8s-nginx' },
      },
    };
    const p = mk({ runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000, supplementalGroups: [4000], supplementalGroupsPolicy: 'Merge', seLinuxOptions: { level: 's0' } }, [c]);
    expect(containerSecurityContext(p, c, { namespaceOptions: NS, seccomp: { profileType: 'Localhost', localhostRef: '/r/seccomp/x.json' }, image: { username: 'nginx' } })).toEqual({
      capabilities: { addCapabilities: ['NET_ADMIN'], dropCapabilities: ['ALL'] },
      privileged: false,
      namespaceOptions: NS,
      selinuxOptions: { user: '', role: '', type: 'spc_t', level: '' },
      runAsUser: { value: 1001 },
      runAsGroup: { value: 3000 },
      readonlyRootfs: true,
      supplementalGroups: [2000, 4000],
      supplementalGroupsPolicy: 'Merge',
      noNewPrivs: true,
      maskedPaths: [],
      readonlyPaths: [],
      seccomp: { profileType: 'Localhost', localhostRef: '/r/seccomp/x.json' },
      apparmor: { profileType: 'Localhost', localhostRef: 'k8s-nginx' },
      apparmorProfile: 'localhost/k8s-nginx',
    });
  });

  it('an image with a user name and no runAsUser: run_as_username; privileged passes through', () => {
    const c: Container = { name: 'a', image: 'i', securityContext: { privileged: true } };
    const sc = containerSecurityContext(mk(undefined, [c]), c, { namespaceOptions: NS, seccomp: { profileType: 'Unconfined' }, image: { username: 'nobody' } });
    expect(sc).toMatchObject({ privileged: true, runAsUsername: 'nobody' });
    expect(sc.runAsUser).toBeUndefined();
  });

  it('AppArmor: the container field, else the deprecated annotation, else the pod field', () => {
    const c: Container = { name: 'a', image: 'i' };
    const aa = (p: Pod) => {
      const sc = containerSecurityContext(p, p.spec!.containers[0]!, { namespaceOptions: NS, seccomp: RD });
      return [sc.apparmor, sc.apparmorProfile];
    };
    expect(aa(mk({ appArmorProfile: { type: 'RuntimeDefault' } }, [c]))).toEqual([{ profileType: 'RuntimeDefault', localhostRef: '' }, 'runtime/default']);
    expect(aa(mk({ appArmorProfile: { type: 'RuntimeDefault' } }, [c], {}, { 'container.apparmor.security.beta.kubernetes.io/a': 'unconfined' }))).toEqual([{ profileType: 'Unconfined', localhostRef: '' }, 'unconfined']);
    expect(aa(mk(undefined, [c]))).toEqual([undefined, undefined]);
  });

  it('an unknown supplementalGroupsPolicy is a config error naming it', () => {
    const p = mk({ supplementalGroupsPolicy: 'Sometimes' }, [{ name: 'a', image: 'i' }]);
    expect(() => containerSecurityContext(p, p.spec!.containers[0]!, { namespaceOptions: NS, seccomp: RD })).toThrow('unsupported supplementalGroupsPolicy: Sometimes');
  });

  it('containerConfig takes it whole, with the image user it is given', () => {
    const p = mk({ fsGroup: 2000 }, [{ name: 'a', image: 'i', securityContext: { capabilities: { drop: ['ALL'] } } }]);
    const cfg = containerConfig(p, p.spec!.containers[0]!, { restartCount: 0, seccomp: { profileType: 'RuntimeDefault' }, quantity: Number, imageUser: { uid: 65534 } });
    expect((cfg.linux as { securityContext: object }).securityContext).toEqual(containerSecurityContext(p, p.spec!.containers[0]!, { namespaceOptions: NS, seccomp: RD, image: { uid: 65534 } }));
    expect((cfg.linux as { securityContext: Record<string, unknown> }).securityContext).toMatchObject({ runAsUser: { value: 65534 }, supplementalGroups: [2000], capabilities: { addCapabilities: [], dropCapabilities: ['ALL'] } });
  });
});

describe('runAsNonRoot (verifyRunAsNonRoot)', () => {
  const where = '(pod: "web_prod(u-1)", container: a)';
  const c = (sc?: object): Container => ({ name: 'a', image: 'i', ...(sc ? { securityContext: sc } : {}) });
  it.each([
    ['not asked', mk(undefined, [c()]), { uid: 0 }, undefined],
    ['asked false', mk({ runAsNonRoot: false }, [c()]), { uid: 0 }, undefined],
    ['a root image', mk({ runAsNonRoot: true }, [c()]), { uid: 0 }, `container has runAsNonRoot and image will run as root ${where}`],
    ['an image naming no user (root)', mk({ runAsNonRoot: true }, [c()]), imageUser({ uid: null, username: '' }), `container has runAsNonRoot and image will run as root ${where}`],
    ['a non-root image', mk(undefined, [c({ runAsNonRoot: true })]), { uid: 1000 }, undefined],
    ['a named image user', mk({ runAsNonRoot: true }, [c()]), { username: 'nginx' }, `container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root ${where}`],
    ['runAsUser 0', mk({ runAsNonRoot: true }, [c({ runAsUser: 0 })]), { uid: 1000 }, `container's runAsUser breaks non-root policy ${where}`],
    ['runAsUser set on a root image', mk({ runAsNonRoot: true, runAsUser: 1000 }, [c()]), { uid: 0 }, undefined],
    ['the container overrides the pod', mk({ runAsNonRoot: true }, [c({ runAsNonRoot: false })]), { uid: 0 }, undefined],
  ])('%s', (_, p, image, message) => {
    expect(runAsNonRootProblem(p, p.spec!.containers[0]!, image)).toBe(message);
  });

  it('imageUser: uid first, then the name, else root', () => {
    expect(imageUser({ uid: { value: 5 }, username: 'x' })).toEqual({ uid: 5 });
    expect(imageUser({ uid: null, username: 'x' })).toEqual({ username: 'x' });
    expect(imageUser(undefined)).toEqual({ uid: 0 });
  });

  it('normalizeSysctlName swaps . and / only when / comes first', () => {
    expect(normalizeSysctlName('net/ipv4/conf/eno2.100/rp_filter')).toBe('net.ipv4.conf.eno2/100.rp_filter');
    expect(normalizeSysctlName('net.ipv4.conf.eno2/100.rp_filter')).toBe('net.ipv4.conf.eno2/100.rp_filter');
    expect(normalizeSysctlName('kernel')).toBe('kernel');
  });
});
