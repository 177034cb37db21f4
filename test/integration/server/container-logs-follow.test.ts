/**
 * A log follower (`/containerLogs/...?follow=true`, streamLogs) across rotations, in real
 * time on real files, at its default 250 ms poll: issue 26, item 3 ("a follower that fell a
 * rotation behind stops while the live file is empty").
 *
 * - one rotation behind: the live file is renamed, its writer appends 8 MiB and `DONE` to
 *   it, a new empty live file appears and nothing more is written: every line up to `DONE`
 *   comes within a second of the rotation, and the old file is closed within a second of the
 *   new file's appearance (the follower cannot know its file is finished before);
 * - two rotations behind (a client that stopped reading), the issue's case: meanwhile its
 *   file got 4 MiB more, was rotated, compressed and removed (log-rotation.ts's
 *   compressLog), and the next file (212 MB ending in `DONE`, the issue's size) was rotated
 *   too, the live file empty: once the client reads again, every line up to `DONE` comes
 *   within a second, and both old files are closed.
 *
 * "Within a second" is a second, or, when the machine is so loaded that the same reader and
 * client cannot even get through the same bytes without a rotation in a second, twice what
 * that takes (withinASecond). (Before, the file was 16 MiB and the margin three times: the CI
 * run of 120baf6 took 1,382 ms for the 16 MiB on 2 cores shared by two test lanes. With
 * 212 MB, on a 2-core machine shared with other test runs: at load average 4 to 6, `DONE`
 * came 0.97 to 1.04 s after the client read again where the plain reading took 0.78 to
 * 1.04 s, the old files closed a grace of two polls later; at load 12 to 17, 1.1 to 3.1 s.)
 *
 * - over nodelet's HTTPS port (the built daemon, `/containerLogs/...?follow=true`) to curl, as
 *   `kubectl logs -f` reads it: curl stopped (SIGSTOP) while its pod's log gets 212 MB and
 *   `DONE` and is rotated, the live file left empty: once curl runs again, every byte up to
 *   `DONE` within a second, or twice what the same file takes from a plain Node TLS server
 *   (the floor: TLS and reading the file) in the same run, and exactly the records' texts.
 *
 * Open files are read from /proc/self/fd. Output is checked line by line as it comes (the
 * sequence numbers in order, nothing lost or repeated), never kept whole.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compressLog } from '../../../src/pods/logs/log-rotation.js';
import { openLog, ROTATION_GRACE_POLLS, streamLogs } from '../../../src/server/container-logs.js';
import { rawTlsServer, startLogBench, type LogBench } from '../../../bench/log-bench.js';
import { nodeletBin } from '../../helpers/nodelet.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-follow-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const PAD = 'x'.repeat(1000);
const PAD_BYTES = Buffer.from(PAD);
const MiB = 1024 * 1024;
/** Records `from`..`from+n-1`, ~1 KiB each, as the runtime writes them. */
function bulk(from: number, n: number): Buffer {
  const lines: string[] = [];
  for (let i = from; i < from + n; i++) lines.push(`2026-11-23T06:01:00.${String(i).padStart(9, '0')}Z stdout F ${i} ${PAD}\n`);
  return Buffer.from(lines.join(''));
}
const RECORDS_PER_MIB = Math.ceil(MiB / bulk(0, 1).length);
/** The rotated file the follower of issue 26 had to catch up: 212 MB ending in `DONE`. */
const ISSUE_MB = 212;
const DONE = '2026-11-23T06:02:00Z stdout F DONE\n';

/** The files under `d` this process holds open, a removed one ending ` (deleted)`. */
function openFiles(d: string): string[] {
  const out: string[] = [];
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    let to = '';
    try {
      to = fs.readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue;
    }
    if (to.startsWith(d + path.sep)) out.push(path.basename(to));
  }
  return out.sort();
}

/**
 * A client that checks each line as it comes: `<n> <PAD>` with n = from, from + 1, ... then
 * `DONE`, then what comes `after`. It reads the bytes as they are (a line's number as a short
 * string, its PAD compared in place): a client that made strings of 212 MB of lines would
 * take longer than the follower it measures.
 */
function checkingClient(from = 0) {
  let rest: Buffer = Buffer.alloc(0);
  let next = from;
  let bad: string | undefined;
  let doneAt: number | undefined;
  const after: string[] = [];
  return {
    after,
    write(chunk: Buffer) {
      const b = rest.length > 0 ? Buffer.concat([rest, chunk]) : chunk;
      let i = 0;
      for (let nl = b.indexOf(0x0a, i); nl >= 0; i = nl + 1, nl = b.indexOf(0x0a, i)) {
        if (doneAt !== undefined) after.push(b.toString('latin1', i, nl));
        else if (nl - i === 4 && b.toString('latin1', i, nl) === 'DONE') doneAt = performance.now();
        else {
          const n = String(next);
          const pad = i + n.length + 1;
          if (nl - pad !== PAD_BYTES.length || b.toString('latin1', i, pad) !== `${n} ` || b.compare(PAD_BYTES, 0, PAD_BYTES.length, pad, nl) !== 0) {
            bad ??= `line ${JSON.stringify(b.toString('latin1', i, Math.min(nl, i + 40)))} where ${next} was expected`;
          } else next++;
        }
      }
      rest = Buffer.from(b.subarray(i));
    },
    get next() {
      return next;
    },
    get bad() {
      return bad;
    },
    get doneAt() {
      return doneAt;
    },
  };
}

/**
 * The bound for "within a second": a second, or, on a machine so loaded that the same reader
 * and client take longer for the same bytes without any rotation, twice that (`file`'s reading, its first line numbered `from`,
 * measured in the same run). A stall, the issue's fault, never ends, so either bound catches it.
 */
async function withinASecond(file: string, from: number): Promise<number> {
  const t0 = performance.now();
  const target = { file, running: () => false };
  const client = checkingClient(from);
  await streamLogs(await openLog(target, 'app'), target, { previous: false, timestamps: false, follow: false }, (b) => client.write(b), new AbortController().signal);
  expect(client.doneAt).toBeDefined();
  const baseline = performance.now() - t0;
  console.log(`the same bytes read without a rotation: ${baseline.toFixed(0)} ms`);
  return Math.max(1000, 2 * baseline);
}

async function until(cond: () => boolean, ms: number): Promise<void> {
  const end = performance.now() + ms;
  while (!cond() && performance.now() < end) await new Promise((r) => setTimeout(r, 10));
}

describe('a log follower across rotations, in real time', () => {
  it('one rotation behind: DONE within a second of the rotation, the old file closed within a second of the new empty one, nothing written after', async () => {
    const logDir = await fsp.mkdtemp(path.join(dir, 'one-'));
    const file = path.join(logDir, '0.log');
    await fsp.writeFile(file, bulk(0, 10));
    let alive = true;
    const target = { file, running: () => alive };
    const client = checkingClient();
    const ac = new AbortController();
    const following = streamLogs(await openLog(target, 'app'), target, { previous: false, timestamps: false, follow: true }, (b) => client.write(b), ac.signal);
    await until(() => client.next === 10, 2000);
    expect(client.next).toBe(10);

    // The runtime's writer keeps its descriptor across the rename, as containerd's does until ReopenContainerLog.
    const writer = await fsp.open(file, 'a');
    const rotated = `${file}.20261123-060100`;
    const t0 = performance.now();
    await fsp.rename(file, rotated);
    const n = 8 * RECORDS_PER_MIB;
    for (let i = 10; i < 10 + n; i += RECORDS_PER_MIB) await writer.write(bulk(i, Math.min(RECORDS_PER_MIB, 10 + n - i)));
    await writer.write(DONE);
    await writer.close();
    await fsp.writeFile(file, ''); // reopened: empty, and nothing more is written
    const t1 = performance.now();
    let closedAt: number | undefined;
    await until(() => {
      if (closedAt === undefined && !openFiles(logDir).includes(path.basename(rotated))) closedAt = performance.now();
      return client.doneAt !== undefined && closedAt !== undefined;
    }, 5000);
    const doneMs = client.doneAt! - t0;
    const closedMs = closedAt! - t1;
    console.log(`one rotation behind: ${n + 10} lines (8 MiB, written in ${(t1 - t0).toFixed(0)} ms), DONE ${doneMs.toFixed(0)} ms after the rotation, old file closed ${closedMs.toFixed(0)} ms after the new live file appeared`);
    expect(client.bad).toBeUndefined();
    expect(client.next).toBe(10 + n);
    const bound = await withinASecond(rotated, 0);
    expect(doneMs).toBeLessThan(bound);
    expect(closedMs).toBeLessThan(bound);
    expect(openFiles(logDir)).toEqual(['0.log']);
    alive = false;
    await following;
    expect(openFiles(logDir)).toEqual([]);
  });

  it('two rotations behind a stalled client: its file compressed and removed, the next one (212 MB ending in DONE) read, every line within a second of the client reading again', async () => {
    const logDir = await fsp.mkdtemp(path.join(dir, 'two-'));
    const file = path.join(logDir, '0.log');
    await fsp.writeFile(file, bulk(0, 10));
    let alive = true;
    const target = { file, running: () => alive };
    const client = checkingClient();
    let resume!: () => void;
    const stalled = new Promise<void>((r) => (resume = r));
    let stuck!: () => void;
    const firstWrite = new Promise<void>((r) => (stuck = r));
    const following = streamLogs(await openLog(target, 'app'), target, { previous: false, timestamps: false, follow: true }, async (b) => {
      client.write(b);
      stuck();
      await stalled; // the client reads nothing until resumed
    }, new AbortController().signal);
    await firstWrite;

    // Rotation 1: 4 MiB more, renamed, a new live file gets 212 MB and DONE.
    const a = bulk(10, 4 * RECORDS_PER_MIB);
    await fsp.appendFile(file, a);
    await fsp.rename(file, `${file}.20261123-060100`);
    const b0 = 10 + 4 * RECORDS_PER_MIB;
    const nb = Math.ceil((ISSUE_MB * 1e6) / MiB) * RECORDS_PER_MIB;
    const w = await fsp.open(file, 'wx');
    for (let i = b0; i < b0 + nb; i += RECORDS_PER_MIB) await w.write(bulk(i, Math.min(RECORDS_PER_MIB, b0 + nb - i)));
    await w.write(DONE);
    await w.close();
    // Rotation 2, as the log manager's turn: the older rotated file gzipped (the plain one removed), the live one renamed, an empty one made.
    await compressLog(`${file}.20261123-060100`);
    await fsp.rename(file, `${file}.20261123-060110`);
    await fsp.writeFile(file, '');
    expect(fs.readdirSync(logDir).sort()).toEqual(['0.log', '0.log.20261123-060100.gz', '0.log.20261123-060110']);
    // It holds a removed file: the space the issue saw held.
    expect(openFiles(logDir)).toEqual(['0.log.20261123-060100 (deleted)']);

    const t0 = performance.now();
    resume();
    let closedAt: number | undefined;
    await until(() => {
      if (closedAt === undefined && openFiles(logDir).every((n) => n === '0.log')) closedAt = performance.now();
      return client.doneAt !== undefined && closedAt !== undefined;
    }, 60_000);
    const doneMs = client.doneAt! - t0;
    const closedMs = closedAt! - t0;
    console.log(`two rotations behind: ${b0 + nb} lines (${((4 * MiB + fs.statSync(`${file}.20261123-060110`).size) / 1e6).toFixed(0)} MB in 2 files, the first gzipped meanwhile), DONE ${doneMs.toFixed(0)} ms and both old files closed ${closedMs.toFixed(0)} ms after the client read again`);
    expect(client.bad).toBeUndefined();
    expect(client.next).toBe(b0 + nb);
    const bound = await withinASecond(`${file}.20261123-060110`, b0);
    console.log(`two rotations behind: the bound was ${bound.toFixed(0)} ms`);
    expect(doneMs).toBeLessThan(bound);
    // The old file is left a grace after its end was read (the follower cannot know sooner that
    // it is finished: ROTATION_GRACE_POLLS polls at the default 250 ms), so that grace comes on
    // top. (Once 212 MB were read in ~650 ms, the 2x bound hid it; at 420-500 ms it does not:
    // CI's run of 34f3602 closed them 1,032 ms after, against 1,000.)
    expect(closedMs).toBeLessThan(bound + ROTATION_GRACE_POLLS * 250);
    expect(openFiles(logDir)).toEqual(['0.log']);

    // Still following the live file: what the container writes next comes too.
    await fsp.appendFile(file, '2026-11-23T06:03:00Z stdout F after\n');
    await until(() => client.after.length > 0, 2000);
    expect(client.after).toEqual(['after']);
    alive = false;
    await following;
    expect(openFiles(logDir)).toEqual([]);
  });
});

/** Size of `file`, 0 while it does not exist. */
function sizeOf(file: string): number {
  try {
    return fs.statSync(file).size;
  } catch {
    return 0;
  }
}

/** sha256 of a file, read as a stream. */
async function fileHash(file: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of fs.createReadStream(file)) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** curl's run time for the whole of `url` (to /dev/null), ms. */
function curlMs(url: string): Promise<number> {
  const t0 = performance.now();
  const c = spawn('curl', ['-sSk', '-o', '/dev/null', url], { stdio: 'ignore' });
  return new Promise((resolve, reject) => c.once('exit', (code) => (code === 0 ? resolve(performance.now() - t0) : reject(new Error(`curl exited with ${code}`)))));
}

describe("a log follower over nodelet's HTTPS port", () => {
  let b: LogBench | undefined;
  let curl: ChildProcess | undefined;
  let raw: { port: number; child: ChildProcess } | undefined;
  afterAll(async () => {
    curl?.kill('SIGKILL');
    raw?.child.kill();
    await b?.stop();
  });

  it('curl stopped one rotation behind: every byte up to DONE of the 212 MB rotated file within a second of curl reading again', async () => {
    b = await startLogBench('nodelet-follow-https-', {}, nodeletBin);
    const expected = createHash('sha256');
    const first = bulk(0, 10);
    for (let i = 0; i < 10; i++) expected.update(`${i} ${PAD}\n`);
    await fsp.writeFile(b.live, first);
    const out = path.join(dir, 'https.out');
    curl = spawn('curl', ['-sSkN', '-o', out, `${b.url}?follow=true`], { stdio: 'ignore' });
    const firstBytes = first.length - 10 * '2026-11-23T06:01:00.000000000Z stdout F '.length;
    await until(() => sizeOf(out) === firstBytes, 10_000);
    expect(sizeOf(out)).toBe(firstBytes);
    curl.kill('SIGSTOP');

    // The container writes 212 MB and DONE, its log is rotated (renamed, a new empty live file).
    const writer = await fsp.open(b.live, 'a');
    const n = Math.ceil((ISSUE_MB * 1e6) / MiB) * RECORDS_PER_MIB;
    let outBytes = firstBytes;
    for (let i = 10; i < 10 + n; i += RECORDS_PER_MIB) {
      const count = Math.min(RECORDS_PER_MIB, 10 + n - i);
      await writer.write(bulk(i, count));
      for (let k = i; k < i + count; k++) {
        const line = `${k} ${PAD}\n`;
        expected.update(line);
        outBytes += line.length;
      }
    }
    await writer.write(DONE);
    await writer.close();
    expected.update('DONE\n');
    outBytes += 'DONE\n'.length;
    const rotated = `${b.live}.20261123-060110`;
    await fsp.rename(b.live, rotated);
    await fsp.writeFile(b.live, '');

    const t0 = performance.now();
    curl.kill('SIGCONT');
    await until(() => sizeOf(out) >= outBytes, 60_000);
    const doneMs = performance.now() - t0;
    expect(sizeOf(out)).toBe(outBytes);
    expect(await fileHash(out)).toBe(expected.digest('hex'));

    // The floor, same run: the rotated file as it is, over TLS from a plain Node server, to curl.
    raw = await rawTlsServer(path.join(b.pki, 'kubelet.crt'), path.join(b.pki, 'kubelet.key'), path.dirname(rotated), nodeletBin);
    const rawUrl = `https://127.0.0.1:${raw.port}/${path.basename(rotated)}`;
    await curlMs(rawUrl);
    const floor = Math.min(await curlMs(rawUrl), await curlMs(rawUrl));
    const bound = Math.max(1000, 2 * floor);
    console.log(`over HTTPS to curl: ${(outBytes / 1e6).toFixed(0)} MB of texts (${(fs.statSync(rotated).size / 1e6).toFixed(0)} MB of log) up to DONE ${doneMs.toFixed(0)} ms after curl ran again; the same file from a plain Node TLS server: ${floor.toFixed(0)} ms; bound ${bound.toFixed(0)} ms`);
    expect(doneMs).toBeLessThan(bound);
  }, 180_000);
});
