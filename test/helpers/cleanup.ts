/**
 * Removing a test's directory when a nodelet ran pods in it. nodelet, as the kubelet, leaves
 * a pod's volumes mounted when it stops (the pod keeps running: it belongs to the runtime):
 * the tmpfs of a secret or projected volume (every API pod has the service-account one), a
 * memory emptyDir, a subPath bind. `fs.rm` of such a tree fails with EBUSY, and a mount left
 * behind outlives the run. So: every mount under the directory, deepest first, is detached
 * (`umount --lazy`, the mounts are this test's own), then the tree is removed.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** Mount points under `dir` (itself included), deepest first, from /proc/self/mountinfo (octal escapes decoded). */
export function mountsUnder(dir: string): string[] {
  let real: string;
  try {
    real = fs.realpathSync(dir);
  } catch {
    return [];
  }
  const points = fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => !!p)
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((p) => p === real || p.startsWith(`${real}/`));
  return [...new Set(points)].sort((a, b) => b.split(path.sep).length - a.split(path.sep).length);
}

/** Detaches what is mounted under `dir`, then removes it (a missing dir is fine). */
export function removeDir(dir: string): void {
  for (const m of mountsUnder(dir)) spawnSync('umount', ['--lazy', m], { stdio: 'ignore' });
  fs.rmSync(dir, { recursive: true, force: true });
}
