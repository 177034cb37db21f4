/**
 * PKCS#10 certificate requests (RFC 2986), as client-go's certutil.MakeCSR writes them for
 * a kubelet: subject O=... then CN=..., an extensionRequest attribute with the subjectAltNames
 * when there are any (serving certificates), else no attributes, signed ECDSA-with-SHA256 (or
 * SHA256-with-RSA for an RSA key). node:crypto has no API that makes a request, hence the
 * small DER writer (der.ts). Pure apart from the signature (node:crypto, microseconds).
 */
import crypto, { type KeyObject } from 'node:crypto';
import net from 'node:net';
import { NodeletError } from '../errors.js';
import { OIDS, bitString, context, integer, name, nullValue, octetString, oid, sequence, setOf, tlv, toPem } from './der.js';

export interface CsrSubject {
  commonName: string;
  organization?: readonly string[];
}

/** Subject alternative names a request asks for (a serving certificate's: DNS names, IP addresses). */
export interface CsrAltNames {
  dnsNames?: readonly string[];
  ipAddresses?: readonly string[];
}

/** An IP address's bytes as Go's x509 writes them: 4 for IPv4 (and IPv4-mapped IPv6), else 16. */
export function ipBytes(ip: string): Buffer {
  if (net.isIPv4(ip)) return Buffer.from(ip.split('.').map(Number));
  if (!net.isIPv6(ip)) throw new NodeletError('INVALID_ARGUMENT', `certificate request: "${ip}" is not an IP address`);
  let text = ip.replace(/%.*$/, '');
  // A trailing dotted quad (::ffff:1.2.3.4) becomes two hextets.
  const quad = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (quad) {
    const b = quad[1]!.split('.').map(Number);
    text = `${text.slice(0, quad.index)}${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  const mapped = out.subarray(0, 10).every((x) => x === 0) && out[10] === 0xff && out[11] === 0xff;
  return mapped ? Buffer.from(out.subarray(12)) : out;
}

/**
 * The subjectAltName Extension (non-critical) for a request or a certificate, Go's order:
 * DNS names, then IPs; undefined when there are none.
 */
export function subjectAltNameExtension(alt: CsrAltNames | undefined): Buffer | undefined {
  const names = [...(alt?.dnsNames ?? []).map((d) => tlv(0x82, Buffer.from(d, 'ascii'))), ...(alt?.ipAddresses ?? []).map((ip) => tlv(0x87, ipBytes(ip)))];
  if (names.length === 0) return undefined;
  return sequence(oid(OIDS.subjectAltName), octetString(sequence(...names)));
}

/** The request's attributes: an extensionRequest with the subjectAltName extension, or none. */
function attributes(alt: CsrAltNames | undefined): Buffer {
  const san = subjectAltNameExtension(alt);
  if (!san) return context(0, Buffer.alloc(0));
  return context(0, sequence(oid(OIDS.extensionRequest), setOf(sequence(san))));
}

/** The AlgorithmIdentifier and digest for a signing key (EC P-256 or RSA). */
export function signatureAlgorithm(key: KeyObject): Buffer {
  if (key.asymmetricKeyType === 'ec') return sequence(oid(OIDS.ecdsaWithSha256));
  if (key.asymmetricKeyType === 'rsa') return sequence(oid(OIDS.sha256WithRsa), nullValue());
  throw new NodeletError('INVALID_ARGUMENT', `certificate request: key type ${String(key.asymmetricKeyType)} is not supported (EC or RSA)`);
}

/** Signs `tbs` with `key` as X.509 structures carry it (ECDSA: DER `SEQUENCE{r,s}`). */
export function signDer(key: KeyObject, tbs: Buffer): Buffer {
  return crypto.sign('sha256', tbs, key.asymmetricKeyType === 'ec' ? { key, dsaEncoding: 'der' } : key);
}

/** The DER of a certificate request for `subject` (and `alt` names when given), signed with `privateKey`. */
export function createCsrDer(privateKey: KeyObject, subject: CsrSubject, alt?: CsrAltNames): Buffer {
  if (privateKey.type !== 'private') throw new NodeletError('INVALID_ARGUMENT', 'certificate request: a private key is needed to sign it');
  const spki = crypto.createPublicKey(privateKey).export({ type: 'spki', format: 'der' });
  // CertificationRequestInfo: version 0, subject, subjectPKInfo, attributes [0] (empty, or the extensionRequest).
  const info = sequence(integer(0), name(subject), spki, attributes(alt));
  const alg = signatureAlgorithm(privateKey);
  return sequence(info, alg, bitString(signDer(privateKey, info)));
}

/** The PEM (`CERTIFICATE REQUEST`) of createCsrDer. */
export function createCsrPem(privateKey: KeyObject, subject: CsrSubject, alt?: CsrAltNames): string {
  return toPem('CERTIFICATE REQUEST', createCsrDer(privateKey, subject, alt));
}
