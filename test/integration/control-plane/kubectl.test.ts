/**
 * kubectl 1.32 (a client no one here wrote) against the in-process control plane: the
 * "Done when" list of issue 5.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KUBECTL, kubectlEnv } from '../../helpers/kubectl.js';
import { startAdminControlPlane, type AdminControlPlane } from './helpers.js';

let plane: AdminControlPlane | undefined;
let dir: string;
let kubeconfig: string;

const kubectl = (args: string[], input?: string) => plane!.kubectl(args, input);

beforeAll(async () => {
  ({ dir, kubeconfig } = plane = await startAdminControlPlane('cp-kubectl-'));
});
afterAll(() => plane?.close());

const manifest = (image: string): string => `apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: kt\nspec:\n  containers:\n  - name: c\n    image: ${image}\n`;

describe.runIf(fs.existsSync(KUBECTL))('kubectl against the control plane', () => {
  it('get nodes prints the table', async () => {
    for (const n of ['node-a', 'node-b']) {
      const r = await kubectl(['create', '-f', '-'], `apiVersion: v1\nkind: Node\nmetadata:\n  name: ${n}\n`);
      expect(r.stderr).toBe('');
    }
    const r = await kubectl(['get', 'nodes']);
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    // The API server's Node columns (a Node nobody reports for: no Ready condition yet).
    expect(lines[0]).toMatch(/^NAME\s+STATUS\s+ROLES\s+AGE\s+VERSION$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 2))).toEqual([['node-a', 'Unknown'], ['node-b', 'Unknown']]);
  });

  it('apply --server-side twice with different managers shows the conflict', async () => {
    // A manifest goes as JSON (`kubectl create namespace` sends protobuf: kubectl-protobuf.test.ts).
    expect((await kubectl(['create', '-f', '-'], 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kt\n')).code).toBe(0);
    const first = await kubectl(['apply', '--server-side', '--field-manager', 'alice', '-f', '-'], manifest('nginx:1'));
    expect(first.stderr).toBe('');
    expect(first.stdout).toContain('pod/web serverside-applied');
    const second = await kubectl(['apply', '--server-side', '--field-manager', 'bob', '-f', '-'], manifest('nginx:2'));
    expect(second.code).not.toBe(0);
    expect(second.stderr).toContain('conflict');
    expect(second.stderr).toContain('"alice"');
    expect(second.stderr).toContain('.spec.containers[name="c"].image');
    const forced = await kubectl(['apply', '--server-side', '--force-conflicts', '--field-manager', 'bob', '-f', '-'], manifest('nginx:2'));
    expect(forced.code).toBe(0);
    const got = await kubectl(['get', 'pod', 'web', '-n', 'kt', '-o', 'jsonpath={.spec.containers[0].image}']);
    expect(got.stdout).toBe('nginx:2');
  });

  it('get pods --watch prints changes as they happen', async () => {
    const child = spawn(KUBECTL, ['--kubeconfig', kubeconfig, 'get', 'pods', '-n', 'kt', '--watch'], { env: kubectlEnv(dir) });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    const until = async (re: RegExp): Promise<void> => {
      for (let i = 0; i < 100 && !re.test(out); i++) await new Promise((r) => setTimeout(r, 100));
    };
    try {
      await until(/web/);
      // The API server's Pod columns.
      expect(out).toMatch(/^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE/);
      await kubectl(['create', '-f', '-'], manifest('x').replace('name: web', 'name: watched'));
      await until(/watched/);
      expect(out).toContain('watched');
    } finally {
      child.kill('SIGTERM');
    }
  });

  it('get --raw reads a chunked list', async () => {
    const first = JSON.parse((await kubectl(['get', '--raw', '/api/v1/nodes?limit=1'])).stdout);
    expect(first.items).toHaveLength(1);
    expect(first.metadata.remainingItemCount).toBe(1);
    const next = JSON.parse((await kubectl(['get', '--raw', `/api/v1/nodes?limit=1&continue=${first.metadata.continue}`])).stdout);
    expect(next.items[0].metadata.name).toBe('node-b');
    expect(next.metadata.resourceVersion).toBe(first.metadata.resourceVersion);
  });

  it('delete namespace removes it and what it holds', async () => {
    const r = await kubectl(['delete', 'namespace', 'kt', '--timeout=15s']);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('namespace "kt" deleted');
    const gone = await kubectl(['get', 'namespace', 'kt']);
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toContain('NotFound');
    const pods = await kubectl(['get', 'pods', '-A', '-o', 'name']);
    expect(pods.stdout).not.toContain('web');
  });
});
