/**
 * The CRI client against the in-process test CRI server over a real unix socket:
 * deadlines, fail-fast when the socket is gone, reconnect after a restart, error mapping,
 * and CheckpointContainer writing a real archive. Real sockets and real gRPC deadlines:
 * integration tests by nature, moved from the unit project (its pure cases stay there).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import tar from 'tar-stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isNodeletError } from '../../../src/errors.js';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import type { PodSandboxConfig } from '../../../src/runtime/types.js';
import { normalizeImageRef, startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { rejection } from '../../helpers/errors.js';

async function tarEntries(file: string): Promise<{ name: string; size: number }[]> {
  const out: { name: string; size: number }[] = [];
  const ex = tar.extract();
  ex.on('entry', (h, stream, next) => {
    let size = 0;
    stream.on('data', (d: unknown) => {
      size += (d as Buffer).length;
    });
    stream.on('end', () => {
      out.push({ name: h.name, size });
      next();
    });
  });
  await new Promise<void>((resolve, reject) => {
    ex.on('finish', resolve);
    ex.on('error', reject);
    fs.createReadStream(file).on('error', reject).pipe(ex);
  });
  return out;
}

const sandbox = (uid = crypto.randomUUID()): PodSandboxConfig => ({
  metadata: { name: 'p', uid, namespace: 'default', attempt: 0 },
  labels: { 'io.kubernetes.pod.uid': uid },
  linux: { securityContext: { namespaceOptions: { network: 'NODE' } } },
});

describe('CRI client against the test CRI server', () => {
  let fake: FakeRuntime;
  let client: CriClient;
  let dir: string;

  beforeAll(async () => {
    fake = await startFakeRuntime({ pullable: ['docker.io/library/nginx:1.27'] });
    client = createCriClient({ runtimeEndpoint: fake.endpoint, requestTimeoutMs: 2000 });
    dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-cri-client-'));
  });
  afterEach(() => {
    for (const m of ['Version', 'Status', 'StopContainer', 'CheckpointContainer']) {
      fake.failWith(m, undefined);
      fake.setLatency(m, 0);
    }
    fake.checkpointDelayMs = 0;
  });
  afterAll(async () => {
    client?.close();
    await fake?.stop();
    await fsp.rm(dir, { recursive: true, force: true });
  });

  async function runningContainer(): Promise<string> {
    const cfg = sandbox();
    const sb = await client.runPodSandbox(cfg);
    const id = await client.createContainer(sb, { metadata: { name: 'c', attempt: 0 }, image: { image: 'local/busybox' }, command: ['sleep', '1000'] }, cfg);
    await client.startContainer(id);
    return id;
  }

  it('maps an injected runtime error per method, and only for the given number of calls', async () => {
    fake.failWith('Version', { code: status.UNAVAILABLE, message: 'runtime restarting', times: 1 });
    const err = await rejection(client.version());
    expect({ code: err.code, message: err.message }).toEqual({ code: 'UNAVAILABLE', message: 'Version: rpc error: code = Unavailable desc = runtime restarting' });
    expect((await client.version()).runtimeName).toBe('fake-cri');
  });

  it('gives up at the request deadline with DEADLINE_EXCEEDED', async () => {
    const slow = createCriClient({ runtimeEndpoint: fake.endpoint, requestTimeoutMs: 100 });
    try {
      fake.setLatency('Status', 400);
      const t0 = Date.now();
      const err = await rejection(slow.status());
      expect(err.code).toBe('DEADLINE_EXCEEDED');
      expect(Date.now() - t0).toBeLessThan(350);
    } finally {
      slow.close();
    }
  });

  it('extends the StopContainer deadline by the grace period it asks the runtime to wait', async () => {
    const id = await runningContainer();
    const quick = createCriClient({ runtimeEndpoint: fake.endpoint, requestTimeoutMs: 100 });
    try {
      fake.setLatency('StopContainer', 300);
      await quick.stopContainer(id, 1);
      expect(fake.callsOf('StopContainer').at(-1)!.request).toMatchObject({ containerId: id, timeout: 1 });
      expect((await quick.containerStatus(id)).state).toBe('CONTAINER_EXITED');
    } finally {
      quick.close();
    }
  });

  it('reports a container exit driven by the test API', async () => {
    const id = await runningContainer();
    fake.exitContainer(id, 42);
    expect(await client.containerStatus(id)).toMatchObject({ state: 'CONTAINER_EXITED', exitCode: 42, reason: 'Error' });
  });

  it("keeps the last unfiltered ListContainers answer for recentContainers(maxAge), not a filtered one, and only that long", async () => {
    const id = await runningContainer();
    const all = await client.listContainers();
    expect(all.map((c) => c.id)).toContain(id);
    expect(client.recentContainers!(60_000)).toBe(all);
    await client.listContainers({ id });
    expect(client.recentContainers!(60_000)).toBe(all);
    await new Promise((r) => setTimeout(r, 30));
    expect(client.recentContainers!(10)).toBeUndefined();
  });

  it('pulls only what a registry would have, even when the image is present', async () => {
    expect((await rejection(client.pullImage('local/busybox'))).code).toBe('INTERNAL');
    const err = await rejection(client.pullImage('example.invalid/nothing:1'));
    expect(err.code).toBe('INTERNAL');
    expect(err.message).toMatch(/^PullImage: rpc error: code = Unknown desc = failed to pull and unpack image "example.invalid\/nothing:1"/);
    const ref = await client.pullImage('nginx:1.27', sandbox());
    expect((await client.imageStatus('docker.io/library/nginx:1.27'))?.id).toBe(ref);
    await client.removeImage('nginx:1.27');
    await client.removeImage('nginx:1.27');
    expect(await client.imageStatus('nginx:1.27')).toBeUndefined();
    expect(normalizeImageRef('registry.local:5000/a/b')).toBe('registry.local:5000/a/b:latest');
  });

  it('checkpoints a running container into a real tar archive at the location', async () => {
    const id = await runningContainer();
    const location = path.join(dir, 'checkpoint-1.tar');
    await client.checkpointContainer({ containerId: id, location, timeoutSec: 7 });
    expect(fake.callsOf('CheckpointContainer').at(-1)!.request).toEqual({ containerId: id, location, timeout: 7 });
    const entries = await tarEntries(location);
    expect(entries.map((e) => e.name)).toEqual(['config.dump', 'spec.dump', 'checkpoint/pages-1.img', 'checkpoint/inventory.img']);
    expect(entries.find((e) => e.name === 'checkpoint/pages-1.img')!.size).toBe(64 * 1024);
  });

  it('fails a checkpoint slower than its own deadline with DEADLINE_EXCEEDED and leaves no archive', async () => {
    const id = await runningContainer();
    const location = path.join(dir, 'checkpoint-slow.tar');
    fake.checkpointDelayMs = 300;
    const err = await rejection(client.checkpointContainer({ containerId: id, location, timeoutSec: 0 }, { deadlineMs: 100 }));
    expect(err.code).toBe('DEADLINE_EXCEEDED');
    // Let the server finish its delay: it must notice the cancelled call and write nothing.
    await new Promise((r) => setTimeout(r, 400));
    expect(fs.existsSync(location)).toBe(false);
  });

  it('keeps the runtime message of an unimplemented checkpoint', async () => {
    fake.failWith('CheckpointContainer', { code: status.UNIMPLEMENTED, message: 'method CheckpointContainer not implemented' });
    const err = await rejection(client.checkpointContainer({ containerId: 'x', location: path.join(dir, 'n.tar'), timeoutSec: 0 }));
    expect(err.message).toBe('CheckpointContainer: rpc error: code = Unimplemented desc = method CheckpointContainer not implemented');
    expect(err.code).toBe('UNIMPLEMENTED');
  });

  it('fails fast with UNAVAILABLE while the socket is gone and recovers after a restart without a new client', async () => {
    const c = createCriClient({ runtimeEndpoint: fake.endpoint, requestTimeoutMs: 5000 });
    try {
      expect((await c.version()).runtimeName).toBe('fake-cri');
      await fake.kill();
      const t0 = Date.now();
      expect((await rejection(c.version())).code).toBe('UNAVAILABLE');
      expect(Date.now() - t0).toBeLessThan(1000);
      await fake.restart();
      const until = Date.now() + 3000;
      for (;;) {
        try {
          expect((await c.version()).runtimeName).toBe('fake-cri');
          break;
        } catch (e) {
          if (!isNodeletError(e, 'UNAVAILABLE') || Date.now() > until) throw e;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    } finally {
      c.close();
    }
  });

  it('fails calls after close() with CANCELLED', async () => {
    const c = createCriClient({ runtimeEndpoint: fake.endpoint, requestTimeoutMs: 1000 });
    c.close();
    c.close();
    expect((await rejection(c.version())).code).toBe('CANCELLED');
  });
});
