/**
 * PKCS#10 certificate requests (RFC 2986), as client-go's certutil.MakeCSR writes them for
 * a kubelet: subject O=... then CN=..., no attributes, signed ECDSA-with-SHA256 (or
 * SHA256-with-RSA for an RSA key). node:crypto has no API that makes a request, hence the
 * small DER writer (der.ts). Pure apart from the signature (node:crypto, microseconds).
 */
import crypto, { type KeyObject } from 'node:crypto';
import { NodeletError } from '../errors.js';
import { OIDS, bitString, context, integer, name, nullValue, oid, sequence, toPem } from './der.js';

export interface CsrSubject {
  commonName: string;
  organization?: readonly string[];
}

/** The AlgorithmIdentifier and digest for a signing key (EC P-256 or RSA). */
function signatureAlgorithm(key: KeyObject): Buffer {
  if (key.asymmetricKeyType === 'ec') return sequence(oid(OIDS.ecdsaWithSha256));
  if (key.asymmetricKeyType === 'rsa') return sequence(oid(OIDS.sha256WithRsa), nullValue());
  throw new NodeletError('INVALID_ARGUMENT', `certificate request: key type ${String(key.asymmetricKeyType)} is not supported (EC or RSA)`);
}

/** Signs `tbs` with `key` as X.509 structures carry it (ECDSA: DER `SEQUENCE{r,s}`). */
export function signDer(key: KeyObject, tbs: Buffer): Buffer {
  return crypto.sign('sha256', tbs, key.asymmetricKeyType === 'ec' ? { key, dsaEncoding: 'der' } : key);
}

/** The DER of a certificate request for `subject`, signed with `privateKey`. */
export function createCsrDer(privateKey: KeyObject, subject: CsrSubject): Buffer {
  if (privateKey.type !== 'private') throw new NodeletError('INVALID_ARGUMENT', 'certificate request: a private key is needed to sign it');
  const spki = crypto.createPublicKey(privateKey).export({ type: 'spki', format: 'der' });
  // CertificationRequestInfo: version 0, subject, subjectPKInfo, attributes [0] (empty SET).
  const info = sequence(integer(0), name(subject), spki, context(0, Buffer.alloc(0)));
  const alg = signatureAlgorithm(privateKey);
  return sequence(info, alg, bitString(signDer(privateKey, info)));
}

/** The PEM (`CERTIFICATE REQUEST`) of createCsrDer. */
export function createCsrPem(privateKey: KeyObject, subject: CsrSubject): string {
  return toPem('CERTIFICATE REQUEST', createCsrDer(privateKey, subject));
}
