/**
 * Process and Node.js runtime metrics, read at scrape time: the client_golang process
 * collector's names (`process_*`, what every Prometheus dashboard for a daemon reads) and
 * prom-client's `nodejs_*` names for what Go's `go_*` families show about the kubelet.
 *
 * Linux only (/proc/self); a file that cannot be read leaves its family without a sample.
 */
import fs from 'node:fs';
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import { Collected, type Registry, type Sample } from './exposition.js';

function readOr(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

function one(value: number | undefined): Sample[] {
  return value === undefined || Number.isNaN(value) ? [] : [{ value }];
}

/** Registers the process_* and nodejs_* families; returns a stop for the event-loop monitor. */
export function registerProcessMetrics(reg: Registry, startTimeMs = Date.now() - process.uptime() * 1000): () => void {
  const loop: IntervalHistogram = monitorEventLoopDelay({ resolution: 20 });
  loop.enable();
  reg.register(
    new Collected('process_cpu_seconds_total', 'Total user and system CPU time spent in seconds.', 'counter', [], () => {
      const u = process.cpuUsage();
      return one((u.user + u.system) / 1e6);
    }),
  );
  reg.register(new Collected('process_resident_memory_bytes', 'Resident memory size in bytes.', 'gauge', [], () => one(process.memoryUsage.rss())));
  reg.register(
    new Collected('process_virtual_memory_bytes', 'Virtual memory size in bytes.', 'gauge', [], () => {
      const m = /^VmSize:\s+(\d+) kB$/m.exec(readOr('/proc/self/status') ?? '');
      return one(m ? Number(m[1]) * 1024 : undefined);
    }),
  );
  reg.register(new Collected('process_start_time_seconds', 'Start time of the process since unix epoch in seconds.', 'gauge', [], () => one(Math.round(startTimeMs / 10) / 100)));
  reg.register(
    new Collected('process_open_fds', 'Number of open file descriptors.', 'gauge', [], () => {
      try {
        return one(fs.readdirSync('/proc/self/fd').length);
      } catch {
        return [];
      }
    }),
  );
  reg.register(
    new Collected('process_max_fds', 'Maximum number of open file descriptors.', 'gauge', [], () => {
      const m = /^Max open files\s+(\d+)/m.exec(readOr('/proc/self/limits') ?? '');
      return one(m ? Number(m[1]) : undefined);
    }),
  );
  reg.register(new Collected('nodejs_heap_size_total_bytes', 'Process heap size from Node.js in bytes.', 'gauge', [], () => one(process.memoryUsage().heapTotal)));
  reg.register(new Collected('nodejs_heap_size_used_bytes', 'Process heap size used from Node.js in bytes.', 'gauge', [], () => one(process.memoryUsage().heapUsed)));
  reg.register(new Collected('nodejs_external_memory_bytes', 'Node.js external memory size in bytes.', 'gauge', [], () => one(process.memoryUsage().external)));
  reg.register(
    new Collected('nodejs_eventloop_lag_max_seconds', 'The longest recorded event loop delay since the previous scrape, in seconds.', 'gauge', [], () => {
      // Registered before the p99 family, which resets the monitor after reading it.
      return one(loop.count > 0 ? loop.max / 1e9 : 0);
    }),
  );
  reg.register(
    new Collected('nodejs_eventloop_lag_p99_seconds', 'The 99th percentile of the recorded event loop delays since the previous scrape, in seconds.', 'gauge', [], () => {
      const v = loop.count > 0 ? loop.percentile(99) / 1e9 : 0;
      loop.reset();
      return one(v);
    }),
  );
  const [major, minor, patch] = process.versions.node.split('.');
  reg.register(
    new Collected('nodejs_version_info', 'Node.js version info.', 'gauge', ['version', 'major', 'minor', 'patch'], () => [
      { labels: { version: process.version, major: major ?? '', minor: minor ?? '', patch: patch ?? '' }, value: 1 },
    ]),
  );
  return () => loop.disable();
}
