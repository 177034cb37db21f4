/**
 * Who this node is: its name (hostname or --hostname-override, lowercased as the
 * kubelet does) and its IPs: --node-ip, else, as the kubelet chooses a host interface,
 * the IPv4 address of the interface the default route goes through (so a bridge the pod
 * network adds, such as a CNI bridge with a gateway address, never becomes the node's
 * InternalIP), else every non-internal IPv4 address.
 */
import fs from 'node:fs';
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
    ips = hostIPs(readRoutes(), os.networkInterfaces());
  }
  return { nodeName: hostname, hostname, ips };
}

function readRoutes(): string {
  try {
    return fs.readFileSync('/proc/net/route', 'utf8');
  } catch {
    return '';
  }
}

/** The interface of the default IPv4 route with the lowest metric, from `/proc/net/route` text. Pure. */
export function defaultRouteInterface(routes: string): string | undefined {
  let best: { iface: string; metric: number } | undefined;
  for (const line of routes.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const [iface, dest, , flags, , , metric, mask] = f;
    // Destination and mask 0: the default route; flag 0x1: the route is up.
    if (dest !== '00000000' || mask !== '00000000' || !(parseInt(flags!, 16) & 1)) continue;
    const m = Number(metric);
    if (!best || m < best.metric) best = { iface: iface!, metric: m };
  }
  return best?.iface;
}

/** The node's IPs: the default route's interface's IPv4 addresses, else every non-internal IPv4 one. Pure. */
export function hostIPs(routes: string, interfaces: NodeJS.Dict<os.NetworkInterfaceInfo[]>): string[] {
  const v4 = (list: os.NetworkInterfaceInfo[] | undefined) => (list ?? []).filter((a) => !a.internal && a.family === 'IPv4').map((a) => a.address);
  const iface = defaultRouteInterface(routes);
  const preferred = iface ? v4(interfaces[iface]) : [];
  return preferred.length ? preferred : Object.values(interfaces).flatMap((l) => v4(l));
}
