import { describe, expect, it } from 'vitest';
import { parseProcLocks } from '../../../src/system/lock.js';

describe('parseProcLocks', () => {
  it('reads holders and waiters of FLOCK locks and ignores other lock kinds', () => {
    const text = [
      '1: FLOCK  ADVISORY  WRITE 4242 fd:01:1837261 0 EOF',
      '1: -> FLOCK  ADVISORY  WRITE 5151 fd:01:1837261 0 EOF',
      '2: POSIX  ADVISORY  WRITE 777 00:1a:99 0 EOF',
      '3: OFDLCK ADVISORY  READ  -1 00:06:1 0 EOF',
      '4: FLOCK  ADVISORY  READ  88 103:02:42 0 EOF',
      '',
    ].join('\n');
    expect(parseProcLocks(text)).toEqual([
      { waiting: false, access: 'WRITE', pid: 4242, inode: 1837261 },
      { waiting: true, access: 'WRITE', pid: 5151, inode: 1837261 },
      { waiting: false, access: 'READ', pid: 88, inode: 42 },
    ]);
  });
});
