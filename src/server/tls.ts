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
import { promisify } from 'node:util';
import { NodeletError, errorMessage, isNodeletError } from '../errors.js';
import { silentLogger, type Logger } from '../log.js';
import { FILE_LIMITS, readBoundedText, readFailure } from '../system/safe-file.js';
import { exists } from '../system/fs-util.js';
import { writeFileAtomic } from '../system/root-dir.js';
import { OIDS, bitString, boolean, context, integer, name, octetString, oid, sequence, time, tlv, toPem } from '../system/der.js';
import { signDer, signatureAlgorithm, subjectAltNameExtension } from '../system/pkcs10.js';

const generateEcKeyPair = (namedCurve: string) => promisify(crypto.generateKeyPair)('ec', { namedCurve });

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

/**
 * Generates a self-signed ECDSA P-256 serving certificate valid from `nowMs` for one year:
 * X.509 v3, CA false (critical), key usage digitalSignature + keyEncipherment (critical),
 * EKU serverAuth, the SANs. Built with the DER writer the CSRs use (src/system/der.ts)
 * and signed by node:crypto: @peculiar/x509 did it before, and a node's first start then kept
 * its modules (with reflect-metadata and tsyringe, ~8 MB of RSS) loaded for good.
 */
export async function generateSelfSigned(hostname: string, sans: { dns: string[]; ips: string[] }, nowMs: number): Promise<{ cert: string; key: string }> {
  const { privateKey, publicKey } = await generateEcKeyPair('prime256v1');
  const serial = crypto.randomBytes(16);
  serial[0] = (serial[0]! & 0x7f) | 0x10; // positive, and 16 bytes long
  const subject = name({ commonName: `${hostname}@${Math.floor(nowMs / 1000)}` });
  const alg = signatureAlgorithm(privateKey);
  const extensions = [
    sequence(oid(OIDS.basicConstraints), boolean(true), octetString(sequence())),
    // digitalSignature (bit 0) and keyEncipherment (bit 2): 0xa0, its 5 low bits unused.
    sequence(oid(OIDS.keyUsage), boolean(true), octetString(tlv(0x03, Buffer.from([5, 0xa0])))),
    sequence(oid(OIDS.extKeyUsage), octetString(sequence(oid(OIDS.serverAuth)))),
    subjectAltNameExtension({ dnsNames: sans.dns, ipAddresses: sans.ips }),
  ].filter((e): e is Buffer => e !== undefined);
  const tbs = sequence(
    context(0, integer(2)), // v3
    integer(serial),
    alg,
    subject, // issuer: itself
    // Back-dated a minute: clocks of clients drift.
    sequence(time(nowMs - 60_000), time(nowMs + VALIDITY_MS)),
    subject,
    publicKey.export({ type: 'spki', format: 'der' }),
    context(3, sequence(...extensions)),
  );
  const der = sequence(tbs, alg, bitString(signDer(privateKey, tbs)));
  return { cert: toPem('CERTIFICATE', der), key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string };
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
