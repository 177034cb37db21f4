import { describe, expect, it } from 'vitest';
import {
  decidePressure,
  holdPressure,
  memoryAvailable,
  parseMeminfo,
  parseThresholds,
  pidObservation,
  statField,
  thresholdsMet,
  type Observations,
} from '../../../src/node/pressure.js';

const Mi = 1024 ** 2;
const Gi = 1024 ** 3;

// A node with 8 Gi of memory, a 100 Gi disk, 32768 PIDs: what each table row changes is "available".
const base: Observations = {
  'memory.available': { available: 4 * Gi, capacity: 8 * Gi },
  'nodefs.available': { available: 50 * Gi, capacity: 100 * Gi },
  'nodefs.inodesFree': { available: 5_000_000, capacity: 6_000_000 },
  'imagefs.available': { available: 50 * Gi, capacity: 100 * Gi },
  'imagefs.inodesFree': { available: 5_000_000, capacity: 6_000_000 },
  'pid.available': { available: 32_000, capacity: 32_768 },
};

const DEFAULTS = { 'memory.available': '100Mi', 'nodefs.available': '10%', 'nodefs.inodesFree': '5%', 'imagefs.available': '15%', 'imagefs.inodesFree': '5%' };

describe('parseThresholds', () => {
  it('quantities, percentages as fractions, disabled values dropped, unmeasured signals named', () => {
    expect(parseThresholds({ 'memory.available': '100Mi', 'nodefs.available': '10%', 'pid.available': '1k', 'imagefs.available': '0%', 'allocatableMemory.available': '1Gi', 'containerfs.available': '5%' })).toEqual({
      thresholds: [
        { signal: 'memory.available', quantity: 100 * Mi },
        { signal: 'nodefs.available', fraction: 0.1 },
        { signal: 'pid.available', quantity: 1000 },
      ],
      ignored: ['allocatableMemory.available', 'containerfs.available'],
    });
  });
});

describe('decidePressure', () => {
  it.each<[string, Record<string, string>, Observations, ReturnType<typeof decidePressure>]>([
    ['defaults, a healthy node', DEFAULTS, base, { MemoryPressure: false, DiskPressure: false, PIDPressure: false }],
    ['memory below the quantity', DEFAULTS, { ...base, 'memory.available': { available: 99 * Mi, capacity: 8 * Gi } }, { MemoryPressure: true, DiskPressure: false, PIDPressure: false }],
    ['memory exactly at the quantity is not below it', DEFAULTS, { ...base, 'memory.available': { available: 100 * Mi, capacity: 8 * Gi } }, { MemoryPressure: false, DiskPressure: false, PIDPressure: false }],
    ['memory as a percentage of capacity', { 'memory.available': '60%' }, base, { MemoryPressure: true, DiskPressure: false, PIDPressure: false }],
    ['nodefs below 10 % of capacity', DEFAULTS, { ...base, 'nodefs.available': { available: 9 * Gi, capacity: 100 * Gi } }, { MemoryPressure: false, DiskPressure: true, PIDPressure: false }],
    ['nodefs inodes below 5 %', DEFAULTS, { ...base, 'nodefs.inodesFree': { available: 100, capacity: 6_000_000 } }, { MemoryPressure: false, DiskPressure: true, PIDPressure: false }],
    ['imagefs alone is disk pressure too', DEFAULTS, { ...base, 'imagefs.available': { available: 14 * Gi, capacity: 100 * Gi } }, { MemoryPressure: false, DiskPressure: true, PIDPressure: false }],
    ['pid.available as a quantity above what the node has', { 'pid.available': '1M' }, base, { MemoryPressure: false, DiskPressure: false, PIDPressure: true }],
    ['pid.available as a percentage', { 'pid.available': '10%' }, { ...base, 'pid.available': { available: 3000, capacity: 32_768 } }, { MemoryPressure: false, DiskPressure: false, PIDPressure: true }],
    ['no threshold for a signal: never pressure, even unmeasured', {}, {}, { MemoryPressure: false, DiskPressure: false, PIDPressure: false }],
    ['memory not measured: undecided, the others decided', DEFAULTS, { ...base, 'memory.available': undefined }, { DiskPressure: false, PIDPressure: false }],
    ['one disk signal missing, none met: undecided', DEFAULTS, { ...base, 'imagefs.available': undefined, 'imagefs.inodesFree': undefined }, { MemoryPressure: false, PIDPressure: false }],
    ['one disk signal missing, another met: pressure', DEFAULTS, { ...base, 'imagefs.available': undefined, 'nodefs.available': { available: 1, capacity: 100 * Gi } }, { MemoryPressure: false, DiskPressure: true, PIDPressure: false }],
  ])('%s', (_name, hard, obs, want) => {
    expect(decidePressure(parseThresholds(hard).thresholds, obs)).toEqual(want);
  });

  it('names the thresholds met', () => {
    const { thresholds } = parseThresholds(DEFAULTS);
    const met = thresholdsMet(thresholds, { ...base, 'nodefs.available': { available: 1, capacity: 100 * Gi }, 'memory.available': { available: 1, capacity: 8 * Gi } });
    expect(met.map((t) => t.signal)).toEqual(['memory.available', 'nodefs.available']);
  });
});

describe('holdPressure (evictionPressureTransitionPeriod)', () => {
  it('stays under pressure until the period has passed since a threshold was last met', () => {
    const period = 300_000;
    let s = holdPressure({ MemoryPressure: true, DiskPressure: false }, {}, 1_000, period);
    expect(s.decision).toEqual({ MemoryPressure: true, DiskPressure: false });
    s = holdPressure({ MemoryPressure: false, DiskPressure: false }, s.lastMet, 1_000 + period - 1, period);
    expect(s.decision).toEqual({ MemoryPressure: true, DiskPressure: false });
    s = holdPressure({ MemoryPressure: false, DiskPressure: false }, s.lastMet, 1_000 + period, period);
    expect(s.decision).toEqual({ MemoryPressure: false, DiskPressure: false });
  });

  it('a period of 0 follows the thresholds at once; undecided stays undecided unless held', () => {
    const s = holdPressure({ MemoryPressure: true }, {}, 5, 0);
    expect(holdPressure({ MemoryPressure: false }, s.lastMet, 5, 0).decision).toEqual({ MemoryPressure: false });
    expect(holdPressure({}, s.lastMet, 6, 10).decision).toEqual({ MemoryPressure: true });
    expect(holdPressure({}, {}, 6, 10).decision).toEqual({});
  });
});

describe('signal parsing', () => {
  it('meminfo in bytes', () => {
    const m = parseMeminfo('MemTotal:       24683620 kB\nMemFree:        23514204 kB\nMemAvailable:   24123136 kB\nHugePages_Total:       0\n');
    expect(m).toEqual({ MemTotal: 24683620 * 1024, MemFree: 23514204 * 1024, MemAvailable: 24123136 * 1024, HugePages_Total: 0 });
  });

  it('memory available: capacity minus the working set (usage − inactive file), floored at 0', () => {
    const stat = 'cache 10\ninactive_file 0\ntotal_inactive_file 363278336\n';
    expect(statField(stat, 'total_inactive_file')).toBe(363278336);
    expect(statField(stat, 'total_rss')).toBeUndefined();
    expect(memoryAvailable(8 * Gi, 3 * Gi, 1 * Gi)).toEqual({ available: 6 * Gi, capacity: 8 * Gi });
    expect(memoryAvailable(1 * Gi, 3 * Gi, 0)).toEqual({ available: 0, capacity: 1 * Gi });
    expect(memoryAvailable(1 * Gi, 1, 5)).toEqual({ available: 1 * Gi, capacity: 1 * Gi });
  });

  it('PIDs: the smaller of pid_max and threads-max, minus the tasks of /proc/loadavg', () => {
    expect(pidObservation(32768, 192730, '1.62 1.98 1.79 4/146 18024\n')).toEqual({ available: 32768 - 146, capacity: 32768 });
    expect(pidObservation(4194304, 1000, '0.00 0.00 0.00 1/900 1\n')).toEqual({ available: 100, capacity: 1000 });
    expect(pidObservation(32768, undefined, 'garbage')).toBeUndefined();
  });
});
