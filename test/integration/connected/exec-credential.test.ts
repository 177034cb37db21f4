/**
 * Credential plugins and kubeadm's registration flags (issue 29.5 and 29.6), with the built
 * nodelet against the test control plane on the test CRI server.
 *
 * The node's kubeconfig user is an `exec` plugin (a shell script the test writes) that prints
 * `tok-<n>`, n counting its runs, expiring 4 s later. The control plane knows every token but
 * the first (tokens for system:node:n-exec, as `addToken` registers them), so nodelet's first
 * requests are refused with 401: it runs the plugin again, once, and registers with the second
 * token. Afterwards the plugin runs again only when the token expires, not per request.
 *
 * The node is started with the flags kubeadm and the managed images pass (`--node-labels`,
 * `--register-with-taints`, `--provider-id`, `--cloud-provider=external`, `--node-ip`,
 * `--pod-infra-container-image`): the registered Node carries them.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Node } from 'kubernetes-types/core/v1.js';
import YAML from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEASES, NODES } from '../../../src/controlplane/client.js';
import { startFakeRuntime, type FakeRuntime } from '../../cri/fake-runtime.js';
import { eventually, runNodelet, startNodelet, type NodeletProcess } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { removeDir } from '../../helpers/cleanup.js';
import { connectedArgs, writeConnectedConfig } from '../../helpers/connected-config.js';

let cluster: TestCluster;
let cri: FakeRuntime;
let nodelet: NodeletProcess | undefined;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-exec-' });
  cri = await startFakeRuntime();
});

afterAll(async () => {
  if (nodelet) {
    nodelet.kill('SIGTERM');
    await nodelet.exited;
  }
  await cri?.stop();
  await cluster?.close();
  if (cluster) removeDir(cluster.dir);
});

/** A kubeconfig for the test control plane whose user is the exec plugin `plugin`. */
function execKubeconfig(file: string, plugin: string): void {
  cluster.cp.writeKubeconfig(file, { token: 'unused' });
  const doc = YAML.parse(fs.readFileSync(file, 'utf8')) as { users: Array<{ user: unknown }> };
  doc.users[0]!.user = { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: plugin, args: ['--cluster', 'test'], env: [{ name: 'TOKEN_PREFIX', value: 'tok' }], interactiveMode: 'Never', provideClusterInfo: true } };
  fs.writeFileSync(file, YAML.stringify(doc), { mode: 0o600 });
}

describe('a kubeconfig user with an exec credential plugin', () => {
  it('authenticates with the plugin token, runs it again after a 401 and at expiry only, and registers with kubeadm\'s flags', async () => {
    const dir = path.join(cluster.dir, 'n-exec');
    fs.mkdirSync(dir);
    const count = path.join(dir, 'runs');
    const info = path.join(dir, 'exec-info.json');
    const plugin = path.join(dir, 'plugin.sh');
    fs.writeFileSync(
      plugin,
      `#!/bin/sh
n=$(cat ${count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > ${count}
printf '%s' "$KUBERNETES_EXEC_INFO" > ${info}
exp=$(date -u -d @$(( $(date +%s) + 4 )) +%Y-%m-%dT%H:%M:%SZ)
echo "{\\"apiVersion\\":\\"client.authentication.k8s.io/v1\\",\\"kind\\":\\"ExecCredential\\",\\"status\\":{\\"token\\":\\"$TOKEN_PREFIX-$n\\",\\"expirationTimestamp\\":\\"$exp\\"}}"
`,
      { mode: 0o755 },
    );
    for (let i = 2; i <= 200; i++) cluster.cp.addToken(`tok-${i}`, 'system:node:n-exec', ['system:nodes']);
    const kubeconfig = path.join(dir, 'kubelet.conf');
    execKubeconfig(kubeconfig, plugin);
    await writeConnectedConfig(dir, cri.socketPath);
    nodelet = startNodelet(connectedArgs(dir, 'n-exec', kubeconfig, [
      '--cert-dir', path.join(dir, 'pki'),
      '--node-ip', '127.0.0.1',
      '--node-labels', 'node.kubernetes.io/pool=blue,example.com/team=ml',
      '--register-with-taints', 'dedicated=ml:NoSchedule',
      '--provider-id', 'external:///zone-a/n-exec',
      '--cloud-provider', 'external',
      '--pod-infra-container-image', 'registry.k8s.io/pause:3.10',
    ]));
    const node = await eventually(() => cluster.api.get<Node>(NODES, { name: 'n-exec' }).catch(() => undefined), 30_000);

    expect(node.metadata!.labels).toMatchObject({ 'kubernetes.io/hostname': 'n-exec', 'node.kubernetes.io/pool': 'blue', 'example.com/team': 'ml' });
    expect(node.metadata!.annotations).toMatchObject({ 'alpha.kubernetes.io/provided-node-ip': '127.0.0.1' });
    expect(node.spec!.providerID).toBe('external:///zone-a/n-exec');
    expect(node.spec!.taints).toEqual([
      { key: 'dedicated', value: 'ml', effect: 'NoSchedule' },
      { key: 'node.cloudprovider.kubernetes.io/uninitialized', value: 'true', effect: 'NoSchedule' },
    ]);
    // tok-1 was refused (401), the plugin ran once more and tok-2 registered the node.
    const runsAtRegistration = Number(fs.readFileSync(count, 'utf8'));
    expect(runsAtRegistration).toBe(2);
    expect(JSON.parse(fs.readFileSync(info, 'utf8'))).toMatchObject({ apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential', spec: { interactive: false, cluster: { server: cluster.cp.url } } });
    expect(nodelet.stdout).toMatch(/pod-infra-container-image is deprecated and ignored/);

    // Leases every second, status every second: dozens of requests in 9 s, but the plugin runs
    // only when its 4 s token expired (two or three more times), never per request.
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, 9_000));
    const runs = Number(fs.readFileSync(count, 'utf8'));
    expect(runs - runsAtRegistration).toBeGreaterThanOrEqual(1);
    expect(runs - runsAtRegistration).toBeLessThanOrEqual(Math.ceil((Date.now() - t0) / 4000) + 1);
    const lease = await cluster.api.get<{ metadata?: object; spec: { renewTime: string } }>(LEASES, { namespace: 'kube-node-lease', name: 'n-exec' });
    expect(Date.now() - Date.parse(lease.spec.renewTime)).toBeLessThan(3_000);
  }, 60_000);
});

describe("kubeadm's flags on the command line", () => {
  it('an unknown flag is refused naming it (exit 1), a removed one with the release that removed it', async () => {
    const unknown = await runNodelet(['config', 'view', '--no-such-flag=1']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("unknown option '--no-such-flag=1'");
    const removed = await runNodelet(['config', 'view', '--network-plugin=cni']);
    expect(removed.code).toBe(1);
    expect(removed.stderr).toContain('--network-plugin: this flag was removed from the kubelet in 1.24');
  });

  it('--version answers in the kubelet\'s form, which kubeadm\'s preflight parses', async () => {
    const r = await runNodelet(['--version']);
    expect(r.code).toBe(0);
    // kubeadm's GetKubeletVersion regular expression.
    expect(r.stdout.trim()).toMatch(/^\s*Kubernetes v((0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-0-9a-zA-Z_.+]*)?)\s*$/);
  });

  it('a --node-labels key in kubernetes.io outside the kubelet\'s set stops startup naming it', async () => {
    const r = await runNodelet(['--node-labels', 'node-role.kubernetes.io/worker=', '--root-dir', path.join(cluster.dir, 'nl'), '--lock-file', path.join(cluster.dir, 'nl.lock')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("--node-labels: unknown 'kubernetes.io' or 'k8s.io' labels: node-role.kubernetes.io/worker");
  });
});
