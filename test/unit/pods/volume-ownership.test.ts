import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { needsOwnership, setVolumeOwnership } from '../../../src/pods/volumes/volume-ownership.js';
import { tempDir } from '../../helpers/nodelet.js';

// chown to another group needs root (the node agent runs as root).
const asRoot = process.getuid?.() === 0;

let root: string;
beforeEach(() => {
  root = tempDir('nodelet-owner-');
});
afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

const modeGid = (p: string) => {
  const st = fs.lstatSync(p);
  return `${(st.mode & 0o7777).toString(8)} ${st.gid}`;
};

describe.runIf(asRoot)('setVolumeOwnership (the kubelet SetVolumeOwnership on an emptyDir)', () => {
  it('a new volume: group owned, setgid and group rwx; then left alone (one stat)', async () => {
    const dir = path.join(root, 'vol');
    fs.mkdirSync(dir);
    fs.chmodSync(dir, 0o777);
    expect(await needsOwnership(dir, 2000)).toBe(true);
    await setVolumeOwnership(dir, 2000, 'data');
    expect(modeGid(dir)).toBe('2777 2000');
    expect(await needsOwnership(dir, 2000)).toBe(false);
    // A file made after: a second call with the root in order does not walk.
    fs.writeFileSync(path.join(dir, 'later'), 'x', { mode: 0o600 });
    fs.chownSync(path.join(dir, 'later'), 0, 0);
    await setVolumeOwnership(dir, 2000, 'data');
    expect(modeGid(path.join(dir, 'later'))).toBe('600 0');
  });

  it('a root out of order: the whole tree, never through a link, devices and FIFOs only chown/chmod', async () => {
    const dir = path.join(root, 'vol');
    const outside = path.join(root, 'outside');
    fs.mkdirSync(path.join(dir, 'sub/deeper'), { recursive: true });
    fs.writeFileSync(outside, 'host', { mode: 0o600 });
    fs.writeFileSync(path.join(dir, 'sub/f'), 'x', { mode: 0o600 });
    fs.symlinkSync(outside, path.join(dir, 'link'));
    fs.symlinkSync(root, path.join(dir, 'sub/dirlink'));
    const fifo = path.join(dir, 'fifo');
    execFileSync('mkfifo', ['-m', '600', fifo]);
    fs.chmodSync(path.join(dir, 'sub'), 0o700);
    const before = modeGid(outside);
    const rootBefore = modeGid(root);
    await setVolumeOwnership(dir, 2000, 'data');
    expect(modeGid(path.join(dir, 'sub'))).toBe('2770 2000');
    expect(modeGid(path.join(dir, 'sub/deeper'))).toBe('2775 2000');
    expect(modeGid(path.join(dir, 'sub/f'))).toBe('660 2000');
    expect(modeGid(fifo)).toBe('660 2000');
    // What links point to is untouched.
    expect(modeGid(outside)).toBe(before);
    expect(modeGid(root)).toBe(rootBefore);
  });

  it('errors name the volume', async () => {
    await expect(setVolumeOwnership(path.join(root, 'missing'), 2000, 'data')).rejects.toThrow(/^volume "data": cannot set the ownership of fsGroup 2000/);
    await expect(setVolumeOwnership(root, -1, 'data')).rejects.toThrow('volume "data": fsGroup -1 is not a group ID');
  });
});
