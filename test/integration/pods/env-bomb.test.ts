/**
 * Issue 26's env expansion bomb, from a static manifest and through the API, on containerd:
 * a 1 KB pod whose `env` doubles by reference (`E0` = 1,000 × x, `E<i>` = `$(E<i-1>)$(E<i-1>)`)
 * would make a 260 MB value at 18 levels (520 MB at 19) on nodelet's only thread. nodelet
 * stops the expansion at 128 KiB (Linux's MAX_ARG_STRLEN), so /healthz, polled every 100 ms
 * from another process, answers as fast as before the pods came, RSS stays put, each
 * container waits in CreateContainerConfigError naming `E8`, and the refusal is logged
 * once per pod, not on each backoff retry.
 */
import fs from 'node:fs';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS } from '../../../src/controlplane/client.js';
import { startHealthzPoller, type HealthzSamples } from '../../helpers/healthz-poller.js';
import { eventually, freePort } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { boundPod, busyboxPod, NODE_NAME, startPodNode, type PodNode } from './harness.js';

let cluster: TestCluster;
let node: PodNode;
let healthzPort: number;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-env-bomb-' });
  healthzPort = await freePort();
  node = await startPodNode({ kubeconfig: cluster.nodeKubeconfig(NODE_NAME), containerdDir: '/var/lib/nodelet-dev/containerd-envbomb', config: { healthzPort, healthzBindAddress: '127.0.0.1' } });
}, 300_000);

afterAll(async () => {
  await cluster?.deletePods();
  await node?.close();
  await cluster?.close();
});

function doublingEnv(levels: number) {
  return [{ name: 'E0', value: 'x'.repeat(1000) }, ...Array.from({ length: levels }, (_, i) => ({ name: `E${i + 1}`, value: `$(E${i})$(E${i})` }))];
}

const bombContainer = (levels: number) => ({ env: doublingEnv(levels), command: ['/bin/sh', '-c', 'echo "$E18" | wc -c; sleep 3600'] });

function rssMb(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
}

const poll = async (ms: number): Promise<HealthzSamples> => {
  const poller = startHealthzPoller(healthzPort, node.nodelet.pid);
  await new Promise((r) => setTimeout(r, ms));
  return poller.stop();
};

describe('an env that doubles by reference', () => {
  it('is refused at 128 KiB naming the variable, from a static manifest and through the API, without holding the event loop', async () => {
    const before = await poll(4_000);
    const baseWorst = Math.max(...before.latencies);
    const baseRss = Math.max(...before.rssMb);
    const readyAt = node.nodelet.records.length;

    node.writeManifest('bomb18.yaml', busyboxPod('bomb18', '', { container: bombContainer(18) }));
    node.writeManifest('bomb19.yaml', busyboxPod('bomb19', '', { container: bombContainer(19) }));
    for (const levels of [18, 19]) {
      const p = boundPod(NODE_NAME, `api-bomb${levels}`, '');
      p.spec!.containers[0] = { ...p.spec!.containers[0]!, ...bombContainer(levels) };
      await cluster.api.create<Pod>(PODS, p);
    }
    // 14 s: the first attempt and the first backoff retry (10 s later) of each pod.
    const during = await poll(14_000);

    // A pod shows ContainerCreating before its first attempt: wait for the attempt's verdict.
    const waitingOf = (p: Pod | undefined) => {
      const w = p?.status?.containerStatuses?.[0]?.state?.waiting;
      return w && w.reason !== 'ContainerCreating' ? w : undefined;
    };
    for (const name of ['bomb18', 'bomb19']) {
      const w = await eventually(async () => waitingOf(await node.pod(name)), 10_000);
      expect(w.reason).toBe('CreateContainerConfigError');
      expect(w.message).toMatch(/^env E8: the value would exceed 131072 bytes/);
    }
    for (const name of ['api-bomb18', 'api-bomb19']) {
      const w = await eventually(async () => waitingOf(await cluster.api.get<Pod>(PODS, { namespace: 'default', name }).catch(() => undefined)), 10_000);
      expect(w).toMatchObject({ reason: 'CreateContainerConfigError' });
      expect(w.message).toMatch(/^env E8: /);
    }
    const tried = node.nodelet.records.slice(readyAt).filter((r) => /env E8: /.test(r.msg));
    const worst = Math.max(...during.latencies);
    const peakRss = Math.max(...during.rssMb, rssMb(node.nodelet.pid));
    const loopDelays = node.nodelet.records.slice(readyAt).filter((r) => r.component === 'eventloop').map((r) => r.maxDelayMs as number);
    console.log(
      `env bomb: healthz worst ${worst.toFixed(1)} ms over ${during.latencies.length} polls (before: ${baseWorst.toFixed(1)} ms); RSS ${baseRss.toFixed(1)} -> peak ${peakRss.toFixed(1)} MB; refusals logged ${tried.length}; event-loop delays >= 50 ms: ${loopDelays.join(', ') || 'none'}`,
    );
    expect(during.latencies.filter((l) => l < 0), 'failed /healthz answers').toEqual([]);
    // The fault held nodelet's event loop 3.4-11 s per attempt. What nodelet measures
    // of its own loop: no delay of 100 ms (its log reports every one from 50 ms). /healthz from
    // another process: the bar, 100 ms. This file runs in the `alone` phase (nothing
    // else on the machine): 25-60 ms worst in four full runs; 107 ms had been seen on a machine
    // loaded by other work, with no delay in nodelet's loop.
    expect(loopDelays.filter((d) => d >= 100)).toEqual([]);
    expect(worst).toBeLessThan(100);
    expect(peakRss - baseRss).toBeLessThan(50);
    // One line per pod (four pods, one version each), not one per backoff retry.
    expect(tried.map((r) => String(r.pod ?? r.msg)).length).toBe(4);
  }, 120_000);
});
