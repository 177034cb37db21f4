/**
 * The payload of a `downwardAPI` volume (and of a projected volume's downwardAPI source),
 * as the kubelet's downwardapi volume plugin makes it: one file per item, its content the
 * field (`metadata.name`, `.namespace`, `.uid`, `.labels`, `.annotations`, one label or
 * annotation by key) or the container resource (`resourceFieldRef` with `containerName`
 * and `divisor`). Whole label and annotation maps are written as the kubelet's
 * `fieldpath.FormatMap`: sorted `key="value"` lines, the value quoted as Go's `%q`.
 * Pure; the mode of each file is the item's, else the volume's `defaultMode`, else 0644.
 */
import type { DownwardAPIVolumeFile, Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../../errors.js';
import { podMetadataField, resourceFieldValue } from '../cri/env.js';
import type { FileProjection } from './atomic-writer.js';

const REASON = { reason: 'CreateContainerConfigError' } as const;
/** Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space. */
const PRINTABLE = /^[\p{L}\p{M}\p{N}\p{P}\p{S} ]$/u;

/** Go's strconv.Quote (what `%q` prints): the escapes Go uses, printable Unicode kept as is. */
export function goQuote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"' || ch === '\\') out += `\\${ch}`;
    else if (PRINTABLE.test(ch)) out += ch;
    else if (ch === '\x07') out += '\\a';
    else if (ch === '\b') out += '\\b';
    else if (ch === '\f') out += '\\f';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\v') out += '\\v';
    else if (c < 0x20 || c === 0x7f) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else if (c >= 0xd800 && c <= 0xdfff) out += '\\ufffd'; // a lone surrogate: Go's string would hold U+FFFD
    else if (c < 0x10000) out += `\\u${c.toString(16).padStart(4, '0')}`;
    else out += `\\U${c.toString(16).padStart(8, '0')}`;
  }
  return `${out}"`;
}

/** The kubelet's fieldpath.FormatMap. */
export function formatMap(m: Record<string, string> | undefined): string {
  return Object.keys(m ?? {})
    .sort()
    .map((k) => `${k}=${goQuote(m![k]!)}\n`)
    .join('');
}

function fieldValue(pod: Pod, fieldPath: string, where: string): string {
  // Whole maps are files of their own (FormatMap); the rest is the downward API's metadata, as in env.
  if (fieldPath === 'metadata.labels') return formatMap(pod.metadata?.labels);
  if (fieldPath === 'metadata.annotations') return formatMap(pod.metadata?.annotations);
  const v = podMetadataField(pod, fieldPath);
  if (v !== undefined) return v;
  throw new NodeletError('INVALID_ARGUMENT', `${where}: fieldRef.fieldPath ${JSON.stringify(fieldPath)} is not supported in a downwardAPI volume (metadata.name, namespace, uid, labels, annotations)`, REASON);
}

/**
 * The files of `items`; `where` names the volume in errors (`volume "podinfo"`).
 * `quantity` parses resource quantities (config/quantity.ts).
 */
export function downwardApiPayload(pod: Pod, items: readonly DownwardAPIVolumeFile[], defaultMode: number | undefined, quantity: (q: string | number) => number, where: string): Map<string, FileProjection> {
  const out = new Map<string, FileProjection>();
  for (const [i, item] of items.entries()) {
    const at = `${where} items[${i}] (${JSON.stringify(item.path)})`;
    let value: string;
    if (item.fieldRef) value = fieldValue(pod, item.fieldRef.fieldPath, at);
    else if (item.resourceFieldRef) {
      const name = item.resourceFieldRef.containerName;
      const c = [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])].find((x) => x.name === name);
      if (!c) throw new NodeletError('INVALID_ARGUMENT', `${at}: resourceFieldRef.containerName ${JSON.stringify(name ?? '')} names no container of the pod`, REASON);
      value = resourceFieldValue(c, item.resourceFieldRef, quantity, at);
    } else throw new NodeletError('INVALID_ARGUMENT', `${at}: needs a fieldRef or a resourceFieldRef`, REASON);
    out.set(item.path, { data: Buffer.from(value), mode: item.mode ?? defaultMode ?? 0o644 });
  }
  return out;
}
