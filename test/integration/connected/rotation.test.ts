/**
 * Client certificate rotation (issue 29.2): with `rotateCertificates: true` and a control
 * plane issuing 40-second certificates, the built nodelet (bootstrapped with a token) renews
 * its client certificate between 70 % and 90 % of its lifetime with a CSR signed by the
 * current certificate, which the control plane approves as a node's own renewal; the same
 * process goes on with the new certificate: its Lease keeps being renewed, its Node stays
 * Ready and its pod keeps running without a restart. Runs on the test CRI server.
 */
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Node, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEASES, NODES, PODS, type ResourceType } from '../../../src/controlplane/client.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { eventually, startNodelet, type NodeletProcess } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { connectedArgs, tearDownConnected, writeConnectedConfig } from '../../helpers/connected-config.js';

const CSRS: ResourceType = { group: 'certificates.k8s.io', version: 'v1', resource: 'certificatesigningrequests', namespaced: false };
const LIFETIME_MS = 40_000;

interface Csr {
  metadata: { name: string };
  spec: { username: string };
  status?: { conditions?: Array<{ type: string; message?: string }>; certificate?: string };
}

let cluster: TestCluster;
let cri: FakeRuntime;
let nodelet: NodeletProcess | undefined;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-rotation-', controlPlane: { csrSigningDurationMs: LIFETIME_MS } });
  cri = await startFakeRuntime();
  await cluster.createBootstrapToken('rotate', '0123456789abcdef');
});

afterAll(() => tearDownConnected({ cluster, cri, nodelets: [nodelet] }));

describe('client certificate rotation', () => {
  it('renews the certificate before 90 % of its lifetime in the same process; lease, node and pod carry on', async () => {
    const dir = cluster.dir;
    const certDir = path.join(dir, 'pki');
    const kubeconfig = path.join(dir, 'kubelet.conf');
    const bootstrap = path.join(dir, 'bootstrap-kubelet.conf');
    cluster.cp.writeKubeconfig(bootstrap, { token: 'rotate.0123456789abcdef' });
    await writeConnectedConfig(dir, cri.socketPath, { fields: { rotateCertificates: true } });
    nodelet = startNodelet(connectedArgs(dir, 'r1', kubeconfig, ['--bootstrap-kubeconfig', bootstrap, '--cert-dir', certDir]));
    const pid = nodelet.pid;
    await nodelet.waitForMsg(/nodelet is ready/, 30_000);
    const current = path.join(certDir, 'kubelet-client-current.pem');
    const first = new X509Certificate(fs.readFileSync(current));
    await cluster.api.create<Pod>(PODS, { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'steady', namespace: 'default' }, spec: { nodeName: 'r1', automountServiceAccountToken: false, hostNetwork: true, terminationGracePeriodSeconds: 0, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] } });
    const running = await eventually(async () => {
      const p = await cluster.api.get<Pod>(PODS, { namespace: 'default', name: 'steady' });
      return p.status?.phase === 'Running' ? p : undefined;
    }, 15_000);
    const containerId = running.status!.containerStatuses![0]!.containerID;

    const planned = await nodelet.waitForMsg(/renewing it at/);
    const rotateAt = Date.parse(String(planned['rotateAt']));
    const from = Date.parse(first.validFrom);
    const to = Date.parse(first.validTo);
    expect((rotateAt - from) / (to - from)).toBeGreaterThanOrEqual(0.7);
    expect((rotateAt - from) / (to - from)).toBeLessThanOrEqual(0.9);

    const renewed = await nodelet.waitForMsg(/client certificate renewed/, LIFETIME_MS + 10_000);
    const renewedAt = Date.parse(String(renewed['time']));
    expect(renewedAt).toBeLessThan(to);
    const second = new X509Certificate(fs.readFileSync(current));
    expect(second.fingerprint256).not.toBe(first.fingerprint256);
    expect(second.subject.split('\n').sort()).toEqual(['CN=system:node:r1', 'O=system:nodes']);
    // The renewal was asked by the node itself, and approved as its own.
    const csr = await cluster.api.get<Csr & { apiVersion?: string }>(CSRS as never, { name: String(renewed['csr']) });
    expect(csr.spec.username).toBe('system:node:r1');
    expect(csr.status!.conditions!.map((c) => c.message)).toEqual(['Auto approving self kubelet client certificate after SubjectAccessReview.']);

    // Same process; the lease is renewed after the switch, the node stays Ready, the pod was not restarted.
    expect(nodelet.pid).toBe(pid);
    expect(nodelet.child.exitCode).toBeNull();
    await eventually(async () => {
      const l = await cluster.api.get<Lease>(LEASES, { namespace: 'kube-node-lease', name: 'r1' });
      return Date.parse(String(l.spec!.renewTime)) > renewedAt + 1000;
    }, 10_000);
    const node = await cluster.api.get<Node>(NODES, { name: 'r1' });
    expect(node.status!.conditions!.find((c) => c.type === 'Ready')!.status).toBe('True');
    const pod = await cluster.api.get<Pod>(PODS, { namespace: 'default', name: 'steady' });
    expect(pod.status!.containerStatuses!.map((c) => [c.containerID, c.restartCount])).toEqual([[containerId, 0]]);
    expect(nodelet.records.filter((r) => r.level === 'error').map((r) => r.msg)).toEqual([]);
  }, 90_000);
});
