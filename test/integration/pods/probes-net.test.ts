/**
 * Network probes (httpGet, tcpSocket) against a real HTTP server on 127.0.0.1: status
 * codes, headers, named ports, a refused connection, and the probe's timeout against a
 * server that answers late. Real sockets and a real deadline (runProbe's timeout is the
 * socket's own, not a Clock's): integration tests by nature, moved from the unit project.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Probe } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProbe } from '../../../src/pods/probes.js';
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

  it('tcpSocket: a listening port succeeds, a closed one fails; grpc is refused with a reason', async () => {
    expect(await runProbe({ tcpSocket: { port } }, target(), exec(0))).toEqual({ ok: true, output: '' });
    expect((await runProbe({ tcpSocket: { port: closedPort } }, target(), exec(0))).output).toMatch(new RegExp(`^dial tcp 127.0.0.1:${closedPort}: connect ECONNREFUSED`));
    expect(await runProbe({ grpc: { port: 1 } }, target(), exec(0))).toEqual({ ok: false, output: 'grpc probes are not supported by nodelet' });
  });
});
