/**
 * What every part of the wiring gets from the composition root (daemon.ts): the frozen
 * configuration, the flags, the node's identity, the mode, the clock, the log. The wiring
 * modules (runtime.ts, pods.ts, servers.ts) are loaded once /healthz answers (start-up
 * time, BENCHMARKS.md "Process start -> /healthz"), through index.ts.
 */
import type { Clock } from '../clock.js';
import type { KubeletConfiguration } from '../config/types.js';
import type { LoadedConfig } from '../config/index.js';
import type { NodeMode } from '../connected.js';
import type { Logger } from '../log.js';
import type { NodeIdentity } from '../node-identity.js';

/** Command-line settings that are not part of KubeletConfiguration. */
export interface NodeletFlags {
  configFile?: string;
  configDir?: string;
  rootDir: string;
  kubeconfig?: string;
  /** `--bootstrap-kubeconfig`: credentials to request a client certificate with when `kubeconfig` is missing or expired. */
  bootstrapKubeconfig?: string;
  lockFile: string;
  exitOnLockContention: boolean;
  certDir: string;
  checkpointRetention?: number;
  /** Where the `<pod>_<ns>_<container>-<id>.log` links to container logs go (default /var/log/containers). */
  containerLogDir?: string;
}

export interface WiringContext {
  loaded: LoadedConfig;
  cfg: KubeletConfiguration;
  flags: NodeletFlags;
  identity: NodeIdentity;
  mode: NodeMode;
  clock: Clock;
  log: Logger;
  env: NodeJS.ProcessEnv;
}
