import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Pod, PodStatus } from 'kubernetes-types/core/v1.js';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createTerminationLogFile,
  limitTerminationMessages,
  readLogTail,
  terminationMessage,
  utf8Prefix,
  type ExitedContainer,
} from '../../../src/pods/logs/termination-message.js';
import { tempDir } from '../../helpers/nodelet.js';

const dir = tempDir('nodelet-termination-message-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

let n = 0;
/** A file in the test directory with this content. */
function file(content: string | Buffer): string {
  const f = path.join(dir, `f${n++}`);
  fs.writeFileSync(f, content);
  return f;
}

/** A CRI log: one record per [stream, tag, text]. */
function criLog(records: [string, 'F' | 'P', string][]): string {
  return file(records.map(([stream, tag, text], i) => `2026-11-24T08:00:${String(i % 60).padStart(2, '0')}.000000000Z ${stream} ${tag} ${text}\n`).join(''));
}

function exited(o: Partial<ExitedContainer> & { hostPath?: string }): ExitedContainer {
  const { hostPath, ...rest } = o;
  return {
    exitCode: 1,
    reason: 'Error',
    message: '',
    terminationMessagePath: '/dev/termination-log',
    terminationMessagePolicy: 'File',
    mounts: hostPath ? [{ containerPath: '/etc/hosts', hostPath: '/nonexistent/hosts' }, { containerPath: '/dev/termination-log', hostPath }] : [],
    logPath: '',
    ...rest,
  };
}

describe('the termination-log file', () => {
  it('is a new empty file per container instance under pods/<uid>/containers/<name>/, mode 0666 whatever the umask', async () => {
    const uid = '0d5c6f0e-8a4c-4d52-9b11-3f1f1a2b3c4d';
    const old = process.umask(0o077);
    let a: string, b: string;
    try {
      a = await createTerminationLogFile(dir, uid, 'app');
      b = await createTerminationLogFile(dir, uid, 'app');
    } finally {
      process.umask(old);
    }
    expect(path.dirname(a)).toBe(path.join(dir, 'pods', uid, 'containers', 'app'));
    expect(path.basename(a)).toMatch(/^[0-9a-f]{8}$/);
    expect(b).not.toBe(a);
    for (const f of [a, b]) {
      const st = fs.lstatSync(f);
      expect(st.isFile()).toBe(true);
      expect(st.size).toBe(0);
      expect(st.mode & 0o777).toBe(0o666);
    }
  });

  it('refuses a pod UID that is not one (it would be a path)', async () => {
    await expect(createTerminationLogFile(dir, '../../etc', 'app')).rejects.toThrow(/not a valid UID/);
  });
});

describe('terminationMessage: what an exited container shows', () => {
  it('is what the container wrote in the file mounted at its terminationMessagePath', async () => {
    expect(await terminationMessage(exited({ hostPath: file('bye\n') }))).toBe('bye\n');
    expect(await terminationMessage(exited({ exitCode: 0, reason: 'Completed', hostPath: file('done') }))).toBe('done');
  });

  it('follows the runtime\'s own message after ": "', async () => {
    expect(await terminationMessage(exited({ message: 'runtime says', hostPath: file('bye') }))).toBe('runtime says: bye');
    expect(await terminationMessage(exited({ message: 'runtime says', hostPath: file('') }))).toBe('runtime says');
  });

  it('is at most the last 4096 bytes of the file, however much was written', async () => {
    const big = `${'a'.repeat(10_000)}${'z'.repeat(4096)}`;
    expect(await terminationMessage(exited({ hostPath: file(big) }))).toBe('z'.repeat(4096));
    expect(await terminationMessage(exited({ hostPath: file('x'.repeat(4096)) }))).toBe('x'.repeat(4096));
  });

  it('is empty for an empty file, no mount at the path, no path, or a file gone', async () => {
    expect(await terminationMessage(exited({ hostPath: file('') }))).toBe('');
    expect(await terminationMessage(exited({ terminationMessagePath: '/other', hostPath: file('bye') }))).toBe('');
    expect(await terminationMessage(exited({ terminationMessagePath: '', hostPath: file('bye') }))).toBe('');
    expect(await terminationMessage(exited({ hostPath: path.join(dir, 'gone') }))).toBe('');
  });

  it('reads no symbolic link and nothing but a regular file: what the container could plant is refused, never read', async () => {
    const secret = file('secret');
    const link = path.join(dir, `link${n++}`);
    fs.symlinkSync(secret, link);
    const viaLink = await terminationMessage(exited({ hostPath: link }));
    expect(viaLink).toMatch(/^Error on reading termination log .*link\d+: .*symbolic link/);
    expect(viaLink).not.toContain('secret');
    const fifo = path.join(dir, `fifo${n++}`);
    execFileSync('mkfifo', [fifo]);
    // A FIFO with no writer: an open for reading would block; it is refused at once.
    expect(await terminationMessage(exited({ hostPath: fifo }))).toMatch(/^Error on reading termination log .*fifo\d+: .*FIFO/);
    expect(await terminationMessage(exited({ hostPath: dir }))).toMatch(/^Error on reading termination log .*directory/);
  });

  it('FallbackToLogsOnError: the log\'s end when the file is empty and the exit is non-zero, only then', async () => {
    const logPath = criLog([
      ['stdout', 'F', 'starting'],
      ['stderr', 'F', 'panic: boom'],
    ]);
    const fb = { terminationMessagePolicy: 'FallbackToLogsOnError', logPath };
    expect(await terminationMessage(exited({ ...fb, hostPath: file('') }))).toBe('starting\npanic: boom\n');
    // No file at all (no mount, a file gone) falls back too.
    expect(await terminationMessage(exited({ ...fb }))).toBe('starting\npanic: boom\n');
    expect(await terminationMessage(exited({ ...fb, hostPath: path.join(dir, 'gone') }))).toBe('starting\npanic: boom\n');
    // The file wins when it has something.
    expect(await terminationMessage(exited({ ...fb, hostPath: file('from the file') }))).toBe('from the file');
    // Exit 0, or a container that could not run: no fallback.
    expect(await terminationMessage(exited({ ...fb, exitCode: 0, reason: 'Completed', hostPath: file('') }))).toBe('');
    expect(await terminationMessage(exited({ ...fb, reason: 'ContainerCannotRun', hostPath: file('') }))).toBe('');
    // The File policy never reads the log.
    expect(await terminationMessage(exited({ logPath, hostPath: file('') }))).toBe('');
    // A log that cannot be read says so.
    expect(await terminationMessage(exited({ ...fb, logPath: path.join(dir, 'no-log'), hostPath: file('') }))).toMatch(/^Error on reading termination message from logs: /);
  });
});

describe('readLogTail: the fallback\'s end of the log', () => {
  it('is the last 80 lines', async () => {
    const lines = Array.from({ length: 100 }, (_, i) => `line ${i}`);
    const got = await readLogTail(criLog(lines.map((l) => ['stdout', 'F', l])));
    expect(got).toBe(`${lines.slice(20).join('\n')}\n`);
  });

  it('is at most the last 2048 bytes of their text', async () => {
    const lines = Array.from({ length: 10 }, (_, i) => `${i}${'x'.repeat(499)}`);
    const got = await readLogTail(criLog(lines.map((l) => ['stdout', 'F', l])));
    expect(Buffer.byteLength(got)).toBe(2048);
    expect(got).toBe(`${lines.join('\n')}\n`.slice(-2048));
    // One line longer than the limit: its end.
    const long = `${'a'.repeat(5000)}END`;
    expect(await readLogTail(criLog([['stderr', 'F', long]]))).toBe(`${long}\n`.slice(-2048));
  });

  it('joins partial records into their line, and ends an unfinished one', async () => {
    const got = await readLogTail(
      criLog([
        ['stdout', 'P', 'hel'],
        ['stdout', 'F', 'lo'],
        ['stderr', 'P', 'no newline at exit'],
      ]),
    );
    expect(got).toBe('hello\nno newline at exit\n');
  });

  it('is empty for an empty log', async () => {
    expect(await readLogTail(file(''))).toBe('');
  });
});

describe('limitTerminationMessages: the pod\'s 12 KiB', () => {
  const podWith = (containers: number, inits = 0): Pod => ({
    spec: {
      containers: Array.from({ length: containers }, (_, i) => ({ name: `c${i}`, image: 'x' })),
      ...(inits ? { initContainers: Array.from({ length: inits }, (_, i) => ({ name: `i${i}`, image: 'x' })) } : {}),
    },
  });
  const statusWith = (messages: string[], last?: string): PodStatus => ({
    containerStatuses: messages.map((m, i) => ({
      name: `c${i}`,
      image: 'x',
      imageID: '',
      ready: false,
      restartCount: 0,
      state: { terminated: { exitCode: 1, message: m } },
      lastState: last !== undefined ? { terminated: { exitCode: 1, message: last } } : {},
    })),
  });

  it('is split evenly between the containers, init containers counted, state and lastState alike', () => {
    const m = 'm'.repeat(4096);
    // One container: the whole 4096 fits.
    expect(limitTerminationMessages(podWith(1), statusWith([m])).containerStatuses![0]!.state!.terminated!.message).toBe(m);
    // Four containers (3 + 1 init): 3072 bytes each.
    const st = limitTerminationMessages(podWith(3, 1), statusWith([m, 'short', m], m));
    expect(st.containerStatuses!.map((c) => c.state!.terminated!.message!.length)).toEqual([3072, 5, 3072]);
    expect(st.containerStatuses!.map((c) => c.lastState!.terminated!.message!.length)).toEqual([3072, 3072, 3072]);
    const init = limitTerminationMessages(podWith(3, 1), { initContainerStatuses: statusWith([m]).containerStatuses! });
    expect(init.initContainerStatuses![0]!.state!.terminated!.message!.length).toBe(3072);
  });

  it('cuts UTF-8 bytes without splitting a character', () => {
    expect(utf8Prefix('aé', 2)).toBe('a');
    expect(utf8Prefix('aé', 3)).toBe('aé');
    expect(utf8Prefix('€€', 5)).toBe('€');
    const msg = 'é'.repeat(4096); // 8192 bytes
    const out = limitTerminationMessages(podWith(3), statusWith([msg])).containerStatuses![0]!.state!.terminated!.message!;
    expect(out).toBe('é'.repeat(2048)); // 4096 bytes
  });
});
