/**
 * The HTTPS server's serving certificate, as the kubelet gets it:
 * - `tlsCertFile` + `tlsPrivateKeyFile` when configured: read as given (never written);
 * - otherwise a self-signed certificate generated once into `<certDir>/kubelet.crt` and
 *   `<certDir>/kubelet.key` and reused on every restart while it is still usable;
 * - neither with `serverTLSBootstrap` (and its gate): then the cluster issues it
 *   (serving-cert.ts) and this file is not used (src/wiring/servers.ts decides).
 *
 * Generated: ECDSA P-256 (3-7 ms, against 120-170 ms for RSA 2048), valid one year like
 * the kubelet's, subject CN `<hostname>@<unix seconds>`, SANs = the node's hostname and
 * IPs plus `localhost`/`127.0.0.1` (so local tools can verify it too), EKU serverAuth.
 * The key is written 0600 and the directory created 0700; both files are written to a
 * temporary name and renamed, so a crash never leaves half a key.
 *
 * A pair on disk that is unreadable, mismatched, expired (or expiring within a day), or
 * no longer names the node's hostname or IPs is regenerated, with a log line saying why.
 * Called once at startup by the composition root.
 */
import crypto from 'node:crypto';
import fsp from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { NodeletError, errorMessage, isNodeletError } from '../errors.js';
import { silentLogger, type Logger } from '../log.js';
import { FILE_LIMITS, readBoundedText, readFailure } from '../system/safe-file.js';
import { exists } from '../system/fs-util.js';
import { writeFileAtomic } from '../system/root-dir.js';

export const SELF_SIGNED_CERT_NAME = 'kubelet.crt';
export const SELF_SIGNED_KEY_NAME = 'kubelet.key';
const VALIDITY_MS = 365 * 24 * 3600 * 1000;
/** A certificate expiring sooner than this is replaced at startup. */
const RENEW_BEFORE_MS = 24 * 3600 * 1000;

export interface ServingCertOptions {
  /** `tlsCertFile`; with tlsPrivateKeyFile, used as given. */
  certFile?: string;
  /** `tlsPrivateKeyFile`. */
  keyFile?: string;
  /** `--cert-dir`: where the self-signed pair lives. */
  certDir: string;
  /** Node hostname, first SAN. */
  hostname: string;
  /** Node IPs, SANs. */
  ips: readonly string[];
  /** Milliseconds since the epoch (tests pass a fixed time). */
  now?: () => number;
  logger?: Logger;
}

export interface ServingCert {
  /** PEM certificate (chain). */
  cert: string;
  /** PEM private key. */
  key: string;
  certFile: string;
  keyFile: string;
  /** True when this call generated the pair. */
  generated: boolean;
}

/** Names the certificate must carry as SANs: hostname, IPs, localhost, 127.0.0.1 (deduplicated). */
export function servingSans(hostname: string, ips: readonly string[]): { dns: string[]; ips: string[] } {
  const dns = [...new Set([hostname, 'localhost'].filter((h) => h && net.isIP(h) === 0))];
  const addrs = [...new Set([...ips, ...(net.isIP(hostname) ? [hostname] : []), '127.0.0.1'])];
  return { dns, ips: addrs };
}

/**
 * Loads the configured pair, or loads/generates the self-signed one. Throws
 * INVALID_ARGUMENT naming `tlsCertFile`/`tlsPrivateKeyFile` when a configured file is
 * missing, unreadable, not PEM, or the two do not match; only one of the two set is an
 * error too.
 */
export async function loadOrCreateServingCert(o: ServingCertOptions): Promise<ServingCert> {
  const log = (o.logger ?? silentLogger()).child({ component: 'tls' });
  const now = o.now ?? Date.now;
  if (o.certFile || o.keyFile) {
    if (!o.certFile || !o.keyFile) {
      throw new NodeletError('INVALID_ARGUMENT', `tlsCertFile and tlsPrivateKeyFile must be set together (only ${o.certFile ? 'tlsCertFile' : 'tlsPrivateKeyFile'} is set)`);
    }
    const cert = await readPem('tlsCertFile', o.certFile);
    const key = await readPem('tlsPrivateKeyFile', o.keyFile);
    const problem = pairProblem(cert, key);
    if (problem) throw new NodeletError('INVALID_ARGUMENT', `tlsCertFile "${o.certFile}" / tlsPrivateKeyFile "${o.keyFile}": ${problem}`);
    return { cert, key, certFile: o.certFile, keyFile: o.keyFile, generated: false };
  }

  const certFile = path.join(o.certDir, SELF_SIGNED_CERT_NAME);
  const keyFile = path.join(o.certDir, SELF_SIGNED_KEY_NAME);
  const sans = servingSans(o.hostname, o.ips);
  const existing = await readExisting(certFile, keyFile);
  if (existing.ok) {
    const problem = pairProblem(existing.cert, existing.key) ?? usabilityProblem(existing.cert, sans, now());
    if (!problem) return { cert: existing.cert, key: existing.key, certFile, keyFile, generated: false };
    log.warn({ certFile, keyFile, problem }, 'self-signed serving certificate not usable; generating a new one');
  } else if (existing.reason !== 'missing') {
    log.warn({ certFile, keyFile, problem: existing.reason }, 'self-signed serving certificate not readable; generating a new one');
  }

  const { cert, key } = await generateSelfSigned(o.hostname, sans, now());
  await ensurePrivateDir(o.certDir);
  // Key first: a certificate without its key would be rejected at the next start anyway.
  await writeAtomic(keyFile, key, 0o600);
  await writeAtomic(certFile, cert, 0o644);
  log.info({ certFile, keyFile, dns: sans.dns, ips: sans.ips }, 'generated self-signed serving certificate');
  return { cert, key, certFile, keyFile, generated: true };
}

/** Generates a self-signed ECDSA P-256 serving certificate valid from `nowMs` for one year. */
export async function generateSelfSigned(hostname: string, sans: { dns: string[]; ips: string[] }, nowMs: number): Promise<{ cert: string; key: string }> {
  // Loaded only here: @peculiar/x509 with reflect-metadata holds ~20 MB of RSS, and only the
  // run that generates a certificate needs it (bench/footprint.ts, bench/startup.ts).
  await import('reflect-metadata');
  const mod = await import('@peculiar/x509');
  // A CommonJS package: its namespace, or (bundled) its default export.
  const x509 = 'X509CertificateGenerator' in mod ? mod : (mod as unknown as { default: typeof mod }).default;
  const subtle = crypto.webcrypto.subtle;
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const keys = (await subtle.generateKey(alg, true, ['sign', 'verify'])) as crypto.webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned(
    {
      serialNumber: crypto.randomBytes(16).toString('hex').replace(/^[89a-f]/, '1'),
      name: `CN=${hostname}@${Math.floor(nowMs / 1000)}`,
      // Back-dated a minute: clocks of clients drift.
      notBefore: new Date(nowMs - 60_000),
      notAfter: new Date(nowMs + VALIDITY_MS),
      signingAlgorithm: alg,
      keys,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        new x509.SubjectAlternativeNameExtension([
          ...sans.dns.map((value) => ({ type: 'dns' as const, value })),
          ...sans.ips.map((value) => ({ type: 'ip' as const, value })),
        ]),
      ],
    },
    crypto.webcrypto,
  );
  const pkcs8 = await subtle.exportKey('pkcs8', keys.privateKey);
  const key = x509.PemConverter.encode(pkcs8, 'PRIVATE KEY');
  return { cert: cert.toString('pem') + '\n', key: key + '\n' };
}

/** Why a PEM cert/key pair cannot serve, or undefined when it can. */
function pairProblem(certPem: string, keyPem: string): string | undefined {
  let cert: crypto.X509Certificate;
  let key: crypto.KeyObject;
  try {
    cert = new crypto.X509Certificate(certPem);
  } catch (err) {
    return `certificate does not parse: ${errorMessage(err)}`;
  }
  try {
    key = crypto.createPrivateKey(keyPem);
  } catch (err) {
    return `private key does not parse: ${errorMessage(err)}`;
  }
  if (!cert.checkPrivateKey(key)) return 'the private key does not match the certificate';
  return undefined;
}

/** Why a self-signed pair should be regenerated (expiry, SANs), or undefined. */
function usabilityProblem(certPem: string, sans: { dns: string[]; ips: string[] }, nowMs: number): string | undefined {
  const cert = new crypto.X509Certificate(certPem);
  const notAfter = Date.parse(cert.validTo);
  if (!(notAfter - RENEW_BEFORE_MS > nowMs)) return `expired or expiring (notAfter ${cert.validTo})`;
  if (Date.parse(cert.validFrom) > nowMs + 60_000) return `not yet valid (notBefore ${cert.validFrom})`;
  const have = new Set((cert.subjectAltName ?? '').split(',').map((s) => s.trim()));
  const missing = [...sans.dns.map((d) => `DNS:${d}`), ...sans.ips.map((ip) => `IP Address:${ip}`)].filter((n) => !have.has(n));
  if (missing.length) return `subject alternative names lack ${missing.join(', ')}`;
  return undefined;
}

/** A PEM file, bounded and non-blocking (a FIFO or device is refused, never read). */
function readPemFile(file: string, what: string): Promise<string> {
  return readBoundedText(file, { maxBytes: FILE_LIMITS.pem, what });
}

async function readPem(field: string, file: string): Promise<string> {
  try {
    return await readPemFile(file, field);
  } catch (err) {
    throw new NodeletError('INVALID_ARGUMENT', `${field} "${file}": ${readFailure(err)}`, { field, file }, { cause: err });
  }
}

async function readExisting(certFile: string, keyFile: string): Promise<{ ok: true; cert: string; key: string } | { ok: false; reason: string }> {
  try {
    const [cert, key] = await Promise.all([readPemFile(certFile, 'serving certificate'), readPemFile(keyFile, 'serving key')]);
    return { ok: true, cert, key };
  } catch (err) {
    if (isNodeletError(err, 'NOT_FOUND')) {
      // Both missing is the first start; one missing is worth a log line.
      const [c, k] = await Promise.all([exists(certFile), exists(keyFile)]);
      return { ok: false, reason: c || k ? `${c ? keyFile : certFile} is missing` : 'missing' };
    }
    return { ok: false, reason: errorMessage(err) };
  }
}

/** Creates `dir` 0700 when missing (parents as mkdir -p). An existing directory keeps its mode. */
async function ensurePrivateDir(dir: string): Promise<void> {
  try {
    await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new NodeletError('INVALID_ARGUMENT', `--cert-dir "${dir}": ${errorMessage(err)}`, { dir }, { cause: err });
  }
}

/** root-dir.ts writeFileAtomic (temp, fsync, rename), its failure as INTERNAL naming the file. */
async function writeAtomic(file: string, data: string, mode: number): Promise<void> {
  try {
    await writeFileAtomic(file, data, mode);
  } catch (err) {
    throw new NodeletError('INTERNAL', `writing ${file}: ${errorMessage(err)}`, { file }, { cause: err });
  }
}
