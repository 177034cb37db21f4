/**
 * (b') Runtime faults on real containerd: the built nodelet, standalone, with static pods
 * (hostNetwork busybox sleepers) on a containerd of this file's own
 * (scripts/containerd.sh, base dir /var/lib/nodelet-dev/containerd-faults), with
 * `runtimeRequestTimeout: 2s`. Faults, while a pod is added and one removed through the
 * manifest folder:
 * - kill: containerd SIGKILLed (its shims stay, with the containers), down for 30 s in the
 *   full profile (until nodelet has said so, at least 2 s, in the short one), then started
 *   again with the same config, state and root;
 * - socket: the socket path removed under the running containerd, then containerd stopped
 *   (SIGTERM): while it is down the path does not exist at all (ENOENT, not ECONNREFUSED);
 *   started again, it binds a new socket on the path;
 * - hang: containerd frozen (SIGSTOP) past the call deadline (at least 2x, full 3x,
 *   runtimeRequestTimeout, and until nodelet has said so), then SIGCONT: the calls in
 *   flight and those sent meanwhile reach it late.
 * Every fault lasts until nodelet has logged the runtime not ready. The hostile answers
 * (RESOURCE_EXHAUSTED, UNAVAILABLE for a while) cannot be had from containerd: they stay in
 * runtime-faults.test.ts, on the test CRI server.
 * After each fault: nodelet has the same PID, /healthz answered 200 all along (polled from
 * another process), nodelet logged the runtime not ready and then ready, every desired pod
 * has exactly one ready sandbox and one running container, no sandbox of a removed pod is
 * left, and the pods nobody changed kept their container IDs (the shims outlived
 * containerd: nothing was restarted), and no containerd-shim-runc-v2 of this containerd
 * is left for a sandbox nodelet removed (checked again after the sequence, once the pods
 * added during the faults are removed too: one shim per stable pod, none other). Convergence: from containerd answering again to that
 * state with the runtime logged ready. Short profile (CI): one kill and one hang; full: six
 * faults (kill, socket and hang twice each, seeded order), the first kill 30 s long.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCriClient, type CriClient } from '../../src/runtime/cri-client.js';
import { ensureContainerd, stopContainerd } from '../helpers/containerd.js';
import { sleeperManifest } from '../helpers/fake-node.js';
import { startHealthzPoller } from '../helpers/healthz-poller.js';
import { eventually, freePort, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from '../helpers/nodelet.js';
import { pick, procUsage, rng, SEED, Tally } from './report.js';

/**
 * This file's containerd: it kills, freezes and restarts it, so nothing else may use it.
 * NODELET_FAULTS_CONTAINERD_DIR names another base dir (a second run beside CI's).
 */
const CONTAINERD_DIR = process.env.NODELET_FAULTS_CONTAINERD_DIR ?? '/var/lib/nodelet-dev/containerd-faults';
const PIDFILE = path.join(CONTAINERD_DIR, 'containerd.pid');
const SOCKET = path.join(CONTAINERD_DIR, 'containerd.sock');
const CALL_TIMEOUT_MS = 2_000;
/** How long containerd stays killed: 30 s in the full profile; in the short one only until nodelet has said so. */
const KILL_DOWN_MS = pick(2_000, 30_000);
/** Other faults last this long at least (and until nodelet has logged the runtime not ready). */
const WINDOW_MS = { min: pick(0, 3_000), max: pick(0, 8_000) };
const HANG_MIN_MS = pick(2, 3) * CALL_TIMEOUT_MS;
const STABLE = ['s0', 's1', 's2'];
const NODE = 'n1';

type Kind = 'kill' | 'socket' | 'hang';

const tally = new Tally('containerd-faults');
let dir: string;
let manifests: string;
let nodelet: NodeletProcess | undefined;
let cri: CriClient;
let healthzPort: number;
let poller: ReturnType<typeof startHealthzPoller> | undefined;
/** A containerd this file froze and has not thawed yet (so afterAll can thaw it). */
let frozen: number | undefined;

const quick = (name: string) => sleeperManifest(name).replace('  hostNetwork: true\n', '  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n');

/** The PID of this file's containerd, from the script's pidfile, only if that process is a containerd. */
function containerdPid(): number {
  const pid = Number(fs.readFileSync(PIDFILE, 'utf8').trim());
  const comm = fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  if (comm !== 'containerd') throw new Error(`pidfile ${PIDFILE} names ${pid}, which is ${comm}, not containerd`);
  return pid;
}

/** Until the process is gone (its parent, init here, reaps a killed containerd within about a second). */
async function gone(pid: number): Promise<void> {
  await eventually(() => !fs.existsSync(`/proc/${pid}`), 15_000, 50);
}

beforeAll(async () => {
  const { endpoint } = await ensureContainerd({ dir: CONTAINERD_DIR });
  cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 10_000 });
  dir = tempDir('nodelet-faults-containerd-');
  manifests = path.join(dir, 'manifests');
  fs.mkdirSync(manifests);
  for (const n of STABLE) fs.writeFileSync(path.join(manifests, `${n}.yaml`), quick(n));
  healthzPort = await freePort();
  const config = writeKubeletConfig(dir, {
    containerRuntimeEndpoint: endpoint,
    staticPodPath: manifests,
    podLogsDir: path.join(dir, 'logs'),
    runtimeRequestTimeout: `${CALL_TIMEOUT_MS / 1000}s`,
    address: '127.0.0.1',
    port: await freePort(),
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort,
    authentication: '{anonymous: {enabled: true}, webhook: {enabled: false}}',
    authorization: '{mode: AlwaysAllow}',
  });
  nodelet = startNodelet(['--config', config, '--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'lock'), '--hostname-override', NODE, '--container-log-dir', path.join(dir, 'containers')]);
  await nodelet.waitForMsg(/nodelet is ready/, 60_000);
});

afterAll(async () => {
  tally.write();
  await poller?.stop();
  if (frozen !== undefined && fs.existsSync(`/proc/${frozen}`)) process.kill(frozen, 'SIGCONT');
  // Remove the pods (containerd answering), then nodelet, then the containerd this file owns.
  const ok = await ensureContainerd({ dir: CONTAINERD_DIR }).then(() => true, () => false);
  if (nodelet && ok && manifests) {
    for (const f of fs.readdirSync(manifests)) fs.rmSync(path.join(manifests, f));
    await eventually(async () => (await mine()).length === 0, 60_000, 200).catch(() => undefined);
  }
  nodelet?.kill('SIGTERM');
  await nodelet?.exited;
  cri?.close();
  await stopContainerd({ dir: CONTAINERD_DIR }).catch(() => undefined);
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const desired = () => fs.readdirSync(manifests).filter((f) => f.endsWith('.yaml')).map((f) => `${f.slice(0, -5)}-${NODE}`).sort();
/** The pod sandboxes in this file's containerd (any state): only this nodelet makes them. */
const mine = async () => (await cri.listPodSandbox()).filter((s) => s.labels['io.kubernetes.pod.uid']);

/** Undefined when every desired pod has one ready sandbox and one running container, and nothing else is left; else what differs. */
async function settled(): Promise<string | undefined> {
  const want = desired();
  const sandboxes = await mine();
  const ready = sandboxes.filter((s) => s.state === 'SANDBOX_READY').map((s) => s.labels['io.kubernetes.pod.name']!).sort();
  if (ready.join() !== want.join()) return `ready sandboxes [${ready.join()}] != desired [${want.join()}]`;
  const left = sandboxes.filter((s) => !want.includes(s.labels['io.kubernetes.pod.name']!));
  if (left.length > 0) return `sandboxes of removed pods left: ${left.map((s) => `${s.labels['io.kubernetes.pod.name']} (${s.state})`).join()}`;
  const podOf = new Map(sandboxes.map((s) => [s.id, s.labels['io.kubernetes.pod.name']!]));
  const running = (await cri.listContainers()).filter((c) => c.state === 'CONTAINER_RUNNING' && podOf.has(c.podSandboxId)).map((c) => podOf.get(c.podSandboxId)!).sort();
  if (running.join() !== want.join()) return `running containers [${running.join()}] != desired [${want.join()}]`;
  return undefined;
}

/** Container ID of each stable pod's running container. */
async function stableContainers(): Promise<Map<string, string>> {
  const sandboxes = new Map((await mine()).map((s) => [s.id, s.labels['io.kubernetes.pod.name']!]));
  const out = new Map<string, string>();
  for (const c of await cri.listContainers()) {
    const pod = sandboxes.get(c.podSandboxId);
    if (c.state === 'CONTAINER_RUNNING' && pod && STABLE.some((s) => pod === `${s}-${NODE}`)) out.set(pod, c.id);
  }
  return out;
}

/**
 * The containerd-shim-runc-v2 processes serving this file's containerd (`-address` its
 * socket), by the ID they serve (`-id`: the sandbox, whose shim also runs its containers).
 */
function shims(): Map<string, number> {
  const out = new Map<string, number>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let argv: string[];
    try {
      argv = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
    } catch {
      continue; // gone meanwhile
    }
    if (path.basename(argv[0] ?? '') !== 'containerd-shim-runc-v2') continue;
    const flag = (name: string) => (argv.indexOf(name) >= 0 ? argv[argv.indexOf(name) + 1] : undefined);
    const id = flag('-id');
    if (flag('-address') === SOCKET && id) out.set(id, Number(entry));
  }
  return out;
}

/** Every sandbox ID seen in this file's containerd, with its pod: names the pod of an orphaned shim. */
const seenSandboxes = new Map<string, string>();

/**
 * Undefined when every shim of this containerd serves a sandbox it still lists; else the
 * orphans: shims left running for sandboxes nodelet removed (a shim exits once its sandbox
 * is stopped and removed; one that stays holds a process, its mounts and memory for good).
 */
async function orphanedShims(): Promise<string | undefined> {
  const listed = await mine();
  for (const s of listed) seenSandboxes.set(s.id, s.labels['io.kubernetes.pod.name'] ?? '?');
  const live = new Set(listed.map((s) => s.id));
  const orphans = [...shims()].filter(([id]) => !live.has(id));
  if (orphans.length === 0) return undefined;
  return orphans.map(([id, pid]) => `shim ${pid} for sandbox ${id.slice(0, 12)} (${seenSandboxes.has(id) ? `pod ${seenSandboxes.get(id)}, removed` : 'never listed here'})`).join(', ');
}

const records = () => nodelet!.records;
const notReadyAfter = (from: number) => records().slice(from).find((r) => r.level === 'warn' && /container runtime .* is not ready/.test(r.msg));
const readyAfter = (from: number) => records().slice(from).find((r) => /container runtime .* is ready:/.test(r.msg));
const logTail = (from: number) => records().slice(from).filter((x) => x.level !== 'debug').map((x) => `${String(x.time).slice(11, 23)} ${x.level} ${x.msg}`).join(' | ').slice(-4000);
const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

describe(`runtime faults on containerd (seed ${SEED})`, () => {
  it('nodelet stays up and live, reports the runtime not ready, and converges without restarting a pod', async () => {
    const r = rng(SEED);
    const pid = nodelet!.pid;
    let last: string | undefined;
    await eventually(async () => (last = await settled()) === undefined, 60_000, 200).catch(() => {
      throw new Error(`not settled before the faults: ${last}; nodelet logged: ${logTail(0)}`);
    });
    const usage0 = procUsage(pid);
    poller = startHealthzPoller(healthzPort, pid);
    // Short: the kill (the shims outliving containerd) and the hang (the deadline's path);
    // full: each kind twice in a seeded order, the first kill down for 30 s.
    const kinds: Kind[] = pick<Kind[]>(['kill', 'hang'], [...(['kill', 'socket', 'hang', 'socket', 'hang'] as const)].sort(() => r.next() - 0.5));
    if (kinds.length > 2) kinds.push('kill');
    const convergence: Record<string, number[]> = {};
    const down: Record<string, number[]> = {};
    const detection: Record<string, number[]> = {};
    const readyLogged: Record<string, number[]> = {};
    const restart: Record<string, number[]> = {};
    // Noted now and filled as the faults go, so that a failed run still reports what it measured.
    tally.note('faults in order', kinds);
    tally.note('fault held ms (fault start -> containerd restarted or thawed)', down);
    tally.note('containerd restart ms (scripts/containerd.sh start: until CRI Version answers and the images are listed)', restart);
    tally.note('not ready logged ms after the fault start', detection);
    tally.note('runtime ready logged ms after the restart or thaw began', readyLogged);
    tally.note('convergence ms (restart or thaw began -> every pod running once, nothing left, ready logged)', convergence);
    let extra = 0;
    for (const [i, kind] of kinds.entries()) {
      const before = await stableContainers();
      expect([...before.keys()].sort(), `before ${kind}: every stable pod runs`).toEqual(STABLE.map((s) => `${s}-${NODE}`));
      for (const s of await mine()) seenSandboxes.set(s.id, s.labels['io.kubernetes.pod.name'] ?? '?');
      const from = records().length;
      const cpid = containerdPid();
      // The first kill of the full profile is the 30 s outage; the others hold a window.
      const hold = kind === 'kill' && !kinds.slice(0, i).includes('kill') ? KILL_DOWN_MS : kind === 'hang' ? Math.max(HANG_MIN_MS, WINDOW_MS.min + r.int(WINDOW_MS.max - WINDOW_MS.min + 1)) : WINDOW_MS.min + r.int(WINDOW_MS.max - WINDOW_MS.min + 1);
      const t0 = Date.now();
      if (kind === 'kill') {
        process.kill(cpid, 'SIGKILL');
        await gone(cpid);
      } else if (kind === 'socket') {
        fs.rmSync(SOCKET);
        await sleep(500);
        await stopContainerd({ dir: CONTAINERD_DIR });
        await gone(cpid);
        expect(fs.existsSync(SOCKET), 'the socket path is gone while containerd is down').toBe(false);
      } else {
        process.kill(cpid, 'SIGSTOP');
        frozen = cpid;
      }
      tally.add(`faults injected: ${kind}`);
      tally.add('faults injected');
      // Work for nodelet while the runtime is unusable: a pod added, and an older extra one removed.
      await sleep(Math.min(1_000, hold / 3));
      fs.writeFileSync(path.join(manifests, `x${extra}.yaml`), quick(`x${extra}`));
      extra++;
      const olds = fs.readdirSync(manifests).filter((f) => /^x\d+\.yaml$/.test(f) && f !== `x${extra - 1}.yaml`);
      if (olds.length > 0) fs.rmSync(path.join(manifests, r.pick(olds)));
      tally.add('pod changes during faults', olds.length > 0 ? 2 : 1);
      await sleep(Math.max(0, hold - (Date.now() - t0)));
      // The fault lasts until nodelet has said so (the health check runs every 5 s; a hung one takes the 2 s deadline).
      const said = await eventually(() => notReadyAfter(from), 15_000, 50).catch(() => undefined);
      expect(said, `${kind}: nodelet said the runtime is not ready; it logged: ${records().slice(from).map((x) => `${x.level} ${x.msg}`).join(' | ').slice(0, 3000)}`).toBeTruthy();
      tally.add('runtime reported not ready');
      (detection[kind] ??= []).push(Date.parse(String(said!.time)) - t0);
      expect(nodelet!.child.exitCode, `${kind}: nodelet still running`).toBeNull();
      // Healed: containerd started again (its start, ~1-2 s, counts in the convergence), or thawed.
      const healedAt = Date.now();
      (down[kind] ??= []).push(healedAt - t0);
      if (kind === 'kill' || kind === 'socket') {
        expect(fs.existsSync(`/proc/${cpid}`), `${kind}: containerd ${cpid} still down`).toBe(false);
        await ensureContainerd({ dir: CONTAINERD_DIR });
        expect(containerdPid(), `${kind}: a new containerd`).not.toBe(cpid);
        (restart[kind] ??= []).push(Date.now() - healedAt);
      } else {
        process.kill(cpid, 'SIGCONT');
        frozen = undefined;
      }
      await eventually(async () => (last = await settled()) === undefined, 90_000, 200).catch(() => {
        throw new Error(`${kind} (fault ${i}): not converged within 90 s: ${last}; nodelet logged: ${logTail(from)}`);
      });
      const ready = await eventually(() => readyAfter(from + records().slice(from).indexOf(said!)), 20_000, 100);
      (readyLogged[kind] ??= []).push(Date.parse(String(ready.time)) - healedAt);
      (convergence[kind] ??= []).push(Date.now() - healedAt);
      const after = await stableContainers();
      for (const [pod, id] of before) {
        expect(after.get(pod), `${kind}: ${pod} kept its container ${id} (not restarted)`).toBe(id);
        tally.add('containers kept across a containerd fault');
      }
      expect(nodelet!.pid).toBe(pid);
      expect(nodelet!.child.exitCode).toBeNull();
      tally.add('converged without a restart');
      // The pod removed during the fault: its sandbox gone from containerd, and its shim too.
      let orphans: string | undefined;
      await eventually(async () => (orphans = await orphanedShims()) === undefined, 15_000, 200).catch(() => {
        throw new Error(`${kind} (fault ${i}): shims left for removed sandboxes 15 s after convergence: ${orphans}`);
      });
      tally.add('shim checks without an orphan');
    }
    // After the sequence, the pods added during the faults removed too: one shim per stable pod, nothing else.
    for (const f of fs.readdirSync(manifests)) if (/^x\d+\.yaml$/.test(f)) fs.rmSync(path.join(manifests, f));
    await eventually(async () => (last = await settled()) === undefined, 60_000, 200).catch(() => {
      throw new Error(`after the faults, the extra pods not removed: ${last}`);
    });
    let orphans: string | undefined;
    await eventually(async () => (orphans = await orphanedShims()) === undefined, 15_000, 200).catch(() => {
      throw new Error(`after the faults and the extra pods' removal, shims left for removed sandboxes: ${orphans}`);
    });
    const stableSandboxes = new Set((await mine()).map((s) => s.id));
    expect([...shims().keys()].sort(), 'one shim per stable pod, none other').toEqual([...stableSandboxes].sort());
    tally.note('sandboxes seen during the run (all removed but the stable ones, shims gone with them)', seenSandboxes.size);
    const samples = await poller.stop();
    poller = undefined;
    const usage1 = procUsage(pid);
    const failed = tally.addLiveness(samples.latencies, records());
    tally.note('nodelet before', usage0);
    tally.note('nodelet after', usage1);
    tally.note('healthz max latency ms', Math.round(Math.max(...samples.latencies)));
    tally.note('rss MB min/max (poller)', [Math.min(...samples.rssMb), Math.max(...samples.rssMb)].map((x) => Math.round(x * 10) / 10));
    console.log(`containerd faults: ${kinds.join(', ')}; held ms ${JSON.stringify(down)}; restart ms ${JSON.stringify(restart)}; not ready logged ms ${JSON.stringify(detection)}; ready logged ms ${JSON.stringify(readyLogged)}; convergence ms ${JSON.stringify(convergence)}; healthz ${samples.latencies.length} polls, ${failed} failed, max ${Math.round(Math.max(...samples.latencies))} ms; rss ${usage0.rssKiB} -> ${usage1.rssKiB} KiB, fds ${usage0.fds} -> ${usage1.fds}`);
    expect(failed).toBe(0);
    expect(samples.latencies.length).toBeGreaterThan(0);
    expect(records().filter((x) => /starting nodelet/.test(x.msg))).toHaveLength(1);
  });
});
