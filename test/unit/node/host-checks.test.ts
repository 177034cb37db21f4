import { describe, expect, it } from 'vitest';
import {
  effectiveCgroupDriver,
  parseKernelVersion,
  refusals,
  renderHostChecks,
  runHostChecks,
  swapEntries,
  type HostCheckConfig,
  type HostFacts,
} from '../../../src/node/host-checks.js';
import { parseMeminfo, unifiedCgroupPath } from '../../../src/node/host-facts.js';

const SWAP_ON = 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/dm-1               partition\t33554428\t0\t\t-2\n';
const SWAP_HEADER_ONLY = 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n';
const ALL_SYSCTLS = Object.fromEntries(
  ['ip_local_reserved_ports', 'tcp_keepalive_time', 'tcp_keepalive_intvl', 'tcp_keepalive_probes', 'tcp_fin_timeout', 'tcp_syncookies', 'tcp_rmem', 'tcp_wmem'].map((n) => [`net.ipv4.${n}`, true]),
);

function facts(over: Partial<HostFacts> = {}): HostFacts {
  return {
    kernelRelease: '6.1.0-18-amd64',
    swapsFile: '/proc/swaps',
    swaps: SWAP_HEADER_ONLY,
    memTotalBytes: 8 * 2 ** 30,
    swapTotalBytes: 0,
    sysctls: ALL_SYSCTLS,
    cgroup: { version: 2, hybrid: false, rootCpuStat: true, freezer: true, swapController: true },
    psi: true,
    nfTables: true,
    nftVersion: '1.0.6',
    runtimeDriver: { kind: 'answered', driver: 'systemd' },
    ...over,
  };
}
const config = (over: Partial<HostCheckConfig> = {}): HostCheckConfig => ({ failSwapOn: true, memorySwap: {}, cgroupDriver: 'systemd', failCgroupV1: false, ...over });
const row = (results: ReturnType<typeof runHostChecks>, check: string) => results.find((r) => r.check === check)!;

describe('swap', () => {
  it.each([
    ['no swap, failSwapOn', SWAP_HEADER_ONLY, config(), 'ok'],
    ['empty file', '', config(), 'ok'],
    ['file missing (assumed off)', undefined, config(), 'ok'],
    ['swap on, failSwapOn: refuses', SWAP_ON, config(), 'fail'],
    ['swap on, failSwapOn false, NoSwap', SWAP_ON, config({ failSwapOn: false }), 'ok'],
    ['swap on, failSwapOn false, LimitedSwap on v2', SWAP_ON, config({ failSwapOn: false, memorySwap: { swapBehavior: 'LimitedSwap' } }), 'ok'],
  ] as const)('%s', (_name, swaps, cfg, verdict) => {
    const results = runHostChecks(facts({ swaps }), cfg);
    expect(row(results, 'swap').verdict).toBe(verdict);
    expect(refusals(results).length > 0).toBe(verdict === 'fail');
  });

  it('the refusal says how to allow swap and names the device', () => {
    const r = row(runHostChecks(facts({ swaps: SWAP_ON }), config()), 'swap');
    expect(r.found).toBe('swap on: /dev/dm-1');
    expect(r.action).toContain('failSwapOn: false');
  });

  it('LimitedSwap on cgroup v1 warns that containers get no swap', () => {
    const r = row(runHostChecks(facts({ swaps: SWAP_ON, cgroup: { version: 1, hybrid: true, rootCpuStat: false, freezer: true, swapController: true } }), config({ failSwapOn: false, memorySwap: { swapBehavior: 'LimitedSwap' } })), 'swap');
    expect(r).toMatchObject({ verdict: 'warn', action: expect.stringContaining('NoSwap') });
  });

  it('an unreadable swap list refuses only with failSwapOn', () => {
    expect(row(runHostChecks(facts({ swaps: undefined, swapsError: 'permission denied' }), config()), 'swap').verdict).toBe('fail');
    expect(row(runHostChecks(facts({ swaps: undefined, swapsError: 'permission denied' }), config({ failSwapOn: false })), 'swap').verdict).toBe('warn');
  });

  it('swapEntries skips the header and blank lines', () => {
    expect(swapEntries(SWAP_ON + '/dev/zram0 partition 8388604 0 100\n\n')).toEqual(['/dev/dm-1               partition\t33554428\t0\t\t-2', '/dev/zram0 partition 8388604 0 100']);
    expect(swapEntries('\n\n')).toEqual([]);
  });
});

describe('cgroups', () => {
  const v1 = { version: 1 as const, hybrid: true, rootCpuStat: false, freezer: true, swapController: true };
  it.each([
    ['v2', facts(), config(), 'ok'],
    ['v1 warns (maintenance mode)', facts({ cgroup: v1 }), config(), 'warn'],
    ['v1 with failCgroupV1 refuses', facts({ cgroup: v1 }), config({ failCgroupV1: true }), 'fail'],
    ['v2 with failCgroupV1 is fine', facts(), config({ failCgroupV1: true }), 'ok'],
  ] as const)('%s', (_n, f, c, verdict) => {
    expect(row(runHostChecks(f, c), 'cgroup-version').verdict).toBe(verdict);
  });

  it('v1 uses the kubelet\'s words', () => {
    expect(row(runHostChecks(facts({ cgroup: v1 }), config()), 'cgroup-version').action).toBe('cgroup v1 support is in maintenance mode, please migrate to cgroup v2');
  });

  it.each([
    ['runtime answers the same', { kind: 'answered', driver: 'systemd' }, 'systemd', 'ok', 'systemd'],
    ['runtime answers another: it wins', { kind: 'answered', driver: 'cgroupfs' }, 'systemd', 'warn', 'cgroupfs'],
    ['Unimplemented (containerd 1.6): config fallback', { kind: 'unimplemented', message: 'x' }, 'cgroupfs', 'warn', 'cgroupfs'],
    ['runtime down: config fallback', { kind: 'unreachable', message: 'down' }, 'systemd', 'warn', 'systemd'],
  ] as const)('cgroup driver: %s', (_n, runtimeDriver, cfgDriver, verdict, effective) => {
    const f = facts({ runtimeDriver });
    const c = config({ cgroupDriver: cfgDriver });
    expect(row(runHostChecks(f, c), 'cgroup-driver').verdict).toBe(verdict);
    expect(effectiveCgroupDriver(f, c)).toBe(effective);
  });
});

describe('kernel features (the spec\'s minimum versions): warnings, never refusals', () => {
  it('a current kernel with every feature is all ok', () => {
    const results = runHostChecks(facts(), config());
    expect(results.filter((r) => r.verdict !== 'ok')).toEqual([]);
  });

  it.each([
    ['3.10.0', ['sysctl vs.conn_reuse_mode', 'nftables', 'mount_setattr']],
    ['4.19.0', ['nftables', 'mount_setattr']],
    ['5.12.0', ['nftables']],
    ['5.13.0', []],
  ])('kernel %s, where nothing but the version decides, warns about %j', (release, warned) => {
    const results = runHostChecks(facts({ kernelRelease: release }), config());
    expect(results.filter((r) => r.verdict === 'warn').map((r) => r.check).sort()).toEqual([...warned].sort());
    expect(refusals(results)).toEqual([]);
  });

  it('a feature the host does not show warns even on a new kernel', () => {
    const f = facts({ kernelRelease: '6.1.0', sysctls: {}, psi: false, cgroup: { version: 2, hybrid: false, rootCpuStat: false, freezer: false, swapController: true } });
    const warned = runHostChecks(f, config()).filter((r) => r.verdict === 'warn').map((r) => r.check);
    expect(warned.sort()).toEqual(['cgroup root cpu.stat', 'freezer', 'psi', 'sysctl ip_local_reserved_ports', 'sysctl tcp_fin_timeout', 'sysctl tcp_keepalive_*', 'sysctl tcp_rmem/tcp_wmem', 'sysctl tcp_syncookies'].sort());
  });

  it('a backported feature seen on an old kernel is ok (the version alone does not decide)', () => {
    const results = runHostChecks(facts({ kernelRelease: '4.18.0-553.el8' }), config());
    expect(row(results, 'psi').verdict).toBe('ok');
    expect(row(results, 'freezer').verdict).toBe('ok');
    expect(row(results, 'mount_setattr').verdict).toBe('warn');
  });

  it('an nft tool older than 1.0.1 warns', () => {
    expect(row(runHostChecks(facts({ nftVersion: '0.9.8' }), config()), 'nftables').verdict).toBe('warn');
  });

  it('an unreadable kernel version is one warning', () => {
    const results = runHostChecks(facts({ kernelRelease: 'weird' }), config());
    expect(row(results, 'kernel-version').verdict).toBe('warn');
    expect(results.some((r) => r.check === 'psi')).toBe(false);
  });

  it.each([
    ['6.18.44-fc-v769', [6, 18, 44]],
    ['5.4', [5, 4, 0]],
    ['4.18.0-553.el8_10.x86_64', [4, 18, 0]],
    ['x', undefined],
  ] as const)('parseKernelVersion(%s)', (s, v) => expect(parseKernelVersion(s)).toEqual(v));
});

describe('rendering and facts parsing', () => {
  it('the table has a header and one line per check', () => {
    const results = runHostChecks(facts(), config());
    const lines = renderHostChecks(results).trimEnd().split('\n');
    expect(lines[0]).toMatch(/^CHECK\s+REQUIRED\s+FOUND\s+VERDICT\s+WHAT TO DO$/);
    expect(lines).toHaveLength(results.length + 1);
  });

  it('parses meminfo and the unified cgroup path', () => {
    expect(parseMeminfo('MemTotal:       16303412 kB\nSwapTotal:             0 kB\nHugePages_Total:       0\n')).toEqual({ MemTotal: 16303412 * 1024, SwapTotal: 0, HugePages_Total: 0 });
    expect(unifiedCgroupPath('12:memory:/x\n0::/system.slice/nodelet.service\n')).toBe('/system.slice/nodelet.service');
    expect(unifiedCgroupPath('12:memory:/x\n')).toBeUndefined();
  });
});
