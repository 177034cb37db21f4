/**
 * Pods get a real network (issue 13): nodelet connected to the test control plane (which
 * allocates pod CIDRs) on a containerd of this file's own with scripts/containerd.sh's CNI
 * config. The node turns Ready within seconds; a pod without host network gets an IP in
 * its Node's spec.podCIDR and serves a page another pod fetches by that IP; /etc/resolv.conf
 * follows dnsPolicy; /etc/hosts is the kubelet's, with the pod's IP, hostname and aliases.
 *
 * The test control plane's cluster CIDR is the containerd's pod range with a /24 per node,
 * so the one node's allocation is exactly the range its runtime's CNI config hands out.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { EnvVar, Node, Pod, PodSpec } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NODES, PODS, type ControlPlaneClient } from '../../../src/controlplane/client.js';
import type { CriClient } from '../../../src/runtime/cri-client.js';
import type { ControlPlane } from '../../control-plane/server.js';
import { eventually, type NodeletProcess } from '../../helpers/nodelet.js';
import { busyboxPod, startNetworkedNode, tearDownNetworkedNode, type PodNetwork } from '../../helpers/pod-network.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-net';
const NODE = 'netnode';

let cp: ControlPlane;
let api: ControlPlaneClient;
let nodelet: NodeletProcess | undefined;
let cri: CriClient;
let net: PodNetwork;
let logsDir: string;
let readyAfterMs = -1;
let dir: string | undefined;

beforeAll(async () => {
  ({ cp, api, nodelet, cri, net, dir, readyAfterMs } = await startNetworkedNode({
    containerdDir: CONTAINERD_DIR,
    node: NODE,
    prefix: 'nodelet-network-',
    config: (d) => {
      // A resolv.conf of the test's own, so Default pods see known content.
      const resolv = path.join(d, 'resolv.conf');
      fs.writeFileSync(resolv, '# test host\nnameserver 192.0.2.53\nsearch example.test\noptions timeout:2\n');
      return { clusterDNS: '[10.96.0.10]', clusterDomain: 'cluster.local', resolvConf: resolv };
    },
  }));
  logsDir = path.join(dir!, 'logs');
});

afterAll(async () => {
  await tearDownNetworkedNode({ api, cri, nodelet, net: net, cp, dir });
});

const busybox = (name: string, script: string, spec: Partial<PodSpec> = {}, env: EnvVar[] = []) => busyboxPod(NODE, name, script, spec, { env });

const getPod = (name: string) => api.get<Pod>(PODS, { namespace: 'default', name }).catch(() => undefined);
const podWith = (name: string, pred: (p: Pod) => boolean, timeoutMs = 30_000) =>
  eventually(async () => {
    const p = await getPod(name);
    return p && pred(p) ? p : undefined;
  }, timeoutMs);

/** The container's output from its CRI log file (`<time> stdout F <line>`). */
function output(p: Pod): string {
  const m = p.metadata!;
  const file = path.join(logsDir, `${m.namespace}_${m.name}_${m.uid}`, 'main', '0.log');
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => l.replace(/^\S+ (stdout|stderr) [FP] /, ''))
    .join('\n');
}

function inSubnet(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split('/') as [string, string];
  const n = (a: string) => a.split('.').reduce((x, o) => x * 256 + Number(o), 0);
  const size = 2 ** (32 - Number(bits));
  return Math.floor(n(ip) / size) === Math.floor(n(base) / size);
}

describe('pod network', () => {
  it('the node turns Ready within seconds, with the pod CIDR the control plane allocated', async () => {
    console.log(`node ${NODE} Ready ${readyAfterMs} ms after nodelet was started`);
    expect(readyAfterMs).toBeLessThan(10_000);
    const node = await api.get<Node>(NODES, { name: NODE });
    expect(node.spec?.podCIDR).toBe(net.subnet);
    expect(node.spec?.podCIDRs).toEqual([net.subnet]);
    await nodelet!.waitForMsg(new RegExp(`pod CIDR ${net.subnet.replace(/\./g, '\\.')} given to the runtime`), 10_000);
  });

  it('a pod without host network gets an IP in the node\'s pod CIDR, sees it in the downward API, and another pod fetches its page by that IP', async () => {
    await api.create<Pod>(PODS, busybox('web', 'mkdir -p /www && echo hello-from-web > /www/index.html && echo "$MY_IP" > /www/ip && exec httpd -f -p 8080 -h /www', {}, [{ name: 'MY_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }]));
    const web = await podWith('web', (p) => p.status?.phase === 'Running' && !!p.status.podIP);
    const ip = web.status!.podIP!;
    expect(inSubnet(ip, net.subnet)).toBe(true);
    expect(web.status!.podIPs).toEqual([{ ip }]);
    expect(web.status!.hostIP).toMatch(/\S/);
    expect(ip).not.toBe(web.status!.hostIP);

    await api.create<Pod>(PODS, busybox('client', `get() { printf 'GET /%s HTTP/1.0\\r\\n\\r\\n' "$1" | nc -w 2 ${ip} 8080 | tail -n 1; }; for i in 1 2 3 4 5 6 7 8 9 10; do page=$(get index.html); [ -n "$page" ] && break; sleep 0.3; done; echo "page=$page"; echo "ip=$(get ip)"; test "$page" = hello-from-web`, { restartPolicy: 'Never' }));
    const client = await podWith('client', (p) => p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed');
    expect(output(client)).toBe(`page=hello-from-web\nip=${ip}`);
    expect(client.status!.phase).toBe('Succeeded');
    expect(client.status!.podIP).not.toBe(ip);
    expect(inSubnet(client.status!.podIP!, net.subnet)).toBe(true);
  });

  it('/etc/resolv.conf follows dnsPolicy: ClusterFirst with clusterDNS, Default, None with dnsConfig', async () => {
    const show = 'cat /etc/resolv.conf';
    await api.create<Pod>(PODS, busybox('dns-cluster', show, { restartPolicy: 'Never' }));
    await api.create<Pod>(PODS, busybox('dns-default', show, { restartPolicy: 'Never', dnsPolicy: 'Default' }));
    await api.create<Pod>(PODS, busybox('dns-none', show, { restartPolicy: 'Never', dnsPolicy: 'None', dnsConfig: { nameservers: ['192.0.2.99'], searches: ['my.dns.search.suffix'], options: [{ name: 'ndots', value: '2' }, { name: 'edns0' }] } }));
    const lines = async (name: string) => output(await podWith(name, (p) => p.status?.phase === 'Succeeded')).split('\n').sort();
    expect(await lines('dns-cluster')).toEqual(['nameserver 10.96.0.10', 'options ndots:5', 'search default.svc.cluster.local svc.cluster.local cluster.local example.test']);
    expect(await lines('dns-default')).toEqual(['nameserver 192.0.2.53', 'options timeout:2', 'search example.test']);
    expect(await lines('dns-none')).toEqual(['nameserver 192.0.2.99', 'options ndots:2 edns0', 'search my.dns.search.suffix']);
  });

  it('an httpGet liveness probe to the pod\'s own IP keeps a healthy container running and restarts it once the endpoint fails', async () => {
    // Healthy for 8 s (busybox httpd serves /www/healthz on the pod's IP), then the file goes: 404, the probe fails.
    const script = 'mkdir -p /www && echo ok > /www/healthz && httpd -p 8080 -h /www && sleep 8 && rm /www/healthz && sleep 3600';
    await api.create<Pod>(PODS, busyboxPod(NODE, 'liveness', script, {}, { livenessProbe: { httpGet: { path: '/healthz', port: 8080 }, periodSeconds: 1, failureThreshold: 2 } }));
    const running = await podWith('liveness', (p) => p.status?.containerStatuses?.[0]?.state?.running !== undefined);
    const startedAt = Date.parse(running.status!.containerStatuses![0]!.state!.running!.startedAt!);
    // Healthy: still the first container 5 s into its life.
    await new Promise((r) => setTimeout(r, Math.max(0, startedAt + 5000 - Date.now())));
    expect((await getPod('liveness'))!.status!.containerStatuses![0]!.restartCount).toBe(0);
    // The endpoint fails from 8 s: restarted (the new container is healthy again for its 8 s).
    const restarted = await podWith('liveness', (p) => (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1, 30_000);
    expect(restarted.status!.containerStatuses![0]!.lastState?.terminated).toBeDefined();
  });

  it('activeDeadlineSeconds: 5 ends the pod Failed with DeadlineExceeded', async () => {
    await api.create<Pod>(PODS, busybox('deadline', 'sleep 3600', { activeDeadlineSeconds: 5 }));
    const p = await podWith('deadline', (x) => x.status?.phase === 'Failed', 40_000);
    expect(p.status!.reason).toBe('DeadlineExceeded');
    expect(p.status!.message).toMatch(/active/i);
  });

  it('/etc/hosts is the kubelet\'s: localhost lines, the pod IP with its hostname (fully qualified with a subdomain), then the host aliases', async () => {
    await api.create<Pod>(
      PODS,
      busybox('hosts', 'cat /etc/hosts', { restartPolicy: 'Never', hostname: 'myhost', subdomain: 'mysub', hostAliases: [{ ip: '192.0.2.80', hostnames: ['foo.local', 'bar.local'] }] }),
    );
    const p = await podWith('hosts', (x) => x.status?.phase === 'Succeeded');
    const ip = p.status!.podIP!;
    expect(inSubnet(ip, net.subnet)).toBe(true);
    expect(output(p)).toBe(
      [
        '# Kubernetes-managed hosts file.',
        '127.0.0.1\tlocalhost',
        '::1\tlocalhost ip6-localhost ip6-loopback',
        'fe00::0\tip6-localnet',
        'fe00::0\tip6-mcastprefix',
        'fe00::1\tip6-allnodes',
        'fe00::2\tip6-allrouters',
        `${ip}\tmyhost.mysub.default.svc.cluster.local\tmyhost`,
        '',
        '# Entries added by HostAliases.',
        '192.0.2.80\tfoo.local\tbar.local',
      ].join('\n'),
    );
  });
});
