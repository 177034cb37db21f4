/**
 * A container's environment as the kubelet makes it: `env` in order, `$(VAR)` references
 * to earlier variables expanded (`$$` escapes), the downward API (`fieldRef`,
 * `resourceFieldRef`), and the same expansion in `command` and `args`.
 *
 * `configMapKeyRef`, `secretKeyRef` and `envFrom` need objects from the control plane that
 * nodelet does not read: an optional one is skipped, a required one is refused with
 * CreateContainerConfigError naming the variable, never dropped in silence.
 */
import type { Container, EnvVar, Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../errors.js';

const REASON = { reason: 'CreateContainerConfigError' } as const;

export interface EnvContext {
  nodeName?: string;
  hostIP?: string;
  podIP?: string;
  /** Every pod IP (dual stack); `status.podIPs` is them joined by commas. Default: [podIP]. */
  podIPs?: string[];
  /** Parses a resource quantity to base units (cores for cpu, bytes for memory). */
  quantity: (q: string | number) => number;
}

/** The kubelet's expansion: `$(NAME)` is replaced when NAME is defined, kept as is otherwise; `$$` is `$`. */
export function expand(input: string, vars: ReadonlyMap<string, string>): string {
  let out = '';
  for (let i = 0; i < input.length; i++) {
    const ch = input[i]!;
    if (ch !== '$' || i + 1 >= input.length) {
      out += ch;
      continue;
    }
    const next = input[i + 1]!;
    if (next === '$') {
      out += '$';
      i++;
    } else if (next === '(') {
      const close = input.indexOf(')', i + 2);
      if (close < 0) {
        out += input.slice(i);
        break;
      }
      const name = input.slice(i + 2, close);
      out += vars.has(name) ? vars.get(name)! : `$(${name})`;
      i = close;
    } else {
      out += ch;
    }
  }
  return out;
}

const LABEL_OR_ANNOTATION = /^metadata\.(labels|annotations)\['(.+)'\]$/;

function fieldValue(pod: Pod, fieldPath: string, ctx: EnvContext, env: string): string {
  const m = pod.metadata ?? {};
  switch (fieldPath) {
    case 'metadata.name':
      return m.name ?? '';
    case 'metadata.namespace':
      return m.namespace ?? 'default';
    case 'metadata.uid':
      return m.uid ?? '';
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
  const lm = LABEL_OR_ANNOTATION.exec(fieldPath);
  if (lm) return (lm[1] === 'labels' ? m.labels : m.annotations)?.[lm[2]!] ?? '';
  throw new NodeletError('INVALID_ARGUMENT', `env ${env}: fieldRef.fieldPath ${JSON.stringify(fieldPath)} is not supported`, REASON);
}

function resourceValue(c: Container, ref: NonNullable<NonNullable<EnvVar['valueFrom']>['resourceFieldRef']>, ctx: EnvContext, env: string): string {
  const [kind, name] = ref.resource.split('.', 2) as [string, string | undefined];
  if ((kind !== 'limits' && kind !== 'requests') || !name) throw new NodeletError('INVALID_ARGUMENT', `env ${env}: resourceFieldRef.resource ${JSON.stringify(ref.resource)} is not supported`, REASON);
  const limits = c.resources?.limits ?? {};
  const requests = { ...limits, ...(c.resources?.requests ?? {}) };
  const q = (kind === 'limits' ? limits : requests)[name];
  // Unset: the kubelet reports the node's allocatable for limits and 0 for requests; nodelet reports 0 for both.
  const value = q === undefined ? 0 : ctx.quantity(q);
  const divisor = ref.divisor === undefined ? 1 : ctx.quantity(ref.divisor);
  if (!(divisor > 0)) throw new NodeletError('INVALID_ARGUMENT', `env ${env}: resourceFieldRef.divisor must be positive`, REASON);
  // As the kubelet: rounded up to an integer of the divisor.
  return String(Math.ceil(value / divisor));
}

/** The container's environment, in order, and its command and args with `$(VAR)` expanded. */
export function containerEnv(pod: Pod, c: Container, ctx: EnvContext): { envs: { key: string; value: string }[]; command: string[]; args: string[] } {
  for (const from of c.envFrom ?? []) {
    const ref = from.configMapRef ?? from.secretRef;
    const what = from.configMapRef ? 'configMapRef' : 'secretRef';
    if (ref && !ref.optional) throw new NodeletError('UNIMPLEMENTED', `envFrom ${what} ${JSON.stringify(ref.name)}: nodelet does not read configMaps or secrets from the control plane`, REASON);
  }
  const vars = new Map<string, string>();
  for (const e of c.env ?? []) {
    let value: string | undefined;
    const vf = e.valueFrom;
    if (!vf) value = expand(e.value ?? '', vars);
    else if (vf.fieldRef) value = fieldValue(pod, vf.fieldRef.fieldPath, ctx, e.name);
    else if (vf.resourceFieldRef) value = resourceValue(c, vf.resourceFieldRef, ctx, e.name);
    else {
      const ref = vf.configMapKeyRef ?? vf.secretKeyRef;
      const what = vf.configMapKeyRef ? 'configMapKeyRef' : vf.secretKeyRef ? 'secretKeyRef' : 'valueFrom';
      if (ref?.optional) continue;
      throw new NodeletError('UNIMPLEMENTED', `env ${e.name}: ${what}${ref ? ` ${JSON.stringify(ref.name)}` : ''} needs the control plane's configMaps or secrets, which nodelet does not read`, REASON);
    }
    vars.set(e.name, value);
  }
  return {
    envs: [...vars].map(([key, value]) => ({ key, value })),
    command: (c.command ?? []).map((s) => expand(s, vars)),
    args: (c.args ?? []).map((s) => expand(s, vars)),
  };
}
