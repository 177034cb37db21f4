/**
 * The control plane's own PKI, made with the openssl command (synchronous, so client
 * certificates can be issued from a synchronous API): a CA, a serving certificate for
 * 127.0.0.1/localhost, and client certificates with CN = user and one O per group.
 */
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Escapes a value for openssl's -subj syntax. */
function rdn(v: string): string {
  return v.replace(/[\\/=+,]/g, (c) => `\\${c}`);
}

function safeName(s: string): string {
  return s.replace(/[^A-Za-z0-9_.-]/g, '_');
}

const KEY_ARGS = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];

export class Pki {
  readonly caFile: string;
  readonly caKeyFile: string;
  readonly serverCertFile: string;
  readonly serverKeyFile: string;

  constructor(readonly dir: string) {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.caFile = path.join(dir, 'ca.crt');
    this.caKeyFile = path.join(dir, 'ca.key');
    openssl(['req', '-x509', ...KEY_ARGS, '-keyout', this.caKeyFile, '-out', this.caFile, '-days', '3650', '-subj', '/CN=nodelet-test-control-plane-ca', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
    const s = this.issue('server', '/CN=nodelet-test-control-plane', ['extendedKeyUsage=serverAuth', 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost']);
    this.serverCertFile = s.certFile;
    this.serverKeyFile = s.keyFile;
  }

  /** A client certificate for `user` with `groups` as O entries. */
  issueClient(user: string, groups: string[] = []): { certFile: string; keyFile: string } {
    const subj = `/CN=${rdn(user)}${groups.map((g) => `/O=${rdn(g)}`).join('')}`;
    return this.issue(`client-${safeName(user)}-${crypto.randomBytes(3).toString('hex')}`, subj, ['extendedKeyUsage=clientAuth']);
  }

  private issue(name: string, subj: string, ext: string[]): { certFile: string; keyFile: string } {
    const certFile = path.join(this.dir, `${name}.crt`);
    const keyFile = path.join(this.dir, `${name}.key`);
    const args = ['req', '-x509', ...KEY_ARGS, '-keyout', keyFile, '-out', certFile, '-days', '365', '-subj', subj, '-CA', this.caFile, '-CAkey', this.caKeyFile, '-set_serial', `0x${crypto.randomBytes(8).toString('hex')}`, '-addext', 'basicConstraints=critical,CA:FALSE', '-addext', 'keyUsage=critical,digitalSignature'];
    for (const e of ext) args.push('-addext', e);
    openssl(args);
    fs.chmodSync(keyFile, 0o600);
    return { certFile, keyFile };
  }
}
