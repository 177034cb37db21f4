/**
 * CriPodRuntime (the pod manager's runtime port) over the real CRI client against the test CRI
 * server, in a temp root dir: what the runtime-port integration tests stand on.
 */
import fs from 'node:fs';
import { CriPodRuntime, type CriPodRuntimeOptions } from '../../src/pods/cri/cri-pod-runtime.js';
import { createCriClient, type CriClient } from '../../src/runtime/cri-client.js';
import { startFakeRuntime, type FakeRuntime } from '../cri/fake-runtime.js';
import { tempDir } from './nodelet.js';

export interface FakeCriClient {
  /** The test CRI server. */
  cri: FakeRuntime;
  /** A CRI client to it (5 s a request). */
  client: CriClient;
  /** Closes the client and stops the server. */
  close(): Promise<void>;
}

export async function startFakeCriClient(): Promise<FakeCriClient> {
  const cri = await startFakeRuntime();
  const client = createCriClient({ runtimeEndpoint: `unix://${cri.socketPath}`, requestTimeoutMs: 5000 });
  return {
    cri,
    client,
    async close() {
      client.close();
      await cri.stop();
    },
  };
}

/** A CriPodRuntime over `client` rooted at `dir`: pod logs in `<dir>/logs`, no default seccomp profile; `more` adds options. */
export function podRuntimeIn(client: CriClient, dir: string, more: Partial<CriPodRuntimeOptions> = {}): CriPodRuntime {
  return new CriPodRuntime({ cri: client, rootDir: dir, podLogsDir: `${dir}/logs`, seccompDefault: false, ...more });
}

export interface FakeCriPodRuntime extends FakeCriClient {
  /** The runtime's root dir, a temp folder (`prefix`*); `close` removes it too. */
  dir: string;
  rt: CriPodRuntime;
}

/** The test CRI server, a client to it, and podRuntimeIn(client, a new temp dir, more). */
export async function startFakeCriPodRuntime(prefix: string, more: Partial<CriPodRuntimeOptions> = {}): Promise<FakeCriPodRuntime> {
  const fake = await startFakeCriClient();
  const dir = tempDir(prefix);
  return {
    ...fake,
    dir,
    rt: podRuntimeIn(fake.client, dir, more),
    async close() {
      await fake.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
