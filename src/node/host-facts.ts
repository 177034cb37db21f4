/**
 * The edge of the host checks: gathers HostFacts from /proc, /sys, os.release(), the nft
 * tool and the runtime's CRI RuntimeConfig. Reads only (nothing written, no lock), so
 * `nodelet doctor` and the daemon's start share it. Never throws for a missing or unreadable
 * file: an absent fact is a fact (the checks decide what it means).
 *
 * Paths are injectable (`procDir`, `sysDir`, `swapsFile`) for tests. The built binary takes
 * one test-only override from the environment, `NODELET_TEST_PROC_SWAPS` (a file read
 * instead of /proc/swaps), because a machine without swap cannot otherwise show that
 * `failSwapOn: true` refuses to start; see hostFactsOptionsFromEnv().
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { errorMessage, NodeletError } from '../errors.js';
import type { KubeletConfiguration } from '../config/types.js';
import type { NodeSwap } from '../pods/cri/swap.js';
import type { CriClient } from '../runtime/cri-client.js';
import { effectiveCgroupDriver, refusals, runHostChecks, type HostCheckResult, type HostFacts, type RuntimeDriverFact } from './host-checks.js';
import { readBoundedText } from '../system/safe-file.js';
import { exists } from '../system/fs-util.js';

/** The sysctls the spec's table names. */
export const CHECKED_SYSCTLS = [
  'net.ipv4.ip_local_reserved_ports',
  'net.ipv4.tcp_keepalive_time',
  'net.ipv4.tcp_keepalive_intvl',
  'net.ipv4.tcp_keepalive_probes',
  'net.ipv4.tcp_fin_timeout',
  'net.ipv4.tcp_syncookies',
  'net.ipv4.tcp_rmem',
  'net.ipv4.tcp_wmem',
  'net.ipv4.vs.conn_reuse_mode',
] as const;

/** statfs(2) f_type of a cgroup2 mount. */
const CGROUP2_SUPER_MAGIC = 0x63677270;
/** /proc files are small; a bigger one is not what we think it is. */
const PROC_MAX_BYTES = 1024 * 1024;

export interface HostFactsOptions {
  procDir?: string;
  sysDir?: string;
  /** Default `<procDir>/swaps`. */
  swapsFile?: string;
  /** Default os.release(). */
  kernelRelease?: string;
  /** The runtime's RuntimeConfig; unset: not asked. */
  runtimeConfig?: () => Promise<{ cgroupDriver: 'systemd' | 'cgroupfs' }>;
  /** Look for `nft` on PATH and ask its version (default true). */
  probeNft?: boolean;
}

/** The test-only override of the built binary: NODELET_TEST_PROC_SWAPS=<file> is read instead of /proc/swaps. */
export function hostFactsOptionsFromEnv(env: NodeJS.ProcessEnv): Pick<HostFactsOptions, 'swapsFile'> {
  const f = env.NODELET_TEST_PROC_SWAPS;
  return f ? { swapsFile: path.resolve(f) } : {};
}

async function readText(file: string, what: string): Promise<string | undefined> {
  try {
    return await readBoundedText(file, { what, maxBytes: PROC_MAX_BYTES });
  } catch {
    return undefined;
  }
}

/** `MemTotal:  16384 kB` -> bytes, for each key asked. */
export function parseMeminfo(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^(\w+):\s+(\d+)(?:\s+kB)?\s*$/.exec(line);
    if (m) out[m[1]!] = Number(m[2]) * (line.includes('kB') ? 1024 : 1);
  }
  return out;
}

/** `0::/system.slice/nodelet.service` -> `/system.slice/nodelet.service` (the cgroup v2 path of a process). */
export function unifiedCgroupPath(procSelfCgroup: string): string | undefined {
  const line = procSelfCgroup.split('\n').find((l) => l.startsWith('0::'));
  return line === undefined ? undefined : line.slice(3).trim();
}

async function cgroupFacts(sysDir: string, procDir: string): Promise<HostFacts['cgroup']> {
  const root = path.join(sysDir, 'fs/cgroup');
  let version: 1 | 2 | undefined;
  try {
    version = (await fs.statfs(root)).type === CGROUP2_SUPER_MAGIC ? 2 : 1;
  } catch {
    version = undefined;
  }
  let hybrid = false;
  if (version === 1) {
    try {
      hybrid = (await fs.statfs(path.join(root, 'unified'))).type === CGROUP2_SUPER_MAGIC;
    } catch {
      hybrid = false;
    }
  }
  if (version === 2) {
    const own = unifiedCgroupPath((await readText(path.join(procDir, 'self/cgroup'), 'cgroup membership')) ?? '') ?? '/';
    const ownDir = path.join(root, own);
    return {
      version,
      hybrid,
      rootCpuStat: await exists(path.join(root, 'cpu.stat')),
      // cgroup.freeze exists in every non-root cgroup from 5.2; the root has none.
      freezer: (await exists(path.join(ownDir, 'cgroup.freeze'))) || (await exists(path.join(root, 'init.scope/cgroup.freeze'))),
      swapController: await exists(path.join(ownDir, 'memory.swap.max')),
    };
  }
  return {
    version,
    hybrid,
    rootCpuStat: false,
    freezer: await exists(path.join(root, 'freezer')),
    swapController: await exists(path.join(root, 'memory/memory.memsw.limit_in_bytes')),
  };
}

function nftVersion(): string | undefined {
  // Only the nft on PATH; a missing one is a fact, not an error. Bounded: 2 s.
  const r = spawnSync('nft', ['--version'], { encoding: 'utf8', timeout: 2000, stdio: ['ignore', 'pipe', 'ignore'] });
  if (r.error || r.status !== 0) return undefined;
  const m = /v?(\d+\.\d+(?:\.\d+)?)/.exec(r.stdout);
  return m?.[1];
}

async function runtimeDriver(ask: HostFactsOptions['runtimeConfig']): Promise<RuntimeDriverFact> {
  if (!ask) return { kind: 'not-asked' };
  try {
    return { kind: 'answered', driver: (await ask()).cgroupDriver };
  } catch (err) {
    if (err instanceof NodeletError && err.code === 'UNIMPLEMENTED') return { kind: 'unimplemented', message: err.message };
    return { kind: 'unreachable', message: errorMessage(err) };
  }
}

/** Reads every fact the host checks need. Read-only; never throws. */
export async function gatherHostFacts(o: HostFactsOptions = {}): Promise<HostFacts> {
  const procDir = o.procDir ?? '/proc';
  const sysDir = o.sysDir ?? '/sys';
  const swapsFile = o.swapsFile ?? path.join(procDir, 'swaps');
  let swaps: string | undefined;
  let swapsError: string | undefined;
  try {
    swaps = await readBoundedText(swapsFile, { what: 'swap list', maxBytes: PROC_MAX_BYTES });
  } catch (err) {
    // The kubelet assumes swap off when the file does not exist; any other error is reported.
    if (!(err instanceof NodeletError && err.code === 'NOT_FOUND') && (err as NodeJS.ErrnoException).code !== 'ENOENT') swapsError = errorMessage(err);
  }
  const meminfo = parseMeminfo((await readText(path.join(procDir, 'meminfo'), 'meminfo')) ?? '');
  const sysctls: Record<string, boolean> = {};
  await Promise.all(CHECKED_SYSCTLS.map(async (name) => (sysctls[name] = await exists(path.join(procDir, 'sys', ...name.split('.'))))));
  const [cgroup, psi, nfTables, driver] = await Promise.all([
    cgroupFacts(sysDir, procDir),
    readText(path.join(procDir, 'pressure/cpu'), 'pressure stall information').then((t) => t !== undefined),
    exists(path.join(sysDir, 'module/nf_tables')),
    runtimeDriver(o.runtimeConfig),
  ]);
  const nft = o.probeNft === false ? undefined : nftVersion();
  return {
    kernelRelease: o.kernelRelease ?? os.release(),
    swapsFile,
    swaps,
    ...(swapsError !== undefined ? { swapsError } : {}),
    ...(meminfo.MemTotal !== undefined ? { memTotalBytes: meminfo.MemTotal } : {}),
    ...(meminfo.SwapTotal !== undefined ? { swapTotalBytes: meminfo.SwapTotal } : {}),
    sysctls,
    cgroup,
    psi,
    nfTables,
    ...(nft !== undefined ? { nftVersion: nft } : {}),
    runtimeDriver: driver,
  };
}

// ------------------------------------------------------------------ one run of the checks

/** The configuration fields a run reads. */
export type HostRunConfig = Pick<KubeletConfiguration, 'failSwapOn' | 'memorySwap' | 'cgroupDriver' | 'failCgroupV1' | 'containerRuntimeEndpoint'>;

export interface HostCheckRun {
  facts: HostFacts;
  results: HostCheckResult[];
  /** The cgroup driver in use: the runtime's, else the config's. */
  cgroupDriver: 'systemd' | 'cgroupfs';
}

/**
 * Gathers the facts (asking the runtime for its cgroup driver with a short deadline, over a
 * client of its own that is closed after, unless `runtime: false`) and runs every check. Read-only: used by
 * `nodelet doctor` and by the daemon before it takes the lock.
 */
export async function runHostCheckPass(cfg: HostRunConfig, o: { env?: NodeJS.ProcessEnv; runtimeTimeoutMs?: number; facts?: HostFactsOptions; runtime?: boolean } = {}): Promise<HostCheckRun> {
  let cri: CriClient | undefined;
  try {
    // The CRI client (protobufjs, node:http2) loads only when the runtime is asked (start-up time: the daemon asks after /healthz answers).
    if (o.runtime !== false) cri = (await import('../runtime/cri-client.js')).createCriClient({ runtimeEndpoint: cfg.containerRuntimeEndpoint, requestTimeoutMs: o.runtimeTimeoutMs ?? 2000 });
  } catch {
    cri = undefined;
  }
  try {
    const facts = await gatherHostFacts({ ...(cri ? { runtimeConfig: () => cri!.runtimeConfig() } : {}), ...hostFactsOptionsFromEnv(o.env ?? process.env), ...o.facts });
    return { facts, results: runHostChecks(facts, cfg), cgroupDriver: effectiveCgroupDriver(facts, cfg) };
  } finally {
    cri?.close();
  }
}

/** A refusing host check stops the daemon with this error (exit 1, before the lock). */
export function hostRefusal(results: readonly HostCheckResult[]): NodeletError | undefined {
  const bad = refusals(results);
  if (!bad.length) return undefined;
  return new NodeletError('INVALID_ARGUMENT', `host check${bad.length > 1 ? 's' : ''} failed:\n${bad.map((r) => `  ${r.check}: found ${r.found}; ${r.action}`).join('\n')}`, { hostChecks: bad });
}

/** Whether an error is a host refusal (main maps it to exit 1). */
export function isHostRefusal(err: unknown): boolean {
  return err instanceof NodeletError && Array.isArray((err.details as { hostChecks?: unknown }).hostChecks);
}

/** The node's swap for container configs, from the facts and `memorySwap.swapBehavior`. */
export function nodeSwapFromFacts(facts: HostFacts, cfg: Pick<KubeletConfiguration, 'memorySwap'>): NodeSwap {
  return {
    behavior: cfg.memorySwap.swapBehavior === 'LimitedSwap' ? 'LimitedSwap' : 'NoSwap',
    cgroupV2: facts.cgroup.version === 2,
    controllerAvailable: facts.cgroup.swapController,
    memoryCapacityBytes: facts.memTotalBytes ?? os.totalmem(),
    swapCapacityBytes: facts.swapTotalBytes ?? 0,
  };
}
