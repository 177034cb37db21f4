/**
 * nodelet installed in a booted box the way an operator installs it, and what an operator
 * reads back: `systemctl show`, the journal, /proc/locks.
 *
 * Installation: /usr/local/bin/nodelet is a symlink to the project's built
 * dist/nodelet/main.js, the shipped bundle (bound read-only at /opt/nodelet), systemd/nodelet.service is copied
 * UNCHANGED to /etc/systemd/system/, the configuration goes where the unit looks for it
 * (/var/lib/kubelet/config.yaml, /etc/kubernetes/kubelet.conf.d/), and test-only settings
 * (a short watchdog, quick restarts, explicit lock file) go in a drop-in, as an operator
 * overrides a unit.
 */
import fs from 'node:fs';
import path from 'node:path';
import { BOX_PROJECT_DIR, projectRoot, type Box } from './harness.js';
import { shebangNodeFlags } from '../helpers/nodelet.js';

export const SHIPPED_UNIT = 'systemd/nodelet.service';
export const BOX_UNIT_PATH = '/etc/systemd/system/nodelet.service';
export const BOX_CONFIG_PATH = '/var/lib/kubelet/config.yaml';
export const BOX_CONFIG_DIR = '/etc/kubernetes/kubelet.conf.d';
export const BOX_LOCK_FILE = '/var/run/kubelet.lock';

/** The test drop-in: what an operator would put in `systemctl edit nodelet` to test it quickly. */
export function testDropIn(extraArgs: string[] = []): string {
  return [
    '[Service]',
    'WatchdogSec=3',
    'RestartSec=1',
    `Environment="NODELET_EXTRA_ARGS=${['--lock-file=' + BOX_LOCK_FILE, ...extraArgs].join(' ')}"`,
    '',
  ].join('\n');
}

/**
 * A minimal valid standalone KubeletConfiguration (YAML), plus the given extra top-level
 * lines. Standalone (no kubeconfig), the v1beta1 defaults (webhook authentication and
 * authorization) cannot work, so it says AlwaysAllow without webhook, as config.example.yaml.
 */
export function testConfig(extraLines: string[] = []): string {
  return [
    'apiVersion: kubelet.config.k8s.io/v1beta1',
    'kind: KubeletConfiguration',
    'authentication:',
    '  webhook:',
    '    enabled: false',
    'authorization:',
    '  mode: AlwaysAllow',
    // The box's /sys/fs/cgroup is systemd-nspawn's delegated subtree, whose controllers the
    // service cannot write (cpu.weight: EACCES): the kubelet's pod cgroup hierarchy cannot be
    // made there (nodelet would log that error and run the pods without pod cgroups). The pods
    // run on the host's containerd anyway, under the host's cgroups. (Node allocatable is
    // enforced on the kubepods cgroup, so it goes too, as the kubelet requires.)
    'cgroupsPerQOS: false',
    'enforceNodeAllocatable: []',
    ...extraLines,
    '',
  ].join('\n');
}

export interface InstallOptions {
  /** Contents of /var/lib/kubelet/config.yaml; default testConfig(). */
  config?: string;
  /** Contents of /etc/systemd/system/<unit>.service.d/10-test.conf; default testDropIn(). */
  dropIn?: string;
  /** Install the shipped unit under this name (default `nodelet`), e.g. a second agent for a hand-over. */
  unitName?: string;
}

/**
 * The built entry point must exist and be executable for the symlink in /usr/local/bin to
 * work, as `npm install -g`/`npm link` make it (npm sets the bin target's mode to 0755; tsc
 * emits 0644). Throws when the project is not built.
 */
export function ensureBuiltEntryPoint(): string {
  const main = path.join(projectRoot, 'dist/nodelet/main.js');
  if (!fs.existsSync(main)) throw new Error(`${main} does not exist: run \`npm run build\` before the systemd tests`);
  shebangNodeFlags(main); // throws unless the first line lets the kernel run it with node: it is installed as /usr/local/bin/nodelet
  const mode = fs.statSync(main).mode;
  if ((mode & 0o111) !== 0o111) fs.chmodSync(main, mode | 0o755);
  return main;
}

/** Installs nodelet in the box (binary link, shipped unit, config, test drop-in) and reloads systemd. */
export async function installNodelet(box: Box, opts: InstallOptions = {}): Promise<void> {
  ensureBuiltEntryPoint();
  const unit = opts.unitName ?? 'nodelet';
  await box.sh(
    `ln -sfn "$1/dist/nodelet/main.js" /usr/local/bin/nodelet
     cp "$1/${SHIPPED_UNIT}" "/etc/systemd/system/$2.service"`,
    BOX_PROJECT_DIR,
    unit,
  );
  await box.writeFile(BOX_CONFIG_PATH, opts.config ?? testConfig());
  await box.writeFile(`/etc/systemd/system/${unit}.service.d/10-test.conf`, opts.dropIn ?? testDropIn());
  await box.run(['systemctl', 'daemon-reload']);
}

/** `systemctl show <unit> -p ...` as a record. */
export async function unitShow(box: Box, unit: string, props: string[]): Promise<Record<string, string>> {
  const out = await box.run(['systemctl', 'show', unit, ...props.flatMap((p) => ['-p', p])]);
  const rec: Record<string, string> = {};
  for (const line of out.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) rec[line.slice(0, i)] = line.slice(i + 1);
  }
  return rec;
}

/** Polls `check` every 50 ms until it returns a value other than undefined/false; rejects after timeoutMs naming `what` and the last value seen. */
export async function waitUntil<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined && v !== false) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Waits until the unit is ActiveState=active (SubState running); resolves its MainPID. */
export async function waitActive(box: Box, unit: string, timeoutMs = 15_000): Promise<number> {
  return waitUntil(
    `${unit} to be active`,
    async () => {
      const s = await unitShow(box, unit, ['ActiveState', 'SubState', 'MainPID']);
      return s.ActiveState === 'active' && s.SubState === 'running' && Number(s.MainPID) > 0 ? Number(s.MainPID) : undefined;
    },
    timeoutMs,
  );
}

/** One journal entry as `journalctl -o json --all` prints it (fields over 4 KiB included). */
export type JournalEntry = Record<string, unknown> & { MESSAGE?: unknown; PRIORITY?: string; SYSLOG_IDENTIFIER?: string; _PID?: string; __CURSOR: string };

/** Reads journal entries (after asking journald to write out what it has). */
export async function journal(box: Box, args: string[]): Promise<JournalEntry[]> {
  await box.run(['journalctl', '--sync']);
  const out = await box.run(['journalctl', '--no-pager', '-o', 'json', '--all', ...args], { timeoutMs: 30_000 });
  return out
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as JournalEntry);
}

/** MESSAGE as text (journalctl gives a byte array for non-UTF-8 or binary messages). */
export function messageText(e: JournalEntry): string {
  const m = e.MESSAGE;
  if (typeof m === 'string') return m;
  if (Array.isArray(m)) return Buffer.from(m as number[]).toString('utf8');
  return String(m);
}

/** Holders and waiters of flock(2) locks on `file`, from the box's /proc/locks (PIDs as the box sees them). */
export async function lockState(box: Box, file: string): Promise<{ holders: number[]; waiters: number[] }> {
  // stat does not open the file: probing must not look like contention to --exit-on-lock-contention.
  const inode = (await box.run(['stat', '-c', '%i', file])).trim();
  const locks = await box.readFile('/proc/locks');
  const holders: number[] = [];
  const waiters: number[] = [];
  for (const line of locks.split('\n')) {
    // "1: FLOCK  ADVISORY  WRITE 123 00:2f:4567 0 EOF" or "1: -> FLOCK  ADVISORY  WRITE 124 00:2f:4567 0 EOF"
    const m = /^\d+:\s+(->\s+)?FLOCK\s+\S+\s+\S+\s+(\d+)\s+[0-9a-f]+:[0-9a-f]+:(\d+)\s/.exec(line);
    if (!m || m[3] !== inode) continue;
    (m[1] ? waiters : holders).push(Number(m[2]));
  }
  return { holders, waiters };
}
