import { describe, expect, it } from 'vitest';
import { decodeStatus, parseRetryAfter, transportError } from '../../../src/controlplane/errors.js';
import { NodeletError } from '../../../src/errors.js';

const ctx = { method: 'PUT', path: '/api/v1/nodes/n1' };
const status = (code: number, reason: string, message: string, details?: unknown) => ({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message, ...(details ? { details } : {}) });

describe('decodeStatus', () => {
  const table: Array<[number, unknown, string | undefined, Record<string, unknown>]> = [
    [404, status(404, 'NotFound', 'nodes "n1" not found'), undefined, { code: 'NOT_FOUND', reason: 'NotFound' }],
    [409, status(409, 'Conflict', 'the object has been modified', { causes: [{ field: 'metadata.resourceVersion' }] }), undefined, { code: 'CONFLICT', reason: 'Conflict', causes: [{ field: 'metadata.resourceVersion' }] }],
    [409, status(409, 'AlreadyExists', 'nodes "n1" already exists'), undefined, { code: 'ALREADY_EXISTS', reason: 'AlreadyExists' }],
    [410, status(410, 'Expired', 'too old resource version: 1 (5)'), undefined, { code: 'GONE', reason: 'Expired' }],
    [429, status(429, 'TooManyRequests', 'slow down'), '7', { code: 'TOO_MANY_REQUESTS', retryAfterSeconds: 7 }],
    [504, status(504, 'Timeout', 'Too large resource version: 99, current: 5', { retryAfterSeconds: 1 }), '1', { code: 'UNAVAILABLE', reason: 'Timeout', retryAfterSeconds: 1 }],
    [503, 'upstream down', undefined, { code: 'UNAVAILABLE' }],
    [500, status(500, 'InternalError', 'boom'), undefined, { code: 'UNAVAILABLE' }],
    [401, status(401, 'Unauthorized', 'Unauthorized'), undefined, { code: 'UNAUTHENTICATED' }],
    [403, status(403, 'Forbidden', 'nodes "n1" is forbidden'), undefined, { code: 'FORBIDDEN' }],
    [422, status(422, 'Invalid', 'Pod "p" is invalid', { causes: [{ type: 'FieldValueRequired', field: 'spec.containers' }] }), undefined, { code: 'INVALID_ARGUMENT', causes: [{ type: 'FieldValueRequired', field: 'spec.containers' }] }],
    [400, status(400, 'BadRequest', 'strict decoding error'), undefined, { code: 'INVALID_ARGUMENT' }],
    [418, undefined, undefined, { code: 'INTERNAL' }],
  ];
  it.each(table)('%i -> %j', (http, body, retryAfter, want) => {
    const e = decodeStatus(http, body, { ...ctx, retryAfter });
    expect(e).toBeInstanceOf(NodeletError);
    const { code, ...rest } = want;
    expect(e.code).toBe(code);
    expect(e.details).toMatchObject({ status: http, ...rest });
    expect(e.message.startsWith(`PUT /api/v1/nodes/n1: ${http} `)).toBe(true);
  });

  it('keeps the Status message in the error message', () => {
    expect(decodeStatus(404, status(404, 'NotFound', 'nodes "n1" not found'), ctx).message).toBe('PUT /api/v1/nodes/n1: 404 nodes "n1" not found');
  });
});

describe('parseRetryAfter', () => {
  it.each([
    ['3', 3],
    [' 10 ', 10],
    ['Wed, 21 Oct 2015 07:28:00 GMT', undefined],
    [undefined, undefined],
    [['5', '6'], 5],
  ] as const)('%j -> %j', (v, want) => expect(parseRetryAfter(v as string | string[] | undefined)).toBe(want));
});

describe('transportError', () => {
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
  it.each([
    [{ cancelled: false, timedOut: false }, 'UNAVAILABLE'],
    [{ cancelled: false, timedOut: true }, 'DEADLINE_EXCEEDED'],
    [{ cancelled: true, timedOut: false }, 'CANCELLED'],
  ] as const)('%j -> %s', (flags, code) => {
    const e = transportError(refused, { ...ctx, ...flags });
    expect([e.code, e.message]).toEqual([code, 'PUT /api/v1/nodes/n1: connect ECONNREFUSED 127.0.0.1:1']);
  });
});
