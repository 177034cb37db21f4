/**
 * The checkpoint endpoint against real containerd 1.6, which does not implement
 * CheckpointContainer: a running container (made through the CRI client with the
 * kubelet's labels) is found by its labels, the call reaches containerd, and the answer is
 * 500 carrying containerd's own message. Real TLS, a real client certificate.
 */
import crypto from 'node:crypto';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { realClock } from '../../../src/clock.js';
import { HealthRegistry } from '../../../src/health/checks.js';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import type { PodSandboxConfig } from '../../../src/runtime/types.js';
import { Authenticator, alwaysAllow } from '../../../src/server/auth.js';
import { CheckpointService } from '../../../src/checkpoint/service.js';
import { createNodeServer, type NodeServer } from '../../../src/server/https-server.js';
import { loadOrCreateServingCert } from '../../../src/server/tls.js';
import { BUSYBOX_IMAGE, ensureContainerd } from '../../helpers/containerd.js';
import { createTestCa } from './pki.js';
import { request } from './client.js';

let tmp: string;
let cri: CriClient;
let server: NodeServer | undefined;
let sandboxId: string | undefined;

afterAll(async () => {
  await server?.stop();
  if (sandboxId) {
    await cri.stopPodSandbox(sandboxId).catch(() => {});
    await cri.removePodSandbox(sandboxId).catch(() => {});
  }
  cri?.close();
  if (tmp) await fsp.rm(tmp, { recursive: true, force: true });
});

describe('checkpoint against containerd 1.6', () => {
  let url: string;
  let rootDir: string;
  let tls: { ca: string; cert: string; key: string };
  const uid = crypto.randomUUID();
  const pod: Pod = { metadata: { namespace: 'nodelet-test', name: 'cp-target', uid }, spec: { containers: [{ name: 'worker' }] } };

  beforeAll(async () => {
    tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-ctrd-cp-'));
    rootDir = path.join(tmp, 'root');
    const { endpoint } = await ensureContainerd();
    cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 30_000 });
    const labels = { 'io.kubernetes.pod.uid': uid, 'io.kubernetes.pod.name': 'cp-target', 'io.kubernetes.pod.namespace': 'nodelet-test' };
    const sandbox: PodSandboxConfig = {
      metadata: { name: 'cp-target', uid, namespace: 'nodelet-test', attempt: 0 },
      logDirectory: path.join(tmp, 'logs'),
      labels,
      linux: { securityContext: { namespaceOptions: { network: 'NODE', pid: 'CONTAINER', ipc: 'POD' } } },
    };
    sandboxId = await cri.runPodSandbox(sandbox);
    const cid = await cri.createContainer(
      sandboxId,
      {
        metadata: { name: 'worker', attempt: 0 },
        image: { image: BUSYBOX_IMAGE },
        command: ['/bin/sh', '-c', 'while :; do sleep 1; done'],
        labels: { ...labels, 'io.kubernetes.container.name': 'worker' },
        logPath: 'worker/0.log',
        linux: { securityContext: { namespaceOptions: { network: 'NODE', pid: 'CONTAINER', ipc: 'POD' } } },
      },
      sandbox,
    );
    await cri.startContainer(cid);

    const ca = await createTestCa();
    const client = await ca.issue({ cn: 'alice' });
    const serving = await loadOrCreateServingCert({ certDir: path.join(tmp, 'pki'), hostname: 'node-a', ips: [] });
    tls = { ca: serving.cert, cert: client.cert, key: client.key };
    server = createNodeServer({
      address: '127.0.0.1',
      port: 0,
      tls: { cert: serving.cert, key: serving.key, clientCA: ca.cert },
      authenticator: new Authenticator({ x509: true, anonymous: false, clock: realClock }),
      authorizer: alwaysAllow,
      nodeName: 'node-a',
      health: new HealthRegistry(),
      pods: { getPod: (ns, name) => (ns === 'nodelet-test' && name === 'cp-target' ? pod : undefined), listPods: () => [pod] },
      checkpoints: new CheckpointService({ rootDir, runtime: cri, pods: { getPod: (ns, name) => (ns === 'nodelet-test' && name === 'cp-target' ? pod : undefined), listPods: () => [pod] }, runtimeRequestTimeoutMs: 30_000, clock: realClock }),
    });
    url = `https://127.0.0.1:${(await server.start()).port}`;
  });

  it('answers 500 with containerd\'s Unimplemented message, and leaves no archive', async () => {
    const r = await request(`${url}/checkpoint/nodelet-test/cp-target/worker?timeout=10`, { method: 'POST', ...tls });
    expect(r.status).toBe(500);
    expect(r.json()).toEqual({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      reason: 'InternalError',
      code: 500,
      message: 'checkpointing of nodelet-test/cp-target/worker failed (CheckpointContainer: rpc error: code = Unimplemented desc = method CheckpointContainer not implemented)',
    });
    expect(await fsp.readdir(path.join(rootDir, 'checkpoints'))).toEqual([]);
  });

  it('answers 500 for a container in the spec that is not running', async () => {
    const containers = await cri.listContainers({ labelSelector: { 'io.kubernetes.pod.uid': uid } });
    await cri.stopContainer(containers[0]!.id, 0);
    const r = await request(`${url}/checkpoint/nodelet-test/cp-target/worker`, { method: 'POST', ...tls });
    expect(r.status).toBe(500);
    expect(r.json()).toMatchObject({ message: 'checkpointing of nodelet-test/cp-target/worker failed (container "worker" of pod "nodelet-test/cp-target" is not running)' });
  });
});
