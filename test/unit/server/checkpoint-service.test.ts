import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../../src/errors.js';
import type { CheckpointRequest as CriCheckpointRequest, Container, ContainerFilter } from '../../../src/runtime/types.js';
import { CheckpointService, checkpointDeadlineMs, type CheckpointRuntime, type PodLookup } from '../../../src/checkpoint/service.js';
import { writeTar } from './archive-fixtures.js';
import { ManualClock } from '../../helpers/clock.js';

function pod(namespace: string, name: string, uid: string, containers: string[], init: string[] = [], ephemeral: string[] = []): Pod {
  return {
    metadata: { namespace, name, uid },
    spec: {
      containers: containers.map((n) => ({ name: n, image: 'busybox' })),
      initContainers: init.map((n) => ({ name: n, image: 'busybox' })),
      ephemeralContainers: ephemeral.map((n) => ({ name: n, image: 'busybox' })),
    },
  };
}

class MemPods implements PodLookup {
  constructor(readonly pods: Pod[]) {}
  getPod(ns: string, name: string) {
    return this.pods.find((p) => p.metadata?.namespace === ns && p.metadata?.name === name);
  }
  listPods() {
    return this.pods;
  }
}

interface Deferred {
  promise: Promise<void>;
  resolve(): void;
}
function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** An in-memory runtime: running containers by labels; CheckpointContainer writes a real tar (or does what `behave` says). */
class MemRuntime implements CheckpointRuntime {
  containers: Container[] = [];
  calls: { req: CriCheckpointRequest; deadlineMs?: number }[] = [];
  /** Per container ID: checkpoint waits for this before writing. */
  gates = new Map<string, Deferred>();
  behave: (req: CriCheckpointRequest) => Promise<void> = (req) => writeTar(req.location, [['config.dump', '{}'], ['pages.img', 'p']], 0o644);
  listError: Error | undefined;
  listCalls = 0;

  add(uid: string, name: string, id: string, state: Container['state'] = 'CONTAINER_RUNNING', createdAt = 1): void {
    this.containers.push({ id, podSandboxId: 's', metadata: { name, attempt: 0 }, image: null, imageRef: '', state, createdAt, labels: { 'io.kubernetes.pod.uid': uid, 'io.kubernetes.container.name': name }, annotations: {}, imageId: '' });
  }
  async listContainers(f: ContainerFilter = {}) {
    this.listCalls++;
    if (this.listError) throw this.listError;
    return this.containers.filter((c) => (!f.state || c.state === f.state) && Object.entries(f.labelSelector ?? {}).every(([k, v]) => c.labels[k] === v));
  }
  /** The signal of each CheckpointContainer call, in order. */
  signals: (AbortSignal | undefined)[] = [];
  async checkpointContainer(req: CriCheckpointRequest, o: { deadlineMs?: number; signal?: AbortSignal } = {}) {
    this.calls.push({ req, ...(o.deadlineMs !== undefined ? { deadlineMs: o.deadlineMs } : {}) });
    this.signals.push(o.signal);
    await this.gates.get(req.containerId)?.promise;
    await this.behave(req);
  }
}

let root: string;
let rt: MemRuntime;
let clock: ManualClock;
let pods: MemPods;
beforeEach(async () => {
  root = await fsp.mkdtemp(path.join(os.tmpdir(), 'nodelet-cpsvc-'));
  rt = new MemRuntime();
  clock = new ManualClock(Date.UTC(2026, 10, 22, 23, 40, 5));
  pods = new MemPods([pod('default', 'web-0', 'uid-web', ['app', 'sidecar'], ['init-db'], ['debugger']), pod('prod', 'db', 'uid-db', ['pg'])]);
  rt.add('uid-web', 'app', 'c-app');
  rt.add('uid-web', 'sidecar', 'c-side');
  rt.add('uid-db', 'pg', 'c-pg');
});
afterEach(async () => {
  await fsp.rm(root, { recursive: true, force: true });
});

const svc = (extra: Partial<ConstructorParameters<typeof CheckpointService>[0]> = {}) =>
  new CheckpointService({ rootDir: root, runtime: rt, pods, runtimeRequestTimeoutMs: 120_000, clock, ...extra });
const req = (namespace: string | undefined, p: string | undefined, container: string | undefined, timeout: string[] = []) => ({ namespace, pod: p, container, timeout });
const cpDir = () => path.join(root, 'checkpoints');

describe('checkpointDeadlineMs', () => {
  it('follows the timeout with a margin, else runtimeRequestTimeout, capped for timers', () => {
    expect(checkpointDeadlineMs(0, 120_000, 5000)).toBe(120_000);
    expect(checkpointDeadlineMs(10, 120_000, 5000)).toBe(15_000);
    expect(checkpointDeadlineMs(600, 120_000, 5000)).toBe(605_000);
    expect(checkpointDeadlineMs(999_999_999_999, 120_000, 5000)).toBe(2 ** 31 - 1);
  });
});

describe('CheckpointService.checkpoint', () => {
  it('checkpoints the running container into <root>/checkpoints (0700) and answers the 0600 archive', async () => {
    const s = svc();
    const got = await s.checkpoint(req('default', 'web-0', 'app', ['30']));
    const file = path.join(cpDir(), 'checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar');
    expect(got).toEqual({ items: [file] });
    expect(rt.calls).toEqual([{ req: { containerId: 'c-app', location: file, timeoutSec: 30 }, deadlineMs: 35_000 }]);
    expect(fs.statSync(cpDir()).mode & 0o777).toBe(0o700);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
  });

  it('finds init and ephemeral containers too, and uses the newest running instance', async () => {
    rt.add('uid-web', 'init-db', 'c-init-old', 'CONTAINER_RUNNING', 1);
    rt.add('uid-web', 'init-db', 'c-init-new', 'CONTAINER_RUNNING', 5);
    rt.add('uid-web', 'init-db', 'c-init-exited', 'CONTAINER_EXITED', 9);
    rt.add('uid-web', 'debugger', 'c-dbg');
    const s = svc();
    await s.checkpoint(req('default', 'web-0', 'init-db'));
    await s.checkpoint(req('default', 'web-0', 'debugger'));
    expect(rt.calls.map((c) => [c.req.containerId, c.deadlineMs])).toEqual([
      ['c-init-new', 120_000],
      ['c-dbg', 120_000],
    ]);
  });

  it('takes the running container from the pod\'s status without listing the runtime', async () => {
    const web = pods.pods[0]!;
    pods.pods[0] = { ...web, status: { containerStatuses: [{ name: 'app', containerID: 'containerd://c-app', state: { running: {} }, image: '', imageID: '', ready: true, restartCount: 0 }] } };
    const got = await svc().checkpoint(req('default', 'web-0', 'app'));
    expect(rt.calls.map((c) => c.req.containerId)).toEqual(['c-app']);
    expect(rt.listCalls).toBe(0);
    expect(fs.statSync(got.items[0]!).mode & 0o777).toBe(0o600);
    // A status that shows the container not running (or no ID) is not trusted: the runtime is listed.
    pods.pods[0] = { ...web, status: { containerStatuses: [{ name: 'app', containerID: 'containerd://c-app', state: { terminated: { exitCode: 0 } }, image: '', imageID: '', ready: false, restartCount: 0 }] } };
    await svc().checkpoint(req('default', 'web-0', 'app'));
    expect(rt.listCalls).toBe(1);
  });

  it('a status a restart old: the runtime\'s failure for that ID is retried once with the container running now', async () => {
    pods.pods[0] = { ...pods.pods[0]!, status: { containerStatuses: [{ name: 'app', containerID: 'containerd://c-app-old', state: { running: {} }, image: '', imageID: '', ready: true, restartCount: 0 }] } };
    const behave = rt.behave;
    rt.behave = async (r) => {
      if (r.containerId === 'c-app-old') {
        await fsp.writeFile(r.location, 'half an archive of a container that just exited');
        throw new NodeletError('INTERNAL', 'CheckpointContainer: rpc error: code = Unknown desc = container c-app-old is not running');
      }
      await behave(r);
    };
    const got = await svc().checkpoint(req('default', 'web-0', 'app'));
    const file = path.join(cpDir(), 'checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar');
    expect(got).toEqual({ items: [file] });
    // Both calls at the same (new) path: the first one's leftovers were removed before the retry.
    expect(rt.calls.map((c) => [c.req.containerId, c.req.location])).toEqual([
      ['c-app-old', file],
      ['c-app', file],
    ]);
    expect(rt.listCalls).toBe(1);
    expect(await fsp.readdir(cpDir())).toEqual([path.basename(file)]);

    // When the runtime runs no other container of that name, the runtime's own failure is answered, once.
    rt.calls = [];
    rt.containers = rt.containers.filter((c) => c.id !== 'c-app');
    await expect(svc().checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({
      code: 'INTERNAL',
      message: 'checkpointing of default/web-0/app failed (CheckpointContainer: rpc error: code = Unknown desc = container c-app-old is not running)',
    });
    expect(rt.calls.map((c) => c.req.containerId)).toEqual(['c-app-old']);
    expect(await fsp.readdir(cpDir())).toEqual([path.basename(file)]);
    // Nor is a failure of the very container the runtime still runs retried.
    rt.calls = [];
    rt.add('uid-web', 'app', 'c-app-old');
    await expect(svc().checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({ code: 'INTERNAL' });
    expect(rt.calls.map((c) => c.req.containerId)).toEqual(['c-app-old']);
  });

  it('rejects bad segments and timeouts before any lookup', async () => {
    const s = svc();
    for (const [r, param] of [
      [req('..', 'web-0', 'app'), 'namespace'],
      [req('default', '%2F', 'app'), 'pod'],
      [req('default', 'web-0', ''), 'container'],
      [req('default', 'web-0', 'app', ['-5']), 'timeout'],
      [req('default', 'nope', 'app', ['x']), 'timeout'],
    ] as const) {
      await expect(s.checkpoint(r)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', details: { param } });
    }
    expect(rt.calls).toEqual([]);
    expect(fs.existsSync(cpDir())).toBe(false);
  });

  it('404 naming the pod or the container', async () => {
    const s = svc();
    await expect(s.checkpoint(req('default', 'nope', 'app'))).rejects.toMatchObject({ code: 'NOT_FOUND', message: 'pods "nope" not found in namespace "default"' });
    await expect(s.checkpoint(req('prod', 'web-0', 'app'))).rejects.toMatchObject({ code: 'NOT_FOUND', message: 'pods "web-0" not found in namespace "prod"' });
    await expect(s.checkpoint(req('default', 'web-0', 'nope'))).rejects.toMatchObject({ code: 'NOT_FOUND', message: 'container "nope" not found in pod "default/web-0"' });
    expect(rt.calls).toEqual([]);
  });

  it('500 when the container is in the spec but not running, or the runtime fails (any code), with its message', async () => {
    rt.containers = rt.containers.filter((c) => c.id !== 'c-side');
    const s = svc();
    await expect(s.checkpoint(req('default', 'web-0', 'sidecar'))).rejects.toMatchObject({
      code: 'INTERNAL',
      message: 'checkpointing of default/web-0/sidecar failed (container "sidecar" of pod "default/web-0" is not running)',
    });
    rt.behave = async () => {
      throw new NodeletError('UNIMPLEMENTED', 'CheckpointContainer: rpc error: code = Unimplemented desc = method CheckpointContainer not implemented', { grpcCode: 12 });
    };
    await expect(s.checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({
      code: 'INTERNAL',
      message: 'checkpointing of default/web-0/app failed (CheckpointContainer: rpc error: code = Unimplemented desc = method CheckpointContainer not implemented)',
      details: { grpcCode: 12, runtimeCode: 'UNIMPLEMENTED' },
    });
    rt.listError = new NodeletError('UNAVAILABLE', 'ListContainers: rpc error: code = Unavailable desc = connection refused');
    await expect(s.checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({ code: 'INTERNAL', message: expect.stringContaining('connection refused') });
  });

  it('500 and no file left when the runtime reports success without a readable archive, or fails half-way', async () => {
    const s = svc();
    rt.behave = async (r) => fsp.writeFile(r.location, 'garbage that is not a tar archive at all, not even close: '.repeat(20));
    await expect(s.checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({ code: 'INTERNAL', message: expect.stringContaining('is not a readable tar archive') });
    rt.behave = async () => {};
    await expect(s.checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({ code: 'INTERNAL', message: expect.stringContaining('left no archive at') });
    rt.behave = async (r) => {
      await fsp.writeFile(r.location, 'partial pages');
      throw new NodeletError('INTERNAL', 'CheckpointContainer: rpc error: code = Unknown desc = criu failed');
    };
    await expect(s.checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({ code: 'INTERNAL', message: expect.stringContaining('criu failed') });
    expect(await fsp.readdir(cpDir())).toEqual([]);
  });

  it('reads the archive to its end: truncated in a member, cut at a member boundary, or empty is 500 with the reason, and removed', async () => {
    const s = svc();
    const whole = path.join(root, 'whole.tar');
    await writeTar(whole, [['config.dump', '{}'], ['pages-1.img', Buffer.alloc(200_000, 7)], ['inventory.img', 'inv']]);
    const bytes = await fsp.readFile(whole);
    const cases: [string, Buffer, string][] = [
      // The first headers are fine; the cut is 100 KB into pages-1.img.
      ['cut inside a member', bytes.subarray(0, 100_000), 'truncated: the archive ends inside a member or block'],
      // 512 (header) + 512 (config.dump) + 512 (header) + 200,192 (pages): a cut on a block boundary, before the next member.
      ['cut at a member boundary', bytes.subarray(0, 1536 + 200_192), 'truncated: no end-of-archive marker'],
      ['cut inside the end marker', bytes.subarray(0, bytes.length - 100), 'truncated: the archive ends inside a member or block'],
      ['empty', Buffer.alloc(0), 'empty file'],
    ];
    for (const [, data, reason] of cases) {
      rt.behave = async (r) => fsp.writeFile(r.location, data);
      await expect(s.checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({ code: 'INTERNAL', message: expect.stringContaining(reason) });
      expect(await fsp.readdir(cpDir())).toEqual([]);
    }
    // The same archive whole is answered and kept.
    rt.behave = async (r) => fsp.writeFile(r.location, bytes);
    const got = await s.checkpoint(req('default', 'web-0', 'app'));
    expect(fs.readFileSync(got.items[0]!)).toEqual(bytes);
  });

  it('never overwrites: same-second checkpoints get -1, -2, and an existing file is skipped', async () => {
    const s = svc();
    await fsp.mkdir(cpDir(), { mode: 0o700 });
    await fsp.writeFile(path.join(cpDir(), 'checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar'), 'an older archive someone kept');
    const a = await s.checkpoint(req('default', 'web-0', 'app'));
    const b = await s.checkpoint(req('default', 'web-0', 'app'));
    expect([a.items[0], b.items[0]].map((p) => path.basename(p!))).toEqual([
      'checkpoint-web-0_default-app-2026-11-22T23:40:05Z-1.tar',
      'checkpoint-web-0_default-app-2026-11-22T23:40:05Z-2.tar',
    ]);
    expect(fs.readFileSync(path.join(cpDir(), 'checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar'), 'utf8')).toBe('an older archive someone kept');
  });

  it('tightens a checkpoint directory others could read, and refuses a symlink in its place', async () => {
    await fsp.mkdir(cpDir(), { mode: 0o755 });
    await fsp.chmod(cpDir(), 0o755);
    await svc().checkpoint(req('default', 'web-0', 'app'));
    expect(fs.statSync(cpDir()).mode & 0o777).toBe(0o700);
    await fsp.rm(cpDir(), { recursive: true });
    const elsewhere = path.join(root, 'elsewhere');
    await fsp.mkdir(elsewhere);
    await fsp.symlink(elsewhere, cpDir());
    await expect(svc().checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({ code: 'INTERNAL', message: `checkpoint directory ${cpDir()}: exists and is not a directory` });
    expect(await fsp.readdir(elsewhere)).toEqual([]);
  });

  it('runs different containers in parallel and serializes the same container', async () => {
    const s = svc();
    const gApp = deferred();
    rt.gates.set('c-app', gApp);
    rt.gates.set('c-pg', deferred());
    const first = s.checkpoint(req('default', 'web-0', 'app'));
    const second = s.checkpoint(req('default', 'web-0', 'app'));
    const other = s.checkpoint(req('prod', 'db', 'pg'));
    const side = s.checkpoint(req('default', 'web-0', 'sidecar'));
    await side; // not blocked by anyone
    await waitFor(() => rt.calls.length === 3);
    // app once (the second waits for the first), pg and sidecar: three calls in flight/done.
    expect(rt.calls.map((c) => c.req.containerId).sort()).toEqual(['c-app', 'c-pg', 'c-side']);
    gApp.resolve();
    await first;
    await waitFor(() => rt.calls.length === 4);
    expect(rt.calls[3]!.req.containerId).toBe('c-app');
    await second;
    rt.gates.get('c-pg')!.resolve();
    await other;
    // In-flight archives are not listed.
    expect((await s.list()).map((a) => path.basename(a.path)).sort()).toEqual([
      'checkpoint-db_prod-pg-2026-11-22T23:40:05Z.tar',
      'checkpoint-web-0_default-app-2026-11-22T23:40:05Z-1.tar',
      'checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar',
      'checkpoint-web-0_default-sidecar-2026-11-22T23:40:05Z.tar',
    ]);
  });

  it('the client\'s signal reaches the CRI call; a client gone while waiting behind a checkpoint of the same container is never checkpointed', async () => {
    const s = svc();
    const gApp = deferred();
    rt.gates.set('c-app', gApp);
    const firstClient = new AbortController();
    const first = s.checkpoint({ ...req('default', 'web-0', 'app'), signal: firstClient.signal });
    const gone = new AbortController();
    const second = s.checkpoint({ ...req('default', 'web-0', 'app'), signal: gone.signal });
    await waitFor(() => rt.calls.length === 1);
    expect(rt.signals).toEqual([firstClient.signal]);
    gone.abort();
    gApp.resolve();
    await first;
    await expect(second).rejects.toMatchObject({ code: 'CANCELLED' });
    expect(rt.calls).toHaveLength(1);
    expect((await s.list()).map((a) => path.basename(a.path))).toEqual(['checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar']);
  });

  it('a failed checkpoint releases the container for the next one', async () => {
    const s = svc();
    rt.behave = async () => {
      throw new NodeletError('DEADLINE_EXCEEDED', 'CheckpointContainer: rpc error: code = DeadlineExceeded desc = context deadline exceeded');
    };
    await expect(s.checkpoint(req('default', 'web-0', 'app'))).rejects.toMatchObject({ code: 'INTERNAL' });
    rt.behave = (r) => writeTar(r.location, [['a', 'b']]);
    await expect(s.checkpoint(req('default', 'web-0', 'app'))).resolves.toMatchObject({ items: [expect.stringMatching(/app-2026-11-22T23:40:05Z\.tar$/)] });
  });

  it('retention keeps the newest N of that container only', async () => {
    const s = svc({ retention: 2 });
    const names: string[] = [];
    for (let i = 0; i < 4; i++) {
      names.push(path.basename((await s.checkpoint(req('default', 'web-0', 'app'))).items[0]!));
      clock.t += 1000;
    }
    await s.checkpoint(req('default', 'web-0', 'sidecar'));
    await s.checkpoint(req('prod', 'db', 'pg'));
    expect((await fsp.readdir(cpDir())).sort()).toEqual([
      'checkpoint-db_prod-pg-2026-11-22T23:40:09Z.tar',
      names[2],
      names[3],
      'checkpoint-web-0_default-sidecar-2026-11-22T23:40:09Z.tar',
    ].sort());
  });
});

describe('same-second checkpoints with retention', () => {
  it('five in one second with retention 2: five distinct paths, each there when answered, the 2 newest kept', async () => {
    const s = svc({ retention: 2 });
    const answered: string[] = [];
    for (let i = 0; i < 5; i++) {
      const p = (await s.checkpoint(req('default', 'web-0', 'app'))).items[0]!;
      expect(fs.existsSync(p)).toBe(true);
      answered.push(p);
      clock.t += 100;
    }
    expect(new Set(answered).size).toBe(5);
    expect((await fsp.readdir(cpDir())).sort()).toEqual(answered.slice(-2).map((p) => path.basename(p)).sort());
  });

  it('a clock set back never makes retention remove the archive being answered', async () => {
    const s = svc({ retention: 1 });
    await s.checkpoint(req('default', 'web-0', 'app'));
    clock.t -= 60_000;
    const p = (await s.checkpoint(req('default', 'web-0', 'app'))).items[0]!;
    expect(await fsp.readdir(cpDir())).toEqual([path.basename(p)]);
  });
});

/** Polls a condition across microtask/IO turns (no timers): the service's work is IO-bound. */
async function waitFor(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !cond(); i++) await new Promise((r) => setImmediate(r));
  expect(cond()).toBe(true);
}
