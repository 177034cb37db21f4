import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Node, NodeStatus } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../helpers/clock.js';
import { idleShutdownManager } from '../../helpers/shutdown-manager.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { NodeReporter, type NodeApi } from '../../../src/node/reporter.js';
import type { NodeFacts, ReadinessState } from '../../../src/node/status.js';
import type { RuntimeState } from '../../../src/runtime/health.js';

class MemNodes implements NodeApi {
  nodes = new Map<string, Node>();
  calls: string[] = [];
  down = false;
  async getNode(name: string) {
    this.calls.push('get');
    return this.nodes.get(name);
  }
  async createNode(n: Node) {
    this.calls.push('create');
    if (this.down) throw new NodeletError('UNAVAILABLE', 'connection refused');
    if (this.nodes.has(n.metadata!.name!)) throw new NodeletError('ALREADY_EXISTS', 'exists');
    this.nodes.set(n.metadata!.name!, { ...n, metadata: { ...n.metadata, uid: 'uid-1' } });
    return this.nodes.get(n.metadata!.name!)!;
  }
  /** As the API server's strategic merge patch of a Node status: conditions and addresses by type, maps by key. */
  async patchNodeStatus(name: string, status: NodeStatus) {
    this.calls.push('patch');
    if (this.down) throw new NodeletError('UNAVAILABLE', 'connection refused');
    const cur = this.nodes.get(name)!;
    const byType = <T extends { type: string }>(old: T[] = [], patch: T[] = []) => [...old.map((o) => patch.find((p) => p.type === o.type) ?? o), ...patch.filter((p) => !old.some((o) => o.type === p.type))];
    const merged: NodeStatus = {
      ...cur.status,
      ...status,
      capacity: { ...cur.status?.capacity, ...status.capacity },
      allocatable: { ...cur.status?.allocatable, ...status.allocatable },
      conditions: byType(cur.status?.conditions, status.conditions),
      addresses: byType(cur.status?.addresses, status.addresses),
    };
    const n = { ...cur, status: merged };
    this.nodes.set(name, n);
    return n;
  }
}

const ready: RuntimeState = { runtimeReady: true, networkReady: true, reason: 'ContainerRuntimeReady', message: '', runtimeName: 'containerd', runtimeVersion: '1.6' };

/** The same, with a watch of the Node (an informer's cache): the reporter reads it instead of GETting. */
class WatchedNodes extends MemNodes {
  /** The watch has listed (else the reporter GETs). */
  synced = true;
  watchedNode(name: string) {
    this.calls.push('cache');
    return this.synced ? { node: this.nodes.get(name) } : undefined;
  }
}

/** `runtimeOf`: the runtime state each turn reads (the daemon's: through the node shutdown manager); else setRuntime's. */
function setup(existing?: Node, api: MemNodes = new MemNodes(), clock = new ManualClock(), runtimeOf?: () => ReadinessState) {
  if (existing) api.nodes.set('n1', existing);
  let runtime: ReadinessState = { runtimeReady: false, networkReady: false, reason: 'ContainerRuntimeDown', message: 'down' };
  let pressure: NodeFacts['pressure'] = { MemoryPressure: false, DiskPressure: false, PIDPressure: false };
  // Asynchronous, as the daemon's facts are (the pressure signals are measured each turn).
  const facts = async (): Promise<NodeFacts> => ({
    nodeName: 'n1', hostname: 'n1', ips: ['192.0.2.1'], os: 'linux', arch: 'amd64', cpuCores: 2, memoryBytes: 2 ** 30, maxPods: 110,
    evictionHardMemoryBytes: 100 * 2 ** 20, kubeletPort: 10250, kubeletVersion: 'v1.32.0-nodelet', runtime: runtimeOf ? runtimeOf() : runtime, pressure,
    info: { machineID: 'm', systemUUID: 's', bootID: 'b', kernelVersion: 'k', osImage: 'o' },
  });
  const events: string[] = [];
  const r = new NodeReporter({
    api, facts, clock, logger: silentLogger(), updateFrequencyMs: 10_000, reportFrequencyMs: 300_000, rand: () => 0.5,
    events: { emit: (ref, type, reason, message) => events.push(`${ref.kind}/${ref.name} ${type} ${reason}: ${message}`) },
  });
  return { api, clock, r, events, setRuntime: (s: ReadinessState) => (runtime = s), setPressure: (p: NodeFacts['pressure']) => (pressure = p) };
}

const readyOf = (n: Node | undefined) => n?.status?.conditions?.find((c) => c.type === 'Ready');

describe('NodeReporter', () => {
  it('registers the node, then reports its status; NotReady while the runtime is down, Ready after', async () => {
    const { api, clock, r, setRuntime } = setup();
    await r.syncOnce();
    expect(api.calls).toEqual(['create', 'patch']);
    expect(readyOf(api.nodes.get('n1'))).toMatchObject({ status: 'False', reason: 'KubeletNotReady' });
    setRuntime(ready);
    clock.t += 100;
    await r.syncOnce();
    expect(readyOf(api.nodes.get('n1'))).toMatchObject({ status: 'True', reason: 'KubeletReady' });
  });

  it('emits NodeNotReady and NodeReady events on Ready transitions only', async () => {
    const { clock, r, events, setRuntime } = setup();
    await r.syncOnce();
    clock.t += 100;
    await r.syncOnce();
    setRuntime(ready);
    clock.t += 100;
    await r.syncOnce();
    clock.t += 300_000;
    await r.syncOnce(); // a periodic report, no transition
    expect(events).toEqual(['Node/n1 Normal NodeNotReady: Node n1 status is now: NodeNotReady', 'Node/n1 Normal NodeReady: Node n1 status is now: NodeReady']);
  });

  it('patches only on change or when the report frequency has passed', async () => {
    const { api, clock, r } = setup();
    await r.syncOnce();
    api.calls = [];
    clock.t += 10_000;
    await r.syncOnce();
    expect(api.calls).toEqual(['get']);
    clock.t += 300_000;
    await r.syncOnce();
    expect(api.calls).toEqual(['get', 'get', 'patch']);
    expect(readyOf(api.nodes.get('n1'))!.lastHeartbeatTime).toBe(new Date(clock.t).toISOString().replace(/\.\d{3}Z$/, 'Z'));
  });

  it('takes over an existing Node and keeps its condition transition times', async () => {
    const { api, r } = setup({
      metadata: { name: 'n1', uid: 'old' },
      status: { conditions: [{ type: 'Ready', status: 'False', reason: 'KubeletNotReady', message: 'x', lastTransitionTime: '2026-01-01T00:00:00Z' }] },
    });
    await r.syncOnce();
    expect(api.calls).toEqual(['create', 'get', 'patch']);
    expect(readyOf(api.nodes.get('n1'))!.lastTransitionTime).toBe('2026-01-01T00:00:00Z');
  });

  it("never removes or rewrites what others own: a network plugin's condition and a foreign capacity key survive every write", async () => {
    const { api, clock, r, setRuntime, setPressure } = setup();
    await r.syncOnce();
    const foreign = { type: 'NetworkUnavailable', status: 'False', reason: 'RouteCreated', message: 'RouteController created a route', lastTransitionTime: '2026-01-01T00:00:00Z', lastHeartbeatTime: '2026-01-01T00:00:00Z' };
    const n = api.nodes.get('n1')!;
    api.nodes.set('n1', { ...n, status: { ...n.status, capacity: { ...n.status!.capacity, 'example.com/gpu': '2' }, conditions: [...n.status!.conditions!, foreign] } });
    api.calls = [];
    // Changes that make nodelet write: Ready, then memory pressure, then a periodic report.
    setRuntime(ready);
    clock.t += 10_000;
    await r.syncOnce();
    setPressure({ MemoryPressure: true, DiskPressure: false, PIDPressure: false });
    clock.t += 10_000;
    await r.syncOnce();
    clock.t += 300_000;
    await r.syncOnce();
    expect(api.calls.filter((c) => c === 'patch')).toHaveLength(3);
    const after = api.nodes.get('n1')!.status!;
    expect(after.conditions!.find((c) => c.type === 'NetworkUnavailable')).toEqual(foreign);
    expect(after.capacity!['example.com/gpu']).toBe('2');
    expect(after.conditions!.find((c) => c.type === 'MemoryPressure')).toMatchObject({ status: 'True', reason: 'KubeletHasInsufficientMemory' });
    // And it alone is never a reason to write.
    api.calls = [];
    clock.t += 10_000;
    await r.syncOnce();
    expect(api.calls).toEqual(['get']);
  });

  it("the node controller's Unknown is corrected at the next turn, not at the next report interval", async () => {
    const { api, clock, r, setRuntime, events } = setup();
    setRuntime(ready);
    await r.syncOnce();
    const n = api.nodes.get('n1')!;
    api.nodes.set('n1', {
      ...n,
      status: { ...n.status, conditions: n.status!.conditions!.map((c) => ({ ...c, status: 'Unknown', reason: 'NodeStatusUnknown', message: 'Kubelet stopped posting node status.' })) },
    });
    clock.t += 10_000;
    await r.syncOnce();
    expect(readyOf(api.nodes.get('n1'))).toMatchObject({ status: 'True', reason: 'KubeletReady', lastTransitionTime: new Date(clock.t).toISOString().replace(/\.\d{3}Z$/, 'Z') });
    expect(events.at(-1)).toBe('Node/n1 Normal NodeReady: Node n1 status is now: NodeReady');
  });

  it('a control plane that is down is retried next turn, never thrown; the first turns are fast until Ready', async () => {
    const { api, clock, r, setRuntime } = setup();
    api.down = true;
    await expect(r.syncOnce()).resolves.toBeUndefined();
    expect(r.registered).toBe(false);
    r.start();
    expect(r.nextDelayMs()).toBe(100);
    api.down = false;
    setRuntime(ready);
    await r.syncOnce();
    expect(r.registered).toBe(true);
    expect(r.nextDelayMs()).toBe(10_000);
    clock.t += 1;
    await r.stop();
  });

  it('reportNow: the running loop turns at once instead of at the end of its period', async () => {
    const { api, clock, r, setRuntime } = setup();
    setRuntime(ready);
    r.start();
    await clock.whenSleeping();
    expect(api.calls).toEqual(['create', 'patch']);
    expect(clock.sleeps).toEqual([10_000]);
    api.calls = [];
    setRuntime({ ...ready, nodeShutdownError: 'node is shutting down' });
    await clock.advance(4_000);
    // Not seen yet: the loop sleeps its 10 s.
    expect(api.calls).toEqual([]);
    const t = clock.now();
    r.reportNow();
    await clock.whenSleeping();
    expect(clock.now()).toBe(t);
    expect(api.calls).toEqual(['get', 'patch']);
    expect(readyOf(api.nodes.get('n1'))).toMatchObject({ status: 'False', reason: 'KubeletNotReady', message: 'node is shutting down' });
    await r.stop();
  });

  it('a node shutdown starting is reported at once: Ready False, "node is shutting down", without waiting for nodeStatusUpdateFrequency', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-reporter-'));
    try {
      const clock = new ManualClock();
      const shutdown = idleShutdownManager(dir, clock);
      // The daemon's wiring: the facts' runtime state through the shutdown manager, its start waking the reporter.
      const { api, r, events } = setup(undefined, new MemNodes(), clock, () => shutdown.runtimeState(ready));
      shutdown.onShutdownStart(() => r.reportNow());
      r.start();
      await clock.whenSleeping();
      expect(readyOf(api.nodes.get('n1'))).toMatchObject({ status: 'True', reason: 'KubeletReady' });
      api.calls = [];
      await clock.advance(3_000);
      const t = clock.now();
      const done = shutdown.processShutdown();
      await clock.whenSleeping();
      expect(clock.now()).toBe(t);
      expect(api.calls).toEqual(['get', 'patch']);
      const stamp = new Date(t).toISOString().replace(/\.\d{3}Z$/, 'Z');
      expect(readyOf(api.nodes.get('n1'))).toEqual({ type: 'Ready', status: 'False', reason: 'KubeletNotReady', message: 'node is shutting down', lastHeartbeatTime: stamp, lastTransitionTime: stamp });
      expect(events.at(-1)).toBe('Node/n1 Normal NodeNotReady: Node n1 status is now: NodeNotReady');
      await done;
      await r.stop();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  describe('with a watch of its own Node', () => {
    it('makes no GET on a steady turn; patches only on change or when the report is due', async () => {
      const { api, clock, r, setRuntime } = setup(undefined, new WatchedNodes());
      setRuntime(ready);
      await r.syncOnce();
      expect(api.calls).toEqual(['create', 'patch']);
      api.calls = [];
      for (let i = 0; i < 29; i++) {
        clock.t += 10_000;
        await r.syncOnce();
      }
      expect(api.calls.filter((c) => c !== 'cache')).toEqual([]);
      clock.t += 10_000;
      await r.syncOnce();
      expect(api.calls.filter((c) => c !== 'cache')).toEqual(['patch']);
    });

    it("the node controller's Unknown, seen by the watch, is corrected at the next turn; a foreign condition survives", async () => {
      const { api, clock, r, setRuntime } = setup(undefined, new WatchedNodes());
      setRuntime(ready);
      await r.syncOnce();
      const foreign = { type: 'NetworkUnavailable', status: 'False', reason: 'RouteCreated', message: 'RouteController created a route', lastTransitionTime: '2026-01-01T00:00:00Z', lastHeartbeatTime: '2026-01-01T00:00:00Z' };
      const n = api.nodes.get('n1')!;
      api.nodes.set('n1', { ...n, status: { ...n.status, conditions: [...n.status!.conditions!.map((c) => ({ ...c, status: 'Unknown', reason: 'NodeStatusUnknown' })), foreign] } });
      api.calls = [];
      clock.t += 10_000;
      await r.syncOnce();
      expect(api.calls).toEqual(['cache', 'patch']);
      expect(readyOf(api.nodes.get('n1'))).toMatchObject({ status: 'True', reason: 'KubeletReady' });
      expect(api.nodes.get('n1')!.status!.conditions!.find((c) => c.type === 'NetworkUnavailable')).toEqual(foreign);
    });

    it('GETs while the watch has not listed (or is failing)', async () => {
      const api = new WatchedNodes();
      const { clock, r } = setup(undefined, api);
      await r.syncOnce();
      api.synced = false;
      api.calls = [];
      clock.t += 10_000;
      await r.syncOnce();
      expect(api.calls).toEqual(['cache', 'get']);
    });

    it('a deleted Node is registered again at the next turn, and reported', async () => {
      const { api, clock, r, setRuntime } = setup(undefined, new WatchedNodes());
      setRuntime(ready);
      await r.syncOnce();
      api.nodes.delete('n1');
      api.calls = [];
      clock.t += 10_000;
      await r.syncOnce();
      expect(api.calls).toEqual(['cache', 'create', 'patch']);
      expect(readyOf(api.nodes.get('n1'))).toMatchObject({ status: 'True', reason: 'KubeletReady' });
      expect(r.registered).toBe(true);
    });
  });

  it('without a watch, a deleted Node is registered again too', async () => {
    const { api, clock, r } = setup();
    await r.syncOnce();
    api.nodes.delete('n1');
    api.calls = [];
    clock.t += 10_000;
    await r.syncOnce();
    expect(api.calls).toEqual(['get', 'create', 'patch']);
  });
});
