/**
 * Reads a kubeconfig (YAML or JSON) the way kubectl does: the current context selects a
 * cluster (server URL, CA from `certificate-authority` or `-data`) and a user (client
 * certificate/key from file or `-data`, `token` or `tokenFile`). Relative paths are
 * relative to the kubeconfig's directory. `insecure-skip-tls-verify: true` is refused
 * unless the caller passes `allowInsecure`. Every error is CONFIG_INVALID and names the
 * file and the field, e.g. `<file>: users[0].user.client-certificate: cannot read /x: ENOENT`.
 *
 * Called once at startup; pure apart from reading files. Every file (the kubeconfig and
 * the certificate, key and token files it names) is read by readBoundedTextSync: a FIFO or
 * device is refused without a blocking open, a file over its limit without being read;
 * the YAML is parsed within the bounds of bounded-parse.ts.
 */
import path from 'node:path';
import { NodeletError, errorMessage, isNodeletError } from '../errors.js';
import { parseYamlSync } from '../system/bounded-parse.js';
import { FILE_LIMITS, readBoundedTextSync } from '../system/safe-file.js';

export interface ClusterAccess {
  /** The kubeconfig file (absolute), for messages. */
  file: string;
  /** `https://host:port[/prefix]`, without a trailing slash. */
  server: string;
  /** PEM bundle of the CA; undefined means the system's CAs. */
  ca?: string;
  /** PEM client certificate and key (both or neither). */
  cert?: string;
  key?: string;
  /** Bearer token. */
  token?: string;
  /** The context's namespace, `default` when unset. */
  namespace: string;
  /** True only when the file says so and the caller allowed it. */
  insecureSkipTlsVerify: boolean;
}

export interface KubeconfigOptions {
  /** Accept `insecure-skip-tls-verify: true` (default: refuse it). */
  allowInsecure?: boolean;
  /** Use this context instead of `current-context`. */
  context?: string;
}

type Obj = Record<string, unknown>;

function invalid(file: string, field: string, message: string): NodeletError {
  return new NodeletError('CONFIG_INVALID', `${file}: ${field ? `${field}: ` : ''}${message}`, { file, field });
}

function isObj(v: unknown): v is Obj {
  return !!v && typeof v === 'object' && !Array.isArray(v);
}

/** Why a file could not be read, without its name (the caller names it). */
function readReason(err: unknown): string {
  // An errno as it was (ENOENT, EACCES); a refusal (a FIFO, too large) in words.
  if (isNodeletError(err) && typeof err.details.errno === 'string') return err.details.errno;
  if (isNodeletError(err) && typeof err.details.reason === 'string') return err.details.reason;
  const e = err as { code?: string; message?: string };
  return e.code ?? e.message ?? String(err);
}

/** Finds `<list>[i]` named `name` and returns its `<inner>` object and the field path for messages. */
function lookup(file: string, doc: Obj, list: string, name: string, inner: string, from: string): { value: Obj; field: string } {
  const items = doc[list];
  if (!Array.isArray(items)) throw invalid(file, list, `missing or not a list (needed for ${from} "${name}")`);
  const i = items.findIndex((x) => isObj(x) && x.name === name);
  if (i < 0) throw invalid(file, from, `no ${list} entry named "${name}"`);
  const value = (items[i] as Obj)[inner];
  if (!isObj(value)) throw invalid(file, `${list}[${i}].${inner}`, 'missing or not a mapping');
  return { value, field: `${list}[${i}].${inner}` };
}

function str(file: string, obj: Obj, field: string, key: string): string | undefined {
  const v = obj[key];
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string') throw invalid(file, `${field}.${key}`, `must be a string, got ${typeof v}`);
  return v;
}

/** PEM from `<key>-data` (base64) or from the file `<key>` (relative to the kubeconfig). `-data` wins, as in kubectl. */
function pem(file: string, obj: Obj, field: string, key: string): string | undefined {
  const data = str(file, obj, field, `${key}-data`);
  if (data !== undefined) {
    const text = Buffer.from(data, 'base64').toString('utf8');
    if (!text.includes('-----BEGIN')) throw invalid(file, `${field}.${key}-data`, 'not base64 of a PEM document');
    return text;
  }
  const p = str(file, obj, field, key);
  if (p === undefined) return undefined;
  return readRelative(file, `${field}.${key}`, p, key, FILE_LIMITS.pem);
}

function readRelative(file: string, field: string, p: string, what: string, maxBytes: number): string {
  const abs = path.resolve(path.dirname(file), p);
  try {
    return readBoundedTextSync(abs, { maxBytes, what });
  } catch (err) {
    throw invalid(file, field, `cannot read ${abs}: ${readReason(err)}`);
  }
}

/** Loads `file` (path as given on the command line) into the access nodelet needs. */
export function loadKubeconfig(file: string, opts: KubeconfigOptions = {}): ClusterAccess {
  const abs = path.resolve(file);
  let text: string;
  try {
    text = readBoundedTextSync(abs, { maxBytes: FILE_LIMITS.kubeconfig, what: 'kubeconfig' });
  } catch (err) {
    throw invalid(abs, '', `cannot read: ${readReason(err)}`);
  }
  let docs: unknown[];
  try {
    docs = parseYamlSync(text, { file: abs, what: 'kubeconfig' });
  } catch (err) {
    throw invalid(abs, '', `not valid YAML: ${isNodeletError(err) && typeof err.details.reason === 'string' ? err.details.reason : errorMessage(err)}`);
  }
  if (docs.length > 1) throw invalid(abs, '', `holds ${docs.length} YAML documents; expected one kubeconfig`);
  return accessFrom(abs, docs[0], opts);
}

/** The decision part of loadKubeconfig, on an already parsed document (reads only referenced files). */
export function accessFrom(file: string, doc: unknown, opts: KubeconfigOptions = {}): ClusterAccess {
  if (!isObj(doc)) throw invalid(file, '', 'not a kubeconfig (expected a mapping)');
  const ctxName = opts.context ?? doc['current-context'];
  if (typeof ctxName !== 'string' || !ctxName) throw invalid(file, 'current-context', 'missing');
  const ctx = lookup(file, doc, 'contexts', ctxName, 'context', 'current-context');
  const clusterName = str(file, ctx.value, ctx.field, 'cluster');
  if (!clusterName) throw invalid(file, `${ctx.field}.cluster`, 'missing');
  const cluster = lookup(file, doc, 'clusters', clusterName, 'cluster', `${ctx.field}.cluster`);

  const server = str(file, cluster.value, cluster.field, 'server');
  if (!server) throw invalid(file, `${cluster.field}.server`, 'missing');
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw invalid(file, `${cluster.field}.server`, `"${server}" is not a URL`);
  }
  if (url.protocol !== 'https:') throw invalid(file, `${cluster.field}.server`, `"${server}" is not an https URL`);

  const insecure = cluster.value['insecure-skip-tls-verify'] === true;
  if (insecure && !opts.allowInsecure) {
    throw invalid(file, `${cluster.field}.insecure-skip-tls-verify`, 'refused: nodelet does not talk to a control plane it cannot verify (set certificate-authority)');
  }
  const access: ClusterAccess = {
    file,
    server: server.replace(/\/+$/, ''),
    namespace: str(file, ctx.value, ctx.field, 'namespace') ?? 'default',
    insecureSkipTlsVerify: insecure,
  };
  const ca = pem(file, cluster.value, cluster.field, 'certificate-authority');
  if (ca) access.ca = ca;

  const userName = str(file, ctx.value, ctx.field, 'user');
  if (userName) {
    const user = lookup(file, doc, 'users', userName, 'user', `${ctx.field}.user`);
    // Credential plugins run programs and refresh tokens; a node agent is given files instead.
    for (const k of ['exec', 'auth-provider']) {
      if (user.value[k] !== undefined && user.value[k] !== null) throw invalid(file, `${user.field}.${k}`, 'not supported by nodelet (use client-certificate/client-key or token/tokenFile)');
    }
    const cert = pem(file, user.value, user.field, 'client-certificate');
    const key = pem(file, user.value, user.field, 'client-key');
    if (cert && !key) throw invalid(file, `${user.field}.client-key`, 'missing (client-certificate is set)');
    if (key && !cert) throw invalid(file, `${user.field}.client-certificate`, 'missing (client-key is set)');
    if (cert && key) {
      access.cert = cert;
      access.key = key;
    }
    const token = str(file, user.value, user.field, 'token');
    if (token) access.token = token;
    else {
      const tokenFile = str(file, user.value, user.field, 'tokenFile');
      if (tokenFile) {
        const t = readRelative(file, `${user.field}.tokenFile`, tokenFile, 'tokenFile', FILE_LIMITS.token).trim();
        if (!t) throw invalid(file, `${user.field}.tokenFile`, `${path.resolve(path.dirname(file), tokenFile)} is empty`);
        access.token = t;
      }
    }
  }
  return access;
}
