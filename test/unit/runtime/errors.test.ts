import { status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { fromGrpcError, nodeletCodeFor } from '../../../src/runtime/errors.js';

function grpcErr(code: number, details: string) {
  return Object.assign(new Error(`${code} ${status[code]}: ${details}`), { code, details });
}

describe('gRPC status -> nodelet error code', () => {
  it.each([
    [status.NOT_FOUND, 'NOT_FOUND'],
    [status.UNIMPLEMENTED, 'UNIMPLEMENTED'],
    [status.UNAVAILABLE, 'UNAVAILABLE'],
    [status.DEADLINE_EXCEEDED, 'DEADLINE_EXCEEDED'],
    [status.ALREADY_EXISTS, 'ALREADY_EXISTS'],
    [status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    [status.CANCELLED, 'CANCELLED'],
    [status.UNAUTHENTICATED, 'UNAUTHENTICATED'],
    [status.PERMISSION_DENIED, 'FORBIDDEN'],
    [status.RESOURCE_EXHAUSTED, 'TOO_MANY_REQUESTS'],
    [status.UNKNOWN, 'INTERNAL'],
    [status.INTERNAL, 'INTERNAL'],
    [status.FAILED_PRECONDITION, 'INTERNAL'],
    [status.ABORTED, 'INTERNAL'],
    [status.DATA_LOSS, 'INTERNAL'],
    [99, 'INTERNAL'],
  ] as const)('gRPC code %i -> %s', (code, expected) => {
    expect(nodeletCodeFor(code, 'some message')).toBe(expected);
  });

  it('maps containerd\'s "name is reserved" (code Unknown) to CONFLICT, and only that Unknown', () => {
    expect(nodeletCodeFor(status.UNKNOWN, 'failed to reserve sandbox name "a_b_c_0": name "a_b_c_0" is reserved for "0123"')).toBe('CONFLICT');
    expect(nodeletCodeFor(status.UNKNOWN, 'failed to create containerd task')).toBe('INTERNAL');
    expect(nodeletCodeFor(status.NOT_FOUND, 'name is reserved')).toBe('NOT_FOUND');
  });
});

describe('fromGrpcError', () => {
  it('keeps the runtime message in the Go client form and the gRPC code in details', () => {
    const e = fromGrpcError('CheckpointContainer', grpcErr(status.UNIMPLEMENTED, 'method CheckpointContainer not implemented'));
    expect(e).toBeInstanceOf(NodeletError);
    expect({ code: e.code, message: e.message, details: e.details }).toEqual({
      code: 'UNIMPLEMENTED',
      message: 'CheckpointContainer: rpc error: code = Unimplemented desc = method CheckpointContainer not implemented',
      details: { method: 'CheckpointContainer', grpcCode: 12, grpcCodeName: 'Unimplemented', runtimeMessage: 'method CheckpointContainer not implemented' },
    });
    expect((e as Error & { cause?: unknown }).cause).toBeInstanceOf(Error);
  });

  it('spells codes as Go does (Canceled, DeadlineExceeded) and survives unknown codes', () => {
    expect(fromGrpcError('Version', grpcErr(status.CANCELLED, 'context canceled')).message).toBe('Version: rpc error: code = Canceled desc = context canceled');
    expect(fromGrpcError('Version', grpcErr(status.DEADLINE_EXCEEDED, 'Deadline exceeded')).message).toBe('Version: rpc error: code = DeadlineExceeded desc = Deadline exceeded');
    expect(fromGrpcError('Version', grpcErr(42, 'odd')).message).toBe('Version: rpc error: code = Code(42) desc = odd');
  });

  it('turns a non-gRPC failure into INTERNAL naming the method, and passes NodeletErrors through', () => {
    const e = fromGrpcError('ListContainers', new TypeError('boom'));
    expect({ code: e.code, message: e.message }).toEqual({ code: 'INTERNAL', message: 'ListContainers: boom' });
    const n = new NodeletError('CANCELLED', 'closed');
    expect(fromGrpcError('Version', n)).toBe(n);
  });
});
