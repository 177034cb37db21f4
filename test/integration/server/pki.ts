/**
 * Real certificates for the HTTPS tests, made with @peculiar/x509: a client CA, client
 * certificates it signs (CN = user, O = groups, EKU clientAuth), and a second CA whose
 * certificates the server must refuse.
 */
import 'reflect-metadata';
import crypto from 'node:crypto';
import * as x509 from '@peculiar/x509';

const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
const subtle = crypto.webcrypto.subtle;

export interface Issued {
  cert: string;
  key: string;
}

export interface TestCa extends Issued {
  issue(o: { cn: string; orgs?: string[]; eku?: string[] }): Promise<Issued>;
}

async function keyPem(k: crypto.webcrypto.CryptoKey): Promise<string> {
  return x509.PemConverter.encode(await subtle.exportKey('pkcs8', k), 'PRIVATE KEY');
}

function dn(cn: string, orgs: string[] = []): string {
  return [`CN=${cn}`, ...orgs.map((o) => `O=${o}`)].join(', ');
}

export async function createTestCa(name = 'nodelet-test-ca'): Promise<TestCa> {
  const keys = (await subtle.generateKey(alg, true, ['sign', 'verify'])) as crypto.webcrypto.CryptoKeyPair;
  const now = Date.now();
  const ca = await x509.X509CertificateGenerator.createSelfSigned(
    {
      serialNumber: '01',
      name: `CN=${name}`,
      notBefore: new Date(now - 60_000),
      notAfter: new Date(now + 24 * 3600 * 1000),
      signingAlgorithm: alg,
      keys,
      extensions: [new x509.BasicConstraintsExtension(true, 0, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true)],
    },
    crypto.webcrypto,
  );
  let serial = 1;
  return {
    cert: ca.toString('pem'),
    key: await keyPem(keys.privateKey),
    async issue({ cn, orgs = [], eku = [x509.ExtendedKeyUsage.clientAuth] }) {
      const k = (await subtle.generateKey(alg, true, ['sign', 'verify'])) as crypto.webcrypto.CryptoKeyPair;
      const cert = await x509.X509CertificateGenerator.create(
        {
          serialNumber: (++serial).toString(16).padStart(2, '0'),
          subject: dn(cn, orgs),
          issuer: ca.subject,
          notBefore: new Date(now - 60_000),
          notAfter: new Date(now + 24 * 3600 * 1000),
          signingAlgorithm: alg,
          publicKey: k.publicKey,
          signingKey: keys.privateKey,
          extensions: [new x509.BasicConstraintsExtension(false, undefined, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true), new x509.ExtendedKeyUsageExtension(eku)],
        },
        crypto.webcrypto,
      );
      return { cert: cert.toString('pem'), key: await keyPem(k.privateKey) };
    },
  };
}
