/**
 * Serving certificates issued by the cluster (`serverTLSBootstrap: true`, with the gate
 * RotateKubeletServerCertificate, on by default), as the kubelet's server certificate manager
 * (pkg/kubelet/certificate NewKubeletServerCertificateManager on client-go's certificate
 * manager):
 * - at start, the stored pair is used when there is one and it has not expired:
 *   `<cert-dir>/kubelet-server-current.pem`, else `tlsCertFile` + `tlsPrivateKeyFile`, else
 *   `<cert-dir>/kubelet-server.crt` + `.key` (the kubelet's file store, in its order);
 * - connected, a new EC P-256 key and a CSR (`csr-<random>`, signer
 *   `kubernetes.io/kubelet-serving`, `CN=system:node:<node>, O=system:nodes`, usages
 *   digital signature + server auth (key encipherment only for RSA keys: nodelet's are EC),
 *   SANs = the node's addresses as its Node reports them: the hostname as a DNS name (an IP
 *   hostname as an IP) and every InternalIP) are sent at once when there is no usable pair or
 *   it lacks one of those names, else at a random point between 70 % and 90 % of its
 *   lifetime; the issued certificate is stored (`kubelet-server-<time>.pem`, 0600, atomic,
 *   the `kubelet-server-current.pem` link moved by a rename) and every listener told, so the
 *   HTTPS server serves it for new connections without a restart;
 * - until a certificate is there (and once it has expired) there is none: the HTTPS server's
 *   handshakes fail ("no serving certificate available for the kubelet"), never a
 *   self-signed certificate;
 * - no CSR without an IP address to ask for (unless the gate AllowDNSOnlyNodeCSR);
 * - a failed request (refused, denied, not issued within 15 minutes) is logged and made
 *   again after a backoff of 2 s doubling to 32 s (client-go's, 10 % jitter).
 * Nobody approves serving CSRs automatically: a person or a controller does
 * (`kubectl certificate approve`).
 *
 * Built by connected mode (src/connected.ts) or, standalone, by the server wiring (no
 * requests then: only a stored pair is served). start(signal) runs the loop on the injected
 * clock until stop() or the signal.
 */
import crypto, { X509Certificate } from 'node:crypto';
import fsp from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { backoffDelay, type Clock } from '../clock.js';
import { errorMessage, isNodeletError } from '../errors.js';
import type { Logger } from '../log.js';
import { storeClientPair } from './bootstrap.js';
import { ControlPlaneClient } from './client.js';
import { createCsr, waitForCertificate, type CertificateSigningRequest } from './csr.js';
import type { ClusterAccess } from './kubeconfig.js';
import { createCsrPem, ipBytes } from '../system/pkcs10.js';
import { retryUntilDone, rotationDeadline } from './rotation.js';
import { FILE_LIMITS, readBoundedText } from '../system/safe-file.js';
import { NO_SERVING_CERTIFICATE, type ServingCertificateSource, type ServingPair } from '../server/serving-source.js';

export { NO_SERVING_CERTIFICATE, type ServingCertificateSource, type ServingPair };

export const SERVING_PAIR = 'kubelet-server';
export const KUBELET_SERVING_SIGNER = 'kubernetes.io/kubelet-serving';
/** Usages of an EC key's serving certificate (client-go's DefaultKubeletServingGetUsages). */
export const SERVING_USAGES = Object.freeze(['digital signature', 'server auth']);
/** client-go's wait for one request's certificate (certificateWaitTimeout). */
export const SERVING_WAIT_MS = 15 * 60_000;
/** What a handshake without a certificate fails with, in the kubelet's words. */

export interface ServingTemplate {
  commonName: string;
  organization: readonly string[];
  dnsNames: string[];
  ipAddresses: string[];
}

/**
 * Pure: what the request asks for, from the node's addresses as its Node reports them (every
 * InternalIP, then the Hostname), as the kubelet's addressesToHostnamesAndIPs reads them: a
 * hostname that is an IP counts as an IP; both lists deduplicated and sorted. Undefined when
 * there is no IP (nothing is requested), or no name at all with `allowDnsOnly`.
 */
export function servingTemplate(nodeName: string, hostname: string, ips: readonly string[], allowDnsOnly = false): ServingTemplate | undefined {
  const dns = new Set<string>();
  const addrs = new Set<string>();
  for (const ip of ips) if (ip !== '' && net.isIP(ip) !== 0) addrs.add(ip);
  if (hostname !== '') (net.isIP(hostname) !== 0 ? addrs : dns).add(hostname);
  if (addrs.size === 0 && !(allowDnsOnly && dns.size > 0)) return undefined;
  return { commonName: `system:node:${nodeName}`, organization: ['system:nodes'], dnsNames: [...dns].sort(), ipAddresses: [...addrs].sort() };
}

/** The subject's CN and O values of a certificate. */
function subjectOf(cert: X509Certificate): { cn: string | undefined; orgs: string[] } {
  const lines = cert.subject.split('\n');
  return { cn: lines.find((l) => l.startsWith('CN='))?.slice(3), orgs: lines.filter((l) => l.startsWith('O=')).map((l) => l.slice(2)) };
}

/**
 * Pure: why `cert` does not serve what `t` asks (client-go's certSatisfiesTemplate: the CN
 * differs, or a DNS name, IP or organization is missing; extra names are fine), or undefined.
 */
export function templateProblem(cert: X509Certificate, t: ServingTemplate): string | undefined {
  const { cn, orgs } = subjectOf(cert);
  if (cn !== t.commonName) return `its CN (${cn ?? 'none'}) is not ${t.commonName}`;
  const sans = (cert.subjectAltName ?? '').split(',').map((s) => s.trim());
  const dns = new Set(sans.filter((s) => s.startsWith('DNS:')).map((s) => s.slice(4)));
  const ips = new Set(sans.filter((s) => s.startsWith('IP Address:')).map((s) => ipKey(s.slice(11))));
  const missingDns = t.dnsNames.filter((d) => !dns.has(d));
  if (missingDns.length > 0) return `it lacks the DNS names ${missingDns.join(', ')}`;
  const missingIps = t.ipAddresses.filter((ip) => !ips.has(ipKey(ip)));
  if (missingIps.length > 0) return `it lacks the IP addresses ${missingIps.join(', ')}`;
  const missingOrgs = t.organization.filter((o) => !orgs.includes(o));
  if (missingOrgs.length > 0) return `it lacks the organizations ${missingOrgs.join(', ')}`;
  return undefined;
}

/** An IP in one spelling (OpenSSL prints IPv6 uncompressed). */
function ipKey(ip: string): string {
  try {
    return ipBytes(ip).toString('hex');
  } catch {
    return ip;
  }
}

/**
 * Pure: when to ask for the next certificate: now when there is none or it does not serve
 * what the template asks, else between 70 % and 90 % of its lifetime (`rand` in [0, 1)).
 */
export function nextServingDeadline(cert: X509Certificate | undefined, t: ServingTemplate, now: number, rand: number): number {
  if (!cert || templateProblem(cert, t) !== undefined) return now;
  return rotationDeadline(Date.parse(cert.validFrom), Date.parse(cert.validTo), rand);
}

/** A pair's certificate, when both parse and belong together; else why not. */
function checkPair(pair: ServingPair): { leaf: X509Certificate } | { problem: string } {
  try {
    const leaf = new X509Certificate(pair.cert);
    if (!leaf.checkPrivateKey(crypto.createPrivateKey(pair.key))) return { problem: 'the key does not match the certificate' };
    return { leaf };
  } catch (err) {
    return { problem: errorMessage(err) };
  }
}

const CERTS_RE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/g;
/** Every CERTIFICATE block of a PEM text (the leaf, then any chain the signer added), as served. */
const certificatesOf = (pem: string): string => (pem.match(CERTS_RE) ?? []).map((b) => `${b.trimEnd()}\n`).join('');
const KEY_RE = /-----BEGIN (EC |RSA )?PRIVATE KEY-----[\s\S]+?-----END (EC |RSA )?PRIVATE KEY-----\n?/;

/** A bounded read (a FIFO or device is refused), undefined when the file does not exist. */
async function readIfThere(file: string, what: string): Promise<string | undefined> {
  try {
    return await readBoundedText(file, { maxBytes: FILE_LIMITS.pem, what });
  } catch (err) {
    if (isNodeletError(err, 'NOT_FOUND')) return undefined;
    throw err;
  }
}

/**
 * The stored pair, in the kubelet's file-store order (see the file comment): the first
 * place that exists is read. A pair that cannot be read, does not match or has expired is
 * logged and not used (a new one is requested). Never throws.
 */
export async function loadStoredServingPair(o: { certDir: string; tlsCertFile?: string; tlsPrivateKeyFile?: string; now: number; log: Logger }): Promise<(ServingPair & { file: string }) | undefined> {
  const candidates: Array<[string, string]> = [[path.join(o.certDir, `${SERVING_PAIR}-current.pem`), '']];
  if (o.tlsCertFile && o.tlsPrivateKeyFile) candidates.push([o.tlsCertFile, o.tlsPrivateKeyFile]);
  candidates.push([path.join(o.certDir, `${SERVING_PAIR}.crt`), path.join(o.certDir, `${SERVING_PAIR}.key`)]);
  for (const [certFile, keyFile] of candidates) {
    let pair: ServingPair;
    try {
      const certText = await readIfThere(certFile, 'serving certificate');
      const keyText = keyFile === '' ? certText : await readIfThere(keyFile, 'serving key');
      if (certText === undefined || keyText === undefined) continue;
      pair = { cert: certificatesOf(certText), key: KEY_RE.exec(keyText)?.[0] ?? '' };
    } catch (err) {
      o.log.warn({ file: certFile, err: errorMessage(err) }, `serving certificate ${certFile} cannot be read (${errorMessage(err)}); requesting a new one`);
      return undefined;
    }
    const checked = checkPair(pair);
    if ('problem' in checked) {
      o.log.warn({ file: certFile, problem: checked.problem }, `serving certificate ${certFile} cannot be used (${checked.problem}); requesting a new one`);
      return undefined;
    }
    if (o.now > Date.parse(checked.leaf.validTo)) {
      o.log.warn({ file: certFile, notAfter: checked.leaf.validTo }, `serving certificate ${certFile} expired at ${checked.leaf.validTo}; requesting a new one`);
      return undefined;
    }
    return { ...pair, file: certFile };
  }
  return undefined;
}

/** Sends one CSR and waits for its certificate: resolves with the request's name and the PEM. */
export type CertificateRequester = (csr: CertificateSigningRequest, signal: AbortSignal) => Promise<{ name: string; certificate: string }>;

/** The requester over the control plane: a client with the node's current credentials, per request. */
export function controlPlaneRequester(access: () => ClusterAccess, clock: Clock, log: Logger, waitMs = SERVING_WAIT_MS): CertificateRequester {
  return async (csr, signal) => {
    const api = new ControlPlaneClient({ access: access(), timeoutMs: 30_000 });
    try {
      const made = await createCsr(api, csr, signal);
      log.info({ csr: made.name }, `requesting a serving certificate: certificatesigningrequest ${made.name} waits to be approved (kubectl certificate approve ${made.name})`);
      const certificate = await waitForCertificate(api, made.name, made.uid, {
        signal,
        clock,
        timeoutMs: waitMs,
        onApproved: () => log.info({ csr: made.name }, `certificatesigningrequest ${made.name} is approved, waiting to be issued`),
      });
      return { name: made.name, certificate };
    } finally {
      await api.close(0);
    }
  };
}

export interface ServingManagerOptions {
  nodeName: string;
  hostname: string;
  ips: readonly string[];
  certDir: string;
  tlsCertFile?: string;
  tlsPrivateKeyFile?: string;
  /** Gate AllowDNSOnlyNodeCSR: request with a DNS name alone when the node has no IP. */
  allowDnsOnly?: boolean;
  /** Asks the cluster; absent (standalone): only a stored pair is served, nothing is requested. */
  request?: CertificateRequester;
  clock: Clock;
  logger: Logger;
  random?: () => number;
}

export class ServingCertificateManager implements ServingCertificateSource {
  readonly #o: ServingManagerOptions;
  readonly #log: Logger;
  readonly #template: ServingTemplate | undefined;
  readonly #listeners: Array<(pair: ServingPair | undefined) => void> = [];
  #pair: ServingPair | undefined;
  #leaf: X509Certificate | undefined;
  #expiry: AbortController | undefined;
  #stop = new AbortController();
  #done: Promise<void> | undefined;

  private constructor(o: ServingManagerOptions, stored: ServingPair | undefined) {
    this.#o = o;
    this.#log = o.logger.child({ component: 'serving-certificate' });
    this.#template = servingTemplate(o.nodeName, o.hostname, o.ips, o.allowDnsOnly);
    if (stored) this.#set(stored);
  }

  /** Reads the stored pair (see the file comment) and builds the manager; starts nothing. */
  static async load(o: ServingManagerOptions): Promise<ServingCertificateManager> {
    const log = o.logger.child({ component: 'serving-certificate' });
    const stored = await loadStoredServingPair({ certDir: o.certDir, ...(o.tlsCertFile ? { tlsCertFile: o.tlsCertFile } : {}), ...(o.tlsPrivateKeyFile ? { tlsPrivateKeyFile: o.tlsPrivateKeyFile } : {}), now: o.clock.now(), log });
    if (stored) log.info({ file: stored.file, notAfter: new X509Certificate(stored.cert).validTo }, `serving certificate loaded from ${stored.file}`);
    return new ServingCertificateManager(o, stored && { cert: stored.cert, key: stored.key });
  }

  current(): ServingPair | undefined {
    return this.#pair;
  }

  onChange(listener: (pair: ServingPair | undefined) => void): void {
    this.#listeners.push(listener);
  }

  /** What the requests ask for (undefined: nothing can be requested). */
  get template(): ServingTemplate | undefined {
    return this.#template;
  }

  start(signal?: AbortSignal): void {
    signal?.addEventListener('abort', () => this.#stop.abort(), { once: true });
    if (!this.#o.request) {
      if (!this.#pair) this.#log.warn(`serverTLSBootstrap is set but nodelet runs standalone: no certificate can be requested and none is stored in ${this.#o.certDir}, so the HTTPS port serves none`);
      return;
    }
    this.#done = this.#run().catch((err: unknown) => {
      if (!this.#stop.signal.aborted) this.#log.error({ err: errorMessage(err) }, `serving certificate manager stopped: ${errorMessage(err)}`);
    });
  }

  async stop(): Promise<void> {
    this.#stop.abort();
    this.#expiry?.abort();
    await this.#done;
  }

  async #run(): Promise<void> {
    const { clock } = this.#o;
    const random = this.#o.random ?? Math.random;
    const signal = this.#stop.signal;
    const t = this.#template;
    if (!t) {
      this.#log.warn({ ips: this.#o.ips }, 'no serving certificate is requested: the node has no IP address to put in it');
      return;
    }
    for (;;) {
      const deadline = nextServingDeadline(this.#leaf, t, clock.now(), random());
      if (this.#leaf && deadline <= clock.now()) this.#log.info({ problem: templateProblem(this.#leaf, t) }, `the serving certificate does not name this node as it is now (${templateProblem(this.#leaf, t) ?? ''}); requesting a new one`);
      if (deadline > clock.now()) {
        this.#log.info({ notAfter: this.#leaf?.validTo, rotateAt: new Date(deadline).toISOString() }, `serving certificate expires at ${this.#leaf?.validTo}; renewing it at ${new Date(deadline).toISOString()}`);
        await clock.sleep(deadline - clock.now(), signal);
      }
      await retryUntilDone(() => this.renewOnce(signal), {
        clock,
        signal,
        delayMs: (n) => backoffDelay(Math.min(n, 4), 2000, 32_000, 0.1, random),
        onError: (err, delayMs) => this.#log.error({ err: errorMessage(err), retryInMs: delayMs }, `serving certificate request failed: ${errorMessage(err)}; retrying in ${Math.round(delayMs / 1000)} s`),
      });
    }
  }

  /** One request: key, CSR, wait, store, serve. Throws on any failure (nothing changes then). */
  async renewOnce(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    const t = this.#template;
    if (!o.request || !t) throw new Error('no serving certificate can be requested (standalone, or no address to name)');
    const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const csr: CertificateSigningRequest = {
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { generateName: 'csr-' } as CertificateSigningRequest['metadata'],
      spec: {
        request: Buffer.from(createCsrPem(privateKey, { commonName: t.commonName, organization: t.organization }, { dnsNames: t.dnsNames, ipAddresses: t.ipAddresses })).toString('base64'),
        signerName: KUBELET_SERVING_SIGNER,
        usages: [...SERVING_USAGES],
      },
    };
    const { name, certificate } = await o.request(csr, signal);
    const leaf = new X509Certificate(certificate);
    const spki = (k: crypto.KeyObject) => k.export({ type: 'spki', format: 'der' });
    if (!spki(leaf.publicKey).equals(spki(crypto.createPublicKey(privateKey)))) throw new Error(`certificatesigningrequest ${name}: the issued certificate is not for the requested key`);
    if (o.clock.now() > Date.parse(leaf.validTo)) throw new Error(`certificatesigningrequest ${name}: the issued certificate expired at ${leaf.validTo}`);
    const keyPem = privateKey.export({ type: 'sec1', format: 'pem' }) as string;
    await fsp.mkdir(o.certDir, { recursive: true, mode: 0o700 });
    const file = await storeClientPair(o.certDir, certificate, keyPem, o.clock.now(), SERVING_PAIR);
    this.#set({ cert: certificatesOf(certificate), key: keyPem });
    this.#log.info({ csr: name, file, notAfter: leaf.validTo, dns: t.dnsNames, ips: t.ipAddresses }, `serving certificate issued (certificatesigningrequest ${name}); the HTTPS port serves it from now on`);
  }

  /** Serves `pair` (or none), tells the listeners, and drops it when it expires. */
  #set(pair: ServingPair | undefined): void {
    this.#expiry?.abort();
    this.#pair = pair;
    this.#leaf = pair ? new X509Certificate(pair.cert) : undefined;
    for (const l of this.#listeners) {
      try {
        l(pair);
      } catch (err) {
        this.#log.error({ err: errorMessage(err) }, `applying the serving certificate failed: ${errorMessage(err)}`);
      }
    }
    if (!pair || !this.#leaf) return;
    const ctl = new AbortController();
    this.#expiry = ctl;
    const notAfter = Date.parse(this.#leaf.validTo);
    this.#o.clock.sleep(Math.max(0, notAfter - this.#o.clock.now()) + 1000, ctl.signal).then(
      () => {
        if (this.#pair !== pair) return;
        this.#log.error({ notAfter: new Date(notAfter).toISOString() }, `the serving certificate expired at ${new Date(notAfter).toISOString()}; the HTTPS port serves none until a new one is issued`);
        this.#set(undefined);
      },
      () => {},
    );
  }
}
