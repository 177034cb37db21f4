/**
 * The CRI behaviours nodelet relies on, as ONE suite run against both the test CRI server
 * (test/cri/fake-runtime.ts) and a real containerd (scripts/containerd.sh). When the fake
 * passes and containerd fails (or the reverse), the fake lies and the unit tests built on
 * it cannot be trusted.
 */
import crypto from 'node:crypto';
import fsp from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import type { ContainerConfig, ContainerStatus, PodSandboxConfig } from '../../../src/runtime/types.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { BUSYBOX_IMAGE, ensureContainerd } from '../../helpers/containerd.js';
import { rejection } from '../../helpers/errors.js';
import { podNetwork, removePodNetwork } from '../../helpers/pod-network.js';

interface Backend {
  name: string;
  start(): Promise<{ endpoint: string; stop(): Promise<void> }>;
}

const backends: Backend[] = [
  {
    name: 'fake CRI server',
    async start() {
      // Ready and network ready, as containerd with scripts/containerd.sh's CNI config.
      const fake: FakeRuntime = await startFakeRuntime();
      return { endpoint: fake.endpoint, stop: () => fake.stop() };
    },
  },
  {
    name: 'containerd',
    async start() {
      const { endpoint } = await ensureContainerd();
      // Shared with other test files: never stopped here. The bridge and IPAM state the
      // pod-network sandbox left go once no sandbox of anyone is left on this containerd.
      return {
        endpoint,
        stop: async () => {
          const c = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 10_000 });
          try {
            if ((await c.listPodSandbox()).length === 0) await removePodNetwork(podNetwork('/var/lib/nodelet-dev/containerd'));
          } finally {
            c.close();
          }
        },
      };
    },
  },
];

/** Bounded polling on real time: a real runtime's containers change state by themselves. */
async function waitForStatus(client: CriClient, id: string, pred: (s: ContainerStatus) => boolean, timeoutMs = 10_000): Promise<ContainerStatus> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const s = await client.containerStatus(id);
    if (pred(s)) return s;
    if (Date.now() > until) throw new Error(`container ${id} did not reach the expected state in ${timeoutMs} ms; last: ${s.state} exit ${s.exitCode}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe.each(backends)('CRI contract: $name', (backend) => {
  let endpoint: string;
  let stopBackend: () => Promise<void>;
  let client: CriClient;
  let logDir: string;
  const runId = crypto.randomUUID();
  const created: string[] = [];

  beforeAll(async () => {
    const b = await backend.start();
    endpoint = b.endpoint;
    stopBackend = b.stop;
    client = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 30_000 });
    logDir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-contract-logs-'));
  });

  afterEach(async () => {
    // Every sandbox a test made goes, with its containers, whatever the test's outcome.
    for (const id of created.splice(0)) {
      await client.stopPodSandbox(id).catch(() => {});
      await client.removePodSandbox(id);
    }
  });

  afterAll(async () => {
    client?.close();
    await stopBackend?.();
    if (logDir) await fsp.rm(logDir, { recursive: true, force: true });
  });

  function sandboxConfig(uid: string, attempt = 0): PodSandboxConfig {
    return {
      metadata: { name: 'contract', uid, namespace: 'nodelet-test', attempt },
      logDirectory: path.join(logDir, uid),
      labels: { 'io.kubernetes.pod.uid': uid, 'nodelet.test/run': runId },
      annotations: { 'nodelet.test/purpose': 'contract' },
      // hostNetwork: no hostname (containerd refuses one without a private UTS namespace).
      linux: { securityContext: { namespaceOptions: { network: 'NODE', pid: 'CONTAINER', ipc: 'POD' } } },
    };
  }

  function containerConfig(name: string, command: string[], extra: Partial<ContainerConfig> = {}): ContainerConfig {
    return {
      metadata: { name, attempt: 0 },
      image: { image: BUSYBOX_IMAGE },
      command,
      labels: { 'io.kubernetes.container.name': name, 'nodelet.test/run': runId },
      annotations: { 'io.kubernetes.container.restartCount': '0' },
      logPath: `${name}/0.log`,
      linux: { securityContext: { namespaceOptions: { network: 'NODE', pid: 'CONTAINER', ipc: 'POD' } } },
      ...extra,
    };
  }

  async function runSandbox(uid = crypto.randomUUID(), attempt = 0): Promise<{ id: string; config: PodSandboxConfig }> {
    const config = sandboxConfig(uid, attempt);
    const id = await client.runPodSandbox(config);
    created.push(id);
    return { id, config };
  }

  it('answers Version and Status with the runtime name and the RuntimeReady/NetworkReady conditions', async () => {
    const v = await client.version();
    expect(v.runtimeName).toMatch(/\S/);
    expect(v.runtimeVersion).toMatch(/\S/);
    expect(v.runtimeApiVersion).toBe('v1');
    const s = await client.status();
    const rt = s.conditions.find((c) => c.type === 'RuntimeReady');
    const netCond = s.conditions.find((c) => c.type === 'NetworkReady');
    expect(rt).toMatchObject({ status: true });
    // scripts/containerd.sh writes a CNI config: the pod network is ready.
    expect(netCond).toEqual({ type: 'NetworkReady', status: true, reason: '', message: '' });
  });

  it('takes the pod CIDR with UpdateRuntimeConfig (empty and dual-stack too) and refuses a malformed one naming it', async () => {
    await expect(client.updateRuntimeConfig('10.244.250.0/24')).resolves.toBeUndefined();
    await expect(client.updateRuntimeConfig('')).resolves.toBeUndefined();
    await expect(client.updateRuntimeConfig('10.244.250.0/24,fd00:10:244::/64')).resolves.toBeUndefined();
    const err = await rejection(client.updateRuntimeConfig('not-a-cidr'));
    expect(err.message).toBe('UpdateRuntimeConfig: rpc error: code = Unknown desc = get routes: invalid CIDR address: not-a-cidr');
  });

  it('gives a sandbox with its own network an IPv4 address in PodSandboxStatus, and none to a hostNetwork one', async () => {
    const uid = crypto.randomUUID();
    const config: PodSandboxConfig = {
      ...sandboxConfig(uid),
      hostname: 'contract',
      linux: { securityContext: { namespaceOptions: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' } } },
    };
    const id = await client.runPodSandbox(config);
    created.push(id);
    const { network } = await client.podSandboxStatus(id);
    expect(net.isIPv4(network?.ip ?? '')).toBe(true);
    expect(network?.additionalIps).toEqual([]);
    const { id: hostId } = await runSandbox();
    expect((await client.podSandboxStatus(hostId)).network?.ip ?? '').toBe('');
  });

  it('runs a hostNetwork sandbox and a container through create, start, list, status, stop and remove', async () => {
    const { id: sandboxId, config } = await runSandbox();
    const sbStatus = await client.podSandboxStatus(sandboxId);
    expect(sbStatus).toMatchObject({ id: sandboxId, state: 'SANDBOX_READY', metadata: config.metadata, labels: config.labels, annotations: config.annotations });
    expect(sbStatus.createdAt).toBeGreaterThan(0);

    const cfg = containerConfig('worker', ['/bin/sh', '-c', 'while :; do sleep 1; done']);
    const cid = await client.createContainer(sandboxId, cfg, config);
    expect(cid).toMatch(/^[0-9a-f]{64}$/);
    expect((await client.containerStatus(cid)).state).toBe('CONTAINER_CREATED');
    await client.startContainer(cid);

    const listed = await client.listContainers({ labelSelector: { 'io.kubernetes.container.name': 'worker', 'nodelet.test/run': runId } });
    expect(listed.map((c) => ({ id: c.id, sandbox: c.podSandboxId, name: c.metadata.name, state: c.state }))).toEqual([
      { id: cid, sandbox: sandboxId, name: 'worker', state: 'CONTAINER_RUNNING' },
    ]);
    const sandboxes = await client.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.uid': config.metadata.uid }, state: 'SANDBOX_READY' });
    expect(sandboxes.map((s) => s.id)).toEqual([sandboxId]);

    const running = await client.containerStatus(cid);
    expect(running).toMatchObject({ id: cid, state: 'CONTAINER_RUNNING', exitCode: 0, finishedAt: 0, labels: cfg.labels, annotations: cfg.annotations, metadata: cfg.metadata });
    expect(running.startedAt).toBeGreaterThan(0);
    expect(running.imageRef).toMatch(/^sha256:[0-9a-f]{64}$/);

    // Grace 0: killed at once; the shell dies of SIGKILL.
    await client.stopContainer(cid, 0);
    const exited = await waitForStatus(client, cid, (s) => s.state === 'CONTAINER_EXITED');
    expect(exited).toMatchObject({ state: 'CONTAINER_EXITED', exitCode: 137, reason: 'Error' });
    expect(exited.finishedAt).toBeGreaterThanOrEqual(exited.startedAt);

    await client.removeContainer(cid);
    expect((await rejection(client.containerStatus(cid))).code).toBe('NOT_FOUND');
    expect(await client.listContainers({ podSandboxId: sandboxId })).toEqual([]);

    await client.stopPodSandbox(sandboxId);
    expect((await client.podSandboxStatus(sandboxId)).state).toBe('SANDBOX_NOTREADY');
    await client.removePodSandbox(sandboxId);
    created.splice(created.indexOf(sandboxId), 1);
    expect(await client.listPodSandbox({ labelSelector: { 'io.kubernetes.pod.uid': config.metadata.uid } })).toEqual([]);
  });

  it('reserves the sandbox name: a second sandbox with the same metadata fails until a new attempt', async () => {
    const uid = crypto.randomUUID();
    await runSandbox(uid, 0);
    const err = await rejection(client.runPodSandbox(sandboxConfig(uid, 0)));
    expect(err.code).toBe('CONFLICT');
    expect(err.details.grpcCodeName).toBe('Unknown');
    expect(err.message).toMatch(/^RunPodSandbox: rpc error: code = Unknown desc = .*name "contract_nodelet-test_[0-9a-f-]+_0" is reserved for "[0-9a-f]{64}"/);
    const { id: second } = await runSandbox(uid, 1);
    expect((await client.podSandboxStatus(second)).metadata.attempt).toBe(1);
  });

  it('answers NOT_FOUND with containerd\'s words to Stop and Status of unknown IDs, and OK to Remove of unknown IDs', async () => {
    const unknown = crypto.randomBytes(32).toString('hex');
    const failures = await Promise.all([
      rejection(client.stopContainer(unknown, 0)),
      rejection(client.stopPodSandbox(unknown)),
      rejection(client.containerStatus(unknown)),
      rejection(client.podSandboxStatus(unknown)),
      rejection(client.createContainer(unknown, containerConfig('x', ['true']), sandboxConfig(crypto.randomUUID()))),
    ]);
    expect(failures.map((e) => [e.code, e.message])).toEqual([
      ['NOT_FOUND', `StopContainer: rpc error: code = NotFound desc = an error occurred when try to find container "${unknown}": not found`],
      ['NOT_FOUND', `StopPodSandbox: rpc error: code = NotFound desc = an error occurred when try to find sandbox "${unknown}": not found`],
      ['NOT_FOUND', `ContainerStatus: rpc error: code = NotFound desc = an error occurred when try to find container "${unknown}": not found`],
      ['NOT_FOUND', 'PodSandboxStatus: rpc error: code = NotFound desc = an error occurred when try to find sandbox: not found'],
      ['NOT_FOUND', `CreateContainer: rpc error: code = NotFound desc = failed to find sandbox id "${unknown}": not found`],
    ]);
    await expect(client.removeContainer(unknown)).resolves.toBeUndefined();
    await expect(client.removePodSandbox(unknown)).resolves.toBeUndefined();
  });

  it('answers ImageStatus of a missing image with no image, and of a present one with its tags', async () => {
    expect(await client.imageStatus(`docker.io/local/absent-${runId}:latest`)).toBeUndefined();
    const img = await client.imageStatus(BUSYBOX_IMAGE);
    expect(img?.repoTags).toContain(BUSYBOX_IMAGE);
    expect(img?.id).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(img!.size).toBeGreaterThan(0);
    expect((await client.listImages()).map((i) => i.id)).toContain(img!.id);
  });

  it('asks the registry on PullImage even for a present image, and fails without one', async () => {
    const err = await rejection(client.pullImage(BUSYBOX_IMAGE));
    expect(err.code).toBe('INTERNAL');
    expect(err.message).toMatch(
      /^PullImage: rpc error: code = Unknown desc = failed to pull and unpack image "docker\.io\/local\/busybox:latest": failed to resolve reference "docker\.io\/local\/busybox:latest": failed to do request: Head "https:\/\/registry-1\.docker\.io\/v2\/local\/busybox\/manifests\/latest": /,
    );
    // The present image is untouched by the failed pull.
    expect((await client.imageStatus(BUSYBOX_IMAGE))?.repoTags).toContain(BUSYBOX_IMAGE);
  });

  it('fails CreateContainer of an absent image with NOT_FOUND', async () => {
    const { id: sandboxId, config } = await runSandbox();
    const image = `docker.io/local/absent-${runId}:latest`;
    const err = await rejection(client.createContainer(sandboxId, containerConfig('noimage', ['true'], { image: { image } }), config));
    expect([err.code, err.message]).toEqual(['NOT_FOUND', `CreateContainer: rpc error: code = NotFound desc = failed to resolve image "${image}": not found`]);
  });

  it('reports the exit code of a container that exits by itself', async () => {
    const { id: sandboxId, config } = await runSandbox();
    const cid = await client.createContainer(sandboxId, containerConfig('exits', ['/bin/sh', '-c', 'exit 3']), config);
    await client.startContainer(cid);
    const s = await waitForStatus(client, cid, (st) => st.state === 'CONTAINER_EXITED');
    expect(s).toMatchObject({ state: 'CONTAINER_EXITED', exitCode: 3, reason: 'Error' });
    expect(s.finishedAt).toBeGreaterThan(0);
  });

  it('ExecSync in a running container answers the command\'s exit code (a failing command is an answer, not an error); in an exited one it fails', async () => {
    const { id: sandboxId, config } = await runSandbox();
    const cid = await client.createContainer(sandboxId, containerConfig('execd', ['sleep', '3600']), config);
    await client.startContainer(cid);
    await waitForStatus(client, cid, (st) => st.state === 'CONTAINER_RUNNING');
    expect((await client.execSync(cid, ['true'], 5)).exitCode).toBe(0);
    expect((await client.execSync(cid, ['/bin/sh', '-c', 'exit 7'], 5)).exitCode).toBe(7);
    const r = await client.execSync(cid, ['false'], 0);
    expect(r.exitCode).toBe(1);
    expect(Buffer.isBuffer(r.stdout) && Buffer.isBuffer(r.stderr)).toBe(true);
    await client.stopContainer(cid, 0);
    await waitForStatus(client, cid, (st) => st.state === 'CONTAINER_EXITED');
    const err = await rejection(client.execSync(cid, ['true'], 5));
    expect(err.code).not.toBe('NOT_FOUND');
  });

  it('fails CreateContainer for a missing Localhost seccomp profile with INTERNAL and the runtime message', async () => {
    const { id: sandboxId, config } = await runSandbox();
    const profile = path.join(logDir, `missing-${crypto.randomUUID()}.json`);
    const cfg = containerConfig('seccomp', ['/bin/sh', '-c', 'sleep 1'], {
      linux: {
        securityContext: {
          namespaceOptions: { network: 'NODE', pid: 'CONTAINER', ipc: 'POD' },
          seccomp: { profileType: 'Localhost', localhostRef: profile },
        },
      },
    });
    const err = await rejection(client.createContainer(sandboxId, cfg, config));
    expect(err.code).toBe('INTERNAL');
    expect(err.details).toMatchObject({ method: 'CreateContainer', grpcCode: 2, grpcCodeName: 'Unknown' });
    expect(err.message).toBe(
      `CreateContainer: rpc error: code = Unknown desc = failed to create containerd container: cannot load seccomp profile "${profile}": open ${profile}: no such file or directory`,
    );
  });
});
