/**
 * The node's servers, after everything they serve: the read-only port (plain HTTP: /pods,
 * /healthz, metrics) when `readOnlyPort` is set, and the HTTPS server (serving certificate
 * given or self-signed in --cert-dir; authentication and authorization; checkpoints, logs,
 * exec/attach/port-forward, /run). Their modules load when they start.
 */
import { parseDuration } from '../config/duration.js';
import type { HealthRegistry } from '../health/checks.js';
import type { Service } from '../loop.js';
import type { PodManager } from '../pods/sync/manager.js';
import { checkpointsEnabled, type ServerAuth } from '../server/from-config.js';
import type { WiringContext } from './context.js';
import { servingTlsBootstrap } from '../connected.js';
import type { ServingCertificateSource } from '../controlplane/serving-cert.js';
import type { RuntimeWiring } from './runtime.js';

/** A service whose start builds it and returns its stop. */
export function lazyService(name: string, start: () => Promise<() => Promise<void>>): Service {
  let stop: (() => Promise<void>) | undefined;
  return {
    name,
    start: async () => {
      stop = await start();
    },
    stop: async () => {
      await stop?.();
    },
  };
}

export function wireServers(ctx: WiringContext, rt: RuntimeWiring, o: { auth: ServerAuth; health: HealthRegistry; pods: PodManager }): Service[] {
  const { cfg, flags, identity, clock, log } = ctx;
  const { health, pods, auth } = o;
  const services: Service[] = [];
  if (cfg.readOnlyPort !== 0) {
    services.push(
      lazyService('read-only-server', async () => {
        const { createReadOnlyServer } = await import('../server/https-server.js');
        const server = createReadOnlyServer({ address: cfg.address, port: cfg.readOnlyPort, health, pods, observability: rt.observability, logger: log });
        const a = await server.start();
        log.info({ address: a.address, port: a.port }, `read-only server listening on http://${a.address}:${a.port} (/pods, /healthz)`);
        return () => server.stop();
      }),
    );
  }

  services.push(
    lazyService('https-server', async () => {
      const [{ loadOrCreateServingCert }, { CheckpointService }, { createNodeServer }, { StreamingService }] = await Promise.all([
        import('../server/tls.js'),
        import('../checkpoint/service.js'),
        import('../server/https-server.js'),
        import('../server/streaming.js'),
      ]);
      // serverTLSBootstrap: the certificate the cluster issues (connected mode's manager), never a self-signed one.
      const serving = await servingSource(ctx);
      const cert = serving
        ? { certFile: `${flags.certDir}/kubelet-server-current.pem`, cert: undefined, key: undefined }
        : await loadOrCreateServingCert({
            ...(cfg.tlsCertFile ? { certFile: cfg.tlsCertFile } : {}),
            ...(cfg.tlsPrivateKeyFile ? { keyFile: cfg.tlsPrivateKeyFile } : {}),
            certDir: flags.certDir,
            hostname: identity.nodeName,
            ips: identity.ips,
            logger: log,
          });
      const checkpoints = checkpointsEnabled(cfg)
        ? new CheckpointService({
            rootDir: flags.rootDir,
            runtime: rt.cri,
            pods,
            runtimeRequestTimeoutMs: rt.requestTimeoutMs,
            ...(flags.checkpointRetention !== undefined ? { retention: flags.checkpointRetention } : {}),
            clock,
            logger: log,
          })
        : undefined;
      const server = createNodeServer({
        address: cfg.address,
        port: cfg.port,
        tls: { ...(serving ? { source: serving.source } : { cert: cert.cert!, key: cert.key! }), ...(auth.clientCA !== undefined ? { clientCA: auth.clientCA } : {}) },
        authenticator: auth.authenticator,
        authorizer: auth.authorizer,
        nodeName: identity.nodeName,
        health,
        pods,
        ...(checkpoints ? { checkpoints } : {}),
        ...(cfg.enableDebuggingHandlers ? { containerLogs: { podLogsDir: cfg.podLogsDir } } : {}),
        ...(cfg.enableDebuggingHandlers ? { streaming: new StreamingService({ runtime: rt.cri, pods, idleTimeoutMs: parseDuration(cfg.streamingConnectionIdleTimeout), logger: log }) } : {}),
        observability: rt.observability,
        logger: log,
      });
      const a = await server.start();
      log.info(
        { address: a.address, port: a.port, certFile: cert.certFile, checkpoints: !!checkpoints, authorization: cfg.authorization.mode },
        `HTTPS server listening on https://${a.address}:${a.port}${checkpoints ? ' (POST /checkpoint enabled)' : ''}`,
      );
      return async () => {
        await server.stop();
        await serving?.stop?.();
      };
    }),
  );
  return services;
}

/**
 * The serving certificate source with `serverTLSBootstrap` (and its gate), else undefined:
 * connected mode's manager (it requests and renews), or standalone a manager that only
 * serves a stored pair (the kubelet's without a client); `stop` only for the one built here.
 */
async function servingSource(ctx: WiringContext): Promise<{ source: ServingCertificateSource; stop?: () => Promise<void> } | undefined> {
  const { cfg, flags, identity, clock, log, mode } = ctx;
  if (!servingTlsBootstrap(cfg)) return undefined;
  if (mode.servingCertificates) return { source: mode.servingCertificates };
  const { ServingCertificateManager } = await import('../controlplane/serving-cert.js');
  const m = await ServingCertificateManager.load({
    nodeName: identity.nodeName,
    hostname: identity.hostname,
    ips: identity.ips,
    certDir: flags.certDir,
    ...(cfg.tlsCertFile ? { tlsCertFile: cfg.tlsCertFile } : {}),
    ...(cfg.tlsPrivateKeyFile ? { tlsPrivateKeyFile: cfg.tlsPrivateKeyFile } : {}),
    clock,
    logger: log,
  });
  m.start();
  return { source: m, stop: () => m.stop() };
}
