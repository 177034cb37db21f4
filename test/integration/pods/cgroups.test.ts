/**
 * The kubelet's cgroup hierarchy on a real containerd (issue 30.1): three static pods, one
 * per QoS class, on this file's own containerd and under a cgroupRoot of its own
 * (`/nodelet-test-<random>`, removed at the end, so no real /kubepods is touched and runs
 * can sit side by side). For each pod: its container's processes are in
 * `<root>/kubepods[/<qos>]/pod<uid>/<container id>` (read from /proc/<pid>/cgroup, for the
 * driver and cgroup version of this machine), the pod cgroup has the kubelet's limits,
 * /proc/<pid>/oom_score_adj is the kubelet's value, and the pod cgroup is gone once the pod
 * is deleted. kubepods has node allocatable (capacity - kubeReserved), the QoS cgroups their
 * shares.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCgroupLayout, type CgroupLayout } from '../../../src/pods/cgroups/pod-cgroups.js';
import { eventually } from '../../helpers/nodelet.js';
import { busyboxPod, podContainers, removeCgroupTree, startPodNode, type PodNode } from './harness.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-cgroups';
const ROOT = `/nodelet-test-${crypto.randomBytes(4).toString('hex')}`;
const Mi = 1024 * 1024;
const RESERVED = 256 * Mi;
let node: PodNode;
let layout: CgroupLayout;
const ORPHAN = `${ROOT}/kubepods/besteffort/pod${crypto.randomUUID()}`;

/** The pods: a marker in each command finds its process in /proc (the container has its own PID namespace). */
const MARK = crypto.randomBytes(4).toString('hex');
const PODS = {
  guaranteed: { limits: { cpu: '200m', memory: '64Mi' } },
  burstable: { requests: { cpu: '100m', memory: '256Mi' }, limits: { memory: '512Mi' } },
  besteffort: undefined,
} as const;

function manifest(name: keyof typeof PODS): object {
  const resources = PODS[name];
  return busyboxPod(`cg-${name}`, `marker=${MARK}-${name}; trap "exit 0" TERM; while true; do sleep 1; done`, resources ? { container: { resources } } : {});
}

/** Every cgroup mount of this machine (v1: one per hierarchy; v2: the unified one). */
function controllerDir(controller: string): string {
  return layout.version === 2 ? layout.unified! : layout.controllers.get(controller)!;
}

function readIn(controller: string, rel: string, file: string): string {
  return fs.readFileSync(path.join(controllerDir(controller), rel, file), 'utf8').trim();
}

/** The host PID of the container's shell (its command line carries the marker). */
function pidOf(name: string): number | undefined {
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmd.includes(`marker=${MARK}-${name};`)) return Number(entry);
    } catch {
      // gone
    }
  }
  return undefined;
}

/** /proc/<pid>/cgroup as controller -> path (v2: the `0::` line as ''). */
function procCgroups(pid: number): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n')) {
    const [, ctls = '', p = ''] = line.split(':');
    for (const c of ctls === '' ? [''] : ctls.split(',')) out.set(c, p);
  }
  return out;
}

function containerdOomScoreAdj(): number {
  const pid = fs.readFileSync(path.join(CONTAINERD_DIR, 'containerd.pid'), 'utf8').trim();
  return Number(fs.readFileSync(`/proc/${pid}/oom_score_adj`, 'utf8').trim());
}

beforeAll(async () => {
  layout = await readCgroupLayout();
  node = await startPodNode({
    containerdDir: CONTAINERD_DIR,
    config: { cgroupRoot: ROOT, cgroupDriver: 'cgroupfs', kubeReserved: `{memory: "${RESERVED}"}` },
    // A pod cgroup left by a pod nodelet no longer knows (an agent that died): removed at housekeeping.
    beforeStart: async () => {
      for (const mount of layout.mounts) fs.mkdirSync(path.join(mount, ORPHAN), { recursive: true });
    },
  });
}, 120_000);

afterAll(async () => {
  await node?.close();
  await removeCgroupTree(ROOT);
}, 120_000);

describe('pod cgroups on containerd (cgroupfs driver)', () => {
  it('puts each QoS class in the kubelet\'s cgroup with its limits and oom_score_adj, and removes the pod cgroup with the pod', async () => {
    const kubepods = `${ROOT}/kubepods`;
    // kubepods: capacity minus kubeReserved (the kernel keeps a v1 limit in whole pages); the QoS cgroups exist.
    const allocatable = os.totalmem() - RESERVED;
    if (layout.version === 1) {
      expect(Number(readIn('memory', kubepods, 'memory.limit_in_bytes'))).toBe(Math.floor(allocatable / 4096) * 4096);
      expect(readIn('cpu', kubepods, 'cpu.shares')).toBe(String(os.availableParallelism() * 1024));
      expect(readIn('cpu', `${kubepods}/besteffort`, 'cpu.shares')).toBe('2');
    } else {
      expect(Number(readIn('memory', kubepods, 'memory.max'))).toBe(Math.floor(allocatable / 4096) * 4096);
      expect(readIn('cpu', `${kubepods}/besteffort`, 'cpu.weight')).toBe('1');
    }

    const orphans = () => layout.mounts.filter((m) => fs.existsSync(path.join(m, ORPHAN)));
    await eventually(async () => orphans().length === 0, 30_000).catch(() => undefined);
    expect(orphans()).toEqual([]);

    for (const name of Object.keys(PODS) as (keyof typeof PODS)[]) node.writeManifest(`${name}.json`, manifest(name));
    const pods: Record<string, Pod> = {};
    await eventually(async () => {
      for (const name of Object.keys(PODS)) {
        const p = await node.pod(`cg-${name}`);
        if (p?.status?.phase !== 'Running' || !pidOf(name)) return false;
        pods[name] = p;
      }
      return true;
    }, 60_000);

    const memTotal = os.totalmem();
    const expected = {
      guaranteed: { qos: 'Guaranteed', dir: `${kubepods}/pod${pods.guaranteed!.metadata!.uid}`, oom: -997, v1: { shares: '204', quota: '20000', memory: String(64 * Mi) } },
      burstable: { qos: 'Burstable', dir: `${kubepods}/burstable/pod${pods.burstable!.metadata!.uid}`, oom: 1000 - Math.trunc((1000 * 256 * Mi) / memTotal), v1: { shares: '102', quota: '-1', memory: String(512 * Mi) } },
      besteffort: { qos: 'BestEffort', dir: `${kubepods}/besteffort/pod${pods.besteffort!.metadata!.uid}`, oom: 1000, v1: { shares: '2', quota: '-1', memory: null } },
    };
    // containerd runs with restrict_oom_score_adj here (no CAP_SYS_RESOURCE, FACTS.md): a
    // value under its own is raised to its own. Every other value is set as asked.
    const floor = containerdOomScoreAdj();
    const seen: Record<string, unknown> = {};
    const want: Record<string, unknown> = {};
    for (const name of Object.keys(PODS) as (keyof typeof PODS)[]) {
      const e = expected[name];
      const p = pods[name]!;
      const pid = pidOf(name)!;
      const [container] = await podContainers(node.cri, p.metadata!.uid!);
      const cgroups = procCgroups(pid);
      const dirOf = (ctl: string) => cgroups.get(layout.version === 2 ? '' : ctl);
      seen[name] = {
        qos: p.status?.qosClass,
        memoryCgroup: dirOf('memory'),
        cpuCgroup: dirOf('cpu'),
        pidsCgroup: dirOf('pids'),
        oomScoreAdj: Number(fs.readFileSync(`/proc/${pid}/oom_score_adj`, 'utf8').trim()),
        ...(layout.version === 1
          ? {
              shares: readIn('cpu', e.dir, 'cpu.shares'),
              quota: readIn('cpu', e.dir, 'cpu.cfs_quota_us'),
              period: readIn('cpu', e.dir, 'cpu.cfs_period_us'),
              memory: e.v1.memory === null ? null : readIn('memory', e.dir, 'memory.limit_in_bytes'),
            }
          : {}),
      };
      want[name] = {
        qos: e.qos,
        memoryCgroup: `${e.dir}/${container!.id}`,
        cpuCgroup: `${e.dir}/${container!.id}`,
        pidsCgroup: `${e.dir}/${container!.id}`,
        oomScoreAdj: Math.max(e.oom, floor),
        ...(layout.version === 1 ? { shares: e.v1.shares, quota: e.v1.quota, period: '100000', memory: e.v1.memory } : {}),
      };
    }
    expect(seen).toEqual(want);
    // A BestEffort pod's cgroup has no memory limit of its own (the kernel's "unlimited").
    if (layout.version === 1) expect(Number(readIn('memory', expected.besteffort.dir, 'memory.limit_in_bytes'))).toBeGreaterThan(2 ** 60);
    // The burstable QoS cgroup: the shares of the Burstable pod's 100m request.
    if (layout.version === 1) expect(readIn('cpu', `${kubepods}/burstable`, 'cpu.shares')).toBe('102');

    // Deleted pods: their cgroups go, from every hierarchy; kubepods and the QoS cgroups stay.
    for (const name of Object.keys(PODS)) fs.rmSync(path.join(node.manifests, `${name}.json`));
    const left = () => Object.values(expected).flatMap((e) => layout.mounts.filter((m) => fs.existsSync(path.join(m, e.dir))).map((m) => path.join(m, e.dir)));
    await eventually(async () => (await node.pods()).length === 0 && left().length === 0, 60_000).catch(() => undefined);
    expect(left()).toEqual([]);
    expect(fs.existsSync(path.join(controllerDir('memory'), kubepods, 'burstable'))).toBe(true);
  }, 150_000);
});
