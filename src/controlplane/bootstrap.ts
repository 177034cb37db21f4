/**
 * TLS bootstrap, as the kubelet's pkg/kubelet/certificate/bootstrap LoadClientCert: with
 * `--bootstrap-kubeconfig`, when the `--kubeconfig` file is missing, unreadable or holds
 * an expired (or no) client certificate, nodelet asks the control plane for one with the
 * bootstrap credentials and writes the kubeconfig that uses it.
 *
 * One attempt: key (the current pair's, else `<cert-dir>/kubelet-client.key.tmp`, kept
 * across attempts so a retry finds its earlier request; a new EC P-256 key when there is
 * none) -> PKCS#10 request (CN=system:node:<node>, O=system:nodes) -> CSR
 * `node-csr-<digest>` for signer kubernetes.io/kube-apiserver-client-kubelet, usages
 * digital signature + client auth -> wait (3600 s, the kubelet's) for Approved and the
 * certificate -> `<cert-dir>/kubelet-client-<YYYY-MM-DD-HH-MM-SS>.pem` (certificate then
 * key, 0600, written atomically) -> the `kubelet-client-current.pem` link replaced by a
 * rename -> the kubeconfig written atomically (0600) pointing at that link. A failed attempt
 * leaves the old kubeconfig as it was (or none); it is logged and retried with backoff until
 * the caller's signal ends it. A denied or failed request also drops the temporary key, so
 * the next attempt makes a new request instead of finding the denied one again.
 *
 * Called once at startup, before connected mode reads the kubeconfig (src/connected.ts).
 */
import crypto, { X509Certificate, type KeyObject } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import YAML from 'yaml';
import { backoffDelay, type Clock } from '../clock.js';
import { NodeletError, errorMessage, isNodeletError } from '../errors.js';
import type { Logger } from '../log.js';
import { writeFileAtomic } from '../system/root-dir.js';
import { ControlPlaneClient } from './client.js';
import { KUBELET_CLIENT_SIGNER, createCsr, digestedName, waitForCertificate, type CertificateSigningRequest } from './csr.js';
import { loadKubeconfig, type ClusterAccess } from './kubeconfig.js';
import { createCsrPem } from '../system/pkcs10.js';

export const CURRENT_PEM = 'kubelet-client-current.pem';
export const TEMP_KEY = 'kubelet-client.key.tmp';
/** The kubelet's wait for one request (requestNodeCertificate): an hour. */
export const CSR_WAIT_MS = 3600_000;
/** Usages of an EC key's client certificate (the kubelet's certificate manager drops key encipherment for non-RSA keys). */
export const CLIENT_USAGES = Object.freeze(['digital signature', 'client auth']);

export interface BootstrapOptions {
  /** `--kubeconfig`: the file to write. */
  kubeconfig: string;
  /** `--bootstrap-kubeconfig`. */
  bootstrapKubeconfig: string;
  /** `--cert-dir`. */
  certDir: string;
  nodeName: string;
  clock: Clock;
  logger: Logger;
  signal: AbortSignal;
  /** Wait for one request (default CSR_WAIT_MS). */
  waitMs?: number;
  /** Backoff between attempts: base and cap (default 2 s doubling to 5 min, 20 % jitter). */
  retryBaseMs?: number;
  retryMaxMs?: number;
}

/** Every certificate of a PEM bundle, parsed; throws when there is none or one does not parse. */
function certificatesOf(pem: string): X509Certificate[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new Error('no certificate in it');
  return blocks.map((b) => new X509Certificate(b));
}

/**
 * Whether `file` is a kubeconfig nodelet can use as it is: it reads and its client
 * certificate has not expired (the kubelet's isClientConfigStillValid). Missing: false.
 * Unreadable or without a certificate: false, with the reason logged (it is bootstrapped
 * again). A stat error other than a missing file stops startup (CONFIG_INVALID).
 */
export function clientConfigStillValid(file: string, now: number, log: Logger): boolean {
  try {
    fs.statSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw new NodeletError('CONFIG_INVALID', `--kubeconfig ${file}: cannot stat it: ${(err as NodeJS.ErrnoException).code ?? errorMessage(err)}`, { file });
  }
  let access: ClusterAccess;
  try {
    access = loadKubeconfig(file);
  } catch (err) {
    log.warn({ file, err: errorMessage(err) }, `the kubeconfig ${file} cannot be used (${errorMessage(err)}); bootstrapping a new client certificate`);
    return false;
  }
  if (!access.cert) {
    log.warn({ file }, `the kubeconfig ${file} has no client certificate; bootstrapping one`);
    return false;
  }
  try {
    for (const c of certificatesOf(access.cert)) {
      const notAfter = Date.parse(c.validTo);
      if (now > notAfter) {
        log.warn({ file, notAfter: new Date(notAfter).toISOString() }, `part of the client certificate of ${file} expired at ${new Date(notAfter).toISOString()}; bootstrapping a new one`);
        return false;
      }
    }
  } catch (err) {
    log.warn({ file, err: errorMessage(err) }, `the client certificate of ${file} does not parse (${errorMessage(err)}); bootstrapping a new one`);
    return false;
  }
  return true;
}

/** The certificate and key of `<cert-dir>/kubelet-client-current.pem` when it holds both and the certificate has not expired at `now`. */
export function readCurrentPair(certDir: string, now: number): { cert: string; key: string } | undefined {
  try {
    const pem = fs.readFileSync(path.join(certDir, CURRENT_PEM), 'utf8');
    const cert = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/.exec(pem)?.[0];
    const key = /-----BEGIN (EC |RSA )?PRIVATE KEY-----[\s\S]+?-----END (EC |RSA )?PRIVATE KEY-----\n?/.exec(pem)?.[0];
    if (!cert || !key) return undefined;
    return now <= Date.parse(new X509Certificate(cert).validTo) ? { cert, key } : undefined;
  } catch {
    return undefined;
  }
}

/** The key of `<cert-dir>/kubelet-client-current.pem` when it holds one (the kubelet reuses it). */
function currentKey(certDir: string): KeyObject | undefined {
  try {
    const pem = fs.readFileSync(path.join(certDir, CURRENT_PEM), 'utf8');
    const m = /-----BEGIN (EC |RSA )?PRIVATE KEY-----[\s\S]+?-----END (EC |RSA )?PRIVATE KEY-----/.exec(pem);
    return m ? crypto.createPrivateKey(m[0]) : undefined;
  } catch {
    return undefined;
  }
}

/** The temporary key of an unfinished bootstrap, or a new EC P-256 key written there (0600). */
async function loadOrGenerateKey(certDir: string): Promise<KeyObject> {
  const file = path.join(certDir, TEMP_KEY);
  try {
    return crypto.createPrivateKey(await fsp.readFile(file, 'utf8'));
  } catch {
    // Missing or unreadable: a new one.
  }
  const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  await writeFileAtomic(file, privateKey.export({ type: 'sec1', format: 'pem' }) as string, 0o600);
  return privateKey;
}

/** `2006-01-02-15-04-05` of Go's certificate store, in local time as the kubelet's. */
export function pemTimestamp(ms: number): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}-${p(d.getHours())}-${p(d.getMinutes())}-${p(d.getSeconds())}`;
}

/**
 * Stores a certificate and its key as the kubelet's file store: the dated pem (0600,
 * atomic), then `<pair>-current.pem` re-pointed by renaming a new link over it. `pair` is
 * the store's name: `kubelet-client` (default) or `kubelet-server` (serving certificates).
 * Returns the path of the current link.
 */
export async function storeClientPair(certDir: string, certPem: string, keyPem: string, now: number, pair = 'kubelet-client'): Promise<string> {
  const dated = path.join(certDir, `${pair}-${pemTimestamp(now)}.pem`);
  await writeFileAtomic(dated, `${certPem.trimEnd()}\n${keyPem.trimEnd()}\n`, 0o600);
  const updated = path.join(certDir, `${pair}-updated`);
  await fsp.rm(updated, { force: true });
  await fsp.symlink(dated, updated);
  const current = path.join(certDir, `${pair}-current.pem`);
  await fsp.rename(updated, current);
  return current;
}

/** The kubeconfig the kubelet writes after a bootstrap: the bootstrap's server and CA, the pem as certificate and key. */
export function bootstrappedKubeconfig(access: ClusterAccess, pemPath: string): string {
  return YAML.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'default-cluster', cluster: { server: access.server, ...(access.ca ? { 'certificate-authority-data': Buffer.from(access.ca).toString('base64') } : {}) } }],
    users: [{ name: 'default-auth', user: { 'client-certificate': pemPath, 'client-key': pemPath } }],
    contexts: [{ name: 'default-context', context: { cluster: 'default-cluster', user: 'default-auth', namespace: 'default' } }],
    'current-context': 'default-context',
    preferences: {},
  });
}

/** One bootstrap attempt with `access` (the bootstrap credentials). */
async function attempt(o: BootstrapOptions, access: ClusterAccess, log: Logger): Promise<void> {
  fs.mkdirSync(o.certDir, { recursive: true, mode: 0o700 });
  const key = currentKey(o.certDir) ?? (await loadOrGenerateKey(o.certDir));
  const subject = { commonName: `system:node:${o.nodeName}`, organization: ['system:nodes'] };
  const name = digestedName(crypto.createPublicKey(key), subject, CLIENT_USAGES);
  const csr: CertificateSigningRequest = {
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: { name },
    spec: { request: Buffer.from(createCsrPem(key, subject)).toString('base64'), signerName: KUBELET_CLIENT_SIGNER, usages: [...CLIENT_USAGES] },
  };
  const api = new ControlPlaneClient({ access, timeoutMs: 30_000 });
  let certPem: string;
  try {
    const made = await createCsr(api, csr, o.signal);
    log.info({ csr: made.name }, `waiting for certificatesigningrequest ${made.name} to be approved and issued`);
    certPem = await waitForCertificate(api, made.name, made.uid, {
      signal: o.signal,
      clock: o.clock,
      timeoutMs: o.waitMs ?? CSR_WAIT_MS,
      onApproved: () => log.info({ csr: made.name }, `certificatesigningrequest ${made.name} is approved, waiting to be issued`),
    });
  } catch (err) {
    // A refused request: the next attempt asks with a new key, so under a new name.
    if (isNodeletError(err, 'FORBIDDEN') && typeof err.details.csr === 'string') await fsp.rm(path.join(o.certDir, TEMP_KEY), { force: true });
    throw err;
  } finally {
    await api.close(0);
  }
  // The certificate must be for this key and still valid, or it is of no use.
  let cert: X509Certificate;
  try {
    cert = certificatesOf(certPem)[0]!;
  } catch (err) {
    throw new NodeletError('INTERNAL', `certificatesigningrequest ${name}: the issued certificate does not parse: ${errorMessage(err)}`, { csr: name });
  }
  const pub = (k: KeyObject) => k.export({ type: 'spki', format: 'der' });
  if (!pub(cert.publicKey).equals(pub(crypto.createPublicKey(key)))) throw new NodeletError('INTERNAL', `certificatesigningrequest ${name}: the issued certificate is not for the requested key`, { csr: name });
  if (o.clock.now() > Date.parse(cert.validTo)) throw new NodeletError('INTERNAL', `certificatesigningrequest ${name}: the issued certificate expired at ${cert.validTo}`, { csr: name });
  const keyPem = key.export({ type: key.asymmetricKeyType === 'ec' ? 'sec1' : 'pkcs1', format: 'pem' }) as string;
  const current = await storeClientPair(o.certDir, certPem, keyPem, o.clock.now());
  await fsp.rm(path.join(o.certDir, TEMP_KEY), { force: true });
  await fsp.mkdir(path.dirname(o.kubeconfig), { recursive: true, mode: 0o755 });
  await writeFileAtomic(o.kubeconfig, bootstrappedKubeconfig(access, current), 0o600);
  log.info({ csr: name, kubeconfig: o.kubeconfig, certificate: current, notAfter: new Date(Date.parse(cert.validTo)).toISOString() }, `client certificate issued (certificatesigningrequest ${name}); wrote ${o.kubeconfig}`);
}

/**
 * Makes sure `--kubeconfig` holds usable credentials, bootstrapping them when it does not.
 * Returns whether a bootstrap ran. Rejects CONFIG_INVALID when the bootstrap kubeconfig is
 * needed and cannot be read, CANCELLED when the signal ends it; every other failure is
 * logged and retried.
 */
export async function ensureClientCertificate(o: BootstrapOptions): Promise<boolean> {
  const log = o.logger.child({ component: 'tls-bootstrap' });
  if (clientConfigStillValid(o.kubeconfig, o.clock.now(), log)) {
    log.debug({ kubeconfig: o.kubeconfig }, 'the kubeconfig is valid; no bootstrap');
    return false;
  }
  let access: ClusterAccess;
  try {
    access = loadKubeconfig(o.bootstrapKubeconfig);
  } catch (err) {
    throw new NodeletError('CONFIG_INVALID', `--bootstrap-kubeconfig: ${errorMessage(err)}`, { file: o.bootstrapKubeconfig, cause: err });
  }
  log.info({ bootstrapKubeconfig: o.bootstrapKubeconfig, server: access.server }, `no usable client certificate in ${o.kubeconfig}: requesting one from ${access.server} with ${o.bootstrapKubeconfig}`);
  for (let n = 0; ; n++) {
    try {
      await attempt(o, access, log);
      return true;
    } catch (err) {
      if (o.signal.aborted) throw new NodeletError('CANCELLED', 'TLS bootstrap cancelled', {}, { cause: err });
      const delayMs = backoffDelay(n, o.retryBaseMs ?? 2000, o.retryMaxMs ?? 300_000, 0.2);
      log.error({ err: errorMessage(err), ...(isNodeletError(err) && typeof err.details.csr === 'string' ? { csr: err.details.csr } : {}), retryInMs: delayMs }, `TLS bootstrap failed: ${errorMessage(err)}; retrying in ${Math.round(delayMs / 1000)} s`);
      try {
        await o.clock.sleep(delayMs, o.signal);
      } catch {
        throw new NodeletError('CANCELLED', 'TLS bootstrap cancelled');
      }
    }
  }
}
