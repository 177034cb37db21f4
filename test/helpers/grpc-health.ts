/**
 * grpc.health.v1.Health/Check served by grpc-js for the probe tests, its messages encoded by
 * hand: HealthCheckRequest{service=1} read back with the probe's own encoder as the
 * reference, HealthCheckResponse{status=1} with status 0 (UNKNOWN) as the empty message.
 */
import * as grpc from '@grpc/grpc-js';
import { healthCheckRequest } from '../../src/pods/probes/grpc-probe.js';

export type HealthCheck = grpc.handleUnaryCall<{ service: string }, { status: number }>;

const HEALTH = {
  Check: {
    path: '/grpc.health.v1.Health/Check',
    requestStream: false,
    responseStream: false,
    requestDeserialize: (b: Buffer) => ({ service: b.length ? b.subarray(2).toString() : '' }),
    requestSerialize: (r: { service: string }) => healthCheckRequest(r.service).subarray(5),
    responseSerialize: (r: { status: number }) => (r.status ? Buffer.from([0x08, r.status]) : Buffer.alloc(0)),
    responseDeserialize: (b: Buffer) => ({ status: b[1] ?? 0 }),
  },
} as unknown as grpc.ServiceDefinition;

/** Binds `server` (insecure) to a free port on 127.0.0.1; resolves with the port. */
export function bindLoopback(server: grpc.Server): Promise<number> {
  return new Promise<number>((res, rej) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))));
}

/** Adds the health service to `server`, each Check answered by `check`, and binds it as bindLoopback does. */
export function serveHealth(server: grpc.Server, check: HealthCheck): Promise<number> {
  server.addService(HEALTH, { Check: check });
  return bindLoopback(server);
}
