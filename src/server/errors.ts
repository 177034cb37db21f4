/**
 * The ONE place where nodelet error codes become HTTP statuses, for every route of the
 * HTTPS server and of the read-only port. Handlers throw NodeletError; the server catches
 * it and answers `statusFor(err)` with a `Status` body shaped like the control plane's,
 * so `kubectl`/client-go decode it as an API error.
 *
 * Translation decided elsewhere, on purpose, and only once: the spec says the checkpoint
 * endpoint answers 500 when the runtime fails or does not implement CheckpointContainer,
 * whatever the runtime's gRPC code. That rule lives in src/server/checkpoint.ts
 * (`runtimeFailure`), which wraps every runtime error of a checkpoint as INTERNAL with the
 * runtime's message; this table then maps INTERNAL to 500. Elsewhere UNIMPLEMENTED is 500
 * too (the kubelet's behaviour for a runtime lacking a call) and UNAVAILABLE is 503.
 */
import { NodeletError, type ErrorCode } from '../errors.js';

export interface HttpStatus {
  code: number;
  /** metav1.StatusReason. */
  reason: string;
}

/** nodelet code -> HTTP status and Kubernetes StatusReason. Complete over ErrorCode. */
export const HTTP_STATUS_FOR_CODE: Readonly<Record<ErrorCode, HttpStatus>> = Object.freeze({
  INVALID_ARGUMENT: { code: 400, reason: 'BadRequest' },
  UNAUTHENTICATED: { code: 401, reason: 'Unauthorized' },
  FORBIDDEN: { code: 403, reason: 'Forbidden' },
  NOT_FOUND: { code: 404, reason: 'NotFound' },
  CONFLICT: { code: 409, reason: 'Conflict' },
  ALREADY_EXISTS: { code: 409, reason: 'AlreadyExists' },
  GONE: { code: 410, reason: 'Expired' },
  TOO_MANY_REQUESTS: { code: 429, reason: 'TooManyRequests' },
  // A runtime without the call: the spec's checkpoint rule (500), and the kubelet's for others.
  UNIMPLEMENTED: { code: 500, reason: 'InternalError' },
  // A client that went away; nobody reads the answer, but the log line shows 500.
  CANCELLED: { code: 500, reason: 'InternalError' },
  // Configuration is validated at startup; reaching a handler with it is a bug.
  CONFIG_INVALID: { code: 500, reason: 'InternalError' },
  INTERNAL: { code: 500, reason: 'InternalError' },
  UNAVAILABLE: { code: 503, reason: 'ServiceUnavailable' },
  DEADLINE_EXCEEDED: { code: 504, reason: 'Timeout' },
});

/** metav1.Status with status Failure, as the control plane sends errors. */
export interface FailureStatus {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Failure';
  message: string;
  reason: string;
  code: number;
}

export function failureStatus(code: number, reason: string, message: string): FailureStatus {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

/**
 * Status for anything a handler threw. A NodeletError maps through the table with its own
 * message; anything else is a bug and becomes 500 with a generic message (its text may
 * hold paths or secrets and goes to the log, not to the client).
 */
export function statusFor(err: unknown): FailureStatus {
  if (err instanceof NodeletError) {
    const s = HTTP_STATUS_FOR_CODE[err.code] ?? HTTP_STATUS_FOR_CODE.INTERNAL;
    return failureStatus(s.code, s.reason, err.message);
  }
  return failureStatus(500, 'InternalError', 'Internal error occurred: unexpected server error');
}

/** 404 for a path no route serves (client-go's wording). */
export function routeNotFound(): FailureStatus {
  return failureStatus(404, 'NotFound', 'the server could not find the requested resource');
}

/** 405 for a known path asked with a method it does not serve. */
export function methodNotAllowed(method: string, allowed: readonly string[]): FailureStatus {
  return failureStatus(405, 'MethodNotAllowed', `the server does not allow method ${method} here (allowed: ${allowed.join(', ')})`);
}
