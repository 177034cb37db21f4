import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { compressLog, LINK_SWEEP_MS, ContainerLogManager, parseLogMaxSize, planLogRotation, rotationTimestamp, type LogRotationRuntime } from '../../../src/pods/logs/log-rotation.js';
import { containerLogSymlink, createLogSymlink, removeLogSymlink, removePodLogSymlinks } from '../../../src/pods/logs/log-symlinks.js';
import { NodeletError } from '../../../src/errors.js';
import { VirtualClock } from '../../helpers/clock.js';

const T0 = new Date(2026, 10, 23, 6, 0, 0).getTime(); // local time, as the suffix
const TS0 = '20261123-060000';
const limits = { maxSize: 100, maxFiles: 5 };

describe('rotationTimestamp', () => {
  it('is the kubelet\'s 20060102-150405 in local time', () => {
    expect(rotationTimestamp(T0)).toBe(TS0);
    expect(rotationTimestamp(new Date(2027, 0, 2, 3, 4, 5, 999).getTime())).toBe('20270102-030405');
  });
});

describe('parseLogMaxSize', () => {
  it.each([['10Mi', 10 * 1024 * 1024], ['64Ki', 65536], ['1G', 1e9], ['0', 0], ['-1', -1]])('%s -> %d bytes', (text, bytes) => {
    expect(parseLogMaxSize(text)).toBe(bytes);
  });
});

describe('planLogRotation', () => {
  const L = '0.log';
  it.each<[string, number, string[], typeof limits, { remove: string[]; compress: string[]; rotateTo?: string }]>([
    ['below the size: nothing', 99, ['0.log', '0.log.20261123-050000'], limits, { remove: [], compress: [] }],
    ['at the size, first rotation', 100, ['0.log'], limits, { remove: [], compress: [], rotateTo: `0.log.${TS0}` }],
    ['the previous rotated file is compressed', 150, ['0.log', '0.log.20261123-050000'], limits, { remove: [], compress: ['0.log.20261123-050000'], rotateTo: `0.log.${TS0}` }],
    [
      'steady state: the oldest goes so that maxFiles - 2 rotated stay, the newest plain one is compressed',
      150,
      ['0.log', '0.log.20261123-050000.gz', '0.log.20261123-050100.gz', '0.log.20261123-050200.gz', '0.log.20261123-050300'],
      limits,
      { remove: ['0.log.20261123-050000.gz'], compress: ['0.log.20261123-050300'], rotateTo: `0.log.${TS0}` },
    ],
    [
      'leftovers of a failed turn: temporary files and plain twins of compressed files',
      150,
      ['0.log', '0.log.20261123-050000.gz', '0.log.20261123-050000', '0.log.20261123-050100.tmp', '0.log.20261123-050100'],
      limits,
      { remove: ['0.log.20261123-050000', '0.log.20261123-050100.tmp'], compress: ['0.log.20261123-050100'], rotateTo: `0.log.${TS0}` },
    ],
    [
      'maxFiles 2: no rotated file stays but the one rotated now',
      150,
      ['0.log', '0.log.20261123-050000.gz', '0.log.20261123-050100'],
      { maxSize: 100, maxFiles: 2 },
      { remove: ['0.log.20261123-050000.gz', '0.log.20261123-050100'], compress: [], rotateTo: `0.log.${TS0}` },
    ],
    ['other files of the directory are not this log\'s', 150, ['0.log', '1.log', '1.log.20261123-050000', '10.log.20261123-050000', '0.logx'], limits, { remove: [], compress: [], rotateTo: `0.log.${TS0}` }],
    ['a second rotation within the same second waits for the next turn', 150, ['0.log', `0.log.${TS0}`], limits, { remove: [], compress: [`0.log.${TS0}`] }],
    ['a negative size turns rotation off', 1e9, ['0.log', '0.log.20261123-050000'], { maxSize: -1, maxFiles: 5 }, { remove: [], compress: [] }],
  ])('%s', (_name, size, names, lim, want) => {
    expect(planLogRotation(L, size, names, lim, T0)).toEqual(want);
  });

  it('never leaves more than maxFiles files, whatever the listing', () => {
    for (let maxFiles = 2; maxFiles <= 6; maxFiles++) {
      let names = ['0.log'];
      for (let turn = 0; turn < 10; turn++) {
        const p = planLogRotation(L, 1000, names, { maxSize: 100, maxFiles }, T0 + turn * 60_000);
        names = names.filter((n) => !p.remove.includes(n)).map((n) => (p.compress.includes(n) ? `${n}.gz` : n));
        names = [...names.filter((n) => n !== L), p.rotateTo!, L];
        expect(names.length).toBeLessThanOrEqual(maxFiles);
        expect(names.filter((n) => n !== L && !n.endsWith('.gz'))).toHaveLength(1);
      }
    }
  });
});

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-logrot-'));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

/** A runtime with one running container whose log is `file`; ReopenContainerLog makes a new empty file, or fails. */
function fakeRuntime(file: string) {
  const calls: string[] = [];
  let refuse: string | undefined;
  const rt: LogRotationRuntime & { calls: string[]; refuse(msg?: string): void } = {
    calls,
    refuse: (msg) => void (refuse = msg),
    async listContainers(filter) {
      calls.push(`list:${filter?.state ?? 'all'}`);
      // An exited container is listed too: its log is never looked at.
      return [
        { id: 'c1', state: 'CONTAINER_RUNNING' },
        { id: 'c0', state: 'CONTAINER_EXITED' },
      ] as Awaited<ReturnType<LogRotationRuntime['listContainers']>>;
    },
    async containerStatus(id) {
      calls.push(`status:${id}`);
      if (id !== 'c1') throw new NodeletError('NOT_FOUND', 'no such container');
      return { logPath: file } as Awaited<ReturnType<LogRotationRuntime['containerStatus']>>;
    },
    async reopenContainerLog(id) {
      calls.push(`reopen:${id}`);
      if (refuse) throw new NodeletError('INTERNAL', refuse);
      await fsp.writeFile(file, '', { flag: 'a' });
    },
  };
  return rt;
}

describe('ContainerLogManager', () => {
  let dir: string;
  let file: string;
  beforeEach(async () => {
    dir = await fsp.mkdtemp(path.join(root, 'c-'));
    file = path.join(dir, '0.log');
    await fsp.writeFile(file, '');
  });
  const line = (i: number) => `2026-11-23T06:00:00.000000000Z stdout F line ${String(i).padStart(4, '0')}\n`;

  it('rotates, compresses all but the newest rotated file, keeps maxFiles, and loses no line but the deleted files\'', async () => {
    const clock = new VirtualClock(T0);
    const rt = fakeRuntime(file);
    const m = new ContainerLogManager({ runtime: rt, limits: { maxSize: 200, maxFiles: 4 }, maxWorkers: 1, periodMs: 10_000, clock });
    let n = 0;
    for (let turn = 0; turn < 8; turn++) {
      // 4 records of 50 bytes: at the size.
      for (let k = 0; k < 4; k++) await fsp.appendFile(file, line(n++));
      const t = await m.syncOnce();
      expect(t.errors).toEqual([]);
      expect(t.rotated).toEqual([`${file}.${rotationTimestamp(clock.now())}`]);
      clock.t += 10_000;
      const names = (await fsp.readdir(dir)).sort();
      expect(names.length).toBeLessThanOrEqual(4);
      expect(names.filter((x) => !x.endsWith('.gz'))).toHaveLength(2); // the live file and the newest rotated one
    }
    const names = (await fsp.readdir(dir)).sort();
    expect(names).toEqual(['0.log', `0.log.${rotationTimestamp(T0 + 50_000)}.gz`, `0.log.${rotationTimestamp(T0 + 60_000)}.gz`, `0.log.${rotationTimestamp(T0 + 70_000)}`]);
    // Oldest to newest, the files hold the last lines written, each exactly once, in order.
    const text = (await Promise.all(names.slice(1).map(async (x) => {
      const b = await fsp.readFile(path.join(dir, x));
      return x.endsWith('.gz') ? gunzipSync(b).toString() : b.toString();
    }))).join('');
    expect(text).toBe(Array.from({ length: 12 }, (_, i) => line(20 + i)).join(''));
    // log_path is asked once, of the running container only; one unfiltered list per turn.
    expect(rt.calls.filter((c) => c.startsWith('status'))).toEqual(['status:c1']);
    expect(rt.calls.filter((c) => c.startsWith('list'))).toEqual(Array(8).fill('list:all'));
  });

  it('a runtime that refuses to reopen (a container that stopped meanwhile): the file is renamed back, nothing lost, retried next turn', async () => {
    const clock = new VirtualClock(T0);
    const rt = fakeRuntime(file);
    const m = new ContainerLogManager({ runtime: rt, limits: { maxSize: 100, maxFiles: 3 }, maxWorkers: 1, periodMs: 10_000, clock });
    await fsp.writeFile(file, line(1) + line(2));
    rt.refuse('container is not running');
    const t = await m.syncOnce();
    expect(t.rotated).toEqual([]);
    expect(t.errors).toEqual([expect.stringContaining('failed to reopen container log c1: container is not running')]);
    expect(await fsp.readdir(dir)).toEqual(['0.log']);
    expect(await fsp.readFile(file, 'utf8')).toBe(line(1) + line(2));
    rt.refuse(undefined);
    clock.t += 10_000;
    expect((await m.syncOnce()).rotated).toHaveLength(1);
    expect((await fsp.readdir(dir)).sort()).toEqual(['0.log', `0.log.${rotationTimestamp(clock.now())}`]);
  });

  it('a missing live log is reopened first; a negative size does nothing at all', async () => {
    const clock = new VirtualClock(T0);
    const rt = fakeRuntime(file);
    await fsp.rm(file);
    const m = new ContainerLogManager({ runtime: rt, limits: { maxSize: 100, maxFiles: 3 }, maxWorkers: 1, periodMs: 10_000, clock });
    expect((await m.syncOnce()).errors).toEqual([]);
    expect(rt.calls).toContain('reopen:c1');
    expect(fs.existsSync(file)).toBe(true);
    const off = fakeRuntime(file);
    await fsp.writeFile(file, line(1).repeat(10));
    const none = new ContainerLogManager({ runtime: off, limits: { maxSize: -1, maxFiles: 3 }, maxWorkers: 1, periodMs: 10_000, clock });
    expect(await none.syncOnce()).toEqual({ containers: 0, rotated: [], compressed: [], removed: [], errors: [] });
    expect(off.calls).toEqual([]);
  });

  it("uses the relist's list while it is at most a period old, asks ListContainers otherwise, and passes over a container removed since that list", async () => {
    const clock = new VirtualClock(T0);
    const rt = fakeRuntime(file);
    let recent: Awaited<ReturnType<LogRotationRuntime['listContainers']>> | undefined;
    const ages: number[] = [];
    rt.recentContainers = (maxAgeMs) => {
      ages.push(maxAgeMs);
      return recent;
    };
    const m = new ContainerLogManager({ runtime: rt, limits: { maxSize: 100, maxFiles: 3 }, maxWorkers: 1, periodMs: 10_000, clock });
    expect((await m.syncOnce()).containers).toBe(1);
    expect(rt.calls.filter((c) => c.startsWith('list'))).toHaveLength(1);
    // The relist listed lately: its list, no call; it asked for one at most a period old.
    recent = [
      { id: 'c1', state: 'CONTAINER_RUNNING' },
      { id: 'gone', state: 'CONTAINER_RUNNING' },
    ] as typeof recent;
    const t = await m.syncOnce();
    expect(t.containers).toBe(2);
    expect(rt.calls.filter((c) => c.startsWith('list'))).toHaveLength(1);
    expect(ages).toEqual([10_000, 10_000]);
    // "gone" was removed since that list: its status is NOT_FOUND, nothing to rotate, no error.
    expect(t.errors).toEqual([]);
    expect(rt.calls).toContain('status:gone');
  });

  it('handles at most maxWorkers containers at once', async () => {
    const clock = new VirtualClock(T0);
    let inFlight = 0;
    let most = 0;
    const ids = Array.from({ length: 6 }, (_, i) => `c${i}`);
    const rt: LogRotationRuntime = {
      listContainers: async () => ids.map((id) => ({ id, state: 'CONTAINER_RUNNING' })) as Awaited<ReturnType<LogRotationRuntime['listContainers']>>,
      async containerStatus(id) {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise((r) => setImmediate(r));
        inFlight--;
        return { logPath: path.join(dir, `${id}.log`) } as Awaited<ReturnType<LogRotationRuntime['containerStatus']>>;
      },
      reopenContainerLog: async () => {},
    };
    for (const id of ids) await fsp.writeFile(path.join(dir, `${id}.log`), 'x');
    for (const [workers, want] of [[1, 1], [2, 2]] as const) {
      most = 0;
      const t = await new ContainerLogManager({ runtime: rt, limits: { maxSize: 100, maxFiles: 3 }, maxWorkers: workers, periodMs: 10_000, clock }).syncOnce();
      expect(t.containers).toBe(6);
      expect(most).toBe(want);
    }
  });

  it('sweeps dead links as the kubelet\'s container GC, but not a running container\'s (between a rename and the reopen)', async () => {
    const clock = new VirtualClock(T0);
    const links = path.join(dir, 'links');
    await fsp.mkdir(links);
    const running = 'a'.repeat(64);
    const gone = 'b'.repeat(64);
    await fsp.symlink(path.join(dir, 'missing.log'), path.join(links, `web_ns_app-${running}.log`));
    await fsp.symlink(path.join(dir, 'missing.log'), path.join(links, `web_ns_app-${gone}.log`));
    await fsp.symlink(file, path.join(links, `web_ns_live-${gone}.log`));
    await fsp.writeFile(path.join(links, `plain_ns_app-${gone}.log`), '');
    const rt: LogRotationRuntime = {
      listContainers: async () => [{ id: running, state: 'CONTAINER_RUNNING' }] as Awaited<ReturnType<LogRotationRuntime['listContainers']>>,
      containerStatus: async () => ({ logPath: file }) as Awaited<ReturnType<LogRotationRuntime['containerStatus']>>,
      reopenContainerLog: async () => {},
    };
    const manager = new ContainerLogManager({ runtime: rt, limits: { maxSize: 100, maxFiles: 3 }, maxWorkers: 1, periodMs: 10_000, clock, linkDir: links });
    const t = await manager.syncOnce();
    expect(t.links).toEqual([path.join(links, `web_ns_app-${gone}.log`)]);
    expect((await fsp.readdir(links)).sort()).toEqual([`plain_ns_app-${gone}.log`, `web_ns_app-${running}.log`, `web_ns_live-${gone}.log`]);
    // Then once a minute (the kubelet's container GC period), not every turn.
    const dead = path.join(links, `web_ns_late-${gone}.log`);
    await fsp.symlink(path.join(dir, 'missing.log'), dead);
    await clock.advance(LINK_SWEEP_MS - 1);
    expect((await manager.syncOnce()).links).toBeUndefined();
    expect((await fsp.lstat(dead)).isSymbolicLink()).toBe(true);
    await clock.advance(1);
    expect((await manager.syncOnce()).links).toEqual([dead]);
  });

  it('compressLog streams into .gz through .tmp and refuses a link', async () => {
    const big = path.join(dir, 'big.log.20261123-050000');
    const content = Buffer.alloc(3 * 1024 * 1024, 'abcdefgh\n');
    await fsp.writeFile(big, content, { mode: 0o640 });
    await compressLog(big);
    expect(fs.existsSync(big)).toBe(false);
    expect(fs.existsSync(`${big}.tmp`)).toBe(false);
    expect(gunzipSync(await fsp.readFile(`${big}.gz`)).equals(content)).toBe(true);
    expect((await fsp.stat(`${big}.gz`)).mode & 0o777).toBe(0o640);
    const link = path.join(dir, 'link.log.20261123-050000');
    await fsp.symlink('/etc/passwd', link);
    await expect(compressLog(link)).rejects.toThrow(/ELOOP/);
    expect(fs.existsSync(`${link}.gz`)).toBe(false);
  });
});

describe('container log symlinks', () => {
  it('are named <pod>_<ns>_<container>-<id>.log, cut to 255 bytes', () => {
    expect(containerLogSymlink('/var/log/containers', 'web', 'default', 'app', 'abc123')).toBe('/var/log/containers/web_default_app-abc123.log');
    const long = containerLogSymlink('/d', 'p'.repeat(253), 'ns', 'c', 'f'.repeat(64));
    expect(path.basename(long)).toHaveLength(255);
    expect(long.endsWith('.log')).toBe(true);
  });

  it('link to the live log only when it exists; removal leaves anything but a link; a pod\'s links go with it', async () => {
    const dir = await fsp.mkdtemp(path.join(root, 'links-'));
    const logs = path.join(dir, 'pods');
    const links = path.join(dir, 'containers');
    const live = path.join(logs, 'ns_web_uid-1', 'app', '0.log');
    await fsp.mkdir(path.dirname(live), { recursive: true });
    const link = containerLogSymlink(links, 'web', 'ns', 'app', 'c1');
    expect(await createLogSymlink(link, live)).toBe(false);
    expect(fs.existsSync(links)).toBe(false);
    await fsp.writeFile(live, 'x');
    expect(await createLogSymlink(link, live)).toBe(true);
    expect(await fsp.readlink(link)).toBe(live);
    expect(await createLogSymlink(link, live)).toBe(true); // idempotent
    await removeLogSymlink(link);
    expect(fs.existsSync(link)).toBe(false);
    await removeLogSymlink(link); // already gone: fine
    const plain = path.join(links, 'other_ns_app-c9.log');
    await fsp.writeFile(plain, 'not ours');
    await removeLogSymlink(plain);
    expect(fs.existsSync(plain)).toBe(true);
    // Sweep by pod UID: only links into that pod's log directory.
    const other = path.join(logs, 'ns_db_uid-2', 'db', '0.log');
    await fsp.mkdir(path.dirname(other), { recursive: true });
    await fsp.writeFile(other, 'y');
    await createLogSymlink(link, live);
    const link2 = containerLogSymlink(links, 'db', 'ns', 'db', 'c2');
    await createLogSymlink(link2, other);
    await removePodLogSymlinks(links, logs, 'uid-1');
    expect((await fsp.readdir(links)).sort()).toEqual(['db_ns_db-c2.log', 'other_ns_app-c9.log']);
  });
});
