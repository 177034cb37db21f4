import fs from 'node:fs';
import path from 'node:path';
import type { Pod, Volume } from 'kubernetes-types/core/v1.js';
import { afterEach, describe, expect, it } from 'vitest';
import { parseQuantity } from '../../../../src/config/quantity.js';
import { ApiVolumes } from '../../../../src/pods/volumes/api-volumes.js';
import { MAX_TOKEN_AGE_MS, TokenManager, tokenRefreshAt } from '../../../../src/pods/volumes/token-manager.js';
import { VirtualClock } from '../../../helpers/clock.js';
import { FakeApiObjects } from '../../../fakes/api-objects-port.js';

const MIN = 60_000;
const spec = (expirationSeconds: number, uid = 'u1') => ({ audiences: ['vault'], expirationSeconds, boundPod: { name: 'web', uid } });

describe('the token manager', () => {
  it("renews at 80 % of the lifetime, or 24 h, less the jitter, as the kubelet's requiresRefresh", () => {
    const exp = Date.UTC(2026, 0, 1, 12, 0, 0);
    // 10 minutes: due 2 minutes before it expires (8 minutes after issue), less 0-9 s of jitter.
    expect(exp - tokenRefreshAt(exp, 600, 0)).toBe(2 * MIN);
    expect(exp - tokenRefreshAt(exp, 600, 9000)).toBe(2 * MIN + 9000);
    // 48 hours: due after 24 h, not 38.4.
    expect(tokenRefreshAt(exp, 48 * 3600, 0)).toBe(exp - 48 * 3600_000 + MAX_TOKEN_AGE_MS);
  });

  it('a 10-minute token is cached until before 8 minutes, then renewed; keys separate pods, audiences and lifetimes', async () => {
    const clock = new VirtualClock();
    const api = new FakeApiObjects(clock);
    const tokens = new TokenManager({ request: (ns, sa, s) => api.requestToken(ns, sa, s), clock, random: () => 0.999 });
    const first = await tokens.get('shop', 'builder', spec(600));
    expect(first.refreshAt - clock.t).toBe(8 * MIN - 9000);
    await clock.advance(7 * MIN);
    expect((await tokens.get('shop', 'builder', spec(600))).token).toBe(first.token);
    expect(api.tokenRequests).toHaveLength(1);
    await clock.advance(MIN - 9000);
    const renewed = await tokens.get('shop', 'builder', spec(600));
    expect(renewed.token).not.toBe(first.token);
    expect(api.tokenRequests.map((r) => r.at - api.tokenRequests[0]!.at)).toEqual([0, 8 * MIN - 9000]);
    // Another pod, another lifetime or audience: a token of its own.
    await tokens.get('shop', 'builder', spec(600, 'u2'));
    await tokens.get('shop', 'builder', spec(3600));
    await tokens.get('shop', 'builder', { ...spec(600), audiences: [] });
    expect(api.tokenRequests).toHaveLength(5);
    tokens.forgetPod('u2');
    expect(tokens.size).toBe(3);
  });

  it('renews by the lifetime the API server granted (a capped one), not by the one asked', async () => {
    const clock = new VirtualClock();
    let n = 0;
    // An API server capping tokens at 20 s (--service-account-max-token-expiration): asked 600, granted 20.
    const request = async () => ({ token: `t${++n}`, expirationTimestamp: new Date(clock.now() + 20_000).toISOString(), expirationSeconds: 20 });
    const tokens = new TokenManager({ request, clock, random: () => 0 });
    const first = await tokens.get('shop', 'builder', spec(600));
    // Due at 80 % of 20 s (16 s), not "2 minutes before expiry" (already past): cached until then.
    expect(first.refreshAt - clock.t).toBe(16_000);
    await clock.advance(15_000);
    expect((await tokens.get('shop', 'builder', spec(600))).token).toBe('t1');
    await clock.advance(1000);
    expect((await tokens.get('shop', 'builder', spec(600))).token).toBe('t2');
    expect(n).toBe(2);
  });

  it('a renewal that fails keeps the cached token while it is valid; an expired one is an error', async () => {
    const clock = new VirtualClock();
    const api = new FakeApiObjects(clock);
    const tokens = new TokenManager({ request: (ns, sa, s) => api.requestToken(ns, sa, s), clock, random: () => 0 });
    const first = await tokens.get('shop', 'builder', spec(600));
    api.down = true;
    await clock.advance(9 * MIN);
    expect((await tokens.get('shop', 'builder', spec(600))).token).toBe(first.token);
    await clock.advance(MIN);
    await expect(tokens.get('shop', 'builder', spec(600))).rejects.toThrow('ECONNREFUSED');
    api.down = false;
    expect((await tokens.get('shop', 'builder', spec(600))).token).not.toBe(first.token);
  });
});

describe('a projected token in a running pod', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('a 10-minute token is rewritten in the volume before 8 minutes, with no pod sync, and again after', async () => {
    const root = fs.mkdtempSync(path.join('/dev/shm', 'nodelet-token-'));
    dirs.push(root);
    const clock = new VirtualClock();
    const objects = new FakeApiObjects(clock);
    const volumes = new ApiVolumes({ rootDir: root, quantity: (q) => parseQuantity(String(q)).value, objects, clock, random: () => 0.5 });
    const uid = '6d3c9a2e-1f4b-4c8e-9a7d-5b2e1c0f3a44';
    const v: Volume = { name: 'tok', projected: { sources: [{ serviceAccountToken: { path: 'token', expirationSeconds: 600, audience: 'vault' } }] } };
    const pod: Pod = { metadata: { name: 'web', namespace: 'shop', uid }, spec: { containers: [{ name: 'app', image: 'busybox' }], volumes: [v] } };
    const dir = await volumes.setUp(pod, v);
    const read = () => fs.readFileSync(path.join(dir, 'token'), 'utf8');
    const start = clock.t;
    expect(read()).toBe(`token-1-default-${uid}`);
    // Time moves to the renewal the volume set (and no further while the files are written:
    // the next renewal's wait is registered once the volume holds the new token).
    await clock.advanceToNext();
    await clock.whenSleeping();
    expect(objects.tokenRequests).toHaveLength(2);
    const renewedAfter = objects.tokenRequests[1]!.at - start;
    expect(renewedAfter).toBeLessThan(8 * MIN);
    expect(renewedAfter).toBeGreaterThanOrEqual(8 * MIN - 10_000);
    expect(read()).toBe(`token-2-default-${uid}`);
    expect(objects.tokenRequests[1]!.spec).toEqual({ audiences: ['vault'], expirationSeconds: 600, boundPod: { name: 'web', uid } });
    // And the next one, less than 8 minutes after that; a pod that is gone renews nothing.
    await clock.advanceToNext();
    await clock.whenSleeping();
    expect(objects.tokenRequests).toHaveLength(3);
    expect(objects.tokenRequests[2]!.at - objects.tokenRequests[1]!.at).toBeLessThan(8 * MIN);
    expect(read()).toBe(`token-3-default-${uid}`);
    volumes.forget(uid);
    await clock.advance(30 * MIN);
    expect(objects.tokenRequests).toHaveLength(3);
  });
});
