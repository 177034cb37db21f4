import { describe, expect, it } from 'vitest';
import { NodeletError, type ErrorCode } from '../../../src/errors.js';
import { HTTP_STATUS_FOR_CODE, methodNotAllowed, routeNotFound, statusFor } from '../../../src/server/errors.js';

describe('error -> HTTP status table', () => {
  const table: [ErrorCode, number, string][] = [
    ['INVALID_ARGUMENT', 400, 'BadRequest'],
    ['UNAUTHENTICATED', 401, 'Unauthorized'],
    ['FORBIDDEN', 403, 'Forbidden'],
    ['NOT_FOUND', 404, 'NotFound'],
    ['CONFLICT', 409, 'Conflict'],
    ['ALREADY_EXISTS', 409, 'AlreadyExists'],
    ['GONE', 410, 'Expired'],
    ['TOO_MANY_REQUESTS', 429, 'TooManyRequests'],
    ['UNIMPLEMENTED', 500, 'InternalError'],
    ['CANCELLED', 500, 'InternalError'],
    ['CONFIG_INVALID', 500, 'InternalError'],
    ['INTERNAL', 500, 'InternalError'],
    ['UNAVAILABLE', 503, 'ServiceUnavailable'],
    ['DEADLINE_EXCEEDED', 504, 'Timeout'],
  ];

  it('covers every nodelet error code', () => {
    expect(Object.keys(HTTP_STATUS_FOR_CODE).sort()).toEqual(table.map(([c]) => c).sort());
  });

  it.each(table)('%s -> %i %s with a Status body carrying the message', (code, status, reason) => {
    expect(statusFor(new NodeletError(code, `msg for ${code}`))).toEqual({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: `msg for ${code}`,
      reason,
      code: status,
    });
  });

  it('hides the text of a non-nodelet error (a bug) behind a generic 500', () => {
    const s = statusFor(new Error('ENOENT /var/lib/secret/path'));
    expect(s).toEqual({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: 'Internal error occurred: unexpected server error', reason: 'InternalError', code: 500 });
  });

  it('answers unknown routes 404 and wrong methods 405', () => {
    expect(routeNotFound()).toMatchObject({ code: 404, reason: 'NotFound', message: 'the server could not find the requested resource' });
    expect(methodNotAllowed('GET', ['POST'])).toMatchObject({ code: 405, reason: 'MethodNotAllowed', message: 'the server does not allow method GET here (allowed: POST)' });
  });
});
