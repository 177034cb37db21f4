/**
 * The PKCS#10 writer and the DER pieces under it (src/system/pkcs10.ts, der.ts): the
 * requests nodelet sends for its client certificate must be what openssl and the API
 * server read and verify, with the subject and key the kubelet's would carry.
 */
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { integer, oid, time, tlv } from '../../../src/system/der.js';
import { createCsrDer, createCsrPem } from '../../../src/system/pkcs10.js';
import { parseCsr } from '../../control-plane/certificates.js';

const subject = { commonName: 'system:node:n1', organization: ['system:nodes'] };

/** openssl's verdict on a request (it prints it on stderr; 3.0 exits 0 either way) and the subject it reads. */
function opensslReq(pem: string): { verdict: string; subject: string } {
  const r = spawnSync('openssl', ['req', '-verify', '-noout', '-subject', '-nameopt', 'RFC2253'], { input: pem, encoding: 'utf8' });
  return { verdict: `${r.stderr}${r.stdout}`.match(/verify (OK|failure)/)?.[0] ?? `no verdict: ${r.stderr}`, subject: r.stdout.match(/^subject=.*$/m)?.[0] ?? '' };
}

describe('DER writer', () => {
  it.each([
    [0, '020100'],
    [127, '02017f'],
    [128, '02020080'],
    [256, '02020100'],
    [65535, '020300ffff'],
  ])('integer %i is %s', (n, hex) => expect(integer(n).toString('hex')).toBe(hex));

  it('writes OIDs with multi-byte arcs and long lengths', () => {
    expect(oid('1.2.840.10045.4.3.2').toString('hex')).toBe('06082a8648ce3d040302');
    expect(oid('2.5.4.3').toString('hex')).toBe('0603550403');
    expect(tlv(0x04, Buffer.alloc(200)).subarray(0, 3).toString('hex')).toBe('0481c8');
    expect(tlv(0x04, Buffer.alloc(300)).subarray(0, 4).toString('hex')).toBe('0482012c');
    expect(() => oid('1.x')).toThrow(/dotted decimal/);
  });

  it('writes UTCTime before 2050 and GeneralizedTime from 2050 (RFC 5280)', () => {
    expect(time(Date.UTC(2026, 10, 27, 18, 5, 9)).toString('latin1').slice(2)).toBe('261127180509Z');
    expect(time(Date.UTC(2051, 0, 2, 3, 4, 5)).toString('latin1').slice(2)).toBe('20510102030405Z');
  });
});

describe('PKCS#10 certificate requests', () => {
  it('an EC P-256 request verifies with openssl and carries O=system:nodes, CN=system:node:<node>', () => {
    const { privateKey, publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const pem = createCsrPem(privateKey, subject);
    expect(pem).toMatch(/^-----BEGIN CERTIFICATE REQUEST-----\n[A-Za-z0-9+/=\n]+\n-----END CERTIFICATE REQUEST-----\n$/);
    // openssl prints "verify OK" (stderr in 3.0) and the subject, most specific first in RFC 2253.
    expect(opensslReq(pem)).toEqual({ verdict: 'verify OK', subject: 'subject=CN=system:node:n1,O=system:nodes' });
    const back = parseCsr(pem);
    expect({ cn: back.commonName, o: back.organization, san: back.sanExtension }).toEqual({ cn: 'system:node:n1', o: ['system:nodes'], san: undefined });
    expect(back.publicKey.export({ type: 'spki', format: 'der' }).equals(publicKey.export({ type: 'spki', format: 'der' }))).toBe(true);
  });

  it('an RSA request verifies too (sha256WithRSAEncryption)', () => {
    const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 1024 });
    const pem = createCsrPem(privateKey, { commonName: 'alice', organization: ['dev', 'ops'] });
    expect(opensslReq(pem)).toEqual({ verdict: 'verify OK', subject: 'subject=CN=alice,O=ops,O=dev' });
  });

  it('a request altered after signing fails verification', () => {
    const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const der = createCsrDer(privateKey, subject);
    // The last byte of the CN value inside the signed part: "n1" -> "n2".
    const at = der.indexOf(Buffer.from('system:node:n1')) + 'system:node:n'.length;
    der[at] = '2'.charCodeAt(0);
    const pem = `-----BEGIN CERTIFICATE REQUEST-----\n${der.toString('base64')}\n-----END CERTIFICATE REQUEST-----\n`;
    expect(() => parseCsr(pem)).toThrow(/verification failure/);
    expect(opensslReq(pem).verdict).toBe('verify failure');
  });

  it('refuses a public key or an unsupported key type, naming why', () => {
    const { publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    expect(() => createCsrDer(publicKey, subject)).toThrow(/private key is needed/);
    const { privateKey } = crypto.generateKeyPairSync('ed25519');
    expect(() => createCsrDer(privateKey, subject)).toThrow(/ed25519 is not supported/);
  });
});
