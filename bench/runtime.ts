/**
 * What the containerd benchmarks share: the private benchmark containerd, and the raw CRI
 * configs of a hostNetwork pod labelled as the kubelet labels them (the "direct" side of
 * each comparison), and a sweep that leaves the runtime empty.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CriClient } from '../src/runtime/cri-client.js';
import type { ContainerConfig, PodSandboxConfig } from '../src/runtime/types.js';

const PROJECT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const IMAGE = 'docker.io/local/busybox:latest';

/**
 * Starts (or finds) the benchmark's containerd; its CRI endpoint. Each benchmark has its own
 * (`/var/lib/nodelet-dev/containerd-bench-<name>`, or NODELET_BENCH_CONTAINERD_DIR): an agent
 * removes the runtime pods it did not ask for, so two benchmarks run side by side on one
 * containerd would remove each other's pods.
 */
export function benchContainerd(): string {
  const name = path.basename(process.argv[1] ?? 'bench', '.js');
  const out = execFileSync(path.join(PROJECT, 'scripts/containerd.sh'), ['start'], {
    env: { ...process.env, NODELET_CONTAINERD_DIR: process.env.NODELET_BENCH_CONTAINERD_DIR ?? `/var/lib/nodelet-dev/containerd-bench-${name}` },
    encoding: 'utf8',
  });
  return out.trim().split('\n').pop()!;
}

export async function removeAll(cri: CriClient): Promise<void> {
  for (const s of await cri.listPodSandbox()) {
    await cri.stopPodSandbox(s.id).catch(() => undefined);
    await cri.removePodSandbox(s.id);
  }
}

/** A hostNetwork sandbox config for pod `uid` in namespace `bench`, with the kubelet's pod labels. */
export function sandboxConfig(uid: string, logDirectory: string): PodSandboxConfig {
  return {
    metadata: { name: uid, uid, namespace: 'bench', attempt: 0 },
    logDirectory,
    labels: podLabels(uid),
    linux: { securityContext: { namespaceOptions: { network: 'NODE', pid: 'CONTAINER', ipc: 'POD', targetId: '' } } },
  };
}

/** A busybox container sleeping for an hour, with the kubelet's labels. */
export function sleeperConfig(uid: string, name: string, logPath: string): ContainerConfig {
  return {
    metadata: { name, attempt: 0 },
    image: { image: IMAGE },
    command: ['sleep', '3600'],
    labels: { ...podLabels(uid), 'io.kubernetes.container.name': name },
    logPath,
  };
}

function podLabels(uid: string): Record<string, string> {
  return { 'io.kubernetes.pod.uid': uid, 'io.kubernetes.pod.name': uid, 'io.kubernetes.pod.namespace': 'bench' };
}
