/**
 * The CRI client's pure parts: endpoints and options. Its behaviour over a real socket
 * (deadlines, fail-fast, reconnect, error mapping, checkpoints) is in
 * test/integration/runtime/cri-client.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { createCriClient, parseEndpoint } from '../../../src/runtime/cri-client.js';

describe('parseEndpoint', () => {
  it('accepts unix:// endpoints and bare absolute paths', () => {
    expect(parseEndpoint('containerRuntimeEndpoint', 'unix:///run/containerd/containerd.sock')).toBe('unix:///run/containerd/containerd.sock');
    expect(parseEndpoint('containerRuntimeEndpoint', '/run/x.sock')).toBe('unix:///run/x.sock');
  });
  it.each(['tcp://127.0.0.1:1234', 'unix://relative.sock', 'unix://', 'npipe:////./pipe/x', ''])('refuses %j naming the parameter', (v) => {
    expect(() => parseEndpoint('imageServiceEndpoint', v)).toThrowError(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/^imageServiceEndpoint "/) }));
  });
  it('refuses a non-positive request timeout', () => {
    expect(() => createCriClient({ runtimeEndpoint: 'unix:///x.sock', requestTimeoutMs: 0 })).toThrowError(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});
