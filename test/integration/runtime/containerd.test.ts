/**
 * containerd-only behaviours: a runtime that goes away and comes back on the same socket
 * (the same client recovers; health reports it), and CheckpointContainer's answer.
 *
 * The restart uses a containerd of its own (its own base directory under the temporary
 * directory), so stopping it never disturbs the shared one other test files use.
 */
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { realClock } from '../../../src/clock.js';
import { isNodeletError } from '../../../src/errors.js';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import { RuntimeHealth } from '../../../src/runtime/health.js';
import { ensureContainerd, stopContainerd } from '../../helpers/containerd.js';
import { rejection } from '../../helpers/errors.js';

describe('containerd restart on the same socket', () => {
  let dir: string;
  let client: CriClient | undefined;

  beforeAll(async () => {
    dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-ctrd-'));
  });

  afterAll(async () => {
    client?.close();
    if (dir) {
      await stopContainerd({ dir });
      await fsp.rm(dir, { recursive: true, force: true });
    }
  });

  it('fails fast with UNAVAILABLE while containerd is stopped, then works again with the same client', async () => {
    const { endpoint } = await ensureContainerd({ dir });
    expect(endpoint).toBe(`unix://${dir}/containerd.sock`);
    client = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 10_000 });
    const health = new RuntimeHealth({ runtime: client, clock: realClock });
    expect((await client.version()).runtimeName).toBe('containerd');
    // scripts/containerd.sh writes the pod network's CNI config: network ready too.
    expect(await health.syncOnce()).toMatchObject({ runtimeReady: true, networkReady: true, reason: 'ContainerRuntimeReady', runtimeName: 'containerd' });

    await stopContainerd({ dir });
    const t0 = Date.now();
    const err = await rejection(client.version());
    // Not the 10 s deadline: a dead socket is reported at once.
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(err.code).toBe('UNAVAILABLE');
    expect(err.message).toMatch(/^Version: rpc error: code = Unavailable desc = /);
    const down = await health.syncOnce();
    expect(down).toMatchObject({ runtimeReady: false, networkReady: false, reason: 'ContainerRuntimeDown', runtimeName: 'containerd' });
    expect(down.message).toMatch(/^container runtime is down: Status: rpc error: code = Unavailable/);

    await ensureContainerd({ dir });
    // Reconnect backoff is capped at ~1 s: the same client must answer within a few seconds.
    const until = Date.now() + 5000;
    let version: string | undefined;
    while (!version) {
      try {
        version = (await client.version()).runtimeVersion;
      } catch (e) {
        if (!isNodeletError(e, 'UNAVAILABLE') || Date.now() > until) throw e;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    expect(version).toMatch(/\S/);
    expect(await health.syncOnce()).toMatchObject({ runtimeReady: true, networkReady: true, reason: 'ContainerRuntimeReady' });
  });
});

describe('containerd CheckpointContainer', () => {
  it('answers UNIMPLEMENTED with the runtime message kept', async () => {
    const { endpoint } = await ensureContainerd();
    const client = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 10_000 });
    try {
      const err = await rejection(client.checkpointContainer({ containerId: 'a'.repeat(64), location: path.join(os.tmpdir(), 'never.tar'), timeoutSec: 0 }));
      expect(err.code).toBe('UNIMPLEMENTED');
      expect(err.message).toBe('CheckpointContainer: rpc error: code = Unimplemented desc = method CheckpointContainer not implemented');
      expect(err.details).toMatchObject({ grpcCode: 12, runtimeMessage: 'method CheckpointContainer not implemented' });
    } finally {
      client.close();
    }
  });
});
