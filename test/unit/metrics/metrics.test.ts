/**
 * The metrics pieces that are pure code: the exposition writer, the kubelet families and
 * what records them, the stats provider (cache, pod usage from containers, only live pods)
 * and the resource metrics rendered from it, and the authorization mapping of the routes.
 * The integration test (test/integration/metrics) parses the real endpoints with
 * Python's prometheus_client against containerd.
 */
import { describe, expect, it } from 'vitest';
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import { silentLogger } from '../../../src/log.js';
import { LeaseRenewer } from '../../../src/node/lease.js';
import { Counter, Histogram, Registry, exponentialBuckets, Collected } from '../../../src/metrics/exposition.js';
import { Metrics, operationType } from '../../../src/metrics/kubelet.js';
import { countingPodRuntime } from '../../../src/pods/sync/metrics-hooks.js';
import { renderResourceMetrics } from '../../../src/metrics/resource.js';
import { StatsProvider, type HostReader, type StatsRuntime } from '../../../src/metrics/stats.js';
import { requestAttributes } from '../../../src/server/auth.js';
import { NodeletError } from '../../../src/errors.js';
import type { ObservedPod } from '../../../src/pods/sync/observed.js';
import type { PodRuntime } from '../../../src/pods/cri/runtime-port.js';
import type { Container, ContainerStats, PodSandbox } from '../../../src/runtime/types.js';
import { VirtualClock } from '../../helpers/clock.js';

describe('exposition', () => {
  it('writes HELP, TYPE, escaped labels, cumulative histogram buckets and sample timestamps', () => {
    const reg = new Registry();
    reg.register(new Counter('a_total', 'A "help" with \\ and\nnewline.', ['x'])).inc({ x: 'v"1\\\n' }, 2);
    const h = reg.register(new Histogram('h_seconds', 'H.', ['op'], [0.1, 1]));
    h.observe({ op: 'a' }, 0.05);
    h.observe({ op: 'a' }, 0.5);
    h.observe({ op: 'a' }, 5);
    reg.register(new Collected('g', 'G.', 'gauge', [], () => [{ value: 1.5, timestampMs: 1700000000123.4 }]));
    expect(reg.render()).toBe(
      [
        '# HELP a_total A "help" with \\\\ and\\nnewline.',
        '# TYPE a_total counter',
        'a_total{x="v\\"1\\\\\\n"} 2',
        '# HELP h_seconds H.',
        '# TYPE h_seconds histogram',
        'h_seconds_bucket{op="a",le="0.1"} 1',
        'h_seconds_bucket{op="a",le="1"} 2',
        'h_seconds_bucket{op="a",le="+Inf"} 3',
        'h_seconds_sum{op="a"} 5.55',
        'h_seconds_count{op="a"} 3',
        '# HELP g G.',
        '# TYPE g gauge',
        'g 1.5 1700000000123',
        '',
      ].join('\n'),
    );
  });

  it('refuses a name registered twice, bad names, and counters going down', () => {
    const reg = new Registry();
    reg.register(new Counter('x_total', 'X.', []));
    expect(() => reg.register(new Counter('x_total', 'X.', []))).toThrow(/twice/);
    expect(() => new Counter('bad-name', 'X.', [])).toThrow(/invalid metric name/);
    expect(() => new Counter('ok', 'X.', ['__reserved'])).toThrow(/invalid label/);
    expect(() => new Counter('c', 'C.', []).inc(undefined, -1)).toThrow(/only goes up/);
  });

  it('builds client_golang exponential buckets (the runtime operation buckets)', () => {
    expect(exponentialBuckets(0.005, 2.5, 14)).toEqual([0.005, 0.0125, 0.03125, 0.078125, 0.1953125, 0.48828125, 1.220703125, 3.0517578125, 7.62939453125, 19.0734863281, 47.6837158203, 119.209289551, 298.023223877, 745.058059692]);
  });
});

describe('kubelet metrics', () => {
  it('names CRI operations as the kubelet does', () => {
    expect(['RunPodSandbox', 'ListPodSandbox', 'PodSandboxStatus', 'ListContainerStats', 'ImageFsInfo', 'SomeNewCall'].map(operationType)).toEqual([
      'run_podsandbox',
      'list_podsandbox',
      'podsandbox_status',
      'list_container_stats',
      'image_fs_info',
      'some_new_call',
    ]);
  });

  it('counts runtime operations, errors and durations; running pods and containers by state from a relist', () => {
    const m = new Metrics({ processMetrics: false });
    m.runtimeOperation('StartContainer', 0.05, false);
    m.runtimeOperation('StartContainer', 0.2, true);
    const obs = (uid: string, ready: boolean, states: ('running' | 'exited')[]): ObservedPod => ({
      uid,
      name: uid,
      namespace: 'ns',
      sandboxes: [{ id: `s-${uid}`, attempt: 0, ready, createdAt: 0 }],
      containers: states.map((state, i) => ({ id: `${uid}-${i}`, name: `c${i}`, podSandboxId: `s-${uid}`, attempt: 0, state, restartCount: 0, hash: '', image: '', imageRef: '', createdAt: 0 })),
    });
    m.relisted([obs('a', true, ['running', 'exited']), obs('b', false, ['exited'])]);
    const text = m.render();
    expect(text).toContain('kubelet_runtime_operations_total{operation_type="start_container"} 2');
    expect(text).toContain('kubelet_runtime_operations_errors_total{operation_type="start_container"} 1');
    expect(text).toContain('kubelet_runtime_operations_duration_seconds_count{operation_type="start_container"} 2');
    expect(text).toContain('kubelet_running_pods 1');
    expect(text).toContain('kubelet_running_containers{container_state="running"} 1');
    expect(text).toContain('kubelet_running_containers{container_state="exited"} 2');
    // A state gone from the runtime is gone from the gauge.
    m.relisted([obs('a', true, ['running'])]);
    expect(m.render()).not.toContain('container_state="exited"');
  });

  it('names the node, and counts lease renewals the control plane accepted and those that failed', async () => {
    const m = new Metrics({ processMetrics: false, nodeName: 'n1' });
    const clock = new VirtualClock();
    let fail = true;
    const api = {
      getLease: async () => undefined,
      getNode: async () => ({ metadata: { name: 'n1', uid: 'u' } }),
      createLease: async (l: Lease) => {
        if (fail) throw new NodeletError('UNAVAILABLE', 'PUT lease: 503', { status: 503 });
        return l;
      },
      updateLease: async (l: Lease) => l,
    };
    const r = new LeaseRenewer({ api, nodeName: 'n1', leaseDurationSeconds: 40, clock, logger: silentLogger(), onRenew: (ok) => m.leaseRenewed(ok) });
    await r.syncOnce();
    fail = false;
    await r.syncOnce();
    await r.syncOnce();
    const text = m.render();
    expect(text).toContain('kubelet_node_name{node="n1"} 1');
    expect(text).toContain('kubelet_node_lease_renew_total 2');
    expect(text).toContain('kubelet_node_lease_renew_failures_total 1');
  });

  it('the graceful node shutdown gauges: none until asked for, then upstream\'s names, help and stability, 0, then unix seconds', () => {
    const m = new Metrics({ processMetrics: false });
    expect(m.render()).not.toContain('graceful_shutdown');
    const g = m.gracefulShutdown();
    expect(m.gracefulShutdown()).toBe(g);
    const family = (text: string) => {
      const lines = text.split('\n');
      const i = lines.indexOf('# HELP kubelet_graceful_shutdown_start_time_seconds [ALPHA] Last graceful shutdown start time since unix epoch in seconds');
      return lines.slice(i, i + 6);
    };
    expect(family(m.render())).toEqual([
      '# HELP kubelet_graceful_shutdown_start_time_seconds [ALPHA] Last graceful shutdown start time since unix epoch in seconds',
      '# TYPE kubelet_graceful_shutdown_start_time_seconds gauge',
      'kubelet_graceful_shutdown_start_time_seconds 0',
      // Upstream's help for the end gauge is the start gauge's, word for word.
      '# HELP kubelet_graceful_shutdown_end_time_seconds [ALPHA] Last graceful shutdown start time since unix epoch in seconds',
      '# TYPE kubelet_graceful_shutdown_end_time_seconds gauge',
      'kubelet_graceful_shutdown_end_time_seconds 0',
    ]);
    g.setShutdownStartTime(Date.UTC(2026, 10, 24, 7, 0, 0));
    g.setShutdownEndTime(Date.UTC(2026, 10, 24, 7, 0, 2, 600));
    expect(family(m.render()).filter((l) => !l.startsWith('#'))).toEqual(['kubelet_graceful_shutdown_start_time_seconds 1795503600', 'kubelet_graceful_shutdown_end_time_seconds 1795503602.6']);
  });

  it('counts started sandboxes and containers (init apart, errors with their code) at the runtime port', async () => {
    const m = new Metrics({ processMetrics: false });
    let fail = false;
    const rt = {
      async runSandbox() {
        return 's1';
      },
      async startContainer() {
        if (fail) throw new NodeletError('INVALID_ARGUMENT', 'no');
        return 'c1';
      },
      runtimeName: () => 'fake',
    } as unknown as PodRuntime;
    const counted = countingPodRuntime(rt, m);
    await counted.runSandbox({}, 0);
    await counted.startContainer({ init: true } as never);
    await counted.startContainer({ init: false } as never);
    fail = true;
    await expect(counted.startContainer({ init: false } as never)).rejects.toThrow('no');
    expect(counted.runtimeName()).toBe('fake');
    expect(m.startedPods.value()).toBe(1);
    expect(m.startedContainers.value({ container_type: 'init_container' })).toBe(1);
    expect(m.startedContainers.value({ container_type: 'container' })).toBe(1);
    expect(m.startedContainersErrors.value({ container_type: 'container', code: 'INVALID_ARGUMENT' })).toBe(1);
  });
});

// ------------------------------------------------------------------ stats

const NS = 1e6; // ns per ms
const T0 = 1_700_000_000_000;

function sandbox(id: string, name: string, createdAtMs: number): PodSandbox {
  const labels = { 'io.kubernetes.pod.name': name, 'io.kubernetes.pod.namespace': 'default', 'io.kubernetes.pod.uid': `uid-${name}` };
  return { id, metadata: { name, namespace: 'default', uid: `uid-${name}`, attempt: 0 }, state: 'SANDBOX_READY', createdAt: createdAtMs * NS, labels, annotations: {}, runtimeHandler: '' };
}
function container(id: string, sandboxId: string, name: string): Container {
  return { id, podSandboxId: sandboxId, metadata: { name, attempt: 0 }, image: null, imageRef: '', state: 'CONTAINER_RUNNING', createdAt: T0 * NS, labels: { 'io.kubernetes.container.name': name }, annotations: {}, imageId: '' };
}
function cstats(id: string, cpuNs: number, ws: number, atMs: number): ContainerStats {
  return {
    attributes: { id, metadata: null, labels: {}, annotations: {} },
    cpu: { timestamp: atMs * NS, usageCoreNanoSeconds: { value: cpuNs }, usageNanoCores: null },
    memory: { timestamp: atMs * NS, workingSetBytes: { value: ws }, availableBytes: null, usageBytes: { value: ws }, rssBytes: null, pageFaults: null, majorPageFaults: null },
    writableLayer: null,
    swap: null,
  };
}

function fakeRuntime(state: { cpu: number }) {
  const calls: string[] = [];
  const rt: StatsRuntime = {
    async listPodSandbox(f) {
      calls.push('ListPodSandbox');
      expect(f).toEqual({ state: 'SANDBOX_READY' });
      return [sandbox('s1', 'web', T0)];
    },
    async listContainers(f) {
      calls.push('ListContainers');
      expect(f).toEqual({ state: 'CONTAINER_RUNNING' });
      return [container('c1', 's1', 'app'), container('c2', 's1', 'side')];
    },
    async listContainerStats() {
      calls.push('ListContainerStats');
      // c3 is an exited container the runtime still reports: not live, not shown.
      return [cstats('c1', state.cpu, 1000, T0 + 500), cstats('c2', 2e9, 24, T0 + 500), cstats('c3', 9e9, 9, T0)];
    },
    async listPodSandboxStats() {
      calls.push('ListPodSandboxStats');
      throw new NodeletError('INTERNAL', 'cgroupPath is empty');
    },
  };
  return { rt, calls };
}

const host: HostReader = {
  async read(p) {
    const files: Record<string, string> = {
      '/proc/stat': 'cpu  100 0 100 800 0 0 0 0 0 0\nbtime 1600000000\n',
      '/proc/meminfo': 'MemTotal:       1000 kB\nMemAvailable:    400 kB\nSwapTotal:       100 kB\nSwapFree:         60 kB\n',
      '/proc/sys/kernel/pid_max': '32768\n',
      '/proc/loadavg': '0.1 0.2 0.3 2/345 999\n',
    };
    return files[p];
  },
  async statfs() {
    return { bsize: 4096, blocks: 100, bfree: 40, bavail: 30, files: 50, ffree: 20 };
  },
};

describe('stats provider', () => {
  it('builds the Summary from the CRI and host reads: node from /proc, pod usage as the sum of its live containers', async () => {
    const clock = new VirtualClock(T0 + 1000);
    const { rt } = fakeRuntime({ cpu: 1e9 });
    const stats = new StatsProvider({ runtime: rt, nodeName: 'n1', rootDir: '/r', clock, host });
    const { summary } = await stats.get();
    expect(summary.node).toEqual({
      nodeName: 'n1',
      startTime: '2020-09-13T12:26:40Z',
      cpu: { time: '2023-11-14T22:13:21Z', usageCoreNanoSeconds: 2e9 },
      memory: { time: '2023-11-14T22:13:21Z', availableBytes: 400 * 1024, usageBytes: 600 * 1024, workingSetBytes: 600 * 1024 },
      swap: { time: '2023-11-14T22:13:21Z', swapAvailableBytes: 60 * 1024, swapUsageBytes: 40 * 1024 },
      fs: { time: '2023-11-14T22:13:21Z', availableBytes: 30 * 4096, capacityBytes: 100 * 4096, usedBytes: 60 * 4096, inodesFree: 20, inodes: 50, inodesUsed: 30 },
      rlimit: { time: '2023-11-14T22:13:21Z', maxpid: 32768, curproc: 345 },
    });
    expect(summary.pods).toHaveLength(1);
    const pod = summary.pods[0]!;
    expect(pod.podRef).toEqual({ name: 'web', namespace: 'default', uid: 'uid-web' });
    expect(pod.containers.map((c) => c.name)).toEqual(['app', 'side']);
    expect(pod.cpu?.usageCoreNanoSeconds).toBe(3e9);
    expect(pod.memory?.workingSetBytes).toBe(1024);
  });

  it('serves scrapes within maxAgeMs from one collection, and computes node usageNanoCores across collections', async () => {
    const clock = new VirtualClock(T0);
    const state = { cpu: 1e9 };
    const { rt, calls } = fakeRuntime(state);
    const reads = { n: 0 };
    let busy = 1000;
    const h: HostReader = {
      ...host,
      async read(p) {
        if (p === '/proc/stat') {
          reads.n++;
          return `cpu  ${busy} 0 0 800 0 0 0 0\n`;
        }
        return host.read(p);
      },
    };
    const stats = new StatsProvider({ runtime: rt, nodeName: 'n1', rootDir: '/r', clock, host: h, maxAgeMs: 2000 });
    const [a, b] = await Promise.all([stats.get(), stats.get()]);
    expect(a).toBe(b);
    await clock.advance(1500);
    expect(await stats.get()).toBe(a);
    expect(calls.filter((c) => c === 'ListContainerStats')).toHaveLength(1);
    // ListPodSandboxStats failed once: not asked again for a minute.
    await clock.advance(1000);
    busy += 100; // 1 s of CPU (100 jiffies) over 2.5 s
    const c = await stats.get();
    expect(c).not.toBe(a);
    expect(calls.filter((x) => x === 'ListContainerStats')).toHaveLength(2);
    expect(calls.filter((x) => x === 'ListPodSandboxStats')).toHaveLength(1);
    expect(c.summary.node.cpu?.usageNanoCores).toBe(400_000_000);
    expect(reads.n).toBe(2);
  });

  it('a runtime that fails rejects the collection, and the next get tries again', async () => {
    const clock = new VirtualClock(T0);
    const { rt } = fakeRuntime({ cpu: 1 });
    let down = true;
    const flaky: StatsRuntime = { ...rt, listContainers: (f) => (down ? Promise.reject(new NodeletError('UNAVAILABLE', 'gone')) : rt.listContainers(f)) };
    const stats = new StatsProvider({ runtime: flaky, nodeName: 'n1', rootDir: '/r', clock, host });
    await expect(stats.get()).rejects.toThrow('gone');
    down = false;
    expect((await stats.get()).summary.pods).toHaveLength(1);
  });
});

describe('/metrics/resource', () => {
  it('renders live containers and pods with the read time of each sample; resource_scrape_error 1 on a failed read', async () => {
    const clock = new VirtualClock(T0 + 1000);
    const { rt } = fakeRuntime({ cpu: 1.5e9 });
    const snap = await new StatsProvider({ runtime: rt, nodeName: 'n1', rootDir: '/r', clock, host }).get();
    const text = renderResourceMetrics(snap);
    expect(text).toContain(`container_cpu_usage_seconds_total{container="app",pod="web",namespace="default"} 1.5 ${T0 + 500}`);
    expect(text).toContain(`container_memory_working_set_bytes{container="side",pod="web",namespace="default"} 24 ${T0 + 500}`);
    expect(text).toContain(`container_start_time_seconds{container="app",pod="web",namespace="default"} ${T0 / 1000}\n`);
    expect(text).toContain(`pod_cpu_usage_seconds_total{pod="web",namespace="default"} 3.5 ${T0 + 500}`);
    expect(text).toContain(`node_memory_working_set_bytes ${600 * 1024} ${T0 + 1000}`);
    expect(text).not.toContain('c3');
    expect(text).toContain('resource_scrape_error 0');
    const failed = renderResourceMetrics(undefined);
    expect(failed).toContain('resource_scrape_error 1');
    expect(failed).toContain('scrape_error 1');
    expect(failed).not.toMatch(/^container_cpu_usage_seconds_total\{/m);
  });
});

describe('authorization of the observability routes', () => {
  it('maps /metrics* to nodes/metrics, /stats* to nodes/stats, /configz and /pods to nodes/proxy', () => {
    const sub = (p: string) => requestAttributes('GET', p, 'n1').map((a) => `${a.verb} ${a.resource}/${a.subresource}`);
    expect(sub('/metrics')).toEqual(['get nodes/metrics']);
    expect(sub('/metrics/resource')).toEqual(['get nodes/metrics']);
    expect(sub('/stats/summary')).toEqual(['get nodes/stats']);
    expect(sub('/configz')).toEqual(['get nodes/proxy']);
    expect(sub('/pods')).toEqual(['get nodes/proxy']);
  });
});
