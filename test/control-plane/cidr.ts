/**
 * Pod CIDRs for nodes, as kube-controller-manager's node IPAM controller hands them out
 * with `--allocate-node-cidrs --cluster-cidr=<cidr> --node-cidr-mask-size=<n>` (range
 * allocator): the cluster range cut into node-sized blocks (a /24 by default), the lowest
 * free one to each new node, never one block to two nodes, and a node's block free again
 * once the node is gone. IPv4 only. Pure bookkeeping: the server calls it on node create
 * and delete.
 */

export class CidrError extends Error {}

function parseIPv4(s: string): number | undefined {
  const parts = s.split('.');
  if (parts.length !== 4 || !parts.every((p) => /^\d{1,3}$/.test(p) && Number(p) <= 255)) return undefined;
  return parts.reduce((n, p) => n * 256 + Number(p), 0);
}

const formatIPv4 = (n: number) => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');

/** `a.b.c.d/n` -> base address and prefix length; throws CidrError naming `what`. */
export function parseCidr(what: string, cidr: string): { base: number; bits: number } {
  const m = /^([^/]+)\/(\d{1,2})$/.exec(cidr);
  const base = m ? parseIPv4(m[1]!) : undefined;
  const bits = m ? Number(m[2]) : NaN;
  if (base === undefined || !(bits >= 0 && bits <= 32)) throw new CidrError(`${what}: "${cidr}" is not an IPv4 CIDR (such as 10.244.0.0/16)`);
  const size = 2 ** (32 - bits);
  if (base % size !== 0) throw new CidrError(`${what}: "${cidr}" has host bits set (its network is ${formatIPv4(base - (base % size))}/${bits})`);
  return { base, bits };
}

export class NodeCidrAllocator {
  readonly #base: number;
  readonly #mask: number;
  readonly #count: number;
  /** Block index -> the node holding it. */
  readonly #used = new Map<number, string>();

  constructor(clusterCIDR: string, nodeMaskSize = 24) {
    const { base, bits } = parseCidr('--cluster-cidr', clusterCIDR);
    if (!Number.isInteger(nodeMaskSize) || nodeMaskSize < bits || nodeMaskSize > 30) {
      throw new CidrError(`--node-cidr-mask-size: ${nodeMaskSize} must be an integer from the cluster CIDR's prefix length (${bits}) to 30`);
    }
    this.#base = base;
    this.#mask = nodeMaskSize;
    this.#count = 2 ** (nodeMaskSize - bits);
  }

  #cidr(i: number): string {
    return `${formatIPv4(this.#base + i * 2 ** (32 - this.#mask))}/${this.#mask}`;
  }

  /** The block index of a CIDR that is exactly one of ours, else undefined. */
  #index(cidr: string): number | undefined {
    let p: { base: number; bits: number };
    try {
      p = parseCidr('podCIDR', cidr);
    } catch {
      return undefined;
    }
    if (p.bits !== this.#mask) return undefined;
    const i = (p.base - this.#base) / 2 ** (32 - this.#mask);
    return Number.isInteger(i) && i >= 0 && i < this.#count ? i : undefined;
  }

  /** The lowest free block for `node`; throws CidrError when the cluster range is full. */
  allocate(node: string): string {
    for (let i = 0; i < this.#count; i++) {
      if (!this.#used.has(i)) {
        this.#used.set(i, node);
        return this.#cidr(i);
      }
    }
    throw new CidrError(`no pod CIDR left for node "${node}": all ${this.#count} blocks of /${this.#mask} are in use`);
  }

  /**
   * Records a node that came with its own podCIDR: a block of ours is marked used (false
   * when another node holds it already); one outside the range is not ours to track (true).
   */
  occupy(node: string, cidr: string): boolean {
    const i = this.#index(cidr);
    if (i === undefined) return true;
    const holder = this.#used.get(i);
    if (holder !== undefined && holder !== node) return false;
    this.#used.set(i, node);
    return true;
  }

  /** Frees the node's block (a CIDR that is not ours, or held by another node, is ignored). */
  release(node: string, cidr: string): void {
    const i = this.#index(cidr);
    if (i !== undefined && this.#used.get(i) === node) this.#used.delete(i);
  }

  get inUse(): number {
    return this.#used.size;
  }
}
