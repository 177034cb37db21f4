/**
 * The CRI endpoint syntax (`unix:///path` or an absolute path), apart from the CRI client so
 * that checking it before the lock does not load the CRI client (protobufjs, node:http2) (start-up time: /healthz answers
 * before the client's modules load).
 */
import { NodeletError } from '../errors.js';

/** `unix:///path` or `/path` -> `unix:///path`; anything else is refused naming the parameter. */
export function parseEndpoint(param: string, value: string): string {
  if (value.startsWith('unix://')) {
    const p = value.slice('unix://'.length);
    if (p.startsWith('/') && p.length > 1) return value;
  } else if (value.startsWith('/') && value.length > 1) {
    return `unix://${value}`;
  }
  throw new NodeletError('INVALID_ARGUMENT', `${param} "${value}": expected a unix socket endpoint such as unix:///run/containerd/containerd.sock`, { param, value });
}
