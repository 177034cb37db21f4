/**
 * The whole securityContext reaches the runtime as the kubelet builds it, and admission
 * refuses what cannot be honoured (issue 28): static pods on a real containerd of this
 * file's own (scripts/containerd.sh, with its CNI config for the pods with their own
 * network), read back from inside the containers through their logs.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../helpers/nodelet.js';
import { podNetwork, removePodNetwork } from '../../helpers/pod-network.js';
import { busyboxPod, containerLog, runtimePods, startPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-secctx';

let node: PodNode;

/**
 * A new network link in the pod's namespace: a dummy one, or a veth pair where the kernel
 * has no dummy driver (these test VMs: "RTNETLINK answers: Operation not supported").
 * Both need CAP_NET_ADMIN, which only the privileged container has. (busybox's `ip` takes
 * no `peer name`: the kernel names the peer veth<n>.)
 */
const ADD_LINK = '{ ip link add dummy0 type dummy 2>/dev/null || ip link add ptest type veth; }';

beforeAll(async () => {
  node = await startPodNode({ containerdDir: CONTAINERD_DIR, config: { allowedUnsafeSysctls: '[kernel.msgmax]' } });
}, 120_000);

afterAll(async () => {
  await node?.close();
  // The bridge and IPAM state of the pods with their own network outlive their sandboxes.
  await removePodNetwork(podNetwork(CONTAINERD_DIR)).catch(() => undefined);
}, 120_000);

/** The container's log lines (the CRI log format's text part), once `done` shows in it. */
async function output(pod: string, container: string, done = 'DONE'): Promise<string[]> {
  const p = await eventually(async () => {
    const got = await node.pod(pod);
    return got && containerLog(node, got, container).includes(done) ? got : undefined;
  }, 60_000).catch(async (err) => {
    // Say where the pod is: the assertion that follows would only say "not met".
    throw new Error(`${(err as Error).message}: pod ${pod} ${JSON.stringify((await node.pod(pod))?.status)}`);
  });
  return containerLog(node, p, container)
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(' ').slice(3).join(' '));
}

async function waiting(pod: string, container = 'main') {
  // ContainerCreating comes before the first attempt: wait for the attempt's verdict.
  return eventually(async () => {
    const w = (await node.pod(pod))?.status?.containerStatuses?.find((c) => c.name === container)?.state?.waiting;
    return w && w.reason !== 'ContainerCreating' ? w : undefined;
  }, 60_000);
}

async function rejected(pod: string): Promise<Pod> {
  return eventually(async () => {
    const p = await node.pod(pod);
    return p?.status?.phase === 'Failed' ? p : undefined;
  }, 30_000);
}

describe('securityContext on containerd', () => {
  it('a privileged container (sandbox marked privileged) creates a network link; its non-privileged neighbour cannot; a safe net sysctl is applied', async () => {
    node.writeManifest('netpriv.json', {
      ...(busyboxPod('netpriv', '') as object),
      spec: {
        terminationGracePeriodSeconds: 2,
        securityContext: { sysctls: [{ name: 'net.ipv4.ip_unprivileged_port_start', value: '100' }] },
        containers: [
          { name: 'priv', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', securityContext: { privileged: true }, command: ['/bin/sh', '-c', `${ADD_LINK} && echo LINK-OK; echo DONE; sleep 3600`] },
          { name: 'plain', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', `${ADD_LINK} 2>/dev/null || echo LINK-REFUSED; echo "port_start=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start)"; echo DONE; sleep 3600`] },
        ],
      },
    });
    expect({ priv: await output('netpriv', 'priv'), plain: await output('netpriv', 'plain') }).toEqual({ priv: ['LINK-OK', 'DONE'], plain: ['LINK-REFUSED', 'port_start=100', 'DONE'] });
    // Both printed DONE; the status follows at the end of the sync that started them.
    await eventually(async () => (await node.pod('netpriv'))?.status?.phase === 'Running' || undefined, 20_000);
  }, 90_000);

  it('runAsUser, runAsGroup, supplementalGroups and fsGroup in `id`; the fsGroup owns the emptyDir; drop ALL leaves CapEff 0; readOnlyRootFilesystem', async () => {
    const script = 'id; echo "vol=$(stat -c %g /data) mode=$(stat -c %a /data)"; touch /data/new && echo "file=$(stat -c %g /data/new)"; grep CapEff /proc/self/status; touch /rootfs-write 2>/dev/null || echo ROFS; echo DONE; sleep 3600';
    node.writeManifest('ids.json', {
      ...(busyboxPod('ids', '') as object),
      spec: {
        hostNetwork: true,
        terminationGracePeriodSeconds: 2,
        securityContext: { runAsUser: 1000, runAsGroup: 3000, supplementalGroups: [4000], fsGroup: 2000 },
        volumes: [{ name: 'data', emptyDir: {} }],
        containers: [
          { name: 'ids', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', script], volumeMounts: [{ name: 'data', mountPath: '/data' }] },
          { name: 'dropall', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', script], volumeMounts: [{ name: 'data', mountPath: '/data' }], securityContext: { runAsUser: 0, capabilities: { drop: ['ALL'] }, readOnlyRootFilesystem: true } },
          { name: 'root', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', script], volumeMounts: [{ name: 'data', mountPath: '/data' }], securityContext: { runAsUser: 0 } },
        ],
      },
    });
    const ids = await output('ids', 'ids');
    const id = ids.find((l) => l.startsWith('uid='))!;
    expect(id).toMatch(/^uid=1000 gid=3000 groups=/);
    expect(id.replace(/^.*groups=/, '').split(',').map((g) => g.replace(/\(.*\)/, '')).sort()).toEqual(expect.arrayContaining(['2000', '4000']));
    expect(ids).toContain('vol=2000 mode=2777');
    expect(ids).toContain('file=2000');
    expect(ids).toContain('CapEff:\t0000000000000000'); // uid 1000: no effective capabilities anyway
    const dropped = await output('ids', 'dropall');
    expect(dropped.find((l) => l.startsWith('uid='))).toMatch(/^uid=0(\(root\))? gid=3000 /);
    expect(dropped).toContain('CapEff:\t0000000000000000');
    expect(dropped).toContain('ROFS');
    const root = await output('ids', 'root');
    const capEff = root.find((l) => l.startsWith('CapEff:'));
    expect(capEff).toMatch(/^CapEff:\t[0-9a-f]{16}$/);
    expect(capEff).not.toBe('CapEff:\t0000000000000000'); // the runtime's default set, which drop ALL removed
    expect(root).not.toContain('ROFS');
    // On the host: the volume is group-owned with setgid.
    const uid = (await node.pod('ids'))!.metadata!.uid!;
    const st = fs.statSync(path.join(node.rootDir, 'pods', uid, 'volumes/kubernetes.io~empty-dir/data'));
    expect([st.gid, (st.mode & 0o7777).toString(8)]).toEqual([2000, '2777']);
  }, 90_000);

  it("runAsNonRoot with the root busybox image waits in CreateContainerConfigError with the kubelet's message", async () => {
    node.writeManifest('nonroot.json', busyboxPod('nonroot', 'echo never; sleep 3600', { spec: { securityContext: { runAsNonRoot: true } } }));
    const w = await waiting(`nonroot`);
    const uid = (await node.pod('nonroot'))!.metadata!.uid!;
    expect(w).toEqual({ reason: 'CreateContainerConfigError', message: `container has runAsNonRoot and image will run as root (pod: "nonroot-${node.name}_default(${uid})", container: main)` });
  }, 90_000);

  it('sysctls: an unsafe one not allowed makes the pod Failed/SysctlForbidden at admission (nothing created); an allowed unsafe and a safe IPC one are applied', async () => {
    node.writeManifest('unsafe.json', busyboxPod('unsafe', 'echo never; sleep 3600', { spec: { securityContext: { sysctls: [{ name: 'kernel.sem', value: '250 32000 32 128' }] } } }));
    node.writeManifest('ipc.json', busyboxPod('ipc', 'echo "msgmax=$(cat /proc/sys/kernel/msgmax) shm=$(cat /proc/sys/kernel/shm_rmid_forced)"; echo DONE; sleep 3600', { spec: { securityContext: { sysctls: [{ name: 'kernel.msgmax', value: '12345' }, { name: 'kernel.shm_rmid_forced', value: '1' }] } } }));
    const p = await rejected('unsafe');
    expect(p.status).toMatchObject({ phase: 'Failed', reason: 'SysctlForbidden', message: 'Pod was rejected: forbidden sysctl: "kernel.sem" not allowlisted' });
    expect(await output('ipc', 'main')).toEqual(['msgmax=12345 shm=1', 'DONE']);
    const sandboxes = await runtimePods(node.cri);
    expect(sandboxes.some((s) => s.labels['io.kubernetes.pod.uid'] === p.metadata!.uid)).toBe(false);
    // A safe net sysctl on the host network would change the host's: refused too.
    node.writeManifest('hostnet-sysctl.json', busyboxPod('hostnet-sysctl', 'sleep 3600', { spec: { securityContext: { sysctls: [{ name: 'net.ipv4.ip_unprivileged_port_start', value: '0' }] } } }));
    expect((await rejected('hostnet-sysctl')).status?.message).toBe('Pod was rejected: forbidden sysctl: "net.ipv4.ip_unprivileged_port_start" not allowed with host net enabled');
  }, 90_000);

  it('what the host or the runtime cannot do is refused naming the field and why: hostUsers: false; AppArmor on a host without it; Strict supplemental groups on a runtime without them', async () => {
    node.writeManifest('userns.json', busyboxPod('userns', 'sleep 3600', { spec: { hostUsers: false } }));
    const u = await rejected('userns');
    expect(u.status?.reason).toBe('UserNamespacesNotSupported');
    expect(u.status?.message).toMatch(/^Pod was rejected: spec\.hostUsers: false asks for a user namespace, which nodelet does not set up/);
    const hostHasAppArmor = (() => {
      try {
        return fs.readFileSync('/sys/module/apparmor/parameters/enabled', 'utf8').startsWith('Y');
      } catch {
        return false;
      }
    })();
    node.writeManifest('apparmor.json', busyboxPod('apparmor', 'echo DONE; sleep 3600', { container: { securityContext: { appArmorProfile: { type: 'RuntimeDefault' } } } }));
    if (hostHasAppArmor) {
      expect(await output('apparmor', 'main')).toEqual(['DONE']);
    } else {
      expect((await rejected('apparmor')).status).toMatchObject({ phase: 'Failed', reason: 'AppArmor', message: 'Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host' });
    }
    // Strict supplemental groups, which containerd 1.6 would silently merge with the image's.
    node.writeManifest('strict.json', busyboxPod('strict', 'id; echo DONE; sleep 3600', { spec: { securityContext: { runAsUser: 1000, supplementalGroups: [4000], supplementalGroupsPolicy: 'Strict' } } }));
    if ((await node.cri.status()).features?.supplementalGroupsPolicy) {
      // Not seen here (containerd 1.6): a runtime with the feature runs it, with the pod's group.
      expect((await output('strict', 'main')).find((l) => l.startsWith('uid='))).toMatch(/^uid=1000 .*groups=.*4000/);
    } else {
      expect((await rejected('strict')).status).toMatchObject({ phase: 'Failed', reason: 'SupplementalGroupsPolicyNotSupported', message: 'Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node' });
    }
  }, 90_000);
});
