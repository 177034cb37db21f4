import { describe, expect, it } from 'vitest';
import {
  archiveBelongsTo,
  archiveName,
  archivesBeyondRetention,
  chooseArchiveName,
  formatTimestamp,
  parseArchiveName,
  parseTimeoutParam,
  validateSegment,
  type SegmentKind,
} from '../../../src/checkpoint/names.js';

const T = Date.UTC(2026, 10, 22, 23, 40, 5, 678);

describe('validateSegment', () => {
  it.each([
    ['namespace', 'default', 'default'],
    ['namespace', 'kube-system', 'kube-system'],
    ['pod', 'web-0', 'web-0'],
    ['pod', 'etcd.node-a', 'etcd.node-a'],
    ['pod', 'web%2D0', 'web-0'],
    ['container', 'app', 'app'],
    ['container', 'a'.repeat(63), 'a'.repeat(63)],
  ] as [SegmentKind, string, string][])('%s %j is the name %j', (kind, raw, want) => {
    expect(validateSegment(kind, raw)).toBe(want);
  });

  it.each([
    ['namespace', '..', 'namespace ".." in the path is not a valid name'],
    ['namespace', '%2e%2e', 'namespace ".." in the path is not a valid name'],
    ['pod', '.', 'pod "." in the path is not a valid name'],
    ['pod', 'a%2Fb', 'pod "a/b" in the path is not a valid name'],
    ['pod', 'a%2fb', 'pod "a/b" in the path is not a valid name'],
    ['pod', '..%2F..%2Fetc', 'pod "../../etc" in the path is not a valid name'],
    ['pod', 'a..b', 'pod "a..b" in the path is not a valid name'],
    ['container', '', 'container in the path is empty'],
    ['container', undefined, 'container in the path is empty'],
    ['container', 'App', 'container "App" in the path is not a valid name'],
    ['container', 'a.b', 'container "a.b" in the path is not a valid name'],
    ['container', '-a', 'container "-a" in the path is not a valid name'],
    ['container', 'a'.repeat(64), `container "${'a'.repeat(64)}" in the path is not a valid name`],
    ['namespace', '%zz', 'namespace "%zz" in the path is not valid percent-encoding'],
    ['namespace', 'a%00b', 'namespace "a\\u0000b" in the path is not a valid name'],
    ['pod', 'a\\b', 'pod "a\\\\b" in the path is not a valid name'],
  ] as [SegmentKind, string | undefined, string][])('%s %j -> 400 naming it', (kind, raw, msg) => {
    expect(() => validateSegment(kind, raw)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', details: { param: kind }, message: expect.stringContaining(msg) }));
  });
});

describe('parseTimeoutParam', () => {
  it.each([
    [[], 0],
    [['0'], 0],
    [['30'], 30],
    [['007'], 7],
    [['999999999999999'], 999999999999999],
  ] as [string[], number][])('%j -> %i', (v, want) => {
    expect(parseTimeoutParam(v)).toBe(want);
  });

  it.each([[['-1']], [['1.5']], [['']], [['abc']], [['1e3']], [[' 5']], [['0x10']], [['1000000000000000']], [['5', '6']]])('%j -> 400 naming timeout', (v) => {
    expect(() => parseTimeoutParam(v)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', details: { param: 'timeout' }, message: expect.stringContaining('timeout') }));
  });
});

describe('archive names', () => {
  it('formats the kubelet name with an RFC 3339 second timestamp in UTC', () => {
    expect(formatTimestamp(T)).toBe('2026-11-22T23:40:05Z');
    expect(archiveName('web-0', 'default', 'app', T)).toBe('checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar');
    expect(archiveName('web-0', 'default', 'app', T, 2)).toBe('checkpoint-web-0_default-app-2026-11-22T23:40:05Z-2.tar');
  });

  it('gives same-second checkpoints distinct names, never a taken one', () => {
    const taken = new Set<string>();
    const names = [0, 1, 2].map(() => {
      const n = chooseArchiveName('web-0', 'default', 'app', T, (x) => taken.has(x));
      taken.add(n);
      return n;
    });
    expect(names).toEqual([
      'checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar',
      'checkpoint-web-0_default-app-2026-11-22T23:40:05Z-1.tar',
      'checkpoint-web-0_default-app-2026-11-22T23:40:05Z-2.tar',
    ]);
    // The next second starts without a suffix again.
    expect(chooseArchiveName('web-0', 'default', 'app', T + 1000, (x) => taken.has(x))).toBe('checkpoint-web-0_default-app-2026-11-22T23:40:06Z.tar');
  });

  it('reads names back, with every reading of an ambiguous one', () => {
    expect(parseArchiveName('checkpoint-web-0_default-app-2026-11-22T23:40:05Z.tar')).toEqual({
      pod: 'web-0',
      candidates: [{ namespace: 'default', container: 'app' }],
      timestamp: '2026-11-22T23:40:05Z',
      time: Date.UTC(2026, 10, 22, 23, 40, 5),
      seq: 0,
    });
    expect(parseArchiveName('checkpoint-etcd.node-a_kube-system-etcd-main-2026-11-22T23:40:05Z-3.tar')).toEqual({
      pod: 'etcd.node-a',
      candidates: [
        { namespace: 'kube', container: 'system-etcd-main' },
        { namespace: 'kube-system', container: 'etcd-main' },
        { namespace: 'kube-system-etcd', container: 'main' },
      ],
      timestamp: '2026-11-22T23:40:05Z',
      time: Date.UTC(2026, 10, 22, 23, 40, 5),
      seq: 3,
    });
    // The kubelet's local-time stamps read too.
    expect(parseArchiveName('checkpoint-p_ns-c-2026-11-23T00:40:05+01:00.tar')?.time).toBe(Date.UTC(2026, 10, 22, 23, 40, 5));
  });

  it.each(['kubelet.crt', 'checkpoint-p_ns-c-2026-11-22T23:40:05Z.tar.tmp', 'checkpoint-p_ns-c.tar', 'checkpoint-P_ns-c-2026-11-22T23:40:05Z.tar', 'checkpoint-p_nsc-2026-11-22T23:40:05Z.tar', 'checkpoint-p_ns-c-2026-13-45T23:40:05Z.tar'])(
    '%j is not an archive name',
    (n) => {
      expect(parseArchiveName(n)).toBeUndefined();
    },
  );

  it('round-trips every name it makes', () => {
    for (const [p, ns, c] of [['a', 'b', 'c'], ['web.x-1', 'kube-system', 'side-car'], ['p', 'n', 'a'.repeat(63)]] as const) {
      for (const seq of [0, 1, 12]) {
        const parsed = parseArchiveName(archiveName(p, ns, c, T, seq))!;
        expect(parsed.pod).toBe(p);
        expect(parsed.seq).toBe(seq);
        expect(parsed.time).toBe(Math.floor(T / 1000) * 1000);
        expect(archiveBelongsTo(parsed, p, ns, c)).toBe(true);
        expect(archiveBelongsTo(parsed, p, ns, `${c}x`)).toBe(false);
      }
    }
  });
});

describe('retention', () => {
  const a = (time: number, seq = 0) => ({ time, seq, id: `${time}-${seq}` });
  it('keeps the newest N (same-second suffixes count as newer), removes the rest; 0 keeps all', () => {
    const all = [a(1000), a(3000), a(2000), a(3000, 1), a(3000, 2), a(500)];
    expect(archivesBeyondRetention(all, 3).map((x) => x.id)).toEqual(['2000-0', '1000-0', '500-0']);
    expect(archivesBeyondRetention(all, 10)).toEqual([]);
    expect(archivesBeyondRetention(all, 0)).toEqual([]);
    expect(archivesBeyondRetention(all, -1)).toEqual([]);
    expect(archivesBeyondRetention(all, 1).map((x) => x.id)).toEqual(['3000-1', '3000-0', '2000-0', '1000-0', '500-0']);
  });
});
