/**
 * Static pod start as an operator sees it, on the benchmark containerd, against baselines
 * measured in the same run, interleaved:
 *
 * - one pod: manifest renamed into `staticPodPath` of a running, idle nodelet -> its
 *   container seen running through CRI (ListContainers polled every 5 ms), against the
 *   three raw calls (RunPodSandbox + CreateContainer + StartContainer) made straight to the
 *   same containerd, and against `podman kube play` of the same pod from the same local
 *   images (when podman is installed);
 * - 20 pods at once: 20 manifests renamed in one go -> all 20 running, against 20 raw
 *   chains started together (the same parallelism: nodelet runs one worker per pod).
 *
 * The raw pods carry no io.kubernetes.* label, so nodelet never sees them. Teardown (file
 * removed, nodelet removes the pod) is not timed.
 *
 * Run: `npm run build && node dist/bench/static-start.js [iterations] [--quick]` (root).
 */
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createCriClient, type CriClient } from '../src/runtime/cri-client.js';
import { benchArgs, machine, manifest, median, rawStart, removeRaw, rows, runningPods, runningRaw, stageManifest, startAgent, until, httpStatus, sleep } from './agent.js';
import { freePort } from '../test/helpers/nodelet.js';
import { setupPodman } from './podman.js';
import { benchContainerd } from './runtime.js';
import { writeSection } from './sections.js';

const NODE = 'bench';

async function waitGone(cri: CriClient, timeoutMs = 60_000): Promise<void> {
  const t0 = performance.now();
  await until(async () => (await cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.namespace': 'bench' } })).length === 0, t0, timeoutMs, 'pods removed', 50);
}

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const iterations = quick ? 2 : Math.max(5, nums[0] ?? 30);
  const burstRounds = quick ? 1 : Math.max(3, nums[1] ?? 8);
  const burst = quick ? 3 : 20;
  const warmup = quick ? 0 : 3;
  const endpoint = benchContainerd();
  const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 60_000 });
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-static-'));
  const manifests = path.join(dir, 'manifests');
  const podman = quick ? 'skipped with --quick' : setupPodman();
  const agent = await startAgent({ dir, endpoint, healthzPort: await freePort() });
  const times = { direct: [] as number[], directSeccomp: [] as number[], nodelet: [] as number[], podman: [] as number[], burstDirect: [] as number[], burstNodelet: [] as number[] };
  try {
    await removeRaw(cri);
    await until(async () => (await httpStatus(agent.healthzPort, '/healthz')) === 200, performance.now(), 30_000, 'nodelet /healthz', 50);
    await sleep(1000);
    const podFile = path.join(dir, 'podman-pod.yaml');
    await fsp.writeFile(podFile, manifest('podman-start'));
    for (let i = 0; i < warmup + iterations; i++) {
      // Straight to containerd.
      // The same poll as for nodelet runs from t0, so both sides pay it.
      let t0 = performance.now();
      const chain = rawStart(cri, `direct-${i}`, path.join(dir, 'direct'));
      const d = await until(async () => (await runningRaw(cri)).has(`direct-${i}`), t0, 60_000, `raw pod ${i}`);
      await chain;
      await removeRaw(cri);
      // The same calls with the sandbox seccomp profile every kubelet sends.
      t0 = performance.now();
      const chainSeccomp = rawStart(cri, `seccomp-${i}`, path.join(dir, 'direct'), true);
      const ds = await until(async () => (await runningRaw(cri)).has(`seccomp-${i}`), t0, 60_000, `raw pod ${i} (seccomp)`);
      await chainSeccomp;
      await removeRaw(cri);
      // Through nodelet: rename -> inotify -> parse -> worker -> the same calls.
      const name = `s${i}`;
      const place = await stageManifest(manifests, name);
      t0 = performance.now();
      await place();
      const n = await until(async () => (await runningPods(cri)).has(`${name}-${NODE}`), t0, 60_000, `static pod ${name}`);
      await fsp.rm(path.join(manifests, `${name}.yaml`));
      await waitGone(cri);
      // podman kube play of the same pod.
      let p: number | undefined;
      if (typeof podman !== 'string') {
        p = await podman.play(podFile);
        await podman.down(podFile);
      }
      if (i < warmup) continue;
      times.direct.push(d);
      times.directSeccomp.push(ds);
      times.nodelet.push(n);
      if (p !== undefined) times.podman.push(p);
    }
    for (let r = 0; r < burstRounds; r++) {
      let t0 = performance.now();
      const chains = Promise.all(Array.from({ length: burst }, (_, j) => rawStart(cri, `burst-${r}-${j}`, path.join(dir, 'direct'))));
      times.burstDirect.push(await until(async () => (await runningRaw(cri)).size >= burst, t0, 120_000, `${burst} raw pods`, 10));
      await chains;
      await removeRaw(cri);
      const names = Array.from({ length: burst }, (_, j) => `b${r}x${j}`);
      const places = await Promise.all(names.map((n) => stageManifest(manifests, n)));
      t0 = performance.now();
      await Promise.all(places.map((p) => p()));
      times.burstNodelet.push(
        await until(async () => {
          const up = await runningPods(cri);
          return names.every((n) => up.has(`${n}-${NODE}`));
        }, t0, 120_000, `${burst} static pods`, 10),
      );
      await Promise.all(names.map((n) => fsp.rm(path.join(manifests, `${n}.yaml`))));
      await waitGone(cri, 120_000);
    }
    const version = await cri.version();
    const ratio = median(times.nodelet) / median(times.direct);
    const ratioSeccomp = median(times.nodelet) / median(times.directSeccomp);
    const burstRatio = median(times.burstNodelet) / median(times.burstDirect);
    const section = [
      '## Static pod start, one and 20 at once (`bench/static-start.ts`)',
      '',
      `Run ${new Date().toISOString()} on ${machine()}; ${version.runtimeName} ${version.runtimeVersion}${typeof podman === 'string' ? '' : `, ${podman.version}`}. One pod: ${iterations} iterations after ${warmup} warm-up; ${burst} at once: ${burstRounds} rounds; interleaved.`,
      'Nodelet = a running, idle standalone nodelet; the manifest is renamed into `staticPodPath` → its container is seen running through CRI (`ListContainers` polled every 5 ms, 10 ms for the burst). Direct = RunPodSandbox + CreateContainer + StartContainer straight to the same containerd (hostNetwork busybox sleeper), one chain per pod, all chains at once for the burst, seen running by the same poll. podman = `podman kube play` of the same pod (hostNetwork, same local images, runc), command start → exit (it exits once the container runs).',
      '',
      '| | direct CRI (ms) | through nodelet (ms) | ratio | added (ms) |',
      '|---|---|---|---|---|',
      ...rows('one pod', times.direct, times.nodelet),
      ...rows(`${burst} at once`, times.burstDirect, times.burstNodelet),
      '',
      'The same direct calls with the sandbox seccomp profile every kubelet sends (`RuntimeDefault` for the pause process, as nodelet sends it), interleaved in the same iterations:',
      '',
      '| | direct CRI, sandbox seccomp RuntimeDefault (ms) | through nodelet (ms) | ratio | added (ms) |',
      '|---|---|---|---|---|',
      ...rows('one pod', times.directSeccomp, times.nodelet),
      '',
      typeof podman === 'string'
        ? `podman: no figure: ${podman}.`
        : ['| | podman kube play (ms) | through nodelet (ms) | ratio | added (ms) |', '|---|---|---|---|---|', ...rows('one pod', times.podman, times.nodelet)].join('\n'),
      '',
      `Targets (issue 32): one pod ≤ 1.05× the direct calls at the median: **${ratio.toFixed(2)}× — ${ratio <= 1.05 ? 'met' : 'missed'}** (${ratioSeccomp.toFixed(2)}× the calls with the kubelet's sandbox seccomp); ${burst} at once ≤ 1.3×: **${burstRatio.toFixed(2)}× — ${burstRatio <= 1.3 ? 'met' : 'missed'}**${typeof podman === 'string' ? '' : `; faster than podman: **${median(times.nodelet) < median(times.podman) ? 'met' : 'missed'}** (${(median(times.nodelet) / median(times.podman)).toFixed(2)}×)`}.`,
      '',
      'Reproduce: `npm run build && node dist/bench/static-start.js 30 8` (as root).',
    ].join('\n');
    if (!quick) await writeSection('static-start', section);
    process.stdout.write(`${section}\n`);
  } finally {
    await agent.stop();
    await removeRaw(cri).catch(() => undefined);
    // nodelet leaves its pods in the runtime when it stops: sweep what is left.
    for (const s of await cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.namespace': 'bench' } }).catch(() => [])) {
      await cri.stopPodSandbox(s.id).catch(() => undefined);
      await cri.removePodSandbox(s.id).catch(() => undefined);
    }
    cri.close();
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`static-start benchmark failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
