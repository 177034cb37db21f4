/**
 * (e) Access with Webhook authorization (complements http-access.test.ts, which runs the
 * x509 side standalone): the built nodelet connected to the test control plane, bearer
 * tokens checked by TokenReview, every request authorized by SubjectAccessReview (cache
 * TTLs of 1 ms: 0 means the default, as in the kubelet; so every request asks). The
 * control plane records each review it answers.
 * - A user the webhook denies gets 403 on every route of the HTTPS server, with the
 *   webhook's reason; nothing runs for it (no CRI call).
 * - The reviews carry the kubelet's mapping: verb from the method (GET get, POST create),
 *   resource `nodes`, name `n1`, and the subresource of the path: `/stats*` stats,
 *   `/metrics*` metrics, `/logs*` log, `/checkpoint*` checkpoint, `/healthz` healthz then
 *   proxy, everything else (`/pods`, `/configz`, `/containerLogs`, `/exec`, `/attach`,
 *   `/portForward`, `/run`) proxy.
 * - A user the webhook allows for exactly those attributes is never refused (no 401/403).
 */
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS } from '../../src/controlplane/client.js';
import type { AccessAttributes } from '../control-plane/server.js';
import { eventually } from '../helpers/nodelet.js';
import { request } from '../integration/server/client.js';
import { startConnectedNode, type ConnectedNode } from './connected-node.js';
import { Tally } from './report.js';

const tally = new Tally('webhook-access');
let n: ConnectedNode;
const reviews: AccessAttributes[] = [];

/** Every route of the HTTPS server, with the subresources the kubelet's mapping asks for, in order. */
const ROUTES: [method: string, path: string, subresources: string[]][] = [
  ['GET', '/pods', ['proxy']],
  ['GET', '/healthz', ['healthz', 'proxy']],
  ['GET', '/metrics', ['metrics']],
  ['GET', '/metrics/resource', ['metrics']],
  ['GET', '/stats/summary', ['stats']],
  ['GET', '/configz', ['proxy']],
  ['GET', '/containerLogs/default/web/app', ['proxy']],
  ['POST', '/checkpoint/default/web/app', ['checkpoint']],
  ['GET', '/checkpoints', ['checkpoint']],
  ['GET', '/exec/default/web/app?command=true&output=1', ['proxy']],
  ['POST', '/exec/default/web/app?command=true&output=1', ['proxy']],
  ['GET', '/attach/default/web/app?output=1', ['proxy']],
  ['GET', '/portForward/default/web?port=80', ['proxy']],
  ['POST', '/run/default/web/app?command=true', ['proxy']],
  ['GET', '/logs/', ['log']],
];

beforeAll(async () => {
  n = await startConnectedNode({
    prefix: 'nodelet-faults-webhook-',
    webhook: true,
    config: { authorization: '{mode: Webhook, webhook: {cacheAuthorizedTTL: 1ms, cacheUnauthorizedTTL: 1ms}}' },
  });
  n.cp.addToken('denied-token', 'mallory', ['devs']);
  n.cp.addToken('allowed-token', 'ops', ['sre']);
  n.cp.setAccessRules((a) => {
    reviews.push(a);
    const route = current;
    const allowed = a.user === 'ops' && route !== undefined && a.resource === 'nodes' && a.name === 'n1' && a.verb === (route[0] === 'POST' ? 'create' : 'get') && route[2].includes(a.subresource ?? '');
    return allowed ? { allowed: true } : { allowed: false, reason: `no rule lets ${a.user} ${a.verb} nodes/${a.subresource ?? ''}` };
  });
  await n.api.create<Pod>(PODS, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'web', namespace: 'default' },
    spec: { nodeName: 'n1', hostNetwork: true, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] },
  });
  await eventually(() => [...n.cri.containers.values()].some((c) => c.state === 'CONTAINER_RUNNING'), 20_000);
});
afterAll(async () => {
  tally.write();
  await n?.close();
});

/** The route being requested (the access rules answer by it). */
let current: (typeof ROUTES)[number] | undefined;

async function ask(route: (typeof ROUTES)[number], token: string): Promise<{ status: number; body: string; reviews: AccessAttributes[] }> {
  current = route;
  const from = reviews.length;
  const r = await request(`https://127.0.0.1:${n.ports.https}${route[1]}`, { method: route[0], ca: n.servingCert(), token });
  current = undefined;
  return { status: r.status, body: r.body, reviews: reviews.slice(from) };
}

describe('Webhook authorization', () => {
  it('a user the webhook denies gets 403 on every route, and the reviews carry the kubelet\'s mapping', async () => {
    const criCalls = n.cri.calls.length;
    const checkpointsBefore = n.cri.callsOf('CheckpointContainer').length;
    for (const route of ROUTES) {
      const [method, path, subresources] = route;
      const r = await ask(route, 'denied-token');
      expect(r.status, `${method} ${path}`).toBe(403);
      expect(r.body, `${method} ${path}`).toContain('no rule lets mallory');
      // One review per subresource, in the kubelet's order, all for nodes/n1 with the method's verb.
      expect(r.reviews.map((a) => ({ user: a.user, verb: a.verb, resource: a.resource, subresource: a.subresource, name: a.name })), `${method} ${path}`).toEqual(
        subresources.map((s) => ({ user: 'mallory', verb: method === 'POST' ? 'create' : 'get', resource: 'nodes', subresource: s, name: 'n1' })),
      );
      expect(r.reviews.every((a) => a.groups.includes('devs') && a.groups.includes('system:authenticated'))).toBe(true);
      tally.add('routes refused with 403 for the denied user');
      tally.add('subject access reviews checked', r.reviews.length);
    }
    // Nothing ran for the denied user: no checkpoint, no exec.
    expect(n.cri.callsOf('CheckpointContainer')).toHaveLength(checkpointsBefore);
    expect(n.cri.calls.slice(criCalls).filter((c) => /^(Exec|ExecSync|Attach|PortForward|CheckpointContainer)$/.test(c.method))).toEqual([]);
  });

  it('a user allowed exactly those attributes is never refused', async () => {
    const statuses: Record<string, number> = {};
    for (const route of ROUTES) {
      const r = await ask(route, 'allowed-token');
      statuses[`${route[0]} ${route[1]}`] = r.status;
      expect([401, 403], `${route[0]} ${route[1]}: ${r.body.slice(0, 300)}`).not.toContain(r.status);
      expect(r.reviews.length).toBeGreaterThan(0);
      tally.add('routes served to the allowed user (no 401/403)');
    }
    tally.note('statuses for the allowed user', statuses);
    tally.add('crashes', n.nodelet.child.exitCode === null ? 0 : 1);
    expect(n.nodelet.child.exitCode).toBeNull();
  });
});
