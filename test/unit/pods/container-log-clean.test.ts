/**
 * The log files of a removed container (the kubelet's log manager Clean): its log and its
 * rotated logs go; other instances' logs, directories and other folders stay.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { removeContainerLogFiles } from '../../../src/pods/logs/log-rotation.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

describe('removeContainerLogFiles', () => {
  it('removes <n>.log and its rotated files, nothing of instance 10 or 2, no directory', async () => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-logclean-'));
    dirs.push(d);
    for (const f of ['1.log', '1.log.20260101-010203', '1.log.20260101-000000.gz', '10.log', '2.log']) fs.writeFileSync(path.join(d, f), 'x');
    fs.mkdirSync(path.join(d, '1.log.d'));
    fs.symlinkSync('/etc/passwd', path.join(d, '1.log.link'));
    const removed = await removeContainerLogFiles(path.join(d, '1.log'));
    expect(removed.map((f) => path.basename(f)).sort()).toEqual(['1.log', '1.log.20260101-000000.gz', '1.log.20260101-010203', '1.log.link']);
    expect(fs.readdirSync(d).sort()).toEqual(['1.log.d', '10.log', '2.log']);
    expect(fs.existsSync('/etc/passwd')).toBe(true);
  });

  it('a missing folder or a relative path removes nothing and does not fail', async () => {
    expect(await removeContainerLogFiles('/nonexistent/nodelet/0.log')).toEqual([]);
    expect(await removeContainerLogFiles('relative/0.log')).toEqual([]);
  });
});
