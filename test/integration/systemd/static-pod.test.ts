/**
 * The quick-start static pod under a systemd-managed nodelet, with the project's containerd
 * socket bound into the box: the pod runs, and `systemctl restart nodelet` leaves it
 * running with the same container ID (the container belongs to containerd's shim, not to
 * nodelet's cgroup; the new nodelet adopts it).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import { ensureContainerd } from '../../helpers/containerd.js';
import { bootBox, projectRoot, type Box } from '../../systemd/harness.js';
import { installNodelet, testConfig, unitShow, waitActive, waitUntil } from '../../systemd/nodelet-box.js';

/** A containerd of this test's own: the box's nodelet removes runtime pods it does not want. */
const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-sd';
const MANIFESTS = '/etc/kubernetes/manifests';

let box: Box;
let cri: CriClient;
let logsDir: string;

beforeAll(async () => {
  const { endpoint } = await ensureContainerd({ dir: CONTAINERD_DIR });
  const sock = endpoint.slice('unix://'.length);
  cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 10_000 });
  await removeAllPods(); // whatever an interrupted earlier run left
  // containerd (on the host) writes the container logs where nodelet (in the box) says:
  // the same path on both sides.
  logsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-sd-logs-'));
  box = await bootBox({ binds: [{ host: sock }, { host: logsDir }] });
  await installNodelet(box, { config: testConfig([`containerRuntimeEndpoint: ${endpoint}`, `staticPodPath: ${MANIFESTS}`, `podLogsDir: ${logsDir}`]) });
  await box.writeFile(`${MANIFESTS}/hello.yaml`, fs.readFileSync(path.join(projectRoot, 'examples/static-pods/hello.yaml'), 'utf8'));
});

afterAll(async () => {
  await box?.poweroff();
  // The pod outlives nodelet by design; remove it from this test's containerd directly
  // (nodelet would wait out the pod's 30 s grace period: its shell ignores SIGTERM).
  if (cri) {
    await removeAllPods();
    cri.close();
  }
  if (logsDir) fs.rmSync(logsDir, { recursive: true, force: true });
});

async function removeAllPods(): Promise<void> {
  for (const s of await cri.listPodSandbox()) {
    if (!s.labels['io.kubernetes.pod.uid']) continue;
    await cri.stopPodSandbox(s.id).catch(() => undefined);
    await cri.removePodSandbox(s.id);
  }
}

async function helloContainers() {
  return (await cri.listContainers()).filter((c) => c.labels['io.kubernetes.pod.name']?.startsWith('hello-') && c.labels['io.kubernetes.container.name'] === 'hello');
}

describe('the quick-start static pod under systemd', () => {
  it('runs, and survives systemctl restart nodelet with the same container ID', async () => {
    const t0 = Date.now();
    await box.run(['systemctl', 'start', 'nodelet']);
    const firstPid = await waitActive(box, 'nodelet');
    const running = await waitUntil('the hello container to run', async () => {
      const cs = (await helloContainers()).filter((c) => c.state === 'CONTAINER_RUNNING');
      return cs.length === 1 ? cs[0] : undefined;
    }, 30_000);
    console.log(`[systemd] start to running pod: ${Date.now() - t0} ms`);
    expect(running.labels['io.kubernetes.pod.namespace']).toBe('default');
    const status = await unitShow(box, 'nodelet', ['StatusText']);
    expect(status.StatusText).toMatch(/^standalone; node .*; runtime unix:\/\/.*: containerd .* ready; 1 pods$/);

    await box.run(['systemctl', 'restart', 'nodelet']);
    const secondPid = await waitActive(box, 'nodelet');
    expect(secondPid).not.toBe(firstPid);
    // Several relists of the new nodelet later: still the very same container, nothing new.
    await new Promise((r) => setTimeout(r, 4000));
    const after = await helloContainers();
    expect(after.map((c) => [c.id, c.state])).toEqual([[running.id, 'CONTAINER_RUNNING']]);
    const adopted = await box.run(['journalctl', '--no-pager', '-o', 'cat', '-u', 'nodelet', `_PID=${secondPid}`]);
    expect(adopted).not.toMatch(/container started/);
    expect(adopted).toMatch(/pod is Running/);
  });
});
