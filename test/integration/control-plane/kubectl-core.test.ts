/**
 * Issue 27 with kubectl 1.32, the tool a user has: `create configmap|secret generic|secret
 * docker-registry|serviceaccount` and `create token`, then reading them back. Objects are
 * made from manifests too (`--dry-run=client -o yaml | apply -f -`, JSON on the wire), so
 * the test says what the server keeps whatever encoding `create` uses.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ControlPlane } from '../../control-plane/server.js';
import { KUBECTL } from '../../helpers/kubectl.js';
import { TOKEN, request, startAdminControlPlane, type AdminControlPlane } from './helpers.js';

let plane: AdminControlPlane | undefined;
let cp: ControlPlane;
let dir: string;

const kubectl = (args: string[], input?: string) => plane!.kubectl(args, input);

/** `kubectl create <args> --dry-run=client -o yaml | kubectl apply -f -`: the object kubectl makes, sent as JSON. */
async function createViaApply(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const m = await kubectl(['create', ...args, '--dry-run=client', '-o', 'yaml']);
  expect(m.code).toBe(0);
  return kubectl(['apply', '-f', '-'], m.stdout);
}

beforeAll(async () => {
  ({ cp, dir } = plane = await startAdminControlPlane('cp-kubectl-core-', { token: TOKEN }));
});
afterAll(() => plane?.close());

describe.runIf(fs.existsSync(KUBECTL))('kubectl: configmaps, secrets, service accounts, tokens', () => {
  it('create configmap from literals and a file; get prints it', async () => {
    fs.writeFileSync(path.join(dir, 'app.conf'), 'x = 1\n');
    const r = await createViaApply(['configmap', 'app', '--from-literal=mode=fast', `--from-file=${path.join(dir, 'app.conf')}`]);
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('configmap/app created');
    const g = await kubectl(['get', 'configmap', 'app', '-o', 'json']);
    expect(JSON.parse(g.stdout).data).toEqual({ mode: 'fast', 'app.conf': 'x = 1\n' });
    const table = await kubectl(['get', 'configmaps']);
    expect(table.stdout).toMatch(/^NAME\s+/);
    expect(table.stdout).toContain('kube-root-ca.crt');
    const wrong = await kubectl(['apply', '-f', '-'], 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: wrong\ndata:\n  "a b": x\n');
    expect(wrong.code).not.toBe(0);
    expect(wrong.stderr).toContain('data[a b]: Invalid value: "a b": a valid config key must consist of alphanumeric characters');
  });

  it('create secret generic and docker-registry; the data is base64 of what was given', async () => {
    expect((await createViaApply(['secret', 'generic', 'creds', '--from-literal=user=admin', '--from-literal=pass=s3cr3t'])).stdout.trim()).toBe('secret/creds created');
    const g = JSON.parse((await kubectl(['get', 'secret', 'creds', '-o', 'json'])).stdout);
    expect(g.type).toBe('Opaque');
    expect(Buffer.from(g.data.pass, 'base64').toString()).toBe('s3cr3t');
    expect((await createViaApply(['secret', 'docker-registry', 'reg', '--docker-server=registry.example', '--docker-username=u', '--docker-password=p'])).stdout.trim()).toBe('secret/reg created');
    const reg = JSON.parse((await kubectl(['get', 'secret', 'reg', '-o', 'json'])).stdout);
    expect(reg.type).toBe('kubernetes.io/dockerconfigjson');
    expect(JSON.parse(Buffer.from(reg.data['.dockerconfigjson'], 'base64').toString()).auths['registry.example'].username).toBe('u');
  });

  it('create serviceaccount, then create token for it: a JWT the API accepts as that account', async () => {
    expect((await createViaApply(['serviceaccount', 'robot'])).stdout.trim()).toBe('serviceaccount/robot created');
    const t = await kubectl(['create', 'token', 'robot', '--duration=15m']);
    expect(t.stderr).toBe('');
    const jwt = t.stdout.trim();
    const claims = JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString());
    expect(claims.sub).toBe('system:serviceaccount:default:robot');
    expect(claims.exp - claims.iat).toBe(900);
    const review = await request(cp, 'POST', '/apis/authentication.k8s.io/v1/tokenreviews', { body: { spec: { token: jwt } } });
    expect(review.json.status.user.username).toBe('system:serviceaccount:default:robot');
    const short = await kubectl(['create', 'token', 'robot', '--duration=5m']);
    expect(short.code).not.toBe(0);
    expect(short.stderr).toContain('may not specify a duration less than 10 minutes');
    const missing = await kubectl(['create', 'token', 'ghost']);
    expect(missing.stderr).toContain('serviceaccounts "ghost" not found');
  });

  it('create configmap, secret and serviceaccount directly (kubectl\'s own encoding)', async () => {
    const cm = await kubectl(['create', 'configmap', 'direct', '--from-literal=a=1']);
    const sec = await kubectl(['create', 'secret', 'generic', 'direct', '--from-literal=a=1']);
    const sa = await kubectl(['create', 'serviceaccount', 'direct']);
    expect([cm.stdout.trim(), sec.stdout.trim(), sa.stdout.trim()]).toEqual(['configmap/direct created', 'secret/direct created', 'serviceaccount/direct created']);
    expect(JSON.parse((await kubectl(['get', 'secret', 'direct', '-o', 'json'])).stdout).data).toEqual({ a: 'MQ==' });
  });
});
