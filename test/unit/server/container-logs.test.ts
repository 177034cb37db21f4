import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CriLogDecoder, logTarget, openLog, parseLogOptions, streamLogs, type LogOptions } from '../../../src/server/container-logs.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-logs-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const q = (s: string) => new URLSearchParams(s);
const NOW = Date.parse('2026-11-23T06:00:00Z');

describe('parseLogOptions', () => {
  it('reads the kubelet parameters', () => {
    expect(parseLogOptions(q('timestamps=true&tailLines=5&limitBytes=100&previous=1&follow=false'), NOW)).toEqual({ previous: true, timestamps: true, follow: false, tailLines: 5, limitBytes: 100 });
    expect(parseLogOptions(q('sinceSeconds=60'), NOW).since).toBe(NOW - 60_000);
    expect(parseLogOptions(q('sinceTime=2026-11-23T05:00:00Z'), NOW).since).toBe(Date.parse('2026-11-23T05:00:00Z'));
  });
  it.each([
    ['tailLines=-1', 'query parameter tailLines: "-1" must be an integer >= 0'],
    ['limitBytes=0', 'query parameter limitBytes: "0" must be an integer >= 1'],
    ['sinceSeconds=abc', 'query parameter sinceSeconds: "abc" must be an integer >= 1'],
    ['sinceSeconds=5&sinceTime=2026-11-23T05:00:00Z', 'at most one of sinceTime or sinceSeconds may be specified'],
    ['sinceTime=yesterday', 'query parameter sinceTime: "yesterday" is not an RFC 3339 time'],
    ['follow=maybe', 'query parameter follow: "maybe" is not a boolean'],
  ])('%s -> 400 naming the parameter', (query, message) => {
    expect(() => parseLogOptions(q(query), NOW)).toThrow(message);
  });
});

describe('CriLogDecoder', () => {
  it('joins partial lines, keeps an incomplete line for the next chunk, skips what is not CRI', () => {
    const d = new CriLogDecoder();
    expect(d.push('2026-11-23T06:00:00.1Z stdout P hel')).toEqual([]);
    expect(d.push('\n2026-11-23T06:00:00.2Z stdout F lo\ngarbage\n2026-11-23T06:00:01Z stderr F ')).toEqual([{ ts: '2026-11-23T06:00:00.2Z', ms: Date.parse('2026-11-23T06:00:00.2Z'), text: 'hello' }]);
    expect(d.push('oops\n')).toEqual([{ ts: '2026-11-23T06:00:01Z', ms: Date.parse('2026-11-23T06:00:01Z'), text: 'oops' }]);
  });
});

const pod = (status: Pod['status']): Pod => ({ metadata: { name: 'web', namespace: 'ns', uid: 'u1' }, spec: { containers: [{ name: 'app', image: 'busybox' }] }, status });
const lookup = (p: Pod | undefined) => ({ getPod: () => p, listPods: () => (p ? [p] : []) });

describe('logTarget', () => {
  const running = pod({ containerStatuses: [{ name: 'app', ready: true, restartCount: 2, image: '', imageID: '', containerID: 'containerd://c3', state: { running: {} }, lastState: { terminated: { exitCode: 1, containerID: 'containerd://c2' } } }] });
  it('the current instance is <restartCount>.log, previous the one before', () => {
    expect(logTarget(lookup(running), '/logs', 'ns', 'web', 'app', false).file).toBe('/logs/ns_web_u1/app/2.log');
    expect(logTarget(lookup(running), '/logs', 'ns', 'web', 'app', true).file).toBe('/logs/ns_web_u1/app/1.log');
  });
  it('names what is missing', () => {
    expect(() => logTarget(lookup(undefined), '/logs', 'ns', 'web', 'app', false)).toThrow('pod "web" in namespace "ns" not found');
    expect(() => logTarget(lookup(running), '/logs', 'ns', 'web', 'db', false)).toThrow('container "db" not found in pod "web"');
    const waiting = pod({ containerStatuses: [{ name: 'app', ready: false, restartCount: 0, image: '', imageID: '', state: { waiting: { reason: 'ErrImagePull' } } }] });
    expect(() => logTarget(lookup(waiting), '/logs', 'ns', 'web', 'app', false)).toThrow('container "app" in pod "web" is waiting to start: ErrImagePull');
    expect(() => logTarget(lookup(waiting), '/logs', 'ns', 'web', 'app', true)).toThrow('previous terminated container "app" in pod "web" not found');
  });
});

describe('streamLogs', () => {
  const lines = ['2026-11-23T05:59:00Z stdout F one', '2026-11-23T05:59:30Z stdout P tw', '2026-11-23T05:59:30Z stdout F o', '2026-11-23T05:59:50Z stderr F three', ''].join('\n');
  const run = async (o: Partial<LogOptions>, running = () => false, after?: (file: string) => Promise<void>) => {
    const file = path.join(dir, `${Math.random()}.log`);
    await fsp.writeFile(file, lines);
    const target = { file, running };
    let out = '';
    const done = streamLogs(await openLog(target, 'app'), target, { previous: false, timestamps: false, follow: false, ...o }, (s) => (out += s), new AbortController().signal, 20);
    await after?.(file);
    await done;
    return out;
  };
  it('whole lines, with timestamps, tail, since and a byte limit', async () => {
    expect(await run({})).toBe('one\ntwo\nthree\n');
    expect(await run({ timestamps: true, tailLines: 2 })).toBe('2026-11-23T05:59:30Z two\n2026-11-23T05:59:50Z three\n');
    expect(await run({ tailLines: 0 })).toBe('');
    expect(await run({ since: Date.parse('2026-11-23T05:59:30Z') })).toBe('two\nthree\n');
    expect(await run({ limitBytes: 6 })).toBe('one\ntw');
  });
  it('follow: what the container appends, until it stops', async () => {
    let alive = true;
    const out = await run({ follow: true }, () => alive, async (file) => {
      await new Promise((r) => setTimeout(r, 60));
      await fsp.appendFile(file, '2026-11-23T06:00:01Z stdout F four\n');
      await new Promise((r) => setTimeout(r, 60));
      await fsp.appendFile(file, '2026-11-23T06:00:02Z stdout F five\n');
      alive = false;
    });
    expect(out).toBe('one\ntwo\nthree\nfour\nfive\n');
  });
  it('a missing file is a 404 naming the container', async () => {
    await expect(openLog({ file: path.join(dir, 'none/0.log'), running: () => false }, 'app')).rejects.toThrow('container "app" has no log file 0.log');
  });
});
