/**
 * `nodelet config view`: the effective configuration as YAML, defaults included.
 * apiVersion and kind first, then every field in byte order of its name (maps too), so the
 * output is stable. Lists and empty maps are printed in flow style (`[a, b]`, `{}`) so that
 * each leaf is one line; with showOrigin each leaf line ends in `# <origin>`.
 * The text is YAML 1.1 (as the kubelet reads it) and loads back to the same configuration.
 * A closing comment line names the Kubernetes version whose feature gates and defaults
 * nodelet follows (a comment, so the document stays a plain KubeletConfiguration).
 */
import { createRequire } from 'node:module';
import type { Node } from 'yaml';

/** `yaml` loads only for `config view` (not at every daemon start). */
const yaml = (): typeof import('yaml') => createRequire(import.meta.url)('yaml') as typeof import('yaml');
import { KUBERNETES_VERSION } from './feature-gates-table.js';
import { isJsonObject, type Json, type JsonObject } from './merge.js';
import { KUBELET_API_VERSION, KUBELET_KIND, type LoadedConfig } from './types.js';

function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

function sorted(v: Json): Json {
  if (Array.isArray(v)) return v.map(sorted);
  if (!isJsonObject(v)) return v;
  const out: JsonObject = {};
  for (const k of Object.keys(v).sort(byteOrder)) out[k] = sorted(v[k]!);
  return out;
}

/** A comment text that stays on its line whatever the path holds. */
function commentText(origin: string): string {
  return ` ${/[\r\n]/.test(origin) ? JSON.stringify(origin) : origin}`;
}

export interface RenderOptions {
  /** Append `# <file path | flag | default>` to every leaf line. */
  showOrigin: boolean;
}

/** Renders a loaded configuration as YAML text (ends with a newline). Pure. */
export function renderConfig(loaded: LoadedConfig, opts: RenderOptions): string {
  const body = sorted(loaded.config as unknown as JsonObject) as JsonObject;
  const doc = new (yaml().Document)({ apiVersion: KUBELET_API_VERSION, kind: KUBELET_KIND, ...body }, { version: '1.1' });
  const headerOrigin = loaded.sources[0] ?? 'default';

  const visit = (node: unknown, value: Json, p: string[]) => {
    const leafOrigin = () => loaded.origins.get(p.join('.')) ?? 'default';
    if (yaml().isSeq(node)) {
      node.flow = true;
      if (opts.showOrigin) node.comment = commentText(leafOrigin());
      return;
    }
    if (yaml().isMap(node) && isJsonObject(value)) {
      if (Object.keys(value).length === 0) {
        node.flow = true;
        if (opts.showOrigin) node.comment = commentText(leafOrigin());
        return;
      }
      for (const [k, v] of Object.entries(value)) visit(node.get(k, true), v, [...p, k]);
      return;
    }
    if (opts.showOrigin && node && typeof node === 'object') (node as Node).comment = commentText(leafOrigin());
  };

  for (const [k, v] of Object.entries(body)) visit(doc.get(k, true), v, [k]);
  if (opts.showOrigin) {
    for (const k of ['apiVersion', 'kind']) {
      const n = doc.get(k, true);
      if (n && typeof n === 'object') (n as Node).comment = commentText(headerOrigin);
    }
  }
  doc.comment = ` feature gates and defaults: Kubernetes ${KUBERNETES_VERSION}`;
  return doc.toString({ lineWidth: 0, flowCollectionPadding: false });
}
