import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Container, Pod, Volume } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { containerMounts, emptyDirPath, removePodDir } from '../../../src/pods/volumes.js';
import { rejection } from '../../helpers/errors.js';

let tmp: string;
let root: string;

beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-volumes-'));
  root = path.join(tmp, 'root');
});
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

const pod = (volumes: Volume[]): Pod => ({ metadata: { name: 'p', namespace: 'default', uid: 'uid-1' }, spec: { volumes, containers: [] } });
const ctr = (volumeMounts: Container['volumeMounts']): Container => ({ name: 'app', image: 'busybox', volumeMounts });

describe('containerMounts', () => {
  it('hostPath and emptyDir become CRI mounts with readOnly, subPath and propagation; emptyDir lives under the pod dir, writable by all', async () => {
    const host = path.join(tmp, 'data');
    fs.mkdirSync(host);
    const mounts = await containerMounts(
      pod([
        { name: 'data', hostPath: { path: host, type: 'Directory' } },
        { name: 'scratch', emptyDir: {} },
      ]),
      ctr([
        { name: 'data', mountPath: '/data', readOnly: true },
        { name: 'scratch', mountPath: '/scratch', mountPropagation: 'HostToContainer' },
        { name: 'scratch', mountPath: '/logs', subPath: 'logs/app' },
      ]),
      root,
    );
    const scratch = emptyDirPath(root, 'uid-1', 'scratch');
    expect(scratch).toBe(path.join(root, 'pods/uid-1/volumes/kubernetes.io~empty-dir/scratch'));
    expect(mounts).toEqual([
      { containerPath: '/data', hostPath: host, readonly: true, selinuxRelabel: false, propagation: 'PROPAGATION_PRIVATE' },
      { containerPath: '/scratch', hostPath: scratch, readonly: false, selinuxRelabel: false, propagation: 'PROPAGATION_HOST_TO_CONTAINER' },
      { containerPath: '/logs', hostPath: path.join(scratch, 'logs/app'), readonly: false, selinuxRelabel: false, propagation: 'PROPAGATION_PRIVATE' },
    ]);
    expect(fs.statSync(scratch).mode & 0o777).toBe(0o777);
    expect(fs.statSync(path.join(scratch, 'logs/app')).isDirectory()).toBe(true);
    await removePodDir(root, 'uid-1');
    expect(fs.existsSync(path.join(root, 'pods/uid-1'))).toBe(false);
    expect(fs.existsSync(host)).toBe(true);
  });

  it('hostPath types: OrCreate creates, the others check what is there', async () => {
    const dir = path.join(tmp, 'made/dir');
    const file = path.join(tmp, 'made/sub/file');
    await containerMounts(pod([{ name: 'd', hostPath: { path: dir, type: 'DirectoryOrCreate' } }, { name: 'f', hostPath: { path: file, type: 'FileOrCreate' } }]), ctr([{ name: 'd', mountPath: '/d' }, { name: 'f', mountPath: '/f' }]), root);
    expect(fs.statSync(dir).isDirectory()).toBe(true);
    expect(fs.statSync(file).isFile()).toBe(true);
    const sock = path.join(tmp, 's.sock');
    const srv = net.createServer().listen(sock);
    await new Promise((r) => srv.once('listening', r));
    try {
      await containerMounts(pod([{ name: 's', hostPath: { path: sock, type: 'Socket' } }, { name: 'n', hostPath: { path: '/dev/null', type: 'CharDevice' } }]), ctr([{ name: 's', mountPath: '/s' }, { name: 'n', mountPath: '/n' }]), root);
    } finally {
      srv.close();
    }
    const cases: [string, string, RegExp][] = [
      [path.join(tmp, 'missing'), 'Directory', /hostPath type check failed: .*\/missing does not exist/],
      [file, 'Directory', /hostPath type check failed: .*\/made\/sub\/file is not a directory/],
      [dir, 'File', /is not a file/],
      [dir, 'FileOrCreate', /is not a file/],
      [file, 'DirectoryOrCreate', /is not a directory/],
      [dir, 'Socket', /is not a socket file/],
      [dir, 'Pipe', /unknown hostPath type "Pipe"/],
      ['relative/dir', '', /relative\/dir is not an absolute path/],
    ];
    for (const [p, type, re] of cases) {
      const err = await rejection(containerMounts(pod([{ name: 'v', hostPath: { path: p, type } }]), ctr([{ name: 'v', mountPath: '/v' }]), root));
      expect(err).toBeInstanceOf(NodeletError);
      expect(err.message).toMatch(/^volume "v": /);
      expect(err.message).toMatch(re);
      expect((err as NodeletError).details.reason).toBe('CreateContainerConfigError');
    }
  });

  it('refuses, naming the volume: a mount of no volume, volume types it cannot set up, Memory emptyDir, an escaping subPath', async () => {
    const refuse = async (volumes: Volume[], mounts: Container['volumeMounts']) => (await rejection(containerMounts(pod(volumes), ctr(mounts), root))).message;
    expect(await refuse([], [{ name: 'x', mountPath: '/x' }])).toBe('volumeMount "x" of container app: the pod has no volume named "x"');
    expect(await refuse([{ name: 'cfg', configMap: { name: 'app-config' } }], [{ name: 'cfg', mountPath: '/cfg' }])).toBe('volume "cfg": type configMap is not supported by nodelet (hostPath and emptyDir are)');
    expect(await refuse([{ name: 'm', emptyDir: { medium: 'Memory' } }], [{ name: 'm', mountPath: '/m' }])).toBe('volume "m": emptyDir medium Memory is not supported by nodelet');
    expect(await refuse([{ name: 'e', emptyDir: {} }], [{ name: 'e', mountPath: '/e', subPath: '../../etc' }])).toBe('volumeMount "e" of container app: subPath "../../etc" must be a relative path without ".."');
  });
});
