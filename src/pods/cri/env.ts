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
 * `configMapKeyRef`, `secretKeyRef` and `envFrom` need objects from the control plane that
 * nodelet does not read: an optional one is skipped, a required one is refused with
 * CreateContainerConfigError naming the variable, never dropped in silence.
 */
import type { Container, Pod, ResourceFieldSelector } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../errors.js';

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
export function expand(input: string, vars: ReadonlyMap<string, string>, limit = Infinity): string {
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

/**
 * A container's resource as the downward API gives it (env and volumes): `limits.<r>` or
 * `requests.<r>` (a request defaults to the limit), in units of `divisor`, rounded up.
 * `where` names the reference in errors (`env CPU`, `volume "podinfo" items[0]`).
 */
export function resourceFieldValue(c: Container, ref: ResourceFieldSelector, quantity: (q: string | number) => number, where: string): string {
  const [kind, name] = ref.resource.split('.', 2) as [string, string | undefined];
  if ((kind !== 'limits' && kind !== 'requests') || !name) throw new NodeletError('INVALID_ARGUMENT', `${where}: resourceFieldRef.resource ${JSON.stringify(ref.resource)} is not supported`, REASON);
  const limits = c.resources?.limits ?? {};
  const requests = { ...limits, ...(c.resources?.requests ?? {}) };
  const q = (kind === 'limits' ? limits : requests)[name];
  // Unset: the kubelet reports the node's allocatable for limits and 0 for requests; nodelet reports 0 for both.
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
  expand(what: string, input: string, vars: ReadonlyMap<string, string>, overhead: number): string {
    return this.#fit(what, overhead, (limit) => expand(input, vars, limit));
  }

  /** Counts a value that is not expanded (the downward API's) against the same bounds. */
  take(what: string, value: string, overhead: number): string {
    return this.#fit(what, overhead, () => value);
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

/** The container's environment, in order, and its command and args with `$(VAR)` expanded, within the bounds above. */
export function containerEnv(pod: Pod, c: Container, ctx: EnvContext): { envs: { key: string; value: string }[]; command: string[]; args: string[] } {
  for (const from of c.envFrom ?? []) {
    const ref = from.configMapRef ?? from.secretRef;
    const what = from.configMapRef ? 'configMapRef' : 'secretRef';
    if (ref && !ref.optional) throw new NodeletError('UNIMPLEMENTED', `envFrom ${what} ${JSON.stringify(ref.name)}: nodelet does not read configMaps or secrets from the control plane`, REASON);
  }
  const budget = new Budget();
  const vars = new Map<string, string>();
  for (const e of c.env ?? []) {
    const what = `env ${e.name}`;
    const overhead = Buffer.byteLength(e.name) + 2;
    let value: string;
    const vf = e.valueFrom;
    if (!vf) value = budget.expand(what, e.value ?? '', vars, overhead);
    else if (vf.fieldRef) value = budget.take(what, fieldValue(pod, vf.fieldRef.fieldPath, ctx, e.name), overhead);
    else if (vf.resourceFieldRef) value = budget.take(what, resourceFieldValue(c, vf.resourceFieldRef, ctx.quantity, what), overhead);
    else {
      const ref = vf.configMapKeyRef ?? vf.secretKeyRef;
      const kind = vf.configMapKeyRef ? 'configMapKeyRef' : vf.secretKeyRef ? 'secretKeyRef' : 'valueFrom';
      if (ref?.optional) continue;
      throw new NodeletError('UNIMPLEMENTED', `env ${e.name}: ${kind}${ref ? ` ${JSON.stringify(ref.name)}` : ''} needs the control plane's configMaps or secrets, which nodelet does not read`, REASON);
    }
    vars.set(e.name, value);
  }
  return {
    envs: [...vars].map(([key, value]) => ({ key, value })),
    command: (c.command ?? []).map((s, i) => budget.expand(`command[${i}]`, s, vars, 1)),
    args: (c.args ?? []).map((s, i) => budget.expand(`args[${i}]`, s, vars, 1)),
  };
}
