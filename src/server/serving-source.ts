/**
 * Where the HTTPS server takes its certificate from when the cluster issues it
 * (`serverTLSBootstrap`): a port the server reads, implemented by the serving-certificate
 * manager of the control-plane edge (src/controlplane/serving-cert.ts).
 */
export const NO_SERVING_CERTIFICATE = 'no serving certificate available for the kubelet';

export interface ServingPair {
  cert: string;
  key: string;
}

/** What the HTTPS server reads its certificate from (https-server.ts). */
export interface ServingCertificateSource {
  /** The pair to serve now; undefined while there is none (or it has expired). */
  current(): ServingPair | undefined;
  /** `listener` is called with every new pair (undefined: none any more). */
  onChange(listener: (pair: ServingPair | undefined) => void): void;
}
