import type os from 'node:os';
import { describe, expect, it } from 'vitest';
import { defaultRouteInterface, hostIPs } from '../../src/node-identity.js';

const HEADER = 'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT';
const route = (iface: string, dest: string, flags: string, metric: number, mask: string) => `${iface}\t${dest}\t010200C0\t${flags}\t0\t0\t${metric}\t${mask}\t0\t0\t0`;
const addr = (address: string, o: Partial<os.NetworkInterfaceInfo> = {}) => ({ address, netmask: '255.255.255.0', family: 'IPv4', mac: '00:00:00:00:00:00', internal: false, cidr: `${address}/24`, ...o }) as os.NetworkInterfaceInfo;

const interfaces = {
  lo: [addr('127.0.0.1', { internal: true })],
  eth0: [addr('192.0.2.10'), addr('fe80::1', { family: 'IPv6' })],
  nodelet3: [addr('10.244.3.1')], // a CNI bridge with its gateway address
};

describe('node IPs', () => {
  it.each([
    ['the default route interface wins over a CNI bridge', [route('eth0', '00000000', '0003', 0, '00000000'), route('nodelet3', '0003F40A', '0001', 0, '00FFFFFF')], ['192.0.2.10']],
    ['the lowest metric among default routes', [route('nodelet3', '00000000', '0003', 5, '00000000'), route('eth0', '00000000', '0003', 0, '00000000')], ['192.0.2.10']],
    ['a default route that is down is ignored', [route('nodelet3', '00000000', '0002', 0, '00000000')], ['192.0.2.10', '10.244.3.1']],
    ['no route table: every non-internal IPv4 address', [], ['192.0.2.10', '10.244.3.1']],
  ])('%s', (_name, rows, want) => {
    expect(hostIPs([HEADER, ...rows].join('\n'), interfaces)).toEqual(want);
  });

  it('reads the interface of the default route from /proc/net/route text', () => {
    expect(defaultRouteInterface([HEADER, route('eth0', '000200C0', '0001', 0, '00FFFFFF'), route('eth0', '00000000', '0003', 100, '00000000')].join('\n'))).toBe('eth0');
    expect(defaultRouteInterface(HEADER)).toBeUndefined();
  });
});
