/**
 * Pod volumes never reach the host (issue 19): the attacks as a pod author would run them,
 * against the built nodelet and a real containerd of this file's own. A victim directory
 * made by the test stands for the host: after each attack its entries, modes, contents and
 * mtimes are what they were.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseMountInfo } from '../../../src/pods/volumes/subpath.js';
import { eventually, tempDir } from '../../helpers/nodelet.js';
import { busyboxPod, runtimePods, startPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-security';
const IMAGE = 'docker.io/local/busybox:latest';

let node: PodNode;
let victimRoot: string;
let victim: string;

beforeAll(async () => {
  node = await startPodNode({ containerdDir: CONTAINERD_DIR });
});

afterAll(async () => {
  await node?.close();
  if (victimRoot) fs.rmSync(victimRoot, { recursive: true, force: true });
});

beforeEach(() => {
  victimRoot = tempDir('nodelet-victim-');
  victim = path.join(victimRoot, 'host-dir');
  fs.mkdirSync(path.join(victim, 'sub'), { recursive: true });
  fs.writeFileSync(path.join(victim, 'secret'), 'host secret\n');
  fs.chmodSync(path.join(victim, 'secret'), 0o600);
  fs.chmodSync(victim, 0o750);
});

afterEach(async () => {
  for (const f of fs.readdirSync(node.manifests)) fs.rmSync(path.join(node.manifests, f));
  await eventually(async () => (await runtimePods(node.cri)).length === 0, 60_000);
  fs.rmSync(victimRoot, { recursive: true, force: true });
});

/** Every entry under `dir` with its type, mode, mtime and content: what "unchanged" means. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (p: string) => {
    const st = fs.lstatSync(p);
    const rel = path.relative(dir, p) || '.';
    out[rel] = `${(st.mode & 0o170000).toString(8)} ${(st.mode & 0o7777).toString(8)} ${st.mtimeMs} ${st.isFile() ? fs.readFileSync(p, 'utf8') : ''}`;
    if (st.isDirectory()) for (const n of fs.readdirSync(p)) walk(path.join(p, n));
  };
  walk(dir);
  return out;
}

/** Mount points at or under `dir` in this (the host's) mount namespace. */
function mountsUnder(dir: string): string[] {
  const real = fs.realpathSync(dir);
  return parseMountInfo(fs.readFileSync('/proc/self/mountinfo', 'utf8')).filter((m) => m === real || m.startsWith(`${real}/`));
}

function waitingOf(p: Pod | undefined, container: string) {
  return p?.status?.containerStatuses?.find((c) => c.name === container)?.state?.waiting;
}

function emptyDir(uid: string, volume: string): string {
  return path.join(node.rootDir, 'pods', uid, 'volumes/kubernetes.io~empty-dir', volume);
}

/**
 * Removes the pod's manifest, waits until the pod and its runtime pod are gone, then checks
 * what must hold once a pod is gone: no pod dir, no log dir, no mount left under the root
 * dir, and the victim still as `before`.
 */
async function removePodLeavingNothing(file: string, uid: string, before: Record<string, string>): Promise<void> {
  fs.rmSync(path.join(node.manifests, file));
  await eventually(async () => (await node.pods()).length === 0 && (await runtimePods(node.cri)).length === 0, 60_000);
  // cleanupPod runs right after the runtime pod is removed.
  await eventually(() => !fs.existsSync(path.join(node.rootDir, 'pods', uid)), 10_000);
  expect(fs.existsSync(path.join(node.rootDir, 'pods', uid))).toBe(false);
  expect(fs.readdirSync(node.logsDir).filter((n) => n.endsWith(`_${uid}`))).toEqual([]);
  expect(mountsUnder(node.rootDir)).toEqual([]);
  expect(snapshot(victim)).toEqual(before);
}

describe('pod volumes never reach the host', () => {
  it('subPath through a symlink a container planted is refused (CreateContainerConfigError naming it); the host dir is untouched; nothing is left after the pod', async () => {
    const before = snapshot(victim);
    const victimRel = victim.slice(1);
    node.writeManifest(
      'escape.yaml',
      busyboxPod('escape', 'sleep 3600', {
        spec: {
          volumes: [{ name: 'v', emptyDir: {} }],
          // The kubelet CVE-2017-1002101 shape: links to the host dir and to / in the volume.
          initContainers: [{ name: 'plant', image: IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', `ln -sf ${victim} /v/escape && ln -sf / /v/root`], volumeMounts: [{ name: 'v', mountPath: '/v' }] }],
          containers: [
            { name: 'direct', image: IMAGE, imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'], volumeMounts: [{ name: 'v', mountPath: '/host', subPath: 'escape/planted' }] },
            { name: 'viaroot', image: IMAGE, imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'], volumeMounts: [{ name: 'v', mountPath: '/host', subPath: `root/${victimRel}` }] },
          ],
        },
      }),
    );
    const pod = await eventually(async () => {
      const p = await node.pod('escape');
      return waitingOf(p, 'direct')?.reason === 'CreateContainerConfigError' && waitingOf(p, 'viaroot')?.reason === 'CreateContainerConfigError' ? p : undefined;
    }, 40_000);
    expect(waitingOf(pod, 'direct')!.message).toContain('volumeMount "v" of container direct: subPath "escape/planted" is refused: "escape" is a symbolic link');
    expect(waitingOf(pod, 'viaroot')!.message).toContain(`volumeMount "v" of container viaroot: subPath "root/${victimRel}" is refused: "root" is a symbolic link`);
    // The links are there (the attack ran); nothing went through them.
    const uid = pod.metadata!.uid!;
    expect(fs.readlinkSync(path.join(emptyDir(uid, 'v'), 'escape'))).toBe(victim);
    expect(snapshot(victim)).toEqual(before);
    expect(mountsUnder(node.rootDir)).toEqual([]);
    // Still refused on the next tries, still untouched.
    await new Promise((r) => setTimeout(r, 1500));
    expect(waitingOf(await node.pod('escape'), 'direct')?.reason).toBe('CreateContainerConfigError');
    expect(snapshot(victim)).toEqual(before);

    await removePodLeavingNothing('escape.yaml', uid, before);
  });

  it('a legitimate subPath and subPathExpr work (created when missing, the right files seen and written); a link planted later is refused at the restart', async () => {
    const before = snapshot(victim);
    node.writeManifest(
      'legit.yaml',
      busyboxPod('legit', '', {
        spec: {
          volumes: [{ name: 'v', emptyDir: {} }],
          initContainers: [{ name: 'seed', image: IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', 'mkdir -p /v/data/app && echo from-init > /v/data/app/seed'], volumeMounts: [{ name: 'v', mountPath: '/v' }] }],
          containers: [
            {
              name: 'main',
              image: IMAGE,
              imagePullPolicy: 'IfNotPresent',
              env: [{ name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }],
              // Reads and writes through the subPaths; then, when the test says go, swaps the
              // subPath directory for a link to the host and exits: the restart must refuse it.
              command: [
                '/bin/sh',
                '-c',
                `cat /work/seed > /new/copied && echo written > /work/from-main && echo expr > /expr/by-expr && until [ -e /work/go ]; do sleep 0.2; done; mv /v/data/app /v/data/old && ln -s ${victim} /v/data/app && exit 1`,
              ],
              volumeMounts: [
                { name: 'v', mountPath: '/work', subPath: 'data/app' },
                { name: 'v', mountPath: '/new', subPath: 'made/on/demand' },
                { name: 'v', mountPath: '/expr', subPathExpr: 'by-pod/$(POD)' },
                { name: 'v', mountPath: '/v' },
              ],
            },
          ],
        },
      }),
    );
    const pod = await eventually(async () => {
      const p = await node.pod('legit');
      return p?.status?.containerStatuses?.[0]?.state?.running ? p : undefined;
    }, 40_000);
    const uid = pod.metadata!.uid!;
    const vol = emptyDir(uid, 'v');
    await eventually(() => fs.existsSync(path.join(vol, `by-pod/${pod.metadata!.name}/by-expr`)), 20_000);
    // The files went where the subPaths say, in the volume; missing directories were made 0755.
    expect(fs.readFileSync(path.join(vol, 'data/app/from-main'), 'utf8')).toBe('written\n');
    expect(fs.readFileSync(path.join(vol, 'made/on/demand/copied'), 'utf8')).toBe('from-init\n');
    expect(fs.statSync(path.join(vol, 'made/on/demand')).mode & 0o777).toBe(0o755);
    expect(fs.readFileSync(path.join(vol, `by-pod/${pod.metadata!.name}/by-expr`), 'utf8')).toBe('expr\n');
    // The runtime got nodelet's binds, in the kubelet's layout.
    const podRoot = fs.realpathSync(path.join(node.rootDir, 'pods', uid));
    expect(mountsUnder(podRoot).map((m) => path.relative(podRoot, m)).sort()).toEqual(['volume-subpaths/v/main/0', 'volume-subpaths/v/main/1', 'volume-subpaths/v/main/2']);
    fs.writeFileSync(path.join(vol, 'data/app/go'), '');

    // The container swapped data/app for a link and exited: the restart is refused, naming the mount.
    const refused = await eventually(async () => {
      const p = await node.pod('legit');
      return waitingOf(p, 'main')?.reason === 'CreateContainerConfigError' ? p : undefined;
    }, 40_000);
    expect(waitingOf(refused, 'main')!.message).toContain('volumeMount "v" of container main: subPath "data/app" is refused: "data/app" is a symbolic link');
    expect(fs.readlinkSync(path.join(vol, 'data/app'))).toBe(victim);
    expect(snapshot(victim)).toEqual(before);

    await removePodLeavingNothing('legit.yaml', uid, before);
  });

  it('a static manifest whose emptyDir name is a path is refused, naming the file and the field; the host dir keeps its mode', async () => {
    const before = snapshot(victim);
    const evil = `../../../../../../../../../../../..${victim}`;
    node.writeManifest(
      'evil-name.yaml',
      busyboxPod('evilname', 'sleep 3600', { spec: { volumes: [{ name: evil, emptyDir: {} }] }, container: { volumeMounts: [{ name: evil, mountPath: '/x' }] } }),
    );
    const rec = await node.nodelet.waitFor((r) => r.msg.includes('skipping static pod manifest') && String(r.file).endsWith('evil-name.yaml'));
    expect(rec.msg).toContain(`spec.volumes[0].name: ${JSON.stringify(evil)} is not a valid volume name`);
    await new Promise((r) => setTimeout(r, 1500));
    expect(await node.pod('evilname')).toBeUndefined();
    expect(snapshot(victim)).toEqual(before);
    expect(fs.statSync(victim).mode & 0o777).toBe(0o750);
  });
});
