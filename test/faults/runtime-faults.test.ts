/**
 * (b) Runtime faults: the built nodelet (standalone, static pods) on the test CRI server,
 * with `runtimeRequestTimeout: 2s` so that a hung call costs seconds. Faults, while pods
 * are added and removed through the manifest folder.
 * Each fault lasts at least its window, and until nodelet has logged the runtime not ready.
 * - kill-restart: the runtime killed (socket gone, calls cancelled) and restarted on the
 *   same socket with its state;
 * - hang: every CRI call answers only after 3x the deadline;
 * - resource-exhausted / unavailable: every CRI call answers RESOURCE_EXHAUSTED or
 *   UNAVAILABLE;
 * - new-server (last): the socket removed and a new, empty runtime started on the same path.
 * Throughout: nodelet keeps its PID, /healthz answers 200 (polled from another process:
 * the runtime's health is not nodelet's liveness), the log says the runtime is not ready
 * (and ready again after); after each fault every desired pod has exactly one ready sandbox
 * and one running container, nothing else runs, and the pods nobody changed kept their
 * container IDs (except after new-server, which kept nothing). Convergence: from the end
 * of the fault to that state.
 */
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeRuntime, type FakeRuntime } from '../cri/fake-runtime.js';
import { startFakeNode, sleeperManifest, type FakeNode } from '../helpers/fake-node.js';
import { startHealthzPoller } from '../helpers/healthz-poller.js';
import { eventually } from '../helpers/nodelet.js';
import { pick, procUsage, rng, SEED, Tally } from './report.js';

type Kind = 'kill-restart' | 'hang' | 'resource-exhausted' | 'unavailable' | 'new-server';
/** Short: one hang (the deadline's path; the CI budget is small); full: four rounds of the four same-state faults in a seeded order, then a new server. */
const ROUNDS = pick(1, 4);
/** Each fault lasts this long at least, and until nodelet has logged the runtime not ready. */
const WINDOW_MS = { min: pick(1_000, 3_000), max: pick(1_000, 10_000) };
const CALL_TIMEOUT_MS = 2_000;
const METHODS = ['Version', 'Status', 'UpdateRuntimeConfig', 'RunPodSandbox', 'StopPodSandbox', 'RemovePodSandbox', 'PodSandboxStatus', 'ListPodSandbox', 'CreateContainer', 'StartContainer', 'StopContainer', 'RemoveContainer', 'ListContainers', 'ContainerStatus', 'ListImages', 'ImageStatus', 'PullImage'];
const STABLE = ['s0', 's1'];

const tally = new Tally('runtime-faults');
let node: FakeNode;
/** The runtime nodelet talks to now (replaced by the new-server fault). */
let cri: FakeRuntime;
let replacement: FakeRuntime | undefined;
let poller: ReturnType<typeof startHealthzPoller> | undefined;

const quick = (name: string) => sleeperManifest(name).replace('  hostNetwork: true\n', '  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n');

beforeAll(async () => {
  node = await startFakeNode({
    prefix: 'nodelet-faults-runtime-',
    manifests: Object.fromEntries(STABLE.map((n) => [`${n}.yaml`, quick(n)])),
    config: { runtimeRequestTimeout: `${CALL_TIMEOUT_MS / 1000}s` },
  });
  cri = node.cri;
});
afterAll(async () => {
  tally.write();
  await poller?.stop();
  await node?.close();
  await replacement?.stop();
});

const desired = () => fs.readdirSync(node.manifests).filter((f) => f.endsWith('.yaml')).map((f) => `${f.slice(0, -5)}-n1`).sort();
const podOf = (rt: FakeRuntime, sandboxId: string) => rt.sandboxes.get(sandboxId)?.config.labels?.['io.kubernetes.pod.name'];
const running = () => [...cri.containers.values()].filter((c) => c.state === 'CONTAINER_RUNNING');

/** Every desired pod: one ready sandbox and one running container; nothing else ready or running. */
function settled(): string | undefined {
  const want = desired();
  const sandboxes = [...cri.sandboxes.values()].filter((s) => s.state === 'SANDBOX_READY').map((s) => s.config.labels!['io.kubernetes.pod.name']!).sort();
  if (sandboxes.join() !== want.join()) return `ready sandboxes [${sandboxes.join()}] != desired [${want.join()}]`;
  const containers = running().map((c) => podOf(cri, c.sandboxId)).sort();
  if (containers.join() !== want.join()) return `running containers [${containers.join()}] != desired [${want.join()}]`;
  return undefined;
}

const records = () => node.nodelet.records;
const notReadyAfter = (from: number) => records().slice(from).find((r) => r.level === 'warn' && /container runtime .* is not ready/.test(r.msg));
const readyAfter = (from: number) => records().slice(from).find((r) => /container runtime .* is ready:/.test(r.msg));

async function inject(kind: Kind): Promise<void> {
  if (kind === 'kill-restart') await cri.kill();
  else if (kind === 'hang') for (const m of METHODS) cri.setLatency(m, 3 * CALL_TIMEOUT_MS);
  else if (kind === 'resource-exhausted') for (const m of METHODS) cri.failWith(m, { code: grpc.status.RESOURCE_EXHAUSTED, message: 'injected: grpc: received message larger than max' });
  else if (kind === 'unavailable') for (const m of METHODS) cri.failWith(m, { code: grpc.status.UNAVAILABLE, message: 'injected: connection error' });
  else {
    // The socket removed under a running server, then that server gone and a new one on the same path.
    fs.rmSync(cri.socketPath);
    await cri.kill();
  }
}

async function heal(kind: Kind): Promise<void> {
  if (kind === 'kill-restart') await cri.restart();
  else if (kind === 'hang') for (const m of METHODS) cri.setLatency(m, 0);
  else if (kind === 'resource-exhausted' || kind === 'unavailable') for (const m of METHODS) cri.failWith(m, undefined);
  else {
    replacement = await startFakeRuntime({ socketPath: cri.socketPath });
    cri = replacement;
  }
}

describe(`runtime faults (seed ${SEED})`, () => {
  it('nodelet stays up and live, reports the runtime not ready, and converges without a restart', async () => {
    const r = rng(SEED);
    const pid = node.nodelet.pid;
    await eventually(() => settled() === undefined, 30_000, 100);
    const usage0 = procUsage(pid);
    poller = startHealthzPoller(node.ports.healthz, pid);
    const kinds: Kind[] = [];
    if (ROUNDS === 1) kinds.push('hang');
    else for (let i = 0; i < ROUNDS; i++) kinds.push(...[...(['kill-restart', 'hang', 'resource-exhausted', 'unavailable'] as const)].sort(() => r.next() - 0.5));
    if (ROUNDS > 1) kinds.push('new-server');
    const convergence: Record<string, number[]> = {};
    const detection: Record<string, number[]> = {};
    let extra = 0;
    for (const [i, kind] of kinds.entries()) {
      const stableIds = new Map(running().filter((c) => STABLE.some((s) => podOf(cri, c.sandboxId) === `${s}-n1`)).map((c) => [c.id, podOf(cri, c.sandboxId)]));
      expect(stableIds.size).toBe(STABLE.length);
      const from = records().length;
      const window = WINDOW_MS.min + r.int(WINDOW_MS.max - WINDOW_MS.min + 1);
      const injectedAt = Date.now();
      await inject(kind);
      tally.add(`faults injected: ${kind}`);
      tally.add('faults injected');
      // Work for nodelet while the runtime is unusable: a pod added, and one of the extras removed.
      await new Promise((res) => setTimeout(res, window / 3));
      fs.writeFileSync(path.join(node.manifests, `x${extra}.yaml`), quick(`x${extra}`));
      extra++;
      const olds = fs.readdirSync(node.manifests).filter((f) => /^x\d+\.yaml$/.test(f) && f !== `x${extra - 1}.yaml`);
      if (olds.length > 0) fs.rmSync(path.join(node.manifests, r.pick(olds)));
      tally.add('pod changes during faults', olds.length > 0 ? 2 : 1);
      await new Promise((res) => setTimeout(res, window - window / 3));
      // The fault lasts until nodelet has said so (the health loop checks every 5 s; a hung check takes the 2 s deadline).
      const said = await eventually(() => notReadyAfter(from), 12_000, 50).catch(() => undefined);
      expect(said, `${kind}: nodelet said the runtime is not ready; it logged: ${records().slice(from).map((x) => `${x.level} ${x.msg}`).join(' | ').slice(0, 3000)}`).toBeTruthy();
      (detection[kind] ??= []).push(Date.now() - injectedAt);
      tally.add('runtime reported not ready');
      expect(node.nodelet.child.exitCode, `${kind}: nodelet still running`).toBeNull();
      const healedAt = Date.now();
      const fromHeal = records().length;
      await heal(kind);
      await eventually(() => settled() === undefined, 60_000, 100).catch(() => {
        throw new Error(`${kind} (fault ${i}): not converged within 60 s: ${settled()}`);
      });
      await eventually(() => readyAfter(fromHeal), 15_000, 100);
      const took = Date.now() - healedAt;
      (convergence[kind] ??= []).push(took);
      if (kind !== 'new-server') {
        for (const [id, pod] of stableIds) {
          expect(cri.containers.get(id)?.state, `${kind}: ${pod}'s container ${id} kept`).toBe('CONTAINER_RUNNING');
          tally.add('containers kept across a runtime fault');
        }
      }
      expect(node.nodelet.pid).toBe(pid);
      tally.add('converged without a restart');
    }
    const samples = await poller.stop();
    poller = undefined;
    const usage1 = procUsage(pid);
    const failed = tally.addLiveness(samples.latencies, node.nodelet.records);
    tally.note('convergence ms (fault end -> every pod running once, runtime ready logged)', convergence);
    tally.note('fault held ms (window, or until nodelet logged the runtime not ready)', detection);
    tally.note('nodelet before', usage0);
    tally.note('nodelet after', usage1);
    tally.note('healthz max latency ms', Math.round(Math.max(...samples.latencies)));
    tally.note('rss MB min/max (poller)', [Math.min(...samples.rssMb), Math.max(...samples.rssMb)].map((x) => Math.round(x * 10) / 10));
    console.log(`runtime faults: ${kinds.join(', ')}; held ms ${JSON.stringify(detection)}; convergence ms ${JSON.stringify(convergence)}; healthz ${samples.latencies.length} polls, ${failed} failed; rss ${usage0.rssKiB} -> ${usage1.rssKiB} KiB, fds ${usage0.fds} -> ${usage1.fds}`);
    expect(failed).toBe(0);
    expect(samples.latencies.length).toBeGreaterThan(0);
    expect(node.nodelet.records.filter((x) => /starting nodelet/.test(x.msg))).toHaveLength(1);
  });
});
