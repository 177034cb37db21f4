/**
 * A minimal DER (ASN.1 Distinguished Encoding Rules) writer: just the types a PKCS#10
 * certificate request and an X.509 certificate are made of. node:crypto signs and parses
 * certificates but cannot build a request (there is no CSR API in Node 20 or 24), and the
 * packages that can (node-forge: no ECDSA; @peculiar/x509: reflect-metadata and ~1 MB of
 * modules) cost more than these few encoders.
 *
 * Pure functions; each returns the complete TLV (tag, length, value) as a Buffer.
 */

/** Tag + DER length + value. */
export function tlv(tag: number, value: Buffer): Buffer {
  const n = value.length;
  let len: Buffer;
  if (n < 0x80) len = Buffer.from([n]);
  else {
    const bytes: number[] = [];
    for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
    len = Buffer.from([0x80 | bytes.length, ...bytes]);
  }
  return Buffer.concat([Buffer.from([tag]), len, value]);
}

export const sequence = (...items: Buffer[]): Buffer => tlv(0x30, Buffer.concat(items));
/** SET OF: DER sorts the encodings of the elements. */
export const setOf = (...items: Buffer[]): Buffer => tlv(0x31, Buffer.concat([...items].sort(Buffer.compare)));
export const utf8String = (s: string): Buffer => tlv(0x0c, Buffer.from(s, 'utf8'));
export const octetString = (b: Buffer): Buffer => tlv(0x04, b);
export const nullValue = (): Buffer => Buffer.from([0x05, 0x00]);
export const boolean = (v: boolean): Buffer => Buffer.from([0x01, 0x01, v ? 0xff : 0x00]);
/** A BIT STRING of whole bytes (no unused bits): signatures, public keys. */
export const bitString = (b: Buffer): Buffer => tlv(0x03, Buffer.concat([Buffer.from([0]), b]));
/** `[n]` context-specific, constructed (EXPLICIT tagging, or IMPLICIT of a SET/SEQUENCE). */
export const context = (n: number, value: Buffer): Buffer => tlv(0xa0 | n, value);

/** A non-negative INTEGER from a number or big-endian magnitude bytes (a 0x00 is prepended when the top bit is set). */
export function integer(v: number | Buffer): Buffer {
  let b: Buffer;
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`DER integer: ${v} is not a non-negative safe integer`);
    const bytes: number[] = [];
    for (let x = v; x > 0; x = Math.floor(x / 256)) bytes.unshift(x & 0xff);
    b = Buffer.from(bytes.length === 0 ? [0] : bytes);
  } else {
    let i = 0;
    while (i < v.length - 1 && v[i] === 0) i++;
    b = v.subarray(i);
    if (b.length === 0) b = Buffer.from([0]);
  }
  if (b[0]! & 0x80) b = Buffer.concat([Buffer.from([0]), b]);
  return tlv(0x02, b);
}

/** An OBJECT IDENTIFIER from its dotted form (`1.2.840.10045.4.3.2`). */
export function oid(dotted: string): Buffer {
  const parts = dotted.split('.').map((p) => {
    if (!/^\d+$/.test(p)) throw new RangeError(`DER oid: "${dotted}" is not dotted decimal`);
    return Number(p);
  });
  if (parts.length < 2 || parts[0]! > 2) throw new RangeError(`DER oid: "${dotted}" needs two arcs, the first 0-2`);
  const out: number[] = [];
  const arcs = [parts[0]! * 40 + parts[1]!, ...parts.slice(2)];
  for (const arc of arcs) {
    const bytes = [arc & 0x7f];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) bytes.unshift(0x80 | (v & 0x7f));
    out.push(...bytes);
  }
  return tlv(0x06, Buffer.from(out));
}

/** UTCTime (years 1950-2049) or GeneralizedTime, as RFC 5280 §4.1.2.5 requires, to the second. */
export function time(ms: number): Buffer {
  const d = new Date(ms);
  const y = d.getUTCFullYear();
  const p = (n: number) => String(n).padStart(2, '0');
  const rest = `${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}Z`;
  if (y >= 1950 && y < 2050) return tlv(0x17, Buffer.from(`${String(y % 100).padStart(2, '0')}${rest}`, 'ascii'));
  return tlv(0x18, Buffer.from(`${String(y).padStart(4, '0')}${rest}`, 'ascii'));
}

export const OIDS = Object.freeze({
  commonName: '2.5.4.3',
  organization: '2.5.4.10',
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  sha256WithRsa: '1.2.840.113549.1.1.11',
  extensionRequest: '1.2.840.113549.1.9.14',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  basicConstraints: '2.5.29.19',
  subjectAltName: '2.5.29.17',
  authorityKeyIdentifier: '2.5.29.35',
  clientAuth: '1.3.6.1.5.5.7.3.2',
  serverAuth: '1.3.6.1.5.5.7.3.1',
});

/**
 * An X.501 Name in the order Go's pkix.Name writes it (O before CN), one attribute per RDN,
 * each value a UTF8String (`system:node:x` has a colon, outside PrintableString).
 */
export function name(subject: { organization?: readonly string[]; commonName?: string }): Buffer {
  const rdns: Buffer[] = [];
  for (const o of subject.organization ?? []) rdns.push(setOf(sequence(oid(OIDS.organization), utf8String(o))));
  if (subject.commonName !== undefined) rdns.push(setOf(sequence(oid(OIDS.commonName), utf8String(subject.commonName))));
  return sequence(...rdns);
}

/** PEM armour of DER bytes, 64 columns. */
export function toPem(label: string, der: Buffer): string {
  const b64 = der.toString('base64').replace(/(.{64})/g, '$1\n').replace(/\n$/, '');
  return `-----BEGIN ${label}-----\n${b64}\n-----END ${label}-----\n`;
}
