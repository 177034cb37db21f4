/**
 * The one table that turns control-plane answers into NodeletError codes. Callers branch
 * on `code` (and for conflicts on `details.reason`), never on message text.
 *
 * Mapping (HTTP status -> code): 400/422 INVALID_ARGUMENT, 401 UNAUTHENTICATED,
 * 403 FORBIDDEN, 404 NOT_FOUND, 409 CONFLICT (AlreadyExists -> ALREADY_EXISTS),
 * 410 GONE, 429 TOO_MANY_REQUESTS (Retry-After kept), 5xx UNAVAILABLE (504 "Too large
 * resource version" too); transport faults (refused, reset, TLS) UNAVAILABLE, timeouts
 * DEADLINE_EXCEEDED, the caller's abort CANCELLED.
 */
import { NodeletError, errorMessage, type ErrorCode } from '../errors.js';

export const STATUS_CODES: Readonly<Record<number, ErrorCode>> = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  405: 'UNIMPLEMENTED',
  406: 'INVALID_ARGUMENT',
  409: 'CONFLICT',
  410: 'GONE',
  415: 'INVALID_ARGUMENT',
  422: 'INVALID_ARGUMENT',
  429: 'TOO_MANY_REQUESTS',
};

/** Codes a caller may retry later without changing its request. */
export const TRANSIENT_CODES: ReadonlySet<ErrorCode> = new Set(['UNAVAILABLE', 'TOO_MANY_REQUESTS', 'DEADLINE_EXCEEDED']);

export function codeForStatus(status: number, reason?: string): ErrorCode {
  if (status === 409 && reason === 'AlreadyExists') return 'ALREADY_EXISTS';
  return STATUS_CODES[status] ?? (status >= 500 ? 'UNAVAILABLE' : 'INTERNAL');
}

/** The parts of a `Status` body nodelet keeps. */
export interface StatusBody {
  kind?: string;
  status?: string;
  message?: string;
  reason?: string;
  code?: number;
  details?: { name?: string; kind?: string; causes?: Array<{ type?: string; message?: string; field?: string }>; retryAfterSeconds?: number };
}

/** Parses Retry-After (seconds form only; an HTTP date is ignored) to whole seconds. */
export function parseRetryAfter(v: string | string[] | undefined): number | undefined {
  const s = Array.isArray(v) ? v[0] : v;
  if (s === undefined || !/^\s*\d+\s*$/.test(s)) return undefined;
  return Number(s);
}

/**
 * A non-2xx answer (status + decoded body, when it was JSON) -> NodeletError with
 * details {status, reason?, causes?, retryAfterSeconds?, method, path}.
 */
export function decodeStatus(status: number, body: unknown, ctx: { method: string; path: string; retryAfter?: string | string[] | undefined }): NodeletError {
  const st: StatusBody = body && typeof body === 'object' ? (body as StatusBody) : {};
  const code = codeForStatus(status, st.reason);
  const retryAfterSeconds = parseRetryAfter(ctx.retryAfter) ?? (typeof st.details?.retryAfterSeconds === 'number' ? st.details.retryAfterSeconds : undefined);
  const message = st.message || (typeof body === 'string' && body ? body.slice(0, 300) : `HTTP ${status}`);
  return new NodeletError(code, `${ctx.method} ${ctx.path}: ${status} ${message}`, {
    status,
    method: ctx.method,
    path: ctx.path,
    ...(st.reason ? { reason: st.reason } : {}),
    ...(st.details?.causes ? { causes: st.details.causes } : {}),
    ...(retryAfterSeconds !== undefined ? { retryAfterSeconds } : {}),
  });
}

/** A request that never got an answer -> UNAVAILABLE / DEADLINE_EXCEEDED / CANCELLED. */
export function transportError(err: unknown, ctx: { method: string; path: string; cancelled: boolean; timedOut: boolean }): NodeletError {
  if (err instanceof NodeletError) return err;
  const code: ErrorCode = ctx.cancelled ? 'CANCELLED' : ctx.timedOut ? 'DEADLINE_EXCEEDED' : 'UNAVAILABLE';
  const sys = (err as { code?: unknown } | undefined)?.code;
  return new NodeletError(code, `${ctx.method} ${ctx.path}: ${errorMessage(err)}`, { method: ctx.method, path: ctx.path, ...(typeof sys === 'string' ? { cause: sys } : {}) }, { cause: err });
}

