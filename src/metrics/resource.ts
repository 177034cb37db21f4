/**
 * `/metrics/resource`, as the kubelet's resource metrics collector writes it
 * (pkg/kubelet/metrics/collectors/resource_metrics.go): node, pod and container cpu,
 * working set and swap, each usage sample with its own timestamp; container start times;
 * `resource_scrape_error` (and the deprecated `scrape_error`) 1 when the stats could not be
 * read. Only live pods (ready sandboxes) and running containers appear (stats.ts).
 */
import { renderSamples, type Sample } from './exposition.js';
import type { StatsSnapshot } from './stats.js';

const C = ['container', 'pod', 'namespace'] as const;
const P = ['pod', 'namespace'] as const;

/** The exposition body for a snapshot, or for a failed read (`snap` undefined). */
export function renderResourceMetrics(snap: StatsSnapshot | undefined): string {
  const out: string[] = [];
  const s = snap?.summary;
  const t = (o: object | undefined): number | undefined => (o && snap ? snap.timesMs.get(o) : undefined);
  const node = s?.node;
  const one = (value: number | undefined, ts: number | undefined): Sample[] => (value === undefined ? [] : [{ value, ...(ts !== undefined ? { timestampMs: ts } : {}) }]);

  renderSamples('node_cpu_usage_seconds_total', '[STABLE] Cumulative cpu time consumed by the node in core-seconds', 'counter', [], one(node?.cpu?.usageCoreNanoSeconds !== undefined ? node.cpu.usageCoreNanoSeconds / 1e9 : undefined, t(node?.cpu)), out);
  renderSamples('node_memory_working_set_bytes', '[STABLE] Current working set of the node in bytes', 'gauge', [], one(node?.memory?.workingSetBytes, t(node?.memory)), out);
  renderSamples('node_swap_usage_bytes', '[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems', 'gauge', [], one(node?.swap?.swapUsageBytes, t(node?.memory) ?? t(node?.swap)), out);

  const pods = s?.pods ?? [];
  const cStart: Sample[] = [];
  const cCpu: Sample[] = [];
  const cMem: Sample[] = [];
  const cSwap: Sample[] = [];
  const cSwapLimit: Sample[] = [];
  const pCpu: Sample[] = [];
  const pMem: Sample[] = [];
  const pSwap: Sample[] = [];
  for (const p of pods) {
    const pl = { pod: p.podRef.name, namespace: p.podRef.namespace };
    for (const c of p.containers) {
      const labels = { container: c.name, ...pl };
      const start = Date.parse(c.startTime);
      const startMs = t(c) ?? start;
      if (startMs > 0) cStart.push({ labels, value: startMs / 1000 });
      if (c.cpu?.usageCoreNanoSeconds !== undefined) cCpu.push({ labels, value: c.cpu.usageCoreNanoSeconds / 1e9, ...ts(t(c.cpu)) });
      if (c.memory?.workingSetBytes !== undefined) cMem.push({ labels, value: c.memory.workingSetBytes, ...ts(t(c.memory)) });
      if (c.swap?.swapUsageBytes !== undefined) cSwap.push({ labels, value: c.swap.swapUsageBytes, ...ts(t(c.swap)) });
      if (c.swap?.swapAvailableBytes !== undefined) cSwapLimit.push({ labels, value: c.swap.swapAvailableBytes + (c.swap.swapUsageBytes ?? 0), ...ts(t(c.swap)) });
    }
    if (p.cpu?.usageCoreNanoSeconds !== undefined) pCpu.push({ labels: pl, value: p.cpu.usageCoreNanoSeconds / 1e9, ...ts(t(p.cpu)) });
    if (p.memory?.workingSetBytes !== undefined) pMem.push({ labels: pl, value: p.memory.workingSetBytes, ...ts(t(p.memory)) });
    if (p.swap?.swapUsageBytes !== undefined) pSwap.push({ labels: pl, value: p.swap.swapUsageBytes, ...ts(t(p.swap)) });
  }
  renderSamples('container_start_time_seconds', '[STABLE] Start time of the container since unix epoch in seconds', 'gauge', C, cStart, out);
  renderSamples('container_cpu_usage_seconds_total', '[STABLE] Cumulative cpu time consumed by the container in core-seconds', 'counter', C, cCpu, out);
  renderSamples('container_memory_working_set_bytes', '[STABLE] Current working set of the container in bytes', 'gauge', C, cMem, out);
  renderSamples('container_swap_usage_bytes', '[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems', 'gauge', C, cSwap, out);
  renderSamples('container_swap_limit_bytes', '[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems', 'gauge', C, cSwapLimit, out);
  renderSamples('pod_cpu_usage_seconds_total', '[STABLE] Cumulative cpu time consumed by the pod in core-seconds', 'counter', P, pCpu, out);
  renderSamples('pod_memory_working_set_bytes', '[STABLE] Current working set of the pod in bytes', 'gauge', P, pMem, out);
  renderSamples('pod_swap_usage_bytes', '[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems', 'gauge', P, pSwap, out);
  const err = snap ? 0 : 1;
  renderSamples('scrape_error', '[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise', 'gauge', [], [{ value: err }], out);
  renderSamples('resource_scrape_error', '[STABLE] 1 if there was an error while getting container metrics, 0 otherwise', 'gauge', [], [{ value: err }], out);
  return `${out.join('\n')}\n`;
}

function ts(ms: number | undefined): { timestampMs?: number } {
  return ms !== undefined ? { timestampMs: ms } : {};
}
