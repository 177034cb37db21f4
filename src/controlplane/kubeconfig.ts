/**
 * Reads a kubeconfig (YAML or JSON) the way kubectl does: the current context selects a
 * cluster (server URL, CA from `certificate-authority` or `-data`) and a user (client
 * certificate/key from file or `-data`, `token` or `tokenFile`, or an `exec` credential plugin,
 * validated here and run by exec-credential.ts). Relative paths are
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
import { EXEC_API_VERSIONS, type ExecClusterInfo, type ExecConfig, type InteractiveMode } from './exec-credential.js';

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
  /**
   * A credential plugin (`exec`), when the user has neither a token nor a client certificate
   * (as client-go: a static credential wins over the plugin): run by exec-credential.ts.
   */
  exec?: ExecConfig;
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
    // auth-provider (gcp, azure, oidc) was removed from client-go in 1.26: exec replaced it.
    if (user.value['auth-provider'] !== undefined && user.value['auth-provider'] !== null) {
      throw invalid(file, `${user.field}.auth-provider`, 'not supported (removed from client-go in 1.26; use an exec credential plugin, client-certificate/client-key or token/tokenFile)');
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
    const exec = user.value['exec'];
    if (exec !== undefined && exec !== null && !access.token && !access.cert) {
      access.exec = parseExecConfig(file, `${user.field}.exec`, exec, clusterInfo(file, cluster.value, cluster.field, access));
    }
  }
  return access;
}

/** What a plugin with `provideClusterInfo` is told of the cluster (client.authentication.k8s.io Cluster). */
function clusterInfo(file: string, c: Obj, field: string, access: ClusterAccess): ExecClusterInfo {
  const info: ExecClusterInfo = { server: access.server };
  const sni = str(file, c, field, 'tls-server-name');
  if (sni) info['tls-server-name'] = sni;
  if (access.insecureSkipTlsVerify) info['insecure-skip-tls-verify'] = true;
  if (access.ca) info['certificate-authority-data'] = Buffer.from(access.ca).toString('base64');
  const proxy = str(file, c, field, 'proxy-url');
  if (proxy) info['proxy-url'] = proxy;
  if (c['disable-compression'] === true) info['disable-compression'] = true;
  const ext = Array.isArray(c['extensions']) ? (c['extensions'] as unknown[]).find((e) => isObj(e) && e.name === 'client.authentication.k8s.io/exec') : undefined;
  if (isObj(ext) && ext.extension !== undefined) info.config = ext.extension;
  return info;
}

const INTERACTIVE_MODES: readonly InteractiveMode[] = ['Never', 'IfAvailable', 'Always'];

/**
 * A user's `exec`, validated as clientcmd validates it: `command` and `apiVersion` required
 * (v1 or v1beta1; v1alpha1 was removed in 1.24), `interactiveMode` required for v1
 * (v1beta1: IfAvailable), `env` entries with a name. `Always` needs a terminal, which a node
 * agent never has: refused here, naming the field.
 */
export function parseExecConfig(file: string, field: string, v: unknown, cluster: ExecClusterInfo): ExecConfig {
  if (!isObj(v)) throw invalid(file, field, 'must be a mapping');
  const command = str(file, v, field, 'command');
  if (!command) throw invalid(file, `${field}.command`, 'missing');
  const apiVersion = str(file, v, field, 'apiVersion');
  if (!apiVersion) throw invalid(file, `${field}.apiVersion`, 'missing');
  if (!(EXEC_API_VERSIONS as readonly string[]).includes(apiVersion)) throw invalid(file, `${field}.apiVersion`, `"${apiVersion}" is not one of ${EXEC_API_VERSIONS.join(', ')}`);
  const args = v['args'] ?? [];
  if (!Array.isArray(args) || !args.every((a) => typeof a === 'string')) throw invalid(file, `${field}.args`, 'must be a list of strings');
  const envList = v['env'] ?? [];
  if (!Array.isArray(envList)) throw invalid(file, `${field}.env`, 'must be a list of {name, value}');
  const env = envList.map((e, i) => {
    if (!isObj(e) || typeof e.name !== 'string' || !e.name) throw invalid(file, `${field}.env[${i}].name`, 'missing');
    if (e.value !== undefined && e.value !== null && typeof e.value !== 'string') throw invalid(file, `${field}.env[${i}].value`, 'must be a string');
    return { name: e.name, value: typeof e.value === 'string' ? e.value : '' };
  });
  let mode = str(file, v, field, 'interactiveMode');
  if (!mode) {
    if (apiVersion === 'client.authentication.k8s.io/v1') throw invalid(file, `${field}.interactiveMode`, 'must be specified for client.authentication.k8s.io/v1 (Never, for a node agent)');
    mode = 'IfAvailable';
  }
  if (!(INTERACTIVE_MODES as readonly string[]).includes(mode)) throw invalid(file, `${field}.interactiveMode`, `"${mode}" is not one of ${INTERACTIVE_MODES.join(', ')}`);
  if (mode === 'Always') throw invalid(file, `${field}.interactiveMode`, 'Always needs a terminal, which nodelet never has (use Never)');
  const pci = v['provideClusterInfo'];
  if (pci !== undefined && pci !== null && typeof pci !== 'boolean') throw invalid(file, `${field}.provideClusterInfo`, 'must be true or false');
  const installHint = str(file, v, field, 'installHint');
  return {
    command,
    args: args as string[],
    env,
    apiVersion: apiVersion as ExecConfig['apiVersion'],
    ...(installHint ? { installHint } : {}),
    provideClusterInfo: pci === true,
    interactiveMode: mode as InteractiveMode,
    cluster,
    origin: `${file}: ${field}`,
  };
}
