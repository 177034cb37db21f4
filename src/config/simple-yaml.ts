/**
 * A fast path for the plain configuration files most nodes have (the main file and its
 * drop-ins): block maps of simple scalars, nested by indentation, and flow maps of the same
 * (`{memory.available: 100Mi}`, `{anonymous: {enabled: true}}`). It gives exactly what the bounded YAML 1.1 parser gives
 * for such a text, or `undefined` for anything else, which then goes to that parser
 * (src/system/bounded-parse.ts) with its limits and its error messages.
 *
 * Why: the `yaml` library runs cold on a node's first and only load (1.5-2 ms a small
 * file on these machines): 100 drop-ins cost ~190 ms over reading them (bench/config-dropins.ts).
 *
 * Accepted, and nothing else (so YAML 1.1's typing can never differ):
 * - lines `key: value` or `key:` followed by more-indented lines (spaces only); blank lines
 *   and whole-line `#` comments; no tabs, CR, document markers, lists, anchors, tags,
 *   block scalars, comments after a value, duplicate keys;
 * - keys: a letter, then letters, digits, `_ . - /`, and not a YAML 1.1 boolean or null word;
 * - values: `true`/`false`; decimal integers without leading zeros (at most 15 digits);
 *   double-quoted strings without `\` and single-quoted strings without `'`; plain strings
 *   of letters, digits and `_ . - / %` that YAML 1.1 cannot read as anything but a string
 *   (a letter first and not a boolean/null word, a `/` first, or digits then a letter or
 *   `%` and not an exponent like `1e3`); in block maps also URLs, `scheme://` then letters,
 *   digits and `_ . - / % :` (`containerRuntimeEndpoint: unix:///run/containerd/containerd.sock`,
 *   in nearly every node's file: a colon not followed by a space cannot start a mapping, and
 *   a letter first cannot start a YAML 1.1 sexagesimal number or time).
 */

const WORDS = /^(?:y|yes|n|no|true|false|on|off|null|~)$/i;
const KEY = /^[A-Za-z][A-Za-z0-9_.\-/]*$/;
const INT = /^-?(?:0|[1-9][0-9]{0,14})$/;
const PLAIN_LETTER = /^[A-Za-z][A-Za-z0-9_.\-/%]*$/;
const PLAIN_PATH = /^\/[A-Za-z0-9_.\-/%]*$/;
const PLAIN_URL = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[A-Za-z0-9_.\-/%:]*$/;
const PLAIN_DIGIT = /^[0-9][0-9.]*[A-Za-z%][A-Za-z0-9_.\-/%]*$/;
const EXPONENT = /^[-+]?[0-9._]*[eE][-+]?[0-9]+$/;
const RADIX = /^0[xXoObB]/;
const DQ = /^"([^"\\]*)"$/;
const SQ = /^'([^']*)'$/;

/** Nodes beyond this go to the bounded parser (which enforces its own limit). */
const MAX_NODES = 5_000;
const MAX_DEPTH = 50;

const NO = Symbol('not simple');
type Value = string | number | boolean | Record<string, unknown>;

function scalar(v: string): Value | typeof NO {
  if (v === 'true') return true;
  if (v === 'false') return false;
  if (INT.test(v)) return Number(v);
  const c = v.charCodeAt(0);
  if (c === 0x22 /* " */) {
    const m = DQ.exec(v);
    return m ? m[1]! : NO;
  }
  if (c === 0x27 /* ' */) {
    const m = SQ.exec(v);
    return m ? m[1]! : NO;
  }
  if (PLAIN_LETTER.test(v)) return WORDS.test(v) ? NO : v;
  if (PLAIN_PATH.test(v)) return v;
  // Only reached from block maps: flow values holding `:` go to the full parser (flowMap).
  if (PLAIN_URL.test(v) && !v.endsWith(':')) return v;
  if (PLAIN_DIGIT.test(v) && !EXPONENT.test(v) && !RADIX.test(v)) return v;
  return NO;
}

function isKey(k: string): boolean {
  return KEY.test(k) && !WORDS.test(k);
}

/**
 * A flow map of simple keys and scalars, nested flow maps allowed (`{anonymous: {enabled:
 * true}}`); NO for anything else (quotes holding `,{}:`, lists, empty values).
 */
function flowMap(v: string, count: { n: number }, depth = 0): Record<string, unknown> | typeof NO {
  let i = 0;
  const parse = (d: number): Record<string, unknown> | typeof NO => {
    if (v[i] !== '{' || d > MAX_DEPTH) return NO;
    i++;
    const out: Record<string, unknown> = {};
    const ws = () => {
      while (v[i] === ' ') i++;
    };
    ws();
    if (v[i] === '}') {
      i++;
      return out;
    }
    for (;;) {
      ws();
      const colon = v.indexOf(': ', i);
      if (colon < 0) return NO;
      const k = v.slice(i, colon);
      if (!isKey(k) || Object.hasOwn(out, k)) return NO;
      i = colon + 2;
      ws();
      let val: unknown;
      if (v[i] === '{') {
        const m = parse(d + 1);
        if (m === NO) return NO;
        val = m;
      } else {
        let j = i;
        while (j < v.length && v[j] !== ',' && v[j] !== '}') j++;
        const text = v.slice(i, j).trim();
        if (text === '' || /[{}[\]:]/.test(text)) return NO;
        const sc = scalar(text);
        if (sc === NO) return NO;
        val = sc;
        i = j;
      }
      out[k] = val;
      if (++count.n > MAX_NODES) return NO;
      ws();
      if (v[i] === ',') {
        i++;
        continue;
      }
      if (v[i] === '}') {
        i++;
        return out;
      }
      return NO;
    }
  };
  const r = parse(depth);
  return r !== NO && i === v.length ? r : NO;
}

/** The one document of a simple configuration text, or undefined when the text is not one (see above). */
export function parseSimpleYaml(text: string): Record<string, unknown> | undefined {
  if (text.includes('\t') || text.includes('\r')) return undefined;
  const root: Record<string, unknown> = {};
  // Open maps by indentation; `pending` is a `key:` waiting for its more-indented block.
  const stack: { indent: number; map: Record<string, unknown> }[] = [{ indent: 0, map: root }];
  let pending: { map: Record<string, unknown>; key: string; indent: number } | undefined;
  const count = { n: 0 };
  let any = false;
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd();
    if (line === '') continue;
    const indent = line.length - line.trimStart().length;
    const body = line.slice(indent);
    if (body[0] === '#') continue;
    if (body.includes('#')) return undefined;
    if (pending) {
      // The block of a `key:` must be more indented than the key.
      if (indent <= pending.indent) return undefined;
      const map: Record<string, unknown> = {};
      pending.map[pending.key] = map;
      stack.push({ indent, map });
      if (stack.length > MAX_DEPTH) return undefined;
      pending = undefined;
    } else {
      while (stack.length > 1 && indent < stack[stack.length - 1]!.indent) stack.pop();
      if (indent !== stack[stack.length - 1]!.indent) return undefined;
    }
    const map = stack[stack.length - 1]!.map;
    let key: string;
    let value: string;
    if (body.endsWith(':')) {
      key = body.slice(0, -1);
      value = '';
    } else {
      const i = body.indexOf(': ');
      if (i <= 0) return undefined;
      key = body.slice(0, i);
      value = body.slice(i + 2).trim();
    }
    if (!isKey(key) || Object.hasOwn(map, key)) return undefined;
    if (++count.n > MAX_NODES) return undefined;
    any = true;
    if (value === '') {
      pending = { map, key, indent };
      continue;
    }
    const v = value[0] === '{' ? flowMap(value, count) : scalar(value);
    if (v === NO) return undefined;
    map[key] = v;
  }
  // A `key:` with no block is null in YAML; an empty text is no document: both go to the full parser.
  if (pending || !any) return undefined;
  return root;
}
