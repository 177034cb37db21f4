/**
 * Network probes (httpGet, tcpSocket, grpc) against real HTTP and gRPC (grpc-js) servers on 127.0.0.1: status
 * codes, headers, named ports, a refused connection, and the probe's timeout against a
 * server that answers late. Real sockets and a real deadline (runProbe's timeout is the
 * socket's own, not a Clock's): integration tests by nature, moved from the unit project.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Probe } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { runProbe } from '../../../src/pods/probes/probes.js';
import { bindLoopback, serveHealth } from '../../helpers/grpc-health.js';
import { execAnswer as exec, probeContainer as container, probeTarget as target } from '../../fakes/probe-exec.js';

let server: http.Server;
let port: number;
let closedPort: number;

beforeAll(async () => {
  server = http.createServer((req, res) => {
    if (req.url === '/slow') return void setTimeout(() => res.end('late'), 3000);
    res.statusCode = req.url === '/healthz' && req.headers['x-probe'] === 'yes' ? 200 : req.url === '/redirect' ? 302 : 503;
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  closedPort = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

describe('runProbe over the network', () => {
  it('httpGet: 2xx and 3xx succeed (headers sent, named ports resolved); other codes, timeouts and refused connections fail', async () => {
    const named = { ...container, ports: [{ name: 'web', containerPort: port }] };
    const get = (path: string, extra: Partial<NonNullable<Probe['httpGet']>> = {}, t = target(named)) => runProbe({ httpGet: { path, port: 'web', httpHeaders: [{ name: 'X-Probe', value: 'yes' }], ...extra }, timeoutSeconds: 1 }, t, exec(0));
    expect(await get('/healthz')).toEqual({ ok: true, output: '' });
    expect(await get('/redirect')).toEqual({ ok: true, output: '' });
    expect(await get('/other')).toEqual({ ok: false, output: 'HTTP probe failed with statuscode: 503' });
    expect((await get('/slow')).output).toMatch(/context deadline exceeded/);
    expect((await get('/', { port: closedPort })).output).toMatch(new RegExp(`^Get "http://127.0.0.1:${closedPort}/": connect ECONNREFUSED`));
    expect(await get('/', { port: 'nope' })).toEqual({ ok: false, output: 'httpGet port "nope" is not a number nor a port of the container' });
  });

  it('tcpSocket: a listening port succeeds, a closed one fails', async () => {
    expect(await runProbe({ tcpSocket: { port } }, target(), exec(0))).toEqual({ ok: true, output: '' });
    expect((await runProbe({ tcpSocket: { port: closedPort } }, target(), exec(0))).output).toMatch(new RegExp(`^dial tcp 127.0.0.1:${closedPort}: connect ECONNREFUSED`));
  });

  it("grpc: grpc.health.v1.Health/Check against grpc-js's server: SERVING succeeds, anything else fails with the kubelet's messages", async () => {
    // A real gRPC server (grpc-js) with the health service, answering per requested service name.
    const statuses: Record<string, number> = { '': 1, web: 2 };
    const seen: string[] = [];
    const server = new grpc.Server();
    const gport = await serveHealth(server, (call, cb) => {
      const name = call.request.service;
      seen.push(name);
      if (name === 'slow') return void setTimeout(() => cb(null, { status: 1 }), 3000);
      if (!(name in statuses)) return cb({ code: grpc.status.NOT_FOUND, details: 'unknown service' });
      cb(null, { status: statuses[name]! });
    });
    try {
      const probe = (service?: string, p = gport) => runProbe({ grpc: { port: p, ...(service !== undefined ? { service } : {}) }, timeoutSeconds: 1 }, target(), exec(0));
      expect(await probe()).toEqual({ ok: true, output: 'service healthy' });
      expect(await probe('web')).toEqual({ ok: false, output: 'service unhealthy (responded with "NOT_SERVING")' });
      expect(await probe('db')).toEqual({ ok: false, output: 'error: health rpc probe failed: rpc error: code = 5 desc = unknown service' });
      expect(await probe('slow')).toEqual({ ok: false, output: 'timeout: health rpc did not complete within 1s' });
      expect((await probe('', closedPort)).output).toMatch(new RegExp(`^timeout: failed to connect service "127.0.0.1:${closedPort}" within 1s: connect ECONNREFUSED`));
      expect(seen).toEqual(['', 'web', 'db', 'slow']);
      // A server without the health service: the kubelet's message for it.
      const bare = new grpc.Server();
      const bport = await bindLoopback(bare);
      expect((await probe('', bport)).output).toMatch(/^this server does not implement the grpc health protocol \(grpc.health.v1.Health\)/);
      bare.forceShutdown();
    } finally {
      server.forceShutdown();
    }
  });
});
