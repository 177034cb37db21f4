/**
 * Boots a real systemd 252 (with journald) as PID 1 of a Debian bookworm container under
 * systemd-nspawn, for end-to-end tests of nodelet as a systemd service. PID 1 of the test
 * machines is not systemd, hence nspawn with --keep-unit, a cgroup of its own and
 * SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 (see bootBox() below for why each is needed).
 *
 * - The root filesystem is built once per machine by rootfs.sh (debootstrap, cached) and
 *   booted with --volatile=overlay: every box starts pristine and leaves nothing behind.
 * - The project is bound read-only at /opt/nodelet, the host's Node binary at /usr/bin/node.
 * - The box gets its own network namespace (loopback only) unless `hostNetwork` is asked
 *   for, so ports nodelet opens in it never meet the host's.
 * - systemd-nspawn is started from a shell that first moves itself into cgroups of its own
 *   (`/sys/fs/cgroup/{systemd,unified}/<cgroup>`): with --keep-unit nspawn creates its
 *   `payload/` and `supervisor/` cgroups inside the starter's cgroup. They are removed when
 *   the box is powered off.
 * - Commands run inside with `nsenter -t <the box's systemd> -a` (there is no machined).
 *
 * It starts and ends only its own processes, by PID. When the host lacks something (not
 * root, no systemd-nspawn, the rootfs cannot be built) bootBox rejects with the reason: the
 * tests fail, they never skip.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { constants as osConstants } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The project checkout (bound read-only into every box at BOX_PROJECT_DIR). */
export const projectRoot = findProjectRoot(path.dirname(fileURLToPath(import.meta.url)));
export const BOX_PROJECT_DIR = '/opt/nodelet';
export const rootfsScript = path.join(projectRoot, 'test/systemd/rootfs.sh');

/** The nearest ancestor with a package.json (this file runs from test/systemd or from dist/test/systemd). */
function findProjectRoot(from: string): string {
  for (let d = from; ; d = path.dirname(d)) {
    if (fs.existsSync(path.join(d, 'package.json')) && fs.existsSync(path.join(d, 'test/systemd/rootfs.sh'))) return d;
    if (d === path.dirname(d)) throw new Error(`no project root (package.json) above ${from}`);
  }
}

const BOX_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface Bind {
  /** Path on the host. */
  host: string;
  /** Path inside the box (default: the host path). */
  box?: string;
  readOnly?: boolean;
}

export interface BoxOptions {
  /** Machine name (hostname of the box); default `nodelet-<pid>-<n>`. */
  name?: string;
  /** Extra bind mounts, besides the project and /usr/bin/node. */
  binds?: Bind[];
  /** Share the host's network namespace instead of a private one with loopback only. */
  hostNetwork?: boolean;
  /** Bound on the boot, from spawn to `systemctl is-system-running` settling. Default 60 s. */
  bootTimeoutMs?: number;
}

export interface ExecOptions {
  /** Written to the command's stdin (then closed). */
  input?: string;
  /** Extra environment (the command otherwise gets only PATH, LANG and pager/colour off). */
  env?: Record<string, string>;
  /** Bound on the command; on expiry its nsenter process is killed and exec rejects. Default 30 s. */
  timeoutMs?: number;
}

export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
}

let counter = 0;
const liveBoxes = new Set<Box>();
// If the test process ends without powering a box off, take the box down with it: killing
// PID 1 of the box's PID namespace kills everything in the box. Both PIDs are ours.
process.once('exit', () => {
  for (const b of liveBoxes) b.killNow();
});

/** A booted box. Obtain with bootBox(); end with poweroff(). */
export class Box {
  /** Milliseconds from spawning systemd-nspawn to the system being up. */
  bootMs = 0;
  /** Units that failed during boot (the system is `degraded` when not empty). */
  failedUnits: string[] = [];
  #output = '';
  #exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  #exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  #systemdPid = 0;
  #poweredOff: Promise<void> | undefined;

  constructor(
    readonly name: string,
    readonly rootfs: string,
    readonly cgroups: string[],
    readonly nspawn: ChildProcess,
  ) {
    const keep = (d: Buffer) => {
      this.#output = (this.#output + d.toString('utf8')).slice(-64 * 1024);
    };
    nspawn.stdout!.on('data', keep);
    nspawn.stderr!.on('data', keep);
    this.#exited = new Promise((resolve) =>
      nspawn.on('exit', (code, signal) => {
        this.#exitInfo = { code, signal };
        resolve({ code, signal });
      }),
    );
  }

  /** PID (host view) of the box's systemd, PID 1 inside. */
  get systemdPid(): number {
    return this.#systemdPid;
  }

  /** What systemd-nspawn and the box's console printed (last 64 KiB). */
  get output(): string {
    return this.#output;
  }

  /** Runs `cmd` inside the box (all its namespaces, a clean environment). Never rejects on a non-zero exit. */
  exec(cmd: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    if (!this.#systemdPid || this.#exitInfo) return Promise.reject(new Error(`box ${this.name} is not running`));
    const env = Object.entries({ PATH: BOX_PATH, LANG: 'C.UTF-8', SYSTEMD_PAGER: '', SYSTEMD_COLORS: '0', ...opts.env }).map(([k, v]) => `${k}=${v}`);
    const args = ['-t', String(this.#systemdPid), '-a', '--', 'env', '-i', ...env, ...cmd];
    const timeoutMs = opts.timeoutMs ?? 30_000;
    return new Promise((resolve, reject) => {
      const child = spawn('nsenter', args, { stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
      child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`in box ${this.name}: ${cmd.join(' ')} did not finish within ${timeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
      }, timeoutMs);
      child.on('error', (err) => {
        clearTimeout(timer);
        reject(new Error(`in box ${this.name}: cannot run nsenter: ${err.message}`));
      });
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        resolve({ code: code ?? 128 + (signal ? (signalNumber(signal) ?? 0) : 0), stdout, stderr });
      });
      child.stdin.on('error', () => {}); // a command that exits without reading its stdin
      child.stdin.end(opts.input ?? '');
    });
  }

  /** Like exec, but rejects (with the command, exit code and both outputs) unless it exits 0; resolves stdout. */
  async run(cmd: string[], opts: ExecOptions = {}): Promise<string> {
    const r = await this.exec(cmd, opts);
    if (r.code !== 0) {
      throw new Error(`in box ${this.name}: ${cmd.join(' ')} exited ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
    }
    return r.stdout;
  }

  /** Runs a /bin/sh script inside the box; rejects unless it exits 0. Extra args are $1, $2, ... */
  sh(script: string, ...args: string[]): Promise<string> {
    return this.run(['/bin/sh', '-ec', script, 'sh', ...args]);
  }

  /** Writes a file inside the box (parents created), through the box's own view of its paths. */
  async writeFile(file: string, content: string, mode = 0o644): Promise<void> {
    if (!path.isAbsolute(file)) throw new Error(`writeFile: "${file}" is not an absolute path`);
    await this.run(['/bin/sh', '-ec', 'mkdir -p "$(dirname "$1")"; cat > "$1"; chmod "$2" "$1"', 'sh', file, mode.toString(8)], { input: content });
  }

  /** Reads a file inside the box. */
  readFile(file: string): Promise<string> {
    return this.run(['cat', '--', file]);
  }

  /**
   * `systemctl poweroff` inside, then waits for systemd-nspawn to exit (bounded); if it hangs,
   * kills our nspawn and the box's PID 1 by PID. Removes the cgroups bootBox created.
   * Idempotent. Resolves once everything is gone; rejects only if the cgroups cannot be removed.
   */
  poweroff(timeoutMs = 20_000): Promise<void> {
    this.#poweredOff ??= this.#poweroff(timeoutMs);
    return this.#poweredOff;
  }

  async #poweroff(timeoutMs: number): Promise<void> {
    if (!this.#exitInfo && this.#systemdPid) {
      // --no-block: the job is queued and the box goes down; the connection may drop mid-way.
      await this.exec(['systemctl', 'poweroff', '--no-block'], { timeoutMs: 5_000 }).catch(() => undefined);
    }
    const done = await Promise.race([this.#exited.then(() => true), delay(timeoutMs).then(() => false)]);
    if (!done) {
      this.killNow();
      await Promise.race([this.#exited, delay(5_000)]);
    }
    liveBoxes.delete(this);
    await removeCgroups(this.cgroups);
    // nspawn removes its propagation directory itself; an interrupted one leaves it.
    fs.rmSync(`/run/systemd/nspawn/propagate/${this.name}`, { recursive: true, force: true });
    if (!done) throw new Error(`box ${this.name} did not power off within ${timeoutMs} ms and was killed\noutput:\n${this.#output}`);
  }

  /** SIGKILLs our systemd-nspawn and the box's PID 1 (which takes the whole box down). Synchronous, last resort. */
  killNow(): void {
    for (const pid of [this.nspawn.pid, this.#systemdPid]) {
      if (!pid) continue;
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  }

  /** Internal: set by bootBox once the box's systemd is found. */
  setSystemdPid(pid: number): void {
    this.#systemdPid = pid;
  }

  get exitInfo(): { code: number | null; signal: NodeJS.Signals | null } | undefined {
    return this.#exitInfo;
  }

  get exited(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    return this.#exited;
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function signalNumber(sig: NodeJS.Signals): number | undefined {
  return (osConstants.signals as Record<string, number>)[sig];
}

/** Runs a host command; resolves its exit code and outputs. */
function hostRun(cmd: string, args: string[], timeoutMs: number): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${cmd}: ${err.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? 1, stdout, stderr });
    });
  });
}

/**
 * Builds the cached rootfs if needed (rootfs.sh: ~45 s once per machine, installs
 * debootstrap/systemd-container when missing) and resolves its path. Rejects with the
 * script's output when it fails.
 */
export async function ensureRootfs(): Promise<string> {
  const r = await hostRun(rootfsScript, [], 600_000);
  const dir = r.stdout.trim().split('\n').pop() ?? '';
  if (r.code !== 0 || !dir.startsWith('/')) {
    throw new Error(`test/systemd/rootfs.sh failed (exit ${r.code}): the systemd tests need a Debian bookworm rootfs.\n${r.stderr}${r.stdout}`);
  }
  return dir;
}

/** The cgroup hierarchies nspawn cares about on this host: hybrid (v1 name=systemd + unified) or pure cgroup2. */
function cgroupRoots(): string[] {
  if (fs.existsSync('/sys/fs/cgroup/cgroup.controllers')) return ['/sys/fs/cgroup'];
  const roots = ['/sys/fs/cgroup/systemd', '/sys/fs/cgroup/unified'].filter((d) => fs.existsSync(path.join(d, 'cgroup.procs')));
  if (roots.length === 0) throw new Error('no usable cgroup hierarchy: neither a cgroup2 /sys/fs/cgroup nor /sys/fs/cgroup/{systemd,unified}');
  return roots;
}

/** Removes cgroup directories depth-first (a cgroup dir is removed with rmdir once its processes are gone). */
async function removeCgroups(dirs: string[]): Promise<void> {
  const problems: string[] = [];
  for (const dir of dirs) {
    if (!fs.existsSync(dir)) continue;
    const all: string[] = [];
    const walk = (d: string) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(path.join(d, e.name));
      all.push(d);
    };
    walk(dir);
    for (const d of all) {
      // Processes of a box that was just killed may take a moment to leave their cgroup.
      for (let i = 0; ; i++) {
        try {
          fs.rmdirSync(d);
          break;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOENT') break;
          if (i >= 50) {
            problems.push(`${d}: ${(err as Error).message}`);
            break;
          }
          await delay(100);
        }
      }
    }
  }
  if (problems.length) throw new Error(`cannot remove the box's cgroups:\n${problems.join('\n')}`);
}

/** The box's systemd: the child of systemd-nspawn whose comm is `systemd`. */
function findBoxSystemd(nspawnPid: number): number | undefined {
  let children: string;
  try {
    children = fs.readFileSync(`/proc/${nspawnPid}/task/${nspawnPid}/children`, 'utf8');
  } catch {
    return undefined;
  }
  for (const pid of children.trim().split(/\s+/).filter(Boolean).map(Number)) {
    try {
      if (fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'systemd') return pid;
    } catch {
      /* gone */
    }
  }
  return undefined;
}

function requireHost(): void {
  if (process.getuid?.() !== 0) throw new Error(`the systemd tests boot a container with systemd-nspawn and must run as root (uid is ${process.getuid?.()})`);
  for (const tool of ['systemd-nspawn', 'nsenter']) {
    const found = (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':').some((d) => fs.existsSync(path.join(d, tool)));
    if (!found) throw new Error(`${tool} not found on the host: install ${tool === 'nsenter' ? 'util-linux' : 'systemd-container'}`);
  }
  if (!fs.existsSync('/usr/bin/node')) throw new Error('/usr/bin/node not found on the host: the box runs the host\'s Node from that path');
}

/**
 * Boots a box and resolves once its systemd reports `running` (or `degraded`: failedUnits
 * then lists the failed units and a warning is printed). Rejects with the reason and
 * nspawn's output when the host lacks something, the box dies, or it does not come up in time.
 */
export async function bootBox(opts: BoxOptions = {}): Promise<Box> {
  // The rootfs script installs what is missing (debootstrap, systemd-container) first.
  const rootfs = await ensureRootfs();
  requireHost();
  const name = opts.name ?? `nodelet-${process.pid}-${++counter}`;
  if (!/^[a-zA-Z0-9][a-zA-Z0-9-]{0,62}$/.test(name)) throw new Error(`bootBox: machine name "${name}" must be letters, digits and '-', at most 63 characters`);

  const cgroups = cgroupRoots().map((root) => path.join(root, `nodelet-box-${name}`));
  // A previous run that was killed may have left them (empty): start clean.
  await removeCgroups(cgroups);
  for (const cg of cgroups) fs.mkdirSync(cg);

  const binds = [{ host: '/usr/bin/node', box: '/usr/bin/node', readOnly: true }, { host: projectRoot, box: BOX_PROJECT_DIR, readOnly: true }, ...(opts.binds ?? [])];
  const nspawnArgs = [
    '--boot',
    '-D', rootfs,
    '-M', name,
    '--register=no',
    '--keep-unit',
    '--console=pipe',
    '--volatile=overlay',
    ...(opts.hostNetwork ? [] : ['--private-network']),
    ...binds.map((b) => `${b.readOnly ? '--bind-ro' : '--bind'}=${b.host}:${b.box ?? b.host}`),
  ];
  // The shell moves itself into our cgroups, then becomes systemd-nspawn (same PID).
  const script = `for cg in ${cgroups.map((c) => `'${c}'`).join(' ')}; do echo $$ > "$cg/cgroup.procs"; done; exec systemd-nspawn "$@"`;
  const started = Date.now();
  const nspawn = spawn('/bin/sh', ['-ec', script, 'sh', ...nspawnArgs], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, SYSTEMD_NSPAWN_UNIFIED_HIERARCHY: '1' },
  });
  const box = new Box(name, rootfs, cgroups, nspawn);
  liveBoxes.add(box);

  const fail = async (why: string): Promise<never> => {
    box.killNow();
    await Promise.race([box.exited, delay(5_000)]);
    liveBoxes.delete(box);
    await removeCgroups(cgroups).catch(() => undefined);
    throw new Error(`box ${name} did not boot: ${why}\nsystemd-nspawn ${nspawnArgs.join(' ')}\noutput:\n${box.output}`);
  };

  const deadline = started + (opts.bootTimeoutMs ?? 60_000);
  let state = '';
  for (;;) {
    if (box.exitInfo) return fail(`systemd-nspawn exited (code ${box.exitInfo.code}, signal ${box.exitInfo.signal})`);
    if (Date.now() > deadline) return fail(`not up within ${opts.bootTimeoutMs ?? 60_000} ms (last state: ${state || 'systemd not started'})`);
    if (!box.systemdPid) {
      const pid = findBoxSystemd(nspawn.pid!);
      if (pid) box.setSystemdPid(pid);
    }
    if (box.systemdPid) {
      const r = await box.exec(['systemctl', 'is-system-running'], { timeoutMs: 10_000 }).catch(() => undefined);
      state = r?.stdout.trim() ?? '';
      if (state === 'running' || state === 'degraded') break;
      if (state === 'maintenance' || state === 'stopping') return fail(`system state is ${state}`);
    }
    await delay(50);
  }
  box.bootMs = Date.now() - started;
  if (state === 'degraded') {
    const failed = await box.exec(['systemctl', 'list-units', '--failed', '--plain', '--no-legend', '--no-pager']);
    box.failedUnits = failed.stdout.split('\n').map((l) => l.trim().split(/\s+/)[0] ?? '').filter(Boolean);
    console.warn(`box ${name} booted degraded; failed units: ${box.failedUnits.join(', ')}`);
  }
  // Node inside is the host's binary: make sure it runs there (it needs the box's libc/libstdc++).
  const nodeCheck = await box.exec(['/usr/bin/node', '-e', 'process.stdout.write(process.version)']);
  if (nodeCheck.code !== 0 || nodeCheck.stdout !== process.version) {
    await box.poweroff().catch(() => undefined);
    throw new Error(`the host's /usr/bin/node does not run in box ${name} (exit ${nodeCheck.code}): ${nodeCheck.stdout}${nodeCheck.stderr}`);
  }
  return box;
}
