import { describe, expect, it } from 'vitest';
import {
  archiveBelongsTo,
  archiveName,
  archivesBeyondRetention,
  archivesBeyondRetentionAfter,
  chooseArchiveName,
  nextArchiveSeq,
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

describe('nextArchiveSeq', () => {
  const n = (ms: number, seq = 0, c = 'app') => archiveName('web-0', 'default', c, ms, seq);
  it('goes above every suffix of the same second on disk, for this container only', () => {
    expect(nextArchiveSeq([], 'web-0', 'default', 'app', T)).toBe(0);
    expect(nextArchiveSeq([n(T)], 'web-0', 'default', 'app', T)).toBe(1);
    // Retention removed the plain name and -1: the next is still above -2, never 0 again.
    expect(nextArchiveSeq([n(T, 2), n(T, 3), 'kubelet.crt'], 'web-0', 'default', 'app', T)).toBe(4);
    expect(nextArchiveSeq([n(T, 5, 'sidecar'), n(T - 1000, 7)], 'web-0', 'default', 'app', T)).toBe(0);
  });
  it('goes above what this process issued in the same second, even when the directory forgot it', () => {
    expect(nextArchiveSeq([], 'web-0', 'default', 'app', T, { second: Math.floor(T / 1000), seq: 4 })).toBe(5);
    expect(nextArchiveSeq([n(T, 7)], 'web-0', 'default', 'app', T, { second: Math.floor(T / 1000), seq: 4 })).toBe(8);
    expect(nextArchiveSeq([], 'web-0', 'default', 'app', T + 1000, { second: Math.floor(T / 1000), seq: 4 })).toBe(0);
  });
  it('five names in one second with retention 2 in between are distinct and each ranks newest when made', () => {
    let dir: string[] = [];
    let last: { second: number; seq: number } | undefined;
    const made: string[] = [];
    for (let i = 0; i < 5; i++) {
      const seq = nextArchiveSeq(dir, 'web-0', 'default', 'app', T + i * 100, last);
      const name = chooseArchiveName('web-0', 'default', 'app', T + i * 100, (x) => dir.includes(x), seq);
      last = { second: Math.floor(T / 1000), seq: parseArchiveName(name)!.seq };
      made.push(name);
      dir.push(name);
      const parsed = dir.map((x) => ({ name: x, ...parseArchiveName(x)! }));
      const gone = archivesBeyondRetentionAfter(parsed, 2, name).map((x) => x.name);
      expect(gone).not.toContain(name);
      dir = dir.filter((x) => !gone.includes(x));
      expect(dir).toContain(name);
    }
    expect(new Set(made).size).toBe(5);
    expect(dir).toEqual(made.slice(-2));
  });
});

describe('archivesBeyondRetentionAfter', () => {
  const a = (name: string, time: number, seq = 0) => ({ name, time, seq });
  it('keeps the one just written and the newest keep-1 others, whatever the written one ranks', () => {
    const all = [a('old', 1000), a('mid', 2000), a('new', 3000), a('written', 500)];
    expect(archivesBeyondRetentionAfter(all, 2, 'written').map((x) => x.name)).toEqual(['mid', 'old']);
    expect(archivesBeyondRetentionAfter(all, 1, 'written').map((x) => x.name)).toEqual(['new', 'mid', 'old']);
    expect(archivesBeyondRetentionAfter(all, 1, 'new').map((x) => x.name)).toEqual(['mid', 'old', 'written']);
    expect(archivesBeyondRetentionAfter(all, 0, 'written')).toEqual([]);
    expect(archivesBeyondRetentionAfter(all, 9, 'written')).toEqual([]);
  });
});
