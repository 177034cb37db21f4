/**
 * Client certificate rotation (`rotateCertificates: true`), as client-go's certificate
 * manager does it for the kubelet: at a random point between 70 % and 90 % of the current
 * certificate's lifetime (notBefore to notAfter), a new EC P-256 key and a CSR (`csr-<random>`,
 * signer kubernetes.io/kube-apiserver-client-kubelet, `CN=system:node:<node>, O=system:nodes`)
 * sent with the current certificate; once issued, the pair is stored in `--cert-dir`
 * (`kubelet-client-<time>.pem`, the `kubelet-client-current.pem` link moved) and every client
 * presents it for new connections without a restart. A failed renewal is logged and retried
 * with backoff (2 s doubling to 5 min); once the current certificate has expired, the renewal
 * is asked with the bootstrap kubeconfig when one is given.
 *
 * A Service of connected mode (src/connected.ts): start(signal) runs the loop on the injected
 * clock until stop() or the signal.
 */
import crypto, { X509Certificate } from 'node:crypto';
import { backoffDelay, type Clock } from '../clock.js';
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import { CLIENT_USAGES, storeClientPair } from './bootstrap.js';
import { ControlPlaneClient } from './client.js';
import { KUBELET_CLIENT_SIGNER, createCsr, waitForCertificate, type CertificateSigningRequest } from './csr.js';
import type { ClusterAccess } from './kubeconfig.js';
import { createCsrPem } from '../system/pkcs10.js';

/** client-go's wait for a renewal's certificate. */
export const RENEWAL_WAIT_MS = 15 * 60_000;

/** Pure: when to renew a certificate valid from `notBefore` to `notAfter` (ms), `rand` in [0, 1): 70 % to 90 % of its lifetime. */
export function rotationDeadline(notBefore: number, notAfter: number, rand: number): number {
  return notBefore + (notAfter - notBefore) * (0.7 + 0.2 * rand);
}

export interface RotatorOptions {
  /** The control plane and the current credentials (`cert`, `key`: the pair in use). */
  access: ClusterAccess & { cert: string; key: string };
  /** The bootstrap credentials, read when needed (once the current certificate has expired; kubeadm removes the file after the join). */
  bootstrap?: () => ClusterAccess;
  certDir: string;
  nodeName: string;
  clock: Clock;
  logger: Logger;
  /** Called with each new pair: the clients present it from now on. */
  apply: (cert: string, key: string) => void;
  random?: () => number;
  waitMs?: number;
}

export class ClientCertificateRotator {
  readonly #o: RotatorOptions;
  readonly #log: Logger;
  #current: { cert: string; key: string };
  #stop = new AbortController();
  #done: Promise<void> | undefined;

  constructor(o: RotatorOptions) {
    this.#o = o;
    this.#log = o.logger.child({ component: 'certificate-rotation' });
    this.#current = { cert: o.access.cert, key: o.access.key };
  }

  /** The pair in use (tests, metrics). */
  get current(): { cert: string; key: string } {
    return this.#current;
  }

  start(signal?: AbortSignal): void {
    signal?.addEventListener('abort', () => this.#stop.abort(), { once: true });
    this.#done = this.#run().catch((err: unknown) => {
      if (!this.#stop.signal.aborted) this.#log.error({ err: errorMessage(err) }, `certificate rotation stopped: ${errorMessage(err)}`);
    });
  }

  async stop(): Promise<void> {
    this.#stop.abort();
    await this.#done;
  }

  async #run(): Promise<void> {
    const { clock } = this.#o;
    const random = this.#o.random ?? Math.random;
    const signal = this.#stop.signal;
    for (;;) {
      const leaf = new X509Certificate(this.#current.cert);
      const notBefore = Date.parse(leaf.validFrom);
      const notAfter = Date.parse(leaf.validTo);
      const deadline = rotationDeadline(notBefore, notAfter, random());
      this.#log.info({ notAfter: new Date(notAfter).toISOString(), rotateAt: new Date(deadline).toISOString() }, `client certificate expires at ${new Date(notAfter).toISOString()}; renewing it at ${new Date(deadline).toISOString()}`);
      await clock.sleep(Math.max(0, deadline - clock.now()), signal);
      await retryUntilDone(() => this.renewOnce(signal), {
        clock,
        signal,
        delayMs: (n) => backoffDelay(n, 2000, 300_000, 0.2, random),
        onError: (err, delayMs) => this.#log.error({ err: errorMessage(err), retryInMs: delayMs }, `client certificate renewal failed: ${errorMessage(err)}; retrying in ${Math.round(delayMs / 1000)} s`),
      });
    }
  }

  /** One renewal: key, request, wait, store, apply. Throws on any failure (nothing applied then). */
  async renewOnce(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    const expired = o.clock.now() > Date.parse(new X509Certificate(this.#current.cert).validTo);
    // An expired certificate cannot ask for its successor; the bootstrap credentials can.
    const access: ClusterAccess = expired && o.bootstrap ? o.bootstrap() : { ...o.access, ...this.#current };
    const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const subject = { commonName: `system:node:${o.nodeName}`, organization: ['system:nodes'] };
    const csr: CertificateSigningRequest = {
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { generateName: 'csr-' } as CertificateSigningRequest['metadata'],
      spec: { request: Buffer.from(createCsrPem(privateKey, subject)).toString('base64'), signerName: KUBELET_CLIENT_SIGNER, usages: [...CLIENT_USAGES] },
    };
    const api = new ControlPlaneClient({ access, timeoutMs: 30_000 });
    let certPem: string;
    let name: string;
    try {
      const made = await createCsr(api, csr, signal);
      name = made.name;
      this.#log.info({ csr: name, withBootstrap: expired && !!o.bootstrap }, `renewing the client certificate: certificatesigningrequest ${name}`);
      certPem = await waitForCertificate(api, made.name, made.uid, { signal, clock: o.clock, timeoutMs: o.waitMs ?? RENEWAL_WAIT_MS });
    } finally {
      await api.close(0);
    }
    const cert = new X509Certificate(certPem);
    const spki = (k: crypto.KeyObject) => k.export({ type: 'spki', format: 'der' });
    if (!spki(cert.publicKey).equals(spki(crypto.createPublicKey(privateKey)))) throw new Error(`certificatesigningrequest ${name}: the issued certificate is not for the requested key`);
    const keyPem = privateKey.export({ type: 'sec1', format: 'pem' }) as string;
    await storeClientPair(o.certDir, certPem, keyPem, o.clock.now());
    this.#current = { cert: certPem, key: keyPem };
    o.apply(certPem, keyPem);
    this.#log.info({ csr: name, notAfter: new Date(Date.parse(cert.validTo)).toISOString() }, `client certificate renewed (certificatesigningrequest ${name}); new connections use it`);
  }
}

/**
 * Runs `attempt` until it succeeds, waiting `delayMs(n)` after the n-th failure (told to
 * `onError` first); the signal's abort ends it with the attempt's error.
 */
export async function retryUntilDone(attempt: () => Promise<void>, o: { clock: Clock; signal: AbortSignal; delayMs: (n: number) => number; onError: (err: unknown, delayMs: number) => void }): Promise<void> {
  for (let n = 0; ; n++) {
    try {
      await attempt();
      return;
    } catch (err) {
      if (o.signal.aborted) throw err;
      const delayMs = o.delayMs(n);
      o.onError(err, delayMs);
      await o.clock.sleep(delayMs, o.signal);
    }
  }
}
