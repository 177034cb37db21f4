/**
 * Pod start through nodelet's pod worker against the three raw CRI calls, on the same
 * real containerd in the same run (interleaved), reported as a ratio and added ms.
 *
 * Direct = RunPodSandbox + CreateContainer + StartContainer with the CRI client (the
 * floor: what any agent must ask of the runtime). Nodelet = PodManager.setDesired of a
 * one-container hostNetwork pod, then one sync turn through CriPodRuntime until the
 * container is started: label lookups, ImageStatus (IfNotPresent), log directories, the
 * same three calls, and the status read-back. Teardown is not timed.
 *
 * Run: `npm run build && node dist/bench/pod-start.js [iterations]` (root; starts the
 * private containerd in /var/lib/nodelet-dev/containerd-bench via scripts/containerd.sh).
 */
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { silentLogger } from '../src/log.js';
import { CriPodRuntime } from '../src/pods/cri/cri-pod-runtime.js';
import { PodManager } from '../src/pods/sync/manager.js';
import { createCriClient, type CriClient } from '../src/runtime/cri-client.js';
import { benchContainerd, IMAGE, removeAll, sandboxConfig, sleeperConfig } from './runtime.js';
import { ratioTable, writeSection } from './sections.js';

async function direct(cri: CriClient, i: number, logDir: string): Promise<number> {
  const uid = `direct-${i}`;
  const sandbox = sandboxConfig(uid, logDir);
  const container = sleeperConfig(uid, 'main', `main-${i}.log`);
  const t0 = performance.now();
  const sid = await cri.runPodSandbox(sandbox);
  const cid = await cri.createContainer(sid, container, sandbox);
  await cri.startContainer(cid);
  return performance.now() - t0;
}

function pod(i: number): Pod {
  return {
    metadata: { name: `nodelet-${i}`, namespace: 'bench', uid: `nodelet-${i}` },
    spec: {
      hostNetwork: true,
      terminationGracePeriodSeconds: 0,
      containers: [{ name: 'main', image: IMAGE, imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }],
    },
  };
}

async function main(): Promise<void> {
  const iterations = Math.max(5, Number(process.argv[2] ?? 30) || 30);
  const warmup = 3;
  const endpoint = benchContainerd();
  const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-pods-'));
  const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 30_000 });
  const runtime = new CriPodRuntime({ cri, rootDir: path.join(tmp, 'root'), podLogsDir: path.join(tmp, 'logs'), seccompDefault: false });
  await runtime.init();
  const manager = new PodManager({ runtime, logger: silentLogger(), serializeImagePulls: true });
  manager.setSourcesReady();
  const times = { direct: [] as number[], nodelet: [] as number[] };
  try {
    await removeAll(cri);
    for (let i = 0; i < warmup + iterations; i++) {
      const d = await direct(cri, i, path.join(tmp, 'direct'));
      await removeAll(cri);
      const t0 = performance.now();
      manager.setDesired([pod(i)]);
      await manager.syncOnce();
      const n = performance.now() - t0;
      const p = manager.listPods()[0];
      if (!p?.status?.containerStatuses?.[0]?.state?.running) throw new Error(`nodelet did not start the pod: ${JSON.stringify(p?.status)}`);
      manager.setDesired([]);
      await manager.syncOnce();
      await removeAll(cri);
      if (i >= warmup) {
        times.direct.push(d);
        times.nodelet.push(n);
      }
    }
    const version = await cri.version();
    const section = [
      '## Pod start through the pod worker (`bench/pod-start.ts`)',
      '',
      `Run ${new Date().toISOString()} on Node ${process.version}, ${os.cpus().length} CPUs, ${version.runtimeName} ${version.runtimeVersion}; ${iterations} iterations each after ${warmup} warm-up, interleaved.`,
      'Direct = RunPodSandbox + CreateContainer + StartContainer (hostNetwork, local busybox image). Nodelet = setDesired + one sync turn of the pod worker until the container runs: runtime lookups by label, ImageStatus (IfNotPresent), log directories, the same three calls, and the status read-back.',
      '',
      ...ratioTable(times.direct, times.nodelet, 1),
      '',
      'Reproduce: `npm run build && node dist/bench/pod-start.js 30` (as root).',
    ].join('\n');
    await writeSection('pod-start', section);
    process.stdout.write(`${section}\n`);
  } finally {
    await removeAll(cri).catch(() => undefined);
    cri.close();
    await fsp.rm(tmp, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`pod-start benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
