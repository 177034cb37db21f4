/**
 * The test control plane's `pods/ephemeralcontainers` strategy, as kube-apiserver's: only
 * spec.ephemeralContainers is taken from a write, existing ones may be neither removed nor
 * changed, new ones are defaulted and validated with upstream's messages.
 */
import { describe, expect, it } from 'vitest';
import { ephemeralContainersOnCreate, ephemeralContainersUpdate } from '../../control-plane/pod-subresources.js';
import type { Obj } from '../../control-plane/store.js';

const stored = (over: Obj = {}): Obj => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'web', namespace: 'default', uid: 'u1', resourceVersion: '7', labels: { app: 'web' } },
  spec: { nodeName: 'node1', containers: [{ name: 'app', image: 'busybox' }], initContainers: [{ name: 'init', image: 'busybox' }], volumes: [{ name: 'data', emptyDir: {} }], ...over },
  status: { phase: 'Running' },
});
const ec = (o: Obj = {}): Obj => ({ name: 'debugger', image: 'docker.io/local/busybox:latest', ...o });
const write = (old: Obj, list: unknown, extra: Obj = {}) => ephemeralContainersUpdate(old, { ...old, ...extra, spec: { ...old['spec'], ephemeralContainers: list } });
const failure = (r: ReturnType<typeof write>) => ('failure' in r ? r.failure : undefined);

describe('pods/ephemeralcontainers', () => {
  it('an addition is defaulted and stored; nothing else of the write is taken', () => {
    const old = stored();
    const r = ephemeralContainersUpdate(old, { ...old, metadata: { ...old['metadata'], labels: { app: 'evil' } }, spec: { ...old['spec'], nodeName: 'elsewhere', ephemeralContainers: [ec({ targetContainerName: 'app', stdin: true, tty: true })] }, status: { phase: 'Failed' } });
    expect(r).toEqual({
      pod: {
        ...old,
        spec: {
          ...old['spec'],
          ephemeralContainers: [{ name: 'debugger', image: 'docker.io/local/busybox:latest', targetContainerName: 'app', stdin: true, tty: true, terminationMessagePath: '/dev/termination-log', terminationMessagePolicy: 'File', imagePullPolicy: 'Always' }],
        },
      },
    });
  });

  it('pull policy defaults as the API server\'s: IfNotPresent for a tag other than latest or a digest', () => {
    const got = (image: string) => (write(stored(), [ec({ image })]) as { pod: Obj }).pod['spec']['ephemeralContainers'][0]['imagePullPolicy'];
    expect([got('busybox'), got('busybox:latest'), got('busybox:1.36'), got('registry:5000/busybox'), got('busybox@sha256:abc')]).toEqual(['Always', 'Always', 'IfNotPresent', 'Always', 'IfNotPresent']);
  });

  it.each([
    { name: 'ports', c: ec({ ports: [{ containerPort: 80 }] }), field: 'spec.ephemeralContainers[0].ports', message: 'Forbidden: cannot be set for an Ephemeral Container', reason: 'FieldValueForbidden' },
    { name: 'a liveness probe', c: ec({ livenessProbe: { exec: { command: ['true'] } } }), field: 'spec.ephemeralContainers[0].livenessProbe', message: 'Forbidden: cannot be set for an Ephemeral Container', reason: 'FieldValueForbidden' },
    { name: 'lifecycle', c: ec({ lifecycle: { postStart: { exec: { command: ['true'] } } } }), field: 'spec.ephemeralContainers[0].lifecycle', message: 'Forbidden: cannot be set for an Ephemeral Container', reason: 'FieldValueForbidden' },
    { name: 'resources', c: ec({ resources: { limits: { cpu: '1' } } }), field: 'spec.ephemeralContainers[0].resources', message: 'Forbidden: cannot be set for an Ephemeral Container', reason: 'FieldValueForbidden' },
    { name: 'a name another container has', c: ec({ name: 'init' }), field: 'spec.ephemeralContainers[0].name', message: 'Duplicate value: "init"', reason: 'FieldValueDuplicate' },
    { name: 'an unknown target', c: ec({ targetContainerName: 'nope' }), field: 'spec.ephemeralContainers[0].targetContainerName', message: 'Not found: "nope"', reason: 'FieldValueNotFound' },
    { name: 'no image', c: { name: 'debugger' }, field: 'spec.ephemeralContainers[0].image', message: 'Required value', reason: 'FieldValueRequired' },
    { name: 'a subPath', c: ec({ volumeMounts: [{ name: 'data', mountPath: '/d', subPath: 'x' }] }), field: 'spec.ephemeralContainers[0].volumeMounts[0].subPath', message: 'Forbidden: cannot be set for an Ephemeral Container', reason: 'FieldValueForbidden' },
    { name: 'a mount of no volume', c: ec({ volumeMounts: [{ name: 'nope', mountPath: '/d' }] }), field: 'spec.ephemeralContainers[0].volumeMounts[0].name', message: 'Not found: "nope"', reason: 'FieldValueNotFound' },
  ])('refused: $name', ({ c, field, message, reason }) => {
    expect(failure(write(stored(), [c]))).toEqual({
      code: 422,
      reason: 'Invalid',
      message: `Pod "web" is invalid: ${field}: ${message}`,
      details: { name: 'web', kind: 'Pod', causes: [{ reason, message, field }] },
    });
  });

  it('a bad name: upstream\'s DNS label message; several errors in brackets', () => {
    const f = failure(write(stored(), [ec({ name: 'Bad_Name', ports: [{ containerPort: 1 }] })]));
    expect(f?.message).toBe(
      `Pod "web" is invalid: [spec.ephemeralContainers[0].name: Invalid value: "Bad_Name": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?'), spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container]`,
    );
  });

  it('existing ephemeral containers may be neither removed nor changed; another may be added', () => {
    const first = (write(stored(), [ec()]) as { pod: Obj }).pod;
    const kept = first['spec']['ephemeralContainers'][0];
    expect(failure(write(first, []))?.message).toBe('Pod "web" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers "debugger" may not be removed\n');
    expect(failure(write(first, [{ ...kept, image: 'other' }]))?.message).toMatch(/^Pod "web" is invalid: spec\.ephemeralContainers: Forbidden: existing ephemeral containers "debugger" may not be changed\n- image: "docker.io\/local\/busybox:latest"\n\+ image: "other"/);
    // A second one, the first given back in another order (a patch does not keep it).
    const second = write(first, [ec({ name: 'debugger-2' }), kept]);
    expect('pod' in second && second.pod['spec']['ephemeralContainers'].map((c: Obj) => c['name'])).toEqual(['debugger-2', 'debugger']);
    // Unchanged: accepted as is.
    expect(write(first, [kept])).toEqual({ pod: first });
  });

  it('a static pod\'s mirror refuses them', () => {
    const mirror = stored();
    mirror['metadata']['annotations'] = { 'kubernetes.io/config.mirror': 'abc' };
    expect(failure(write(mirror, [ec()]))?.message).toBe('Pod "web" is invalid: : Forbidden: static pods do not support ephemeral containers');
  });

  it('a pod cannot be created with them', () => {
    expect(ephemeralContainersOnCreate(stored({ ephemeralContainers: [ec()] }))?.message).toBe('Pod "web" is invalid: spec.ephemeralContainers: Forbidden: cannot be set on create');
    expect(ephemeralContainersOnCreate(stored())).toBeUndefined();
  });

  it('hostile shapes are refused with a field, never thrown', () => {
    expect(failure(write(stored(), 'x'))?.message).toBe('Pod "web" is invalid: spec.ephemeralContainers: Invalid value: "x": must be a list');
    expect(failure(write(stored(), [null]))?.code).toBe(422);
    expect(failure(write(stored(), [ec({ name: 42 })]))?.message).toContain('spec.ephemeralContainers[0].name: Required value');
  });
});
