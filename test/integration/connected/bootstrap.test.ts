/**
 * TLS bootstrap (issue 29.1 and 29.4): the built nodelet given only a bootstrap kubeconfig
 * (a token from a `bootstrap.kubernetes.io/token` Secret the test creates) asks the test
 * control plane for a client certificate, which its csrapproving controller approves and
 * its signer issues; nodelet writes `kubelet-client-current.pem` and the kubeconfig (0600),
 * registers its Node, reports it Ready and runs a pod bound to it. A restart reuses them without a new request. A
 * request nobody approves automatically is denied with `kubectl certificate deny`: nodelet
 * reports it naming the request, asks again with a new key, and goes on once
 * `kubectl certificate approve` approves that one. Runs on the test CRI server.
 */
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Node, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NODES, PODS, type ResourceType } from '../../../src/controlplane/client.js';
import { loadKubeconfig } from '../../../src/controlplane/kubeconfig.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { eventually, startNodelet, type NodeletProcess } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { removeDir } from '../../helpers/cleanup.js';
import { connectedArgs, tearDownConnected, writeConnectedConfig } from '../../helpers/connected-config.js';
import { adminKubectl } from '../../helpers/kubectl.js';

const CSRS: ResourceType = { group: 'certificates.k8s.io', version: 'v1', resource: 'certificatesigningrequests', namespaced: false };

interface Csr {
  metadata: { name: string; uid: string };
  spec: { signerName: string; usages: string[]; username: string; groups: string[] };
  status?: { conditions?: Array<{ type: string; status: string; reason?: string; message?: string }>; certificate?: string };
}

let cluster: TestCluster;
let cri: FakeRuntime;
const started: NodeletProcess[] = [];

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-bootstrap-' });
  cri = await startFakeRuntime();
  await cluster.createBootstrapToken('abcdef', '0123456789abcdef', { expiration: new Date(Date.now() + 3600_000).toISOString(), 'auth-extra-groups': 'system:bootstrappers:kubeadm:default-node-token' });
});

afterAll(() => tearDownConnected({ cluster, cri, nodelets: started }));

const kubectl = (args: string[]) => adminKubectl(cluster.dir, args);

/** A node's folder in `parent`'s with its kubelet.yaml (`fields` over the connected test node's); returns the paths its flags use. */
async function nodeDir(node: string, parent = cluster, fields: Record<string, undefined> = {}): Promise<{ dir: string; config: string; kubeconfig: string; bootstrap: string; certDir: string }> {
  const dir = path.join(parent.dir, node);
  fs.mkdirSync(dir);
  const { config } = await writeConnectedConfig(dir, cri.socketPath, { fields });
  return { dir, config, kubeconfig: path.join(dir, 'kubelet.conf'), bootstrap: path.join(dir, 'bootstrap-kubelet.conf'), certDir: path.join(dir, 'pki') };
}

function start(node: string, d: Awaited<ReturnType<typeof nodeDir>>): NodeletProcess {
  const n = startNodelet(connectedArgs(d.dir, node, d.kubeconfig, ['--bootstrap-kubeconfig', d.bootstrap, '--cert-dir', d.certDir]));
  started.push(n);
  return n;
}

async function stop(n: NodeletProcess): Promise<{ code: number | null }> {
  n.kill('SIGTERM');
  return n.exited;
}

const csrsOf = async (user: string) => (await cluster.api.listAll<Csr & { apiVersion?: string }>(CSRS as never, {})).items.filter((c) => c.spec.username === user);
const mode = (f: string) => (fs.statSync(f).mode & 0o777).toString(8);

describe('TLS bootstrap with a bootstrap token', () => {
  it('gets its client certificate approved and issued, writes it and the kubeconfig 0600, registers Ready, and a restart makes no new request', async () => {
    const d = await nodeDir('n1');
    cluster.cp.writeKubeconfig(d.bootstrap, { token: 'abcdef.0123456789abcdef' });
    const n1 = start('n1', d);
    await n1.waitForMsg(/nodelet is ready/, 30_000);

    const [csr, ...more] = await csrsOf('system:bootstrap:abcdef');
    expect(more).toEqual([]);
    expect(csr!.metadata.name).toMatch(/^node-csr-[A-Za-z0-9_-]{43}$/);
    expect(csr!.spec).toMatchObject({ signerName: 'kubernetes.io/kube-apiserver-client-kubelet', usages: ['digital signature', 'client auth'], groups: ['system:bootstrappers', 'system:bootstrappers:kubeadm:default-node-token', 'system:authenticated'] });
    expect(csr!.status!.conditions!.map((c) => [c.type, c.status, c.reason, c.message])).toEqual([['Approved', 'True', 'AutoApproved', 'Auto approving kubelet client certificate after SubjectAccessReview.']]);
    const issued = new X509Certificate(Buffer.from(csr!.status!.certificate!, 'base64'));
    expect(issued.subject.split('\n').sort()).toEqual(['CN=system:node:n1', 'O=system:nodes']);
    expect(issued.verify(new X509Certificate(fs.readFileSync(cluster.cp.caFile)).publicKey)).toBe(true);

    // The files, as the kubelet's: a dated pem behind the current link, both 0600, and the kubeconfig pointing at the link.
    const current = path.join(d.certDir, 'kubelet-client-current.pem');
    expect(path.basename(fs.readlinkSync(current))).toMatch(/^kubelet-client-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}\.pem$/);
    expect([mode(current), mode(d.kubeconfig)]).toEqual(['600', '600']);
    expect(fs.readFileSync(current, 'utf8')).toMatch(/^-----BEGIN CERTIFICATE-----[\s\S]+-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----[\s\S]+-----END EC PRIVATE KEY-----\n$/);
    expect(fs.existsSync(path.join(d.certDir, 'kubelet-client.key.tmp'))).toBe(false);
    const access = loadKubeconfig(d.kubeconfig);
    expect(access.server).toBe(cluster.cp.url);
    expect(new X509Certificate(access.cert!).fingerprint256).toBe(issued.fingerprint256);
    expect(fs.readFileSync(d.kubeconfig, 'utf8')).toContain(`client-certificate: ${current}`);

    // Connected as system:node:n1: the Node registers and turns Ready.
    await eventually(async () => {
      const node = await cluster.api.get<Node>(NODES, { name: 'n1' }).catch(() => undefined);
      return node?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
    }, 15_000);
    const listed = await kubectl(['get', 'csr', csr!.metadata.name]);
    expect(listed.stdout.split('\n')[0]!.split(/\s+/)).toEqual(['NAME', 'AGE', 'SIGNERNAME', 'REQUESTOR', 'REQUESTEDDURATION', 'CONDITION']);
    expect(listed.stdout.split('\n')[1]!.split(/\s+/)).toEqual([csr!.metadata.name, expect.any(String), 'kubernetes.io/kube-apiserver-client-kubelet', 'system:bootstrap:abcdef', '<none>', 'Approved,Issued']);
    // And runs a pod bound to it, its status written back with the issued credentials.
    await cluster.api.create<Pod>(PODS, { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'after-bootstrap', namespace: 'default' }, spec: { nodeName: 'n1', automountServiceAccountToken: false, hostNetwork: true, terminationGracePeriodSeconds: 0, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] } });
    await eventually(async () => (await cluster.api.get<Pod>(PODS, { namespace: 'default', name: 'after-bootstrap' })).status?.phase === 'Running', 15_000);

    // A second start with the kubeconfig in place: no request, the same certificate.
    expect((await stop(n1)).code).toBe(0);
    const again = start('n1', d);
    await again.waitForMsg(/nodelet is ready/, 30_000);
    expect(again.records.some((r) => /requesting one/.test(r.msg))).toBe(false);
    expect((await csrsOf('system:bootstrap:abcdef')).map((c) => c.metadata.name)).toEqual([csr!.metadata.name]);
    expect(new X509Certificate(loadKubeconfig(d.kubeconfig).cert!).fingerprint256).toBe(issued.fingerprint256);
    expect((await stop(again)).code).toBe(0);
  }, 90_000);

  it('an expired client certificate with a bootstrap kubeconfig bootstraps again at start', async () => {
    // A control plane of its own whose signer issues 4 s certificates.
    const short = await startTestCluster({ prefix: 'nodelet-bootstrap-expiry-', controlPlane: { csrSigningDurationMs: 4000 } });
    try {
      await short.createBootstrapToken('ghijkl', '0123456789abcdef');
      // The lease and status updates nodelet has by default.
      const d = await nodeDir('x1', short, { nodeLeaseDurationSeconds: undefined, nodeStatusUpdateFrequency: undefined });
      const { kubeconfig } = d;
      short.cp.writeKubeconfig(d.bootstrap, { token: 'ghijkl.0123456789abcdef' });
      const first = start('x1', d);
      await first.waitForMsg(/nodelet is ready/, 30_000);
      const issued = new X509Certificate(loadKubeconfig(kubeconfig).cert!);
      const csrsNow = async () => (await short.api.listAll<Csr>(CSRS as never, {})).items.filter((c) => c.spec.username === 'system:bootstrap:ghijkl');
      const firstUid = (await csrsNow())[0]!.metadata.uid;
      expect((await stop(first)).code).toBe(0);
      // Past its notAfter: the next start asks the signer again with the bootstrap token.
      await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(issued.validTo) + 1000 - Date.now())));
      const second = start('x1', d);
      await second.waitForMsg(/nodelet is ready/, 30_000);
      expect(second.records.some((r) => /expired at .*; bootstrapping a new one/.test(r.msg))).toBe(true);
      // A new request (the old one, its certificate expired, was removed by the csrcleaner).
      expect((await csrsNow()).map((c) => c.metadata.uid)).not.toContain(firstUid);
      const renewed = new X509Certificate(loadKubeconfig(kubeconfig).cert!);
      expect(renewed.fingerprint256).not.toBe(issued.fingerprint256);
      expect(Date.parse(renewed.validTo)).toBeGreaterThan(Date.now());
      expect((await stop(second)).code).toBe(0);
    } finally {
      await short.close();
      removeDir(short.dir);
    }
  }, 90_000);

  it('reports a denied request naming it, writes nothing, asks again with a new key, and goes on once kubectl approves', async () => {
    // A credential that is not a bootstrap token: its requests wait for a person.
    cluster.cp.addToken('not-a-bootstrapper', 'joiner', ['system:authenticated']);
    const d = await nodeDir('n2');
    cluster.cp.writeKubeconfig(d.bootstrap, { token: 'not-a-bootstrapper' });
    const n2 = start('n2', d);
    const first = await eventually(async () => (await csrsOf('joiner'))[0], 20_000);
    expect(first.status?.conditions ?? []).toEqual([]);
    const deny = await kubectl(['certificate', 'deny', first.metadata.name]);
    expect(deny).toMatchObject({ code: 0 });
    const failed = await n2.waitFor((r) => r.level === 'error' || (typeof r.msg === 'string' && /TLS bootstrap failed/.test(r.msg)), 20_000);
    expect(failed.msg).toContain(`certificatesigningrequest ${first.metadata.name} is denied, reason: KubectlDeny`);
    expect(failed['csr']).toBe(first.metadata.name);
    // Nothing half-written: no kubeconfig, no client pem.
    expect(fs.existsSync(d.kubeconfig)).toBe(false);
    expect(fs.existsSync(path.join(d.certDir, 'kubelet-client-current.pem'))).toBe(false);

    const second = await eventually(async () => (await csrsOf('joiner')).find((c) => c.metadata.name !== first.metadata.name), 20_000);
    const approve = await kubectl(['certificate', 'approve', second.metadata.name]);
    expect(approve).toMatchObject({ code: 0 });
    await n2.waitForMsg(/nodelet is ready/, 30_000);
    const approved = await cluster.api.get<Csr & { apiVersion?: string }>(CSRS as never, { name: second.metadata.name });
    expect(approved.status!.conditions!.map((c) => [c.type, c.reason])).toEqual([['Approved', 'KubectlApprove']]);
    expect(mode(d.kubeconfig)).toBe('600');
    expect((await stop(n2)).code).toBe(0);
  }, 90_000);

  it('ends the wait for an unapproved request on SIGTERM with exit 0, writing nothing', async () => {
    const d = await nodeDir('n4');
    cluster.cp.writeKubeconfig(d.bootstrap, { token: 'not-a-bootstrapper' });
    const n4 = start('n4', d);
    await n4.waitForMsg(/waiting for certificatesigningrequest/, 20_000);
    expect((await stop(n4)).code).toBe(0);
    expect(n4.records.some((r) => /stopped while waiting for the TLS bootstrap/.test(r.msg))).toBe(true);
    expect(fs.existsSync(d.kubeconfig)).toBe(false);
  }, 30_000);

  it('stops at once, naming the flag and the file, when the bootstrap kubeconfig cannot be read', async () => {
    const d = await nodeDir('n3');
    const n3 = start('n3', d);
    const end = await n3.exited;
    expect(end.code).toBe(1);
    expect(n3.stderr).toContain(`--bootstrap-kubeconfig: ${d.bootstrap}: cannot read: ENOENT`);
    expect(fs.existsSync(d.kubeconfig)).toBe(false);
  }, 30_000);
});
