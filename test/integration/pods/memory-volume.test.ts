/**
 * emptyDir `medium: Memory` on containerd (issue 28.4): a tmpfs of the kubelet's size inside
 * the container, gone from the host's mounts, with the pod's directory, once the pod is.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../helpers/nodelet.js';
import { busyboxPod, containerLog, startPodNode, type PodNode } from './harness.js';

let node: PodNode;
beforeAll(async () => {
  node = await startPodNode();
}, 120_000);
afterAll(async () => {
  await node?.close();
}, 120_000);

describe('emptyDir medium Memory', () => {
  it('is a tmpfs of sizeLimit in the container, and is unmounted and removed with the pod', async () => {
    const p = busyboxPod('memvol', 'grep " /cache " /proc/mounts; echo DONE; sleep 3600', { container: { volumeMounts: [{ name: 'cache', mountPath: '/cache' }] } }) as { spec: Record<string, unknown> };
    node.writeManifest('memvol.yaml', { ...p, spec: { ...p.spec, volumes: [{ name: 'cache', emptyDir: { medium: 'Memory', sizeLimit: '16Mi' } }] } });
    const pod = await eventually(async () => {
      const got = await node.pod('memvol');
      return got && containerLog(node, got, 'main').includes('DONE') ? got : undefined;
    }, 60_000);
    const line = containerLog(node, pod, 'main').split('\n').find((l) => l.includes(' /cache '))!;
    console.log(`memory volume: ${line.split(' ').slice(3).join(' ')}`);
    expect(line).toMatch(/ \/cache tmpfs rw,.*size=16384k/);
    const dir = path.join(node.rootDir, 'pods', pod.metadata!.uid!, 'volumes', 'kubernetes.io~empty-dir', 'cache');
    expect(fs.readFileSync('/proc/self/mountinfo', 'utf8')).toContain(` ${dir} `);
    fs.rmSync(path.join(node.manifests, 'memvol.yaml'));
    await eventually(async () => !fs.existsSync(path.join(node.rootDir, 'pods', pod.metadata!.uid!)), 60_000);
    expect(fs.readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(` ${dir} `);
  }, 120_000);
});
