/**
 * The pod relist against its floor, on a real containerd in the same run (interleaved),
 * reported as ratios and added ms.
 *
 * Floor = ListPodSandbox + ListContainers with the CRI client: what any agent must ask to
 * see the node's pods. Steady = CriPodRuntime.listPods on a runtime that has seen these
 * containers before (what nodelet pays every second while nothing changes: ContainerStatus
 * only for containers that are new or changed state). Cold = the same on a fresh
 * CriPodRuntime, which asks ContainerStatus for every container: what every relist cost
 * before the status cache.
 *
 * Run: `npm run build && node dist/bench/relist.js [iterations] [pods]` (root; starts the
 * private containerd in /var/lib/nodelet-dev/containerd-bench via scripts/containerd.sh).
 */
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { CriPodRuntime } from '../src/pods/cri/cri-pod-runtime.js';
import { createCriClient, type CriClient } from '../src/runtime/cri-client.js';
import { benchContainerd, removeAll, sandboxConfig, sleeperConfig } from './runtime.js';
import { ratioTable, writeSection } from './sections.js';

const CONTAINERS = ['main', 'sidecar'];

/** A running hostNetwork pod with two sleeping containers, labelled as the kubelet labels them. */
async function runPod(cri: CriClient, i: number, logDir: string): Promise<void> {
  const uid = `relist-${i}`;
  const sandbox = sandboxConfig(uid, logDir);
  const sid = await cri.runPodSandbox(sandbox);
  for (const name of CONTAINERS) await cri.startContainer(await cri.createContainer(sid, sleeperConfig(uid, name, `${name}-${i}.log`), sandbox));
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function main(): Promise<void> {
  const iterations = Math.max(10, Number(process.argv[2] ?? 200) || 200);
  const pods = Math.max(1, Number(process.argv[3] ?? 10) || 10);
  const warmup = 10;
  const endpoint = benchContainerd();
  const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-relist-'));
  const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 30_000 });
  const runtimeOptions = { cri, rootDir: path.join(tmp, 'root'), podLogsDir: path.join(tmp, 'logs'), seccompDefault: false };
  const steady = new CriPodRuntime(runtimeOptions);
  const times = { floor: [] as number[], steady: [] as number[], cold: [] as number[] };
  try {
    await removeAll(cri);
    for (let i = 0; i < pods; i++) await runPod(cri, i, path.join(tmp, 'logs'));
    const seen = await steady.listPods();
    const running = seen.flatMap((p) => p.containers).filter((c) => c.state === 'running').length;
    if (seen.length !== pods || running !== pods * CONTAINERS.length) throw new Error(`expected ${pods} pods with ${pods * CONTAINERS.length} running containers, saw ${seen.length} and ${running}`);
    for (let i = 0; i < warmup + iterations; i++) {
      const f = await timed(() => Promise.all([cri.listPodSandbox(), cri.listContainers()]));
      const s = await timed(() => steady.listPods());
      const c = await timed(() => new CriPodRuntime(runtimeOptions).listPods());
      if (i >= warmup) {
        times.floor.push(f);
        times.steady.push(s);
        times.cold.push(c);
      }
    }
    const version = await cri.version();
    const section = [
      '## Pod relist against its floor (`bench/relist.ts`)',
      '',
      `Run ${new Date().toISOString()} on Node ${process.version}, ${os.cpus().length} CPUs, ${version.runtimeName} ${version.runtimeVersion}; ${pods} running pods of ${CONTAINERS.length} containers; ${iterations} iterations each after ${warmup} warm-up, interleaved.`,
      'Direct = ListPodSandbox + ListContainers (the floor). Nodelet = `CriPodRuntime.listPods`, the relist the pod manager runs every second: steady (containers seen before, nothing changed: no ContainerStatus call) and cold (a fresh runtime asks ContainerStatus for every container, as every relist did before the status cache).',
      '',
      'Steady:',
      '',
      ...ratioTable(times.floor, times.steady),
      '',
      'Cold:',
      '',
      ...ratioTable(times.floor, times.cold),
      '',
      'Reproduce: `npm run build && node dist/bench/relist.js 200 10` (as root).',
    ].join('\n');
    await writeSection('relist', section);
    process.stdout.write(`${section}\n`);
  } finally {
    await removeAll(cri).catch(() => undefined);
    cri.close();
    await fsp.rm(tmp, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`relist benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
