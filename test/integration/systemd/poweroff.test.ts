/**
 * Graceful node shutdown under a real systemd 252 with systemd-logind: the box runs the
 * shipped unit with `shutdownGracePeriod: 20s` and `shutdownGracePeriodCriticalPods: 8s`, and
 * two static pods on this test's own containerd (socket bound into the box): `regular` and
 * `critical` (priorityClassName system-node-critical). Before the poweroff: logind's
 * InhibitDelayMaxSec was raised to 20 s through the kubelet's logind.conf.d drop-in, and
 * nodelet holds a shutdown delay inhibitor. Then `systemctl poweroff` in the box, and
 * afterwards (the box is gone; its root dir and journal were bound from the host):
 * - the state file `<root-dir>/graceful_node_shutdown_state` has a start and an end time,
 *   the end within the 20 s grace period of the start;
 * - containerd says the regular pod's container ended before the critical one's (the regular
 *   pod takes 2 s to stop after SIGTERM, the critical one stops at once: stopped together,
 *   the critical one would end first), and both between the state's start and end;
 * - nodelet's journal says it stopped the regular pod (grace 12 s) before the critical one
 *   (grace 8 s), then released the inhibitor.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCriClient, type CriClient } from '../../../src/runtime/cri-client.js';
import { ensureContainerd } from '../../helpers/containerd.js';
import { bootBox, type Box } from '../../systemd/harness.js';
import { installNodelet, testConfig, testDropIn, waitActive, waitUntil } from '../../systemd/nodelet-box.js';

/** A containerd of this test's own: the box's nodelet removes runtime pods it does not want. */
const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-poweroff';
const MANIFESTS = '/etc/kubernetes/manifests';

let box: Box | undefined;
let cri: CriClient;
let tmp: string;
let rootDir: string;
let journalDir: string;
let logsDir: string;

function pod(name: string, extra: string[], stopScript: string): string {
  return [
    'apiVersion: v1',
    'kind: Pod',
    `metadata: {name: ${name}}`,
    'spec:',
    '  hostNetwork: true',
    ...extra,
    '  containers:',
    `    - name: ${name}`,
    '      image: docker.io/local/busybox:latest',
    '      imagePullPolicy: IfNotPresent',
    '      command: ["/bin/sh", "-c"]',
    // PID 1 ignores SIGTERM unless it traps it: each pod says how it stops.
    `      args: ["trap '${stopScript}' TERM; echo up; while true; do sleep 0.2; done"]`,
    '',
  ].join('\n');
}

beforeAll(async () => {
  const { endpoint } = await ensureContainerd({ dir: CONTAINERD_DIR });
  const sock = endpoint.slice('unix://'.length);
  cri = createCriClient({ runtimeEndpoint: endpoint, requestTimeoutMs: 10_000 });
  await removeAllPods(); // whatever an interrupted earlier run left
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-poweroff-'));
  // Bound from the host: the box is volatile, and these must outlive its poweroff.
  rootDir = path.join(tmp, 'root');
  journalDir = path.join(tmp, 'journal');
  logsDir = path.join(tmp, 'pod-logs');
  for (const d of [rootDir, journalDir, logsDir]) fs.mkdirSync(d, { recursive: true });
  box = await bootBox({ binds: [{ host: sock }, { host: rootDir }, { host: logsDir }, { host: journalDir, box: '/var/log/journal' }] });
  // journald writes to /var/log/journal from the flush on (it existed at boot): make sure it did.
  await box.run(['journalctl', '--flush']);
  await installNodelet(box, {
    config: testConfig([`containerRuntimeEndpoint: ${endpoint}`, `staticPodPath: ${MANIFESTS}`, `podLogsDir: ${logsDir}`, 'shutdownGracePeriod: 20s', 'shutdownGracePeriodCriticalPods: 8s']),
    dropIn: testDropIn([`--root-dir=${rootDir}`]),
  });
  await box.writeFile(`${MANIFESTS}/regular.yaml`, pod('regular', [], 'sleep 2; exit 0'));
  await box.writeFile(`${MANIFESTS}/critical.yaml`, pod('critical', ['  priorityClassName: system-node-critical'], 'exit 0'));
}, 600_000);

afterAll(async () => {
  await box?.poweroff(40_000).catch(() => undefined);
  if (cri) {
    await removeAllPods().catch(() => undefined);
    cri.close();
  }
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

async function removeAllPods(): Promise<void> {
  for (const s of await cri.listPodSandbox()) {
    if (!s.labels['io.kubernetes.pod.uid']) continue;
    await cri.stopPodSandbox(s.id).catch(() => undefined);
    await cri.removePodSandbox(s.id);
  }
}

async function containerOf(podName: string) {
  const cs = (await cri.listContainers()).filter((c) => c.labels['io.kubernetes.pod.name']?.startsWith(`${podName}-`));
  return cs.length === 1 ? cs[0] : undefined;
}

describe('systemctl poweroff with shutdownGracePeriod', () => {
  it('stops the regular pod, then the critical one, within the grace period, and records it', async () => {
    const b = box!;
    await b.run(['systemctl', 'start', 'nodelet']);
    await waitActive(b, 'nodelet');
    for (const name of ['regular', 'critical']) {
      await waitUntil(`the ${name} container to run`, async () => (await containerOf(name))?.state === 'CONTAINER_RUNNING', 60_000);
    }
    // logind was told to wait long enough (the kubelet's drop-in, then a reload), and the lock is held.
    const delay = await waitUntil('the inhibitor to be held', async () => {
      const list = await b.run(['systemd-inhibit', '--list', '--no-pager', '--no-legend']);
      return /nodelet.*shutdown.*delay/.test(list) ? list : undefined;
    }, 30_000);
    expect(delay).toMatch(/nodelet needs time to handle node shutdown/);
    expect(await b.readFile('/etc/systemd/logind.conf.d/99-kubelet.conf')).toBe('# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=20\n');
    expect((await b.run(['busctl', 'get-property', 'org.freedesktop.login1', '/org/freedesktop/login1', 'org.freedesktop.login1.Manager', 'InhibitDelayMaxUSec'])).trim()).toBe('t 20000000');

    const t0 = Date.now();
    await b.poweroff(40_000);
    box = undefined;
    const offMs = Date.now() - t0;
    console.log(`[systemd] systemctl poweroff -> box gone in ${offMs} ms`);

    // The state file, as the kubelet writes it.
    const state = JSON.parse(fs.readFileSync(path.join(rootDir, 'graceful_node_shutdown_state'), 'utf8')) as { startTime: string; endTime: string };
    expect(Object.keys(state).sort()).toEqual(['endTime', 'startTime']);
    const start = Date.parse(state.startTime);
    const end = Date.parse(state.endTime);
    expect(start).toBeGreaterThanOrEqual(t0 - 1000);
    expect(end).toBeGreaterThan(start);
    expect(end - start).toBeLessThan(20_000);
    console.log(`[systemd] graceful node shutdown took ${end - start} ms`);

    // The runtime's word: both containers ended, the regular one first, both within [start, end].
    const regular = await cri.containerStatus((await containerOf('regular'))!.id);
    const critical = await cri.containerStatus((await containerOf('critical'))!.id);
    expect([regular.state, critical.state]).toEqual(['CONTAINER_EXITED', 'CONTAINER_EXITED']);
    const ms = (ns: number) => ns / 1e6;
    expect(ms(regular.finishedAt)).toBeLessThanOrEqual(ms(critical.finishedAt));
    for (const c of [regular, critical]) {
      expect(ms(c.finishedAt)).toBeGreaterThanOrEqual(start - 50);
      expect(ms(c.finishedAt)).toBeLessThanOrEqual(end + 50);
      expect(c.exitCode).toBe(0); // stopped by SIGTERM within its grace, not killed
    }
    console.log(`[systemd] regular ended ${Math.round(ms(regular.finishedAt) - start)} ms after the start, critical ${Math.round(ms(critical.finishedAt) - start)} ms`);

    // nodelet's journal (persisted to the host): the order, the grace periods, the release.
    const out = execFileSync('journalctl', ['--directory', journalDir, '--no-pager', '-o', 'cat', 'SYSLOG_IDENTIFIER=nodelet'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    const lines = out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { msg: string });
    const idx = (re: RegExp) => lines.findIndex((l) => re.test(l.msg));
    const detected = idx(/^node shutdown detected/);
    const stopRegular = idx(/^shutdown: stopping pod default\/regular-\S+ with grace period 12 s$/);
    const stopCritical = idx(/^shutdown: stopping pod default\/critical-\S+ with grace period 8 s$/);
    const done = idx(/^graceful node shutdown done/);
    expect({ detected, stopRegular, stopCritical, done }).toMatchObject({ detected: expect.any(Number), stopRegular: expect.any(Number) });
    expect(detected).toBeGreaterThanOrEqual(0);
    expect(stopRegular).toBeGreaterThan(detected);
    expect(stopCritical).toBeGreaterThan(stopRegular);
    expect(done).toBeGreaterThan(stopCritical);
  }, 180_000);
});
