/**
 * Local ephemeral storage limits (src/node/local-storage.ts and the eviction manager's turn):
 * an emptyDir over its sizeLimit, a pod over its containers' ephemeral-storage limits, or a
 * container over its own ends the pod with the kubelet's words, at once, with no
 * DisruptionTarget condition; directories are counted as `du -x` counts them.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log.js';
import type { PodStats } from '../../../src/metrics/stats.js';
import { EvictionManager } from '../../../src/node/eviction.js';
import { diskUsage, hasLocalStorageLimit, localStorageViolation, measureLocalUsage, podEphemeralLimit, type LocalUsage } from '../../../src/node/local-storage.js';
import type { Eviction } from '../../../src/pods/sync/admission.js';
import { ManualClock } from '../../helpers/clock.js';

const Mi = 1024 * 1024;

function pod(o: { sizeLimit?: string; medium?: string; limits?: Record<string, string>[]; init?: { limit: string; sidecar?: boolean }[]; critical?: boolean } = {}): Pod {
  return {
    metadata: { name: 'p', namespace: 'default', uid: '0b6f4c4e-5d1a-4c39-9d7e-3f8a2c1b0a01' },
    spec: {
      volumes: [{ name: 'cache', emptyDir: { ...(o.sizeLimit ? { sizeLimit: o.sizeLimit } : {}), ...(o.medium ? { medium: o.medium } : {}) } }, { name: 'conf', configMap: { name: 'c' } }],
      containers: (o.limits ?? [{}]).map((l, i) => ({ name: i === 0 ? 'app' : `c${i}`, image: 'busybox', resources: { limits: l } })),
      ...(o.init ? { initContainers: o.init.map((c, i) => ({ name: `init${i}`, image: 'busybox', ...(c.sidecar ? { restartPolicy: 'Always' } : {}), resources: { limits: { 'ephemeral-storage': c.limit } } })) } : {}),
      ...(o.critical ? { priority: 2000001000 } : {}),
    },
  };
}

const usage = (volumes: Record<string, number>, logs: Record<string, number> = {}): LocalUsage => ({ volumes: new Map(Object.entries(volumes)), logs: new Map(Object.entries(logs)), truncated: false });

function stats(p: Pod, rootfs: Record<string, number>): PodStats {
  const t = '2026-11-27T22:00:00Z';
  return { podRef: { name: 'p', namespace: 'default', uid: p.metadata!.uid! }, startTime: t, containers: Object.entries(rootfs).map(([name, usedBytes]) => ({ name, startTime: t, rootfs: { time: t, usedBytes } })) };
}

describe("the kubelet's verdicts on local storage", () => {
  it('an emptyDir over its sizeLimit, named with the limit as Go prints it', () => {
    const p = pod({ sizeLimit: '1024Ki' });
    expect(localStorageViolation(p, usage({ cache: Mi + 1 }), undefined)).toBe('Usage of EmptyDir volume "cache" exceeds the limit "1Mi". ');
    expect(localStorageViolation(p, usage({ cache: Mi }), undefined)).toBeUndefined();
    // A memory-backed emptyDir is a tmpfs of that size already: never measured.
    expect(hasLocalStorageLimit(pod({ sizeLimit: '1Mi', medium: 'Memory' }))).toBe(false);
    expect(hasLocalStorageLimit(pod())).toBe(false);
  });

  it("a container's writable layer plus its logs over its own limit", () => {
    const p = pod({ limits: [{ 'ephemeral-storage': '10Mi' }, {}] });
    expect(localStorageViolation(p, usage({}, { app: 4 * Mi }), stats(p, { app: 5 * Mi }))).toBeUndefined();
    // The pod check comes first in the kubelet; its limit is the same 10Mi here, so the sum of
    // both containers and the volumes trips it before the container's own.
    expect(localStorageViolation(p, usage({}, { app: 4 * Mi, c1: 2 * Mi }), stats(p, { app: 5 * Mi }))).toBe('Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ');
  });

  it('the container check names the container when the pod as a whole is within its limits', () => {
    const p = pod({ limits: [{ 'ephemeral-storage': '1Mi' }, { 'ephemeral-storage': '100Mi' }] });
    expect(localStorageViolation(p, usage({}, { app: Mi }), stats(p, { app: 1 }))).toBe('Container app exceeded its local ephemeral storage limit "1Mi". ');
  });

  it('the pod limit counts emptyDirs and configMap volumes beside the containers', () => {
    const p = pod({ limits: [{ 'ephemeral-storage': '8Mi' }] });
    expect(localStorageViolation(p, usage({ cache: 5 * Mi, conf: 2 * Mi }), stats(p, { app: Mi }))).toBeUndefined();
    expect(localStorageViolation(p, usage({ cache: 5 * Mi, conf: 2 * Mi }), stats(p, { app: Mi + 1 }))).toBe('Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. ');
  });

  it('the emptyDir verdict comes before the others', () => {
    const p = pod({ sizeLimit: '1Mi', limits: [{ 'ephemeral-storage': '1Mi' }] });
    expect(localStorageViolation(p, usage({ cache: 2 * Mi }, { app: 5 * Mi }), undefined)).toBe('Usage of EmptyDir volume "cache" exceeds the limit "1Mi". ');
  });

  it("the pod's limit as PodLimits: containers summed, an init container's own if larger, sidecars added; printed as the first limit's format", () => {
    expect(podEphemeralLimit(pod())).toBeUndefined();
    expect(podEphemeralLimit(pod({ limits: [{ 'ephemeral-storage': '1Gi' }, { 'ephemeral-storage': '512Mi' }] }))?.text).toBe('1536Mi');
    expect(podEphemeralLimit(pod({ limits: [{ 'ephemeral-storage': '1Gi' }], init: [{ limit: '3Gi' }] }))?.text).toBe('3Gi');
    expect(podEphemeralLimit(pod({ limits: [{ 'ephemeral-storage': '1Gi' }], init: [{ limit: '1Gi', sidecar: true }, { limit: '1Gi' }] }))?.text).toBe('2Gi');
    expect(podEphemeralLimit(pod({ limits: [{ 'ephemeral-storage': '2G' }, { 'ephemeral-storage': '1G' }] }))?.text).toBe('3G');
  });
});

describe('counting a directory as du -x does', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'local-storage-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('allocated blocks, nested directories, hard links once, symlinks not followed, bounded', async () => {
    const root = path.join(dir, 'vol');
    fs.mkdirSync(path.join(root, 'a', 'b'), { recursive: true });
    fs.writeFileSync(path.join(root, 'a', 'b', 'data'), Buffer.alloc(Mi, 1));
    fs.linkSync(path.join(root, 'a', 'b', 'data'), path.join(root, 'hardlink'));
    const outside = path.join(dir, 'outside');
    fs.writeFileSync(outside, Buffer.alloc(4 * Mi, 1));
    fs.symlinkSync(outside, path.join(root, 'link'));
    const used = await diskUsage(root, { left: 1000, seen: new Set() });
    // One MiB of data once (the hard link is the same inode), plus a few directory blocks.
    expect(used).toBeGreaterThanOrEqual(Mi);
    expect(used).toBeLessThan(Mi + 64 * 1024);
    expect(await diskUsage(path.join(dir, 'missing'), { left: 10, seen: new Set() })).toBe(0);
  });

  it('stops at its bound of entries, a lower bound', async () => {
    const root = path.join(dir, 'many');
    fs.mkdirSync(root);
    for (let i = 0; i < 10; i++) fs.writeFileSync(path.join(root, `f${i}`), Buffer.alloc(64 * 1024, 1));
    expect(await diskUsage(root, { left: 1000, seen: new Set() })).toBeGreaterThanOrEqual(640 * 1024);
    const walk = { left: 3, seen: new Set<string>() };
    const partial = await diskUsage(root, walk);
    expect(partial).toBeGreaterThanOrEqual(3 * 64 * 1024);
    expect(partial).toBeLessThan(4 * 64 * 1024 + 64 * 1024);
    expect(walk.left).toBeLessThan(0);
  });

  it("measures a pod's local volumes and its containers' log directories", async () => {
    const p = pod({ sizeLimit: '1Mi' });
    fs.mkdirSync(path.join(dir, 'pod', 'cache'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'pod', 'cache', 'f'), Buffer.alloc(2 * Mi, 1));
    fs.mkdirSync(path.join(dir, 'logs', 'app'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'logs', 'app', '0.log'), Buffer.alloc(Mi, 1));
    const u = await measureLocalUsage(p, { volumeDir: (_p, v) => path.join(dir, 'pod', v.name), containerLogDir: (_p, c) => path.join(dir, 'logs', c) });
    expect(u.volumes.get('cache')).toBeGreaterThanOrEqual(2 * Mi);
    expect(u.volumes.get('conf')).toBe(0);
    expect(u.logs.get('app')).toBeGreaterThanOrEqual(Mi);
    expect(u.truncated).toBe(false);
    expect(localStorageViolation(p, u, undefined)).toBe('Usage of EmptyDir volume "cache" exceeds the limit "1Mi". ');
  });
});

describe('the eviction manager acts on them', () => {
  function harness(pods: Pod[], measured: Map<Pod, LocalUsage>) {
    const evictions: Array<[string, Eviction]> = [];
    const events: string[] = [];
    const m = new EvictionManager({
      thresholds: [],
      observe: async () => ({}),
      podStats: async () => [],
      measureLocalStorage: async (p) => measured.get(p) ?? usage({}),
      pods: {
        activePods: () => pods,
        evict: async (uid, e) => (evictions.push([uid, e]), true),
      },
      maxPodGracePeriodSeconds: 0,
      transitionPeriodMs: 0,
      clock: new ManualClock(0),
      logger: silentLogger(),
      events: { emit: (_ref, type, reason, message) => void events.push(`${type} ${reason}: ${message}`) },
      nodeName: 'n1',
    });
    return { m, evictions, events };
  }

  it('evicts every pod over a limit in one turn, at once, without a DisruptionTarget condition, and never a critical pod', async () => {
    const over = pod({ sizeLimit: '1Mi' });
    const other = { ...pod({ sizeLimit: '1Mi' }), metadata: { name: 'q', namespace: 'default', uid: '0b6f4c4e-5d1a-4c39-9d7e-3f8a2c1b0a02' } };
    const within = { ...pod({ sizeLimit: '1Mi' }), metadata: { name: 'r', namespace: 'default', uid: '0b6f4c4e-5d1a-4c39-9d7e-3f8a2c1b0a03' } };
    const critical = { ...pod({ sizeLimit: '1Mi', critical: true }), metadata: { name: 's', namespace: 'kube-system', uid: '0b6f4c4e-5d1a-4c39-9d7e-3f8a2c1b0a04' } };
    const h = harness([over, other, within, critical], new Map([[over, usage({ cache: 2 * Mi })], [other, usage({ cache: 3 * Mi })], [within, usage({ cache: Mi })], [critical, usage({ cache: 9 * Mi })]]));
    const out = await h.m.syncOnce();
    expect(h.evictions.map(([uid]) => uid)).toEqual([over.metadata!.uid, other.metadata!.uid]);
    expect(h.evictions[0]![1]).toEqual({ reason: 'Evicted', message: 'Usage of EmptyDir volume "cache" exceeds the limit "1Mi". ', gracePeriodSeconds: 1, disruptionTarget: false });
    expect(out.localStorage?.length).toBe(2);
    expect(h.events).toContain('Warning Evicted: Usage of EmptyDir volume "cache" exceeds the limit "1Mi". ');
  });

  it('a pod without limits is never measured', async () => {
    let measuredCount = 0;
    const plain = pod();
    const m = new EvictionManager({
      thresholds: [],
      observe: async () => ({}),
      podStats: async () => [],
      measureLocalStorage: async () => (measuredCount++, usage({})),
      pods: { activePods: () => [plain], evict: async () => true },
      maxPodGracePeriodSeconds: 0,
      transitionPeriodMs: 0,
      clock: new ManualClock(0),
      logger: silentLogger(),
      events: { emit: () => {} },
      nodeName: 'n1',
    });
    expect((await m.syncOnce()).evicted).toBeUndefined();
    expect(measuredCount).toBe(0);
  });
});
