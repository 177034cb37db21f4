/**
 * The host checks a node agent owns: swap, kernel features, cgroups, the cgroup driver.
 * Pure: the facts are gathered at the edge (host-facts.ts) and passed in; the result is a
 * table, one row per check, that `nodelet doctor` prints and the daemon logs at start.
 *
 * Verdicts:
 * - `fail`: the daemon refuses to start (exit 1, before the lock). Only where the kubelet
 *   refuses: swap on with `failSwapOn: true`; cgroup v1 with `failCgroupV1: true`.
 * - `warn`: logged as a warning at start; the spec's table of minimum kernel versions
 *   (`Minimum ... versions for node features`) only ever recommends.
 * - `ok`.
 *
 * Called once per start (and by `nodelet doctor`); idempotent, no IO, no clock.
 */
import type { CgroupDriver, SwapBehavior } from '../config/types.js';

export type Verdict = 'ok' | 'warn' | 'fail';

export interface HostCheckResult {
  /** Stable name: `swap`, `kernel-version`, `sysctl net.ipv4.tcp_fin_timeout`, `cgroup-version`, ... */
  check: string;
  required: string;
  found: string;
  verdict: Verdict;
  /** What to do about it; '' when nothing. */
  action: string;
}

/** What the cgroup hierarchy looks like (libcontainer's IsCgroup2UnifiedMode: /sys/fs/cgroup is a cgroup2 mount). */
export interface CgroupFacts {
  /** 2: unified (/sys/fs/cgroup is cgroup2); 1: legacy or hybrid (v1 controllers, maybe a controller-less cgroup2 at unified/). */
  version: 1 | 2 | undefined;
  hybrid: boolean;
  /** cgroup v2: /sys/fs/cgroup/cpu.stat exists (root-level cpu.stat, kernel 5.8). */
  rootCpuStat: boolean;
  /** v1: the freezer controller is mounted; v2: cgroup.freeze exists in a non-root cgroup. */
  freezer: boolean;
  /** The swap controller the kubelet looks for: v1 memory.memsw.limit_in_bytes, v2 memory.swap.max in nodelet's own cgroup. */
  swapController: boolean;
}

/** What the runtime said about its cgroup driver (CRI RuntimeConfig, gate KubeletCgroupDriverFromCRI). */
export type RuntimeDriverFact =
  | { kind: 'answered'; driver: CgroupDriver }
  /** The runtime does not implement RuntimeConfig (containerd before 1.7 / 2.0). */
  | { kind: 'unimplemented'; message: string }
  /** The runtime did not answer (down, refused): the config's driver is used. */
  | { kind: 'unreachable'; message: string }
  /** Not asked (unit tests, or no runtime given). */
  | { kind: 'not-asked' };

export interface HostFacts {
  /** os.release(): `6.1.0-18-amd64`. */
  kernelRelease: string;
  /** The file read for swap (/proc/swaps), for messages. */
  swapsFile: string;
  /** Its content; undefined when it does not exist (the kubelet assumes swap off). */
  swaps: string | undefined;
  /** A read error other than "does not exist". */
  swapsError?: string;
  /** From /proc/meminfo (bytes); undefined when unreadable. */
  memTotalBytes?: number;
  swapTotalBytes?: number;
  /** /proc/sys/<dotted name as path> exists, per sysctl name. */
  sysctls: Readonly<Record<string, boolean>>;
  cgroup: CgroupFacts;
  /** /proc/pressure/cpu is readable (PSI built in and enabled). */
  psi: boolean;
  /** The nf_tables kernel module is present (/sys/module/nf_tables). */
  nfTables: boolean;
  /** `nft --version` of the nft tool on PATH (`1.0.6`); undefined when there is none. */
  nftVersion?: string;
  runtimeDriver: RuntimeDriverFact;
}

/** The configuration fields the checks read. */
export interface HostCheckConfig {
  failSwapOn: boolean;
  memorySwap: { swapBehavior?: SwapBehavior };
  cgroupDriver: CgroupDriver;
  failCgroupV1: boolean;
}

/** `6.18.44-fc-v769` -> [6, 18, 44]; undefined when it does not start with `major.minor`. */
export function parseKernelVersion(release: string): [number, number, number] | undefined {
  const m = /^(\d+)\.(\d+)(?:\.(\d+))?/.exec(release.trim());
  if (!m) return undefined;
  return [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
}

function atLeast(v: readonly number[], min: readonly number[]): boolean {
  for (let i = 0; i < Math.max(v.length, min.length); i++) {
    const a = v[i] ?? 0;
    const b = min[i] ?? 0;
    if (a !== b) return a > b;
  }
  return true;
}

/** The swap devices /proc/swaps lists: every non-empty line after the header (the kubelet's isSwapOnAccordingToProcSwaps). */
export function swapEntries(procSwaps: string): string[] {
  const lines = procSwaps.split('\n').map((l) => l.trim()).filter((l) => l !== '');
  return lines.filter((l, i) => !(i === 0 && /^Filename\s/.test(l)));
}

/** The cgroup driver nodelet uses: the runtime's when it answered, else the config's (the kubelet's fallback). */
export function effectiveCgroupDriver(facts: Pick<HostFacts, 'runtimeDriver'>, config: Pick<HostCheckConfig, 'cgroupDriver'>): CgroupDriver {
  return facts.runtimeDriver.kind === 'answered' ? facts.runtimeDriver.driver : config.cgroupDriver;
}

/**
 * The spec's minimum kernel versions for node features (Limits). Each row: the feature, the
 * version, and how the fact is seen on this host (undefined: the version alone decides).
 */
interface KernelFeature {
  check: string;
  feature: string;
  min: [number, number];
  /** Whether the host shows the feature; undefined when nothing but the version says. */
  present?: (f: HostFacts) => boolean | undefined;
  /** Shown with the kernel version. */
  detail?: (f: HostFacts) => string;
  action: string;
}

const sysctlRow = (check: string, names: string[], min: [number, number], release: string, extra = ''): KernelFeature => ({
  check,
  feature: `pod sysctl${names.length > 1 ? 's' : ''} ${names.join(', ')}${release ? ` (release ${release})` : ''}${extra}`,
  min,
  present: (f) => names.every((n) => f.sysctls[n] === true),
  detail: (f) => names.map((n) => `${n} ${f.sysctls[n] ? 'present' : 'absent'}`).join(', '),
  action: `pods setting ${names.join(', ')} need kernel ${min.join('.')}+ (namespaced there)`,
});

export const KERNEL_FEATURES: readonly KernelFeature[] = [
  sysctlRow('sysctl ip_local_reserved_ports', ['net.ipv4.ip_local_reserved_ports'], [3, 16], '1.27'),
  sysctlRow('sysctl tcp_keepalive_*', ['net.ipv4.tcp_keepalive_time', 'net.ipv4.tcp_keepalive_intvl', 'net.ipv4.tcp_keepalive_probes'], [4, 5], '1.29'),
  sysctlRow('sysctl tcp_fin_timeout', ['net.ipv4.tcp_fin_timeout'], [4, 6], '1.29'),
  sysctlRow('sysctl tcp_syncookies', ['net.ipv4.tcp_syncookies'], [4, 6], '', ', namespaced from 4.6'),
  sysctlRow('sysctl tcp_rmem/tcp_wmem', ['net.ipv4.tcp_rmem', 'net.ipv4.tcp_wmem'], [4, 15], '1.32'),
  {
    check: 'sysctl vs.conn_reuse_mode',
    feature: 'sysctl net.ipv4.vs.conn_reuse_mode (ipvs proxy mode)',
    min: [4, 1],
    // Present only while ip_vs is loaded: its absence says nothing about the kernel.
    detail: (f) => `net.ipv4.vs.conn_reuse_mode ${f.sysctls['net.ipv4.vs.conn_reuse_mode'] ? 'present' : 'absent (ip_vs not loaded)'}`,
    action: 'the ipvs proxy mode needs kernel 4.1+',
  },
  {
    check: 'nftables',
    feature: 'nftables proxy mode (release 1.35)',
    min: [5, 13],
    // nf_tables loads on demand, so its absence says little; an nft tool older than 1.0.1 does.
    present: (f) => {
      const v = f.nftVersion === undefined ? undefined : parseKernelVersion(f.nftVersion);
      return v !== undefined && !atLeast(v, [1, 0, 1]) ? false : undefined;
    },
    detail: (f) => `nf_tables module ${f.nfTables ? 'loaded' : 'not loaded'}, nft tool ${f.nftVersion ?? 'not found'}`,
    action: 'the nftables proxy mode needs kernel 5.13+ and the nft tool 1.0.1+ (testing only: down to 5.4 with nftables.skipKernelVersionCheck)',
  },
  {
    check: 'cgroup root cpu.stat',
    feature: 'root-level cpu.stat in cgroups',
    min: [5, 8],
    present: (f) => (f.cgroup.version === 2 ? f.cgroup.rootCpuStat : undefined),
    detail: (f) => (f.cgroup.version === 2 ? `/sys/fs/cgroup/cpu.stat ${f.cgroup.rootCpuStat ? 'present' : 'absent'}` : 'cgroup v1: node CPU usage from cpuacct'),
    action: 'node CPU usage on cgroup v2 needs kernel 5.8+',
  },
  {
    check: 'freezer',
    feature: 'freezer support needed by the OCI runtime',
    min: [5, 2],
    present: (f) => f.cgroup.freezer,
    detail: (f) => `freezer ${f.cgroup.freezer ? 'present' : 'absent'}`,
    action: 'kernels below 5.2 are not recommended (the OCI runtime needs the freezer to pause and kill reliably)',
  },
  {
    check: 'psi',
    feature: 'pressure stall information',
    min: [4, 20],
    present: (f) => f.psi,
    detail: (f) => `/proc/pressure ${f.psi ? 'readable' : 'absent or disabled'}`,
    action: 'PSI needs kernel 4.20+ built with CONFIG_PSI=y; boot with psi=1 if it is built but disabled',
  },
  {
    check: 'mount_setattr',
    feature: 'recursive read-only mounts (mount_setattr)',
    min: [5, 12],
    action: 'recursive read-only mounts (recursiveReadOnly) need kernel 5.12+',
  },
];

function swapChecks(f: HostFacts, c: HostCheckConfig): HostCheckResult[] {
  const behavior = c.memorySwap.swapBehavior || 'NoSwap';
  const rows: HostCheckResult[] = [];
  const required = c.failSwapOn ? 'swap off (failSwapOn: true)' : `swap allowed (failSwapOn: false), ${behavior}`;
  if (f.swapsError !== undefined) {
    rows.push({
      check: 'swap',
      required,
      found: `cannot read ${f.swapsFile}: ${f.swapsError}`,
      verdict: c.failSwapOn ? 'fail' : 'warn',
      action: `make ${f.swapsFile} readable${c.failSwapOn ? ', or set failSwapOn: false to start regardless' : ''}`,
    });
    return rows;
  }
  const entries = f.swaps === undefined ? [] : swapEntries(f.swaps);
  const found = f.swaps === undefined ? `${f.swapsFile} does not exist: swap assumed off` : entries.length ? `swap on: ${entries.map((e) => e.split(/\s+/)[0]).join(', ')}` : 'swap off';
  if (entries.length && c.failSwapOn) {
    rows.push({
      check: 'swap',
      required,
      found,
      verdict: 'fail',
      action: 'running with swap on is not supported: disable swap (swapoff -a, and remove it from /etc/fstab), or set failSwapOn: false (--fail-swap-on=false) in the configuration to allow it (memorySwap.swapBehavior NoSwap or LimitedSwap)',
    });
    return rows;
  }
  let verdict: Verdict = 'ok';
  let action = '';
  if (entries.length && !f.cgroup.swapController) {
    verdict = 'warn';
    action = 'the swap cgroup controller is not available (cgroup v1: boot with swapaccount=1): containers are not kept from swap';
  } else if (entries.length && behavior === 'LimitedSwap' && f.cgroup.version !== 2) {
    verdict = 'warn';
    action = 'LimitedSwap needs cgroup v2: on cgroup v1 containers get no swap (NoSwap), as with the kubelet';
  }
  rows.push({ check: 'swap', required, found, verdict, action });
  return rows;
}

function cgroupChecks(f: HostFacts, c: HostCheckConfig): HostCheckResult[] {
  const rows: HostCheckResult[] = [];
  const v = f.cgroup.version;
  const found = v === 2 ? 'cgroup v2 (unified)' : v === 1 ? (f.cgroup.hybrid ? 'cgroup v1 (hybrid: v1 controllers, controller-less cgroup2 at unified/)' : 'cgroup v1') : 'unknown (/sys/fs/cgroup not readable)';
  if (v === 1 && c.failCgroupV1) {
    rows.push({
      check: 'cgroup-version',
      required: 'cgroup v2 (failCgroupV1: true)',
      found,
      verdict: 'fail',
      action: 'nodelet is configured not to run on a host using cgroup v1 (failCgroupV1: true): boot with systemd.unified_cgroup_hierarchy=1, or set failCgroupV1: false',
    });
  } else {
    rows.push({
      check: 'cgroup-version',
      required: 'cgroup v2 recommended',
      found,
      verdict: v === 2 ? 'ok' : 'warn',
      action: v === 2 ? '' : v === 1 ? 'cgroup v1 support is in maintenance mode, please migrate to cgroup v2' : 'mount cgroupfs at /sys/fs/cgroup',
    });
  }
  const d = f.runtimeDriver;
  const required = `the runtime's cgroup driver (CRI RuntimeConfig), else cgroupDriver: ${c.cgroupDriver}`;
  switch (d.kind) {
    case 'answered':
      rows.push({
        check: 'cgroup-driver',
        required,
        found: `runtime: ${d.driver}`,
        verdict: d.driver === c.cgroupDriver ? 'ok' : 'warn',
        action: d.driver === c.cgroupDriver ? '' : `cgroupDriver ${c.cgroupDriver} in the configuration is ignored: the runtime's ${d.driver} is used`,
      });
      break;
    case 'unimplemented':
      rows.push({
        check: 'cgroup-driver',
        required,
        found: `runtime does not implement RuntimeConfig; using cgroupDriver ${c.cgroupDriver} from the configuration`,
        verdict: 'warn',
        action: 'update the runtime to one that implements CRI RuntimeConfig (containerd 2.0+, CRI-O 1.28+); until then keep cgroupDriver equal to the runtime\'s',
      });
      break;
    case 'unreachable':
      rows.push({
        check: 'cgroup-driver',
        required,
        found: `runtime did not answer (${d.message}); using cgroupDriver ${c.cgroupDriver} from the configuration`,
        verdict: 'warn',
        action: 'start the container runtime (containerRuntimeEndpoint)',
      });
      break;
    case 'not-asked':
      rows.push({ check: 'cgroup-driver', required, found: `not asked; cgroupDriver ${c.cgroupDriver} from the configuration`, verdict: 'ok', action: '' });
      break;
  }
  return rows;
}

function kernelChecks(f: HostFacts): HostCheckResult[] {
  const version = parseKernelVersion(f.kernelRelease);
  const rows: HostCheckResult[] = [];
  if (!version) {
    rows.push({ check: 'kernel-version', required: 'a Linux release such as 6.1.0', found: JSON.stringify(f.kernelRelease), verdict: 'warn', action: 'the kernel version cannot be read: the minimum-version checks are skipped' });
    return rows;
  }
  rows.push({ check: 'kernel-version', required: 'see the rows below (distributions backport features)', found: f.kernelRelease, verdict: 'ok', action: '' });
  for (const k of KERNEL_FEATURES) {
    const versionOk = atLeast(version, k.min);
    const present = k.present?.(f);
    const found = `${f.kernelRelease}${k.detail ? `; ${k.detail(f)}` : ''}`;
    // The version alone may not decide (backports): a feature seen on the host is ok.
    const ok = present === true || (present === undefined && versionOk);
    rows.push({ check: k.check, required: `${k.feature}: kernel ${k.min.join('.')}+`, found, verdict: ok ? 'ok' : 'warn', action: ok ? '' : k.action });
  }
  return rows;
}

/** Every host check, in a stable order: swap, cgroups, kernel. */
export function runHostChecks(facts: HostFacts, config: HostCheckConfig): HostCheckResult[] {
  return [...swapChecks(facts, config), ...cgroupChecks(facts, config), ...kernelChecks(facts)];
}

/** The rows that stop the daemon. */
export function refusals(results: readonly HostCheckResult[]): HostCheckResult[] {
  return results.filter((r) => r.verdict === 'fail');
}

/** The table `nodelet doctor` prints: aligned columns, one row per check. */
export function renderHostChecks(results: readonly HostCheckResult[]): string {
  const header = ['CHECK', 'REQUIRED', 'FOUND', 'VERDICT', 'WHAT TO DO'];
  const rows = results.map((r) => [r.check, r.required, r.found, r.verdict.toUpperCase(), r.action || '-']);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  // The last column is not padded (no trailing blanks).
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join('  ');
  return [line(header), ...rows.map(line)].join('\n') + '\n';
}
