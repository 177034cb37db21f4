/**
 * `kubectl logs` throughput through nodelet against its floor: `GET /containerLogs/...` of a
 * big CRI log over HTTPS, read by a client as fast as it can, against the same file sent
 * as it is over TLS by a minimal Node HTTPS server (`fs.createReadStream(file).pipe(res)`,
 * nodelet's certificate, nodelet's V8 flags): what TLS and reading the file cost any agent
 * before a single record is parsed. nodelet must parse every record (`<time> <stream>
 * <P|F> <text>`: time checked, P records joined, heads cut off), as the kubelet does.
 *
 * Two logs of LOG_MB each: records of ~100 bytes (what `yes`-like output makes: the cost per
 * record rules) and of 16 KiB (containerd's longest record: the cost per byte rules). For
 * each, interleaved rounds of: raw TLS; nodelet (`kubectl logs`); nodelet with
 * `?follow=true` (`kubectl logs -f` from the start, until the last line came). Rates are in
 * MB of the log file delivered per second (the output is shorter: heads are cut off);
 * nodelet's CPU (utime + stime from /proc) around each request.
 *
 * The built daemon runs standalone on the test CRI server (no runtime writes the log: the
 * benchmark writes it where the runtime would, in a podLogsDir of its own).
 *
 * Run: `npm run build && node dist/bench/log-throughput.js [rounds=3] [--quick]`. Prints its
 * section; writes it to BENCHMARKS.md (replacing the last) unless --quick.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import type { PodList } from 'kubernetes-types/core/v1.js';
import { startFakeRuntime } from '../test/cri/fake-runtime.js';
import { sleeperManifest } from '../test/helpers/fake-node.js';
import { eventually, freePort, NodeletProcess, shebangNodeFlags, tempDir, writeKubeletConfig } from '../test/helpers/nodelet.js';
import { benchArgs, cpuMs, machine, median, NODELET_MAIN } from './agent.js';
import { writeSection } from './sections.js';

const MB = 1e6;
/** The issue's bar: a 200 MB log read at 100 MB/s or more (non-follow). */
const TARGET_MB_S = 100;
/** What a follower a rotation behind had to catch up in issue 26. */
const ISSUE_MB = 212;

interface LogFile {
  label: string;
  file: string;
  /** Bytes of the file, and of what a client gets for it (texts and newlines). */
  bytes: number;
  outBytes: number;
  records: number;
}

/** Writes `mb` MB of F records with `text`-byte texts, 1 MB at a time; the times advance by 1 µs a record. */
function writeLog(file: string, mb: number, text: number): { bytes: number; outBytes: number; records: number } {
  const body = '0123456789abcdef'.repeat(Math.ceil(text / 16)).slice(0, text);
  const fd = fs.openSync(file, 'w');
  let bytes = 0;
  let outBytes = 0;
  let n = 0;
  try {
    while (bytes < mb * MB) {
      const parts: string[] = [];
      let size = 0;
      while (size < MB) {
        const us = n++;
        const rec = `2026-11-27T15:${String(Math.floor(us / 60e6) % 60).padStart(2, '0')}:${String(Math.floor(us / 1e6) % 60).padStart(2, '0')}.${String(us % 1e6).padStart(6, '0')}123Z stdout F ${body}\n`;
        parts.push(rec);
        size += rec.length;
        outBytes += body.length + 1;
      }
      fs.writeSync(fd, parts.join(''));
      bytes += size;
    }
  } finally {
    fs.closeSync(fd);
  }
  return { bytes, outBytes, records: n };
}

/** GETs `url` and reads the body to its end (or until `until` bytes came: then the connection is closed); seconds from the request to the last byte. */
function read(url: string, until?: number): Promise<{ seconds: number; bytes: number; status: number }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let bytes = 0;
    const req = https.get(url, { rejectUnauthorized: false, agent: false }, (res) => {
      const done = () => resolve({ seconds: (performance.now() - t0) / 1000, bytes, status: res.statusCode ?? 0 });
      res.on('data', (d: Buffer) => {
        bytes += d.length;
        if (until !== undefined && bytes >= until) {
          done();
          req.destroy();
        }
      });
      res.on('end', done);
      res.on('error', (err) => (until !== undefined && bytes >= until ? undefined : reject(err)));
    });
    req.on('error', (err) => (until !== undefined && bytes >= until ? undefined : reject(err)));
  });
}

/** The floor: a Node HTTPS server under nodelet's V8 flags answering GET /<name> with that file, piped as it is. */
async function rawTlsServer(certFile: string, keyFile: string, dir: string): Promise<{ port: number; child: ChildProcess }> {
  const port = await freePort();
  const src = [
    "import fs from 'node:fs'; import https from 'node:https'; import path from 'node:path';",
    `const dir = ${JSON.stringify(dir)};`,
    `https.createServer({ cert: fs.readFileSync(${JSON.stringify(certFile)}), key: fs.readFileSync(${JSON.stringify(keyFile)}) }, (req, res) => {`,
    "  res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' });",
    '  fs.createReadStream(path.join(dir, path.basename(req.url)), { highWaterMark: 64 * 1024 }).pipe(res);',
    `}).listen(${port}, '127.0.0.1', () => console.log('listening'));`,
  ].join('\n');
  const child = spawn(process.execPath, [...shebangNodeFlags(NODELET_MAIN), '--input-type=module', '-e', src], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`raw TLS server exited with ${code}`)));
  });
  return { port, child };
}

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const rounds = quick ? 1 : Math.max(1, nums[0] ?? 3);
  const logMb = quick ? 4 : 200;
  const cri = await startFakeRuntime();
  const dir = tempDir('nodelet-bench-log-throughput-');
  fs.mkdirSync(path.join(dir, 'manifests'));
  fs.writeFileSync(path.join(dir, 'manifests', 'app.yaml'), sleeperManifest('app', 'shop'));
  const ports = { https: await freePort(), readOnly: await freePort() };
  const config = writeKubeletConfig(dir, {
    containerRuntimeEndpoint: cri.endpoint,
    staticPodPath: path.join(dir, 'manifests'),
    podLogsDir: path.join(dir, 'logs'),
    // The benchmark's logs are not rotated under it.
    containerLogMaxSize: '100Gi',
    address: '127.0.0.1',
    port: ports.https,
    readOnlyPort: ports.readOnly,
    healthzPort: 0,
    authentication: '{anonymous: {enabled: true}, webhook: {enabled: false}}',
    authorization: '{mode: AlwaysAllow}',
  });
  const root = path.join(dir, 'root');
  const args = ['--config', config, '--root-dir', root, '--lock-file', path.join(dir, 'lock'), '--hostname-override', 'n1', '--container-log-dir', path.join(dir, 'containers')];
  const nodelet = new NodeletProcess(spawn(process.execPath, [...shebangNodeFlags(NODELET_MAIN), NODELET_MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }));
  let raw: { port: number; child: ChildProcess } | undefined;
  try {
    await nodelet.waitForMsg(/nodelet is ready/, 60_000);
    const pods = async () => ((await (await fetch(`http://127.0.0.1:${ports.readOnly}/pods`)).json()) as PodList).items;
    const pod = await eventually(async () => (await pods()).find((p) => p.status?.containerStatuses?.[0]?.state?.running), 30_000);
    const logDir = path.join(dir, 'logs', `shop_${pod.metadata!.name}_${pod.metadata!.uid}`, 'web');
    fs.mkdirSync(logDir, { recursive: true });
    const live = path.join(logDir, `${pod.status!.containerStatuses![0]!.restartCount}.log`);
    // Each log is written aside, then renamed to the container's live log for its turn.
    const logs: LogFile[] = [
      { label: '~100-byte records', text: 64 },
      { label: '16 KiB records', text: 16 * 1024 - 48 },
    ].map(({ label, text }, i) => {
      const file = path.join(dir, `log-${i}.log`);
      return { label, file, ...writeLog(file, logMb, text) };
    });
    const pki = path.join(root, 'pki');
    raw = await rawTlsServer(path.join(pki, 'kubelet.crt'), path.join(pki, 'kubelet.key'), logDir);
    const url = `https://127.0.0.1:${ports.https}/containerLogs/shop/${pod.metadata!.name}/web`;
    const results: { log: LogFile; raw: number[]; logs: number[]; follow: number[]; cpu: number[]; followCpu: number[] }[] = [];
    for (const log of logs) {
      fs.renameSync(log.file, live);
      const r = { log, raw: [] as number[], logs: [] as number[], follow: [] as number[], cpu: [] as number[], followCpu: [] as number[] };
      // Warm: one small answer each (TLS, the route, the code), so rounds measure the reads.
      await read(`${url}?tailLines=1`);
      await read(`https://127.0.0.1:${raw.port}/${path.basename(live)}`, 1);
      for (let round = 0; round < rounds; round++) {
        const b = await read(`https://127.0.0.1:${raw.port}/${path.basename(live)}`);
        if (b.bytes !== log.bytes) throw new Error(`raw TLS: ${b.bytes} of ${log.bytes} bytes`);
        r.raw.push(b.seconds);
        let c0 = cpuMs(nodelet.pid);
        const n = await read(url);
        r.cpu.push(cpuMs(nodelet.pid) - c0);
        if (n.status !== 200 || n.bytes !== log.outBytes) throw new Error(`nodelet: status ${n.status}, ${n.bytes} of ${log.outBytes} bytes`);
        r.logs.push(n.seconds);
        c0 = cpuMs(nodelet.pid);
        const f = await read(`${url}?follow=true`, log.outBytes);
        r.followCpu.push(cpuMs(nodelet.pid) - c0);
        if (f.bytes !== log.outBytes) throw new Error(`follow: ${f.bytes} of ${log.outBytes} bytes`);
        r.follow.push(f.seconds);
      }
      fs.renameSync(live, log.file);
      results.push(r);
    }
    const rate = (log: LogFile, s: number) => log.bytes / MB / s;
    const rows = results.map(({ log, raw: b, logs: n, follow: f, cpu, followCpu }) => {
      const [mb, mn, mf] = [median(b), median(n), median(f)];
      return `| ${log.label} | ${rate(log, mb).toFixed(1)} | ${rate(log, mn).toFixed(1)} | ${rate(log, mf).toFixed(1)} | ${(mn / mb).toFixed(2)}× | ${(median(cpu) / (log.bytes / MB)).toFixed(1)} / ${(median(followCpu) / (log.bytes / MB)).toFixed(1)} |`;
    });
    const [small, large] = [results[0]!, results[1]!];
    const got = rate(small.log, median(small.logs));
    // What a record costs beyond moving its bytes: the CPU per MB of the short records over that of the long ones.
    const perRecordUs = ((median(small.cpu) / (small.log.bytes / MB) - median(large.cpu) / (large.log.bytes / MB)) * 1000) / (small.log.records / (small.log.bytes / MB));
    const section = [
      '## `kubectl logs` throughput (`bench/log-throughput.ts`)',
      '',
      `Run ${new Date().toISOString()} on ${machine()}; ${rounds} round${rounds === 1 ? '' : 's'} of each, interleaved; medians. Logs of ${(small.log.bytes / MB).toFixed(0)} MB each.`,
      'Raw TLS = a Node HTTPS server under nodelet\'s V8 flags piping the log file as it is (the floor: TLS and reading the file). Through nodelet = `GET /containerLogs/<ns>/<pod>/<container>` on nodelet\'s HTTPS port (the built daemon, standalone, test CRI server): every record parsed (`<time> <stream> <P|F> <text>`, the time checked), its head cut off, P records joined; follow = `?follow=true` from the start until the last line came. A Node client reads each as fast as it can. MB/s = MB of the log file delivered per second; ratio = nodelet\'s time ÷ the raw server\'s for the same file.',
      '',
      '| log | raw TLS (MB/s) | through nodelet (MB/s) | nodelet, follow (MB/s) | ratio | nodelet CPU per MB (ms), read / follow |',
      '|---|---|---|---|---|---|',
      ...rows,
      '',
      `Target: at least ${TARGET_MB_S} MB/s for a read of the ${(small.log.bytes / MB).toFixed(0)} MB log of short records: **${got.toFixed(1)} MB/s — ${got >= TARGET_MB_S ? 'met' : 'missed'}**. At the follow rate, a follower a rotation behind (issue 26: ${ISSUE_MB} MB) reaches its last line in ${(ISSUE_MB / rate(small.log, median(small.follow))).toFixed(1)} s.`,
      `Parsing costs about ${perRecordUs.toFixed(2)} µs of CPU a record (the short records' CPU per MB over the long ones', per record): nodelet runs JavaScript in V8's interpreter only and interprets regular expressions too (docs/development.md, the entry point's flags), and a chunk's records go through one regular-expression \`replace\` there; with 16 KiB records that cost vanishes and what is left is TLS, the file and HTTP chunking, as for the raw server.`,
      '',
      'Reproduce: `npm run build && node dist/bench/log-throughput.js 3`.',
    ].join('\n');
    process.stdout.write(`${section}\n`);
    if (!quick) {
      await writeSection('log-throughput', section);
      process.stdout.write('\nwritten to BENCHMARKS.md\n');
    }
  } finally {
    raw?.child.kill();
    nodelet.kill('SIGTERM');
    await nodelet.exited;
    await cri.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
