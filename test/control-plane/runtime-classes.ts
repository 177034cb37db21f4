/**
 * RuntimeClasses (`node.k8s.io/v1`, cluster-scoped; issue 28): the schema and the write
 * strategy kube-apiserver's registry applies (pkg/apis/node/validation): `handler` a DNS
 * label and immutable, `overhead.podFixed` valid resource names and non-negative quantities,
 * `scheduling.nodeSelector` valid labels and `scheduling.tolerations` valid operators and
 * effects. Called by the server on create (old undefined) and on every update, patch and
 * apply; throws a StatusError (400 for a body Go could not decode, 422 naming every field).
 *
 * `admitPodRuntimeClass` is the RuntimeClass admission plugin on a pod's creation
 * (plugin/pkg/admission/runtimeclass): a pod naming a class that does not exist is refused
 * (403), the class's `overhead.podFixed` becomes the pod's `spec.overhead` (a different one
 * the pod brings is refused), and its `scheduling` merges into the pod's nodeSelector and
 * tolerations. A class deleted after its pod was admitted is the node agent's to refuse.
 */
import { parseQuantity } from '../../src/config/quantity.js';
import type { SchemaNode } from './ssa/schema-types.js';
import { OBJECT_META_SCHEMA } from './schema.js';
import { badRequestError, cause, forbidden, invalidError, type Cause } from './status-error.js';
import type { Obj } from './store.js';

const S: SchemaNode = { kind: 'scalar' };
const stringMap: SchemaNode = { kind: 'struct', fields: {}, open: true, values: S };

export const RUNTIME_CLASS_SCHEMA: SchemaNode = {
  kind: 'struct',
  fields: {
    apiVersion: S,
    kind: S,
    metadata: OBJECT_META_SCHEMA,
    handler: S,
    overhead: { kind: 'struct', fields: { podFixed: stringMap } },
    scheduling: {
      kind: 'struct',
      fields: {
        nodeSelector: { kind: 'struct', fields: {}, open: true, values: S, elementType: 'atomic' },
        tolerations: { kind: 'list', listType: 'atomic', items: { kind: 'struct', fields: { key: S, operator: S, value: S, effect: S, tolerationSeconds: S } } },
      },
    },
  },
};

const DNS_LABEL_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_LABEL_MSG = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_RE = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const LABEL_VALUE_RE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const STANDARD_RESOURCES = new Set(['cpu', 'memory', 'ephemeral-storage', 'pods']);
const EFFECTS = ['NoSchedule', 'PreferNoSchedule', 'NoExecute'];

const isMap = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const decodeError = (detail: string) => badRequestError(`RuntimeClass in version "v1" cannot be handled as a RuntimeClass: ${detail}`);

/** The write strategy of a RuntimeClass; `old` is the stored object on an update. */
export function admitRuntimeClass(o: Obj, old: Obj | undefined): void {
  const handler = o['handler'] ?? '';
  if (typeof handler !== 'string') throw decodeError(`json: cannot unmarshal ${typeof handler} into Go struct field RuntimeClass.handler of type string`);
  const causes: Cause[] = [];
  // NameIsDNSLabel: an absent handler is "" and fails the label check (there is no Required error).
  if (handler.length > 63) causes.push(cause('FieldValueInvalid', 'handler', `Invalid value: ${JSON.stringify(handler)}: must be no more than 63 characters`));
  if (!DNS_LABEL_RE.test(handler)) causes.push(cause('FieldValueInvalid', 'handler', `Invalid value: ${JSON.stringify(handler)}: ${DNS_LABEL_MSG}`));
  if (old !== undefined && old['handler'] !== handler) causes.push(cause('FieldValueInvalid', 'handler', `Invalid value: ${JSON.stringify(handler)}: field is immutable`));
  causes.push(...overheadCauses(o['overhead']), ...schedulingCauses(o['scheduling']));
  if (causes.length > 0) throw invalidError('node.k8s.io', 'RuntimeClass', String(o['metadata']?.['name'] ?? ''), causes);
}

/** `overhead.podFixed` as the Limits of a ResourceRequirements (ValidateResourceRequirements). */
function overheadCauses(overhead: unknown): Cause[] {
  if (overhead === undefined || overhead === null) return [];
  if (!isMap(overhead)) throw decodeError('overhead must be an object');
  const fixed = overhead['podFixed'];
  if (fixed === undefined || fixed === null) return [];
  if (!isMap(fixed)) throw decodeError('overhead.podFixed must be an object');
  const out: Cause[] = [];
  for (const [name, v] of Object.entries(fixed)) {
    const field = `overhead.podFixed[${name}]`;
    if (typeof v !== 'string' && typeof v !== 'number') throw decodeError(`${field}: quantities must be a string or a number`);
    let sign: number;
    try {
      sign = parseQuantity(String(v)).sign;
    } catch {
      throw decodeError(`quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`);
    }
    const standard = STANDARD_RESOURCES.has(name) || name.startsWith('hugepages-');
    if (!standard && !(name.includes('/') && QUALIFIED_NAME_RE.test(name))) out.push(cause('FieldValueInvalid', field, `Invalid value: ${JSON.stringify(name)}: must be a standard resource type or fully qualified`));
    if (sign < 0) out.push(cause('FieldValueInvalid', field, `Invalid value: ${JSON.stringify(String(v))}: must be greater than or equal to 0`));
  }
  return out;
}

function schedulingCauses(s: unknown): Cause[] {
  if (s === undefined || s === null) return [];
  if (!isMap(s)) throw decodeError('scheduling must be an object');
  const out: Cause[] = [];
  const sel = s['nodeSelector'];
  if (sel !== undefined && sel !== null) {
    if (!isMap(sel)) throw decodeError('scheduling.nodeSelector must be an object');
    for (const [k, v] of Object.entries(sel)) {
      if (typeof v !== 'string') throw decodeError(`scheduling.nodeSelector[${k}] must be a string`);
      if (k.length > 316 || !QUALIFIED_NAME_RE.test(k)) out.push(cause('FieldValueInvalid', 'scheduling.nodeSelector', `Invalid value: ${JSON.stringify(k)}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`));
      if (v.length > 63 || !LABEL_VALUE_RE.test(v)) out.push(cause('FieldValueInvalid', `scheduling.nodeSelector[${k}]`, `Invalid value: ${JSON.stringify(v)}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`));
    }
  }
  const tols = s['tolerations'];
  if (tols === undefined || tols === null) return out;
  if (!Array.isArray(tols)) throw decodeError('scheduling.tolerations must be an array');
  tols.forEach((t: unknown, i: number) => out.push(...tolerationCauses(t, `scheduling.tolerations[${i}]`)));
  return out;
}

/** ValidateTolerations, the parts a RuntimeClass's user can get wrong. */
function tolerationCauses(t: unknown, path: string): Cause[] {
  if (!isMap(t)) throw decodeError(`${path} must be an object`);
  const out: Cause[] = [];
  const op = t['operator'] ?? 'Equal';
  const key = t['key'] ?? '';
  const effect = t['effect'] ?? '';
  if (typeof key !== 'string' || (key !== '' && !QUALIFIED_NAME_RE.test(key))) out.push(cause('FieldValueInvalid', `${path}.key`, `Invalid value: ${JSON.stringify(key)}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`));
  if (op !== 'Equal' && op !== 'Exists') out.push(cause('FieldValueNotSupported', `${path}.operator`, `Unsupported value: ${JSON.stringify(op)}: supported values: "Equal", "Exists"`));
  if (op === 'Exists' && (t['value'] ?? '') !== '') out.push(cause('FieldValueInvalid', `${path}.operator`, `Invalid value: ${JSON.stringify(t['value'])}: value must be empty when \`operator\` is 'Exists'`));
  if (key === '' && op !== 'Exists') out.push(cause('FieldValueInvalid', `${path}.operator`, `Invalid value: ${JSON.stringify(op)}: operator must be Exists when \`key\` is empty, which means "match all values and all keys"`));
  if (effect !== '' && !EFFECTS.includes(String(effect))) out.push(cause('FieldValueNotSupported', `${path}.effect`, `Unsupported value: ${JSON.stringify(effect)}: supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"`));
  if (t['tolerationSeconds'] !== undefined && t['tolerationSeconds'] !== null && effect !== 'NoExecute') out.push(cause('FieldValueInvalid', `${path}.effect`, `Invalid value: ${JSON.stringify(effect)}: effect must be 'NoExecute' when \`tolerationSeconds\` is set`));
  return out;
}

/** Semantic equality of two resource lists (`1` equals `1000m`), as apiequality.Semantic on quantities. */
function sameResources(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  if (ka.join('\0') !== kb.join('\0')) return false;
  try {
    return ka.every((k) => parseQuantity(String(a[k])).millis === parseQuantity(String(b[k])).millis);
  } catch {
    return false;
  }
}

/**
 * The RuntimeClass admission plugin on a pod's creation: mutates `pod` (overhead, nodeSelector,
 * tolerations) or throws a 403 StatusError with the plugin's words. `lookup` reads a stored
 * RuntimeClass by name.
 */
export function admitPodRuntimeClass(pod: Obj, lookup: (name: string) => Obj | undefined): void {
  const spec: Obj | undefined = isMap(pod['spec']) ? pod['spec'] : undefined;
  const podName = String(pod['metadata']?.['name'] ?? '');
  const reject = (msg: string) => forbidden('', 'pods', podName, msg);
  const name = spec?.['runtimeClassName'];
  if (!spec || name === undefined || name === null) {
    if (spec?.['overhead'] !== undefined && spec['overhead'] !== null) throw reject('pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead');
    return;
  }
  const rc = typeof name === 'string' && name !== '' ? lookup(name) : undefined;
  if (!rc) throw reject(`pod rejected: RuntimeClass ${JSON.stringify(String(name))} not found`);
  const fixed = isMap(rc['overhead']) && isMap(rc['overhead']['podFixed']) ? (rc['overhead']['podFixed'] as Record<string, unknown>) : undefined;
  const own = spec['overhead'];
  if (fixed) {
    if (own !== undefined && own !== null && !(isMap(own) && sameResources(own, fixed))) throw reject("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead");
    spec['overhead'] = { ...fixed };
  } else if (own !== undefined && own !== null) throw reject('pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead');
  const sched = isMap(rc['scheduling']) ? rc['scheduling'] : undefined;
  if (!sched) return;
  const sel = isMap(sched['nodeSelector']) ? (sched['nodeSelector'] as Record<string, string>) : {};
  const podSel: Record<string, unknown> = isMap(spec['nodeSelector']) ? { ...spec['nodeSelector'] } : {};
  for (const [k, v] of Object.entries(sel)) {
    if (k in podSel && podSel[k] !== v) throw reject(`conflict: runtimeClass.scheduling.nodeSelector[${k}] = ${v}; pod.spec.nodeSelector[${k}] = ${String(podSel[k])}`);
    podSel[k] = v;
  }
  if (Object.keys(podSel).length > 0) spec['nodeSelector'] = podSel;
  // tolerations.MergeTolerations, simplified: the class's tolerations the pod does not have already.
  const tols = Array.isArray(spec['tolerations']) ? [...spec['tolerations']] : [];
  for (const t of Array.isArray(sched['tolerations']) ? sched['tolerations'] : []) if (!tols.some((x) => JSON.stringify(x) === JSON.stringify(t))) tols.push(t);
  if (tols.length > 0) spec['tolerations'] = tols;
}
