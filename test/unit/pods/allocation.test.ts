/**
 * allocated_pods_state / actuated_pods_state in the kubelet's checkpoint shape: a kubelet's
 * file is read and verified, nodelet's is byte for byte what a kubelet writes for the same
 * entries, and the records follow what runs.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import {
  ALLOCATED_PODS_STATE,
  AllocationRecord,
  allocationChecksum,
  decodeAllocationCheckpoint,
  encodeAllocationCheckpoint,
  podResourceInfo,
} from '../../../src/pods/sync/allocation.js';
import { createLogger } from '../../../src/log.js';

// Upstream's fixture (pkg/kubelet/allocation/state/state_checkpoint_test.go): a checkpoint a kubelet wrote.
const KUBELET_FILE =
  '{"data":"{\\"entries\\":{\\"pod1\\":{\\"ContainerResources\\":{\\"container1\\":{\\"requests\\":{\\"cpu\\":\\"1Ki\\",\\"memory\\":\\"1Ki\\"}}}}}}","checksum":1178570812}';
const KUBELET_ENTRIES = { pod1: { ContainerResources: { container1: { requests: { cpu: '1Ki', memory: '1Ki' } } } } };

const quiet = createLogger({ level: 'silent' });

describe('the checkpoint format', () => {
  it("reads a kubelet's file and verifies its checksum", () => {
    expect(decodeAllocationCheckpoint(KUBELET_FILE)).toEqual(KUBELET_ENTRIES);
  });

  it('writes, for the same entries, exactly the file a kubelet writes', () => {
    expect(encodeAllocationCheckpoint(KUBELET_ENTRIES)).toBe(KUBELET_FILE);
  });

  it("sorts keys as Go's encoding/json does and leaves out empty maps", () => {
    const text = encodeAllocationCheckpoint({
      b: { ContainerResources: { z: { requests: { memory: '1Mi', cpu: '1' } }, a: {} } },
      a: { ContainerResources: {} },
    });
    const { data, checksum } = JSON.parse(text) as { data: string; checksum: number };
    expect(data).toBe('{"entries":{"a":{"ContainerResources":{}},"b":{"ContainerResources":{"a":{},"z":{"requests":{"cpu":"1","memory":"1Mi"}}}}}}');
    expect(checksum).toBe(allocationChecksum(data));
    expect(JSON.parse(encodeAllocationCheckpoint({})).data).toBe('{}');
  });

  it.each([
    ['not JSON', '{', /not JSON/],
    ['no data', '{"checksum":1}', /no data/],
    ['no checksum', '{"data":"{}"}', /no checksum/],
    ['a changed payload', KUBELET_FILE.replace('1Ki\\",\\"memory', '2Ki\\",\\"memory'), /checksum mismatch/],
    ['a quantity that is not a string', JSON.stringify({ data: '{"entries":{"p":{"ContainerResources":{"c":{"limits":{"cpu":1}}}}}}', checksum: allocationChecksum('{"entries":{"p":{"ContainerResources":{"c":{"limits":{"cpu":1}}}}}}') }), /entries\.p\.ContainerResources\.c\.limits\.cpu/],
  ])('refuses %s, saying so', (_what, text, message) => {
    expect(() => decodeAllocationCheckpoint(text)).toThrow(message);
  });
});

describe('what a pod is allocated', () => {
  it('holds every container, init containers too, limits and requests as strings, pod-level resources when set', () => {
    const pod = {
      metadata: { name: 'p', uid: 'u' },
      spec: {
        initContainers: [{ name: 'init', image: 'x', resources: { requests: { cpu: '100m' } } }],
        containers: [
          { name: 'app', image: 'x', resources: { limits: { memory: '128Mi', cpu: 1 as unknown as string }, requests: { memory: '64Mi' } } },
          { name: 'side', image: 'x' },
        ],
        resources: { limits: { cpu: '2' } },
      },
    } as Pod;
    expect(podResourceInfo(pod)).toEqual({
      ContainerResources: { init: { requests: { cpu: '100m' } }, app: { limits: { cpu: '1', memory: '128Mi' }, requests: { memory: '64Mi' } }, side: {} },
      PodLevelResources: { limits: { cpu: '2' } },
    });
  });
});

describe('a record on disk', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'nodelet-alloc-'));
  });
  afterEach(async () => {
    await fs.rm(dir, { recursive: true, force: true });
  });
  const file = (): string => path.join(dir, ALLOCATED_PODS_STATE);

  it("is created empty, keeps a kubelet's entries, and rebuilds a corrupt file", async () => {
    expect(await new AllocationRecord(dir, ALLOCATED_PODS_STATE, quiet).load()).toBe('created');
    expect(decodeAllocationCheckpoint(await fs.readFile(file(), 'utf8'))).toEqual({});
    expect((await fs.stat(file())).mode & 0o777).toBe(0o600);

    await fs.writeFile(file(), KUBELET_FILE);
    const kept = new AllocationRecord(dir, ALLOCATED_PODS_STATE, quiet);
    expect(await kept.load()).toBe('kept');
    expect(kept.get('pod1')).toEqual(KUBELET_ENTRIES.pod1);

    await fs.writeFile(file(), KUBELET_FILE.slice(0, 40));
    const rebuilt = new AllocationRecord(dir, ALLOCATED_PODS_STATE, quiet);
    expect(await rebuilt.load()).toBe('rebuilt');
    expect(rebuilt.uids()).toEqual([]);
    expect(decodeAllocationCheckpoint(await fs.readFile(file(), 'utf8'))).toEqual({});
  });

  it('writes only on a change, and forgets pods that no longer run', async () => {
    const r = new AllocationRecord(dir, ALLOCATED_PODS_STATE, quiet);
    await r.load();
    const info = { ContainerResources: { c: { requests: { cpu: '1' } } } };
    await r.setPod('u1', info);
    await r.setContainer('u2', 'c', { limits: { memory: '1Gi' } });
    expect(decodeAllocationCheckpoint(await fs.readFile(file(), 'utf8'))).toEqual({ u1: info, u2: { ContainerResources: { c: { limits: { memory: '1Gi' } } } } });

    await fs.rm(file());
    await r.setPod('u1', { ContainerResources: { c: { requests: { cpu: '1' } } } });
    await r.setContainer('u2', 'c', { limits: { memory: '1Gi' } });
    await expect(fs.stat(file())).rejects.toMatchObject({ code: 'ENOENT' });

    expect(await r.retain(new Set(['u2']))).toEqual(['u1']);
    expect(decodeAllocationCheckpoint(await fs.readFile(file(), 'utf8'))).toEqual({ u2: { ContainerResources: { c: { limits: { memory: '1Gi' } } } } });
    expect(await r.retain(new Set(['u2']))).toEqual([]);
    await r.removePod('u2');
    expect(decodeAllocationCheckpoint(await fs.readFile(file(), 'utf8'))).toEqual({});
    await fs.rm(file());
    await r.removePod('u2');
    await expect(fs.stat(file())).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('serializes writes: the file ends with the last content', async () => {
    const r = new AllocationRecord(dir, ALLOCATED_PODS_STATE, quiet);
    await r.load();
    await Promise.all(Array.from({ length: 20 }, (_, i) => r.setPod(`u${i}`, { ContainerResources: { c: { requests: { cpu: `${i + 1}` } } } })));
    expect(Object.keys(decodeAllocationCheckpoint(await fs.readFile(file(), 'utf8')))).toHaveLength(20);
  });
});
