import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Pod, Volume } from 'kubernetes-types/core/v1.js';
import { afterEach, describe, expect, it } from 'vitest';
import { parseQuantity } from '../../../../src/config/quantity.js';
import { payloadPathProblem, writeAtomically, type FileProjection } from '../../../../src/pods/volumes/atomic-writer.js';
import { apiDataPayload, refreshApiDataVolumes, setUpApiDataVolume } from '../../../../src/pods/volumes/api-data.js';
import { formatMap, goQuote } from '../../../../src/pods/volumes/downward-api.js';

const quantity = (q: string | number) => parseQuantity(String(q)).value;
const ctx = { quantity };
const dirs: string[] = [];
const tmp = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-atomic-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

const file = (text: string, mode = 0o644): FileProjection => ({ data: Buffer.from(text), mode });
/** What a reader of the volume sees: each visible entry's content (through the links), and the layout. */
function view(dir: string) {
  const entries = fs.readdirSync(dir).sort();
  const visible = entries.filter((e) => !e.startsWith('..'));
  const read = (p: string): unknown => (fs.statSync(p).isDirectory() ? Object.fromEntries(fs.readdirSync(p).sort().map((n) => [n, read(path.join(p, n))])) : fs.readFileSync(p, 'utf8'));
  return {
    data: fs.readlinkSync(path.join(dir, '..data')),
    links: Object.fromEntries(visible.map((e) => [e, fs.readlinkSync(path.join(dir, e))])),
    timestamped: entries.filter((e) => /^\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d{9}$/.test(e)).length,
    content: Object.fromEntries(visible.map((e) => [e, read(path.join(dir, e))])),
  };
}

describe('the atomic writer', () => {
  it("writes the kubelet's layout, swaps ..data on a change, removes what went, and writes nothing when unchanged", async () => {
    const dir = path.join(tmp(), 'vol');
    expect(await writeAtomically(dir, new Map([['name', file('web')], ['cfg/app.conf', file('a=1', 0o600)]]))).toBe(true);
    const first = view(dir);
    expect(first).toMatchObject({ links: { cfg: '..data/cfg', name: '..data/name' }, timestamped: 1, content: { cfg: { 'app.conf': 'a=1' }, name: 'web' } });
    expect(fs.statSync(path.join(dir, 'cfg/app.conf')).mode & 0o7777).toBe(0o600);
    expect(await writeAtomically(dir, new Map([['name', file('web')], ['cfg/app.conf', file('a=1', 0o600)]]))).toBe(false);
    expect(view(dir).data).toBe(first.data);
    // A changed payload: a new directory swapped in, `name` gone, `labels` new, the old directory removed.
    expect(await writeAtomically(dir, new Map([['labels', file('app="web"\n')], ['cfg/app.conf', file('a=2', 0o600)]]))).toBe(true);
    const second = view(dir);
    expect(second.data).not.toBe(first.data);
    expect(second).toMatchObject({ links: { cfg: '..data/cfg', labels: '..data/labels' }, timestamped: 1, content: { cfg: { 'app.conf': 'a=2' }, labels: 'app="web"\n' } });
    expect(fs.existsSync(path.join(dir, first.data))).toBe(false);
    // A mode change alone is a change.
    expect(await writeAtomically(dir, new Map([['labels', file('app="web"\n', 0o400)], ['cfg/app.conf', file('a=2', 0o600)]]))).toBe(true);
  });

  it('refuses the paths the kubelet refuses, naming them, and writes nothing', async () => {
    const dir = path.join(tmp(), 'vol');
    for (const [p, why] of [['/etc/passwd', 'must be a relative path'], ['a/../../x', 'must not contain ".."'], ['..data', 'must not start with ".."'], ['a//b', 'must not contain empty or "." elements'], ['x'.repeat(256), 'each path element must be at most 255 characters']] as const) {
      expect(payloadPathProblem(p)).toBe(why);
      await expect(writeAtomically(dir, new Map([[p, file('x')]]))).rejects.toThrow(`path ${JSON.stringify(p)}: ${why}`);
    }
    expect(fs.existsSync(dir)).toBe(false);
  });
});

describe('downwardAPI and projected volumes', () => {
  const pod: Pod = {
    metadata: { name: 'web', namespace: 'shop', uid: 'f6c1c4b2-2c43-4c1e-9f52-2f1d3c5b7a10', labels: { tier: 'front', app: 'web' }, annotations: { note: 'say "hi"\n\tbye é \u0007' } },
    spec: { containers: [{ name: 'app', image: 'busybox', resources: { limits: { cpu: '500m', memory: '64Mi' } } }] },
  };

  it("formats maps as the kubelet's fieldpath.FormatMap (sorted, Go %q)", () => {
    expect(goQuote('say "hi"\n\tbye é \u0007\u00ad\u{1F600}\\')).toBe('"say \\"hi\\"\\n\\tbye é \\a\\u00ad\u{1F600}\\\\"');
    expect(formatMap({ tier: 'front', app: 'web' })).toBe('app="web"\ntier="front"\n');
  });

  it('a downwardAPI volume holds the fields and resources its items name, with their modes', async () => {
    const v: Volume = {
      name: 'podinfo',
      downwardAPI: {
        defaultMode: 0o440,
        items: [
          { path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } },
          { path: 'meta/name', fieldRef: { fieldPath: 'metadata.name' }, mode: 0o400 },
          { path: 'tier', fieldRef: { fieldPath: "metadata.labels['tier']" } },
          { path: 'note', fieldRef: { fieldPath: 'metadata.annotations' } },
          { path: 'cpu_limit', resourceFieldRef: { containerName: 'app', resource: 'limits.cpu', divisor: '1m' } },
          { path: 'mem_limit', resourceFieldRef: { containerName: 'app', resource: 'limits.memory', divisor: '1Mi' } },
        ],
      },
    };
    const out = Object.fromEntries([...(await apiDataPayload(pod, v, ctx)).files].map(([p, f]) => [p, [f.data.toString(), f.mode.toString(8)]]));
    expect(out).toEqual({
      labels: ['app="web"\ntier="front"\n', '440'],
      'meta/name': ['web', '400'],
      tier: ['front', '440'],
      note: ['note="say \\"hi\\"\\n\\tbye é \\a"\n', '440'],
      cpu_limit: ['500', '440'],
      mem_limit: ['64', '440'],
    });
  });

  it('refuses what it cannot write, naming the volume, the item or source and why', async () => {
    const msg = async (v: Volume) => {
      try {
        await apiDataPayload(pod, v, ctx);
        return 'no error';
      } catch (err) {
        return `${(err as { details: { reason: string } }).details.reason}: ${(err as Error).message}`;
      }
    };
    expect(await msg({ name: 'd', downwardAPI: { items: [{ path: 'ip', fieldRef: { fieldPath: 'status.podIP' } }] } })).toBe(
      'CreateContainerConfigError: volume "d" items[0] ("ip"): fieldRef.fieldPath "status.podIP" is not supported in a downwardAPI volume (metadata.name, namespace, uid, labels, annotations)',
    );
    expect(await msg({ name: 'd', downwardAPI: { items: [{ path: 'c', resourceFieldRef: { containerName: 'nope', resource: 'limits.cpu' } }] } })).toBe(
      'CreateContainerConfigError: volume "d" items[0] ("c"): resourceFieldRef.containerName "nope" names no container of the pod',
    );
    // The ServiceAccount admission plugin's volume: without the control plane (a standalone node), the token and the CA are refused.
    const kubeApiAccess: Volume = {
      name: 'kube-api-access-x7k2p',
      projected: {
        defaultMode: 420,
        sources: [{ serviceAccountToken: { expirationSeconds: 3607, path: 'token' } }, { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } }, { downwardAPI: { items: [{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace' } }] } }],
      },
    };
    expect(await msg(kubeApiAccess)).toBe(
      "CreateContainerConfigError: volume \"kube-api-access-x7k2p\" sources[0]: serviceAccountToken (a ServiceAccount's token) is an API object, which a pod without the control plane (a static pod, a standalone node) cannot refer to (volume \"kube-api-access-x7k2p\")",
    );
    expect(await msg({ name: 'b', projected: { sources: [{ clusterTrustBundle: { path: 'b', signerName: 'x' } }] } })).toBe('CreateContainerConfigError: volume "b" sources[0]: clusterTrustBundle is not supported by nodelet (configMap, secret, downwardAPI and serviceAccountToken are)');
    // Optional configMaps and secrets are left out; the downwardAPI source is written.
    const optional: Volume = { name: 'p', projected: { sources: [{ configMap: { name: 'cfg', optional: true } }, { secret: { name: 's', optional: true } }, { downwardAPI: { items: [{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace' } }] } }] } };
    expect([...(await apiDataPayload(pod, optional, ctx)).files].map(([p, f]) => [p, f.data.toString(), f.mode])).toEqual([['namespace', 'shop', 0o644]]);
  });

  it('set up once, a volume follows the pod: new labels are written on refresh, unchanged ones write nothing', async () => {
    const root = tmp();
    const v: Volume = { name: 'podinfo', downwardAPI: { items: [{ path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } }] } };
    const withVolume = { ...pod, spec: { ...pod.spec!, volumes: [v] } };
    const { dir } = await setUpApiDataVolume(root, withVolume, v, ctx);
    expect(dir).toBe(path.join(root, 'pods', pod.metadata!.uid!, 'volumes', 'kubernetes.io~downward-api', 'podinfo'));
    const before = fs.readlinkSync(path.join(dir, '..data'));
    expect(await refreshApiDataVolumes(root, withVolume, ctx)).toEqual({ problems: [], refreshAt: Infinity });
    expect(fs.readlinkSync(path.join(dir, '..data'))).toBe(before);
    const relabelled = { ...withVolume, metadata: { ...withVolume.metadata!, labels: { app: 'web', tier: 'back' } } };
    expect(await refreshApiDataVolumes(root, relabelled, ctx)).toEqual({ problems: [], refreshAt: Infinity });
    expect(fs.readFileSync(path.join(dir, 'labels'), 'utf8')).toBe('app="web"\ntier="back"\n');
    expect(fs.readlinkSync(path.join(dir, '..data'))).not.toBe(before);
  });
});
