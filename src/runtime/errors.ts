/**
 * The ONE place where gRPC status codes from the container runtime become nodelet error
 * codes. The CRI client calls `fromGrpcError` for every failed call; callers branch on
 * `NodeletError.code` and show `message`, which keeps the runtime's own words in the
 * form Go clients print them (`<Method>: rpc error: code = Unimplemented desc = ...`), so
 * an operator can search for it.
 */
import { GrpcStatus, type GrpcStatusCode } from './grpc-status.js';
import { NodeletError, type ErrorCode } from '../errors.js';

/** gRPC code -> nodelet code. Codes not listed map to INTERNAL. */
export const GRPC_TO_NODELET: Readonly<Partial<Record<GrpcStatusCode, ErrorCode>>> = {
  [GrpcStatus.NOT_FOUND]: 'NOT_FOUND',
  [GrpcStatus.UNIMPLEMENTED]: 'UNIMPLEMENTED',
  [GrpcStatus.UNAVAILABLE]: 'UNAVAILABLE',
  [GrpcStatus.DEADLINE_EXCEEDED]: 'DEADLINE_EXCEEDED',
  [GrpcStatus.ALREADY_EXISTS]: 'ALREADY_EXISTS',
  [GrpcStatus.INVALID_ARGUMENT]: 'INVALID_ARGUMENT',
  [GrpcStatus.CANCELLED]: 'CANCELLED',
  [GrpcStatus.UNAUTHENTICATED]: 'UNAUTHENTICATED',
  [GrpcStatus.PERMISSION_DENIED]: 'FORBIDDEN',
  [GrpcStatus.RESOURCE_EXHAUSTED]: 'TOO_MANY_REQUESTS',
};

/**
 * containerd answers a name still held by another sandbox/container with code UNKNOWN
 * and `name "..." is reserved for "<id>"`; nodelet's vocabulary has CONFLICT for it, so
 * the pod workers can tell "make a new attempt / clean up the old one" from a failure.
 */
const NAME_RESERVED = /\bis reserved for\b|\bname is reserved\b/;

/** Go's names of the gRPC codes, as `rpc error: code = X` prints them. */
const GO_CODE_NAMES: Readonly<Record<number, string>> = {
  [GrpcStatus.OK]: 'OK',
  [GrpcStatus.CANCELLED]: 'Canceled',
  [GrpcStatus.UNKNOWN]: 'Unknown',
  [GrpcStatus.INVALID_ARGUMENT]: 'InvalidArgument',
  [GrpcStatus.DEADLINE_EXCEEDED]: 'DeadlineExceeded',
  [GrpcStatus.NOT_FOUND]: 'NotFound',
  [GrpcStatus.ALREADY_EXISTS]: 'AlreadyExists',
  [GrpcStatus.PERMISSION_DENIED]: 'PermissionDenied',
  [GrpcStatus.RESOURCE_EXHAUSTED]: 'ResourceExhausted',
  [GrpcStatus.FAILED_PRECONDITION]: 'FailedPrecondition',
  [GrpcStatus.ABORTED]: 'Aborted',
  [GrpcStatus.OUT_OF_RANGE]: 'OutOfRange',
  [GrpcStatus.UNIMPLEMENTED]: 'Unimplemented',
  [GrpcStatus.INTERNAL]: 'Internal',
  [GrpcStatus.UNAVAILABLE]: 'Unavailable',
  [GrpcStatus.DATA_LOSS]: 'DataLoss',
  [GrpcStatus.UNAUTHENTICATED]: 'Unauthenticated',
};

/** The nodelet code for a gRPC status code and the runtime's message. */
export function nodeletCodeFor(grpcCode: number, runtimeMessage = ''): ErrorCode {
  if (grpcCode === GrpcStatus.UNKNOWN && NAME_RESERVED.test(runtimeMessage)) return 'CONFLICT';
  return GRPC_TO_NODELET[grpcCode as GrpcStatusCode] ?? 'INTERNAL';
}

interface GrpcLikeError {
  code?: unknown;
  details?: unknown;
  message?: unknown;
}

/**
 * Wraps a failed CRI call's error. `details` carries `method`, `grpcCode` (number),
 * `grpcCodeName` (Go spelling) and `runtimeMessage` (the status details as the runtime
 * sent them). A non-gRPC error (a bug in the client) becomes INTERNAL with its message.
 */
export function fromGrpcError(method: string, err: unknown): NodeletError {
  if (err instanceof NodeletError) return err;
  const e = (err ?? {}) as GrpcLikeError;
  if (typeof e.code !== 'number') {
    const msg = err instanceof Error ? err.message : String(err);
    return new NodeletError('INTERNAL', `${method}: ${msg}`, { method }, { cause: err });
  }
  const runtimeMessage = typeof e.details === 'string' ? e.details : typeof e.message === 'string' ? e.message : '';
  const codeName = GO_CODE_NAMES[e.code] ?? `Code(${e.code})`;
  return new NodeletError(
    nodeletCodeFor(e.code, runtimeMessage),
    `${method}: rpc error: code = ${codeName} desc = ${runtimeMessage}`,
    { method, grpcCode: e.code, grpcCodeName: codeName, runtimeMessage },
    { cause: err },
  );
}
