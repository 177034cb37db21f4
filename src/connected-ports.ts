/**
 * What connected mode needs of the control plane, in the daemon's terms. The control-plane
 * client implements it (src/controlplane/ports.ts); the composition root consumes it.
 */
import type { EventApi } from './events.js';
import type { LeaseApi } from './node/lease.js';
import type { NodeApi } from './node/reporter.js';
import type { PodFeed } from './pods/sources.js';
import type { MirrorPodApi } from './pods/mirror.js';
import type { PodStatusApi } from './pods/status-writer.js';
import type { ReviewClient } from './server/auth.js';

export interface ControlPlanePorts {
  /** The API server URL, for logs. */
  readonly server: string;
  nodes: NodeApi;
  leases: LeaseApi;
  reviews: ReviewClient;
  pods: PodFeed;
  podStatus: PodStatusApi;
  mirrorPods: MirrorPodApi;
  events: EventApi;
  close(): Promise<void>;
}
