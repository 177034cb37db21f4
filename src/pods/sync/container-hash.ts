/**
 * `io.kubernetes.container.hash` exactly as the kubelet computes it
 * (HashContainer in pkg/kubelet/container/helpers.go, Kubernetes v1.31 and later, v1.35
 * included), so that a nodelet taking over a node from a running kubelet sees the
 * kubelet's containers as unchanged and keeps them running.
 *
 * The kubelet hashes only the fields a running container cannot change without a
 * restart, `name` and `image`: it encodes them with Go's encoding/json as a
 * map[string]string (keys in sorted order), prints that byte slice with
 * k8s.io/apimachinery's dump.ForHash (spew `%#v`: `([]uint8)[123 34 ...]`), hashes the
 * text with 32-bit FNV-1a and writes the result with strconv.FormatUint(h, 16): lowercase
 * hex, no padding.
 */
import type { Container } from 'kubernetes-types/core/v1.js';
import { fnv32a } from '../../system/fnv.js';

/**
 * A string as Go's encoding/json writes it (json.Marshal, HTML escaping on): like
 * JSON.stringify, plus `<`, `>`, `&`, U+2028 and U+2029 as `\u003c`, `\u003e`, `\u0026`,
 * `\u2028`, `\u2029`. A lone surrogate (not valid UTF-8 in Go) becomes U+FFFD.
 */
export function goJsonString(s: string): string {
  const wellFormed = s.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
  return JSON.stringify(wellFormed).replace(
    /[<>&\u2028\u2029]/g,
    (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/**
 * The JSON the kubelet hashes for a container: Go's encoding of
 * `map[string]string{"name": c.Name, "image": c.Image}` (map keys sorted, so `image`
 * first; an unset image is "").
 */
export function hashedFieldsJson(c: Pick<Container, 'name' | 'image'>): string {
  return `{"image":${goJsonString(c.image ?? '')},"name":${goJsonString(c.name ?? '')}}`;
}

/** The kubelet's HashContainer value of `c`, as a number. */
export function hashContainer(c: Pick<Container, 'name' | 'image'>): number {
  const bytes = Buffer.from(hashedFieldsJson(c), 'utf8');
  // dump.ForHash(containerJSON): spew's `%#v` of a []byte.
  return fnv32a(`([]uint8)[${bytes.join(' ')}]`);
}

/**
 * Hashes already computed, by name and image: every sync of every pod asks for each of its
 * containers' hash, and computing one builds and hashes a ~300-character string (at 110
 * pods, a sixth of a periodic sync's CPU). Cleared when it reaches MEMO_MAX entries.
 */
const memo = new Map<string, string>();
const MEMO_MAX = 4096;

/** `io.kubernetes.container.hash` for `c`: strconv.FormatUint(HashContainer(c), 16). */
export function containerHash(c: Pick<Container, 'name' | 'image'>): string {
  const name = c.name ?? '';
  const key = `${name.length}:${name}${c.image ?? ''}`;
  let h = memo.get(key);
  if (h === undefined) {
    if (memo.size >= MEMO_MAX) memo.clear();
    h = hashContainer(c).toString(16);
    memo.set(key, h);
  }
  return h;
}

export { fnv32a };
