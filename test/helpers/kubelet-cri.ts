/**
 * What a kubelet leaves in the container runtime for a pod, made through CRI by the test
 * itself (never by nodelet's code), so that a test can hand the node to nodelet and watch
 * it adopt the pod: a takeover from a running kubelet.
 *
 * The facts, from the upstream kubelet (kubernetes/kubernetes pkg/kubelet/kuberuntime):
 * - labels.go: newPodLabels (the pod's labels + io.kubernetes.pod.{name,namespace,uid}),
 *   newPodAnnotations (the pod's annotations, which hold the config source's
 *   kubernetes.io/config.{source,seen}, and config.hash for a static pod),
 *   newContainerLabels (io.kubernetes.pod.{name,namespace,uid} + io.kubernetes.container.name,
 *   nothing else), newContainerAnnotations (hash, restartCount, terminationMessagePath,
 *   terminationMessagePolicy, io.kubernetes.pod.terminationGracePeriod, ports as Go's JSON
 *   of []v1.ContainerPort; hashWithoutResources as the hash while InPlacePodVerticalScaling
 *   is on, as the stored upstream copy writes it);
 * - kuberuntime_sandbox.go generatePodSandboxConfig: metadata name/namespace/uid/attempt,
 *   hostname (own network only), log directory `<podLogsDir>/<ns>_<name>_<uid>`, DNS, a
 *   port mapping for every container port, linux: the pod's cgroup parent (cgroupfs driver,
 *   cgroupsPerQOS: <root>/kubepods/besteffort/pod<uid> for a BestEffort pod, KUBELET_CGROUP_ROOT below), the sandbox's
 *   RuntimeDefault seccomp, namespace options, sysctls;
 * - kuberuntime_container.go generateContainerConfig: metadata name and attempt = the restart
 *   count, the image by its ID (what EnsureImageExists answered) with the name the user gave,
 *   log path `<container>/<restartCount>.log` (the directory made first, 0755), the kubelet's
 *   mounts (/etc/hosts from `<root>/pods/<uid>/etc-hosts` for a pod with its own network, the
 *   termination-log file `<root>/pods/<uid>/containers/<name>/<8 hex digits>`, 0666).
 * Left out: service-link environment variables (there is no kubernetes Service here) and a
 * service account token volume (the pods in these tests have none).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Container, ContainerPort, Pod } from 'kubernetes-types/core/v1.js';
import { containerHash } from '../../src/pods/sync/container-hash.js';
import type { CriClient } from '../../src/runtime/cri-client.js';
import type { ContainerConfig, Mount, PodSandboxConfig } from '../../src/runtime/types.js';

/** The kubelet's default masked and read-only /proc and /sys paths (securitycontext, procMount Default). */
const MASKED_PATHS = ['/proc/asound', '/proc/acpi', '/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list', '/proc/timer_stats', '/proc/sched_debug', '/proc/scsi', '/sys/firmware', '/sys/devices/virtual/powercap'];
const READONLY_PATHS = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];

/** The pod as the kubelet's config source hands it on: `source` and `seen`, and for a file its `config.hash` (the UID). */
export function asKubeletSees(pod: Pod, source: 'api' | 'file'): Pod {
  const seen = new Date().toISOString().replace('Z', '000000Z'); // Go's RFC3339Nano shape
  return {
    ...pod,
    metadata: {
      ...pod.metadata,
      annotations: {
        ...pod.metadata!.annotations,
        'kubernetes.io/config.source': source,
        'kubernetes.io/config.seen': seen,
        ...(source === 'file' ? { 'kubernetes.io/config.hash': pod.metadata!.uid! } : {}),
      },
    },
  };
}

/** Go's encoding/json of []v1.ContainerPort: fields in struct order, empty ones omitted. */
export function goContainerPortsJson(ports: ContainerPort[]): string {
  return JSON.stringify(
    ports.map((p) => ({
      ...(p.name ? { name: p.name } : {}),
      ...(p.hostPort ? { hostPort: p.hostPort } : {}),
      containerPort: p.containerPort,
      ...(p.protocol ? { protocol: p.protocol } : {}),
      ...(p.hostIP ? { hostIP: p.hostIP } : {}),
    })),
  );
}

function hostDns(): { servers: string[]; searches: string[]; options: string[] } {
  const dns = { servers: [] as string[], searches: [] as string[], options: [] as string[] };
  for (const line of fs.readFileSync('/etc/resolv.conf', 'utf8').split('\n')) {
    const [key, ...rest] = line.trim().split(/\s+/);
    if (key === 'nameserver' && rest[0]) dns.servers.push(rest[0]);
    else if (key === 'search') dns.searches = rest;
    else if (key === 'options') dns.options = rest;
  }
  return dns;
}

function namespaceOptions(pod: Pod) {
  const s = pod.spec!;
  return { network: s.hostNetwork ? 'NODE' : 'POD', pid: s.hostPID ? 'NODE' : s.shareProcessNamespace ? 'POD' : 'CONTAINER', ipc: s.hostIPC ? 'NODE' : 'POD' } as const;
}

export interface KubeletNode {
  /** The kubelet's --root-dir (on a takeover, nodelet's too). */
  rootDir: string;
  /** podLogsDir (/var/log/pods). */
  podLogsDir: string;
}

export function kubeletSandboxConfig(pod: Pod, attempt: number, node: KubeletNode): PodSandboxConfig {
  const m = pod.metadata!;
  const own = !pod.spec!.hostNetwork;
  return {
    metadata: { name: m.name!, namespace: m.namespace!, uid: m.uid!, attempt },
    ...(own ? { hostname: m.name! } : {}),
    logDirectory: path.join(node.podLogsDir, `${m.namespace}_${m.name}_${m.uid}`),
    // ClusterFirst without clusterDNS: the kubelet falls back to the host's resolv.conf.
    dnsConfig: hostDns(),
    portMappings: pod.spec!.containers.flatMap((c) => (c.ports ?? []).map((p) => ({ protocol: p.protocol ?? 'TCP', containerPort: p.containerPort, hostPort: p.hostPort ?? 0, hostIp: p.hostIP ?? '' }))),
    labels: { ...m.labels, 'io.kubernetes.pod.name': m.name!, 'io.kubernetes.pod.namespace': m.namespace!, 'io.kubernetes.pod.uid': m.uid! },
    annotations: { ...m.annotations },
    linux: {
      cgroupParent: `${KUBELET_CGROUP_ROOT}/kubepods/besteffort/pod${m.uid}`,
      securityContext: { namespaceOptions: namespaceOptions(pod), privileged: false, seccomp: { profileType: 'RuntimeDefault' } },
      sysctls: {},
    },
  } as PodSandboxConfig;
}

export interface KubeletContainerOptions {
  restartCount: number;
  /** The image's ID (sha256:...), as EnsureImageExists answered. */
  imageRef: string;
  mounts: Mount[];
}

export function kubeletContainerConfig(pod: Pod, c: Container, o: KubeletContainerOptions): ContainerConfig {
  const m = pod.metadata!;
  const hash = containerHash(c);
  return {
    metadata: { name: c.name, attempt: o.restartCount },
    image: { image: o.imageRef, userSpecifiedImage: c.image! },
    command: c.command ?? [],
    args: c.args ?? [],
    workingDir: c.workingDir ?? '',
    envs: [],
    mounts: o.mounts,
    labels: { 'io.kubernetes.pod.name': m.name!, 'io.kubernetes.pod.namespace': m.namespace!, 'io.kubernetes.pod.uid': m.uid!, 'io.kubernetes.container.name': c.name },
    annotations: {
      'io.kubernetes.container.hash': hash,
      'io.kubernetes.container.hashWithoutResources': hash,
      'io.kubernetes.container.restartCount': String(o.restartCount),
      'io.kubernetes.container.terminationMessagePath': c.terminationMessagePath!,
      'io.kubernetes.container.terminationMessagePolicy': c.terminationMessagePolicy!,
      ...(pod.spec!.terminationGracePeriodSeconds !== undefined ? { 'io.kubernetes.pod.terminationGracePeriod': String(pod.spec!.terminationGracePeriodSeconds) } : {}),
      ...(c.ports?.length ? { 'io.kubernetes.container.ports': goContainerPortsJson(c.ports) } : {}),
    },
    logPath: path.join(c.name, `${o.restartCount}.log`),
    stdin: !!c.stdin,
    stdinOnce: !!c.stdinOnce,
    tty: !!c.tty,
    linux: {
      // BestEffort: the minimum CPU shares and the QoS class's OOM score.
      resources: { cpuShares: 2, oomScoreAdj: 1000 },
      securityContext: {
        namespaceOptions: namespaceOptions(pod),
        privileged: false,
        seccomp: { profileType: 'Unconfined' },
        maskedPaths: MASKED_PATHS,
        readonlyPaths: READONLY_PATHS,
      },
    },
  } as ContainerConfig;
}

export interface KubeletLeftovers {
  sandboxId: string;
  /** The running container of each name. */
  running: Record<string, string>;
  /** The exited containers the kubelet's GC keeps (the last dead instance of each restarted container). */
  dead: string[];
  /** The termination-log files made (host paths). */
  terminationLogs: string[];
}

/**
 * Runs `pod` (as the kubelet holds it: defaulted, with its config annotations) as a kubelet
 * would have: one sandbox (attempt 0), then each container; a container in `restarts` runs
 * as attempt n with an exited attempt n-1 beside it (stopped through CRI: what a liveness
 * kill leaves). Every container is running when this resolves.
 */
export async function runPodAsKubelet(cri: CriClient, pod: Pod, node: KubeletNode, restarts: Record<string, number> = {}): Promise<KubeletLeftovers> {
  const uid = pod.metadata!.uid!;
  const sandbox = kubeletSandboxConfig(pod, 0, node);
  fs.mkdirSync(sandbox.logDirectory!, { recursive: true, mode: 0o755 });
  const sandboxId = await cri.runPodSandbox(sandbox);
  const podDir = path.join(node.rootDir, 'pods', uid);
  const mountsBase: Mount[] = [];
  if (!pod.spec!.hostNetwork) {
    const st = await cri.podSandboxStatus(sandboxId);
    const ip = st.network?.ip ?? '';
    fs.mkdirSync(podDir, { recursive: true, mode: 0o750 });
    const hosts = path.join(podDir, 'etc-hosts');
    fs.writeFileSync(hosts, `# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n${ip}\t${pod.metadata!.name}\n`, { mode: 0o644 });
    mountsBase.push({ containerPath: '/etc/hosts', hostPath: hosts, readonly: false, selinuxRelabel: false, propagation: 'PROPAGATION_PRIVATE' });
  }
  const out: KubeletLeftovers = { sandboxId, running: {}, dead: [], terminationLogs: [] };
  for (const c of pod.spec!.containers) {
    const imageRef = (await cri.imageStatus(c.image!))?.id;
    if (!imageRef) throw new Error(`image ${c.image} is not in the runtime`);
    const n = restarts[c.name] ?? 0;
    for (const restartCount of n > 0 ? [n - 1, n] : [0]) {
      const mounts = [...mountsBase];
      if (c.terminationMessagePath) {
        const dir = path.join(podDir, 'containers', c.name);
        fs.mkdirSync(dir, { recursive: true, mode: 0o750 });
        const file = path.join(dir, crypto.randomBytes(4).toString('hex'));
        fs.writeFileSync(file, '');
        fs.chmodSync(file, 0o666);
        out.terminationLogs.push(file);
        mounts.push({ containerPath: c.terminationMessagePath, hostPath: file, readonly: false, selinuxRelabel: false, propagation: 'PROPAGATION_PRIVATE' });
      }
      const config = kubeletContainerConfig(pod, c, { restartCount, imageRef, mounts });
      fs.mkdirSync(path.join(sandbox.logDirectory!, c.name), { recursive: true, mode: 0o755 });
      const id = await cri.createContainer(sandboxId, config, sandbox);
      await cri.startContainer(id);
      if (restartCount < n) {
        await cri.stopContainer(id, 0);
        out.dead.push(id);
      } else {
        out.running[c.name] = id;
      }
    }
  }
  return out;
}

/**
 * The cgroupRoot the "kubelet" here runs its pods under: the kubelet's layout
 * (`<root>/kubepods/besteffort/pod<uid>`, cgroupfs) below a root of this test process's own,
 * never the machine's /kubepods: every nodelet with the default cgroupRoot manages that one
 * (housekeeping removes the pod cgroups it does not know), and concurrent test lanes run them.
 */
export const KUBELET_CGROUP_ROOT = `/nodelet-test-kubelet-${process.pid}`;

/**
 * Removes the empty cgroups the runtime left under KUBELET_CGROUP_ROOT (every hierarchy),
 * deepest first, the root included. rmdir removes only a cgroup with no process and no child:
 * one in use stays.
 */
export function removeKubeletPodCgroups(): void {
  const roots = fs.readdirSync('/sys/fs/cgroup', { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => path.join('/sys/fs/cgroup', d.name));
  for (const root of [...roots, '/sys/fs/cgroup']) {
    const top = path.join(root, KUBELET_CGROUP_ROOT);
    const qos = path.join(top, 'kubepods', 'besteffort');
    let pods: string[] = [];
    try {
      pods = fs.readdirSync(qos).filter((n) => n.startsWith('pod'));
    } catch {
      continue; // nothing made in this hierarchy
    }
    for (const dir of [...pods.map((n) => path.join(qos, n)), qos, path.dirname(qos), top]) {
      try {
        fs.rmdirSync(dir);
      } catch {
        // In use (or not empty): left as it is.
      }
    }
  }
}
