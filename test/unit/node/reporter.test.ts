import type { Node, NodeStatus } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../helpers/clock.js';
import { NodeletError } from '../../../src/errors.js';
import { silentLogger } from '../../../src/log.js';
import { NodeReporter, type NodeApi } from '../../../src/node/reporter.js';
import type { NodeFacts } from '../../../src/node/status.js';
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
  async patchNodeStatus(name: string, status: NodeStatus) {
    this.calls.push('patch');
    if (this.down) throw new NodeletError('UNAVAILABLE', 'connection refused');
    const n = { ...this.nodes.get(name)!, status };
    this.nodes.set(name, n);
    return n;
  }
}

const ready: RuntimeState = { runtimeReady: true, networkReady: true, reason: 'ContainerRuntimeReady', message: '', runtimeName: 'containerd', runtimeVersion: '1.6' };

function setup(existing?: Node) {
  const api = new MemNodes();
  if (existing) api.nodes.set('n1', existing);
  const clock = new ManualClock();
  let runtime: RuntimeState = { runtimeReady: false, networkReady: false, reason: 'ContainerRuntimeDown', message: 'down' };
  const facts = (): NodeFacts => ({
    nodeName: 'n1', hostname: 'n1', ips: ['192.0.2.1'], os: 'linux', arch: 'amd64', cpuCores: 2, memoryBytes: 2 ** 30, maxPods: 110,
    evictionHardMemoryBytes: 100 * 2 ** 20, kubeletPort: 10250, kubeletVersion: 'v1.32.0-nodelet', runtime,
    info: { machineID: 'm', systemUUID: 's', bootID: 'b', kernelVersion: 'k', osImage: 'o' },
  });
  const events: string[] = [];
  const r = new NodeReporter({
    api, facts, clock, logger: silentLogger(), updateFrequencyMs: 10_000, reportFrequencyMs: 300_000, rand: () => 0.5,
    events: { emit: (ref, type, reason, message) => events.push(`${ref.kind}/${ref.name} ${type} ${reason}: ${message}`) },
  });
  return { api, clock, r, events, setRuntime: (s: RuntimeState) => (runtime = s) };
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
    expect(api.calls).toEqual([]);
    clock.t += 300_000;
    await r.syncOnce();
    expect(api.calls).toEqual(['patch']);
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
});
