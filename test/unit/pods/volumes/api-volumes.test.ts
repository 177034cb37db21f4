import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Pod, Volume } from 'kubernetes-types/core/v1.js';
import { afterEach, describe, expect, it } from 'vitest';
import { parseQuantity } from '../../../../src/config/quantity.js';
import type { EventSink } from '../../../../src/events.js';
import { ApiVolumes } from '../../../../src/pods/volumes/api-volumes.js';
import type { Mounter } from '../../../../src/pods/volumes/subpath.js';
import { containerMounts } from '../../../../src/pods/volumes/volumes.js';
import { settle, VirtualClock } from '../../../helpers/clock.js';
import { FakeApiObjects } from '../../../fakes/api-objects-port.js';

const quantity = (q: string | number) => parseQuantity(String(q)).value;
const dirs: string[] = [];
/** A root dir on a tmpfs (/dev/shm), where secret and projected volumes may be written. */
const memRoot = () => {
  const d = fs.mkdtempSync(path.join('/dev/shm', 'nodelet-apivol-'));
  dirs.push(d);
  return d;
};
/** A root dir on the node's disk. */
const diskRoot = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-apivol-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

/** A mounter that records tmpfs mounts and mounts nothing. */
function recordingMounter(): Mounter & { tmpfsCalls: string[] } {
  const tmpfsCalls: string[] = [];
  return { tmpfsCalls, bind: async () => {}, unmount: async () => {}, mountPoints: async () => [], tmpfs: async (t) => void tmpfsCalls.push(t), memoryVolumes: async () => [] };
}

function recordingEvents(): EventSink & { list: string[] } {
  const list: string[] = [];
  return { list, emit: (_ref, type, reason, message) => void list.push(`${type} ${reason} ${message}`) };
}

const UID = '0b8a1c5e-7a0d-4a52-9a51-3c1f0f5e2d11';
const kubeApiAccess: Volume = {
  name: 'kube-api-access-x7k2p',
  projected: {
    defaultMode: 420,
    sources: [
      { serviceAccountToken: { expirationSeconds: 3607, path: 'token' } },
      { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
      { downwardAPI: { items: [{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace', apiVersion: 'v1' } }] } },
    ],
  },
};
const podWith = (volumes: Volume[], extra: Partial<Pod['spec']> = {}): Pod => ({
  metadata: { name: 'web', namespace: 'shop', uid: UID, labels: { app: 'web' } },
  spec: { serviceAccountName: 'builder', containers: [{ name: 'app', image: 'busybox', volumeMounts: volumes.map((v) => ({ name: v.name, mountPath: `/mnt/${v.name}` })) }], volumes, ...extra },
});

/** The layout and what a reader sees: `..data`, the links, each file's content and permission bits. */
function view(dir: string) {
  const entries = fs.readdirSync(dir).sort();
  const visible = entries.filter((e) => !e.startsWith('..'));
  return {
    data: fs.readlinkSync(path.join(dir, '..data')),
    links: Object.fromEntries(visible.map((e) => [e, fs.readlinkSync(path.join(dir, e))])),
    files: Object.fromEntries(visible.map((e) => [e, [fs.readFileSync(path.join(dir, e), 'utf8'), (fs.statSync(path.join(dir, e)).mode & 0o7777).toString(8)]])),
  };
}

function setup(root: string, o: { objects?: FakeApiObjects; mounter?: Mounter; events?: EventSink; clock?: VirtualClock } = {}) {
  const clock = o.clock ?? new VirtualClock();
  const objects = o.objects ?? new FakeApiObjects(clock);
  const volumes = new ApiVolumes({ rootDir: root, quantity, objects, clock, random: () => 0, ...(o.mounter ? { mounter: o.mounter } : {}), ...(o.events ? { events: o.events } : {}) });
  return { clock, objects, volumes };
}

describe('configMap, secret and projected volumes', () => {
  it("writes configMap and secret volumes in the kubelet's layout, with items, per-item modes and defaultMode", async () => {
    const root = memRoot();
    const { objects, volumes } = setup(root);
    objects.putConfigMap('shop', 'app-config', { 'app.conf': 'color=blue\n', 'other.conf': 'x' }, { binaryData: { 'logo.bin': Buffer.from([0, 1, 2]).toString('base64') } });
    objects.putSecret('shop', 'db', { password: 's3cret', user: 'admin' });
    const cm: Volume = { name: 'config', configMap: { name: 'app-config' } };
    const cmItems: Volume = { name: 'config-items', configMap: { name: 'app-config', defaultMode: 0o600, items: [{ key: 'app.conf', path: 'conf/app.conf', mode: 0o444 }, { key: 'other.conf', path: 'other' }] } };
    const sec: Volume = { name: 'creds', secret: { secretName: 'db', items: [{ key: 'password', path: 'pw' }] } };
    const pod = podWith([cm, cmItems, sec]);
    const mounts = await containerMounts(pod, pod.spec!.containers[0]!, root, { apiVolumes: volumes });
    const vdir = (kind: string, name: string) => path.join(root, 'pods', UID, 'volumes', kind, name);
    expect(mounts.map((m) => [m.containerPath, m.hostPath, m.readonly])).toEqual([
      ['/mnt/config', vdir('kubernetes.io~configmap', 'config'), true],
      ['/mnt/config-items', vdir('kubernetes.io~configmap', 'config-items'), true],
      ['/mnt/creds', vdir('kubernetes.io~secret', 'creds'), true],
    ]);
    const all = view(vdir('kubernetes.io~configmap', 'config'));
    expect(all.data).toMatch(/^\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d{9}$/);
    expect(all.links).toEqual({ 'app.conf': '..data/app.conf', 'logo.bin': '..data/logo.bin', 'other.conf': '..data/other.conf' });
    expect(all.files).toEqual({ 'app.conf': ['color=blue\n', '644'], 'logo.bin': ['\u0000\u0001\u0002', '644'], 'other.conf': ['x', '644'] });
    const itemsDir = vdir('kubernetes.io~configmap', 'config-items');
    expect(Object.fromEntries(['conf', 'other'].map((e) => [e, fs.readlinkSync(path.join(itemsDir, e))]))).toEqual({ conf: '..data/conf', other: '..data/other' });
    expect(fs.readFileSync(path.join(vdir('kubernetes.io~configmap', 'config-items'), 'conf/app.conf'), 'utf8')).toBe('color=blue\n');
    expect((fs.statSync(path.join(vdir('kubernetes.io~configmap', 'config-items'), 'conf/app.conf')).mode & 0o777).toString(8)).toBe('444');
    expect([fs.readFileSync(path.join(itemsDir, 'other'), 'utf8'), (fs.statSync(path.join(itemsDir, 'other')).mode & 0o777).toString(8)]).toEqual(['x', '600']);
    expect(view(vdir('kubernetes.io~secret', 'creds')).files).toEqual({ pw: ['s3cret', '644'] });
    // The pod's references are registered for the watches.
    expect(objects.registered.get(UID)).toEqual(['ConfigMap/shop/app-config', 'Secret/shop/db']);
  });

  it('the kube-api-access volume the ServiceAccount admission injects: token, ca.crt, namespace, all 0644', async () => {
    const root = memRoot();
    const { objects, volumes, clock } = setup(root);
    objects.putConfigMap('shop', 'kube-root-ca.crt', { 'ca.crt': '-----BEGIN CERTIFICATE-----\n' });
    const pod = podWith([kubeApiAccess]);
    await containerMounts(pod, pod.spec!.containers[0]!, root, { apiVolumes: volumes });
    const dir = path.join(root, 'pods', UID, 'volumes', 'kubernetes.io~projected', kubeApiAccess.name);
    expect(view(dir).files).toEqual({ 'ca.crt': ['-----BEGIN CERTIFICATE-----\n', '644'], namespace: ['shop', '644'], token: [`token-1-builder-${UID}`, '644'] });
    // The TokenRequest: the pod's service account, the API server's audience (none given), its lifetime, bound to the pod.
    expect(objects.tokenRequests).toEqual([{ namespace: 'shop', serviceAccount: 'builder', spec: { audiences: [], expirationSeconds: 3607, boundPod: { name: 'web', uid: UID } }, at: clock.t }]);
  });

  it('a missing object or key is a FailedMount naming the volume and the object (the container waits), optional ones are left out', async () => {
    const root = memRoot();
    const events = recordingEvents();
    const { objects, volumes } = setup(root, { events });
    const fail = async (v: Volume) => {
      try {
        await volumes.setUp(podWith([v]), v);
        return 'no error';
      } catch (err) {
        return `${(err as { details: { reason: string } }).details.reason}: ${(err as Error).message}`;
      }
    };
    expect(await fail({ name: 'config', configMap: { name: 'nope' } })).toBe('ContainerCreating: MountVolume.SetUp failed for volume "config" : configmap "nope" not found');
    expect(await fail({ name: 'creds', secret: { secretName: 'nope' } })).toBe('ContainerCreating: MountVolume.SetUp failed for volume "creds" : secret "nope" not found');
    objects.putConfigMap('shop', 'cfg', { a: '1' });
    objects.putSecret('shop', 's', { a: '1' });
    expect(await fail({ name: 'config', configMap: { name: 'cfg', items: [{ key: 'b', path: 'b' }] } })).toBe('ContainerCreating: MountVolume.SetUp failed for volume "config" : configmap references non-existent config key: b');
    expect(await fail({ name: 'creds', secret: { secretName: 's', items: [{ key: 'b', path: 'b' }] } })).toBe('ContainerCreating: MountVolume.SetUp failed for volume "creds" : references non-existent secret key: b');
    expect(await fail({ name: 'p', projected: { sources: [{ configMap: { name: 'x' } }, { secret: { name: 'y' } }] } })).toBe('ContainerCreating: MountVolume.SetUp failed for volume "p" : [configmap "x" not found, secret "y" not found]');
    objects.down = true;
    expect(await fail({ name: 'config', configMap: { name: 'cfg' } })).toBe('ContainerCreating: MountVolume.SetUp failed for volume "config" : connect ECONNREFUSED 127.0.0.1:6443');
    expect(events.list[0]).toBe('Warning FailedMount MountVolume.SetUp failed for volume "config" : configmap "nope" not found');
    expect(events.list).toHaveLength(6);
    objects.down = false;
    // Optional: a missing object gives an empty volume, a missing key is left out.
    expect(await fail({ name: 'config', configMap: { name: 'nope', optional: true } })).toBe('no error');
    expect(await fail({ name: 'creds', secret: { secretName: 's', optional: true, items: [{ key: 'a', path: 'a' }, { key: 'b', path: 'b' }] } })).toBe('no error');
    expect(fs.readdirSync(path.join(root, 'pods', UID, 'volumes', 'kubernetes.io~secret', 'creds')).filter((e) => !e.startsWith('..'))).toEqual(['a']);
    // A bad mode is named.
    expect(await fail({ name: 'config', configMap: { name: 'cfg', defaultMode: 0o1777 } })).toBe('CreateContainerConfigError: volume "config": mode 1023 must be an integer between 0 and 0777 (511)');
  });

  it('without the control plane, a volume that shows an API object is refused naming the volume and the object', async () => {
    const volumes = new ApiVolumes({ rootDir: memRoot(), quantity });
    const v: Volume = { name: 'config', configMap: { name: 'cfg' } };
    await expect(volumes.setUp(podWith([v]), v)).rejects.toThrow('volume "config": configMap "cfg" is an API object, which a pod without the control plane (a static pod, a standalone node) cannot refer to (volume "config")');
  });

  it('secret and projected volumes are written only on a tmpfs: mounted first, and never onto the disk', async () => {
    const root = diskRoot();
    const mounter = recordingMounter();
    const { objects, volumes } = setup(root, { mounter });
    objects.putSecret('shop', 'db', { password: 's3cret' });
    const v: Volume = { name: 'creds', secret: { secretName: 'db' } };
    const dir = path.join(root, 'pods', UID, 'volumes', 'kubernetes.io~secret', 'creds');
    // The mounter "mounted" nothing: the directory is still on the disk, and nothing is written there.
    await expect(volumes.setUp(podWith([v]), v)).rejects.toThrow(`volume "creds": ${dir} is not a tmpfs after mounting one; nothing written`);
    expect(mounter.tmpfsCalls).toEqual([dir]);
    expect(fs.readdirSync(dir)).toEqual([]);
    // A configMap volume stays on the disk, as the kubelet's.
    objects.putConfigMap('shop', 'cfg', { a: '1' });
    const cm: Volume = { name: 'config', configMap: { name: 'cfg' } };
    await volumes.setUp(podWith([cm]), cm);
    expect(mounter.tmpfsCalls).toHaveLength(1);
  });

  it("fsGroup: the files get the group, group-readable (read-only volumes: the kubelet's roMask)", async () => {
    const root = memRoot();
    const { objects, volumes } = setup(root);
    objects.putSecret('shop', 'db', { password: 's3cret' });
    const v: Volume = { name: 'creds', secret: { secretName: 'db', defaultMode: 0o400 } };
    await volumes.setUp(podWith([v], { securityContext: { fsGroup: 2345 } }), v);
    const file = path.join(root, 'pods', UID, 'volumes', 'kubernetes.io~secret', 'creds', 'password');
    const st = fs.statSync(file);
    expect([st.gid, (st.mode & 0o777).toString(8)]).toEqual([2345, '440']);
    // A projected token: 0600 with an fsGroup, then group-readable (0640), as the kubelet's.
    objects.putConfigMap('shop', 'kube-root-ca.crt', { 'ca.crt': 'CA' });
    await volumes.setUp(podWith([kubeApiAccess], { securityContext: { fsGroup: 2345 } }), kubeApiAccess);
    const dir = path.join(root, 'pods', UID, 'volumes', 'kubernetes.io~projected', kubeApiAccess.name);
    expect(['token', 'ca.crt'].map((f) => (fs.statSync(path.join(dir, f)).mode & 0o777).toString(8))).toEqual(['640', '644']);
  });
});

describe('updates of running pods', () => {
  it('an edited ConfigMap is rewritten at once into the volumes that show it (no sync needed); an unchanged one writes nothing', async () => {
    const root = memRoot();
    const { objects, volumes } = setup(root);
    objects.putConfigMap('shop', 'cfg', { 'app.conf': 'v1' });
    objects.putSecret('shop', 'db', { pw: 'a' });
    const cm: Volume = { name: 'config', configMap: { name: 'cfg' } };
    const sec: Volume = { name: 'creds', secret: { secretName: 'db' } };
    const pod = podWith([cm, sec]);
    await volumes.setUp(pod, cm);
    await volumes.setUp(pod, sec);
    const cmDir = path.join(root, 'pods', UID, 'volumes', 'kubernetes.io~configmap', 'config');
    const secDir = path.join(root, 'pods', UID, 'volumes', 'kubernetes.io~secret', 'creds');
    const before = view(cmDir).data;
    const secBefore = view(secDir).data;
    objects.putConfigMap('shop', 'cfg', { 'app.conf': 'v2', extra: 'e' });
    await volumes.refresh(pod, () => false); // waits for the pod's write chain
    await settle();
    expect(view(cmDir).files).toEqual({ 'app.conf': ['v2', '644'], extra: ['e', '644'] });
    expect(view(cmDir).data).not.toBe(before);
    // The secret's volume was not touched.
    expect(view(secDir).data).toBe(secBefore);
    // A sync's refresh with nothing changed writes nothing.
    const now = view(cmDir).data;
    await volumes.refresh(pod);
    expect(view(cmDir).data).toBe(now);
  });

  it('a control plane that is down, or an object that went, leaves the content as it is; the next refresh writes again', async () => {
    const root = memRoot();
    const { objects, volumes } = setup(root);
    objects.putConfigMap('shop', 'kube-root-ca.crt', { 'ca.crt': 'CA' });
    objects.putConfigMap('shop', 'cfg', { a: '1' });
    const cm: Volume = { name: 'config', configMap: { name: 'cfg' } };
    const pod = podWith([cm, kubeApiAccess]);
    await volumes.setUp(pod, cm);
    await volumes.setUp(pod, kubeApiAccess);
    const cmDir = path.join(root, 'pods', UID, 'volumes', 'kubernetes.io~configmap', 'config');
    const pDir = path.join(root, 'pods', UID, 'volumes', 'kubernetes.io~projected', kubeApiAccess.name);
    const was = [view(cmDir), view(pDir)];
    objects.down = true;
    await volumes.refresh({ ...pod, metadata: { ...pod.metadata, labels: { app: 'other' } } });
    expect([view(cmDir), view(pDir)]).toEqual(was);
    objects.down = false;
    objects.configMaps.delete('shop/cfg');
    await volumes.refresh(pod);
    expect(view(cmDir)).toEqual(was[0]);
    objects.putConfigMap('shop', 'cfg', { a: '2' });
    await volumes.refresh(pod);
    expect(view(cmDir).files).toEqual({ a: ['2', '644'] });
  });

  it('a pod that is gone is forgotten: its references and tokens go', async () => {
    const root = memRoot();
    const { objects, volumes } = setup(root);
    objects.putConfigMap('shop', 'kube-root-ca.crt', { 'ca.crt': 'CA' });
    const pod = podWith([kubeApiAccess]);
    await volumes.setUp(pod, kubeApiAccess);
    expect([volumes.podCount, volumes.tokens!.size, objects.registered.size]).toEqual([1, 1, 1]);
    volumes.forget(UID);
    expect([volumes.podCount, volumes.tokens!.size, objects.registered.size]).toEqual([0, 0, 0]);
  });
});
