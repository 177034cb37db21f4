/**
 * The IO edge of configuration: reads `--config` and the `*.conf` drop-ins under
 * `--config-dir`, parses them (YAML or JSON), and hands the layers to resolveConfig().
 * Reads only; never writes anything anywhere.
 *
 * Precedence: defaults < --config < drop-ins (in order) < flags.
 * Drop-in order follows the kubelet's filepath.WalkDir: depth-first, the entries of each
 * directory in byte order of their names. For flat directories that is lexical order of the
 * paths; with nested directories, `dir/b/x.conf` comes before `dir/b.conf` (as in the kubelet).
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { errorMessage, isNodeletError } from '../errors.js';
import { parseYaml, parseYamlSync } from '../system/bounded-parse.js';
import { FILE_LIMITS, readBoundedTextSync } from '../system/safe-file.js';
import { resolveConfig, type ConfigLayer } from './resolve.js';
import { parseSimpleYaml } from './simple-yaml.js';
import type { ConfigProblem, LoadedConfig } from './types.js';
import { ConfigError } from './validate.js';

export interface LoadConfigOptions {
  /** `--config`: the main KubeletConfiguration file. Unset: defaults (+ drop-ins, flags). */
  configFile?: string;
  /** `--config-dir`: directory of drop-in `*.conf` files, walked recursively. */
  configDir?: string;
  /** Values from command-line flags, v1beta1-shaped (`{ port: 10250, featureGates: {...} }`); they win over files. */
  flagOverrides?: Record<string, unknown>;
}

const DROP_IN_SUFFIX = '.conf';

/** Origin shown by `config view --show-origin` for the kubelet's no-`--config` defaults. */
export const LEGACY_FLAG_DEFAULTS = 'default (no --config)';
const LEGACY_DEFAULTS = {
  authentication: { anonymous: { enabled: true }, webhook: { enabled: false } },
  authorization: { mode: 'AlwaysAllow' },
  readOnlyPort: 10255,
};

const ASCII = /^[\x00-\x7f]*$/;

/** Byte order of the UTF-8 names (Go's); for ASCII names that is the order of the strings, without two Buffers per comparison. */
function byteOrder(a: string, b: string): number {
  if (ASCII.test(a) && ASCII.test(b)) return a < b ? -1 : a > b ? 1 : 0;
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

function ioMessage(err: unknown, what: string): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return `${what} does not exist`;
  if (code === 'EACCES' || code === 'EPERM') return `${what} is not readable (permission denied)`;
  if (code === 'EISDIR') return `${what} is a directory, expected a file`;
  if (code === 'ENOTDIR') return `${what} is not a directory`;
  return `${what} cannot be read: ${(err as Error).message}`;
}

/** The drop-in files under `dir`, in the order they apply. */
async function listDropIns(dir: string, problems: ConfigProblem[]): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string): Promise<void> => {
    let entries;
    try {
      // Synchronous, as the reads below: once, at start.
      entries = readdirSync(d, { withFileTypes: true });
    } catch (err) {
      problems.push({ file: d, field: '', message: ioMessage(err, d === dir ? '--config-dir directory' : 'directory') });
      return;
    }
    entries.sort((a, b) => byteOrder(a.name, b.name));
    for (const e of entries) {
      const full = path.join(d, e.name);
      if (e.isDirectory()) await walk(full);
      // Like the kubelet, any non-directory entry named *.conf (a file or a symlink to one).
      else if (e.name.endsWith(DROP_IN_SUFFIX)) out.push(full);
    }
  };
  await walk(dir);
  return out;
}

/**
 * Parses a YAML or JSON configuration text (YAML 1.1, as the kubelet's sigs.k8s.io/yaml
 * reads it), with the bounds of bounded-parse.ts. Returns the value, or a problem naming
 * the file and line.
 */
export function parseConfigText(text: string, file: string): { doc: unknown } | { problem: ConfigProblem } {
  const simple = simpleDocument(text);
  if (simple) return simple;
  try {
    return oneDocument(parseYamlSync(text, { file, what: 'configuration file' }), file);
  } catch (err) {
    return { problem: parseProblem(err, file) };
  }
}

/** parseConfigText, off the main thread for a large text. */
async function parseConfigTextAsync(text: string, file: string): Promise<{ doc: unknown } | { problem: ConfigProblem }> {
  const simple = simpleDocument(text);
  if (simple) return simple;
  try {
    return oneDocument(await parseYaml(text, { file, what: 'configuration file' }), file);
  } catch (err) {
    return { problem: parseProblem(err, file) };
  }
}

/**
 * The plain maps most configuration files are, read without the YAML library (cold, it
 * cost ~2 ms a file at start: simple-yaml.ts); undefined for anything else. Only small
 * texts: a large one goes to the bounded parser (and its worker).
 */
function simpleDocument(text: string): { doc: unknown } | undefined {
  if (text.length > 64 * 1024) return undefined;
  const doc = parseSimpleYaml(text);
  return doc ? { doc } : undefined;
}

function oneDocument(docs: unknown[], file: string): { doc: unknown } | { problem: ConfigProblem } {
  if (docs.length > 1) {
    return { problem: { file, field: '', message: `holds ${docs.length} YAML documents; expected exactly one KubeletConfiguration` } };
  }
  return { doc: docs[0] };
}

function parseProblem(err: unknown, file: string): ConfigProblem {
  const reason = isNodeletError(err) && typeof err.details.reason === 'string' ? err.details.reason : errorMessage(err);
  return { file, field: '', message: reason };
}

/**
 * Bounded and non-blocking: a FIFO or device here is refused at once, never read. Read
 * synchronously: configuration is read once, at start, before anything else runs, and the
 * async read's ~8 thread-pool round trips a file were most of the cost of 100 drop-ins
 * (bench/config-dropins.ts); the synchronous twin makes the same checks.
 */
function readConfigText(file: string, what: string): Promise<string> {
  try {
    return Promise.resolve(readBoundedTextSync(file, { maxBytes: FILE_LIMITS.configFile, what }));
  } catch (err) {
    return Promise.reject(err);
  }
}

/** `reading`: the read, when started by the caller. */
async function readLayer(file: string, what: string, problems: ConfigProblem[], sources: string[], reading = readConfigText(file, what)): Promise<ConfigLayer | undefined> {
  let text: string;
  try {
    text = await reading;
  } catch (err) {
    const reason = isNodeletError(err) && typeof err.details.reason === 'string' ? err.details.reason : errorMessage(err);
    problems.push({ file, field: '', message: `${what} ${reason}` });
    return undefined;
  }
  sources.push(file);
  const parsed = await parseConfigTextAsync(text, file);
  if ('problem' in parsed) {
    problems.push(parsed.problem);
    return undefined;
  }
  return { origin: file, doc: parsed.doc, requireHeader: true };
}

/** Problems grouped by file in the order files apply (stable within a file); paths that could not be read come first. */
function inSourceOrder(problems: ConfigProblem[], sources: readonly string[]): ConfigProblem[] {
  const rank = (file: string) => {
    const i = sources.indexOf(file);
    if (i >= 0) return i;
    if (file === 'flag') return sources.length;
    if (file === 'default') return sources.length + 1;
    return -1;
  };
  return problems.map((p, i) => ({ p, i })).sort((a, b) => rank(a.p.file) - rank(b.p.file) || a.i - b.i).map(({ p }) => p);
}

/**
 * Loads the effective configuration. Collects every problem of every file and flag and
 * throws one ConfigError (code CONFIG_INVALID) listing them all; unknown fields come back
 * as `warnings`. Paths are resolved to absolute ones, which are what origins and problems
 * name. Idempotent; reads files only.
 */
export async function loadConfig(opts: LoadConfigOptions = {}): Promise<LoadedConfig> {
  const problems: ConfigProblem[] = [];
  const sources: string[] = [];
  const layers: ConfigLayer[] = [];
  if (opts.configFile === undefined) {
    // The kubelet's legacy command-line defaults (cmd/kubelet applyLegacyDefaults): without
    // --config, a kubelet started with flags only serves anonymous, AlwaysAllow requests
    // and the read-only port, and never asks a webhook. With --config, the v1beta1
    // defaults (webhook authn + Webhook authz, no read-only port) apply instead.
    layers.push({ origin: LEGACY_FLAG_DEFAULTS, doc: LEGACY_DEFAULTS, requireHeader: false });
  } else {
    const layer = await readLayer(path.resolve(opts.configFile), '--config file', problems, sources);
    if (layer) layers.push(layer);
  }
  if (opts.configDir !== undefined) {
    const dir = path.resolve(opts.configDir);
    const files = await listDropIns(dir, problems);
    for (const file of files) {
      const layer = await readLayer(file, 'drop-in file', problems, sources);
      if (layer) layers.push(layer);
    }
  }
  if (opts.flagOverrides !== undefined && Object.keys(opts.flagOverrides).length > 0) {
    layers.push({ origin: 'flag', doc: opts.flagOverrides, requireHeader: false });
  }
  const resolved = resolveConfig(layers);
  problems.push(...resolved.problems);
  if (problems.length > 0) throw new ConfigError(inSourceOrder(problems, sources));
  return { config: resolved.config, origins: resolved.origins, warnings: resolved.warnings, sources };
}
