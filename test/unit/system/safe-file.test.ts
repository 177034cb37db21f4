import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rejection as refusal, thrown as refusalSync } from '../../helpers/errors.js';
import { openRegularFile, readBoundedFile, readBoundedFileSync, readBoundedText, readFailure } from '../../../src/system/safe-file.js';

let dir: string;
let inner: string;
const secret = 'root:x:0:0:the-secret-content';

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'safe-file-'));
  inner = path.join(dir, 'inner');
  fs.mkdirSync(inner);
  fs.writeFileSync(path.join(inner, 'ok.json'), '{"a":1}');
  fs.writeFileSync(path.join(dir, 'outside.txt'), secret);
  fs.symlinkSync('ok.json', path.join(inner, 'link-in.json'));
  fs.symlinkSync(path.join(dir, 'outside.txt'), path.join(inner, 'link-out.json'));
  fs.symlinkSync('/dev/zero', path.join(inner, 'zero.json'));
  fs.symlinkSync('loop-b', path.join(inner, 'loop-a'));
  fs.symlinkSync('loop-a', path.join(inner, 'loop-b'));
  execFileSync('mkfifo', [path.join(inner, 'fifo.json')]);
});

afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const opts = { maxBytes: 1024, what: 'seccomp profile' };

describe('readBoundedFile', () => {
  it('reads a regular file within the limit', async () => {
    expect(await readBoundedText(path.join(inner, 'ok.json'), opts)).toBe('{"a":1}');
    expect(readBoundedFileSync(path.join(inner, 'ok.json'), opts).toString()).toBe('{"a":1}');
  });

  it('refuses a file over the limit by its size, naming the file, what it is, its size and the limit', async () => {
    const big = path.join(dir, 'big.yaml');
    fs.writeFileSync(big, 'x'.repeat(2048));
    const err = await refusal(readBoundedFile(big, { maxBytes: 1024, what: 'static pod manifest' }));
    expect(err.code).toBe('INVALID_ARGUMENT');
    expect(err.message).toBe(`static pod manifest ${big} is 2 KiB (2048 bytes), over the 1 KiB limit for a static pod manifest`);
    expect(err.details).toMatchObject({ file: big, size: 2048, limit: 1024 });
    expect(refusalSync(() => readBoundedFileSync(big, { maxBytes: 1024, what: 'kubeconfig' })).details).toMatchObject({ size: 2048, limit: 1024 });
  });

  it('enforces the limit while reading: a file that holds more than its fstat size said (a /proc file says 0)', async () => {
    expect(fs.statSync('/proc/self/maps').size).toBe(0);
    const err = await refusal(readBoundedFile('/proc/self/maps', { maxBytes: 64, what: 'config file' }));
    expect(err.message).toMatch(/^config file \/proc\/self\/maps grew past the 64 bytes limit for a config file while being read$/);
    expect(refusalSync(() => readBoundedFileSync('/proc/self/maps', { maxBytes: 64, what: 'config file' })).message).toMatch(/grew past/);
  });

  it('refuses a FIFO at once without opening it for reading (no writer needed), async and sync', async () => {
    const fifo = path.join(inner, 'fifo.json');
    const err = await refusal(readBoundedFile(fifo, opts));
    expect(err.message).toBe(`seccomp profile ${fifo} is a FIFO, not a regular file: refused without reading it`);
    expect(refusalSync(() => readBoundedFileSync(fifo, opts)).message).toMatch(/is a FIFO/);
    // A read open would have consumed no writer; a later writer-less open must still fail, not hang.
    expect((await refusal(openRegularFile(fifo, { what: 'checkpoint archive' }))).details.kind).toBe('a FIFO');
  });

  it('refuses a character device (/dev/zero, directly or through a symlink) without reading it', async () => {
    expect((await refusal(readBoundedFile('/dev/zero', opts))).message).toMatch(/^seccomp profile \/dev\/zero is a character device, not a regular file/);
    expect((await refusal(readBoundedFile(path.join(inner, 'zero.json'), opts))).message).toMatch(/is a character device/);
  });

  it('confineTo: a symlink staying inside is read, one leading out is refused without reading', async () => {
    expect(await readBoundedText(path.join(inner, 'link-in.json'), { ...opts, confineTo: inner })).toBe('{"a":1}');
    const out = path.join(inner, 'link-out.json');
    const err = await refusal(readBoundedFile(out, { ...opts, confineTo: inner }));
    expect(err.message).toBe(`seccomp profile ${out} leaves the directory ${inner} (a symbolic link or .. pointing outside it): refused`);
    expect(err.message).not.toContain('secret');
    expect(refusalSync(() => readBoundedFileSync(out, { ...opts, confineTo: inner })).message).toMatch(/leaves the directory/);
    // Without confinement the same link is an ordinary file.
    expect(await readBoundedText(out, opts)).toBe(secret);
  });

  it('confineTo: a path climbing out with .. is refused', async () => {
    const climb = path.join(inner, '..', 'outside.txt');
    expect((await refusal(readBoundedFile(`${inner}/../outside.txt`, { ...opts, confineTo: inner }))).message).toMatch(/leaves the directory/);
    expect(climb).toBe(path.join(dir, 'outside.txt'));
  });

  it('a missing file is NOT_FOUND saying so; a symlink loop is named as one', async () => {
    const missing = path.join(inner, 'missing.json');
    const err = await refusal(readBoundedFile(missing, opts));
    expect(err).toMatchObject({ code: 'NOT_FOUND', message: `seccomp profile ${missing} does not exist`, details: { errno: 'ENOENT' } });
    expect(readFailure(err)).toBe('ENOENT: does not exist');
    const loop = await refusal(readBoundedFile(path.join(inner, 'loop-a'), opts));
    expect(loop).toMatchObject({ code: 'INVALID_ARGUMENT', details: { errno: 'ELOOP' } });
    expect(loop.message).toMatch(/symlink loop/);
  });

  it('noFollow refuses a symlink as the last element; a directory is refused', async () => {
    const err = await refusal(openRegularFile(path.join(inner, 'link-in.json'), { what: 'checkpoint archive', noFollow: true }));
    expect(err.details.kind).toBe('a symbolic link');
    expect((await refusal(readBoundedFile(inner, opts))).message).toBe(`seccomp profile ${inner} is a directory, expected a file`);
  });

  it('openRegularFile hands back a readable handle of the regular file', async () => {
    const { handle, stats } = await openRegularFile(path.join(inner, 'ok.json'), { what: 'checkpoint archive', noFollow: true });
    try {
      expect(stats.size).toBe(7);
      expect((await handle.readFile()).toString()).toBe('{"a":1}');
    } finally {
      await handle.close();
    }
  });
});
