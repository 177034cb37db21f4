/**
 * One agent per runtime: two built nodelets (nodes n1 and n2) pointed at the same test
 * CRI server, each with its own static pod. Each marks its sandboxes with its node name
 * (io.kubernetes.nodelet.node); neither removes the other's pod (two kubelets would), each
 * warns once per foreign pod, and both pods keep their first containers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeNode, sleeperManifest, type FakeNode } from '../helpers/fake-node.js';
import { eventually } from '../helpers/nodelet.js';
import { Tally } from './report.js';

const tally = new Tally('shared-runtime');
let a: FakeNode;
let b: FakeNode;

beforeAll(async () => {
  a = await startFakeNode({ prefix: 'nodelet-faults-shared-a-', manifests: { 'a.yaml': sleeperManifest('a') } });
  b = await startFakeNode({ prefix: 'nodelet-faults-shared-b-', manifests: { 'b.yaml': sleeperManifest('b') }, config: { containerRuntimeEndpoint: a.cri.endpoint }, args: ['--hostname-override', 'n2'], start: false });
  await b.start();
});
afterAll(async () => {
  tally.write();
  await b?.close();
  await a?.close();
});

describe('two agents on one runtime', () => {
  it('each marks its sandboxes, neither removes the other\'s pod, each warns once about the other\'s', async () => {
    const cri = a.cri;
    const ready = () => [...cri.sandboxes.values()].filter((s) => s.state === 'SANDBOX_READY');
    await eventually(() => ready().length === 2 && [...cri.containers.values()].filter((c) => c.state === 'CONTAINER_RUNNING').length === 2, 30_000);
    expect(ready().map((s) => [s.config.labels!['io.kubernetes.pod.name'], s.config.labels!['io.kubernetes.nodelet.node']]).sort()).toEqual([['a-n1', 'n1'], ['b-n2', 'n2']]);
    const containers = [...cri.containers.keys()].sort();
    // Ten relists of each agent with both sources ready: neither touches the other's pod.
    await new Promise((r) => setTimeout(r, 4_000)); // four relists of each agent, both sources ready
    expect(cri.calls.filter((c) => /^(Stop|Remove)(PodSandbox|Container)$/.test(c.method))).toEqual([]);
    expect([...cri.containers.keys()].sort()).toEqual(containers);
    for (const [agent, other] of [[a, 'n2'], [b, 'n1']] as const) {
      const warned = agent.nodelet.records.filter((r) => r.level === 'warn' && r.msg.includes(`was created by the agent of node "${other}"`));
      expect(warned).toHaveLength(1);
      tally.add('foreign pods reported');
    }
    tally.add('agents', 2);
    tally.add('pods removed by the other agent', 0);
  });
});
