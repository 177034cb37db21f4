/**
 * A runtime that answers CheckpointContainer OK but leaves a bad archive, through the
 * whole daemon: the built nodelet on the test CRI server, HTTPS with a client certificate.
 * A truncated archive (a real tar cut in the middle of a member), an empty file, bytes
 * that are no tar, or no file at all are each answered 500 with the reason, and nothing is
 * left in <root-dir>/checkpoints; a whole archive afterwards is answered 200 and kept.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { PodList } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { eventually, freePort, startNodelet, tempDir, writeKubeletConfig, type NodeletProcess } from '../../helpers/nodelet.js';
import { request } from '../server/client.js';
import { createTestCa, type Issued } from '../server/pki.js';

let cri: FakeRuntime;
let nodelet: NodeletProcess;
let dir: string;
let port: number;
let serverCa: string;
let client: Issued;

beforeAll(async () => {
  cri = await startFakeRuntime();
  dir = tempDir();
  const ca = await createTestCa();
  client = await ca.issue({ cn: 'forensics', orgs: ['ops'] });
  fs.writeFileSync(path.join(dir, 'ca.crt'), ca.cert);
  fs.mkdirSync(path.join(dir, 'manifests'));
  fs.writeFileSync(
    path.join(dir, 'manifests', 'app.yaml'),
    'apiVersion: v1\nkind: Pod\nmetadata: {name: app, namespace: shop}\nspec:\n  hostNetwork: true\n  containers:\n  - {name: web, image: docker.io/local/busybox:latest, imagePullPolicy: IfNotPresent, command: [sleep, "3600"]}\n',
  );
  port = await freePort();
  const readOnlyPort = await freePort();
  writeKubeletConfig(dir, {
    containerRuntimeEndpoint: `unix://${cri.socketPath}`,
    staticPodPath: path.join(dir, 'manifests'),
    podLogsDir: path.join(dir, 'logs'),
    address: '127.0.0.1',
    port,
    readOnlyPort,
    healthzPort: 0,
    authentication: `{anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: ${path.join(dir, 'ca.crt')}}}`,
    authorization: '{mode: AlwaysAllow}',
  });
  nodelet = startNodelet(['--config', path.join(dir, 'kubelet.yaml'), '--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'lock'), '--hostname-override', 'n1']);
  await nodelet.waitForMsg(/nodelet is ready/, 30_000);
  await eventually(async () => {
    const res = await fetch(`http://127.0.0.1:${readOnlyPort}/pods`);
    return ((await res.json()) as PodList).items[0]?.status?.phase === 'Running';
  }, 20_000);
  serverCa = fs.readFileSync(path.join(dir, 'root', 'pki', 'kubelet.crt'), 'utf8');
});

afterAll(async () => {
  nodelet?.kill('SIGTERM');
  await nodelet?.exited;
  await cri?.stop();
});

const checkpoint = () => request(`https://127.0.0.1:${port}/checkpoint/shop/app-n1/web`, { method: 'POST', ca: serverCa, cert: client.cert, key: client.key });
const archives = () => (fs.existsSync(path.join(dir, 'root', 'checkpoints')) ? fs.readdirSync(path.join(dir, 'root', 'checkpoints')) : []);

describe('checkpoint archives are verified whole before the 200', () => {
  it.each([
    ['truncated', /truncated: the archive ends inside a member or block/],
    ['empty', /empty file/],
    ['garbage', /is not a readable tar archive/],
    ['none', /left no archive at/],
  ] as const)('a %s archive is 500 with the reason and removed', async (kind, reason) => {
    cri.checkpointArchive = kind;
    const r = await checkpoint();
    expect(r.status).toBe(500);
    expect(r.body).toMatch(reason);
    expect(archives()).toEqual([]);
  });

  it('a whole archive afterwards is 200 and kept', async () => {
    cri.checkpointArchive = 'whole';
    const r = await checkpoint();
    expect(r.status).toBe(200);
    const file = (r.json() as { items: string[] }).items[0]!;
    expect(archives()).toEqual([path.basename(file)]);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
  });
});
