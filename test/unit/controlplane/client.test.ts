import { describe, expect, it } from 'vitest';
import { LEASES, NODES, PODS, parseWatchStream, resourcePath } from '../../../src/controlplane/client.js';
import { retryOnConflict } from '../../../src/controlplane/conflict.js';
import { NodeletError } from '../../../src/errors.js';

describe('resourcePath (the spec path table)', () => {
  it.each([
    [NODES, {}, '/api/v1/nodes'],
    [NODES, { name: 'n1' }, '/api/v1/nodes/n1'],
    [NODES, { name: 'n1', subresource: 'status' }, '/api/v1/nodes/n1/status'],
    [PODS, {}, '/api/v1/pods'],
    [PODS, { namespace: 'ns' }, '/api/v1/namespaces/ns/pods'],
    [PODS, { namespace: 'ns', name: 'p', subresource: 'status' }, '/api/v1/namespaces/ns/pods/p/status'],
    [LEASES, { namespace: 'kube-node-lease', name: 'n1' }, '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1'],
  ] as const)('%j %j -> %s', (t, ref, want) => expect(resourcePath(t, ref)).toBe(want));

  it.each([
    [NODES, { namespace: 'ns' }, 'nodes is cluster-scoped'],
    [PODS, { namespace: 'ns', name: '' }, 'pods: empty name'],
    [PODS, { subresource: 'status' }, 'needs a name'],
  ] as const)('rejects %j %j', (t, ref, msg) => {
    expect(() => resourcePath(t, ref)).toThrow(msg);
  });
});

describe('retryOnConflict', () => {
  const conflict = () => new NodeletError('CONFLICT', 'the object has been modified', { reason: 'Conflict' });
  it('runs again on CONFLICT until it succeeds', async () => {
    const attempts: number[] = [];
    const r = await retryOnConflict(async (n) => {
      attempts.push(n);
      if (n < 3) throw conflict();
      return 'ok';
    });
    expect([r, attempts]).toEqual(['ok', [1, 2, 3]]);
  });
  it('gives up after the budget with the last conflict', async () => {
    let n = 0;
    await expect(retryOnConflict(async () => { n++; throw conflict(); }, 3)).rejects.toMatchObject({ code: 'CONFLICT' });
    expect(n).toBe(3);
  });
  it('does not retry other errors', async () => {
    let n = 0;
    await expect(retryOnConflict(async () => { n++; throw new NodeletError('ALREADY_EXISTS', 'exists'); })).rejects.toMatchObject({ code: 'ALREADY_EXISTS' });
    expect(n).toBe(1);
  });
});

describe('parseWatchStream', () => {
  async function collect(chunks: Array<Buffer | string>): Promise<unknown[]> {
    const out: unknown[] = [];
    for await (const ev of parseWatchStream((async function* () { yield* chunks; })(), '/api/v1/pods')) out.push(ev);
    return out;
  }
  const ev = (type: string, name: string, rv: string) => JSON.stringify({ type, object: { metadata: { name, resourceVersion: rv } } });

  it('splits events across and within chunks, including a cut UTF-8 character', async () => {
    const text = `${ev('ADDED', 'a', '1')}\n${ev('MODIFIED', 'é', '2')}\n${ev('BOOKMARK', '', '3')}`;
    const bytes = Buffer.from(text);
    const cut = bytes.indexOf(Buffer.from('é')) + 1; // inside the two-byte character
    expect(await collect([bytes.subarray(0, 5), bytes.subarray(5, cut), bytes.subarray(cut)])).toEqual([
      { type: 'ADDED', object: { metadata: { name: 'a', resourceVersion: '1' } } },
      { type: 'MODIFIED', object: { metadata: { name: 'é', resourceVersion: '2' } } },
      { type: 'BOOKMARK', object: { metadata: { name: '', resourceVersion: '3' } } },
    ]);
  });

  it('an ERROR event with a 410 Status is GONE, after the events before it', async () => {
    const out: unknown[] = [];
    const err = await (async () => {
      for await (const e of parseWatchStream((async function* () {
        yield `${ev('ADDED', 'a', '1')}\n{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (5)"}}\n`;
      })(), '/api/v1/pods')) out.push(e);
    })().catch((e: unknown) => e);
    expect(out).toHaveLength(1);
    expect(err).toMatchObject({ code: 'GONE', details: { status: 410, reason: 'Expired' } });
  });

  it('a malformed line is UNAVAILABLE', async () => {
    await expect(collect(['{"type":"ADDED"\n'])).rejects.toMatchObject({ code: 'UNAVAILABLE' });
  });
});
