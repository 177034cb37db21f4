/**
 * The request target of an HTTP request, judged before anything routes on it, for every
 * server nodelet runs (healthz, read-only, HTTPS). Pure: no IO, never throws anything but
 * NodeletError INVALID_ARGUMENT (`param: 'url'`) with a message saying what is wrong.
 *
 * Node's parser hands the target over as the client wrote it: `http://a:99999/x`, `*`,
 * `http:///` and `/a%zz` all reach a request handler. nodelet serves only the
 * origin-form (`/path?query`, RFC 9112 §3.2.1): it is no proxy, and routes and
 * authorization attributes are computed from the raw path segments, so anything else is
 * refused here rather than half-understood later. Within the path it refuses what no
 * route can mean and what tricks path-based checks: malformed or non-UTF-8
 * percent-encoding, an encoded `/` or NUL, and `.`/`..` segments (the path is never
 * normalized, so they could only ever be an attempt to confuse).
 */
import { NodeletError } from '../errors.js';

export interface RequestTarget {
  /** The path as sent (still percent-encoded), without the query. */
  rawPath: string;
  /** `/a/b` -> ['a','b']; `/a/` -> ['a','']: raw segments, empty ones kept for the handler to judge. */
  segments: string[];
  query: URLSearchParams;
}

/** Longest target accepted. Node's maxHeaderSize usually refuses longer ones first (431). */
export const MAX_TARGET_LENGTH = 8192;

/** RFC 3986 pchar plus `/`: unreserved, sub-delims, `:`, `@`, and `%` (checked separately). */
const PATH_CHARS = /^[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*$/;
/** Control characters, space and anything outside ASCII: never in a query clients send. */
const BAD_QUERY_CHAR = /[^\x21-\x7e]/;
const BAD_PERCENT = /%(?![0-9A-Fa-f]{2})/;
const SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//;

/** Quotes untrusted text for an error message: JSON-escaped, cut at 100 characters. */
function quote(s: string): string {
  return JSON.stringify(s.length > 100 ? `${s.slice(0, 100)}…` : s);
}

function refuse(message: string): never {
  throw new NodeletError('INVALID_ARGUMENT', message, { param: 'url' });
}

/** The origin-form target `raw`, split; throws INVALID_ARGUMENT naming what is wrong with it. */
export function parseRequestTarget(raw: string | undefined): RequestTarget {
  if (raw === undefined || raw === '') refuse('the request target is empty: expected a path such as /healthz');
  if (raw.length > MAX_TARGET_LENGTH) refuse(`the request target is ${raw.length} characters long: at most ${MAX_TARGET_LENGTH} are accepted`);
  if (raw === '*') refuse('the request target "*" (asterisk-form) is only for OPTIONS, which nodelet does not serve: expected a path such as /healthz');
  if (!raw.startsWith('/')) {
    if (SCHEME.test(raw)) {
      let valid = true;
      try {
        new URL(raw);
      } catch {
        valid = false;
      }
      refuse(valid
        ? `absolute-form request target ${quote(raw)} is not served (nodelet is no proxy): send the path alone, such as /healthz`
        : `request target ${quote(raw)} is not a valid absolute URL (bad host, port or encoding), and nodelet serves paths only, such as /healthz`);
    }
    refuse(`request target ${quote(raw)} must be a path starting with "/"`);
  }
  const q = raw.indexOf('?');
  const rawPath = q < 0 ? raw : raw.slice(0, q);
  const rawQuery = q < 0 ? '' : raw.slice(q + 1);
  if (!PATH_CHARS.test(rawPath)) refuse(`the path ${quote(rawPath)} contains a character that must be percent-encoded`);
  if (BAD_PERCENT.test(rawPath)) refuse(`the path ${quote(rawPath)} is not valid percent-encoding (every "%" must be followed by two hex digits)`);
  if (BAD_QUERY_CHAR.test(rawQuery)) refuse(`the query ${quote(rawQuery)} contains a control, space or non-ASCII character`);
  if (BAD_PERCENT.test(rawQuery)) refuse(`the query ${quote(rawQuery)} is not valid percent-encoding (every "%" must be followed by two hex digits)`);
  const segments = rawPath.slice(1).split('/');
  for (const seg of segments) {
    let decoded: string;
    try {
      decoded = decodeURIComponent(seg);
    } catch {
      refuse(`the path segment ${quote(seg)} does not decode to UTF-8 text`);
    }
    if (decoded.includes('/')) refuse(`the path segment ${quote(seg)} holds an encoded "/": no name nodelet serves contains one`);
    if (decoded.includes('\0')) refuse(`the path segment ${quote(seg)} holds an encoded NUL`);
    if (decoded === '.' || decoded === '..') refuse(`the path ${quote(rawPath)} has a ${quote(decoded)} segment: paths are not normalized, send the path itself`);
  }
  try {
    decodeURIComponent(rawQuery.replace(/\+/g, ' '));
  } catch {
    refuse(`the query ${quote(rawQuery)} does not decode to UTF-8 text`);
  }
  return { rawPath, segments, query: new URLSearchParams(rawQuery) };
}
