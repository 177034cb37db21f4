/**
 * Who this node is: its name (hostname or --hostname-override, lowercased as the
 * kubelet does) and its IPs (--node-ip, else the host's non-internal addresses).
 */
import os from 'node:os';
import net from 'node:net';
import { NodeletError } from './errors.js';

export interface NodeIdentity {
  nodeName: string;
  hostname: string;
  ips: string[];
}

export function resolveNodeIdentity(opts: { hostnameOverride?: string; nodeIp?: string }): NodeIdentity {
  const hostname = (opts.hostnameOverride?.trim() || os.hostname()).toLowerCase();
  if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(hostname)) {
    throw new NodeletError('INVALID_ARGUMENT', `--hostname-override: "${hostname}" is not a valid node name (a DNS-1123 subdomain)`);
  }
  let ips: string[];
  if (opts.nodeIp) {
    ips = opts.nodeIp.split(',').map((s) => s.trim());
    const bad = ips.filter((ip) => net.isIP(ip) === 0);
    if (bad.length) throw new NodeletError('INVALID_ARGUMENT', `--node-ip: ${bad.map((b) => `"${b}"`).join(', ')} is not an IP address`);
  } else {
    ips = Object.values(os.networkInterfaces())
      .flat()
      .filter((a): a is os.NetworkInterfaceInfo => !!a && !a.internal && a.family === 'IPv4')
      .map((a) => a.address);
  }
  return { nodeName: hostname, hostname, ips };
}
