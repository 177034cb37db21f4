import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { hostsFileContent, mountsOwnEtcHosts, parseResolvConf, podDnsConfig, podHostname, type NodeDns } from '../../../src/pods/cri/dns.js';
import { readResolvConf } from '../../../src/pods/cri/cri-pod-runtime.js';

const HOST = parseResolvConf('# generated\nnameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch example.com. corp.example.com .\noptions ndots:2 edns0\n');
const NODE: NodeDns = { clusterDNS: ['10.96.0.10'], clusterDomain: 'cluster.local', resolvConf: '/etc/resolv.conf', nodeIPs: ['192.0.2.10'] };
const pod = (spec: Partial<NonNullable<Pod['spec']>> = {}, name = 'web'): Pod => ({ metadata: { name, namespace: 'prod', uid: 'u1' }, spec: { containers: [{ name: 'c' }], ...spec } });
const CLUSTER_SEARCH = ['prod.svc.cluster.local', 'svc.cluster.local', 'cluster.local'];

describe('parseResolvConf', () => {
  it('reads nameservers in order, the last search line (trailing dots trimmed, "." dropped), options merged by name, comments skipped', () => {
    expect(HOST).toEqual({ servers: ['192.0.2.53', '192.0.2.54'], searches: ['example.com', 'corp.example.com'], options: ['ndots:2', 'edns0'] });
    expect(parseResolvConf('search a.b\nsearch c.d\noptions ndots:1 rotate\noptions ndots:3\n; x\nnameserver\n')).toEqual({ servers: [], searches: ['c.d'], options: ['ndots:3', 'rotate'] });
  });
});

describe('podDnsConfig by dnsPolicy', () => {
  const cases: { name: string; pod: Pod; node?: Partial<NodeDns>; want: { servers: string[]; searches: string[]; options: string[] }; warnings?: string[] }[] = [
    { name: 'ClusterFirst (the default): clusterDNS, the cluster search then the host search, ndots:5', pod: pod(), want: { servers: ['10.96.0.10'], searches: [...CLUSTER_SEARCH, 'example.com', 'corp.example.com'], options: ['ndots:5'] } },
    { name: 'ClusterFirst without clusterDomain: the host search only', pod: pod({ dnsPolicy: 'ClusterFirst' }), node: { clusterDomain: '' }, want: { servers: ['10.96.0.10'], searches: ['example.com', 'corp.example.com'], options: ['ndots:5'] } },
    {
      name: 'ClusterFirst without clusterDNS falls back to Default, with the MissingClusterDNS warning',
      pod: pod({ dnsPolicy: 'ClusterFirst' }),
      node: { clusterDNS: [] },
      want: { servers: ['192.0.2.53', '192.0.2.54'], searches: ['example.com', 'corp.example.com'], options: ['ndots:2', 'edns0'] },
      warnings: ['MissingClusterDNS'],
    },
    { name: 'Default: the host resolv.conf', pod: pod({ dnsPolicy: 'Default' }), want: { servers: ['192.0.2.53', '192.0.2.54'], searches: ['example.com', 'corp.example.com'], options: ['ndots:2', 'edns0'] } },
    { name: 'Default with resolvConf "": the local resolver and search "."', pod: pod({ dnsPolicy: 'Default' }), node: { resolvConf: '' }, want: { servers: ['127.0.0.1'], searches: ['.'], options: ['ndots:2', 'edns0'] } },
    { name: 'host network + ClusterFirst: Default', pod: pod({ hostNetwork: true }), want: { servers: ['192.0.2.53', '192.0.2.54'], searches: ['example.com', 'corp.example.com'], options: ['ndots:2', 'edns0'] } },
    { name: 'host network + ClusterFirstWithHostNet: the cluster DNS', pod: pod({ hostNetwork: true, dnsPolicy: 'ClusterFirstWithHostNet' }), want: { servers: ['10.96.0.10'], searches: [...CLUSTER_SEARCH, 'example.com', 'corp.example.com'], options: ['ndots:5'] } },
    {
      name: 'None: only dnsConfig',
      pod: pod({ dnsPolicy: 'None', dnsConfig: { nameservers: ['192.0.2.99'], searches: ['my.dns.search.suffix'], options: [{ name: 'ndots', value: '2' }, { name: 'edns0' }] } }),
      want: { servers: ['192.0.2.99'], searches: ['my.dns.search.suffix'], options: ['ndots:2', 'edns0'] },
    },
    {
      name: 'ClusterFirst + dnsConfig: nameservers and searches appended without duplicates, options merged by name',
      pod: pod({ dnsConfig: { nameservers: ['10.96.0.10', '192.0.2.99'], searches: ['svc.cluster.local', 'extra.example'], options: [{ name: 'ndots', value: '1' }, { name: 'single-request' }] } }),
      want: { servers: ['10.96.0.10', '192.0.2.99'], searches: [...CLUSTER_SEARCH, 'example.com', 'corp.example.com', 'extra.example'], options: ['ndots:1', 'single-request'] },
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const out = podDnsConfig(c.pod, { ...NODE, ...c.node }, c.node?.resolvConf === '' ? { servers: [], searches: [], options: HOST.options } : HOST);
      expect(out.config).toEqual(c.want);
      expect(out.warnings.map((w) => w.reason)).toEqual(c.warnings ?? []);
    });
  }

  it('keeps 3 nameservers, 32 search paths and 2048 characters of search line, dropping the rest with DNSConfigForming warnings', () => {
    const servers = ['192.0.2.1', '192.0.2.2', '192.0.2.3', '192.0.2.4'];
    const many = Array.from({ length: 40 }, (_, i) => `s${i}.example`);
    const out = podDnsConfig(pod({ dnsPolicy: 'None', dnsConfig: { nameservers: servers, searches: many } }), NODE, HOST);
    expect(out.config.servers).toEqual(servers.slice(0, 3));
    expect(out.config.searches).toEqual(many.slice(0, 32));
    expect(out.warnings.map((w) => w.reason)).toEqual(['DNSConfigForming', 'DNSConfigForming']);
    expect(out.warnings[0]!.message).toBe('Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 192.0.2.1 192.0.2.2 192.0.2.3');

    const long = Array.from({ length: 10 }, (_, i) => `${'a'.repeat(60)}.${'b'.repeat(60)}.${'c'.repeat(60)}.x${i}`);
    const longer = [...long, ...long.map((d) => `y.${d}`)];
    const cut = podDnsConfig(pod({ dnsPolicy: 'None', dnsConfig: { searches: longer } }), NODE, HOST);
    expect(cut.config.searches!.join(' ').length).toBeLessThanOrEqual(2048);
    expect(cut.config.searches).toEqual(longer.slice(0, cut.config.searches!.length));
    expect(cut.config.searches!.length).toBe(11);
    expect(cut.warnings[0]!.message).toMatch(/^Search Line limits were exceeded, some search paths have been omitted, the applied search line is: /);
  });

  it('refuses what would break a resolv.conf line, naming the field; an unknown policy; None without dnsConfig', () => {
    expect(() => podDnsConfig(pod({ dnsPolicy: 'None', dnsConfig: { nameservers: ['1.2.3.4\nnameserver 6.6.6.6'] } }), NODE, HOST)).toThrow(/^spec\.dnsConfig\.nameservers\[0\]: .* must be an IP address$/);
    expect(() => podDnsConfig(pod({ dnsConfig: { searches: ['ok.example', 'bad domain'] } }), NODE, HOST)).toThrow(/^spec\.dnsConfig\.searches\[1\]: /);
    expect(() => podDnsConfig(pod({ dnsConfig: { options: [{ name: 'ndots', value: '1 rotate' }] } }), NODE, HOST)).toThrow(/^spec\.dnsConfig\.options\[0\]\.value: /);
    expect(() => podDnsConfig(pod({ dnsPolicy: 'Sometimes' }), NODE, HOST)).toThrow(/^spec\.dnsPolicy: unsupported value "Sometimes"/);
    expect(() => podDnsConfig(pod({ dnsPolicy: 'None' }), NODE, HOST)).toThrow('spec.dnsConfig: required when dnsPolicy is "None"');
  });
});

describe('hosts file', () => {
  it('has the kubelet header and localhost lines, the pod IPs with the hostname, then the host aliases', () => {
    const p = pod({ hostAliases: [{ ip: '192.0.2.80', hostnames: ['foo.local', 'bar.local'] }, { ip: 'fd00::80', hostnames: ['v6.local'] }] });
    expect(hostsFileContent(p, ['10.244.7.5'], 'cluster.local')).toBe(
      '# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n' +
        '10.244.7.5\tweb\n\n# Entries added by HostAliases.\n192.0.2.80\tfoo.local\tbar.local\nfd00::80\tv6.local\n',
    );
  });

  it('with a subdomain, the fully qualified name first; spec.hostname over the pod name; a long name cut to 63 without a trailing dash', () => {
    expect(hostsFileContent(pod({ hostname: 'h', subdomain: 'sub' }), ['10.244.7.5', 'fd00::5'], 'cluster.local')).toContain('10.244.7.5\th.sub.prod.svc.cluster.local\th\nfd00::5\th.sub.prod.svc.cluster.local\th\n');
    expect(podHostname(pod({}, `${'a'.repeat(62)}-b`), 'cluster.local').hostname).toBe('a'.repeat(62));
    expect(hostsFileContent(pod(), ['10.244.7.5'], '')).not.toContain('HostAliases');
  });

  it('refuses an alias that would add lines of its own, naming the field', () => {
    expect(() => hostsFileContent(pod({ hostAliases: [{ ip: '192.0.2.80\n6.6.6.6', hostnames: ['x'] }] }), ['10.244.7.5'], '')).toThrow(/^spec\.hostAliases\[0\]\.ip: /);
    expect(() => hostsFileContent(pod({ hostAliases: [{ ip: '192.0.2.80', hostnames: ['ok', 'evil\n6.6.6.6 bank'] }] }), ['10.244.7.5'], '')).toThrow(/^spec\.hostAliases\[0\]\.hostnames\[1\]: /);
    expect(() => hostsFileContent(pod({ hostname: 'Bad_Name' }), ['10.244.7.5'], '')).toThrow(/^spec\.hostname: /);
  });

  it('is not mounted in a container that mounts its own /etc/hosts', () => {
    expect(mountsOwnEtcHosts({ volumeMounts: [{ mountPath: '/etc/hosts' }] })).toBe(true);
    expect(mountsOwnEtcHosts({ volumeMounts: [{ mountPath: '/etc' }] })).toBe(false);
    expect(mountsOwnEtcHosts({})).toBe(false);
  });
});

describe('readResolvConf', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-dns-'));
  it('reads a regular file; refuses a FIFO at once (never blocks), a directory, a missing file and more than 64 KiB, naming the file', async () => {
    const ok = path.join(dir, 'resolv.conf');
    fs.writeFileSync(ok, 'nameserver 192.0.2.53\n');
    expect((await readResolvConf(ok)).servers).toEqual(['192.0.2.53']);
    expect(await readResolvConf('')).toEqual({ servers: [], searches: [], options: [] });
    const fifo = path.join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    await expect(readResolvConf(fifo)).rejects.toThrow(`resolvConf ${fifo}: not a regular file`);
    await expect(readResolvConf(dir)).rejects.toThrow(`resolvConf ${dir}: not a regular file`);
    await expect(readResolvConf(path.join(dir, 'missing'))).rejects.toThrow(/^resolvConf .*missing: cannot open: /);
    const big = path.join(dir, 'big');
    fs.writeFileSync(big, `nameserver 192.0.2.53\n${'#'.repeat(64 * 1024)}\n`);
    await expect(readResolvConf(big)).rejects.toThrow(`resolvConf ${big}: larger than 65536 bytes`);
    fs.rmSync(dir, { recursive: true, force: true });
  });
});
