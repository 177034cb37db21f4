/**
 * Polls a nodelet's /healthz every 100 ms from a process of its own, and samples the
 * nodelet's RSS there too: the test process may itself be busy (serving the CRI calls of
 * many pods, writing big files), and would add its own delays to what it measures.
 * stop() resolves with the latencies (ms; a failed or >5 s answer is -1) and RSS samples (MB).
 */
import { spawn } from 'node:child_process';

export interface HealthzSamples {
  latencies: number[];
  rssMb: number[];
}

export function startHealthzPoller(port: number, pid?: number): { stop(): Promise<HealthzSamples> } {
  const script = `
    const http = require('node:http');
    const fs = require('node:fs');
    const latencies = [], rssMb = [];
    let on = true;
    process.stdin.on('data', () => { on = false; });
    const rss = () => { try { return Number(/VmRSS:\\s+(\\d+) kB/.exec(fs.readFileSync('/proc/${pid ?? 0}/status', 'utf8'))[1]) / 1024; } catch { return undefined; } };
    (async () => {
      while (on) {
        const next = new Promise((r) => setTimeout(r, 100));
        if (${pid ?? 0}) { const r = rss(); if (r !== undefined) rssMb.push(r); }
        const t0 = performance.now();
        await new Promise((resolve) => {
          const req = http.get({ host: '127.0.0.1', port: ${port}, path: '/healthz', timeout: 5000 }, (res) => {
            res.resume();
            res.on('end', () => { latencies.push(res.statusCode === 200 ? performance.now() - t0 : -1); resolve(); });
          });
          req.on('timeout', () => req.destroy(new Error('timeout')));
          req.on('error', () => { latencies.push(-1); resolve(); });
        });
        await next;
      }
      process.stdout.write(JSON.stringify({ latencies, rssMb }));
    })();`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout!.on('data', (d) => (stdout += d));
  const done = new Promise<HealthzSamples>((resolve) => child.on('exit', () => resolve(JSON.parse(stdout || '{"latencies":[],"rssMb":[]}') as HealthzSamples)));
  return {
    stop() {
      child.stdin!.end('stop\n');
      return done;
    },
  };
}
