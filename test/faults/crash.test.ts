/**
 * (a) Agent crashes: the built nodelet on the test CRI server is killed with SIGKILL at a
 * random moment, N times (short 5, full 20), while static pods are added, removed, edited
 * and one crash-loops. After each kill: the lock is free at once (flock -n takes it), no
 * file nodelet wrote under the root dir is torn (every JSON/YAML file parses); after each
 * restart, once the node settles, every desired pod runs exactly once (one ready sandbox,
 * one running container for the sleepers) and nothing undesired runs, and no container
 * that was running a pod nobody changed was restarted (same container IDs).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { startFakeNode, sleeperManifest, type FakeNode } from '../helpers/fake-node.js';
import { eventually } from '../helpers/nodelet.js';
import { pick, procUsage, rng, SEED, Tally } from './report.js';

const CYCLES = pick(5, 20);
const tally = new Tally('agent-crash');
let node: FakeNode;

const STABLE = ['s0', 's1', 's2'];
const crashLoop = 'apiVersion: v1\nkind: Pod\nmetadata: {name: crashy}\nspec:\n  hostNetwork: true\n  restartPolicy: Always\n  containers:\n  - {name: c, image: docker.io/local/busybox:latest, imagePullPolicy: IfNotPresent, command: [sh, -c, "exit 1"]}\n';
const quick = (name: string, extra = '') => sleeperManifest(name, undefined, extra).replace('  hostNetwork: true\n', '  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n');

beforeAll(async () => {
  node = await startFakeNode({ prefix: 'nodelet-faults-crash-', manifests: { ...Object.fromEntries(STABLE.map((n) => [`${n}.yaml`, quick(n)])), 'crashy.yaml': crashLoop }, start: false });
  await node.start();
});
afterAll(async () => {
  tally.write();
  await node?.close();
});

/** Desired pod names (`<file name>-n1`) from the manifest folder. */
const desired = () => fs.readdirSync(node.manifests).filter((f) => f.endsWith('.yaml')).map((f) => `${f.slice(0, -5)}-n1`).sort();
const readySandboxes = () => [...node.cri.sandboxes.values()].filter((s) => s.state === 'SANDBOX_READY');
const podOf = (sandboxId: string) => node.cri.sandboxes.get(sandboxId)?.config.labels?.['io.kubernetes.pod.name'];
const running = () => [...node.cri.containers.values()].filter((c) => c.state === 'CONTAINER_RUNNING');

/** Every desired pod has exactly one ready sandbox, sleepers one running container; nothing else is ready. */
function settled(): string | undefined {
  const want = desired();
  const byPod = new Map<string, number>();
  for (const s of readySandboxes()) byPod.set(s.config.labels!['io.kubernetes.pod.name']!, (byPod.get(s.config.labels!['io.kubernetes.pod.name']!) ?? 0) + 1);
  const have = [...byPod.keys()].sort();
  if (have.join() !== want.join()) return `ready sandboxes ${have.join()} != desired ${want.join()}`;
  for (const [p, n] of byPod) if (n !== 1) return `${p} has ${n} ready sandboxes`;
  for (const p of want.filter((n) => !n.startsWith('crashy'))) {
    const n = running().filter((c) => podOf(c.sandboxId) === p).length;
    if (n !== 1) return `${p} has ${n} running containers`;
  }
  return undefined;
}

/** Every JSON/YAML file under the root dir parses (none torn by the kill). */
function tornFiles(): string[] {
  const torn: string[] = [];
  for (const e of fs.readdirSync(node.rootDir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const p = path.join(e.parentPath, e.name);
    if (!/\.(json|ya?ml)$/.test(e.name)) continue;
    tally.add('files parsed');
    const text = fs.readFileSync(p, 'utf8');
    try {
      if (e.name.endsWith('.json')) JSON.parse(text);
      else parseYaml(text);
    } catch (err) {
      torn.push(`${p}: ${(err as Error).message}`);
    }
  }
  return torn;
}

describe(`kill -9 at random moments (seed ${SEED})`, () => {
  it(`${CYCLES} cycles: lock free, nothing torn, every desired pod once, untouched containers never restarted`, async () => {
    const r = rng(SEED);
    await eventually(() => settled() === undefined, 30_000, 100);
    const usage0 = procUsage(node.nodelet.pid);
    let extra = 0;
    for (let cycle = 0; cycle < CYCLES; cycle++) {
      // Churn: add, remove or edit non-stable pods, then kill at a random moment of what follows.
      const action = r.pick(['add', 'add', 'remove', 'edit'] as const);
      const others = fs.readdirSync(node.manifests).filter((f) => /^x\d+\.yaml$/.test(f));
      if (action === 'add' || others.length === 0) {
        fs.writeFileSync(path.join(node.manifests, `x${extra++}.yaml`), quick(`x${extra - 1}`));
        tally.add('pods added');
      } else if (action === 'remove') {
        fs.rmSync(path.join(node.manifests, r.pick(others)));
        tally.add('pods removed');
      } else {
        const f = r.pick(others);
        fs.writeFileSync(path.join(node.manifests, f), quick(f.slice(0, -5), `    env: [{name: V, value: "${cycle}"}]\n`));
        tally.add('pods edited');
      }
      // Containers of pods nobody changes, running before the kill.
      const untouched = new Map(running().filter((c) => STABLE.some((s) => podOf(c.sandboxId) === `${s}-n1`)).map((c) => [c.id, podOf(c.sandboxId)]));
      await new Promise((res) => setTimeout(res, r.int(1500)));
      node.nodelet.kill('SIGKILL');
      const { signal } = await node.nodelet.exited;
      expect(signal).toBe('SIGKILL');
      tally.add('kills');
      // The kernel releases the flock with the process: a successor takes it at once.
      execFileSync('flock', ['-n', path.join(node.dir, 'lock'), 'true']);
      tally.add('lock free after kill');
      expect(tornFiles()).toEqual([]);
      await node.start();
      tally.add('restarts');
      await eventually(() => settled() === undefined, 30_000, 100).catch(() => {
        throw new Error(`cycle ${cycle}: not settled: ${settled()}`);
      });
      for (const [id, pod] of untouched) {
        const c = node.cri.containers.get(id);
        expect(c?.state, `${pod} container ${id} after cycle ${cycle}`).toBe('CONTAINER_RUNNING');
        tally.add('containers kept across a kill');
      }
      tally.add('cycles');
    }
    expect(tornFiles()).toEqual([]);
    const usage1 = procUsage(node.nodelet.pid);
    tally.note('nodelet after the first start', usage0);
    tally.note('nodelet after the last restart', usage1);
    tally.note('runtime calls', node.cri.calls.length);
    tally.note('duplicates (a pod with two ready sandboxes or two running containers after settling)', 0);
    expect(tally.counts.cycles).toBe(CYCLES);
  });
});
