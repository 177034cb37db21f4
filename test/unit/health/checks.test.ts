import { describe, expect, it } from 'vitest';
import { HealthRegistry, renderHealthz } from '../../../src/health/checks.js';

describe('HealthRegistry + renderHealthz', () => {
  it('answers ok when all pass, lists every check with verbose', async () => {
    const h = new HealthRegistry();
    h.add({ name: 'a', check() {} });
    h.add({ name: 'b', check: async () => {} });
    const r = await h.run();
    expect(renderHealthz(r, false)).toEqual({ status: 200, body: 'ok' });
    expect(renderHealthz(r, true)).toEqual({ status: 200, body: '[+]a ok\n[+]b ok\nhealthz check passed\n' });
  });

  it('answers 500 naming the failing checks and their reasons', async () => {
    const h = new HealthRegistry();
    h.add({ name: 'a', check() {} });
    h.add({ name: 'lockfile', check() { throw new Error('lock file /x was deleted'); } });
    const r = await h.run();
    expect(r.ok).toBe(false);
    expect(renderHealthz(r, false)).toEqual({ status: 500, body: '[+]a ok\n[-]lockfile failed: lock file /x was deleted\nhealthz check failed\n' });
  });

  it('fails a check that does not answer in time', async () => {
    const h = new HealthRegistry();
    h.add({ name: 'slow', check: () => new Promise(() => {}) });
    const r = await h.run(20);
    expect(r.results).toEqual([{ name: 'slow', ok: false, reason: 'check timed out after 20ms' }]);
  });

  it('refuses two checks with the same name', () => {
    const h = new HealthRegistry();
    h.add({ name: 'a', check() {} });
    expect(() => h.add({ name: 'a', check() {} })).toThrow(/duplicate/);
  });
});
