import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Container, Pod, Volume } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { parseMountInfo, subPathComponents, type Mounter, MEMORY_VOLUME_SOURCE, tmpfsMountsOf } from '../../../src/pods/volumes/subpath.js';
import { containerMounts, emptyDirPath, podDir, removePodDir, removePodLogDirs } from '../../../src/pods/volumes/volumes.js';
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

/**
 * The mount table in memory: a bind records what its source resolved to while the
 * descriptor was open (the inode nodelet checked), as the kernel would bind it.
 */
class FakeMounter implements Mounter {
  readonly points: string[] = [];
  readonly binds = new Map<string, string>();
  readonly calls: string[] = [];
  async bind(source: string, target: string) {
    expect(source).toMatch(new RegExp(`^/proc/${process.pid}/fd/\\d+$`));
    this.binds.set(target, fs.readlinkSync(source));
    this.points.push(target);
    this.calls.push(`bind ${target}`);
  }
  async unmount(target: string) {
    const i = this.points.lastIndexOf(target);
    if (i < 0) throw new Error(`umount: ${target}: not mounted`);
    // Unmounted while it still exists: nothing was removed through the bind.
    expect(fs.existsSync(target)).toBe(true);
    this.points.splice(i, 1);
    this.calls.push(`umount ${target}`);
  }
  async mountPoints() {
    return [...this.points];
  }
  async tmpfs(target: string, size?: number) {
    this.points.push(target);
    this.tmpfsPoints.push(target);
    this.calls.push(`tmpfs ${target}${size === undefined ? '' : ` size=${size}`}`);
  }
  readonly tmpfsPoints: string[] = [];
  async memoryVolumes() {
    return this.tmpfsPoints.filter((p) => this.points.includes(p));
  }
}

const uidSeq = (() => {
  let n = 0;
  return () => `uid-${++n}`;
})();
const podU = (uid: string, volumes: Volume[]): Pod => ({ metadata: { name: 'p', namespace: 'default', uid }, spec: { volumes, containers: [] } });

describe('tmpfsMountsOf', () => {
  it("finds the tmpfs mounts of one source in a mountinfo text, escapes decoded; a container's own mounts are not it", () => {
    const text = [
      '36 25 0:45 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache rw,relatime shared:20 - tmpfs nodelet-memory-volume rw,size=16384k,mode=777',
      '37 25 0:46 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/with\\040space rw - tmpfs nodelet-memory-volume rw',
      '38 36 0:47 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache/inner rw - tmpfs tmpfs rw',
      '39 25 8:1 / /data rw - ext4 /dev/sda1 rw',
    ].join('\n');
    expect(tmpfsMountsOf(text, MEMORY_VOLUME_SOURCE)).toEqual(['/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache', '/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/with space']);
  });
});

describe('containerMounts', () => {
  it('hostPath and emptyDir become CRI mounts with readOnly, subPath and propagation; emptyDir lives under the pod dir, writable by all', async () => {
    const host = path.join(tmp, 'data');
    fs.mkdirSync(host);
    const mounter = new FakeMounter();
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
      { mounter },
    );
    const scratch = emptyDirPath(root, 'uid-1', 'scratch');
    expect(scratch).toBe(path.join(root, 'pods/uid-1/volumes/kubernetes.io~empty-dir/scratch'));
    // The subPath reaches the runtime as nodelet's own bind target, the kubelet's layout.
    const target = path.join(root, 'pods/uid-1/volume-subpaths/scratch/app/2');
    expect(mounts).toEqual([
      { containerPath: '/data', hostPath: host, readonly: true, selinuxRelabel: false, propagation: 'PROPAGATION_PRIVATE' },
      { containerPath: '/scratch', hostPath: scratch, readonly: false, selinuxRelabel: false, propagation: 'PROPAGATION_HOST_TO_CONTAINER' },
      { containerPath: '/logs', hostPath: target, readonly: false, selinuxRelabel: false, propagation: 'PROPAGATION_PRIVATE' },
    ]);
    expect(mounter.binds.get(target)).toBe(path.join(scratch, 'logs/app'));
    expect(fs.statSync(target).isDirectory()).toBe(true);
    expect(fs.statSync(scratch).mode & 0o777).toBe(0o777);
    expect(fs.statSync(path.join(scratch, 'logs/app')).mode & 0o777).toBe(0o755);
    await removePodDir(root, 'uid-1', mounter);
    expect(mounter.calls).toEqual([`bind ${target}`, `umount ${target}`]);
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

  it("a Memory emptyDir is a tmpfs of the smaller of sizeLimit and the pod's memory limit, mounted once, unmounted before the pod's directory goes", async () => {
    const mounter = new FakeMounter();
    const uid = uidSeq();
    const p = (volumes: Volume[], limits: (string | undefined)[]): Pod => ({
      metadata: { name: 'p', namespace: 'default', uid },
      spec: { volumes, containers: limits.map((l, i) => ({ name: `c${i}`, image: 'busybox', ...(l ? { resources: { limits: { memory: l } } } : {}) })) },
    });
    const mem = (sizeLimit?: string): Volume => ({ name: 'm', emptyDir: { medium: 'Memory', ...(sizeLimit ? { sizeLimit } : {}) } });
    const dir = path.join(root, 'pods', uid, 'volumes', 'kubernetes.io~empty-dir', 'm');
    const [m] = await containerMounts(p([mem('64Mi')], ['128Mi', '128Mi']), ctr([{ name: 'm', mountPath: '/m' }]), root, { mounter });
    expect(m!.hostPath).toBe(dir);
    // Mounted: the next container of the pod finds it and mounts nothing.
    await containerMounts(p([mem('64Mi')], ['128Mi', '128Mi']), ctr([{ name: 'm', mountPath: '/m' }]), root, { mounter });
    expect(mounter.calls).toEqual([`tmpfs ${dir} size=67108864`]);
    await removePodDir(root, uid, mounter);
    expect(mounter.calls).toEqual([`tmpfs ${dir} size=67108864`, `umount ${dir}`]);
    expect(fs.existsSync(dir)).toBe(false);
    // No sizeLimit: the pod's limit (both containers have one); a container without one: the kernel's default.
    const sizes: string[] = [];
    for (const [v, limits] of [[mem(), ['100Mi', '28Mi']], [mem('1Gi'), ['100Mi', '28Mi']], [mem(), ['100Mi', undefined]]] as const) {
      const mm = new FakeMounter();
      await containerMounts(p([v], [...limits]), ctr([{ name: 'm', mountPath: '/m' }]), root, { mounter: mm });
      sizes.push(mm.calls[0]!.replace(`tmpfs ${dir}`, '').trim() || 'default');
      await removePodDir(root, uid, mm);
    }
    expect(sizes).toEqual(['size=134217728', 'size=134217728', 'default']);
  });

  it('refuses, naming the volume: a mount of no volume, volume types it cannot set up, HugePages emptyDir, an escaping subPath', async () => {
    const refuse = async (volumes: Volume[], mounts: Container['volumeMounts']) => (await rejection(containerMounts(pod(volumes), ctr(mounts), root))).message;
    expect(await refuse([], [{ name: 'x', mountPath: '/x' }])).toBe('volumeMount "x" of container app: the pod has no volume named "x"');
    // Without the control plane (this caller gives no API objects), a configMap volume is refused naming it.
    expect(await refuse([{ name: 'cfg', configMap: { name: 'app-config' } }], [{ name: 'cfg', mountPath: '/cfg' }])).toBe('volume "cfg": configMap "app-config" is an API object, which a pod without the control plane (a static pod, a standalone node) cannot refer to (volume "cfg")');
    expect(await refuse([{ name: 'data', persistentVolumeClaim: { claimName: 'pvc' } }], [{ name: 'data', mountPath: '/data' }])).toBe('volume "data": type persistentVolumeClaim is not supported by nodelet (hostPath, emptyDir, configMap, secret, downwardAPI and projected are)');
    expect(await refuse([{ name: 'm', emptyDir: { medium: 'HugePages-2Mi' } }], [{ name: 'm', mountPath: '/m' }])).toBe('volume "m": emptyDir medium "HugePages-2Mi" is not supported by nodelet (the node\'s disk, or Memory)');
    expect(await refuse([{ name: 'e', emptyDir: {} }], [{ name: 'e', mountPath: '/e', subPath: '../../etc' }])).toBe('volumeMount "e" of container app: subPath "../../etc" must not contain a ".." element');
    expect(await refuse([{ name: 'e', emptyDir: {} }], [{ name: 'e', mountPath: 'e' }])).toBe('volumeMount "e" of container app: mountPath "e" must be an absolute path');
    expect(await refuse([{ name: 'e', emptyDir: {} }], [{ name: 'e', mountPath: '/e', subPath: 'a', subPathExpr: 'b' }])).toBe('volumeMount "e" of container app: subPath and subPathExpr are mutually exclusive');
  });
});

describe('volume names and UIDs never become paths', () => {
  it('an emptyDir whose name is a path is refused before anything on the host is touched', async () => {
    const victim = path.join(tmp, 'victim-names');
    fs.mkdirSync(victim, { mode: 0o700 });
    fs.chmodSync(victim, 0o700);
    const evil = `../../../../../../../../../../..${victim}`;
    const err = await rejection(containerMounts(pod([{ name: evil, emptyDir: {} }]), ctr([{ name: evil, mountPath: '/v' }]), root, { mounter: new FakeMounter() }));
    expect(err.message).toBe(`volume ${JSON.stringify(evil)}: not a valid volume name (a DNS-1123 label)`);
    expect(err.details.reason).toBe('CreateContainerConfigError');
    expect(fs.statSync(victim).mode & 0o777).toBe(0o700);
    expect(() => emptyDirPath(root, 'uid-1', '..')).toThrow(/not a valid volume name/);
    expect(() => emptyDirPath(root, 'uid-1', 'a'.repeat(64))).toThrow(/not a valid volume name/);
    expect(() => podDir(root, '../../etc')).toThrow(/pod UID "..\/..\/etc" is not a valid UID/);
    const badUid: Pod = { metadata: { name: 'p', uid: '../x' }, spec: { volumes: [{ name: 'v', emptyDir: {} }], containers: [] } };
    expect((await rejection(containerMounts(badUid, ctr([{ name: 'v', mountPath: '/v' }]), root))).message).toMatch(/pod UID "..\/x" is not a valid UID/);
  });
});

describe('subPath never leaves its volume', () => {
  function setup(uid = uidSeq()) {
    const mounter = new FakeMounter();
    const victim = path.join(tmp, `victim-${uid}`);
    fs.mkdirSync(path.join(victim, 'etc'), { recursive: true });
    fs.writeFileSync(path.join(victim, 'etc/secret'), 'host secret');
    const p = podU(uid, [{ name: 'v', emptyDir: {} }]);
    const volume = emptyDirPath(root, uid, 'v');
    fs.mkdirSync(volume, { recursive: true });
    const mountsOf = (vm: NonNullable<Container['volumeMounts']>[number], env?: Map<string, string>) => containerMounts(p, ctr([vm]), root, { mounter, ...(env ? { env } : {}) });
    return { uid, mounter, victim, volume, mountsOf };
  }

  it.each([
    ['a link as the first element', 'escape/etc', '"escape" is a symbolic link'],
    ['a link as the last element', 'escape', '"escape" is a symbolic link'],
    ['a link deeper down', 'dir/inner/etc/new', '"dir/inner" is a symbolic link'],
    ['a missing directory below a link', 'escape/made/by/nodelet', '"escape" is a symbolic link'],
  ])('%s is refused, naming the mount and the subPath; nothing is created or bound on the host', async (_n, subPath, why) => {
    const { mounter, victim, volume, mountsOf } = setup();
    fs.symlinkSync(victim, path.join(volume, 'escape'));
    fs.mkdirSync(path.join(volume, 'dir'));
    fs.symlinkSync(victim, path.join(volume, 'dir/inner'));
    const err = await rejection(mountsOf({ name: 'v', mountPath: '/host', subPath }));
    expect(err.message).toContain(`volumeMount "v" of container app: subPath ${JSON.stringify(subPath)} is refused: ${why}`);
    expect(err.details.reason).toBe('CreateContainerConfigError');
    expect(fs.readdirSync(victim)).toEqual(['etc']);
    expect(fs.readdirSync(path.join(victim, 'etc'))).toEqual(['secret']);
    expect(mounter.points).toEqual([]);
  });

  it('a file where a directory is needed is refused; a file as the last element is bound onto a file', async () => {
    const { mounter, volume, mountsOf, uid } = setup();
    fs.writeFileSync(path.join(volume, 'conf'), 'x=1');
    expect((await rejection(mountsOf({ name: 'v', mountPath: '/c', subPath: 'conf/deeper' }))).message).toContain('"conf" is not a directory');
    const [m] = await mountsOf({ name: 'v', mountPath: '/c', subPath: 'conf' });
    expect(fs.statSync(m!.hostPath).isFile()).toBe(true);
    expect(mounter.binds.get(m!.hostPath)).toBe(path.join(volume, 'conf'));
    await removePodDir(root, uid, mounter);
    expect(mounter.points).toEqual([]);
    expect(fs.existsSync(podDir(root, uid))).toBe(false);
  });

  it('every creation binds again: a stale bind is unmounted first, and the target follows the type of what it binds', async () => {
    const { mounter, volume, mountsOf } = setup();
    const vm = { name: 'v', mountPath: '/d', subPath: 'd' };
    const [first] = await mountsOf(vm);
    expect(mounter.binds.get(first!.hostPath)).toBe(path.join(volume, 'd'));
    // The container replaced its directory with a file; then with a link: the next creation sees each.
    fs.rmdirSync(path.join(volume, 'd'));
    fs.writeFileSync(path.join(volume, 'd'), 'file now');
    const [second] = await mountsOf(vm);
    expect(second!.hostPath).toBe(first!.hostPath);
    expect(fs.statSync(second!.hostPath).isFile()).toBe(true);
    expect(mounter.points).toEqual([second!.hostPath]);
    fs.rmSync(path.join(volume, 'd'));
    fs.symlinkSync('/', path.join(volume, 'd'));
    expect((await rejection(mountsOf(vm))).message).toContain('"d" is a symbolic link');
    // The stale bind went down before the refusal: the container gets nothing from the old one.
    expect(mounter.points).toEqual([]);
  });

  it('subPathExpr expands $(VAR) from the container environment, with the same checks', async () => {
    const { mounter, volume, mountsOf } = setup();
    const env = new Map([
      ['POD', 'web-1'],
      ['UP', '..'],
    ]);
    const [m] = await mountsOf({ name: 'v', mountPath: '/logs', subPathExpr: 'logs/$(POD)' }, env);
    expect(mounter.binds.get(m!.hostPath)).toBe(path.join(volume, 'logs/web-1'));
    expect((await rejection(mountsOf({ name: 'v', mountPath: '/x', subPathExpr: '$(UP)/$(UP)' }, env))).message).toContain('subPath "../.." must not contain a ".." element');
    // Expanded to nothing: the whole volume, as the kubelet.
    const [whole] = await mountsOf({ name: 'v', mountPath: '/all', subPathExpr: '$(EMPTY)' }, new Map([['EMPTY', '']]));
    expect(whole!.hostPath).toBe(volume);
    // The expansion stops at PATH_MAX: a doubling reference is refused, naming the mount, and nothing is bound.
    const binds = mounter.binds.size;
    const wide = new Map([['W', 'd/'.repeat(1500)]]);
    expect((await rejection(mountsOf({ name: 'v', mountPath: '/w', subPathExpr: '$(W)$(W)' }, wide))).message).toBe('volumeMount "v" of container app: subPathExpr would expand past 4096 bytes (PATH_MAX)');
    expect(mounter.binds.size).toBe(binds);
  });

  it('removePodDir never removes through a mount: a mount it did not make stops it, and the files stay', async () => {
    const { mounter, uid, volume } = setup();
    fs.writeFileSync(path.join(volume, 'keep'), 'data');
    mounter.points.push(volume); // e.g. a Bidirectional mount a privileged container made
    const err = await rejection(removePodDir(root, uid, mounter));
    expect(err.message).toBe(`will not remove ${podDir(root, uid)}: ${volume} is a mount point`);
    expect(fs.readFileSync(path.join(volume, 'keep'), 'utf8')).toBe('data');
    mounter.points.length = 0;
    await removePodDir(root, uid, mounter);
    expect(fs.existsSync(podDir(root, uid))).toBe(false);
    await removePodDir(root, uid, mounter); // gone already: no error
  });

  it('removes links in the pod dir without following them, the pod dir itself included', async () => {
    const { mounter, uid, volume, victim } = setup();
    fs.symlinkSync(victim, path.join(volume, 'link'));
    await removePodDir(root, uid, mounter);
    expect(fs.readFileSync(path.join(victim, 'etc/secret'), 'utf8')).toBe('host secret');
    fs.symlinkSync(victim, podDir(root, uid));
    await removePodDir(root, uid, mounter);
    expect(fs.existsSync(podDir(root, uid))).toBe(false);
    expect(fs.readFileSync(path.join(victim, 'etc/secret'), 'utf8')).toBe('host secret');
  });
});

describe('removePodLogDirs', () => {
  it('removes <namespace>_<name>_<uid> of that UID only', async () => {
    const logs = path.join(tmp, 'logs');
    for (const d of ['default_web_uid-a', 'kube-system_dns.x_uid-a', 'default_web_uid-b', 'weird_uid-a', 'a_b_c_uid-a']) fs.mkdirSync(path.join(logs, d, 'main'), { recursive: true });
    fs.writeFileSync(path.join(logs, 'default_web_uid-a/main/0.log'), 'log');
    await removePodLogDirs(logs, 'uid-a', new FakeMounter());
    expect(fs.readdirSync(logs).sort()).toEqual(['a_b_c_uid-a', 'default_web_uid-b', 'weird_uid-a']);
    // A link named like a log directory is removed as a link: what it points to stays.
    const victim = path.join(tmp, 'victim-logs');
    fs.mkdirSync(victim);
    fs.writeFileSync(path.join(victim, 'keep'), 'host');
    fs.symlinkSync(victim, path.join(logs, 'default_web_uid-c'));
    await removePodLogDirs(logs, 'uid-c', new FakeMounter());
    expect(fs.readdirSync(victim)).toEqual(['keep']);
    await removePodLogDirs(logs, '..', new FakeMounter());
    await removePodLogDirs(path.join(tmp, 'no-logs'), 'uid-a', new FakeMounter());
    expect(fs.readdirSync(logs).length).toBe(3);
  });
});

describe('subPath parsing and the mount table', () => {
  it.each([
    ['a', ['a']],
    ['a/b c/d', ['a', 'b c', 'd']],
    ['..a/b..', ['..a', 'b..']],
  ])('%s is %j', (s, parts) => expect(subPathComponents(s)).toEqual(parts));

  it.each([
    ['/etc', 'must be a relative path'],
    ['a/../b', 'must not contain a ".." element'],
    ['./a', 'must not contain a "." element'],
    ['a//b', 'must not contain an empty path element'],
    ['a/', 'must not contain an empty path element'],
    ['a\0b', 'must not contain a NUL character'],
  ])('%j is refused: %s', (s, why) => expect(() => subPathComponents(s.replace('\\0', '\0'))).toThrow(why));

  it('reads mount points from mountinfo, decoding its octal escapes', () => {
    const text = [
      '22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw',
      '41 22 254:0 /tmp/a /var/lib/kubelet/pods/u/volume-subpaths/v/c/0 rw - ext4 /dev/vda rw',
      '42 22 0:5 / /mnt/with\\040space\\011tab rw - tmpfs tmpfs rw',
      '',
    ].join('\n');
    expect(parseMountInfo(text)).toEqual(['/', '/var/lib/kubelet/pods/u/volume-subpaths/v/c/0', '/mnt/with space\ttab']);
  });
});
