/**
 * KubeletConfiguration -> what the HTTPS server needs: the authenticator, the authorizer,
 * the client CA bundle, and whether checkpoints are served. Called once by the
 * composition root, after the configuration is validated.
 *
 * Standalone (no control plane, so no ReviewClient): `authorization.mode: Webhook` and
 * `authentication.webhook.enabled: true` are startup errors that say so, as the kubelet
 * refuses webhook authentication without a client. A standalone node uses x509 client
 * certificates with `AlwaysAllow`.
 */
import crypto from 'node:crypto';
import type { Clock } from '../clock.js';
import { parseDuration } from '../config/duration.js';
import { isFeatureEnabled } from '../config/feature-gates.js';
import type { KubeletConfiguration } from '../config/types.js';
import { NodeletError, errorMessage } from '../errors.js';
import { FILE_LIMITS, readBoundedText, readFailure } from '../system/safe-file.js';
import { Authenticator, WebhookAuthorizer, alwaysAllow, type Authorizer, type ReviewClient } from './auth.js';

export interface ServerAuth {
  authenticator: Authenticator;
  authorizer: Authorizer;
  /** PEM of clientCAFile; undefined when x509 authentication is off. */
  clientCA?: string;
}

type AuthConfig = Pick<KubeletConfiguration, 'authentication' | 'authorization'>;

/** Builds authn/authz from the configuration. Throws CONFIG_INVALID naming the field for what cannot work. */
export async function buildServerAuth(config: AuthConfig, deps: { reviewClient?: ReviewClient; clock: Clock }): Promise<ServerAuth> {
  const { authentication: authn, authorization: authz } = config;
  let clientCA: string | undefined;
  const caFile = authn.x509.clientCAFile;
  if (caFile) {
    try {
      // Bounded and non-blocking: a FIFO or device named here is refused, never read.
      clientCA = await readBoundedText(caFile, { maxBytes: FILE_LIMITS.pem, what: 'client CA file' });
    } catch (err) {
      throw new NodeletError('CONFIG_INVALID', `authentication.x509.clientCAFile "${caFile}": ${readFailure(err)}`, { field: 'authentication.x509.clientCAFile' }, { cause: err });
    }
    try {
      // Parse now: a bad CA would otherwise surface as every client being refused.
      new crypto.X509Certificate(clientCA);
    } catch (err) {
      throw new NodeletError('CONFIG_INVALID', `authentication.x509.clientCAFile "${caFile}": ${errorMessage(err)}`, { field: 'authentication.x509.clientCAFile' }, { cause: err });
    }
  }
  if (authn.webhook.enabled && !deps.reviewClient) {
    throw new NodeletError(
      'CONFIG_INVALID',
      'authentication.webhook.enabled is true but nodelet runs standalone (no kubeconfig): no control plane to send TokenReviews to; set it to false and use x509 client certificates',
      { field: 'authentication.webhook.enabled' },
    );
  }
  if (authz.mode === 'Webhook' && !deps.reviewClient) {
    throw new NodeletError(
      'CONFIG_INVALID',
      'authorization.mode is Webhook but nodelet runs standalone (no kubeconfig): no control plane to send SubjectAccessReviews to; use AlwaysAllow with x509 client certificates',
      { field: 'authorization.mode' },
    );
  }
  const authenticator = new Authenticator({
    x509: clientCA !== undefined,
    anonymous: authn.anonymous.enabled,
    clock: deps.clock,
    ...(authn.webhook.enabled && deps.reviewClient ? { webhook: { client: deps.reviewClient, cacheTtlMs: parseDuration(authn.webhook.cacheTTL) } } : {}),
  });
  const authorizer: Authorizer =
    authz.mode === 'Webhook' && deps.reviewClient
      ? new WebhookAuthorizer({
          client: deps.reviewClient,
          cacheAuthorizedTtlMs: parseDuration(authz.webhook.cacheAuthorizedTTL),
          cacheUnauthorizedTtlMs: parseDuration(authz.webhook.cacheUnauthorizedTTL),
          clock: deps.clock,
        })
      : alwaysAllow;
  return { authenticator, authorizer, ...(clientCA !== undefined ? { clientCA } : {}) };
}

/** Checkpoints are served only with gate ContainerCheckpoint on and enableDebuggingHandlers true. */
export function checkpointsEnabled(config: Pick<KubeletConfiguration, 'featureGates' | 'enableDebuggingHandlers'>): boolean {
  return config.enableDebuggingHandlers && isFeatureEnabled(config, 'ContainerCheckpoint');
}
