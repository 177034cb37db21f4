/**
 * The relist's two answers (unfiltered ListPodSandbox and ListContainers, every second)
 * decoded entry by entry, reusing what did not change.
 *
 * Idle CPU: decoding both answers whole (protobufjs decode, then toObject with defaults)
 * was the largest part of an idle nodelet's relist with 110 pods, and every entry became
 * new objects each second for the pod runtime to rebuild its observations from. The
 * runtime's answers cannot be compared whole (containerd lists its stores in Go map order,
 * so the same entries come in another order each time), but entries can: each one is a
 * length-delimited message whose first field is its ID. An entry whose bytes equal the
 * bytes of the previous answer's entry with that ID is handed back as the very same
 * (frozen) object; a new or changed one is decoded as before. The same object therefore
 * means "unchanged", which the pod runtime uses to keep its observation of a pod.
 *
 * Map fields: containerd 1.6 writes an entry's labels and annotations (top-level map fields
 * of Container and PodSandbox) in Go map order, which changes from one answer to the next,
 * so an unchanged entry's bytes mostly differ (measured: 19 of 110 idle containers and 23 of
 * 110 sandboxes byte-equal between two answers). When the bytes differ but the length does
 * not, the entry's top-level fields are compared in order, a run of fields with one tag (a
 * map's entries) as a set: equal so, the entries are the same message for Container and
 * PodSandbox, whose only repeated top-level fields are maps (order carries no meaning there). A map nested
 * deeper (an ImageSpec's annotations) in another order still reads as a change: decoded anew,
 * never wrong.
 *
 * Cost under the interpreter-only flags (src/main.ts): that field-by-field compare walked
 * every new entry and matched map entries pairwise, ~6.9 ms of CPU per idle relist at 110
 * pods. Go's map iteration of a small map (up to 8 entries: one bucket, which the kubelet's
 * labels and annotations are) starts at a random slot and wraps around, so the runs of the
 * next answer are rotations of the kept ones (measured: every differing entry of three idle
 * answers). The fast path therefore takes the kept entry's layout (where each run lies, its
 * entry boundaries, the run written twice): the fields outside the runs must equal byte for
 * byte at the same offsets, and each run must occur in the doubled kept run at an entry
 * boundary, which makes it the same entries in rotated order. Anything else falls back to
 * the field-by-field compare: exact either way.
 *
 * Anything not shaped as expected (another field at the top level, an entry not starting
 * with its ID) is decoded in full without reuse: never a wrong answer, only a slower one.
 */

/** Decodes one entry's bytes to the object the CRI client hands out. */
export type EntryDecode<T> = (bytes: Uint8Array) => T;

interface Kept<T> {
  bytes: Buffer;
  value: T;
  /** topFields of `bytes`, made on the first compare that needs them; null: not parsable. */
  fields?: number[] | null;
  /** Where `bytes`' map runs lie, made with `fields`; null: no run (nothing to rotate). */
  layout?: Layout | null;
}

/** The runs of fields with one tag (a map's entries) in a kept entry, for the rotation check. */
interface Layout {
  /** [start, end) of each run, in order. */
  runs: number[];
  /** Each run's bytes written twice, in order. */
  doubled: Buffer[];
  /** Each run's entry offsets from its start (0 included), in order. */
  bounds: number[][];
}

export class ListDecoder<T extends object> {
  readonly #decode: EntryDecode<T>;
  #kept = new Map<string, Kept<T>>();

  constructor(decode: EntryDecode<T>) {
    this.#decode = decode;
  }

  /** The entries of one answer (the repeated field 1 of `raw`), unchanged ones as the same objects as last time. */
  decode(raw: Uint8Array): T[] {
    const buf = Buffer.isBuffer(raw) ? raw : Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
    const out: T[] = [];
    const next = new Map<string, Kept<T>>();
    let pos = 0;
    while (pos < buf.length) {
      if (buf[pos] !== 0x0a) return this.#whole(buf); // only field 1, length-delimited, is expected
      const len = varint(buf, pos + 1);
      if (len < 0 || varintEnd + len > buf.length) return this.#whole(buf);
      const entry = buf.subarray(varintEnd, varintEnd + len);
      pos = varintEnd + len;
      const id = entryId(entry);
      const prev = id === undefined ? undefined : this.#kept.get(id);
      if (prev && (prev.bytes.equals(entry) || (prev.bytes.length === entry.length && (rotated(entry, prev) ?? sameFields(entry, prev))))) {
        out.push(prev.value);
        next.set(id!, prev);
        continue;
      }
      const value = Object.freeze(this.#decode(entry));
      out.push(value);
      // A copy: the entry must not keep the whole answer's buffer alive by reference.
      if (id !== undefined) next.set(id, { bytes: Buffer.from(entry), value });
    }
    this.#kept = next;
    return out;
  }

  /** An answer of unexpected shape: decoded entry by entry where possible, nothing kept. */
  #whole(buf: Buffer): T[] {
    this.#kept = new Map();
    const out: T[] = [];
    let pos = 0;
    while (pos < buf.length) {
      const tag = readVarint(buf, pos);
      if (!tag) break;
      const wire = tag.value & 7;
      if (wire === 2) {
        const len = readVarint(buf, tag.end);
        if (!len || len.end + len.value > buf.length) throw new Error('malformed CRI list answer: an entry runs past the end');
        if (tag.value >>> 3 === 1) out.push(Object.freeze(this.#decode(buf.subarray(len.end, len.end + len.value))));
        pos = len.end + len.value;
      } else if (wire === 0) {
        const v = readVarint(buf, tag.end);
        if (!v) break;
        pos = v.end;
      } else if (wire === 1) pos = tag.end + 8;
      else if (wire === 5) pos = tag.end + 4;
      else throw new Error(`malformed CRI list answer: wire type ${wire}`);
    }
    return out;
  }
}

/** The top-level fields of a message as [tag, start, end] triples (start: the tag's first byte), or undefined when malformed. */
export function topFields(msg: Buffer): number[] | undefined {
  const out: number[] = [];
  let pos = 0;
  while (pos < msg.length) {
    const tag = readVarint(msg, pos);
    if (!tag) return undefined;
    const wire = tag.value & 7;
    let end: number;
    if (wire === 0) {
      let i = tag.end;
      while (i < msg.length && msg[i]! >= 0x80) i++;
      end = i + 1;
    } else if (wire === 2) {
      const len = readVarint(msg, tag.end);
      if (!len) return undefined;
      end = len.end + len.value;
    } else if (wire === 1) end = tag.end + 8;
    else if (wire === 5) end = tag.end + 4;
    else return undefined;
    if (end > msg.length) return undefined;
    out.push(tag.value, pos, end);
    pos = end;
  }
  return out;
}

/** The kept entry's fields and map runs, made once. */
function keptFields<T>(kept: Kept<T>): number[] | null {
  if (kept.fields !== undefined) return kept.fields;
  kept.fields = topFields(kept.bytes) ?? null;
  kept.layout = kept.fields && layoutOf(kept.bytes, kept.fields);
  return kept.fields;
}

function layoutOf(bytes: Buffer, f: number[]): Layout | null {
  const layout: Layout = { runs: [], doubled: [], bounds: [] };
  for (let i = 0; i < f.length; ) {
    let j = i + 3;
    while (j < f.length && f[j] === f[i]) j += 3;
    if (j - i > 3) {
      const start = f[i + 1]!;
      const end = f[j - 1]!;
      const run = bytes.subarray(start, end);
      layout.runs.push(start, end);
      layout.doubled.push(Buffer.concat([run, run]));
      const b: number[] = [];
      for (let x = i; x < j; x += 3) b.push(f[x + 1]! - start);
      layout.bounds.push(b);
    }
    i = j;
  }
  return layout.runs.length ? layout : null;
}

/**
 * The fast check (see the top): true when `entry` (as long as the kept one) is the kept
 * entry with its map runs rotated, false when a byte outside the runs differs (changed, as
 * sameFields would find), undefined when a run is not a rotation (sameFields decides).
 */
function rotated<T>(entry: Buffer, kept: Kept<T>): boolean | undefined {
  if (!keptFields(kept)) return false;
  const layout = kept.layout;
  if (!layout) return undefined;
  const old = kept.bytes;
  const runs = layout.runs;
  let gap = 0;
  for (let r = 0; r < runs.length; r += 2) {
    if (runs[r]! > gap && entry.compare(old, gap, runs[r], gap, runs[r]) !== 0) return false;
    gap = runs[r + 1]!;
  }
  if (gap < entry.length && entry.compare(old, gap, entry.length, gap, entry.length) !== 0) return false;
  for (let r = 0; r < runs.length; r += 2) {
    const start = runs[r]!;
    const len = runs[r + 1]! - start;
    const needle = entry.subarray(start, start + len);
    const doubled = layout.doubled[r / 2]!;
    const bounds = layout.bounds[r / 2]!;
    let at = doubled.indexOf(needle);
    while (at >= 0 && at < len && !bounds.includes(at)) at = doubled.indexOf(needle, at + 1);
    if (at < 0 || at >= len) return undefined;
  }
  return true;
}

/** Which fields of the kept entry's current run are matched already (reused: no allocation per compare). */
let matched = new Uint8Array(64);

/**
 * Whether `entry` has the same top-level fields as the kept entry, the fields of a run with
 * one tag (a map's entries) compared as a set: same tags in the same runs, and each field of
 * a run equal to a distinct field of the kept run. Length checks first, so most candidates
 * cost no byte compare (map entries mostly differ in length).
 */
function sameFields<T>(entry: Buffer, kept: Kept<T>): boolean {
  const k = keptFields(kept);
  if (!k) return false;
  const f = topFields(entry);
  if (!f || f.length !== k.length) return false;
  const old = kept.bytes;
  for (let i = 0; i < f.length; ) {
    const tag = f[i]!;
    let j = i + 3;
    while (j < f.length && f[j] === tag) j += 3;
    for (let x = i; x < j; x += 3) if (k[x] !== tag) return false;
    if (j < k.length && k[j] === tag) return false;
    const n = (j - i) / 3;
    if (n === 1) {
      if (f[i + 2]! - f[i + 1]! !== k[i + 2]! - k[i + 1]! || entry.compare(old, k[i + 1]!, k[i + 2]!, f[i + 1]!, f[i + 2]!) !== 0) return false;
    } else {
      if (matched.length < n) matched = new Uint8Array(n * 2);
      matched.fill(0, 0, n);
      for (let x = i; x < j; x += 3) {
        const len = f[x + 2]! - f[x + 1]!;
        let found = false;
        for (let y = i, m = 0; y < j; y += 3, m++) {
          if (matched[m] || k[y + 2]! - k[y + 1]! !== len) continue;
          if (entry.compare(old, k[y + 1]!, k[y + 2]!, f[x + 1]!, f[x + 2]!) === 0) {
            matched[m] = 1;
            found = true;
            break;
          }
        }
        if (!found) return false;
      }
    }
    i = j;
  }
  return true;
}

/** The entry's field 1 (its ID, a string) when it comes first, as the runtimes write it; else undefined. */
function entryId(entry: Buffer): string | undefined {
  if (entry[0] !== 0x0a) return undefined;
  const len = varint(entry, 1);
  if (len < 0 || varintEnd + len > entry.length) return undefined;
  return entry.toString('latin1', varintEnd, varintEnd + len);
}

/** A protobuf varint at `pos` (up to 2^31: tags and lengths), or undefined when truncated or longer. */
export function readVarint(buf: Uint8Array, pos: number): { value: number; end: number } | undefined {
  const value = varint(buf, pos);
  return value < 0 ? undefined : { value, end: varintEnd };
}

/** Where the last `varint` read ended (no object per read: the relist reads two per entry). */
let varintEnd = 0;

/** readVarint without an allocation: the value, its end in `varintEnd`; -1 when truncated or longer. */
function varint(buf: Uint8Array, pos: number): number {
  let value = 0;
  for (let i = 0; i < 5; i++) {
    if (pos + i >= buf.length) return -1;
    const b = buf[pos + i]!;
    value += (b & 0x7f) * 2 ** (7 * i);
    if (b < 0x80) {
      varintEnd = pos + i + 1;
      return value > 0x7fffffff ? -1 : value;
    }
  }
  return -1;
}
