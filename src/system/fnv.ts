/**
 * 32-bit FNV-1a of the bytes of `text` (UTF-8), as Go's hash/fnv New32a: the kubelet's
 * container hash and its checkpoint checksums are both this.
 */
export function fnv32a(text: string): number {
  let h = 0x811c9dc5;
  for (const b of Buffer.from(text, 'utf8')) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}
