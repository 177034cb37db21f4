/**
 * io.kubernetes.container.hash as the kubelet computes it: a nodelet taking over a node
 * must find the kubelet's containers unchanged (same hash), or it would restart them all.
 */
import { describe, expect, it } from 'vitest';
import { containerHash, fnv32a, goJsonString, hashContainer, hashedFieldsJson } from '../../../src/pods/sync/container-hash.js';
import { containerHash as planContainerHash } from '../../../src/pods/sync/plan.js';

describe('containerHash (the kubelet HashContainer of v1.35)', () => {
  it("reproduces upstream TestHashContainer's expected value (0x8e45cbd0)", () => {
    // pkg/kubelet/container/helpers_test.go: args and ports are set but are not hashed.
    const c = { name: 'test_container', image: 'foo/image:v1', args: ['/bin/sh', '-c', 'echo abc'], ports: [{ containerPort: 8001 }] };
    expect(hashContainer(c)).toBe(0x8e45cbd0);
    expect(containerHash(c)).toBe('8e45cbd0');
    expect(planContainerHash(c)).toBe('8e45cbd0');
  });

  it('changes with the image or the name, not with fields a kubelet does not hash', () => {
    const base = { name: 'app', image: 'busybox:1.36' };
    const h = containerHash(base);
    expect(containerHash({ ...base, image: 'busybox:1.37' })).not.toBe(h);
    expect(containerHash({ ...base, name: 'app2' })).not.toBe(h);
    expect(containerHash({ ...base, command: ['sleep', '1'], env: [{ name: 'A', value: 'b' }], resources: { limits: { cpu: '1' } } } as never)).toBe(h);
  });

  it('answers a repeated name and image from its memo with the same value, and never mixes up a name and image that join alike', () => {
    const pairs = [
      { name: 'ab', image: 'c' },
      { name: 'a', image: 'bc' },
      { name: '', image: 'abc' },
      { name: 'abc', image: '' },
      { name: 'abc' },
    ];
    for (let round = 0; round < 2; round++) for (const p of pairs) expect(containerHash(p)).toBe(hashContainer(p).toString(16));
    expect(new Set(pairs.slice(0, 4).map((p) => containerHash(p))).size).toBe(4);
    // Past its bound the memo starts again, with the same answers.
    for (let i = 0; i < 5000; i++) containerHash({ name: `n${i}`, image: 'x' });
    expect(containerHash({ name: 'ab', image: 'c' })).toBe(hashContainer({ name: 'ab', image: 'c' }).toString(16));
  });

  it('prints like strconv.FormatUint(h, 16): lowercase hex without zero padding', () => {
    // Search a small space for a hash below 0x10000000, whose padded form would differ.
    let found: string | undefined;
    for (let i = 0; i < 5000 && !found; i++) {
      const v = hashContainer({ name: `c${i}`, image: 'x' });
      if (v < 0x10000000) found = containerHash({ name: `c${i}`, image: 'x' });
    }
    expect(found).toBeDefined();
    expect(found).toMatch(/^[1-9a-f][0-9a-f]{0,6}$/);
  });
});

describe('hashedFieldsJson (Go json.Marshal of map[string]string{name, image})', () => {
  it.each([
    [{ name: 'test_container', image: 'foo/image:v1' }, '{"image":"foo/image:v1","name":"test_container"}'],
    // map keys in sorted order; an unset image is the empty string
    [{ name: 'a' }, '{"image":"","name":"a"}'],
    // Go escapes <, > and & (HTML-safe) and U+2028/U+2029
    [{ name: 'a', image: 'r/x<y>&z' }, '{"image":"r/x\\u003cy\\u003e\\u0026z","name":"a"}'],
    [{ name: 'a', image: 'x\u2028y\u2029' }, '{"image":"x\\u2028y\\u2029","name":"a"}'],
    // quotes, backslashes and control characters as Go writes them
    [{ name: 'a', image: 'q"b\\t\tn\n\u0001' }, '{"image":"q\\"b\\\\t\\tn\\n\\u0001","name":"a"}'],
    // non-ASCII stays as UTF-8
    [{ name: 'a', image: 'régistre/ü' }, '{"image":"régistre/ü","name":"a"}'],
  ])('%j -> %s', (c, json) => {
    expect(hashedFieldsJson(c)).toBe(json);
  });

  it('replaces a lone surrogate with U+FFFD as Go does for invalid UTF-8', () => {
    expect(goJsonString('a\uD800b')).toBe('"a\uFFFDb"');
  });
});

describe('fnv32a', () => {
  it.each([
    ['', 0x811c9dc5],
    ['a', 0xe40c292c],
    ['foobar', 0xbf9cf968],
  ])('%j', (text, value) => {
    expect(fnv32a(text)).toBe(value);
  });
});
