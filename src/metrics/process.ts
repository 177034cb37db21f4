/**
 * Process and Node.js runtime metrics, read at scrape time: the client_golang process
 * collector's names (`process_*`, what every Prometheus dashboard for a daemon reads) and
 * prom-client's `nodejs_*` names for what Go's `go_*` families show about the kubelet.
 *
 * Linux only (/proc/self); a file that cannot be read leaves its family without a sample.
 */
import fs from 'node:fs';
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

/** The event-loop delays since the previous scrape (the health check's EventLoopDelay: one sampler for both). */
export interface LoopDelaySource {
  take(): { maxSeconds: number; p99Seconds: number };
}

/**
 * Registers the process_* and nodejs_* families. The nodejs_eventloop_lag_* pair only with
 * `loopDelay` (no sampler of its own: a second delay histogram woke the process 50 times a second).
 */
export function registerProcessMetrics(reg: Registry, startTimeMs = Date.now() - process.uptime() * 1000, loopDelay?: LoopDelaySource): void {
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
  if (loopDelay) {
    // One take() per scrape serves both families: the max family (registered first) takes, the p99 one reads what it took.
    let taken = { maxSeconds: 0, p99Seconds: 0 };
    reg.register(
      new Collected('nodejs_eventloop_lag_max_seconds', 'The longest recorded event loop delay since the previous scrape, in seconds.', 'gauge', [], () => {
        taken = loopDelay.take();
        return one(taken.maxSeconds);
      }),
    );
    reg.register(
      new Collected('nodejs_eventloop_lag_p99_seconds', 'The 99th percentile of the recorded event loop delays since the previous scrape, in seconds.', 'gauge', [], () => one(taken.p99Seconds)),
    );
  }
  const [major, minor, patch] = process.versions.node.split('.');
  reg.register(
    new Collected('nodejs_version_info', 'Node.js version info.', 'gauge', ['version', 'major', 'minor', 'patch'], () => [
      { labels: { version: process.version, major: major ?? '', minor: minor ?? '', patch: patch ?? '' }, value: 1 },
    ]),
  );
}
