/**
 * A pod's DNS and hosts file as the kubelet makes them (pkg/kubelet/network/dns and the
 * managed /etc/hosts), as pure functions: the CRI adapter reads the host's resolv.conf
 * (readResolvConf, the one IO edge here) and writes the hosts file.
 *
 * - podDnsConfig: the sandbox's CRI DNSConfig from `dnsPolicy` (ClusterFirst, Default,
 *   None, ClusterFirstWithHostNet; a hostNetwork pod's ClusterFirst is Default), the
 *   node's clusterDNS/clusterDomain, the host's resolv.conf and the pod's `dnsConfig`,
 *   cut to the kubelet's limits. What the kubelet reports as events comes back in
 *   `warnings` (reason and message), for the caller to log and send.
 * - hostsFileContent: the kubelet-managed /etc/hosts of a pod with its own network.
 *
 * Every pod-supplied value that lands in resolv.conf or /etc/hosts is checked (IP
 * addresses, DNS names, option words): a newline there would write lines of the pod's
 * choosing. A bad one throws INVALID_ARGUMENT naming the field.
 */
import net from 'node:net';
import type { Pod, PodDNSConfig } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../errors.js';
import type { DNSConfig } from '../../runtime/types.js';
import { isDnsLabel } from '../sources/pod-validation.js';

/** The kubelet's limits (validation.MaxDNSNameservers, MaxDNSSearchPaths, MaxDNSSearchListChars). */
export const MAX_NAMESERVERS = 3;
export const MAX_SEARCH_PATHS = 32;
export const MAX_SEARCH_LIST_CHARS = 2048;
/** A longer search domain makes some resolvers (glibc 2.28) abort: the kubelet drops it. */
const MAX_SEARCH_DOMAIN_CHARS = 253;
/** The most of a resolv.conf nodelet reads. */
export const RESOLV_CONF_MAX_BYTES = 64 * 1024;
const DEFAULT_OPTIONS = ['ndots:5'];

export interface HostDns {
  servers: string[];
  searches: string[];
  options: string[];
}

export interface DnsWarning {
  /** `MissingClusterDNS` (also about the node) or `DNSConfigForming`. */
  reason: string;
  message: string;
  /** The warning is about the node as well as the pod. */
  node?: boolean;
}

export interface NodeDns {
  clusterDNS: string[];
  clusterDomain: string;
  /** The `resolvConf` path; '' means none (Default pods then get 127.0.0.1 and search "."). */
  resolvConf: string;
  /** The node's IPs, for the '' resolvConf case (::1 for an IPv6 node). */
  nodeIPs: string[];
}

/**
 * resolv.conf as the kubelet reads it: `nameserver <ip>`, `search ...` (the last line wins;
 * trailing dots trimmed, "." dropped), `options ...` (merged by name, the later wins);
 * `#` lines ignored.
 */
export function parseResolvConf(text: string): HostDns {
  const servers: string[] = [];
  let searches: string[] = [];
  let options: string[] = [];
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (t.startsWith('#') || t.startsWith(';')) continue;
    const f = t.split(/\s+/).filter((x) => x !== '');
    if (f.length === 0) continue;
    if (f[0] === 'nameserver' && f.length >= 2) servers.push(f[1]!);
    else if (f[0] === 'search') searches = f.slice(1).filter((s) => s !== '.').map((s) => s.replace(/\.$/, ''));
    else if (f[0] === 'options') options = mergeOptions(options, f.slice(1).map((o) => optionParts(o)));
  }
  return { servers, searches, options };
}

function optionParts(o: string): { name: string; value?: string } {
  const i = o.indexOf(':');
  return i < 0 ? { name: o } : { name: o.slice(0, i), value: o.slice(i + 1) };
}

/** Options merged by name (the later value wins), in first-seen order. */
function mergeOptions(existing: string[], more: { name: string; value?: string | undefined }[]): string[] {
  const m = new Map<string, string>();
  for (const o of existing) {
    const p = optionParts(o);
    m.set(p.name, p.value ?? '');
  }
  for (const o of more) m.set(o.name, o.value ?? '');
  return [...m].map(([k, v]) => (v === '' ? k : `${k}:${v}`));
}

const unique = (xs: string[]) => [...new Set(xs)];

/** A search domain: DNS labels joined by dots, an optional final dot (as the API server allows). */
function isSearchDomain(s: string): boolean {
  const d = s.endsWith('.') ? s.slice(0, -1) : s;
  return d.length > 0 && d.length <= 253 && d.split('.').every((l) => isDnsLabel(l));
}

/** The pod's dnsConfig, checked: nothing of it may break a resolv.conf line. */
function checkedDnsConfig(c: PodDNSConfig): PodDNSConfig {
  const bad = (field: string, why: string): never => {
    throw new NodeletError('INVALID_ARGUMENT', `spec.dnsConfig.${field}: ${why}`, { field: `spec.dnsConfig.${field}` });
  };
  (c.nameservers ?? []).forEach((s, i) => {
    if (typeof s !== 'string' || net.isIP(s) === 0) bad(`nameservers[${i}]`, `${JSON.stringify(s)} must be an IP address`);
  });
  (c.searches ?? []).forEach((s, i) => {
    if (typeof s !== 'string' || !isSearchDomain(s)) bad(`searches[${i}]`, `${JSON.stringify(s)} must be a DNS subdomain`);
  });
  (c.options ?? []).forEach((o, i) => {
    if (typeof o?.name !== 'string' || !/^[!-~]+$/.test(o.name) || o.name.includes(':')) bad(`options[${i}].name`, `${JSON.stringify(o?.name)} must be one word of printable characters`);
    if (o.value !== undefined && (typeof o.value !== 'string' || !/^[!-~]*$/.test(o.value))) bad(`options[${i}].value`, `${JSON.stringify(o.value)} must be printable characters without spaces`);
  });
  return c;
}

type PodDnsType = 'None' | 'Cluster' | 'Host';

/** The kubelet's getPodDNSType: ClusterFirst on the host network is Default. */
export function podDnsType(pod: Pod): PodDnsType {
  const policy = pod.spec?.dnsPolicy ?? 'ClusterFirst';
  switch (policy) {
    case 'None':
      return 'None';
    case 'ClusterFirstWithHostNet':
      return 'Cluster';
    case 'ClusterFirst':
      return pod.spec?.hostNetwork ? 'Host' : 'Cluster';
    case 'Default':
      return 'Host';
  }
  throw new NodeletError('INVALID_ARGUMENT', `spec.dnsPolicy: unsupported value ${JSON.stringify(policy)}: supported values: "ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"`, { field: 'spec.dnsPolicy' });
}

/** The search line cut as the kubelet cuts it: 32 paths, no domain over 253 characters, 2048 characters in all. */
function fitSearches(searches: string[]): { searches: string[]; cut: boolean } {
  let cut = false;
  let s = searches;
  if (s.length > MAX_SEARCH_PATHS) {
    s = s.slice(0, MAX_SEARCH_PATHS);
    cut = true;
  }
  const kept = s.filter((d) => d.length <= MAX_SEARCH_DOMAIN_CHARS);
  if (kept.length !== s.length) cut = true;
  s = kept;
  while (s.length > 0 && s.join(' ').length > MAX_SEARCH_LIST_CHARS) {
    s = s.slice(0, -1);
    cut = true;
  }
  return { searches: s, cut };
}

/**
 * The sandbox's DNSConfig. `host` is the parsed resolv.conf (empty when resolvConf is '').
 * Throws INVALID_ARGUMENT for an unknown dnsPolicy or a bad dnsConfig value, and for
 * `None` without `dnsConfig` (the API server refuses that pod; a static one may have it).
 */
export function podDnsConfig(pod: Pod, node: NodeDns, host: HostDns): { config: DNSConfig; warnings: DnsWarning[] } {
  const warnings: DnsWarning[] = [];
  const type = podDnsType(pod);
  let cfg: Required<DNSConfig> = { servers: [...host.servers], searches: [...host.searches], options: [...host.options] };
  let hostLike = type === 'Host';
  if (type === 'None') {
    if (!pod.spec?.dnsConfig) throw new NodeletError('INVALID_ARGUMENT', 'spec.dnsConfig: required when dnsPolicy is "None"', { field: 'spec.dnsConfig' });
    cfg = { servers: [], searches: [], options: [] };
  } else if (type === 'Cluster') {
    if (node.clusterDNS.length > 0) {
      const ns = pod.metadata?.namespace || 'default';
      const d = node.clusterDomain;
      cfg = {
        servers: [...node.clusterDNS],
        searches: d ? unique([`${ns}.svc.${d}`, `svc.${d}`, d, ...host.searches]) : host.searches,
        options: [...DEFAULT_OPTIONS],
      };
    } else {
      const message = `kubelet does not have ClusterDNS IP configured and cannot create Pod using "${pod.spec?.dnsPolicy ?? 'ClusterFirst'}" policy. Falling back to "Default" policy.`;
      warnings.push({ reason: 'MissingClusterDNS', message, node: true });
      hostLike = true;
    }
  }
  if (hostLike && node.resolvConf === '') {
    // No resolv.conf: the local machine's resolver, and no search.
    cfg.servers = node.nodeIPs.length ? node.nodeIPs.map((ip) => (net.isIPv6(ip) ? '::1' : '127.0.0.1')) : ['127.0.0.1'];
    cfg.searches = ['.'];
  }
  const extra = pod.spec?.dnsConfig ? checkedDnsConfig(pod.spec.dnsConfig) : undefined;
  if (extra) {
    cfg.servers = unique([...cfg.servers, ...(extra.nameservers ?? [])]);
    cfg.searches = unique([...cfg.searches, ...(extra.searches ?? [])]);
    cfg.options = mergeOptions(cfg.options, (extra.options ?? []).map((o) => ({ name: o.name!, value: o.value })));
  }
  if (cfg.servers.length > MAX_NAMESERVERS) {
    cfg.servers = cfg.servers.slice(0, MAX_NAMESERVERS);
    warnings.push({ reason: 'DNSConfigForming', message: `Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: ${cfg.servers.join(' ')}` });
  }
  const fit = fitSearches(cfg.searches);
  cfg.searches = fit.searches;
  if (fit.cut) warnings.push({ reason: 'DNSConfigForming', message: `Search Line limits were exceeded, some search paths have been omitted, the applied search line is: ${cfg.searches.join(' ')}` });
  return { config: cfg, warnings };
}

/**
 * The pod's hostname and domain as the kubelet makes them: `spec.hostname` or the pod's
 * name (cut to 63 characters, trailing '-' and '.' dropped), and with `spec.subdomain`
 * the domain `<subdomain>.<namespace>.svc.<clusterDomain>`.
 */
export function podHostname(pod: Pod, clusterDomain: string): { hostname: string; domain: string } {
  const spec = pod.spec;
  let hostname = spec?.hostname ?? '';
  if (hostname !== '' && !isDnsLabel(hostname)) throw new NodeletError('INVALID_ARGUMENT', `spec.hostname: ${JSON.stringify(hostname)} must be a DNS-1123 label`, { field: 'spec.hostname' });
  if (hostname === '') hostname = (pod.metadata?.name ?? '').slice(0, 63).replace(/[-.]+$/, '');
  const sub = spec?.subdomain ?? '';
  if (sub === '') return { hostname, domain: '' };
  if (!isDnsLabel(sub)) throw new NodeletError('INVALID_ARGUMENT', `spec.subdomain: ${JSON.stringify(sub)} must be a DNS-1123 label`, { field: 'spec.subdomain' });
  const ns = pod.metadata?.namespace || 'default';
  return { hostname, domain: clusterDomain ? `${sub}.${ns}.svc.${clusterDomain}` : `${sub}.${ns}.svc` };
}

/**
 * The kubelet-managed /etc/hosts of a pod with its own network: localhost and the IPv6
 * names, one line per pod IP with its hostname (fully qualified first when it has a
 * domain), then the pod's hostAliases.
 */
export function hostsFileContent(pod: Pod, podIPs: string[], clusterDomain: string): string {
  const { hostname, domain } = podHostname(pod, clusterDomain);
  let out =
    '# Kubernetes-managed hosts file.\n' +
    '127.0.0.1\tlocalhost\n' +
    '::1\tlocalhost ip6-localhost ip6-loopback\n' +
    'fe00::0\tip6-localnet\n' +
    'fe00::0\tip6-mcastprefix\n' +
    'fe00::1\tip6-allnodes\n' +
    'fe00::2\tip6-allrouters\n';
  for (const ip of podIPs) out += domain ? `${ip}\t${hostname}.${domain}\t${hostname}\n` : `${ip}\t${hostname}\n`;
  const aliases = pod.spec?.hostAliases ?? [];
  if (aliases.length > 0) {
    out += '\n# Entries added by HostAliases.\n';
    aliases.forEach((a, i) => {
      if (typeof a?.ip !== 'string' || net.isIP(a.ip) === 0) throw new NodeletError('INVALID_ARGUMENT', `spec.hostAliases[${i}].ip: ${JSON.stringify(a?.ip)} must be an IP address`, { field: `spec.hostAliases[${i}].ip` });
      const names = a.hostnames ?? [];
      names.forEach((h, j) => {
        if (!isSearchDomain(String(h)) || String(h).endsWith('.')) throw new NodeletError('INVALID_ARGUMENT', `spec.hostAliases[${i}].hostnames[${j}]: ${JSON.stringify(h)} must be a DNS-1123 subdomain`, { field: `spec.hostAliases[${i}].hostnames[${j}]` });
      });
      out += `${a.ip}\t${names.join('\t')}\n`;
    });
  }
  return out;
}

/** The kubelet mounts the managed hosts file unless a container mounts its own /etc/hosts. */
export function mountsOwnEtcHosts(c: { volumeMounts?: { mountPath: string }[] }): boolean {
  return (c.volumeMounts ?? []).some((m) => m.mountPath.replace(/\/+$/, '') === '/etc/hosts');
}
