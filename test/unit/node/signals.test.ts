import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Logger } from '../../../src/log.js';
import { silentLogger } from '../../../src/log.js';
import { PressureMonitor, SignalReader } from '../../../src/node/signals.js';

const Gi = 1024 ** 3;
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

/** A /proc and a cgroup memory dir of our own, with the numbers the test decides. */
function fixture(o: { meminfo?: string; usage?: string; stat?: string; loadavg?: string } = {}) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-signals-'));
  dirs.push(d);
  const proc = path.join(d, 'proc');
  const cg = path.join(d, 'cgroup');
  fs.mkdirSync(path.join(proc, 'sys/kernel'), { recursive: true });
  fs.mkdirSync(cg);
  fs.writeFileSync(path.join(proc, 'meminfo'), o.meminfo ?? 'MemTotal:        8388608 kB\nMemAvailable:    4194304 kB\n');
  fs.writeFileSync(path.join(proc, 'sys/kernel/pid_max'), '32768\n');
  fs.writeFileSync(path.join(proc, 'sys/kernel/threads-max'), '192730\n');
  fs.writeFileSync(path.join(proc, 'loadavg'), o.loadavg ?? '0.10 0.20 0.30 2/768 999\n');
  if (o.usage !== undefined) fs.writeFileSync(path.join(cg, 'memory.usage_in_bytes'), o.usage);
  if (o.stat !== undefined) fs.writeFileSync(path.join(cg, 'memory.stat'), o.stat);
  return { root: d, proc, cg };
}

/** Records warnings so the test can see a failing read logged once. */
function recordingLogger(): { logger: Logger; warns: string[] } {
  const warns: string[] = [];
  const base = silentLogger();
  const logger = new Proxy(base, {
    get(t, k) {
      if (k === 'warn') return (_o: unknown, msg: string) => warns.push(msg);
      if (k === 'child') return () => logger;
      return Reflect.get(t, k);
    },
  });
  return { logger, warns };
}

describe('SignalReader', () => {
  it('memory from the root cgroup (capacity − (usage − inactive file)), nodefs and imagefs by statfs, PIDs', async () => {
    const f = fixture({ usage: `${3 * Gi}\n`, stat: `cache 1\ntotal_inactive_file ${1 * Gi}\n` });
    // A fixed statfs: a shared filesystem's free space moves both ways while other work runs
    // (CI's parallel suites), so the figures are checked against numbers the test decides.
    const asked: string[] = [];
    const statfs = async (dir: string) => {
      asked.push(dir);
      return { bsize: 4096, blocks: 1_000_000, bavail: 250_000, files: 65_536, ffree: 60_000 };
    };
    const r = new SignalReader({ rootDir: f.root, procDir: f.proc, cgroupMemoryDir: f.cg, logger: silentLogger(), statfs });
    const obs = await r.observe();
    expect(obs['memory.available']).toEqual({ available: 8 * Gi - 2 * Gi, capacity: 8 * Gi });
    expect(obs['nodefs.available']).toEqual({ available: 250_000 * 4096, capacity: 1_000_000 * 4096 });
    expect(obs['nodefs.inodesFree']).toEqual({ available: 60_000, capacity: 65_536 });
    // No ImageFsInfo: the root dir's filesystem.
    expect(obs['imagefs.available']).toEqual(obs['nodefs.available']);
    expect(asked).toEqual([f.root, f.root]);
    expect(obs['pid.available']).toEqual({ available: 32768 - 768, capacity: 32768 });
  });

  it("by default the root dir's real filesystem: its size exactly, free space within it", async () => {
    const f = fixture();
    const obs = await new SignalReader({ rootDir: f.root, procDir: f.proc, cgroupMemoryDir: f.cg, logger: silentLogger() }).observe();
    const s = fs.statfsSync(f.root);
    expect(obs['nodefs.available']!.capacity).toBe(s.blocks * s.bsize);
    expect(obs['nodefs.available']!.available).toBeGreaterThan(0);
    expect(obs['nodefs.available']!.available).toBeLessThanOrEqual(s.blocks * s.bsize);
    expect(obs['nodefs.inodesFree']!.capacity).toBe(s.files);
    expect(obs['nodefs.inodesFree']!.available).toBeLessThanOrEqual(s.files);
  });

  it("without a cgroup v1 memory controller: MemAvailable; imagefs from the runtime's mountpoint", async () => {
    const f = fixture();
    const image = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-imagefs-'));
    dirs.push(image);
    const r = new SignalReader({ rootDir: f.root, procDir: f.proc, cgroupMemoryDir: f.cg, logger: silentLogger(), imageFsMountpoints: async () => [image] });
    const obs = await r.observe();
    expect(obs['memory.available']).toEqual({ available: 4 * Gi, capacity: 8 * Gi });
    expect(obs['imagefs.available']!.capacity).toBe(fs.statfsSync(image).blocks * fs.statfsSync(image).bsize);
  });

  it('a failing read leaves its signals out, logged once; the others are measured', async () => {
    const f = fixture();
    const { logger, warns } = recordingLogger();
    const r = new SignalReader({ rootDir: path.join(f.root, 'missing'), procDir: f.proc, cgroupMemoryDir: f.cg, logger });
    const a = await r.observe();
    const b = await r.observe();
    for (const obs of [a, b]) {
      expect(Object.keys(obs).sort()).toEqual(['memory.available', 'pid.available']);
    }
    expect(warns).toHaveLength(2); // nodefs and imagefs (the root dir is their fallback), once each
    expect(warns.every((w) => /cannot measure node (nodefs|imagefs) signals: .*ENOENT/.test(w))).toBe(true);
  });
});

describe('PressureMonitor', () => {
  it('a threshold above what the node has: pressure; an unreadable signal: undecided', async () => {
    let obs = { 'memory.available': { available: 4 * Gi, capacity: 8 * Gi }, 'pid.available': { available: 30_000, capacity: 32_768 } } as Awaited<ReturnType<SignalReader['observe']>>;
    const t = { now: 0 };
    const m = new PressureMonitor({
      reader: { observe: async () => obs },
      evictionHard: { 'memory.available': '5Gi', 'pid.available': '100', 'nodefs.available': '10%' },
      transitionPeriodMs: 0,
      clock: { now: () => t.now },
      logger: silentLogger(),
    });
    expect(await m.decide()).toEqual({ MemoryPressure: true, PIDPressure: false });
    expect(m.memoryThresholdBytes(8 * Gi)).toBe(5 * Gi);
    obs = { ...obs, 'memory.available': { available: 6 * Gi, capacity: 8 * Gi }, 'nodefs.available': { available: 1, capacity: 100 } };
    expect(await m.decide()).toEqual({ MemoryPressure: false, DiskPressure: true, PIDPressure: false });
  });
});
