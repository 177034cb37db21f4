/**
 * The ConfigMaps and Secrets a pod refers to, as the kubelet's podutil.VisitPodConfigmapNames
 * and VisitPodSecretNames find them: volumes (`configMap`, `secret`, a projected volume's
 * `configMap` and `secret` sources), every container's `env[].valueFrom` and `envFrom`
 * (init, app and ephemeral containers), and the pod's `imagePullSecrets`. What the change
 * detection watches (objects.ts `registerPod`). Pure; tolerates any shape (an API pod is
 * hostile): entries without a name are skipped.
 */
import type { Container, EphemeralContainer, Pod } from 'kubernetes-types/core/v1.js';
import type { ObjectRef } from './objects.js';

export function refKey(r: ObjectRef): string {
  return `${r.kind}/${r.namespace}/${r.name}`;
}

/** Every ConfigMap and Secret `pod` refers to, each once. */
export function podObjectReferences(pod: Pod): ObjectRef[] {
  const namespace = pod.metadata?.namespace ?? 'default';
  const out = new Map<string, ObjectRef>();
  const add = (kind: ObjectRef['kind'], name: unknown) => {
    if (typeof name !== 'string' || name === '') return;
    const r: ObjectRef = { kind, namespace, name };
    out.set(refKey(r), r);
  };
  const spec = pod.spec;
  for (const s of Array.isArray(spec?.imagePullSecrets) ? spec.imagePullSecrets : []) add('Secret', s?.name);
  for (const v of Array.isArray(spec?.volumes) ? spec.volumes : []) {
    if (v?.configMap) add('ConfigMap', v.configMap.name);
    if (v?.secret) add('Secret', v.secret.secretName);
    for (const src of Array.isArray(v?.projected?.sources) ? v.projected.sources : []) {
      if (src?.configMap) add('ConfigMap', src.configMap.name);
      if (src?.secret) add('Secret', src.secret.name);
    }
  }
  const containers: (Container | EphemeralContainer)[] = [...(spec?.initContainers ?? []), ...(spec?.containers ?? []), ...(spec?.ephemeralContainers ?? [])];
  for (const c of containers) {
    for (const e of Array.isArray(c?.env) ? c.env : []) {
      if (e?.valueFrom?.configMapKeyRef) add('ConfigMap', e.valueFrom.configMapKeyRef.name);
      if (e?.valueFrom?.secretKeyRef) add('Secret', e.valueFrom.secretKeyRef.name);
    }
    for (const f of Array.isArray(c?.envFrom) ? c.envFrom : []) {
      if (f?.configMapRef) add('ConfigMap', f.configMapRef.name);
      if (f?.secretRef) add('Secret', f.secretRef.name);
    }
  }
  return [...out.values()];
}
