/**
 * Container status seen after a change (issue 17): a running container of a static pod is
 * stopped through CRI behind nodelet's back (as a crash or an OOM kill ends it). Baseline:
 * the runtime's own event of it, containerd's `/tasks/exit` seen by this process's own
 * subscription to containerd's event service (containerd 1.6 has no CRI
 * `GetContainerEvents`). Nodelet: the time until its `/pods` (read-only port, polled every
 * 10 ms) no longer shows that container running. Both are timed from the same stop (/pods polled
 * while the StopContainer call runs: containerd answers it only after its CRI plugin recorded
 * the exit), so each round is its own interleaving. Each round has a pod of its own, settled for a few seconds
 * first (nodelet's relist waits for events then, src/pods/sync/manager.ts); a stopped container
 * restarts with a back-off, so no pod is stopped twice.
 *
 * Run: `npm run build && node dist/bench/status-latency.js [iterations] [--quick]` (root).
 */
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { createCriClient } from '../src/runtime/cri-client.js';
import { UnaryChannel } from '../src/runtime/grpc-unary.js';
import { CONTAINERD_EVENTS_PATH, CONTAINERD_SUBSCRIBE_REQUEST } from '../src/runtime/runtime-events.js';
import { freePort } from '../test/helpers/nodelet.js';
import { benchArgs, httpBody, httpStatus, machine, rows, sleep, stageManifest, startAgent, until, type Agent } from './agent.js';
import { benchContainerd } from './runtime.js';
import { writeSection } from './sections.js';

async function main(): Promise<void> {
  const { quick, nums } = benchArgs();
  const iterations = quick ? 2 : Math.max(5, nums[0] ?? 20);
  const settleMs = quick ? 1500 : 5000;
  const endpoint = benchContainerd();
  const cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 60_000 });
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-bench-status-'));
  const manifests = path.join(dir, 'manifests');
  // The runtime's own events: when each container's task exited, as containerd published it.
  const exits = new Map<string, number>();
  const events = new UnaryChannel(endpoint);
  const stopEvents = new AbortController();
  const exitTopic = Buffer.from('/tasks/exit');
  const subscription = events
    .serverStream(CONTAINERD_EVENTS_PATH, CONTAINERD_SUBSCRIBE_REQUEST, (m) => {
      if (m.indexOf(exitTopic) < 0) return;
      const id = /[0-9a-f]{64}/.exec(m.toString('latin1'))?.[0];
      if (id && !exits.has(id)) exits.set(id, performance.now());
    }, stopEvents.signal)
    .catch(() => undefined);
  let agent: Agent | undefined;
  const runtime: number[] = [];
  const nodelet: number[] = [];
  try {
    const readOnlyPort = await freePort();
    agent = await startAgent({ dir, endpoint, healthzPort: await freePort(), readOnlyPort });
    const a = agent;
    await until(async () => (await httpStatus(a.healthzPort, '/healthz')) === 200 && (await httpStatus(readOnlyPort, '/pods')) === 200, performance.now(), 30_000, 'nodelet /healthz and /pods', 50);
    const statusOf = async (name: string) => {
      const pods = (JSON.parse(await httpBody(readOnlyPort, '/pods')) as { items: Pod[] }).items;
      return pods.find((p) => p.metadata?.name?.startsWith(`${name}-`))?.status?.containerStatuses?.[0];
    };
    for (let i = 0; i < iterations; i++) {
      const name = `status-${i}`;
      await (await stageManifest(manifests, name))();
      const running = await until(async () => !!(await statusOf(name))?.state?.running, performance.now(), 60_000, `${name} running`, 20).then(() => statusOf(name));
      const id = running!.containerID!.replace(/^containerd:\/\//, '');
      await sleep(settleMs);
      const t0 = performance.now();
      // /pods is polled while StopContainer runs: containerd answers it only once its CRI
      // plugin recorded the exit (after deleting the task), well after its /tasks/exit event,
      // and an operator watching /pods does not wait for that answer.
      const stopped = cri.stopContainer(id, 0);
      const seen = await until(async () => {
        const s = await statusOf(name);
        return !s?.state?.running || s.containerID !== `containerd://${id}`;
      }, t0, 30_000, `${name}: its stop seen by nodelet`, 10);
      await stopped;
      await until(async () => exits.has(id), t0, 10_000, `${name}: containerd's /tasks/exit event`, 5);
      runtime.push(exits.get(id)! - t0);
      nodelet.push(seen);
      process.stderr.write(`round ${i}: runtime event ${runtime.at(-1)!.toFixed(1)} ms, nodelet /pods ${seen.toFixed(1)} ms\n`);
    }
  } finally {
    stopEvents.abort();
    await subscription;
    events.close();
    for (const f of await fsp.readdir(manifests).catch(() => [] as string[])) await fsp.rm(path.join(manifests, f), { force: true });
    if (agent) {
      const a = agent;
      // The pods go with their manifests before nodelet stops (the next benchmark starts clean).
      await until(async () => (await cri.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.namespace': 'bench' } })).length === 0, performance.now(), 60_000, 'bench pods removed', 100).catch(() => undefined);
      await a.stop();
    }
    cri.close();
    await fsp.rm(dir, { recursive: true, force: true });
  }
  const section = [
    '## Container status seen after a change (`bench/status-latency.ts`)',
    '',
    `Run ${new Date().toISOString()} on ${machine()}; ${iterations} rounds, each a new static pod (busybox sleeper, hostNetwork) settled ${settleMs / 1000} s, then its container stopped through CRI (\`StopContainer\`, timeout 0) behind nodelet. Runtime event = containerd's \`/tasks/exit\` seen by this process's own subscription to containerd's event service; nodelet = its \`/pods\` (read-only port, polled every 10 ms) no longer showing the container running, polled from the stop on (while \`StopContainer\` runs). Both from the same stop.`,
    '',
    '| figure (ms) | runtime event | nodelet `/pods` | ratio | added |',
    '|---|---|---|---|---|',
    ...rows('stop → seen,', runtime, nodelet),
    '',
    `Reproduce: \`npm run build && node dist/bench/status-latency.js ${iterations}\` (as root).`,
  ].join('\n');
  process.stdout.write(`${section}\n`);
  if (!quick) await writeSection('status-latency', section);
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
