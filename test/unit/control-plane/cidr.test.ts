import { describe, expect, it } from 'vitest';
import { CidrError, NodeCidrAllocator, parseCidr } from '../../control-plane/cidr.js';

describe('node pod CIDR allocation (--allocate-node-cidrs)', () => {
  it('gives each new node the lowest free /24 of the cluster range, never one block to two nodes', () => {
    const a = new NodeCidrAllocator('10.244.0.0/16');
    expect(['n1', 'n2', 'n3'].map((n) => a.allocate(n))).toEqual(['10.244.0.0/24', '10.244.1.0/24', '10.244.2.0/24']);
    expect(a.inUse).toBe(3);
  });

  it('frees a deleted node\'s block for the next node; a release by another node or of a foreign CIDR changes nothing', () => {
    const a = new NodeCidrAllocator('10.244.0.0/16');
    a.allocate('n1');
    const b = a.allocate('n2');
    a.allocate('n3');
    a.release('n1', b);
    a.release('n2', '192.168.0.0/24');
    expect(a.allocate('n4')).toBe('10.244.3.0/24');
    a.release('n2', b);
    expect(a.allocate('n5')).toBe(b);
  });

  it('uses the mask size; a full range allocates nothing more until a node goes', () => {
    const a = new NodeCidrAllocator('10.1.2.0/24', 26);
    expect(['a', 'b', 'c', 'd'].map((n) => a.allocate(n))).toEqual(['10.1.2.0/26', '10.1.2.64/26', '10.1.2.128/26', '10.1.2.192/26']);
    expect(() => a.allocate('e')).toThrow('no pod CIDR left for node "e": all 4 blocks of /26 are in use');
    a.release('c', '10.1.2.128/26');
    expect(a.allocate('e')).toBe('10.1.2.128/26');
    // The whole range as one node's block: exactly one node.
    const one = new NodeCidrAllocator('10.244.107.0/24', 24);
    expect(one.allocate('n1')).toBe('10.244.107.0/24');
    expect(() => one.allocate('n2')).toThrow(CidrError);
  });

  it('records a node that brings its own podCIDR, and refuses that block to another node', () => {
    const a = new NodeCidrAllocator('10.244.0.0/16');
    expect(a.occupy('n1', '10.244.0.0/24')).toBe(true);
    expect(a.occupy('n2', '10.244.0.0/24')).toBe(false);
    expect(a.occupy('n3', '172.16.0.0/24')).toBe(true); // outside the range: not tracked
    expect(a.allocate('n4')).toBe('10.244.1.0/24');
  });

  it('refuses a bad cluster CIDR or mask size, naming the flag', () => {
    expect(() => new NodeCidrAllocator('10.244.0.0')).toThrow('--cluster-cidr: "10.244.0.0" is not an IPv4 CIDR (such as 10.244.0.0/16)');
    expect(() => new NodeCidrAllocator('10.244.1.0/16')).toThrow('--cluster-cidr: "10.244.1.0/16" has host bits set (its network is 10.244.0.0/16)');
    expect(() => new NodeCidrAllocator('fd00::/64')).toThrow(/^--cluster-cidr: /);
    expect(() => new NodeCidrAllocator('10.244.0.0/16', 8)).toThrow('--node-cidr-mask-size: 8 must be an integer from the cluster CIDR\'s prefix length (16) to 30');
    expect(() => new NodeCidrAllocator('10.244.0.0/16', 31)).toThrow(/^--node-cidr-mask-size: 31 /);
    expect(parseCidr('x', '192.168.0.0/16')).toEqual({ base: 0xc0a80000, bits: 16 });
  });
});
