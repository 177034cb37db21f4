/**
 * The kubelet's credential keyring (pkg/credentialprovider): registry credentials from
 * `.dockerconfigjson` and `.dockercfg` documents, indexed by the registry location each was
 * written for, and looked up for an image's normalized repository (image-name.ts).
 *
 * Facts it follows (keyring.go, config.go):
 * - A location may carry a scheme (`https://`, `http://`: stripped), a port (part of the
 *   host, compared exactly), and a path; `/v1/` and `/v2/` paths stand for the host alone
 *   (`https://index.docker.io/v1/` is `index.docker.io`).
 * - A location matches an image when the ports are equal, the hosts have the same number of
 *   dot-separated labels and each label matches as a glob (`*.example.com` matches
 *   `a.example.com`, not `example.com` nor `a.b.example.com`), and the location's path is a
 *   string prefix of the image's (so `host/team` also matches `host/teamx/app`, as upstream).
 * - Every matching location's credentials are returned, locations in reverse lexical order
 *   (the more specific path first), each location's credentials in the order added. When
 *   none matches, an image on Docker Hub gets the `index.docker.io` credentials.
 * - An entry's `auth` is base64 of `user:password` and overrides `username`/`password`;
 *   JSON field names match case-insensitively, as Go's decoder does.
 * - Each credential carries the Secret it came from and a hash of it (sha256 of its JSON as
 *   Go writes it), which the pull records keep instead of the secret.
 *
 * Pure; a document that cannot be parsed throws an Error saying why (callers name the
 * Secret).
 */
import crypto from 'node:crypto';

/** One registry entry of a docker config document. */
export interface DockerConfigEntry {
  username: string;
  password: string;
  email: string;
}

/** Location -> entry, in document order. */
export type DockerConfig = Map<string, DockerConfigEntry>;

/** The Secret a credential came from (its coordinates, as the pull records keep them). */
export interface SecretCoordinates {
  uid: string;
  namespace: string;
  name: string;
}

/** What the CRI's AuthConfig gets from a keyring credential (the kubelet fills no other field). */
export interface RegistryAuth {
  username: string;
  password: string;
}

export interface TrackedCredential {
  auth: RegistryAuth;
  /** The Secret it came from; undefined for node-wide credentials (nodelet has none). */
  source: SecretCoordinates | undefined;
  /** sha256 (hex) of the credential as the kubelet hashes it. */
  hash: string;
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const isObject = (v: unknown): v is Record<string, Json> => typeof v === 'object' && v !== null && !Array.isArray(v);

function jsonType(v: unknown): string {
  if (Array.isArray(v)) return 'array';
  if (v === null) return 'null';
  return typeof v === 'object' ? 'object' : typeof v;
}

/** Go's base64.StdEncoding.DecodeString: padded, standard alphabet; CR and LF are skipped. */
function decodeStdBase64(s: string): Buffer {
  const clean = s.replace(/[\r\n]/g, '');
  if (clean.length % 4 !== 0 || !/^[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(clean)) throw new Error('auth is not valid base64');
  return Buffer.from(clean, 'base64');
}

/** One entry, as DockerConfigEntry.UnmarshalJSON reads it. */
function parseEntry(location: string, v: Json): DockerConfigEntry {
  const e: DockerConfigEntry & { auth: string } = { username: '', password: '', email: '', auth: '' };
  if (v === null) return { username: '', password: '', email: '' };
  if (!isObject(v)) throw new Error(`entry ${JSON.stringify(location)} must be an object, not ${jsonType(v)}`);
  for (const [k, val] of Object.entries(v)) {
    const field = k.toLowerCase();
    if (field !== 'username' && field !== 'password' && field !== 'email' && field !== 'auth') continue;
    if (val === null) continue;
    if (typeof val !== 'string') throw new Error(`entry ${JSON.stringify(location)}: ${field} must be a string, not ${jsonType(val)}`);
    e[field] = val;
  }
  if (e.auth === '') return { username: e.username, password: e.password, email: e.email };
  let decoded: string;
  try {
    decoded = decodeStdBase64(e.auth).toString('utf8');
  } catch (err) {
    throw new Error(`entry ${JSON.stringify(location)}: ${(err as Error).message}`);
  }
  const colon = decoded.indexOf(':');
  if (colon < 0) throw new Error(`entry ${JSON.stringify(location)}: unable to parse auth field (no "user:password")`);
  return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1), email: e.email };
}

function parseEntries(v: Json, what: string): DockerConfig {
  const out: DockerConfig = new Map();
  if (v === null) return out;
  if (!isObject(v)) throw new Error(`${what} must be an object, not ${jsonType(v)}`);
  for (const [location, entry] of Object.entries(v)) out.set(location, parseEntry(location, entry));
  return out;
}

function parseJson(text: string): Json {
  try {
    return JSON.parse(text) as Json;
  } catch (err) {
    throw new Error(`not valid JSON (${(err as Error).message})`);
  }
}

/** A `.dockercfg` document: `{ "<location>": { "auth": ..., ... }, ... }`. */
export function parseDockercfg(text: string): DockerConfig {
  return parseEntries(parseJson(text), 'the document');
}

/** A `.dockerconfigjson` document (docker's config.json): `{ "auths": { "<location>": {...} } }`. */
export function parseDockerConfigJson(text: string): DockerConfig {
  const doc = parseJson(text);
  if (doc === null) return new Map();
  if (!isObject(doc)) throw new Error(`the document must be an object, not ${jsonType(doc)}`);
  let auths: Json = null;
  for (const [k, v] of Object.entries(doc)) {
    const field = k.toLowerCase();
    if (field === 'auths') auths = v;
    else if (field === 'httpheaders' && v !== null) {
      if (!isObject(v) || Object.values(v).some((h) => h !== null && typeof h !== 'string')) throw new Error('HttpHeaders must be an object of strings');
    }
  }
  return parseEntries(auths, 'auths');
}

// ------------------------------------------------------------------ hashing

/** Go's json.Marshal string escaping beyond JSON.stringify's: <, >, & and the two line separators. */
function goJsonEscape(json: string): string {
  return json.replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * The kubelet's hash of a keyring credential: sha256 (hex) of its AuthConfig as Go's
 * json.Marshal writes it (fields in declaration order, empty ones omitted). The same
 * credential hashes the same in nodelet and the kubelet, so their pull records agree.
 */
export function hashCredential(e: DockerConfigEntry): string {
  const doc: Record<string, string> = {};
  if (e.username) doc.username = e.username;
  if (e.password) doc.password = e.password;
  if (e.email) doc.email = e.email;
  return crypto.createHash('sha256').update(goJsonEscape(JSON.stringify(doc))).digest('hex');
}

// ------------------------------------------------------------------ locations and matching

interface ParsedUrl {
  host: string;
  path: string;
}

// Go's url.Parse accepts in a host: letters, digits, -._~ and !$&'()*+,;=:[]<>" and bytes >= 0x80.
const HOST_CHARS = /^[A-Za-z0-9\-._~!$&'()*+,;=:[\]<>"%\u0080-\uffff]*$/;

/** Go's url.PathUnescape, strictly: a bad %-escape is an error. */
function unescapePath(p: string): string {
  if (!p.includes('%')) return p;
  if (/%(?![0-9a-fA-F]{2})/.test(p)) throw new Error('invalid URL escape');
  return decodeURIComponent(p.replace(/%(?![0-9a-fA-F]{2})/g, '%25'));
}

/** `https://<s>` through Go's url.Parse, scheme dropped: host (with port) and path, or undefined when Go refuses it. */
function parseSchemeless(s: string): ParsedUrl | undefined {
  if (/[\u0000-\u001f\u007f]/.test(s)) return undefined;
  let rest = s;
  const hash = rest.indexOf('#');
  if (hash >= 0) rest = rest.slice(0, hash);
  const q = rest.indexOf('?');
  if (q >= 0) rest = rest.slice(0, q);
  const slash = rest.indexOf('/');
  const authority = slash >= 0 ? rest.slice(0, slash) : rest;
  const rawPath = slash >= 0 ? rest.slice(slash) : '';
  const at = authority.lastIndexOf('@');
  const host = at >= 0 ? authority.slice(at + 1) : authority;
  if (!HOST_CHARS.test(host)) return undefined;
  // The port: after the last ':' outside an IPv6 literal, digits only (Go: "invalid port").
  if (host.startsWith('[')) {
    const close = host.indexOf(']');
    if (close < 0) return undefined;
    const after = host.slice(close + 1);
    if (after !== '' && !/^:[0-9]*$/.test(after)) return undefined;
  } else {
    const colon = host.lastIndexOf(':');
    if (colon >= 0 && !/^[0-9]*$/.test(host.slice(colon + 1))) return undefined;
  }
  try {
    return { host, path: unescapePath(rawPath) };
  } catch {
    return undefined;
  }
}

/** Go's net.SplitHostPort, falling back to (whole, '') when it refuses. */
function splitHostPort(hostport: string): [string, string] {
  if (hostport.startsWith('[')) {
    const close = hostport.indexOf(']');
    if (close >= 0 && hostport[close + 1] === ':' && !hostport.slice(close + 2).includes(':')) return [hostport.slice(1, close), hostport.slice(close + 2)];
    return [hostport, ''];
  }
  const colon = hostport.lastIndexOf(':');
  if (colon < 0 || hostport.slice(0, colon).includes(':')) return [hostport, ''];
  return [hostport.slice(0, colon), hostport.slice(colon + 1)];
}

type GlobToken = { t: 'star' } | { t: 'any' } | { t: 'lit'; c: number } | { t: 'class'; negated: boolean; ranges: [number, number][] };

/**
 * Go's path/filepath.Match syntax for one host label (no separators in it): `*`, `?`,
 * `[...]` classes (ranges, `^` negation), `\` escapes. Undefined for a malformed pattern
 * (Go answers ErrBadPattern, which the keyring takes as no match).
 */
function globTokens(pattern: string): GlobToken[] | undefined {
  const chars = [...pattern].map((c) => c.codePointAt(0)!);
  const out: GlobToken[] = [];
  const BACKSLASH = 0x5c;
  let i = 0;
  // One class character (escapes allowed); `-` and `]` must be escaped there.
  const classChar = (): number | undefined => {
    let c = chars[i];
    if (c === undefined || c === 0x2d || c === 0x5d) return undefined;
    if (c === BACKSLASH) {
      c = chars[++i];
      if (c === undefined) return undefined;
    }
    i++;
    return c;
  };
  while (i < chars.length) {
    const c = chars[i]!;
    if (c === 0x2a) {
      if (out.at(-1)?.t !== 'star') out.push({ t: 'star' });
      i++;
    } else if (c === 0x3f) {
      out.push({ t: 'any' });
      i++;
    } else if (c === BACKSLASH) {
      if (i + 1 >= chars.length) return undefined;
      out.push({ t: 'lit', c: chars[i + 1]! });
      i += 2;
    } else if (c === 0x5b) {
      i++;
      const negated = chars[i] === 0x5e;
      if (negated) i++;
      const ranges: [number, number][] = [];
      for (;;) {
        if (chars[i] === 0x5d && ranges.length > 0) {
          i++;
          break;
        }
        const lo = classChar();
        if (lo === undefined) return undefined;
        let hi = lo;
        if (chars[i] === 0x2d) {
          i++;
          const h = classChar();
          if (h === undefined) return undefined;
          hi = h;
        }
        ranges.push([lo, hi]);
      }
      out.push({ t: 'class', negated, ranges });
    } else {
      out.push({ t: 'lit', c });
      i++;
    }
  }
  return out;
}

function tokenMatches(tok: GlobToken, c: number): boolean {
  if (tok.t === 'any') return true;
  if (tok.t === 'lit') return tok.c === c;
  if (tok.t === 'class') return tok.ranges.some(([lo, hi]) => lo <= c && c <= hi) !== tok.negated;
  return false;
}

/**
 * Whether host label `s` matches glob `pattern`. Linear backtracking on the last star only
 * (O(pattern × label)), so no pattern a Secret can hold makes it slow.
 */
function globMatch(pattern: string, s: string): boolean {
  const toks = globTokens(pattern);
  if (!toks) return false;
  const str = [...s].map((c) => c.codePointAt(0)!);
  let p = 0;
  let i = 0;
  let starP = -1;
  let starI = 0;
  while (i < str.length) {
    const tok = toks[p];
    if (tok && tok.t === 'star') {
      starP = p++;
      starI = i;
    } else if (tok && tokenMatches(tok, str[i]!)) {
      p++;
      i++;
    } else if (starP >= 0) {
      p = starP + 1;
      i = ++starI;
    } else return false;
  }
  while (toks[p]?.t === 'star') p++;
  return p === toks.length;
}

/**
 * Whether the keyring location `glob` (schemeless, as indexed) matches `target` (an image's
 * normalized repository): ports equal, as many host labels, each a glob match, and the
 * location's path a prefix of the image's. The kubelet's URLsMatchStr.
 */
export function locationMatches(glob: string, target: string): boolean {
  const g = parseSchemeless(glob);
  const t = parseSchemeless(target);
  if (!g || !t) return false;
  const [gHost, gPort] = splitHostPort(g.host);
  const [tHost, tPort] = splitHostPort(t.host);
  if (gPort !== tPort) return false;
  const gParts = gHost.split('.');
  const tParts = tHost.split('.');
  if (gParts.length !== tParts.length) return false;
  if (!t.path.startsWith(g.path)) return false;
  return gParts.every((p, i) => globMatch(p, tParts[i]!));
}

/** The index key of a location: scheme stripped, `/v1/`, `/v2/` and `/` paths dropped; undefined when Go's url.Parse refuses it. */
export function locationKey(location: string): string | undefined {
  const value = location.startsWith('https://') ? location.slice(8) : location.startsWith('http://') ? location.slice(7) : location;
  const parsed = parseSchemeless(value);
  if (!parsed) return undefined;
  let p = parsed.path;
  if (p.startsWith('/v2/') || p.startsWith('/v1/')) p = p.slice(3);
  return p.length > 0 && p !== '/' ? parsed.host + p : parsed.host;
}

/** Docker Hub's image: no registry host in the name, or `docker.io`/`index.docker.io`. */
export function isDefaultRegistryMatch(image: string): boolean {
  const slash = image.indexOf('/');
  const first = slash < 0 ? image : image.slice(0, slash);
  if (first === '') return false;
  if (slash < 0) return true;
  if (first === 'docker.io' || first === 'index.docker.io') return true;
  return !/[.:]/.test(first);
}

const DEFAULT_REGISTRY_HOST = 'index.docker.io';

const byteOrder = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/**
 * The kubelet's BasicDockerKeyring. `add` once per Secret, in the pod's order; `lookup`
 * per image. Locations Go's URL parser refuses are skipped (reported to `onSkipped`).
 */
export class DockerKeyring {
  readonly #creds = new Map<string, TrackedCredential[]>();
  #index: string[] = [];

  add(source: SecretCoordinates | undefined, cfg: DockerConfig, onSkipped?: (location: string) => void): void {
    for (const [location, entry] of cfg) {
      const key = locationKey(location);
      if (key === undefined) {
        onSkipped?.(location);
        continue;
      }
      const list = this.#creds.get(key) ?? [];
      list.push({ auth: { username: entry.username, password: entry.password }, source, hash: hashCredential(entry) });
      this.#creds.set(key, list);
    }
    this.#index = [...this.#creds.keys()].sort(byteOrder).reverse();
  }

  /** Every credential for `repository` (normalized, image-name.ts), most specific location first; [] when none. */
  lookup(repository: string): TrackedCredential[] {
    const out: TrackedCredential[] = [];
    for (const k of this.#index) if (locationMatches(k, repository)) out.push(...this.#creds.get(k)!);
    if (out.length > 0) return out;
    if (isDefaultRegistryMatch(repository)) return [...(this.#creds.get(DEFAULT_REGISTRY_HOST) ?? [])];
    return [];
  }

  get size(): number {
    return this.#creds.size;
  }
}
