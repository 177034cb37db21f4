/**
 * Pure rules of checkpoint archives: which path segments are valid names, how an archive
 * is named (the kubelet's format), how a name is read back, and which archives a
 * retention limit removes. No IO here; src/checkpoint/archive.ts and
 * src/server/checkpoint.ts do the files.
 *
 * Name: `checkpoint-<pod>_<namespace>-<container>-<timestamp>.tar`, the kubelet's
 * `checkpoint-<pod full name>-<container>-<time.RFC3339>.tar`. The kubelet formats local
 * time; nodelet formats UTC (`2026-11-22T23:40:05Z`), also RFC 3339, so names sort by
 * time whatever the host's zone. Two archives of the same container in the same second
 * would collide: the later one gets `-1`, `-2`, ... after the timestamp. Within a second
 * the suffix only grows (nextArchiveSeq), even when retention has deleted the earlier
 * archives of that second: a reused lower suffix would rank older than the survivors and
 * be the first thing retention removes.
 *
 * The format is ambiguous where both the namespace and the container name contain `-`
 * (`p_a-b-c`: namespace `a`, container `b-c`, or namespace `a-b`, container `c`):
 * parseArchiveName returns every reading, and callers choose with what they know.
 */
import { NodeletError } from '../errors.js';

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export function isDns1123Label(s: string): boolean {
  return s.length <= 63 && DNS1123_LABEL.test(s);
}

export function isDns1123Subdomain(s: string): boolean {
  return s.length <= 253 && DNS1123_SUBDOMAIN.test(s);
}

/** The kinds of checkpoint path segments and the rule each follows (as the API server validates them). */
export type SegmentKind = 'namespace' | 'pod' | 'container';

const RULES: Record<SegmentKind, { test: (s: string) => boolean; rule: string }> = {
  namespace: { test: isDns1123Label, rule: "a DNS-1123 label: at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit" },
  pod: { test: isDns1123Subdomain, rule: "a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' or '.', each dot-separated part starting and ending with a letter or digit" },
  container: { test: isDns1123Label, rule: "a DNS-1123 label: at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit" },
};

/** Quotes untrusted text for an error message: JSON-escaped, cut at 100 characters. */
function quote(s: string): string {
  return JSON.stringify(s.length > 100 ? `${s.slice(0, 100)}…` : s);
}

/**
 * The name in a raw (still percent-encoded) URL path segment, or throws INVALID_ARGUMENT
 * naming the segment. Decoding first means `%2F`, `%2e%2e` and friends are judged as what
 * they stand for (`/`, `..`), which no valid name contains: nothing that passes can
 * leave the checkpoints directory.
 */
export function validateSegment(kind: SegmentKind, raw: string | undefined): string {
  if (raw === undefined || raw === '') {
    throw new NodeletError('INVALID_ARGUMENT', `${kind} in the path is empty: expected /checkpoint/<namespace>/<pod>/<container>`, { param: kind });
  }
  let decoded: string;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    throw new NodeletError('INVALID_ARGUMENT', `${kind} ${quote(raw)} in the path is not valid percent-encoding`, { param: kind });
  }
  const r = RULES[kind];
  if (!r.test(decoded)) {
    throw new NodeletError('INVALID_ARGUMENT', `${kind} ${quote(decoded)} in the path is not a valid name: must be ${r.rule}`, { param: kind });
  }
  return decoded;
}

/**
 * The `timeout` query parameter: undefined/absent -> 0 (the runtime's default); otherwise
 * one non-negative integer of seconds in decimal digits. Throws INVALID_ARGUMENT naming
 * `timeout` for anything else (the kubelet answers 404 there; 400 is what it is).
 */
export function parseTimeoutParam(values: readonly string[]): number {
  if (values.length === 0) return 0;
  if (values.length > 1) throw new NodeletError('INVALID_ARGUMENT', `query parameter timeout given ${values.length} times: give it once`, { param: 'timeout' });
  const v = values[0]!;
  // At most 15 digits keeps the value exact in a JS number.
  if (!/^[0-9]{1,15}$/.test(v)) {
    throw new NodeletError('INVALID_ARGUMENT', `query parameter timeout ${quote(v)} is not a non-negative integer number of seconds`, { param: 'timeout' });
  }
  return Number(v);
}

/** RFC 3339 at second precision in UTC, e.g. `2026-11-22T23:40:05Z`. */
export function formatTimestamp(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(/\.000Z$/, 'Z');
}

/** The archive file name; `seq` > 0 adds the same-second suffix. */
export function archiveName(pod: string, namespace: string, container: string, ms: number, seq = 0): string {
  return `checkpoint-${pod}_${namespace}-${container}-${formatTimestamp(ms)}${seq > 0 ? `-${seq}` : ''}.tar`;
}

/**
 * The first name not `taken` for this container at `ms`, from suffix `fromSeq` up (0: the
 * plain name, then `-1`, `-2`...). Pure: the caller's `taken` knows the directory and the
 * names reserved in flight; nextArchiveSeq gives `fromSeq`.
 */
export function chooseArchiveName(pod: string, namespace: string, container: string, ms: number, taken: (name: string) => boolean, fromSeq = 0): string {
  for (let seq = fromSeq; ; seq++) {
    const name = archiveName(pod, namespace, container, ms, seq);
    if (!taken(name)) return name;
  }
}

/** The second a time falls in: archives of one container in one second share a timestamp. */
export function archiveSecond(ms: number): number {
  return Math.floor(ms / 1000);
}

/** The last suffix this process issued for a container, and the second it was for. */
export interface IssuedSeq {
  second: number;
  seq: number;
}

/**
 * The lowest suffix a new archive of (pod, namespace, container) at `ms` may take: one above
 * every suffix of that second among `existing` (the directory's names) and above `last`
 * (what this process issued, which retention may have deleted since). 0 when neither has
 * that second.
 */
export function nextArchiveSeq(existing: Iterable<string>, pod: string, namespace: string, container: string, ms: number, last?: IssuedSeq): number {
  const second = archiveSecond(ms);
  let next = last && last.second === second ? last.seq + 1 : 0;
  for (const n of existing) {
    const p = parseArchiveName(n);
    if (p && archiveSecond(p.time) === second && p.seq >= next && archiveBelongsTo(p, pod, namespace, container)) next = p.seq + 1;
  }
  return next;
}

export interface ParsedArchiveName {
  pod: string;
  /** Every (namespace, container) reading of the name; one in the usual case. */
  candidates: { namespace: string; container: string }[];
  /** The timestamp as written. */
  timestamp: string;
  /** Milliseconds since the epoch. */
  time: number;
  /** Same-second suffix, 0 when none. */
  seq: number;
}

const NAME_RE = /^checkpoint-([^_/]+)_(.+)-(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))(?:-(\d+))?\.tar$/;

/** Reads an archive file name back; undefined when it is not one (another file in the directory). */
export function parseArchiveName(file: string): ParsedArchiveName | undefined {
  const m = NAME_RE.exec(file);
  if (!m) return undefined;
  const [, pod, middle, timestamp, seq] = m as unknown as [string, string, string, string, string | undefined];
  const time = Date.parse(timestamp);
  if (!isDns1123Subdomain(pod) || Number.isNaN(time)) return undefined;
  const candidates: { namespace: string; container: string }[] = [];
  for (let i = middle.indexOf('-'); i > 0; i = middle.indexOf('-', i + 1)) {
    const namespace = middle.slice(0, i);
    const container = middle.slice(i + 1);
    if (isDns1123Label(namespace) && isDns1123Label(container)) candidates.push({ namespace, container });
  }
  if (candidates.length === 0) return undefined;
  return { pod, candidates, timestamp, time, seq: seq === undefined ? 0 : Number(seq) };
}

/** Newest first: by time, then by same-second suffix. */
export function compareNewestFirst(a: { time: number; seq: number }, b: { time: number; seq: number }): number {
  return b.time - a.time || b.seq - a.seq;
}

/**
 * Retention: given the archives of ONE container, the ones to remove so that the newest
 * `keep` remain. `keep` <= 0 means no limit (nothing removed).
 */
export function archivesBeyondRetention<T extends { time: number; seq: number }>(archives: readonly T[], keep: number): T[] {
  if (!(keep > 0)) return [];
  return [...archives].sort(compareNewestFirst).slice(keep);
}

/**
 * Retention right after `written` was made: the archives to remove so that `written` and
 * the newest `keep - 1` others of the container remain. `written` is never among them,
 * whatever its name ranks (a clock set back gives an older timestamp). `keep` <= 0: none.
 */
export function archivesBeyondRetentionAfter<T extends { name: string; time: number; seq: number }>(archives: readonly T[], keep: number, written: string): T[] {
  if (!(keep > 0)) return [];
  return archives.filter((a) => a.name !== written).sort(compareNewestFirst).slice(keep - 1);
}

/** Whether `parsed` is an archive of (pod, namespace, container) under at least one reading. */
export function archiveBelongsTo(parsed: ParsedArchiveName, pod: string, namespace: string, container: string): boolean {
  return parsed.pod === pod && parsed.candidates.some((c) => c.namespace === namespace && c.container === container);
}
