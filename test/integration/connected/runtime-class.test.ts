/**
 * RuntimeClass end to end (issue 28): the test control plane serves node.k8s.io/v1
 * runtimeclasses (validated as kube-apiserver), and the built nodelet, connected to it on the
 * test CRI server, runs a pod naming a class with the class's handler as the sandbox's CRI
 * runtime_handler (the runtime records it). The API server's RuntimeClass admission refuses a
 * pod naming a missing class and copies a class's overhead into the pod; a static pod, which no
 * admission sees, naming a missing class gets no sandbox, with the kubelet's words naming the
 * class, until the class exists; a handler the runtime has not configured is refused by the
 * runtime, its message shown.
 */
import fs from 'node:fs';
import type { Event as CoreEvent, Pod } from 'kubernetes-types/core/v1.js';
import type { RuntimeClass } from 'kubernetes-types/node/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS, PODS } from '../../../src/controlplane/client.js';
import { RUNTIMECLASSES } from '../../../src/controlplane/objects.js';
import { NodeletError } from '../../../src/errors.js';
import { n1Pod, startConnectedNode, type ConnectedNode } from '../../faults/connected-node.js';
import { adminKubectl, KUBECTL } from '../../helpers/kubectl.js';
import { eventually } from '../../helpers/nodelet.js';

let n1: ConnectedNode;

beforeAll(async () => {
  n1 = await startConnectedNode({ prefix: 'nodelet-runtimeclass-', manifests: { 'no-class.json': JSON.stringify(staticPod('no-class', 'kata')) } });
  // The runtime has one handler besides its default, as a containerd with a runsc runtime.
  n1.cri.runtimeHandlers = ['runsc'];
});

afterAll(async () => {
  await n1?.close();
});

const runtimeClass = (name: string, handler: string): RuntimeClass => ({ apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name }, handler, overhead: { podFixed: { cpu: '10m', memory: '16Mi' } } });

const pod = (name: string, runtimeClassName: string): Pod => n1Pod(name, { runtimeClassName });

/** A static pod: on the node's own files, never through the API server's admission. */
function staticPod(name: string, runtimeClassName: string): Pod {
  const p = pod(name, runtimeClassName);
  delete p.metadata!.namespace;
  delete p.spec!.nodeName;
  delete p.spec!.automountServiceAccountToken;
  return p;
}

const get = (name: string) => n1.api.get<Pod>(PODS, { namespace: 'default', name });
const sandboxesOf = (name: string) => [...n1.cri.sandboxes.values()].filter((s) => s.config.metadata?.name === name);
const sandboxEvents = async (name: string) => (await n1.api.listAll<CoreEvent>(EVENTS, { namespace: 'default' })).items.filter((e) => e.involvedObject.name === name && e.reason === 'FailedCreatePodSandBox');

async function refusal(p: Promise<unknown>): Promise<{ status: unknown; message: string }> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(NodeletError);
  return { status: (err as NodeletError).details.status, message: (err as NodeletError).message };
}

const kubectl = (args: string[], input?: string) => adminKubectl(n1.dir, args, input);

describe('RuntimeClass', () => {
  it('the control plane serves runtimeclasses and validates them: handler a DNS label, immutable', async () => {
    const created = await n1.api.create<RuntimeClass>(RUNTIMECLASSES, runtimeClass('gvisor', 'runsc'));
    expect(created).toMatchObject({ metadata: { name: 'gvisor' }, handler: 'runsc', overhead: { podFixed: { cpu: '10m', memory: '16Mi' } } });
    expect((await n1.api.get<RuntimeClass>(RUNTIMECLASSES, { name: 'gvisor' })).handler).toBe('runsc');
    const bad = await refusal(n1.api.create<RuntimeClass>(RUNTIMECLASSES, runtimeClass('bad', 'Not_A_Label')));
    expect(bad.status).toBe(422);
    expect(bad.message).toContain('handler: Invalid value: "Not_A_Label"');
    const changed = await refusal(n1.api.update<RuntimeClass>(RUNTIMECLASSES, { ...created, handler: 'kata' }));
    expect(changed.status).toBe(422);
    expect(changed.message).toContain('handler: Invalid value: "kata": field is immutable');
  });

  it("a pod naming a class runs with the class's handler as its sandbox's runtime_handler", async () => {
    const created = await n1.api.create<Pod>(PODS, pod('sandboxed', 'gvisor'));
    // The API server's admission copied the class's overhead into the pod (the node sizes the pod's cgroup with it).
    expect(created.spec?.overhead).toEqual({ cpu: '10m', memory: '16Mi' });
    await eventually(async () => (await get('sandboxed')).status?.phase === 'Running', 20_000);
    expect(sandboxesOf('sandboxed').map((s) => s.runtimeHandler)).toEqual(['runsc']);
  });

  it("the API server refuses a pod naming a class it does not have (RuntimeClass admission)", async () => {
    const r = await refusal(n1.api.create<Pod>(PODS, pod('api-no-class', 'kata')));
    expect(r).toEqual({ status: 403, message: expect.stringContaining('pods "api-no-class" is forbidden: pod rejected: RuntimeClass "kata" not found') });
  });

  it("a static pod naming a class the API does not have gets no sandbox, with the kubelet's error naming the class, and runs once the class exists", async () => {
    const ev = await eventually(async () => (await sandboxEvents('no-class-n1'))[0], 20_000);
    expect(ev).toMatchObject({ type: 'Warning', message: 'Failed to create pod sandbox: runtimeclasses.node.k8s.io "kata" not found' });
    // Its mirror pod is refused by the same admission meanwhile, as kube-apiserver would.
    await eventually(async () => n1.nodelet.records.some((r) => r.msg.includes('cannot create mirror pod default/no-class-n1: POST /api/v1/namespaces/default/pods: 403 pods "no-class-n1" is forbidden: pod rejected: RuntimeClass "kata" not found')), 10_000);
    expect(await refusal(get('no-class-n1'))).toMatchObject({ status: 404 });
    expect(sandboxesOf('no-class-n1')).toEqual([]);
    expect(n1.cri.callsOf('RunPodSandbox').filter((c) => (c.request.config as { metadata?: { name?: string } })?.metadata?.name === 'no-class-n1')).toEqual([]);
    // The class appears: the pod's next sandbox attempt (step backoff, short lookup cache) runs it.
    await n1.api.create<RuntimeClass>(RUNTIMECLASSES, runtimeClass('kata', 'runsc'));
    await eventually(async () => (await get('no-class-n1')).status?.phase === 'Running', 30_000);
    expect(sandboxesOf('no-class-n1').map((s) => s.runtimeHandler)).toEqual(['runsc']);
  });

  it("a class whose handler the runtime has not configured: the runtime's refusal is the pod's sandbox error", async () => {
    await n1.api.create<RuntimeClass>(RUNTIMECLASSES, runtimeClass('unconfigured', 'youki'));
    await n1.api.create<Pod>(PODS, pod('no-handler', 'unconfigured'));
    const ev = await eventually(async () => (await sandboxEvents('no-handler'))[0], 20_000);
    expect(ev.message).toContain('Failed to create pod sandbox: cannot create the pod sandbox:');
    expect(ev.message).toContain('no runtime for "youki" is configured');
    expect(sandboxesOf('no-handler')).toEqual([]);
  });
});

describe.runIf(fs.existsSync(KUBECTL))('RuntimeClass with kubectl', () => {
  it('kubectl creates one from YAML and lists them with their handler; a bad handler is refused naming the field', async () => {
    const created = await kubectl(['create', '-f', '-'], 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: from-kubectl\nhandler: runsc\n');
    expect(created).toMatchObject({ code: 0, stdout: 'runtimeclass.node.k8s.io/from-kubectl created\n' });
    const listed = await kubectl(['get', 'runtimeclasses']);
    expect(listed.code).toBe(0);
    const lines = listed.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^NAME\s+HANDLER\s+AGE$/);
    expect(lines.map((l) => l.split(/\s+/).slice(0, 2))).toContainEqual(['from-kubectl', 'runsc']);
    const bad = await kubectl(['create', '-f', '-'], 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: bad\nhandler: Run_SC\n');
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('The RuntimeClass "bad" is invalid: handler: Invalid value: "Run_SC"');
  });
});
