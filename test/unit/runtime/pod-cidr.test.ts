import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log.js';
import { nodePodCIDR } from '../../../src/node/reporter.js';
import { PodCidrUpdater } from '../../../src/runtime/pod-cidr.js';

/** A runtime that records UpdateRuntimeConfig calls and fails while `down`. */
function runtime() {
  const r = {
    calls: [] as string[],
    down: false,
    async updateRuntimeConfig(cidr: string) {
      r.calls.push(cidr);
      if (r.down) throw new Error('UpdateRuntimeConfig: connect ECONNREFUSED');
    },
  };
  return r;
}

describe('PodCidrUpdater', () => {
  it('sends a pod CIDR once, and again only when it changes', async () => {
    const rt = runtime();
    const u = new PodCidrUpdater({ runtime: rt, logger: silentLogger() });
    await u.update('10.244.1.0/24');
    await u.update('10.244.1.0/24');
    await u.update('');
    expect(rt.calls).toEqual(['10.244.1.0/24']);
    await u.update('10.244.2.0/24,fd00::/64');
    expect(rt.calls).toEqual(['10.244.1.0/24', '10.244.2.0/24,fd00::/64']);
    expect(u.sent).toBe('10.244.2.0/24,fd00::/64');
  });

  it('keeps wanting a CIDR the runtime refused, and sends it on retry once the runtime is back', async () => {
    const rt = runtime();
    rt.down = true;
    const u = new PodCidrUpdater({ runtime: rt, logger: silentLogger() });
    await u.update('10.244.1.0/24');
    expect(u.sent).toBe('');
    rt.down = false;
    await u.retry();
    await u.retry();
    expect(rt.calls).toEqual(['10.244.1.0/24', '10.244.1.0/24']);
    expect(u.sent).toBe('10.244.1.0/24');
  });

  it('an update during a call in flight is sent after it', async () => {
    const rt = runtime();
    const u = new PodCidrUpdater({ runtime: rt, logger: silentLogger() });
    const a = u.update('10.244.1.0/24');
    const b = u.update('10.244.2.0/24');
    await Promise.all([a, b]);
    expect(rt.calls).toEqual(['10.244.1.0/24', '10.244.2.0/24']);
    expect(u.sent).toBe('10.244.2.0/24');
  });
});

describe('nodePodCIDR', () => {
  it('joins spec.podCIDRs, falls back to spec.podCIDR, and is empty without either', () => {
    expect(nodePodCIDR({ spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24', 'fd00::/64'] } })).toBe('10.244.1.0/24,fd00::/64');
    expect(nodePodCIDR({ spec: { podCIDR: '10.244.1.0/24' } })).toBe('10.244.1.0/24');
    expect(nodePodCIDR({ spec: {} })).toBe('');
    expect(nodePodCIDR(undefined)).toBe('');
  });
});
