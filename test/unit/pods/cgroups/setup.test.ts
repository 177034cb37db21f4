/** The pod cgroups from the configuration: off with cgroupsPerQOS false; the runtime's driver wins over the configuration's when it says. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { silentLogger } from '../../../../src/log.js';
import { NodeletError } from '../../../../src/errors.js';
import { podCgroupsFor } from '../../../../src/pods/cgroups/setup.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

const CFG = { cgroupsPerQOS: true, cgroupRoot: '', cgroupDriver: 'cgroupfs' as const, enforceNodeAllocatable: ['pods'], cpuCFSQuota: true, cpuCFSQuotaPeriod: '100ms', podPidsLimit: -1 };
const POD: Pod = { metadata: { name: 'p', uid: 'abc-1' }, spec: { containers: [{ name: 'c', image: 'i' }] } };

function deps(answer: (() => Promise<{ cgroupDriver: 'systemd' | 'cgroupfs' }>) | undefined) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-cgsetup-'));
  dirs.push(root);
  return { ...(answer ? { cri: { runtimeConfig: answer } } : {}), machine: { cpuCores: 2, memoryBytes: 2 ** 30 }, logger: silentLogger(), layout: { version: 2 as const, controllers: new Map(), unified: root, mounts: [root] }, pidMax: 4096 };
}

describe('podCgroupsFor', () => {
  it('makes nothing with cgroupsPerQOS false', async () => {
    expect(await podCgroupsFor({ ...CFG, cgroupsPerQOS: false, enforceNodeAllocatable: [] }, deps(undefined))).toBeUndefined();
  });

  it('uses the configuration\'s driver when the runtime does not implement RuntimeConfig, with cgroupRoot / by default', async () => {
    const cg = (await podCgroupsFor(CFG, deps(() => Promise.reject(new NodeletError('UNIMPLEMENTED', 'unknown method RuntimeConfig')))))!;
    await cg.start();
    expect(cg.parentOf(POD)).toBe('/kubepods/besteffort/podabc-1');
  });

  it('uses the runtime\'s driver when it answers', async () => {
    const cg = (await podCgroupsFor(CFG, deps(async () => ({ cgroupDriver: 'systemd' }))))!;
    await cg.start();
    expect(cg.parentOf(POD)).toBe('/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podabc_1.slice');
  });
});
