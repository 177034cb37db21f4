/**
 * Serving certificates from the cluster (issue 29.3, `serverTLSBootstrap: true`): the built
 * nodelet, connected to the test control plane, sends a `kubernetes.io/kubelet-serving` CSR
 * naming its hostname and IP; nobody approves it automatically, and until someone does the
 * HTTPS port completes no handshake (no self-signed certificate). Once `kubectl certificate
 * approve` approves it, the port serves the certificate the cluster CA issued (new
 * connections, no restart) and `kubectl logs` works through it. With a 40 s lifetime the
 * certificate is renewed (a second CSR, approved through the API as kubectl does) and swapped
 * in while a `follow` stream opened on the first one keeps delivering; a restart serves the
 * stored pair without a new CSR. Runs on the test CRI server.
 */
import { execFile } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import tls from 'node:tls';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS, type ResourceType } from '../../../src/controlplane/client.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { eventually, startNodelet, type NodeletProcess } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { connectedArgs, tearDownConnected, writeConnectedConfig } from '../../helpers/connected-config.js';
import { adminKubectl } from '../../helpers/kubectl.js';

const CSRS: ResourceType = { group: 'certificates.k8s.io', version: 'v1', resource: 'certificatesigningrequests', namespaced: false };
const NODE = 's1';

interface Csr {
  metadata: { name: string; uid: string; resourceVersion?: string };
  spec: { request: string; signerName: string; usages: string[]; username: string };
  status?: { conditions?: Array<{ type: string; status: string; reason?: string; message?: string }>; certificate?: string };
}

let cluster: TestCluster;
let cri: FakeRuntime;
const started: NodeletProcess[] = [];

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-serving-', controlPlane: { csrSigningDurationMs: 40_000 } });
  cri = await startFakeRuntime();
});

afterAll(() => tearDownConnected({ cluster, cri, nodelets: started }));

const kubectl = (args: string[]) => adminKubectl(cluster.dir, args);

/** The serving CSRs of the node (in name order, as the API lists them). */
async function servingCsrs(): Promise<Csr[]> {
  const { items } = await cluster.api.listAll<Csr & { apiVersion?: string }>(CSRS as never, {});
  return items.filter((c) => c.spec.username === `system:node:${NODE}` && c.spec.signerName === 'kubernetes.io/kubelet-serving');
}

/** What `kubectl certificate approve` does: the Approved condition through the approval subresource. */
async function approve(name: string): Promise<void> {
  const csr = await cluster.api.get<Csr & { apiVersion?: string }>(CSRS as never, { name });
  const body = { ...csr, status: { ...csr.status, conditions: [...(csr.status?.conditions ?? []), { type: 'Approved', status: 'True', reason: 'TestApprove', message: 'approved by the test' }] } };
  await cluster.api.update(CSRS as never, body as never, { subresource: 'approval' });
}

/** One TLS handshake with the node's port: the certificate it presents, or the error. */
function handshake(port: number): Promise<{ cert: X509Certificate } | { error: string }> {
  return new Promise((resolve) => {
    const s = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      const raw = s.getPeerCertificate().raw;
      s.end();
      resolve({ cert: new X509Certificate(raw) });
    });
    s.on('error', (err) => resolve({ error: err.message }));
  });
}

describe('serving certificates with serverTLSBootstrap', () => {
  it('serves no certificate until kubectl approves the CSR, then the cluster-issued one (hot-swapped on renewal, streams kept); a restart reuses it', async () => {
    const dir = path.join(cluster.dir, NODE);
    fs.mkdirSync(dir);
    const podLogsDir = path.join(dir, 'logs');
    const { https: port } = (await writeConnectedConfig(dir, cri.socketPath, { fields: { serverTLSBootstrap: true, nodeLeaseDurationSeconds: undefined } })).ports;
    const certDir = path.join(dir, 'pki');
    const args = connectedArgs(dir, NODE, cluster.nodeKubeconfig(NODE), ['--cert-dir', certDir, '--node-ip', '127.0.0.1']);
    const n1 = startNodelet(args);
    started.push(n1);
    await n1.waitForMsg(/nodelet is ready/, 30_000);

    // The CSR: the kubelet's signer, usages and names; nobody approves it by itself.
    const [csr] = await eventually(async () => ((await servingCsrs()).length > 0 ? servingCsrs() : undefined), 15_000);
    expect(csr!.metadata.name).toMatch(/^csr-/);
    expect(csr!.spec.usages).toEqual(['digital signature', 'server auth']);
    const text = await new Promise<string>((resolve) => {
      const p = execFile('openssl', ['req', '-noout', '-text', '-nameopt', 'RFC2253'], (_e, out) => resolve(out));
      p.stdin!.end(Buffer.from(csr!.spec.request, 'base64'));
    });
    expect(text).toMatch(/Subject: CN=system:node:s1,O=system:nodes/);
    expect(text).toContain('DNS:s1, IP Address:127.0.0.1');
    await new Promise((r) => setTimeout(r, 500));
    expect((await cluster.api.get<Csr & { apiVersion?: string }>(CSRS as never, { name: csr!.metadata.name })).status?.conditions ?? []).toEqual([]);

    // Before approval: every handshake fails (no self-signed certificate), and nodelet says why.
    const before = await handshake(port);
    expect(before).toEqual({ error: expect.stringMatching(/handshake failure|alert/i) });
    const refused = await n1.waitFor((r) => typeof r.msg === 'string' && r.msg.includes('no serving certificate available for the kubelet'), 10_000);
    expect(refused.level).toBe('warn');
    expect(fs.existsSync(path.join(certDir, 'kubelet.crt'))).toBe(false);

    expect(await kubectl(['certificate', 'approve', csr!.metadata.name])).toMatchObject({ code: 0 });
    const first = await eventually(async () => {
      const h = await handshake(port);
      return 'cert' in h ? h.cert : undefined;
    }, 15_000);
    const ca = new X509Certificate(fs.readFileSync(cluster.cp.caFile));
    expect(first.verify(ca.publicKey)).toBe(true);
    expect(first.checkIssued(ca)).toBe(true);
    expect(first.subjectAltName).toBe('DNS:s1, IP Address:127.0.0.1');
    expect(first.subject.split('\n').sort()).toEqual(['CN=system:node:s1', 'O=system:nodes']);
    // Verified against the cluster CA by its IP, as a client with --kubelet-certificate-authority does.
    await new Promise<void>((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', port, ca: fs.readFileSync(cluster.cp.caFile) }, () => (s.end(), resolve()));
      s.on('error', reject);
    });
    const current = path.join(certDir, 'kubelet-server-current.pem');
    expect((fs.statSync(current).mode & 0o777).toString(8)).toBe('600');
    expect(path.basename(fs.readlinkSync(current))).toMatch(/^kubelet-server-\d{4}(-\d{2}){5}\.pem$/);

    // kubectl logs, through the control plane to the node's HTTPS port.
    const pod = await cluster.api.create<Pod>(PODS, { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'logger', namespace: 'default' }, spec: { nodeName: NODE, automountServiceAccountToken: false, hostNetwork: true, terminationGracePeriodSeconds: 0, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] } });
    await eventually(async () => (await cluster.api.get<Pod>(PODS, { namespace: 'default', name: 'logger' })).status?.phase === 'Running', 15_000);
    const logFile = path.join(podLogsDir, `default_logger_${pod.metadata!.uid}`, 'app', '0.log');
    fs.mkdirSync(path.dirname(logFile), { recursive: true });
    fs.writeFileSync(logFile, `${new Date().toISOString()} stdout F hello over the issued certificate\n`);
    const logs = await kubectl(['logs', 'logger']);
    expect(logs).toMatchObject({ code: 0, stdout: 'hello over the issued certificate\n' });

    // A follow stream on the first certificate, kept across the renewal.
    const lines: string[] = [];
    const follow = https.get({ host: '127.0.0.1', port, path: '/containerLogs/default/logger/app?follow=true', rejectUnauthorized: false, agent: false });
    const res = await new Promise<import('node:http').IncomingMessage>((resolve) => follow.on('response', resolve));
    expect(res.statusCode).toBe(200);
    res.on('data', (c: Buffer) => lines.push(...c.toString().split('\n').filter(Boolean)));

    // Renewal at 70-90 % of the 40 s lifetime: a second CSR, approved; new connections get the new certificate.
    const renewal = await eventually(async () => (await servingCsrs()).find((c) => c.metadata.name !== csr!.metadata.name), 40_000, 250);
    await approve(renewal.metadata.name);
    const second = await eventually(async () => {
      const h = await handshake(port);
      return 'cert' in h && h.cert.serialNumber !== first.serialNumber ? h.cert : undefined;
    }, 10_000);
    expect(second.verify(ca.publicKey)).toBe(true);
    expect(second.subjectAltName).toBe('DNS:s1, IP Address:127.0.0.1');
    fs.appendFileSync(logFile, `${new Date().toISOString()} stdout F after the swap\n`);
    await eventually(() => lines.includes('after the swap'), 10_000);
    expect(res.destroyed).toBe(false);
    follow.destroy();

    // A restart serves the stored pair at once and asks nothing.
    n1.kill('SIGTERM');
    expect((await n1.exited).code).toBe(0);
    const n2 = startNodelet(args);
    started.push(n2);
    await n2.waitForMsg(/nodelet is ready/, 30_000);
    const h = await handshake(port);
    expect('cert' in h && h.cert.serialNumber).toBe(second.serialNumber);
    // No new request: the renewal's is there (the first may be gone: the csrcleaner removes a request once its certificate expired).
    expect((await servingCsrs()).map((c) => c.metadata.name).filter((n) => n !== csr!.metadata.name)).toEqual([renewal.metadata.name]);
    n2.kill('SIGTERM');
    expect((await n2.exited).code).toBe(0);
  }, 150_000);
});
