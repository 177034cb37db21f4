import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { generateSelfSigned, loadOrCreateServingCert, servingSans } from '../../../src/server/tls.js';

let dir: string;
beforeEach(async () => {
  dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-tls-'));
});
afterEach(async () => {
  await fsp.rm(dir, { recursive: true, force: true });
});

function captureLogger() {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { logger, lines };
}

const mode = (p: string) => fs.statSync(p).mode & 0o777;

describe('servingSans', () => {
  it('names hostname, localhost, the node IPs and 127.0.0.1 once each', () => {
    expect(servingSans('node-a', ['10.0.0.5', '127.0.0.1'])).toEqual({ dns: ['node-a', 'localhost'], ips: ['10.0.0.5', '127.0.0.1'] });
    expect(servingSans('10.0.0.5', [])).toEqual({ dns: ['localhost'], ips: ['10.0.0.5', '127.0.0.1'] });
  });
});

describe('loadOrCreateServingCert', () => {
  it('generates an ECDSA P-256 self-signed pair into certDir (dir 0700, key 0600) with the node SANs, and reuses it', async () => {
    const certDir = path.join(dir, 'pki', 'nested');
    const first = await loadOrCreateServingCert({ certDir, hostname: 'node-a', ips: ['10.1.2.3'] });
    expect(first.generated).toBe(true);
    expect(first.certFile).toBe(path.join(certDir, 'kubelet.crt'));
    expect(first.keyFile).toBe(path.join(certDir, 'kubelet.key'));
    expect(mode(certDir)).toBe(0o700);
    expect(mode(path.join(dir, 'pki'))).toBe(0o700);
    expect(mode(first.keyFile)).toBe(0o600);
    const cert = new crypto.X509Certificate(fs.readFileSync(first.certFile));
    expect(cert.subjectAltName).toBe('DNS:node-a, DNS:localhost, IP Address:10.1.2.3, IP Address:127.0.0.1');
    expect(cert.subject).toMatch(/^CN=node-a@\d+$/);
    expect(cert.publicKey.asymmetricKeyType).toBe('ec');
    expect(cert.publicKey.asymmetricKeyDetails?.namedCurve).toBe('prime256v1');
    expect(cert.checkPrivateKey(crypto.createPrivateKey(fs.readFileSync(first.keyFile)))).toBe(true);
    expect(cert.verify(cert.publicKey)).toBe(true);
    expect(cert.ca).toBe(false);
    expect(cert.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']);
    // What a TLS client reads of it: v3, critical CA:FALSE and key usage, one year from a minute back.
    const text = spawnSync('openssl', ['x509', '-noout', '-text'], { input: first.cert, encoding: 'utf8' }).stdout;
    expect(text).toMatch(/Version: 3 \(0x2\)/);
    expect(text).toMatch(/Basic Constraints: critical\s+CA:FALSE/);
    expect(text).toMatch(/Key Usage: critical\s+Digital Signature, Key Encipherment/);
    expect(text).toMatch(/Signature Algorithm: ecdsa-with-SHA256/);
    expect(Date.parse(cert.validTo) - Date.parse(cert.validFrom)).toBe(365 * 24 * 3600 * 1000 + 60_000);
    expect(BigInt(`0x${cert.serialNumber}`) > 0n).toBe(true);

    const again = await loadOrCreateServingCert({ certDir, hostname: 'node-a', ips: ['10.1.2.3'] });
    expect(again.generated).toBe(false);
    expect(again.cert).toBe(first.cert);
    expect(again.key).toBe(first.key);
  });

  it('regenerates an expired pair, a mismatched key, garbage, and a pair lacking the current IP, saying why', async () => {
    const certDir = path.join(dir, 'pki');
    const { logger, lines } = captureLogger();
    const base = await loadOrCreateServingCert({ certDir, hostname: 'node-a', ips: ['10.1.2.3'], logger });

    const later = Date.now() + 366 * 24 * 3600 * 1000;
    const expired = await loadOrCreateServingCert({ certDir, hostname: 'node-a', ips: ['10.1.2.3'], logger, now: () => later });
    expect(expired.generated).toBe(true);
    expect(lines.at(-2)).toMatchObject({ level: 30 + 10, msg: 'self-signed serving certificate not usable; generating a new one' });
    expect(String(lines.at(-2)?.problem)).toMatch(/^expired or expiring \(notAfter /);

    const other = await generateSelfSigned('node-a', servingSans('node-a', ['10.1.2.3']), Date.now());
    await fsp.writeFile(path.join(certDir, 'kubelet.key'), other.key);
    const mismatched = await loadOrCreateServingCert({ certDir, hostname: 'node-a', ips: ['10.1.2.3'], logger });
    expect(mismatched.generated).toBe(true);
    expect(lines.at(-2)?.problem).toBe('the private key does not match the certificate');

    await fsp.writeFile(path.join(certDir, 'kubelet.crt'), 'garbage');
    const garbage = await loadOrCreateServingCert({ certDir, hostname: 'node-a', ips: ['10.1.2.3'], logger });
    expect(garbage.generated).toBe(true);
    expect(String(lines.at(-2)?.problem)).toMatch(/^certificate does not parse/);

    const moved = await loadOrCreateServingCert({ certDir, hostname: 'node-a', ips: ['10.9.9.9'], logger });
    expect(moved.generated).toBe(true);
    expect(lines.at(-2)?.problem).toBe('subject alternative names lack IP Address:10.9.9.9');
    expect(new crypto.X509Certificate(moved.cert).subjectAltName).toContain('IP Address:10.9.9.9');
    expect(base.cert).not.toBe(moved.cert);
    expect(mode(path.join(certDir, 'kubelet.key'))).toBe(0o600);
    // No temporary files left behind.
    expect((await fsp.readdir(certDir)).sort()).toEqual(['kubelet.crt', 'kubelet.key']);
  });

  it('uses tlsCertFile/tlsPrivateKeyFile as given and never writes certDir', async () => {
    const pair = await generateSelfSigned('given', servingSans('given', []), Date.now());
    const certFile = path.join(dir, 'serving.crt');
    const keyFile = path.join(dir, 'serving.key');
    await fsp.writeFile(certFile, pair.cert);
    await fsp.writeFile(keyFile, pair.key);
    const certDir = path.join(dir, 'pki');
    const got = await loadOrCreateServingCert({ certFile, keyFile, certDir, hostname: 'node-a', ips: [] });
    expect(got).toEqual({ cert: pair.cert, key: pair.key, certFile, keyFile, generated: false });
    expect(fs.existsSync(certDir)).toBe(false);
  });

  it('names the field and file for a bad configured pair', async () => {
    const pair = await generateSelfSigned('given', servingSans('given', []), Date.now());
    const other = await generateSelfSigned('given', servingSans('given', []), Date.now());
    const certFile = path.join(dir, 'serving.crt');
    const keyFile = path.join(dir, 'serving.key');
    const certDir = path.join(dir, 'pki');
    await expect(loadOrCreateServingCert({ certFile, keyFile, certDir, hostname: 'n', ips: [] })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(new RegExp(`^tlsCertFile "${certFile}": ENOENT`)),
    });
    await fsp.writeFile(certFile, pair.cert);
    await expect(loadOrCreateServingCert({ certFile, keyFile, certDir, hostname: 'n', ips: [] })).rejects.toMatchObject({
      message: expect.stringMatching(new RegExp(`^tlsPrivateKeyFile "${keyFile}": ENOENT`)),
    });
    await fsp.writeFile(keyFile, other.key);
    await expect(loadOrCreateServingCert({ certFile, keyFile, certDir, hostname: 'n', ips: [] })).rejects.toMatchObject({
      message: `tlsCertFile "${certFile}" / tlsPrivateKeyFile "${keyFile}": the private key does not match the certificate`,
    });
    await expect(loadOrCreateServingCert({ certFile, certDir, hostname: 'n', ips: [] })).rejects.toMatchObject({
      message: 'tlsCertFile and tlsPrivateKeyFile must be set together (only tlsCertFile is set)',
    });
  });
});
