/**
 * The Service environment variables a container starts with, as the kubelet makes them
 * (`getServiceEnvVarMap` and `pkg/kubelet/envvars`): for each Service with a cluster IP,
 * `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` (the first port), `<NAME>_SERVICE_PORT_<PORTNAME>`
 * per named port, and the Docker-link family `<NAME>_PORT` (the first port's URL) and, per port,
 * `<NAME>_PORT_<port>_<PROTO>` (URL), `..._PROTO`, `..._PORT`, `..._ADDR`. NAME is the Service's
 * name upper-cased with `-` as `_`; an IPv6 cluster IP is bracketed in the URLs.
 *
 * Which Services: the master Service `kubernetes` of namespace `default`, always; with
 * `enableServiceLinks` (default true) every Service of the pod's namespace too (a Service of
 * the pod's namespace named `kubernetes` does not replace the master one). Headless Services
 * (`clusterIP` `None` or empty) give nothing. A standalone node has no Services, so none.
 *
 * The kubelet reads Services from an informer, which keeps answering through a control-plane
 * outage; nodelet lists them through the ApiObjects port at each container start (container
 * starts at the same moment share one list per namespace) and keeps the last list it got per
 * namespace, which it uses when a list fails (so a container restarting while the control plane
 * is down gets the Services it would have got a moment before). Measured against the test
 * control plane on a loaded 2-core machine: a container start's two lists take a median of
 * 6–14 ms (0 to 200 Services), against ~110 ms for its CRI calls; no cache beyond that.
 */
import { isIP } from 'node:net';
import type { Service } from 'kubernetes-types/core/v1.js';
import { NodeletError, errorMessage } from '../../errors.js';
import type { ApiObjects } from '../objects/objects.js';

const MASTER_NAMESPACE = 'default';
const MASTER_SERVICES = new Set(['kubernetes']);
const PROTOCOLS = new Set(['TCP', 'UDP', 'SCTP']);
/** Service and port names are DNS-1035 / IANA_SVC_NAME labels; anything else makes no variable. */
const NAME_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** `my-svc` → `MY_SVC` (the kubelet's makeEnvVariableName). */
function envName(s: string): string {
  return s.replaceAll('-', '_').toUpperCase();
}

/** The kubelet's IsServiceIPSet, and an IP nodelet can write (a hostile string makes no variable). */
function clusterIP(s: Service): string | undefined {
  const ip = s.spec?.clusterIP;
  return typeof ip === 'string' && ip !== 'None' && ip !== '' && isIP(ip) ? ip : undefined;
}

/** One Service's variables, in the kubelet's order; none for a Service that is headless or malformed. */
function serviceVars(s: Service, out: Map<string, string>): void {
  const ip = clusterIP(s);
  const name = s.metadata?.name;
  const ports = s.spec?.ports;
  if (!ip || typeof name !== 'string' || !NAME_RE.test(name) || !Array.isArray(ports) || ports.length === 0) return;
  const valid = ports.every((p) => Number.isInteger(p?.port) && p.port >= 1 && p.port <= 65535 && (p.protocol === undefined || PROTOCOLS.has(p.protocol)) && (p.name === undefined || p.name === '' || NAME_RE.test(p.name)));
  if (!valid) return;
  const prefix = envName(name);
  const host = ip.includes(':') ? `[${ip}]` : ip;
  out.set(`${prefix}_SERVICE_HOST`, ip);
  out.set(`${prefix}_SERVICE_PORT`, String(ports[0]!.port));
  for (const p of ports) if (p.name) out.set(`${prefix}_SERVICE_PORT_${envName(p.name)}`, String(p.port));
  ports.forEach((p, i) => {
    const proto = p.protocol ?? 'TCP';
    const url = `${proto.toLowerCase()}://${host}:${p.port}`;
    if (i === 0) out.set(`${prefix}_PORT`, url);
    const pp = `${prefix}_PORT_${p.port}_${proto}`;
    out.set(pp, url);
    out.set(`${pp}_PROTO`, proto.toLowerCase());
    out.set(`${pp}_PORT`, String(p.port));
    out.set(`${pp}_ADDR`, ip);
  });
}

/**
 * The Services whose variables a pod of `namespace` gets, in name order: `master` is the
 * `default` namespace's list (the `kubernetes` Service is taken from it), `own` the pod's
 * namespace's (read only with `enableServiceLinks`).
 */
function chooseServices(namespace: string, enableServiceLinks: boolean, master: readonly Service[], own: readonly Service[]): Service[] {
  const chosen = new Map<string, Service>();
  for (const s of master) {
    const name = s?.metadata?.name;
    if (typeof name === 'string' && MASTER_SERVICES.has(name) && clusterIP(s) && !chosen.has(name)) chosen.set(name, s);
  }
  if (enableServiceLinks) {
    for (const s of namespace === MASTER_NAMESPACE ? master : own) {
      const name = s?.metadata?.name;
      // The master Service keeps its place (the kubelet's pick between the two is by list order).
      if (typeof name === 'string' && clusterIP(s) && !(MASTER_SERVICES.has(name) && chosen.has(name))) chosen.set(name, s);
    }
  }
  return [...chosen.keys()].sort().map((name) => chosen.get(name)!);
}

/**
 * The Service variables for a pod of `namespace` (chooseServices), each Service's in the
 * kubelet's order. Pure; linear in the Services given. Every name and value is ASCII (names
 * are checked labels, values IPs, ports and protocols), so a length is a byte count.
 */
export function serviceEnvVars(namespace: string, enableServiceLinks: boolean, master: readonly Service[], own: readonly Service[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const s of chooseServices(namespace, enableServiceLinks, master, own)) serviceVars(s, out);
  return out;
}

/** Services made into variables between two yields to the event loop (measured: ~13 variables each; BENCHMARKS.md). */
const SERVICES_PER_TURN = 200;
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** How many namespaces' last lists are kept (the namespaces of this node's pods; least recently used go first). */
const MAX_NAMESPACES = 512;

/**
 * Lists the Services a container's environment needs through the ApiObjects port, at each
 * container start, keeping each namespace's last list as the fallback for a failed one.
 * One per CriPodRuntime; not shared between nodes.
 */
export class ServiceEnvSource {
  readonly #objects: ApiObjects;
  readonly #last = new Map<string, readonly Service[]>();
  /** Lists under way: container starts at the same moment (a node starting its pods) share one request per namespace. */
  readonly #inflight = new Map<string, Promise<readonly Service[]>>();

  constructor(objects: ApiObjects) {
    this.#objects = objects;
  }

  /**
   * The Service variables for a pod of `namespace`. Throws CreateContainerConfigError when a
   * list fails and no earlier list of that namespace is known (the kubelet's "failed to list
   * services when setting up env vars").
   */
  async envFor(namespace: string, enableServiceLinks: boolean): Promise<Map<string, string>> {
    const needOwn = enableServiceLinks && namespace !== MASTER_NAMESPACE;
    const [master, own] = await Promise.all([this.#list(MASTER_NAMESPACE), needOwn ? this.#list(namespace) : Promise.resolve([])]);
    // As serviceEnvVars, yielding between slices: a namespace of thousands of Services does not hold the event loop.
    const out = new Map<string, string>();
    const chosen = chooseServices(namespace, enableServiceLinks, master, own);
    for (let i = 0; i < chosen.length; i++) {
      if (i > 0 && i % SERVICES_PER_TURN === 0) await nextTurn();
      serviceVars(chosen[i]!, out);
    }
    return out;
  }

  #list(namespace: string): Promise<readonly Service[]> {
    let p = this.#inflight.get(namespace);
    if (!p) {
      p = this.#fetch(namespace).finally(() => this.#inflight.delete(namespace));
      this.#inflight.set(namespace, p);
    }
    return p;
  }

  async #fetch(namespace: string): Promise<readonly Service[]> {
    try {
      const list = await this.#objects.services(namespace);
      const services = Array.isArray(list) ? list : [];
      this.#last.delete(namespace);
      this.#last.set(namespace, services);
      if (this.#last.size > MAX_NAMESPACES) this.#last.delete(this.#last.keys().next().value!);
      return services;
    } catch (err) {
      const last = this.#last.get(namespace);
      if (last) return last;
      throw new NodeletError(
        err instanceof NodeletError ? err.code : 'UNAVAILABLE',
        `failed to list services when setting up env vars: services of namespace ${namespace}: ${errorMessage(err)}`,
        { reason: 'CreateContainerConfigError' },
        { cause: err },
      );
    }
  }
}
