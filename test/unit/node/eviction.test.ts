/**
 * The eviction manager (src/node/eviction.ts, eviction-rank.ts) on a virtual clock with fake
 * signals, pod stats and pods, and PodManager.evict on the in-memory runtime: what an
 * operator relies on when a node runs low: which pod goes first, when, with what grace
 * period and words, and which pods a node under pressure still admits.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { parseDuration } from '../../../src/config/duration.js';
import { silentLogger } from '../../../src/log.js';
import type { PodStats } from '../../../src/metrics/stats.js';
import { decideEviction, EvictionManager, evictionThresholds, INITIAL_EVICTION_STATE, type EvictionPods } from '../../../src/node/eviction.js';
import { evictionMessage, formatBinary, rankForEviction, statsByUid } from '../../../src/node/eviction-rank.js';
import type { Observations } from '../../../src/node/pressure.js';
import { admitPod, evictionAdmitHandler, podAdmitHandlers, type Eviction } from '../../../src/pods/sync/admission.js';
import { ImageManager } from '../../../src/pods/images/image-gc.js';
import { PodManager } from '../../../src/pods/sync/manager.js';
import { ManualClock, VirtualClock } from '../../helpers/clock.js';
import { MemRuntime } from '../../fakes/pod-runtime.js';

const Mi = 1024 * 1024;
/** The harness node: 8Gi of memory, an 800Gi root filesystem. */
const GB = 8 * 1024 * Mi;

function pod(name: string, o: { memReq?: string; memLim?: string; priority?: number; grace?: number; static?: boolean; tolerations?: NonNullable<Pod['spec']>['tolerations'] } = {}): Pod {
  const resources = { ...(o.memReq ? { requests: { memory: o.memReq } } : {}), ...(o.memLim ? { limits: { memory: o.memLim } } : {}) };
  return {
    metadata: { name, namespace: 'default', uid: `uid-${name}`, ...(o.static ? { annotations: { 'kubernetes.io/config.source': 'file' } } : {}) },
    spec: {
      containers: [{ name: 'app', image: 'busybox', resources }],
      ...(o.priority !== undefined ? { priority: o.priority } : {}),
      ...(o.grace !== undefined ? { terminationGracePeriodSeconds: o.grace } : {}),
      ...(o.tolerations ? { tolerations: o.tolerations } : {}),
    },
  };
}

function stats(p: Pod, workingSet: number): PodStats {
  const t = '2026-11-23T02:00:00Z';
  return { podRef: { name: p.metadata!.name!, namespace: 'default', uid: p.metadata!.uid! }, startTime: t, memory: { time: t, workingSetBytes: workingSet }, containers: [{ name: 'app', startTime: t, memory: { time: t, workingSetBytes: workingSet } }] };
}

describe('ranking for memory pressure (the kubelet rankMemoryPressure)', () => {
  const be = pod('besteffort-small');
  const burst = pod('burstable-over', { memReq: '100Mi' });
  const guaranteed = pod('guaranteed', { memReq: '1Gi', memLim: '1Gi' });
  const important = pod('important-over', { priority: 1000 });
  const fresh = pod('no-stats-yet', { memReq: '1Gi', memLim: '1Gi' });
  const usage = new Map<Pod, number>([
    [be, 10 * Mi],
    [burst, 300 * Mi],
    [guaranteed, 900 * Mi],
    [important, 2000 * Mi],
  ]);
  const statsOf = statsByUid([...usage].map(([p, u]) => stats(p, u)));

  it.each([
    ['a BestEffort pod over its (zero) request goes before a Guaranteed pod using far more, within its request', [guaranteed, be], ['besteffort-small', 'guaranteed']],
    ['among pods over their requests: lower priority first, whatever the usage', [important, be], ['besteffort-small', 'important-over']],
    ['same priority, both over: the larger usage above the request first', [be, burst], ['burstable-over', 'besteffort-small']],
    ['a pod without stats ranks first', [be, guaranteed, fresh], ['no-stats-yet', 'besteffort-small', 'guaranteed']],
    ['the whole set', [guaranteed, important, be, burst], ['burstable-over', 'besteffort-small', 'important-over', 'guaranteed']],
  ])('%s', (_what, pods, order) => {
    expect(rankForEviction(pods, 'memory', statsOf).map((p) => p.metadata!.name)).toEqual(order);
  });
});

describe('the eviction message', () => {
  it('is the kubelet evictionMessage, word for word', () => {
    const p = pod('hog');
    expect(evictionMessage('memory', p, stats(p, 200 * Mi), { quantity: '100Mi', available: 50 * Mi })).toBe(
      'The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container app was using 200Mi, request is 0, has larger consumption of memory. ',
    );
    // A container within its request is not named.
    const q = pod('fine', { memReq: '1Gi' });
    expect(evictionMessage('memory', q, stats(q, 200 * Mi), { quantity: '100Mi', available: 51200 * 1024 })).toBe('The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ');
  });
  it.each([
    [100 * Mi, '100Mi'],
    [1536, '1536'],
    [1024 * Mi, '1Gi'],
    [1000, '1000'],
    [123456789, '123456789'],
  ])('prints %d bytes as Go prints a BinarySI quantity: %s', (n, text) => expect(formatBinary(n)).toBe(text));
});

/** Signals, stats and pods the manager reads, all set by the test. */
function harness(cfg: Parameters<typeof evictionThresholds>[0], o: { maxPodGrace?: number; reclaimFrees?: number; memoryWatch?: boolean } = {}) {
  const clock = new VirtualClock();
  let available = 4 * GB;
  let diskAvailable = 50 * GB;
  const pods: Pod[] = [];
  const usage = new Map<string, number>();
  const evictions: { name: string; e: Eviction; at: number }[] = [];
  const events: string[] = [];
  let reclaims = 0;
  const podsPort: EvictionPods = {
    activePods: () => pods.filter((p) => !evictions.some((e) => e.name === p.metadata!.name)),
    evict: async (uid, e) => {
      const p = pods.find((x) => x.metadata!.uid === uid)!;
      evictions.push({ name: p.metadata!.name!, e, at: clock.now() });
      return true;
    },
  };
  const m = new EvictionManager({
    thresholds: evictionThresholds(cfg, parseDuration).thresholds,
    observe: async (): Promise<Observations> => ({ 'memory.available': { available, capacity: GB }, 'nodefs.available': { available: diskAvailable, capacity: 100 * GB } }),
    ...(o.memoryWatch ? { observeMemory: async (): Promise<Observations> => ({ 'memory.available': { available, capacity: GB } }) } : {}),
    podStats: async () => pods.filter((p) => usage.has(p.metadata!.uid!)).map((p) => stats(p, usage.get(p.metadata!.uid!)!)),
    pods: podsPort,
    reclaimImages: async () => {
      reclaims++;
      diskAvailable += o.reclaimFrees ?? 0;
    },
    maxPodGracePeriodSeconds: o.maxPodGrace ?? 0,
    transitionPeriodMs: 5 * 60_000,
    clock,
    logger: silentLogger(),
    events: { emit: (_ref, type, reason, message) => void events.push(`${type} ${reason}: ${message}`) },
    nodeName: 'n1',
  });
  const add = (p: Pod, ws: number) => (pods.push(p), usage.set(p.metadata!.uid!, ws));
  return {
    clock,
    m,
    add,
    evictions,
    events,
    get reclaims() {
      return reclaims;
    },
    setAvailable: (b: number) => void (available = b),
    setDisk: (b: number) => void (diskAvailable = b),
  };
}

describe('EvictionManager', () => {
  it('a hard threshold evicts at once, one pod per turn, with the kubelet 1 s grace period, Failed/Evicted with its message and event', async () => {
    const h = harness({ evictionHard: { 'memory.available': '100Mi' } });
    h.add(pod('guaranteed', { memReq: '1Gi', memLim: '1Gi', grace: 30 }), 900 * Mi);
    h.add(pod('be-1', { grace: 30 }), 300 * Mi);
    h.add(pod('be-2', { grace: 30 }), 200 * Mi);
    expect((await h.m.syncOnce()).evicted).toBeUndefined();
    expect(h.m.conditions()).toEqual([]);
    h.setAvailable(50 * Mi);
    const first = await h.m.syncOnce();
    expect(first.conditions).toEqual(['MemoryPressure']);
    expect(h.evictions).toEqual([
      {
        name: 'be-1',
        at: h.clock.now(),
        e: { reason: 'Evicted', gracePeriodSeconds: 1, message: 'The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container app was using 300Mi, request is 0, has larger consumption of memory. ' },
      },
    ]);
    expect(h.events).toEqual(['Warning EvictionThresholdMet: Attempting to reclaim memory', `Warning Evicted: ${h.evictions[0]!.e.message}`]);
    // Still low: the next turn takes the next one, never the Guaranteed pod before the BestEffort ones.
    await h.m.syncOnce();
    await h.m.syncOnce();
    expect(h.evictions.map((e) => e.name)).toEqual(['be-1', 'be-2', 'guaranteed']);
  });

  it('a soft threshold reports the condition at once but evicts only after its grace period, with the pod grace bounded by evictionMaxPodGracePeriod', async () => {
    const h = harness({ evictionHard: {}, evictionSoft: { 'memory.available': '1Gi' }, evictionSoftGracePeriod: { 'memory.available': '1m30s' } }, { maxPodGrace: 20 });
    h.add(pod('slow', { grace: 60 }), 300 * Mi);
    h.add(pod('quick', { grace: 5, memReq: '100Mi' }), 50 * Mi);
    h.setAvailable(900 * Mi);
    await h.m.syncOnce();
    expect(h.m.conditions()).toEqual(['MemoryPressure']);
    h.clock.t += 89_000;
    await h.m.syncOnce();
    expect(h.evictions).toEqual([]);
    h.clock.t += 1000;
    await h.m.syncOnce();
    expect(h.evictions.map((e) => [e.name, e.e.gracePeriodSeconds])).toEqual([['slow', 20]]);
    // A pod whose own grace period is shorter keeps it.
    await h.m.syncOnce();
    expect(h.evictions.map((e) => [e.name, e.e.gracePeriodSeconds])).toEqual([
      ['slow', 20],
      ['quick', 5],
    ]);
  });

  it('a soft threshold that recovers within its grace period evicts nothing, and the grace period starts again', async () => {
    const h = harness({ evictionHard: {}, evictionSoft: { 'memory.available': '1Gi' }, evictionSoftGracePeriod: { 'memory.available': '1m' } });
    h.add(pod('a'), 300 * Mi);
    h.setAvailable(900 * Mi);
    await h.m.syncOnce();
    h.clock.t += 50_000;
    h.setAvailable(2 * GB);
    await h.m.syncOnce();
    h.setAvailable(900 * Mi);
    h.clock.t += 20_000;
    await h.m.syncOnce();
    expect(h.evictions).toEqual([]);
    h.clock.t += 60_000;
    await h.m.syncOnce();
    expect(h.evictions.map((e) => e.name)).toEqual(['a']);
  });

  it('static and critical pods are never evicted: the next in rank is', async () => {
    const h = harness({ evictionHard: { 'memory.available': '100Mi' } });
    h.add(pod('static-hog', { static: true }), 3000 * Mi);
    h.add(pod('critical-hog', { priority: 2_000_000_000 }), 2000 * Mi);
    h.add(pod('ordinary', { memReq: '10Mi' }), 20 * Mi);
    h.setAvailable(10 * Mi);
    await h.m.syncOnce();
    expect(h.evictions.map((e) => e.name)).toEqual(['ordinary']);
    // Nothing else may go: the turn evicts nobody.
    expect((await h.m.syncOnce()).evicted).toBeUndefined();
  });

  it('evictionMinimumReclaim: pressure lasts until that much above the threshold is available', async () => {
    const h = harness({ evictionHard: { 'memory.available': '100Mi' }, evictionMinimumReclaim: { 'memory.available': '400Mi' } });
    h.add(pod('a'), 100 * Mi);
    h.add(pod('b'), 100 * Mi);
    h.add(pod('c'), 100 * Mi);
    h.setAvailable(50 * Mi);
    await h.m.syncOnce();
    h.setAvailable(300 * Mi); // above 100Mi, below 100Mi + 400Mi
    await h.m.syncOnce();
    expect(h.evictions.map((e) => e.name)).toEqual(['a', 'b']);
    h.setAvailable(600 * Mi);
    expect((await h.m.syncOnce()).evicted).toBeUndefined();
    expect(h.evictions).toHaveLength(2);
  });

  it('disk pressure: unused images are removed first, and when that is enough no pod is evicted', async () => {
    const h = harness({ evictionHard: { 'nodefs.available': '10%' } }, { reclaimFrees: 5 * GB });
    h.add(pod('a'), 100 * Mi);
    h.setDisk(8 * GB);
    const out = await h.m.syncOnce();
    expect(out).toMatchObject({ conditions: ['DiskPressure'], signal: 'nodefs.available', reclaimed: true });
    expect(h.reclaims).toBe(1);
    expect(h.evictions).toEqual([]);
  });

  it('disk pressure images cannot relieve: one pod is evicted, the message naming the percentage threshold as a quantity', async () => {
    const h = harness({ evictionHard: { 'nodefs.available': '10%' } });
    h.add(pod('a'), 100 * Mi);
    h.setDisk(8 * GB);
    await h.m.syncOnce();
    expect(h.reclaims).toBe(1);
    expect(h.evictions.map((e) => [e.name, e.e.message])).toEqual([['a', 'The node was low on resource: ephemeral-storage. Threshold quantity: 80Gi, available: 64Gi. ']]);
  });

  it('runs every 10 s on its own, and 1 s after an eviction', async () => {
    const h = harness({ evictionHard: { 'memory.available': '100Mi' } });
    h.add(pod('a'), 100 * Mi);
    h.m.start();
    try {
      await h.clock.whenSleeping();
      expect(h.clock.sleeps).toEqual([10_000]);
      h.setAvailable(50 * Mi);
      await h.clock.advanceUntil(() => h.evictions.length === 1, { stepMs: 1000, maxMs: 20_000 });
      await h.clock.whenSleeping();
      expect(h.clock.sleeps.at(-1)).toBe(1000);
    } finally {
      await h.m.stop();
    }
  });
});

describe('kernelMemcgNotification: a memory crossing seen within a second', () => {
  for (const memoryWatch of [false, true]) {
    it(memoryWatch ? 'with it: the turn comes within a second of the crossing' : 'without it: at the next 10 s housekeeping', async () => {
      const h = harness({ evictionHard: { 'memory.available': '100Mi' } }, { memoryWatch });
      h.add(pod('a'), 100 * Mi);
      h.m.start();
      try {
        await h.clock.advance(2500);
        const crossedAt = h.clock.now();
        h.setAvailable(50 * Mi);
        await h.clock.advanceUntil(() => h.evictions.length === 1, { stepMs: 100, maxMs: 20_000 });
        const after = h.evictions[0]!.at - crossedAt;
        if (memoryWatch) expect(after).toBeLessThanOrEqual(1000);
        else expect(after).toBe(10_000 - 2500);
      } finally {
        await h.m.stop();
      }
    });
  }
});

describe('decideEviction', () => {
  it('holds a condition for the transition period after its threshold stops being met', () => {
    const { thresholds } = evictionThresholds({ evictionHard: { 'memory.available': '100Mi' } }, parseDuration);
    const low: Observations = { 'memory.available': { available: 50 * Mi, capacity: GB } };
    const fine: Observations = { 'memory.available': { available: GB / 2, capacity: GB } };
    const a = decideEviction(thresholds, low, INITIAL_EVICTION_STATE, 0, 300_000);
    const b = decideEviction(thresholds, fine, a.state, 299_999, 300_000);
    const c = decideEviction(thresholds, fine, b.state, 300_000, 300_000);
    expect([a.conditions, b.conditions, c.conditions]).toEqual([['MemoryPressure'], ['MemoryPressure'], []]);
    expect([a.act.length, b.act.length]).toEqual([1, 0]);
  });

  it('refuses a soft threshold without a grace period, as the kubelet refuses to start', () => {
    expect(() => evictionThresholds({ evictionHard: {}, evictionSoft: { 'memory.available': '1Gi' } }, parseDuration)).toThrow(/grace period must be specified for the soft eviction threshold memory.available/);
  });
});

describe('the eviction admission handler', () => {
  const reject = (conds: string[], p: Pod) => evictionAdmitHandler(() => conds)(p);
  const toleratesMemory = [{ key: 'node.kubernetes.io/memory-pressure', operator: 'Exists', effect: 'NoSchedule' }];
  const toleratesDisk = [{ key: 'node.kubernetes.io/disk-pressure', operator: 'Exists', effect: 'NoSchedule' }];
  it.each([
    ['no pressure: BestEffort admitted', [], pod('be'), undefined],
    ['MemoryPressure: BestEffort refused', ['MemoryPressure'], pod('be'), 'The node had condition: [MemoryPressure]. '],
    ['MemoryPressure: Burstable admitted', ['MemoryPressure'], pod('burst', { memReq: '10Mi' }), undefined],
    ['MemoryPressure: BestEffort tolerating the memory-pressure taint admitted', ['MemoryPressure'], pod('be', { tolerations: toleratesMemory }), undefined],
    ['MemoryPressure: a critical BestEffort pod admitted', ['MemoryPressure'], pod('be', { priority: 2_000_000_000 }), undefined],
    ['DiskPressure: Guaranteed refused', ['DiskPressure'], pod('g', { memReq: '1Gi', memLim: '1Gi' }), 'The node had condition: [DiskPressure]. '],
    ['DiskPressure: tolerating the disk-pressure taint does not help', ['DiskPressure'], pod('be', { tolerations: toleratesDisk }), 'The node had condition: [DiskPressure]. '],
    ['MemoryPressure and DiskPressure: Burstable refused', ['MemoryPressure', 'DiskPressure'], pod('burst', { memReq: '10Mi' }), 'The node had condition: [MemoryPressure DiskPressure]. '],
    ['DiskPressure: a static pod admitted', ['DiskPressure'], pod('s', { static: true }), undefined],
  ])('%s', (_what, conds, p, message) => {
    expect(reject(conds, p)).toEqual(message === undefined ? undefined : { reason: 'Evicted', message });
  });

  it('comes with the node handlers when the conditions are given, and a refused pod shows "Pod was rejected: ..."', () => {
    const handlers = podAdmitHandlers({ kernelRelease: '6.1.0', appArmorEnabled: false, pressureConditions: () => ['MemoryPressure'] });
    expect(admitPod(pod('be'), handlers)).toEqual({ reason: 'Evicted', message: 'The node had condition: [MemoryPressure]. ' });
  });
});

describe('PodManager.evict', () => {
  it('stops the pod with the eviction grace period and leaves it Failed/Evicted with a DisruptionTarget condition; it never starts again', async () => {
    const clock = new ManualClock();
    const rt = new MemRuntime(clock);
    const m = new PodManager({ runtime: rt, logger: silentLogger(), clock });
    m.setSourcesReady();
    const p: Pod = { metadata: { name: 'web', namespace: 'default', uid: 'u1' }, spec: { terminationGracePeriodSeconds: 30, hostNetwork: true, containers: [{ name: 'app', image: 'busybox' }] } };
    m.setDesired([p]);
    await m.syncOnce();
    await m.syncOnce();
    expect(m.podStatus('u1')?.phase).toBe('Running');
    expect(m.activePods().map((x) => x.metadata!.uid)).toEqual(['u1']);
    const message = 'The node was low on resource: memory. ';
    expect(await m.evict('u1', { reason: 'Evicted', message, gracePeriodSeconds: 1 })).toBe(true);
    expect(rt.graces).toEqual([1]);
    const status = m.podStatus('u1')!;
    expect(status).toMatchObject({ phase: 'Failed', reason: 'Evicted', message });
    expect(status.conditions?.find((c) => c.type === 'DisruptionTarget')).toMatchObject({ status: 'True', reason: 'TerminationByKubelet', message });
    expect(m.activePods()).toEqual([]);
    // Evicted once: a second call does nothing, later syncs start nothing.
    expect(await m.evict('u1', { reason: 'Evicted', message, gracePeriodSeconds: 1 })).toBe(false);
    await m.syncOnce();
    await m.syncOnce();
    expect(m.podStatus('u1')?.phase).toBe('Failed');
    expect([...rt.containers.values()].map((c) => c.state)).toEqual(['exited']);
    // An unknown pod is not evicted.
    expect(await m.evict('nope', { reason: 'Evicted', message, gracePeriodSeconds: 1 })).toBe(false);
  });
});

describe('ImageManager.deleteUnusedImages (node-level reclaim under disk pressure)', () => {
  it('removes every unused image old enough, whatever the GC thresholds, and keeps images in use, pinned, too young and the sandbox image', async () => {
    const clock = new ManualClock();
    const img = (id: string, pinned = false) => ({ id, repoTags: [`docker.io/library/${id}:1`], repoDigests: [], size: 10 * Mi, uid: null, username: '', pinned });
    let images = [img('old-a'), img('old-b'), img('used'), img('pinned', true), img('pause')];
    const removed: string[] = [];
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-evict-img-'));
    try {
      const m = new ImageManager({
        runtime: {
          listImages: async () => images,
          removeImage: async (id) => void (removed.push(id), (images = images.filter((i) => i.id !== id))),
          listContainers: async () => [{ id: 'c1', podSandboxId: 's1', metadata: { name: 'app', attempt: 0 }, image: { image: 'used', annotations: {} }, imageRef: 'used', state: 'CONTAINER_EXITED', createdAt: 0, labels: {}, annotations: {}, imageId: 'used' }] as never,
          imageStatus: async (name) => images.find((i) => i.id === 'pause' && name === 'registry/pause:3') ?? undefined,
          status: async () => ({ conditions: [], info: { config: JSON.stringify({ sandboxImage: 'registry/pause:3' }) } }),
        },
        // Thresholds that would never collect by themselves.
        policy: { highThresholdPercent: 100, lowThresholdPercent: 99, minAgeMs: 120_000, maxAgeMs: 0 },
        rootDir: root,
        clock,
        logger: silentLogger(),
        events: { emit() {} },
        nodeName: 'n1',
      });
      await m.syncOnce(); // first detection
      images.push(img('young'));
      clock.t += 120_000;
      const out = await m.deleteUnusedImages();
      expect(out.error).toBeUndefined();
      expect(removed.sort()).toEqual(['old-a', 'old-b']);
      expect(images.map((i) => i.id).sort()).toEqual(['pause', 'pinned', 'used', 'young']);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});
