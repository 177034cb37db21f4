/**
 * Standalone control plane: `npm run control-plane -- --port <n> --kubeconfig <file>
 * [--pki-dir <dir>] [--node-monitor-grace-period <seconds>] [--cluster-cidr <cidr>
 * [--node-cidr-mask-size <n>]] [--service-cluster-ip-range <cidr>]`. With --cluster-cidr each new Node gets a pod CIDR (a /24
 * by default), as kube-controller-manager's --allocate-node-cidrs. Writes a kubeconfig with an
 * admin client certificate (group system:masters), prints the URL, and runs until SIGINT or
 * SIGTERM.
 */
import { Command } from 'commander';
import { startControlPlane } from './server.js';

function int(name: string): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${name}: expected a non-negative integer, got "${v}"`);
    return n;
  };
}

async function main(): Promise<void> {
  const program = new Command('control-plane')
    .description('In-memory test control plane (HTTPS) for nodelet and kubectl')
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--port <n>', 'port (0 = ephemeral)', int('port'), 0)
    .requiredOption('--kubeconfig <file>', 'where to write an admin kubeconfig')
    .option('--pki-dir <dir>', 'where to write the CA and certificates (default: a temporary directory)')
    .option('--node-monitor-grace-period <seconds>', 'node monitor grace period', int('node-monitor-grace-period'), 50)
    .option('--cluster-cidr <cidr>', 'IPv4 range to give each new Node a pod CIDR from (spec.podCIDR), as --allocate-node-cidrs')
    .option('--node-cidr-mask-size <n>', 'prefix length of each Node\'s pod CIDR', int('node-cidr-mask-size'), 24)
    .option('--service-cluster-ip-range <cidr>', 'IPv4 range of Service cluster IPs (the first is the kubernetes Service\'s)', '10.96.0.0/12')
    .parse(process.argv);
  const o = program.opts<{ host: string; port: number; kubeconfig: string; pkiDir?: string; nodeMonitorGracePeriod: number; clusterCidr?: string; nodeCidrMaskSize: number; serviceClusterIpRange: string }>();
  const cp = await startControlPlane({
    host: o.host,
    port: o.port,
    nodeMonitorGracePeriodMs: o.nodeMonitorGracePeriod * 1000,
    ...(o.pkiDir ? { pkiDir: o.pkiDir } : {}),
    ...(o.clusterCidr !== undefined ? { clusterCIDR: o.clusterCidr, nodeCIDRMaskSize: o.nodeCidrMaskSize } : {}),
    serviceClusterIPRange: o.serviceClusterIpRange,
  });
  cp.writeKubeconfig(o.kubeconfig, { user: 'admin', groups: ['system:masters'] });
  process.stdout.write(`control plane listening on ${cp.url}; kubeconfig written to ${o.kubeconfig}\n`);
  const stop = (): void => {
    void cp.close().then(() => process.exit(0));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`control-plane: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
