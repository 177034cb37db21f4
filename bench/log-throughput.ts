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
 * nodelet's CPU (utime + stime from /proc) around each request. Then the decoder alone
 * (decodeCpu), on those logs and on one of 40-byte lines, against its baseline.
 *
 * The built daemon runs standalone on the test CRI server (log-bench.ts: no runtime writes
 * the log, the benchmark writes it where the runtime would, in a podLogsDir of its own).
 *
 * Run: `npm run build && node dist/bench/log-throughput.js [rounds=3] [--quick]`. Prints its
 * section; writes it to BENCHMARKS.md (replacing the last) unless --quick.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { LOG_READ } from '../src/server/container-logs.js';
import { shebangNodeFlags } from '../test/helpers/nodelet.js';
import { benchArgs, cpuMs, machine, median, NODELET_MAIN } from './agent.js';
import { rawTlsServer, startLogBench } from './log-bench.js';
import { writeSection } from './sections.js';

const MB = 1e6;
/** The issue's bar: a 200 MB log read at 100 MB/s or more (non-follow). */
const TARGET_MB_S = 100;
/** Decoding alone (the decoder of src/runtime/cri-log.ts in-process), on short lines and on long ones. */
const TARGET_DECODE_MB_S = 250;
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

/** The built CRI log decoder, next to this file's build (dist/bench). */
const CRI_LOG_JS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'src', 'runtime', 'cri-log.js');

/**
 * The decoder alone, in a child under nodelet's V8 flags (or V8's defaults, `jit`): CPU ms
 * to turn `file` into what a client gets (CriLogLines, LOG_READ bytes a push), against its
 * baseline in the same process: the same reads, each chunk only copied into a new buffer
 * (the least a decoder that hands out a buffer of its own per chunk does). The file is read
 * once before, so both read from the page cache.
 */
function decodeCpu(file: string, jit: boolean): Promise<{ copyMs: number; decodeMs: number; outBytes: number }> {
  const src = [
    "import fs from 'node:fs';",
    `const { CriLogLines } = await import(${JSON.stringify(CRI_LOG_JS)});`,
    `const file = ${JSON.stringify(file)}; const buf = Buffer.allocUnsafe(${LOG_READ});`,
    'const pass = (each) => { const fd = fs.openSync(file, "r"); const c0 = process.cpuUsage(); for (let n; (n = fs.readSync(fd, buf, 0, buf.length, null)) > 0; ) each(buf.subarray(0, n)); const c = process.cpuUsage(c0); fs.closeSync(fd); return (c.user + c.system) / 1000; };',
    'pass(() => {});',
    'let outBytes = 0;',
    'const copyMs = pass((b) => { const o = Buffer.allocUnsafe(b.length); o.set(b); outBytes += o.length; });',
    'const lines = new CriLogLines({ timestamps: false }); outBytes = 0;',
    'const decodeMs = pass((b) => { outBytes += lines.push(b).length; });',
    'outBytes += lines.finish().length;',
    'console.log(JSON.stringify({ copyMs, decodeMs, outBytes }));',
  ].join('\n');
  const flags = jit ? [] : shebangNodeFlags(NODELET_MAIN);
  const child = spawn(process.execPath, [...flags, '--input-type=module', '-e', src], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as { copyMs: number; decodeMs: number; outBytes: number }) : reject(new Error(`decoder child exited with ${code}`))));
  });
}

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const rounds = quick ? 1 : Math.max(1, nums[0] ?? 3);
  const logMb = quick ? 4 : 200;
  // The benchmark's logs are not rotated under it.
  const bench = await startLogBench('nodelet-bench-log-throughput-', { containerLogMaxSize: '100Gi' });
  const { dir, nodelet, live, url } = bench;
  let raw: { port: number; child: ChildProcess } | undefined;
  try {
    // Each log is written aside, then renamed to the container's live log for its turn.
    const logs: LogFile[] = [
      { label: '~100-byte records', text: 64 },
      { label: '16 KiB records', text: 16 * 1024 - 48 },
    ].map(({ label, text }, i) => {
      const file = path.join(dir, `log-${i}.log`);
      return { label, file, ...writeLog(file, logMb, text) };
    });
    raw = await rawTlsServer(path.join(bench.pki, 'kubelet.crt'), path.join(bench.pki, 'kubelet.key'), path.dirname(live));
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
    // The decoder alone, under nodelet's flags and with V8's compilers (what the test runner
    // has), on 40-byte lines too (the shortest lines a chatty container writes); interleaved rounds.
    const short: LogFile = { label: '~80-byte records (40-byte lines)', file: path.join(dir, 'log-short.log'), ...writeLog(path.join(dir, 'log-short.log'), logMb, 40) };
    const decodeLogs = [short, ...logs];
    const decoded = decodeLogs.map(() => ({ copy: [] as number[], decode: [] as number[], copyJit: [] as number[], decodeJit: [] as number[] }));
    for (let round = 0; round < rounds; round++) {
      for (const [i, log] of decodeLogs.entries()) {
        const d = decoded[i]!;
        for (const jit of [false, true]) {
          const r = await decodeCpu(log.file, jit);
          if (r.outBytes !== log.outBytes) throw new Error(`decoder: ${r.outBytes} of ${log.outBytes} bytes`);
          (jit ? d.copyJit : d.copy).push(r.copyMs);
          (jit ? d.decodeJit : d.decode).push(r.decodeMs);
        }
      }
    }
    fs.rmSync(short.file);
    const perCpu = (log: LogFile, ms: number[]) => log.bytes / MB / (median(ms) / 1000);
    const decodeRows = decodeLogs.map((log, i) => {
      const d = decoded[i]!;
      return `| ${log.label} | ${perCpu(log, d.copy).toFixed(0)} | ${perCpu(log, d.decode).toFixed(0)} | ${perCpu(log, d.copyJit).toFixed(0)} | ${perCpu(log, d.decodeJit).toFixed(0)} |`;
    });
    const decodeShort = perCpu(short, decoded[0]!.decode);
    const decodeLong = perCpu(logs[1]!, decoded[2]!.decode);
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
      `Target: at least ${TARGET_MB_S} MB/s for a read of the ${(small.log.bytes / MB).toFixed(0)} MB log of short records: **${got.toFixed(1)} MB/s — ${got >= TARGET_MB_S ? 'met' : 'missed'}**. At these follow rates, a follower a rotation behind (issue 26: ${ISSUE_MB} MB) reaches its last line in ${(ISSUE_MB / rate(small.log, median(small.follow))).toFixed(1)} s on ~100-byte records and ${(ISSUE_MB / rate(large.log, median(large.follow))).toFixed(1)} s on 16 KiB ones (the issue's 1 KiB records lie between: test/integration/server/container-logs-follow.test.ts, over HTTPS to curl).`,
      `Parsing costs about ${perRecordUs.toFixed(2)} µs of CPU a record (the short records' CPU per MB over the long ones', per record): nodelet runs JavaScript in V8's interpreter only (docs/development.md, the entry point's flags), where every operation a record costs counts; with 16 KiB records that cost vanishes and what is left is TLS, the file and HTTP chunking, as for the raw server.`,
      '',
      '### The decoder alone',
      '',
      `CriLogLines (src/runtime/cri-log.ts) turning each log into what a client gets, ${LOG_READ / 1024} KiB a push, in a child process reading the file from the page cache: MB of the log per second of the child's CPU, against its baseline in the same process (the same reads, each chunk only copied into a new buffer). Under nodelet's V8 flags (what the daemon runs) and under V8's defaults (what the test runner runs: the integration test of issue 26's follower).`,
      '',
      '| log | baseline, nodelet\'s flags (MB/s) | decoder, nodelet\'s flags (MB/s) | baseline, V8 defaults (MB/s) | decoder, V8 defaults (MB/s) |',
      '|---|---|---|---|---|',
      ...decodeRows,
      '',
      `Target: at least ${TARGET_DECODE_MB_S} MB/s of decoding under nodelet's flags on short and on long lines: **${decodeShort.toFixed(0)} and ${decodeLong.toFixed(0)} MB/s — ${decodeShort >= TARGET_DECODE_MB_S && decodeLong >= TARGET_DECODE_MB_S ? 'met' : decodeLong >= TARGET_DECODE_MB_S ? 'met on long lines, missed on short ones' : 'missed'}**. A record costs a few V8 built-in calls (\`indexOf\`, \`startsWith\`, two \`DataView\` reads, one \`copyWithin\`) and some twenty bytecodes in the interpreter; on short lines that per-record cost, not the bytes, sets the rate.`,
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
    await bench.stop();
  }
}

await main();
