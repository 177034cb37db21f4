/**
 * The hierarchy on a cgroup v2 tree (a directory standing in for /sys/fs/cgroup): kubepods
 * with node allocatable, the QoS cgroups, a pod's cgroup with its limits before its sandbox,
 * the QoS shares following the pods, the controllers handed down, the orphans found.
 * (Removal needs a real cgroup filesystem, where rmdir takes the control files along: the
 * containerd integration test covers it on this machine's hierarchy.)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { silentLogger } from '../../../../src/log.js';
import { PodCgroups, readCgroupLayout } from '../../../../src/pods/cgroups/pod-cgroups.js';
import type { EventSink } from '../../../../src/events.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function v2Tree(): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-cgv2-'));
  dirs.push(root);
  fs.writeFileSync(path.join(root, 'cgroup.controllers'), 'cpuset cpu io memory hugetlb pids rdma misc\n');
  fs.writeFileSync(path.join(root, 'cgroup.subtree_control'), 'memory\n');
  return root;
}

const read = (f: string) => fs.readFileSync(f, 'utf8');

function pod(uid: string, resources: object | undefined): Pod {
  return { metadata: { name: uid, namespace: 'default', uid }, spec: { containers: [{ name: 'c', image: 'busybox', ...(resources ? { resources } : {}) }] } };
}

describe('PodCgroups on cgroup v2', () => {
  it('creates the hierarchy with node allocatable and the pods\' cgroups with their limits', async () => {
    const root = v2Tree();
    const events: string[] = [];
    const sink: EventSink = { emit: (_ref, type, reason, message) => events.push(`${type} ${reason} ${message}`) };
    const cg = new PodCgroups({
      layout: { version: 2, controllers: new Map(), unified: root, mounts: [root] },
      driver: 'cgroupfs',
      cgroupRoot: '/nodelet-test',
      nodeAllocatable: () => ({ cpuMillis: 1500, memoryBytes: 3 * 1024 ** 3, pids: 1000 }),
      pod: { enforceCpuLimits: true, cpuPeriod: 100_000 },
      logger: silentLogger(),
      events: sink,
      nodeName: 'n1',
    });
    await cg.start();
    const kubepods = path.join(root, 'nodelet-test/kubepods');
    expect({ weight: read(path.join(kubepods, 'cpu.weight')), memory: read(path.join(kubepods, 'memory.max')), pids: read(path.join(kubepods, 'pids.max')) }).toEqual({ weight: '59', memory: String(3 * 1024 ** 3), pids: '1000' });
    expect(read(path.join(kubepods, 'besteffort/cpu.weight'))).toBe('1');
    expect(read(path.join(kubepods, 'burstable/cpu.weight'))).toBe('1');
    // The root hands its controllers down (each written alone, as the kernel takes them), once.
    expect(read(path.join(root, 'cgroup.subtree_control'))).toBe('+pids');
    expect(events).toEqual(['Normal NodeAllocatableEnforced Updated Node Allocatable limit across pods']);

    const g = pod('g-1', { limits: { cpu: '250m', memory: '64Mi' } });
    const b = pod('b-1', { requests: { cpu: '1', memory: '32Mi' } });
    expect(cg.parentOf(g)).toBe('/nodelet-test/kubepods/podg-1');
    expect(await cg.ensurePod(g)).toBe('/nodelet-test/kubepods/podg-1');
    expect(await cg.ensurePod(b)).toBe('/nodelet-test/kubepods/burstable/podb-1');
    expect({ max: read(path.join(kubepods, 'podg-1/cpu.max')), mem: read(path.join(kubepods, 'podg-1/memory.max')), weight: read(path.join(kubepods, 'podg-1/cpu.weight')) }).toEqual({ max: '25000 100000', mem: String(64 * 1024 ** 2), weight: '10' });
    expect(fs.existsSync(path.join(kubepods, 'burstable/podb-1/cpu.max'))).toBe(false);
    expect(fs.existsSync(path.join(kubepods, 'burstable/podb-1/memory.max'))).toBe(false);
    // The Burstable pod's 1 CPU request is now the burstable cgroup's weight (1024 shares).
    expect(read(path.join(kubepods, 'burstable/cpu.weight'))).toBe('39');
    expect((await cg.podUids()).sort()).toEqual(['b-1', 'g-1']);
    // Pods the housekeeping keeps anyway (wanted, or in the runtime) are not looked into.
    expect(await cg.podUids((uid) => uid === 'g-1')).toEqual(['b-1']);
  });

  it('refuses a UID that is not one before touching the filesystem', async () => {
    const root = v2Tree();
    const cg = new PodCgroups({ layout: { version: 2, controllers: new Map(), unified: root, mounts: [root] }, driver: 'systemd', cgroupRoot: '/', nodeAllocatable: () => ({ cpuMillis: 1000, memoryBytes: 1024 ** 3 }), pod: { enforceCpuLimits: true, cpuPeriod: 100_000 }, logger: silentLogger() });
    await cg.start();
    expect(fs.existsSync(path.join(root, 'kubepods.slice/kubepods-besteffort.slice'))).toBe(true);
    await expect(cg.ensurePod(pod('../../etc', undefined))).rejects.toThrow(/cannot name a cgroup/);
  });

  it('leaves pods without cgroups, reported, when the hierarchy cannot be made', async () => {
    const root = v2Tree();
    fs.writeFileSync(path.join(root, 'kubepods'), 'a file where a cgroup should be');
    const events: string[] = [];
    const cg = new PodCgroups({ layout: { version: 2, controllers: new Map(), unified: root, mounts: [root] }, driver: 'cgroupfs', cgroupRoot: '/', nodeAllocatable: () => ({ cpuMillis: 1000, memoryBytes: 1024 ** 3 }), pod: { enforceCpuLimits: true, cpuPeriod: 100_000 }, logger: silentLogger(), events: { emit: (_r, type, reason) => events.push(`${type} ${reason}`) }, nodeName: 'n1' });
    await cg.start();
    expect(events).toEqual(['Warning FailedNodeAllocatableEnforcement']);
    expect(cg.parentOf(pod('u1', undefined))).toBeUndefined();
    expect(await cg.ensurePod(pod('u1', undefined))).toBeUndefined();
  });
});

describe('PodCgroups where directories can be made but limits not written', () => {
  it('(a container whose delegated cgroup lacks the controllers, seen under systemd-nspawn: EACCES on cpu.weight) leaves pods without cgroups rather than failing each one', async () => {
    const root = v2Tree();
    // A directory where the QoS cgroup's cpu.weight is: every write to it fails (EISDIR), as EACCES did in the box.
    fs.mkdirSync(path.join(root, 'kubepods', 'burstable', 'cpu.weight'), { recursive: true });
    const events: string[] = [];
    const cg = new PodCgroups({ layout: { version: 2, controllers: new Map(), unified: root, mounts: [root] }, driver: 'cgroupfs', cgroupRoot: '/', nodeAllocatable: () => ({ cpuMillis: 1000, memoryBytes: 1024 ** 3 }), pod: { enforceCpuLimits: true, cpuPeriod: 100_000 }, logger: silentLogger(), events: { emit: (_r, type, reason) => events.push(`${type} ${reason}`) }, nodeName: 'n1' });
    await cg.start();
    expect(events).toContain('Warning FailedNodeAllocatableEnforcement');
    expect(cg.parentOf(pod('u1', { requests: { cpu: '100m' } }))).toBeUndefined();
    expect(await cg.ensurePod(pod('u1', { requests: { cpu: '100m' } }))).toBeUndefined();
  });
});

describe('kube-reserved and system-reserved enforcement', () => {
  it('limits an existing reserved cgroup to its reservation and reports a missing one', async () => {
    const root = v2Tree();
    fs.mkdirSync(path.join(root, 'kube.slice'));
    const events: string[] = [];
    const cg = new PodCgroups({
      layout: { version: 2, controllers: new Map(), unified: root, mounts: [root] },
      driver: 'systemd',
      cgroupRoot: '/',
      nodeAllocatable: () => ({ cpuMillis: 1000, memoryBytes: 1024 ** 3 }),
      pod: { enforceCpuLimits: true, cpuPeriod: 100_000 },
      reserved: [
        { who: 'Kube', cgroup: '/kube.slice', config: { cpuShares: 512, memoryBytes: 256 * 1024 ** 2 } },
        { who: 'System', cgroup: '/system.slice', config: { cpuShares: 512 } },
      ],
      logger: silentLogger(),
      events: { emit: (_r, type, reason, message) => events.push(`${type} ${reason} ${message}`) },
      nodeName: 'n1',
    });
    await cg.start();
    expect({ weight: read(path.join(root, 'kube.slice/cpu.weight')), memory: read(path.join(root, 'kube.slice/memory.max')) }).toEqual({ weight: '20', memory: String(256 * 1024 ** 2) });
    expect(fs.existsSync(path.join(root, 'system.slice'))).toBe(false);
    expect(events).toEqual([
      'Normal NodeAllocatableEnforced Updated Node Allocatable limit across pods',
      'Normal NodeAllocatableEnforced Updated limits on kube reserved cgroup /kube.slice',
      'Warning FailedNodeAllocatableEnforcement Failed to enforce System Reserved Cgroup Limits on "/system.slice": "/system.slice" cgroup does not exist',
    ]);
  });
});

describe('readCgroupLayout', () => {
  it('reads a hybrid host (v1 controllers, a controller-less cgroup2) and a unified one', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-mountinfo-'));
    dirs.push(dir);
    const hybrid = path.join(dir, 'hybrid');
    fs.writeFileSync(
      hybrid,
      [
        '30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755',
        '31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw',
        '32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd',
        '33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct',
        '34 30 0:30 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory',
        '',
      ].join('\n'),
    );
    const l = await readCgroupLayout(hybrid);
    expect(l.version).toBe(1);
    expect(Object.fromEntries(l.controllers)).toEqual({ 'name=systemd': '/sys/fs/cgroup/systemd', cpu: '/sys/fs/cgroup/cpu,cpuacct', cpuacct: '/sys/fs/cgroup/cpu,cpuacct', memory: '/sys/fs/cgroup/memory' });
    expect(l.mounts).toEqual(['/sys/fs/cgroup/unified', '/sys/fs/cgroup/systemd', '/sys/fs/cgroup/cpu,cpuacct', '/sys/fs/cgroup/memory']);
    const unified = path.join(dir, 'unified');
    fs.writeFileSync(unified, '30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n');
    expect(await readCgroupLayout(unified)).toEqual({ version: 2, controllers: new Map(), unified: '/sys/fs/cgroup', mounts: ['/sys/fs/cgroup'] });
  });
});

describe('PodCgroups on cgroup v1: cpuset', () => {
  /** A cpuset hierarchy as the kernel shows it: each cgroup's cpuset files, empty in a new one. */
  function cpusetTree(cgroups: Record<string, { cpus: string; mems: string } | 'unreadable'>): string {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-cgv1-'));
    dirs.push(root);
    for (const [rel, v] of Object.entries(cgroups)) {
      const dir = path.join(root, rel);
      fs.mkdirSync(dir, { recursive: true });
      if (v === 'unreadable') {
        // A directory where the file is: reading it fails (EISDIR).
        fs.mkdirSync(path.join(dir, 'cpuset.cpus'));
        fs.mkdirSync(path.join(dir, 'cpuset.mems'));
      } else {
        fs.writeFileSync(path.join(dir, 'cpuset.cpus'), v.cpus);
        fs.writeFileSync(path.join(dir, 'cpuset.mems'), v.mems);
      }
    }
    return root;
  }
  const cgroups = (root: string) =>
    new PodCgroups({ layout: { version: 1, controllers: new Map([['cpuset', root]]), mounts: [root] }, driver: 'cgroupfs', cgroupRoot: '/', nodeAllocatable: () => ({ cpuMillis: 2000, memoryBytes: 1024 ** 3 }), pod: { enforceCpuLimits: true, cpuPeriod: 100_000 }, logger: silentLogger() });
  const cpuset = (root: string, rel: string) => ({ cpus: read(path.join(root, rel, 'cpuset.cpus')), mems: read(path.join(root, rel, 'cpuset.mems')) });
  const empty = { cpus: '', mems: '' };

  it("gives each level without CPUs or memory nodes its parent's, top down; a level that has its own keeps it and hands it on", async () => {
    const root = cpusetTree({ '.': { cpus: '0-1', mems: '0' }, kubepods: empty, 'kubepods/besteffort': { cpus: '1', mems: '0' }, 'kubepods/besteffort/podx': empty, 'kubepods/burstable': empty });
    const cg = cgroups(root);
    await cg.start();
    await cg.ensurePod(pod('x', undefined));
    expect(cpuset(root, 'kubepods')).toEqual({ cpus: '0-1', mems: '0' });
    expect(cpuset(root, 'kubepods/burstable')).toEqual({ cpus: '0-1', mems: '0' });
    expect(cpuset(root, 'kubepods/besteffort')).toEqual({ cpus: '1', mems: '0' });
    expect(cpuset(root, 'kubepods/besteffort/podx')).toEqual({ cpus: '1', mems: '0' });
  });

  it('leaves a level empty when its parent cannot be read', async () => {
    const root = cpusetTree({ '.': { cpus: '0-1', mems: '0' }, kubepods: 'unreadable', 'kubepods/besteffort': empty, 'kubepods/besteffort/podx': empty });
    const cg = cgroups(root);
    await cg.start();
    await cg.ensurePod(pod('x', undefined));
    expect(cpuset(root, 'kubepods/besteffort')).toEqual(empty);
    expect(cpuset(root, 'kubepods/besteffort/podx')).toEqual(empty);
  });
});
