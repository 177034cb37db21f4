/**
 * nodelet's error vocabulary. Every module throws NodeletError with a stable code;
 * callers branch on `code`, never on message text. Each edge maps codes in exactly one
 * table: gRPC status -> code in src/runtime, code -> HTTP status in src/server.
 */
export type ErrorCode =
  | 'CONFIG_INVALID' // configuration file/flag failed validation (details in `details`)
  | 'INVALID_ARGUMENT' // a request or call parameter is malformed
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'CONFLICT' // optimistic-concurrency failure (stale resourceVersion, name reserved)
  | 'GONE' // resource version / continue token expired
  | 'UNAUTHENTICATED'
  | 'FORBIDDEN'
  | 'UNAVAILABLE' // peer (runtime, control plane) not reachable right now; retry later
  | 'TOO_MANY_REQUESTS'
  | 'DEADLINE_EXCEEDED'
  | 'UNIMPLEMENTED' // the peer does not implement the call
  | 'CANCELLED'
  | 'INTERNAL'; // anything else: a bug or an unexpected peer answer

export class NodeletError extends Error {
  override readonly name = 'NodeletError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: Readonly<Record<string, unknown>> = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export function isNodeletError(err: unknown, code?: ErrorCode): err is NodeletError {
  return err instanceof NodeletError && (code === undefined || err.code === code);
}

/** Message of any thrown value, for logs. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/**
 * The server did not answer at all: the connection was refused or reset before any HTTP
 * status (not a timeout: a server too slow to answer is a busy one). Asking such a server
 * again costs it nothing, so retries may stay short (1 s) where the kubelet's backoff
 * grows: a lease is renewed, a watch resumed, within a second of the server's return.
 */
export function unanswered(err: unknown): boolean {
  return err instanceof NodeletError && err.code === 'UNAVAILABLE' && err.details.status === undefined;
}

/** The longest retry delay for a server that does not answer at all (see unanswered). */
export const UNANSWERED_RETRY_CAP_MS = 1_000;
