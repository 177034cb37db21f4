/**
 * Parsing YAML and JSON from hostile files with bounded work: the one parser used for
 * static pod manifests, KubeletConfiguration files and drop-ins, kubeconfigs (YAML) and
 * seccomp profiles (JSON).
 *
 * Why bounds: the `yaml` library is slow and partly quadratic. Measured here (Node 20,
 * 2 cores): ~8 µs per node (a 16,000-item list: 130 ms), a map of 10,000 keys 1.3 s and of
 * 100,000 keys over 100 s with `uniqueKeys` (each key is compared with all before it), a
 * 1.5 MB double-quoted scalar 400 ms; a billion-laughs alias bomb expands without end; a
 * few thousand nested brackets overflow its recursive composer.
 *
 * What is refused (PARSE_LIMITS), before or while parsing, never after a full expansion:
 * - more than 20,000 nodes, aliases expanded (counted on the lexer's tokens before the
 *   parse, then exactly on the parsed document before it becomes a JS value); a real Pod,
 *   KubeletConfiguration or kubeconfig has a few hundred;
 * - nesting deeper than 100 levels (flow brackets on the tokens, block nesting and aliases
 *   on the document); a Pod is about 15 deep;
 * - more than 100 aliases (`maxAliasCount`), and an alias inside the node it names;
 * - duplicate keys (checked here in linear time; the library's own check is quadratic).
 *
 * Where: a text up to 1 KiB (PARSE_LIMITS.mainThreadBytes: a few ms at most; at 8 KiB,
 * 110 dense files held the event loop up to ~190 ms) is parsed on the calling thread. A larger one is parsed off the main thread by parseYaml(), in one
 * worker_threads Worker with a 64 MiB heap and a 2 s deadline: past the deadline or the
 * heap, the worker is terminated and the file refused, so the event loop never waits for
 * a parse. The worker ends after 1 s idle. parseYamlSync() is for synchronous callers
 * (kubeconfigs at startup), bounded by the same limits.
 *
 * Errors are NodeletError INVALID_ARGUMENT: message `<what> <file>: <reason>`, with
 * `details.reason` (for callers that name the file elsewhere) and `line`/`col` when known.
 * Reasons never quote the text, only positions and the library's generic descriptions.
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { createRequire } from 'node:module';
import type { Document, LineCounter } from 'yaml';

/**
 * The `yaml` library, loaded on first use (its CommonJS build): most starts parse nothing
 * but plain configuration files (src/config/simple-yaml.ts) before /healthz answers, and
 * the library's load was part of that time.
 */
let yamlLib: typeof import('yaml') | undefined;
const yaml = (): typeof import('yaml') => (yamlLib ??= createRequire(import.meta.url)('yaml') as typeof import('yaml'));
import { NodeletError, errorMessage } from '../errors.js';

export const PARSE_LIMITS = {
  maxNodes: 20_000,
  maxDepth: 100,
  maxAliasCount: 100,
  /** Texts up to this size are parsed on the calling thread. */
  mainThreadBytes: 1024,
  workerTimeoutMs: 2_000,
  workerHeapMb: 64,
  /** An idle worker is ended after this long. */
  workerIdleMs: 1_000,
};

export type ParseLimits = typeof PARSE_LIMITS;

export interface BoundedParseOptions {
  /** The file, for messages. */
  file: string;
  /** What it is, for messages: `static pod manifest`, `kubeconfig`, ... */
  what: string;
  limits?: Partial<ParseLimits>;
}

function fail(o: BoundedParseOptions, reason: string, extra: Record<string, unknown> = {}): NodeletError {
  return new NodeletError('INVALID_ARGUMENT', `${o.what} ${o.file}: ${reason}`, { file: o.file, what: o.what, reason, ...extra });
}

/** The library's message without its position suffix or source excerpt. */
function genericMessage(message: string): string {
  return message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
}

/**
 * Counts nodes and flow depth on the lexer's tokens (a generator: nothing is built), and
 * stops at the first limit passed. Each scalar, alias or collection start is at least one
 * node; `-` and `?` may start an empty one.
 */
function lexScan(text: string, o: BoundedParseOptions, l: ParseLimits): void {
  let nodes = 0;
  let flow = 0;
  for (const tok of new (yaml().Lexer)().lex(text)) {
    const c = tok.charCodeAt(0);
    switch (c) {
      case 0x1f: // the lexer's mark before a plain or block scalar
      case 0x22: // "
      case 0x27: // '
      case 0x2a: // * alias
      case 0x2d: // - (seq item; also `---`)
      case 0x3f: // ?
        nodes++;
        break;
      case 0x5b: // [
      case 0x7b: // {
        nodes++;
        if (++flow > l.maxDepth) throw fail(o, `nested deeper than ${l.maxDepth} levels (the limit for a ${o.what})`, { limit: l.maxDepth });
        break;
      case 0x5d: // ]
      case 0x7d: // }
        if (flow > 0) flow--;
        break;
    }
    if (nodes > 2 * l.maxNodes) throw fail(o, `has more than ${l.maxNodes} YAML nodes (the limit for a ${o.what})`, { limit: l.maxNodes });
  }
}

type Measure = { size: number; height: number };

/**
 * Counts the nodes of a parsed document with aliases expanded, its depth, and checks for
 * duplicate keys; iterative (no recursion on hostile depth), linear.
 */
function measureDocument(doc: Document, lc: LineCounter, o: BoundedParseOptions, l: ParseLimits, counted: { n: number }): void {
  interface Frame {
    depth: number;
    kids: unknown[];
    next: number;
    anchor: string | undefined;
    m: Measure;
  }
  const anchors = new Map<string, Measure | 'open'>();
  const stack: Frame[] = [];
  const at = (node: unknown) => {
    const pos = (node as { range?: [number, number, number] } | null)?.range?.[0];
    if (pos === undefined) return {};
    const { line, col } = lc.linePos(pos);
    return { line, col };
  };
  const tooDeep = () => fail(o, `nested deeper than ${l.maxDepth} levels (the limit for a ${o.what})`, { limit: l.maxDepth });
  const add = (n: number) => {
    counted.n += n;
    if (counted.n > l.maxNodes) throw fail(o, `has more than ${l.maxNodes} YAML nodes, aliases expanded (the limit for a ${o.what})`, { limit: l.maxNodes });
  };
  /** A leaf's measure, or undefined when a collection was pushed. */
  const enter = (node: unknown, depth: number): Measure | undefined => {
    if (depth > l.maxDepth) throw tooDeep();
    if (node === null || node === undefined) {
      add(1);
      return { size: 1, height: 1 };
    }
    if (yaml().isAlias(node)) {
      const target = anchors.get(node.source);
      if (target === 'open') throw fail(o, `an alias refers to a node that contains it${posText(at(node))}`, at(node));
      if (target === undefined) throw fail(o, `an alias names no anchor defined before it${posText(at(node))}`, at(node));
      if (depth + target.height - 1 > l.maxDepth) throw tooDeep();
      add(target.size);
      return target;
    }
    const anchor = (node as { anchor?: string }).anchor || undefined;
    const kids = collectionKids(node, (k) => fail(o, `malformed YAML/JSON${posText(at(k))}: map keys must be unique (a key is repeated)`, at(k)));
    if (kids === undefined) {
      add(1);
      const m = { size: 1, height: 1 };
      if (anchor) anchors.set(anchor, m);
      return m;
    }
    add(1);
    if (anchor) anchors.set(anchor, 'open');
    stack.push({ depth, kids, next: 0, anchor, m: { size: 1, height: 1 } });
    return undefined;
  };
  const root = enter(doc.contents, 1);
  if (root) return;
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    if (top.next < top.kids.length) {
      const m = enter(top.kids[top.next++], top.depth + 1);
      if (m) {
        top.m.size += m.size;
        top.m.height = Math.max(top.m.height, m.height + 1);
      }
      continue;
    }
    stack.pop();
    if (top.anchor) anchors.set(top.anchor, top.m);
    const parent = stack[stack.length - 1];
    if (parent) {
      parent.m.size += top.m.size;
      parent.m.height = Math.max(parent.m.height, top.m.height + 1);
    }
  }
}

/**
 * A collection's children in document order (a map's keys and values, a sequence's items), or
 * undefined for a scalar. A map key repeated (merge keys `<<` aside) throws `duplicate(key)`.
 */
function collectionKids(node: unknown, duplicate: (key: unknown) => Error): unknown[] | undefined {
  if (yaml().isSeq(node)) return node.items;
  if (!yaml().isMap(node)) return undefined;
  const keys = new Set<string>();
  const kids: unknown[] = [];
  for (const pair of node.items) {
    const k = pair.key;
    if (yaml().isScalar(k) && k.value !== '<<') {
      const name = String(k.value);
      if (keys.has(name)) throw duplicate(k);
      keys.add(name);
    }
    kids.push(pair.key, pair.value);
  }
  return kids;
}

function posText(p: { line?: number; col?: number }): string {
  return p.line !== undefined ? ` at line ${p.line}, column ${p.col}` : '';
}

/**
 * Parses YAML (1.1, as Kubernetes reads it; JSON is YAML) within the limits, on the
 * calling thread. Returns the JS value of every non-empty document, in order.
 */
export function parseYamlSync(text: string, o: BoundedParseOptions): unknown[] {
  const l = { ...PARSE_LIMITS, ...o.limits };
  lexScan(text, o, l);
  const lineCounter = new (yaml().LineCounter)();
  let docs: Document[];
  try {
    const parsed = yaml().parseAllDocuments(text, { version: '1.1', lineCounter, prettyErrors: false, uniqueKeys: false });
    docs = Array.isArray(parsed) ? (parsed as Document[]) : [];
  } catch (err) {
    throw parseFailure(o, err, undefined, l);
  }
  const counted = { n: 0 };
  const out: unknown[] = [];
  for (const d of docs) {
    const err = d.errors[0];
    if (err) throw parseFailure(o, err, lineCounter.linePos(err.pos[0]), l);
    if (d.contents === null) continue;
    measureDocument(d, lineCounter, o, l, counted);
    try {
      out.push(d.toJS({ maxAliasCount: l.maxAliasCount }));
    } catch (e) {
      throw fail(o, `cannot be converted: ${genericMessage(errorMessage(e))}`);
    }
  }
  return out;
}

function parseFailure(o: BoundedParseOptions, err: unknown, pos: { line: number; col: number } | undefined, l: ParseLimits): NodeletError {
  const msg = errorMessage(err);
  // The library's recursive composer reports a stack overflow as a parse error.
  if (/call stack/i.test(msg)) return fail(o, `nested deeper than ${l.maxDepth} levels (the limit for a ${o.what})`, { limit: l.maxDepth });
  const where = pos ? ` at line ${pos.line}, column ${pos.col}` : '';
  return fail(o, `malformed YAML/JSON${where}: ${genericMessage(msg)}`, pos ?? {});
}

/**
 * parseYamlSync, off the main thread for texts over `mainThreadBytes` (see the module
 * comment). Never blocks the event loop for longer than a small parse.
 */
export async function parseYaml(text: string, o: BoundedParseOptions): Promise<unknown[]> {
  const l = { ...PARSE_LIMITS, ...o.limits };
  if (Buffer.byteLength(text) <= l.mainThreadBytes || !workerAvailable()) return parseYamlSync(text, o);
  return pool.run(text, o, l);
}

/**
 * Parses JSON within the limits (depth checked by a scan before JSON.parse, which takes
 * ~0.5 s on a deep hostile text, node count after). Error messages give the position, never
 * the text (JSON.parse's own message quotes it).
 */
export function parseJsonBounded(text: string, o: BoundedParseOptions): unknown {
  const l = { ...PARSE_LIMITS, ...o.limits };
  let depth = 0;
  let values = 1;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      values++;
      if (++depth > l.maxDepth) throw fail(o, `nested deeper than ${l.maxDepth} levels (the limit for a ${o.what})`, { limit: l.maxDepth });
    } else if (c === 0x5d || c === 0x7d) depth--;
    else if (c === 0x2c) values++;
  }
  // Each `,` or opening bracket is at most two values (a key and its value).
  if (values > 2 * l.maxNodes) throw fail(o, `has more than ${l.maxNodes} JSON values (the limit for a ${o.what})`, { limit: l.maxNodes });
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    const m = /at position (\d+)/.exec(errorMessage(err)) ?? /column (\d+)/.exec(errorMessage(err));
    const position = m ? Number(m[1]) : undefined;
    const what = /end of JSON input/.test(errorMessage(err)) ? 'ends too early' : 'has an unexpected character';
    throw fail(o, `is not valid JSON: it ${what}${position !== undefined ? ` (at position ${position})` : ''}`, position !== undefined ? { position } : {});
  }
}

// ---- the worker -------------------------------------------------------------------

const WORKER_URL = new URL('./parse-worker.js', import.meta.url);
let workerExists: boolean | undefined;

/** The compiled worker script exists (it does not when tests run the TypeScript sources). */
function workerAvailable(): boolean {
  workerExists ??= fs.existsSync(fileURLToPath(WORKER_URL));
  return workerExists;
}

export interface WorkerRequest {
  text: string;
  file: string;
  what: string;
  limits: ParseLimits;
}

export type WorkerReply = { ok: true; docs: unknown[] } | { ok: false; message: string; details: Record<string, unknown> };

/** One worker, one parse at a time (a queue), ended when over time or idle. */
class ParsePool {
  #worker: Worker | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  #idle: NodeJS.Timeout | undefined;

  run(text: string, o: BoundedParseOptions, l: ParseLimits): Promise<unknown[]> {
    const p = this.#queue.then(() => this.#one(text, o, l));
    this.#queue = p.catch(() => undefined);
    return p;
  }

  #kill(w: Worker): void {
    if (this.#worker === w) this.#worker = undefined;
    void w.terminate();
  }

  #one(text: string, o: BoundedParseOptions, l: ParseLimits): Promise<unknown[]> {
    clearTimeout(this.#idle);
    const w = (this.#worker ??= new Worker(WORKER_URL, {
      resourceLimits: { maxOldGenerationSizeMb: l.workerHeapMb, maxYoungGenerationSizeMb: 16, stackSizeMb: 4 },
      stdout: false,
      stderr: false,
    }));
    w.ref(); // a pending parse keeps a CLI run alive; an idle worker does not
    return new Promise<unknown[]>((resolve, reject) => {
      const finish = (then: () => void) => {
        clearTimeout(timer);
        w.off('message', onMessage);
        w.off('error', onError);
        w.off('exit', onExit);
        then();
        if (this.#worker === w) {
          w.unref();
          this.#idle = setTimeout(() => this.#kill(w), l.workerIdleMs);
          this.#idle.unref();
        }
      };
      const onMessage = (m: WorkerReply) =>
        finish(() => (m.ok ? resolve(m.docs) : reject(new NodeletError('INVALID_ARGUMENT', m.message, m.details))));
      const onError = (err: Error & { code?: string }) =>
        finish(() => {
          this.#kill(w);
          reject(
            err.code === 'ERR_WORKER_OUT_OF_MEMORY'
              ? fail(o, `needs more than ${l.workerHeapMb} MiB of memory to parse: refused`, { limit: l.workerHeapMb })
              : fail(o, `could not be parsed: ${genericMessage(err.message)}`),
          );
        });
      const onExit = () =>
        finish(() => {
          this.#kill(w);
          reject(fail(o, 'could not be parsed: the parser stopped'));
        });
      const timer = setTimeout(
        () =>
          finish(() => {
            this.#kill(w);
            reject(fail(o, `took longer than ${l.workerTimeoutMs} ms to parse: refused`, { limit: l.workerTimeoutMs }));
          }),
        l.workerTimeoutMs,
      );
      w.on('message', onMessage);
      w.on('error', onError);
      w.on('exit', onExit);
      const req: WorkerRequest = { text, file: o.file, what: o.what, limits: l };
      w.postMessage(req);
    });
  }
}

const pool = new ParsePool();
