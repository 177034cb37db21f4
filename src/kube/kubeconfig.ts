/**
 * `--kubeconfig`: the current context's server, CA and credentials, as kubectl reads them.
 * Paths are relative to the kubeconfig's directory; `*-data` fields are base64 PEM;
 * `token` or `tokenFile` give a bearer token. Every problem names the file and the field
 * (`<file>: users[0].user.client-certificate: cannot read /x: ENOENT`), found at startup,
 * before the lock is taken.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { NodeletError, errorMessage } from '../errors.js';

export interface ClusterAccess {
  /** https://host:port, no trailing slash. */
  server: string;
  /** PEM bundle; undefined: the system's CAs. */
  ca?: string;
  cert?: string;
  key?: string;
  token?: string;
  /** The context's namespace (default `default`). */
  namespace: string;
  /** The file, for messages. */
  source: string;
}

type Obj = Record<string, unknown>;

function bad(file: string, field: string, message: string): NodeletError {
  return new NodeletError('CONFIG_INVALID', `${file}: ${field}: ${message}`, { file, field });
}

function named(file: string, doc: Obj, list: string, name: string, inner: string): { value: Obj; field: string } {
  const items = doc[list];
  if (!Array.isArray(items)) throw bad(file, list, 'missing or not a list');
  const i = items.findIndex((x: Obj) => x?.name === name);
  if (i < 0) throw bad(file, list, `no entry named "${name}"`);
  const value = (items[i] as Obj)[inner];
  if (!value || typeof value !== 'object') throw bad(file, `${list}[${i}].${inner}`, 'missing');
  return { value: value as Obj, field: `${list}[${i}].${inner}` };
}

/** Reads a PEM from `<key>-data` (base64) or `<key>` (a path relative to the kubeconfig). */
function pem(file: string, obj: Obj, field: string, key: string): string | undefined {
  const data = obj[`${key}-data`];
  if (typeof data === 'string' && data) return Buffer.from(data, 'base64').toString('utf8');
  const p = obj[key];
  if (typeof p !== 'string' || !p) return undefined;
  const abs = path.resolve(path.dirname(file), p);
  try {
    return fs.readFileSync(abs, 'utf8');
  } catch (err) {
    throw bad(file, `${field}.${key}`, `cannot read ${abs}: ${errorMessage(err)}`);
  }
}

export function loadKubeconfig(file: string): ClusterAccess {
  const abs = path.resolve(file);
  let doc: Obj;
  try {
    doc = parse(fs.readFileSync(abs, 'utf8')) as Obj;
  } catch (err) {
    throw new NodeletError('CONFIG_INVALID', `--kubeconfig ${abs}: ${errorMessage(err)}`, { file: abs });
  }
  if (!doc || typeof doc !== 'object') throw bad(abs, '', 'not a kubeconfig (a YAML or JSON object)');
  const current = doc['current-context'];
  if (typeof current !== 'string' || !current) throw bad(abs, 'current-context', 'missing');
  const ctx = named(abs, doc, 'contexts', current, 'context');
  const clusterName = ctx.value.cluster;
  const userName = ctx.value.user;
  if (typeof clusterName !== 'string') throw bad(abs, `${ctx.field}.cluster`, 'missing');
  const cluster = named(abs, doc, 'clusters', clusterName, 'cluster');
  const server = cluster.value.server;
  if (typeof server !== 'string' || !/^https?:\/\/[^/]+/.test(server)) throw bad(abs, `${cluster.field}.server`, `"${String(server)}" is not an http(s) URL`);
  if (cluster.value['insecure-skip-tls-verify'] === true) throw bad(abs, `${cluster.field}.insecure-skip-tls-verify`, 'nodelet does not talk to a control plane it cannot verify');
  const access: ClusterAccess = { server: server.replace(/\/+$/, ''), namespace: typeof ctx.value.namespace === 'string' ? ctx.value.namespace : 'default', source: abs };
  const ca = pem(abs, cluster.value, cluster.field, 'certificate-authority');
  if (ca) access.ca = ca;
  if (typeof userName === 'string' && userName) {
    const user = named(abs, doc, 'users', userName, 'user');
    const cert = pem(abs, user.value, user.field, 'client-certificate');
    const key = pem(abs, user.value, user.field, 'client-key');
    if (!!cert !== !!key) throw bad(abs, user.field, 'client-certificate and client-key go together');
    if (cert && key) Object.assign(access, { cert, key });
    const token = user.value.token;
    const tokenFile = user.value.tokenFile ?? user.value['token-file'];
    if (typeof token === 'string' && token) access.token = token;
    else if (typeof tokenFile === 'string' && tokenFile) {
      const p = path.resolve(path.dirname(abs), tokenFile);
      try {
        access.token = fs.readFileSync(p, 'utf8').trim();
      } catch (err) {
        throw bad(abs, `${user.field}.tokenFile`, `cannot read ${p}: ${errorMessage(err)}`);
      }
    }
  }
  return access;
}
