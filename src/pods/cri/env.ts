/**
 * A container's environment as the kubelet makes it: `env` in order, `$(VAR)` references
 * to earlier variables expanded (`$$` escapes), the downward API (`fieldRef`,
 * `resourceFieldRef`), and the same expansion in `command` and `args`.
 *
 * Expansion is bounded. References can double a value at each step (`E1=$(E0)$(E0)`, ...),
 * so 18 variables of a 1 KB pod would make a 260 MB string on nodelet's only thread. Each
 * expanded value stops at {@link MAX_ARG_STRLEN} (a `NAME=value` string longer than that is
 * refused by execve with E2BIG on Linux: the container could never start) and the
 * environment, command and args together at {@link MAX_EXPANDED_BYTES}; past either bound
 * the container is refused with CreateContainerConfigError naming the variable and the
 * bound. The work is then linear in the pod spec plus the bound, whatever the spec.
 *
 * The API's part, as the kubelet's `makeEnvironmentVariables`: `envFrom` first (ConfigMaps and
 * Secrets, each key with the `prefix`), then `env` in order (a later variable replaces an
 * earlier one of the same name), then the Service variables (service-env.ts) that no variable
 * of the container already names; `$(VAR)` sees the variables set so far and the Service
 * variables. The objects are read before (env-sources.ts, once per object per container
 * start) and handed in as {@link EnvObjects}; this module stays pure. The kubelet's errors,
 * word for word: `configmap "x" not found`, `couldn't find key k in ConfigMap ns/x`,
 * `secret "s" not found`, `couldn't find key k in Secret ns/s` (an `optional` reference to a
 * missing object or key is skipped); on a standalone node (no {@link EnvObjects}) every
 * reference, optional or not, is refused as the kubelet without a client refuses it
 * (`couldn't get configMap ns/x, no kubeClient defined`). All are CreateContainerConfigError.
 *
 * `envFrom` keys: the kubelet of 1.35 (RelaxedEnvironmentVariableValidation, GA and locked on)
 * passes every key on, since the API server admits only `[-._a-zA-Z0-9]+` keys and relaxed
 * prefixes; nodelet skips a key that is not a relaxed name (empty, `=`, a character outside
 * printable ASCII: only a hostile object has one, and it would change what the container
 * sees) and reports the skipped keys as the kubelet before 1.30 did, an
 * `InvalidEnvironmentVariableNames` warning returned in `warnings`. A fetched value with a NUL
 * byte, or a Secret value that is not UTF-8 (a CRI string must be), is refused naming it.
 * Fetched values count against the same bounds as the rest.
 */
import type { ConfigMap, Container, Pod, ResourceFieldSelector, Secret } from 'kubernetes-types/core/v1.js';
import { NodeletError, errorMessage } from '../../errors.js';

const REASON = { reason: 'CreateContainerConfigError' } as const;

/** Linux's bound on one argv or envp string, its NUL included (32 pages: `MAX_ARG_STRLEN`). */
export const MAX_ARG_STRLEN = 128 * 1024;
/**
 * The bound on a container's expanded environment, command and args together: twice
 * Linux's usual `ARG_MAX` (a quarter of the default 8 MiB stack limit) and a quarter of the
 * 16 MiB a CRI message may carry to containerd or CRI-O.
 */
export const MAX_EXPANDED_BYTES = 4 * 1024 * 1024;

export interface EnvContext {
  nodeName?: string;
  hostIP?: string;
  podIP?: string;
  /** Every pod IP (dual stack); `status.podIPs` is them joined by commas. Default: [podIP]. */
  podIPs?: string[];
  /** Parses a resource quantity to base units (cores for cpu, bytes for memory). */
  quantity: (q: string | number) => number;
  /** The API objects env refers to, read for this container start (env-sources.ts); unset on a standalone node. */
  objects?: EnvObjects;
  /** The node's allocatable (Node status form, `cpu: 1900m`): a `resourceFieldRef` to an unset limit gives it. Unset: 0. */
  allocatable?: Readonly<Record<string, string>>;
}

/** What env read from the API for one container start (env-sources.ts). */
export interface EnvObjects {
  /** By name (the pod's namespace): the object, undefined when the API says it does not exist, or the error its read failed with. */
  configMaps: ReadonlyMap<string, ConfigMap | undefined | Error>;
  secrets: ReadonlyMap<string, Secret | undefined | Error>;
  /** The Service variables (service-env.ts), in order; empty when none. */
  serviceEnv: ReadonlyMap<string, string>;
}

/** An event the caller records on the pod (the kubelet's `InvalidEnvironmentVariableNames`). */
export interface EnvWarning {
  reason: string;
  message: string;
}

/** What `$(VAR)` looks names up in. */
export interface VarLookup {
  get(name: string): string | undefined;
}

/** Thrown by {@link expand} when the result would be longer than `limit`. */
export class ExpansionTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`expansion exceeds ${limit} bytes`);
  }
}

/**
 * The kubelet's expansion (its `third_party/forked/golang/expansion`): `$(NAME)` is replaced
 * when NAME is defined and kept as is otherwise; `$$` is `$`; a `$` before anything else,
 * and an unclosed `$(`, are kept. Throws {@link ExpansionTooLarge} as soon as the result
 * would be longer than `limit` characters, before building it: the work is bounded by the
 * input's length plus `limit`.
 */
export function expand(input: string, vars: VarLookup, limit = Infinity): string {
  if (input.indexOf('$') < 0) {
    if (input.length > limit) throw new ExpansionTooLarge(limit);
    return input;
  }
  const parts: string[] = [];
  let size = 0;
  const put = (s: string): void => {
    size += s.length;
    if (size > limit) throw new ExpansionTooLarge(limit);
    parts.push(s);
  };
  let done = 0; // input[0, done) is in parts
  let cursor = input.indexOf('$');
  while (cursor >= 0 && cursor + 1 < input.length) {
    put(input.slice(done, cursor));
    const next = input[cursor + 1];
    let advance = 2;
    if (next === '$') put('$');
    else if (next === '(') {
      const close = input.indexOf(')', cursor + 2);
      if (close < 0) put('$(');
      else {
        const name = input.slice(cursor + 2, close);
        const value = vars.get(name);
        put(value ?? `$(${name})`);
        advance = close + 1 - cursor;
      }
    } else put(`$${next}`);
    done = cursor + advance;
    cursor = input.indexOf('$', done);
  }
  put(input.slice(done));
  return parts.join('');
}

const LABEL_OR_ANNOTATION = /^metadata\.(labels|annotations)\['(.+)'\]$/;

/**
 * The downward API's pod metadata fields, for env and volumes alike: `metadata.name`,
 * `.namespace`, `.uid`, and one label or annotation by key (`metadata.labels['app']`);
 * undefined for another path.
 */
export function podMetadataField(pod: Pod, fieldPath: string): string | undefined {
  const m = pod.metadata ?? {};
  if (fieldPath === 'metadata.name') return m.name ?? '';
  if (fieldPath === 'metadata.namespace') return m.namespace ?? 'default';
  if (fieldPath === 'metadata.uid') return m.uid ?? '';
  const lm = LABEL_OR_ANNOTATION.exec(fieldPath);
  return lm ? ((lm[1] === 'labels' ? m.labels : m.annotations)?.[lm[2]!] ?? '') : undefined;
}

function fieldValue(pod: Pod, fieldPath: string, ctx: EnvContext, env: string): string {
  const meta = podMetadataField(pod, fieldPath);
  if (meta !== undefined) return meta;
  switch (fieldPath) {
    case 'spec.nodeName':
      return pod.spec?.nodeName ?? ctx.nodeName ?? '';
    case 'spec.serviceAccountName':
      return pod.spec?.serviceAccountName ?? '';
    case 'status.hostIP':
    case 'status.hostIPs':
      return ctx.hostIP ?? '';
    case 'status.podIP':
      return ctx.podIP ?? '';
    case 'status.podIPs':
      return (ctx.podIPs ?? (ctx.podIP ? [ctx.podIP] : [])).join(',');
  }
  throw new NodeletError('INVALID_ARGUMENT', `env ${env}: fieldRef.fieldPath ${JSON.stringify(fieldPath)} is not supported`, REASON);
}

/** The limits the downward API defaults when a container leaves them unset or zero (the kubelet's MergeContainerResourceLimits). */
const DEFAULTED_LIMITS = ['cpu', 'memory', 'ephemeral-storage'];
/** The pod-level limits (`spec.resources`, PodLevelResources) that come before the node's allocatable. */
const POD_LEVEL_LIMITS = ['cpu', 'memory'];

/**
 * What an unset limit defaults to in the downward API, as the kubelet's
 * `defaultPodLimitsForDownwardAPI`: the node's allocatable cpu, memory and ephemeral-storage,
 * where the pod sets a non-zero pod-level limit (`spec.resources.limits`) that one instead.
 * Undefined when the node's allocatable is not known.
 */
export function downwardApiLimitDefaults(pod: Pod, allocatable: Readonly<Record<string, string>> | undefined, quantity: (q: string | number) => number): Record<string, string | number> | undefined {
  if (!allocatable) return undefined;
  const out: Record<string, string | number> = {};
  for (const r of DEFAULTED_LIMITS) if (typeof allocatable[r] === 'string') out[r] = allocatable[r];
  // `spec.resources` is newer than the kubernetes-types this reads the pod with.
  const podLimits = (pod.spec as { resources?: { limits?: Record<string, string | number> } } | undefined)?.resources?.limits ?? {};
  for (const r of POD_LEVEL_LIMITS) {
    const q = podLimits[r];
    if (q !== undefined && out[r] !== undefined && quantity(q) !== 0) out[r] = q;
  }
  return out;
}

/**
 * A container's resource as the downward API gives it (env and volumes): `limits.<r>` or
 * `requests.<r>` (a request defaults to the limit the container sets), in units of `divisor`,
 * rounded up. An unset or zero `limits.cpu`, `limits.memory` or `limits.ephemeral-storage`
 * gives `limitDefaults` (downwardApiLimitDefaults: the node's allocatable) as the kubelet does,
 * 0 when they are not given; an unset request gives 0. `where` names the reference in errors
 * (`env CPU`, `volume "podinfo" items[0]`).
 */
export function resourceFieldValue(
  c: Container,
  ref: ResourceFieldSelector,
  quantity: (q: string | number) => number,
  where: string,
  limitDefaults?: Readonly<Record<string, string | number>>,
): string {
  const [kind, name] = ref.resource.split('.', 2) as [string, string | undefined];
  if ((kind !== 'limits' && kind !== 'requests') || !name) throw new NodeletError('INVALID_ARGUMENT', `${where}: resourceFieldRef.resource ${JSON.stringify(ref.resource)} is not supported`, REASON);
  const limits = c.resources?.limits ?? {};
  const requests = { ...limits, ...(c.resources?.requests ?? {}) };
  let q: string | number | undefined = (kind === 'limits' ? limits : requests)[name];
  if (kind === 'limits' && DEFAULTED_LIMITS.includes(name) && (q === undefined || quantity(q) === 0)) q = limitDefaults?.[name];
  const value = q === undefined ? 0 : quantity(q);
  const divisor = ref.divisor === undefined ? 1 : quantity(ref.divisor);
  if (!(divisor > 0)) throw new NodeletError('INVALID_ARGUMENT', `${where}: resourceFieldRef.divisor must be positive`, REASON);
  // As the kubelet: rounded up to an integer of the divisor.
  return String(Math.ceil(value / divisor));
}

/**
 * Expands one value within both bounds; `what` names it in the error (`env FOO`, `args[2]`).
 * `overhead` is what the string costs beside its value (`NAME=` and the NUL of an envp entry).
 */
class Budget {
  #left = MAX_EXPANDED_BYTES;

  /** Expands `input`; the result's UTF-8 size plus `overhead` must fit both bounds. */
  expand(what: string, input: string, vars: VarLookup, overhead: number): string {
    return this.#fit(what, overhead, (limit) => expand(input, vars, limit));
  }

  /**
   * Counts a value that is not expanded (the downward API's, a fetched one) against the same
   * bounds; `value` may be a maker given the limit, which throws ExpansionTooLarge past it
   * before doing the work (a Secret's value is not decoded when its base64 is already too long).
   */
  take(what: string, value: string | ((limit: number) => string), overhead: number): string {
    return this.#fit(what, overhead, typeof value === 'string' ? () => value : value);
  }

  /** Counts `bytes` of values known to fit one variable each (the Service variables) against the total bound. */
  reserve(what: string, bytes: number): void {
    if (bytes > this.#left) throw this.#refuse(what, false);
    this.#left -= bytes;
  }

  #fit(what: string, overhead: number, make: (limit: number) => string): string {
    const single = MAX_ARG_STRLEN - overhead;
    const limit = Math.max(0, Math.min(single, this.#left - overhead));
    let out: string;
    try {
      // Bounded in UTF-16 units while it is built (cheap, and it stops a doubling early), then in bytes.
      out = make(limit);
    } catch (err) {
      if (err instanceof ExpansionTooLarge) throw this.#refuse(what, limit === single);
      throw err;
    }
    const bytes = out.length > limit ? Infinity : Buffer.byteLength(out);
    if (bytes > limit) throw this.#refuse(what, limit === single);
    this.#left -= bytes + overhead;
    return out;
  }

  #refuse(what: string, single: boolean): NodeletError {
    const why = single
      ? `the value would exceed ${MAX_ARG_STRLEN} bytes, the most one ${what.startsWith('env') ? 'environment variable (with its name)' : 'argument'} can hold (Linux MAX_ARG_STRLEN: execve refuses it with E2BIG)`
      : `the container's environment, command and args would exceed ${MAX_EXPANDED_BYTES} bytes together, nodelet's bound on them`;
    return new NodeletError('INVALID_ARGUMENT', `${what}: ${why}`, { ...REASON, bound: single ? MAX_ARG_STRLEN : MAX_EXPANDED_BYTES });
  }
}

/** The kubelet's IsRelaxedEnvVarName: printable ASCII other than `=`, not empty. */
const RELAXED_ENV_NAME_RE = /^[\x20-\x3c\x3e-\x7e]+$/;
export function isRelaxedEnvVarName(name: string): boolean {
  return RELAXED_ENV_NAME_RE.test(name);
}

/** At most this many characters of skipped key names go into one InvalidEnvironmentVariableNames message. */
const MAX_LISTED_KEYS_CHARS = 1024;

const utf8 = new TextDecoder('utf-8', { fatal: true });

type Kind = 'configMap' | 'secret';

/** The container's environment, in order, and its command and args with `$(VAR)` expanded, within the bounds above. */
export function containerEnv(pod: Pod, c: Container, ctx: EnvContext): { envs: { key: string; value: string }[]; command: string[]; args: string[]; warnings: EnvWarning[] } {
  const b = new EnvBuilder(pod, c, ctx);
  // envFrom first; env then replaces what it names.
  for (const from of c.envFrom ?? []) b.envFrom(from);
  for (const e of c.env ?? []) b.envVar(e);
  const envs = b.withServiceVars();
  return {
    envs,
    command: (c.command ?? []).map((s, i) => b.budget.expand(`command[${i}]`, s, b.lookup, 1)),
    args: (c.args ?? []).map((s, i) => b.budget.expand(`args[${i}]`, s, b.lookup, 1)),
    warnings: b.warnings,
  };
}

/** One container's environment as it is built: the variables so far, the byte budget, the warnings. */
class EnvBuilder {
  readonly ns: string;
  readonly budget = new Budget();
  readonly vars = new Map<string, string>();
  readonly warnings: EnvWarning[] = [];
  readonly serviceEnv: ReadonlyMap<string, string>;
  readonly lookup: VarLookup;

  constructor(
    readonly pod: Pod,
    readonly c: Container,
    readonly ctx: EnvContext,
  ) {
    this.ns = pod.metadata?.namespace ?? 'default';
    this.serviceEnv = ctx.objects?.serviceEnv ?? new Map<string, string>();
    this.lookup = { get: (name) => this.vars.get(name) ?? this.serviceEnv.get(name) };
  }

  static overheadOf(name: string): number {
    return Buffer.byteLength(name) + 2;
  }

  /** The object a reference names; undefined when it is missing and `optional`. Throws the kubelet's errors. */
  object(kind: Kind, name: string, optional: boolean, what: string): ConfigMap | Secret | undefined {
    const { ctx, ns } = this;
    const label = kind === 'configMap' ? 'configMap' : 'secret';
    if (!ctx.objects) {
      throw new NodeletError('INVALID_ARGUMENT', `${what}: couldn't get ${label} ${ns}/${name}, no kubeClient defined (a standalone node reads no API objects)`, REASON);
    }
    const found = (kind === 'configMap' ? ctx.objects.configMaps : ctx.objects.secrets).get(name);
    if (found instanceof Error) throw new NodeletError(found instanceof NodeletError ? found.code : 'UNAVAILABLE', errorMessage(found), REASON, { cause: found });
    if (found !== undefined) return found;
    if (optional) return undefined;
    throw new NodeletError('NOT_FOUND', `${kind === 'configMap' ? 'configmap' : 'secret'} ${JSON.stringify(name)} not found`, REASON);
  }

  /** A fetched value, checked and counted: a Secret's is decoded from base64 (only once it fits the bound). */
  fetched(what: string, kind: Kind, from: string, key: string, raw: unknown, overhead: number): string {
    const { ns } = this;
    if (typeof raw !== 'string') throw new NodeletError('INVALID_ARGUMENT', `${what}: ${kind} ${ns}/${from} key ${JSON.stringify(key)} is not a string`, REASON);
    const value = this.budget.take(
      what,
      (limit) => {
        if (kind === 'configMap') return raw;
        // base64: 4 characters per 3 bytes; past this it cannot fit, so it is not decoded.
        if (raw.length > Math.ceil(limit / 3) * 4 + 4) throw new ExpansionTooLarge(limit);
        try {
          return utf8.decode(Buffer.from(raw, 'base64'));
        } catch {
          throw new NodeletError('INVALID_ARGUMENT', `${what}: the value of key ${JSON.stringify(key)} in Secret ${ns}/${from} is not UTF-8, which an environment value must be`, REASON);
        }
      },
      overhead,
    );
    if (value.includes('\0')) throw new NodeletError('INVALID_ARGUMENT', `${what}: the value of key ${JSON.stringify(key)} in ${kind === 'configMap' ? 'ConfigMap' : 'Secret'} ${ns}/${from} holds a NUL byte, which an environment variable cannot carry`, REASON);
    return value;
  }

  /** One `envFrom` source: each valid key (with the prefix); invalid ones are skipped with a warning naming them. */
  envFrom(from: NonNullable<Container['envFrom']>[number]): void {
    const { ns } = this;
    const kind: Kind | undefined = from.configMapRef ? 'configMap' : from.secretRef ? 'secret' : undefined;
    if (!kind) return;
    const ref = (from.configMapRef ?? from.secretRef)!;
    const obj = this.object(kind, ref.name ?? '', ref.optional === true, `envFrom ${kind}Ref ${JSON.stringify(ref.name ?? '')}`);
    if (!obj) return;
    const invalid: string[] = [];
    const data: Record<string, unknown> = (obj.data as Record<string, unknown> | undefined) ?? {};
    for (const key of Object.keys(data)) {
      const name = (from.prefix ?? '') + key;
      if (!isRelaxedEnvVarName(name)) {
        invalid.push(name);
        continue;
      }
      this.vars.set(name, this.fetched(`env ${name} (envFrom ${kind} ${ns}/${ref.name})`, kind, ref.name ?? '', key, data[key], EnvBuilder.overheadOf(name)));
    }
    if (!invalid.length) return;
    invalid.sort();
    let listed = '';
    let n = 0;
    for (; n < invalid.length && listed.length < MAX_LISTED_KEYS_CHARS; n++) listed += (n ? ', ' : '') + invalid[n];
    if (n < invalid.length) listed += `, ... (${invalid.length - n} more)`;
    this.warnings.push({
      reason: 'InvalidEnvironmentVariableNames',
      message: `Keys [${listed}] from the EnvFrom ${kind} ${ns}/${ref.name} were skipped since they are considered invalid environment variable names.`,
    });
  }

  /** One `env` entry: a value (expanded), the downward API, or a ConfigMap's or Secret's key. */
  envVar(e: NonNullable<Container['env']>[number]): void {
    const { pod, c, ctx, ns, budget } = this;
    const what = `env ${e.name}`;
    const overhead = EnvBuilder.overheadOf(e.name);
    let value: string;
    const vf = e.valueFrom;
    if (!vf || (e.value !== undefined && e.value !== '')) value = budget.expand(what, e.value ?? '', this.lookup, overhead);
    else if (vf.fieldRef) value = budget.take(what, fieldValue(pod, vf.fieldRef.fieldPath, ctx, e.name), overhead);
    else if (vf.resourceFieldRef) {
      const defaults = downwardApiLimitDefaults(pod, ctx.allocatable, ctx.quantity);
      value = budget.take(what, resourceFieldValue(c, vf.resourceFieldRef, ctx.quantity, what, defaults), overhead);
    } else if (vf.configMapKeyRef || vf.secretKeyRef) {
      const kind: Kind = vf.configMapKeyRef ? 'configMap' : 'secret';
      const ref = (vf.configMapKeyRef ?? vf.secretKeyRef)!;
      const optional = ref.optional === true;
      const obj = this.object(kind, ref.name ?? '', optional, what);
      if (!obj) return;
      const data = (obj.data as Record<string, unknown> | undefined) ?? {};
      if (!Object.hasOwn(data, ref.key)) {
        if (optional) return;
        throw new NodeletError('NOT_FOUND', `couldn't find key ${ref.key} in ${kind === 'configMap' ? 'ConfigMap' : 'Secret'} ${ns}/${ref.name}`, REASON);
      }
      value = this.fetched(what, kind, ref.name ?? '', ref.key, data[ref.key], overhead);
    } else {
      throw new NodeletError('INVALID_ARGUMENT', `env ${e.name}: valueFrom has no source nodelet supports (fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef)`, REASON);
    }
    this.vars.set(e.name, value);
  }

  /**
   * The variables, then the Service variables the container does not set itself, counted
   * together: they are short ASCII (service-env.ts), and a namespace may have thousands.
   */
  withServiceVars(): { key: string; value: string }[] {
    const envs = [...this.vars].map(([key, value]) => ({ key, value }));
    let serviceBytes = 0;
    let services = 0;
    for (const [key, value] of this.serviceEnv) {
      if (this.vars.has(key)) continue;
      envs.push({ key, value });
      serviceBytes += key.length + value.length + 2;
      services++;
    }
    if (services) this.budget.reserve(`env: the ${services} Service variables (enableServiceLinks: false leaves out those of the pod's namespace)`, serviceBytes);
    return envs;
  }
}
