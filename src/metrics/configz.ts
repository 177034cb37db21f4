/**
 * `/configz` as the kubelet's (component-base configz): `{"kubeletconfig": <the effective
 * KubeletConfiguration>}`, the config after files, drop-ins, flags and defaults. nodelet
 * writes `kind` and `apiVersion` into the object so that it is a whole document. With
 * `?origin` (nodelet's addition, the same data as `nodelet config view --show-origin`) the
 * answer also has `origins`: every leaf path (dotted, as config view names them) -> the file,
 * `flag` or `default` that set it.
 */
import { KUBELET_API_VERSION, KUBELET_KIND, type LoadedConfig } from '../config/types.js';

export function configzBody(loaded: LoadedConfig, withOrigins: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = { kubeletconfig: { kind: KUBELET_KIND, apiVersion: KUBELET_API_VERSION, ...loaded.config } };
  if (withOrigins) body.origins = Object.fromEntries([...loaded.origins.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  return body;
}
