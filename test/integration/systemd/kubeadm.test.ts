/**
 * kubeadm's files as they are (issue 29.5), under a real systemd 252: the shipped unit
 * installed under the kubelet's name with kubeadm's `10-kubeadm.conf` drop-in unchanged,
 * nodelet linked as `/usr/bin/kubelet`, a `kubeadm-flags.env` as `kubeadm join` writes it and
 * `/etc/default/kubelet` with `KUBELET_EXTRA_ARGS`, and the files `kubeadm join` leaves:
 * `bootstrap-kubelet.conf` (a bootstrap token of a Secret the test creates) and
 * `/var/lib/kubelet/config.yaml`. `systemctl start kubelet` bootstraps, writes
 * `/etc/kubernetes/kubelet.conf` and registers the Node with the flags' labels, against the
 * test control plane on the host (the box shares the host's network).
 */
import fs from 'node:fs';
import type { Node } from 'kubernetes-types/core/v1.js';
import YAML from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NODES, type ResourceType } from '../../../src/controlplane/client.js';
import { eventually, freePort } from '../../helpers/nodelet.js';
import { startTestCluster, type TestCluster } from '../../helpers/test-cluster.js';
import { removeDir } from '../../helpers/cleanup.js';
import { bootBox, type Box } from '../../systemd/harness.js';
import { installNodelet, testConfig, unitShow, waitActive } from '../../systemd/nodelet-box.js';

const SECRETS: ResourceType = { group: '', version: 'v1', resource: 'secrets', namespaced: true };

/** kubeadm's drop-in, as the kubeadm packages ship it (/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf). */
const KUBEADM_DROP_IN = `# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`;

let cluster: TestCluster;
let box: Box;

beforeAll(async () => {
  cluster = await startTestCluster({ prefix: 'nodelet-kubeadm-' });
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  await cluster.api.create(SECRETS, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'bootstrap-token-kbadm1', namespace: 'kube-system' },
    type: 'bootstrap.kubernetes.io/token',
    data: { 'token-id': b64('kbadm1'), 'token-secret': b64('0123456789abcdef'), 'usage-bootstrap-authentication': b64('true'), expiration: b64(new Date(Date.now() + 3600_000).toISOString()) },
  } as never);
  box = await bootBox({ hostNetwork: true });
});

afterAll(async () => {
  if (box) {
    await box.exec(['systemctl', 'stop', 'kubelet']);
    await box.poweroff();
  }
  await cluster?.close();
  if (cluster) removeDir(cluster.dir);
});

describe("kubeadm's 10-kubeadm.conf and kubeadm-flags.env with the shipped unit", () => {
  it('start nodelet as /usr/bin/kubelet, which bootstraps and registers with the flags the files pass', async () => {
    const [port, healthz] = [await freePort(), await freePort()];
    await installNodelet(box, { unitName: 'kubelet', config: testConfig(['address: 127.0.0.1', `port: ${port}`, 'healthzBindAddress: 127.0.0.1', `healthzPort: ${healthz}`, 'containerRuntimeEndpoint: unix:///run/no-runtime.sock']), dropIn: KUBEADM_DROP_IN });
    await box.sh('mv /etc/systemd/system/kubelet.service.d/10-test.conf /etc/systemd/system/kubelet.service.d/10-kubeadm.conf && ln -s /usr/local/bin/nodelet /usr/bin/kubelet');
    await box.writeFile('/var/lib/kubelet/kubeadm-flags.env', 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/no-runtime.sock --pod-infra-container-image=registry.k8s.io/pause:3.10 --hostname-override=box-node"\n');
    await box.writeFile('/etc/default/kubelet', 'KUBELET_EXTRA_ARGS=--node-labels=node.kubernetes.io/pool=box,example.com/team=ml --register-with-taints=dedicated=box:NoSchedule\n');
    const bootstrap = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'kubernetes', cluster: { server: cluster.cp.url, 'certificate-authority-data': fs.readFileSync(cluster.cp.caFile).toString('base64') } }],
      users: [{ name: 'tls-bootstrap-token-user', user: { token: 'kbadm1.0123456789abcdef' } }],
      contexts: [{ name: 'tls-bootstrap-token-user@kubernetes', context: { cluster: 'kubernetes', user: 'tls-bootstrap-token-user' } }],
      'current-context': 'tls-bootstrap-token-user@kubernetes',
    };
    await box.writeFile('/etc/kubernetes/bootstrap-kubelet.conf', YAML.stringify(bootstrap), 0o600);
    await box.run(['systemctl', 'daemon-reload']);

    const s = await unitShow(box, 'kubelet.service', ['DropInPaths', 'ExecStart', 'Type', 'Restart', 'SyslogIdentifier']);
    expect(s.DropInPaths).toBe('/etc/systemd/system/kubelet.service.d/10-kubeadm.conf');
    expect(s.ExecStart).toContain('path=/usr/bin/kubelet');
    expect(s.ExecStart).toContain('$KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS');
    expect([s.Type, s.Restart, s.SyslogIdentifier]).toEqual(['notify', 'always', 'nodelet']);

    await box.run(['systemctl', 'start', 'kubelet']);
    await waitActive(box, 'kubelet.service', 30_000);
    const node = await eventually(() => cluster.api.get<Node>(NODES, { name: 'box-node' }).catch(() => undefined), 30_000);
    expect(node.metadata!.labels).toMatchObject({ 'kubernetes.io/hostname': 'box-node', 'node.kubernetes.io/pool': 'box', 'example.com/team': 'ml' });
    expect(node.spec!.taints).toEqual([{ key: 'dedicated', value: 'box', effect: 'NoSchedule' }]);
    expect((await box.run(['stat', '-c', '%a', '/etc/kubernetes/kubelet.conf'])).trim()).toBe('600');
    expect(await box.run(['journalctl', '-u', 'kubelet', '--no-pager', '-o', 'cat'])).toMatch(/pod-infra-container-image is deprecated and ignored/);
  }, 120_000);
});
