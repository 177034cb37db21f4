import type { NodeCondition, NodeStatus } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { binaryQuantity, capacityAndAllocatable, cpuQuantity, nodeConditions, nodeImages, nodeStatus, readinessErrors, readinessMessage, registrationNode, reservedResources, statusChanged, statusChanges, type NodeFacts, type ReadinessState } from '../../../src/node/status.js';
import type { Image } from '../../../src/runtime/types.js';
import type { RuntimeState } from '../../../src/runtime/health.js';

const ready: RuntimeState = { runtimeReady: true, networkReady: true, reason: 'ContainerRuntimeReady', message: 'ok', runtimeName: 'containerd', runtimeVersion: '1.6.20~ds1' };
const noCni: RuntimeState = {
  ...ready,
  networkReady: false,
  reason: 'NetworkPluginNotReady',
  networkReason: 'NetworkPluginNotReady',
  networkMessage: 'Network plugin returns error: cni plugin not initialized',
};
const down: RuntimeState = { runtimeReady: false, networkReady: false, reason: 'ContainerRuntimeDown', message: 'container runtime is down', lastError: 'connect ENOENT /run/containerd/containerd.sock' };

function facts(runtime: ReadinessState): NodeFacts {
  return {
    nodeName: 'n1',
    hostname: 'n1.example',
    ips: ['192.0.2.10'],
    os: 'linux',
    arch: 'amd64',
    cpuCores: 2,
    memoryBytes: 24 * 1024 ** 3,
    maxPods: 110,
    evictionHardMemoryBytes: 100 * 1024 ** 2,
    kubeletPort: 10250,
    kubeletVersion: 'v1.32.0-nodelet',
    runtime,
    pressure: { MemoryPressure: false, DiskPressure: false, PIDPressure: false },
    info: { machineID: 'm', systemUUID: 's', bootID: 'b', kernelVersion: '6.1.0', osImage: 'Debian GNU/Linux 12 (bookworm)' },
  };
}

describe('node conditions', () => {
  it('pressure conditions first, Ready last, with the kubelet reasons', () => {
    const c = nodeConditions(facts(ready), undefined, 't0');
    expect(c.map((x) => [x.type, x.status, x.reason])).toEqual([
      ['MemoryPressure', 'False', 'KubeletHasSufficientMemory'],
      ['DiskPressure', 'False', 'KubeletHasNoDiskPressure'],
      ['PIDPressure', 'False', 'KubeletHasSufficientPID'],
      ['Ready', 'True', 'KubeletReady'],
    ]);
    expect(c[3]!.message).toBe('kubelet is posting ready status');
  });

  it.each([
    ['runtime down', down, /^container runtime is down: connect ENOENT/],
    ['network not ready (no CNI)', noCni, /^container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized$/],
    ['not checked yet', { runtimeReady: false, networkReady: false, reason: 'ContainerRuntimeUnknown', message: '' } as RuntimeState, /status check may not have completed yet/],
  ])('%s: Ready False, KubeletNotReady, with the reason', (_n, rt, re) => {
    const r = nodeConditions(facts(rt), undefined, 't0').at(-1)!;
    expect(r).toMatchObject({ type: 'Ready', status: 'False', reason: 'KubeletNotReady' });
    expect(r.message).toMatch(re);
    expect(readinessErrors(rt)).toHaveLength(1);
  });

  it('a node shutting down: Ready False, KubeletNotReady, with the kubelet\'s message alone (the runtime ready)', () => {
    const shutting: ReadinessState = { ...ready, nodeShutdownError: 'node is shutting down' };
    const r = nodeConditions(facts(shutting), undefined, 't0').at(-1)!;
    expect(r).toEqual({ type: 'Ready', status: 'False', reason: 'KubeletNotReady', message: 'node is shutting down', lastHeartbeatTime: 't0', lastTransitionTime: 't0' });
    // The shutdown ending (a cancelled one) makes the node Ready again.
    expect(nodeConditions(facts(ready), [r], 't1').at(-1)).toMatchObject({ status: 'True', reason: 'KubeletReady', lastTransitionTime: 't1' });
  });

  it('several reasons: the kubelet\'s aggregate error, in its order (runtime, network, shutdown), bracketed, each once', () => {
    const both: ReadinessState = { ...noCni, nodeShutdownError: 'node is shutting down' };
    expect(nodeConditions(facts(both), undefined, 't0').at(-1)!.message).toBe(
      '[container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized, node is shutting down]',
    );
    expect(readinessMessage(['a', 'b', 'a'])).toBe('[a, b]');
    expect(readinessMessage(['a', 'a'])).toBe('a');
  });

  it('lastTransitionTime moves only when the status changes; lastHeartbeatTime on every report', () => {
    const a = nodeConditions(facts(down), undefined, 't0');
    const b = nodeConditions(facts(down), a, 't1');
    expect(b.at(-1)).toMatchObject({ lastHeartbeatTime: 't1', lastTransitionTime: 't0' });
    const c = nodeConditions(facts(ready), b, 't2');
    expect(c.at(-1)).toMatchObject({ status: 'True', lastHeartbeatTime: 't2', lastTransitionTime: 't2' });
    expect(c[0]).toMatchObject({ lastTransitionTime: 't0' });
  });
});

describe('pressure conditions', () => {
  const at = (f: NodeFacts, prev?: NodeCondition[]) => nodeConditions(f, prev, 't1').slice(0, 3);

  it('under pressure: True with the kubelet reasons and messages', () => {
    const c = at({ ...facts(ready), pressure: { MemoryPressure: true, DiskPressure: true, PIDPressure: true } });
    expect(c.map((x) => [x.type, x.status, x.reason, x.message])).toEqual([
      ['MemoryPressure', 'True', 'KubeletHasInsufficientMemory', 'kubelet has insufficient memory available'],
      ['DiskPressure', 'True', 'KubeletHasDiskPressure', 'kubelet has disk pressure'],
      ['PIDPressure', 'True', 'KubeletHasInsufficientPID', 'kubelet has insufficient PID available'],
    ]);
  });

  it('undecided (a signal could not be read): Unknown at first, then as it was, transition time kept', () => {
    const first = at({ ...facts(ready), pressure: {} });
    expect(first.map((x) => [x.type, x.status, x.reason])).toEqual([
      ['MemoryPressure', 'Unknown', 'NodeStatusUnknown'],
      ['DiskPressure', 'Unknown', 'NodeStatusUnknown'],
      ['PIDPressure', 'Unknown', 'NodeStatusUnknown'],
    ]);
    const prev = nodeConditions({ ...facts(ready), pressure: { MemoryPressure: true, DiskPressure: false, PIDPressure: false } }, undefined, 't0');
    const kept = nodeConditions({ ...facts(ready), pressure: { PIDPressure: false } }, prev, 't1').slice(0, 3);
    expect(kept).toEqual([
      { type: 'MemoryPressure', status: 'True', reason: 'KubeletHasInsufficientMemory', message: 'kubelet has insufficient memory available', lastHeartbeatTime: 't1', lastTransitionTime: 't0' },
      { type: 'DiskPressure', status: 'False', reason: 'KubeletHasNoDiskPressure', message: 'kubelet has no disk pressure', lastHeartbeatTime: 't1', lastTransitionTime: 't0' },
      { type: 'PIDPressure', status: 'False', reason: 'KubeletHasSufficientPID', message: 'kubelet has sufficient PID available', lastHeartbeatTime: 't1', lastTransitionTime: 't0' },
    ]);
  });

  it('pressure ending moves lastTransitionTime; staying does not', () => {
    const on = nodeConditions({ ...facts(ready), pressure: { MemoryPressure: true } }, undefined, 't0');
    const still = nodeConditions({ ...facts(ready), pressure: { MemoryPressure: true } }, on, 't1');
    expect(still[0]).toMatchObject({ status: 'True', lastTransitionTime: 't0' });
    const off = nodeConditions({ ...facts(ready), pressure: { MemoryPressure: false } }, still, 't2');
    expect(off[0]).toMatchObject({ status: 'False', reason: 'KubeletHasSufficientMemory', lastTransitionTime: 't2' });
  });
});

describe('node status and registration', () => {
  it('capacity, allocatable minus evictionHard memory, addresses, endpoints, info', () => {
    const s = nodeStatus(facts(ready), undefined, 't0');
    expect(s.capacity).toEqual({ cpu: '2', memory: `${24 * 1024 * 1024}Ki`, pods: '110' });
    expect(s.allocatable).toEqual({ cpu: '2', memory: `${24 * 1024 * 1024 - 100 * 1024}Ki`, pods: '110' });
    expect(s.addresses).toEqual([{ type: 'InternalIP', address: '192.0.2.10' }, { type: 'Hostname', address: 'n1.example' }]);
    expect(s.daemonEndpoints).toEqual({ kubeletEndpoint: { Port: 10250 } });
    expect(s.nodeInfo).toMatchObject({ containerRuntimeVersion: 'containerd://1.6.20~ds1', operatingSystem: 'linux', architecture: 'amd64', kubeletVersion: 'v1.32.0-nodelet' });
  });

  it('allocatable never goes below zero', () => {
    const f = { ...facts(ready), memoryBytes: 50 * 1024 ** 2 };
    expect(nodeStatus(f, undefined, 't').allocatable!.memory).toBe('0Ki');
  });

  it('registers with the preset labels', () => {
    const n = registrationNode(facts(ready), 't0');
    expect(n.metadata!.labels).toEqual({
      'kubernetes.io/hostname': 'n1.example',
      'kubernetes.io/os': 'linux',
      'kubernetes.io/arch': 'amd64',
      'beta.kubernetes.io/os': 'linux',
      'beta.kubernetes.io/arch': 'amd64',
    });
    expect(n.status!.conditions!.at(-1)!.type).toBe('Ready');
  });

  it('registers with --node-labels over the preset ones, the taints, providerID and annotations', () => {
    const registration = { labels: { 'kubernetes.io/hostname': 'override', 'node.kubernetes.io/pool': 'gpu' }, taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }], providerID: 'aws:///eu-west-1a/i-0abc', annotations: { 'alpha.kubernetes.io/provided-node-ip': '10.0.0.7' } };
    const n = registrationNode({ ...facts(ready), registration }, 't0');
    expect(n.metadata).toEqual({
      name: facts(ready).nodeName,
      labels: { 'kubernetes.io/hostname': 'override', 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', 'beta.kubernetes.io/os': 'linux', 'beta.kubernetes.io/arch': 'amd64', 'node.kubernetes.io/pool': 'gpu' },
      annotations: { 'alpha.kubernetes.io/provided-node-ip': '10.0.0.7' },
    });
    expect(n.spec).toEqual({ taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }], providerID: 'aws:///eu-west-1a/i-0abc' });
    expect(registrationNode(facts(ready), 't0').spec).toBeUndefined();
  });

  it('a new heartbeat alone is no change; a condition or capacity change is', () => {
    const a = nodeStatus(facts(ready), undefined, 't0');
    expect(statusChanged(a, nodeStatus(facts(ready), a, 't1'))).toBe(false);
    expect(statusChanged(a, nodeStatus(facts(noCni), a, 't1'))).toBe(true);
    expect(statusChanged(a, nodeStatus({ ...facts(ready), maxPods: 50 }, a, 't1'))).toBe(true);
    expect(statusChanged(undefined, a)).toBe(true);
  });

  it('what others own is no change: a foreign condition, a foreign capacity key, another key order', () => {
    const a = nodeStatus(facts(ready), undefined, 't0');
    const onServer: NodeStatus = {
      ...a,
      capacity: { 'example.com/gpu': '1', ...a.capacity },
      conditions: [{ type: 'NetworkUnavailable', status: 'False', reason: 'RouteCreated', message: 'routes ok', lastTransitionTime: 't0', lastHeartbeatTime: 't0' }, ...a.conditions!],
      nodeInfo: Object.fromEntries(Object.entries(a.nodeInfo!).reverse()) as NodeStatus['nodeInfo'],
    };
    expect(statusChanged(onServer, nodeStatus(facts(ready), onServer, 't1'))).toBe(false);
  });

  it("the node controller's Unknown on the server is a change nodelet corrects", () => {
    const a = nodeStatus(facts(ready), undefined, 't0');
    const unknown: NodeStatus = {
      ...a,
      conditions: a.conditions!.map((c) => ({ ...c, status: 'Unknown', reason: 'NodeStatusUnknown', message: 'Kubelet stopped posting node status.', lastTransitionTime: 't5' })),
    };
    const next = nodeStatus(facts(ready), unknown, 't6');
    expect(statusChanged(unknown, next)).toBe(true);
    expect(next.conditions!.map((c) => [c.type, c.status, c.lastTransitionTime])).toEqual([
      ['MemoryPressure', 'False', 't6'],
      ['DiskPressure', 'False', 't6'],
      ['PIDPressure', 'False', 't6'],
      ['Ready', 'True', 't6'],
    ]);
  });
});

describe('machine facts', () => {
  it('reads PRETTY_NAME from os-release, quoted or not', async () => {
    const { prettyName } = await import('../../../src/node/facts.js');
    expect(prettyName('NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n')).toBe('Debian GNU/Linux 12 (bookworm)');
    expect(prettyName('PRETTY_NAME=Alpine\n')).toBe('Alpine');
    expect(prettyName('ID=x\n')).toBe('');
  });

  it('this machine: linux, a GOARCH name, CPUs and memory, a boot ID', async () => {
    const { readMachineFacts } = await import('../../../src/node/facts.js');
    const f = readMachineFacts();
    expect(f.os).toBe('linux');
    expect(['amd64', 'arm64']).toContain(f.arch);
    expect(f.cpuCores).toBeGreaterThan(0);
    expect(f.memoryBytes).toBeGreaterThan(0);
    expect(f.info.bootID).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('images (status.images)', () => {
  const image = (id: string, size: number, repoTags: string[], repoDigests: string[] = []): Image => ({ id, size, repoTags, repoDigests, uid: null, username: '', pinned: false });

  it('largest first (ties by ID, descending), named by digests then tags, with their size', () => {
    const list = [image('sha256:a', 10, ['x/a:1']), image('sha256:b', 30, ['x/b:1', 'x/b:2'], ['x/b@sha256:bb']), image('sha256:c', 10, ['x/c:1'])];
    expect(nodeImages(list)).toEqual([
      { names: ['x/b@sha256:bb', 'x/b:1', 'x/b:2'], sizeBytes: 30 },
      { names: ['x/c:1'], sizeBytes: 10 },
      { names: ['x/a:1'], sizeBytes: 10 },
    ]);
  });

  it('at most nodeStatusMaxImages (-1: all; 0: none), at most 5 names each', () => {
    const list = Array.from({ length: 60 }, (_, i) => image(`sha256:${String(i).padStart(2, '0')}`, i, [`x/i:${i}`]));
    expect(nodeImages(list)).toHaveLength(50);
    expect(nodeImages(list)[0]).toEqual({ names: ['x/i:59'], sizeBytes: 59 });
    expect(nodeImages(list, 3).map((i) => i.sizeBytes)).toEqual([59, 58, 57]);
    expect(nodeImages(list, -1)).toHaveLength(60);
    expect(nodeImages(list, 0)).toEqual([]);
    expect(nodeImages([image('sha256:m', 1, ['t1', 't2', 't3', 't4'], ['d1', 'd2'])])[0]!.names).toEqual(['d1', 'd2', 't1', 't2', 't3']);
  });

  it('in the status when known, and a changed list is a change worth a patch', () => {
    const f = { ...facts(ready), images: [image('sha256:a', 10, ['x/a:1'])], maxImages: 50 };
    const a = nodeStatus(f, undefined, 't0');
    expect(a.images).toEqual([{ names: ['x/a:1'], sizeBytes: 10 }]);
    expect(nodeStatus(facts(ready), undefined, 't0').images).toBeUndefined();
    expect(statusChanges(a, nodeStatus(f, a, 't1'))).toEqual([]);
    expect(statusChanges(a, nodeStatus({ ...f, images: [] }, a, 't1'))).toEqual(['images']);
  });
});

describe('capacity and allocatable with reservations and ephemeral-storage', () => {
  const Gi = 1024 ** 3;
  it('quantities in Go\'s canonical form', () => {
    expect([binaryQuantity(10 * Gi), binaryQuantity(20469760 * 1024), binaryQuantity(17790086017), binaryQuantity(1000), binaryQuantity(512), binaryQuantity(-5)]).toEqual(['10Gi', '19990Mi', '17790086017', '1k', '512', '0']);
    expect([cpuQuantity(2000), cpuQuantity(1900), cpuQuantity(-100)]).toEqual(['2', '1900m', '0']);
  });

  it('kubeReserved + systemReserved summed per resource', () => {
    expect(reservedResources({ cpu: '100m', memory: '256Mi', 'ephemeral-storage': '1Gi', pid: '100' }, { cpu: '0.5', 'ephemeral-storage': '500M' }, undefined)).toEqual({ cpuMillis: 600, memoryBytes: 256 * 1024 ** 2, ephemeralStorageBytes: Gi + 500e6 });
  });

  it.each([
    ['no nodefs threshold', undefined, 100 * Gi - Gi],
    ['nodefs.available as a quantity', { quantity: 5 * Gi }, 100 * Gi - Gi - 5 * Gi],
    ['nodefs.available as a percentage (of the capacity, truncated)', { fraction: 0.1 }, 100 * Gi - Gi - Math.floor(100 * Gi * 0.1)],
  ])('ephemeral-storage: capacity of the root dir\'s filesystem; allocatable minus reserved and %s', (_n, nodefs, want) => {
    const f: NodeFacts = { ...facts(ready), ephemeralStorageBytes: 100 * Gi, reserved: { cpuMillis: 0, memoryBytes: 0, ephemeralStorageBytes: Gi }, evictionHardNodefs: nodefs };
    const r = capacityAndAllocatable(f);
    expect(r.capacity!['ephemeral-storage']).toBe('100Gi');
    expect(r.allocatable!['ephemeral-storage']).toBe(binaryQuantity(want));
  });

  it('cpu and memory reservations come off allocatable too; nothing goes below zero; no ephemeral-storage before it is measured', () => {
    const f: NodeFacts = { ...facts(ready), reserved: { cpuMillis: 250, memoryBytes: Gi, ephemeralStorageBytes: 200 * Gi }, ephemeralStorageBytes: 100 * Gi };
    expect(capacityAndAllocatable(f).allocatable).toEqual({ cpu: '1750m', memory: `${(24 * Gi - Gi - 100 * 1024 ** 2) / 1024}Ki`, pods: '110', 'ephemeral-storage': '0' });
    const { ephemeralStorageBytes: _e, ...unmeasured } = f;
    expect(Object.keys(capacityAndAllocatable(unmeasured).capacity!)).toEqual(['cpu', 'memory', 'pods']);
  });
});
