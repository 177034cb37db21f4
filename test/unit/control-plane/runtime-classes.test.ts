/** The test control plane's RuntimeClass write strategy (test/control-plane/runtime-classes.ts). */
import { describe, expect, it } from 'vitest';
import { admitPodRuntimeClass, admitRuntimeClass } from '../../control-plane/runtime-classes.js';
import { StatusError } from '../../control-plane/status-error.js';
import type { Obj } from '../../control-plane/store.js';

const rc = (extra: Obj): Obj => ({ apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: 'gvisor' }, handler: 'runsc', ...extra });

function refusal(o: Obj, old?: Obj): { code: number; message: string; fields: string[] } {
  try {
    admitRuntimeClass(o, old);
  } catch (err) {
    expect(err).toBeInstanceOf(StatusError);
    const e = err as StatusError;
    return { code: e.code, message: e.message, fields: ((e.details?.['causes'] as Obj[] | undefined) ?? []).map((c) => String(c['field'])) };
  }
  throw new Error('admitted');
}

const LABEL_MSG = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

describe('RuntimeClass writes', () => {
  it('a class with a handler, overhead and scheduling is admitted unchanged', () => {
    const o = rc({ overhead: { podFixed: { cpu: '250m', memory: '120Mi' } }, scheduling: { nodeSelector: { 'runtime/gvisor': 'yes' }, tolerations: [{ key: 'sandboxed', operator: 'Exists', effect: 'NoSchedule' }] } });
    const before = structuredClone(o);
    admitRuntimeClass(o, undefined);
    expect(o).toEqual(before);
  });

  it.each([
    ['absent', undefined, `RuntimeClass.node.k8s.io "gvisor" is invalid: handler: Invalid value: "": ${LABEL_MSG}`],
    ['not a DNS label', 'Run_SC', `RuntimeClass.node.k8s.io "gvisor" is invalid: handler: Invalid value: "Run_SC": ${LABEL_MSG}`],
  ])('a handler %s is 422 naming handler', (_, handler, message) => {
    const o = rc({});
    if (handler === undefined) delete o['handler'];
    else o['handler'] = handler;
    expect(refusal(o)).toEqual({ code: 422, message, fields: ['handler'] });
  });

  it('a handler longer than 63 characters is 422', () => {
    expect(refusal(rc({ handler: 'a'.repeat(64) })).message).toContain('handler: Invalid value: "' + 'a'.repeat(64) + '": must be no more than 63 characters');
  });

  it('a handler that is not a string is a 400 decode error', () => {
    expect(refusal(rc({ handler: 7 }))).toEqual({ code: 400, message: 'RuntimeClass in version "v1" cannot be handled as a RuntimeClass: json: cannot unmarshal number into Go struct field RuntimeClass.handler of type string', fields: [] });
  });

  it('the handler is immutable; other fields may change', () => {
    expect(refusal(rc({ handler: 'kata' }), rc({}))).toEqual({ code: 422, message: 'RuntimeClass.node.k8s.io "gvisor" is invalid: handler: Invalid value: "kata": field is immutable', fields: ['handler'] });
    expect(() => admitRuntimeClass(rc({ overhead: { podFixed: { cpu: '1' } } }), rc({}))).not.toThrow();
  });

  it('overhead.podFixed: a negative quantity and an unqualified resource name are 422 naming each; a bad quantity is 400', () => {
    const r = refusal(rc({ overhead: { podFixed: { cpu: '-1', widgets: '1' } } }));
    expect(r.code).toBe(422);
    expect(r.fields).toEqual(['overhead.podFixed[cpu]', 'overhead.podFixed[widgets]']);
    expect(r.message).toContain('overhead.podFixed[cpu]: Invalid value: "-1": must be greater than or equal to 0');
    expect(r.message).toContain('overhead.podFixed[widgets]: Invalid value: "widgets": must be a standard resource type or fully qualified');
    expect(refusal(rc({ overhead: { podFixed: { memory: 'lots' } } })).code).toBe(400);
  });

  it('scheduling: invalid selector values and tolerations are 422 naming each field', () => {
    const r = refusal(rc({ scheduling: { nodeSelector: { ok: 'bad value!' }, tolerations: [{ key: 'k', operator: 'Maybe' }, { key: 'k', operator: 'Exists', value: 'v' }, { key: 'k', effect: 'Sometimes' }] } }));
    expect(r.code).toBe(422);
    expect(r.fields).toEqual(['scheduling.nodeSelector[ok]', 'scheduling.tolerations[0].operator', 'scheduling.tolerations[1].operator', 'scheduling.tolerations[2].effect']);
  });
});

describe('RuntimeClass admission of a pod', () => {
  const classes: Record<string, Obj> = {
    gvisor: rc({ overhead: { podFixed: { cpu: '250m', memory: '120Mi' } }, scheduling: { nodeSelector: { sandbox: 'gvisor' }, tolerations: [{ key: 'sandboxed', operator: 'Exists', effect: 'NoSchedule' }] } }),
    plain: rc({ metadata: { name: 'plain' } }),
  };
  const lookup = (n: string) => classes[n];
  const pod = (spec: Obj): Obj => ({ metadata: { name: 'p', namespace: 'default' }, spec: { containers: [{ name: 'c', image: 'i' }], ...spec } });
  const rejected = (p: Obj): { code: number; message: string } => {
    try {
      admitPodRuntimeClass(p, lookup);
    } catch (err) {
      return { code: (err as StatusError).code, message: (err as StatusError).message };
    }
    throw new Error('admitted');
  };

  it("copies the class's overhead and merges its scheduling into the pod", () => {
    const p = pod({ runtimeClassName: 'gvisor', nodeSelector: { zone: 'a' }, tolerations: [{ key: 'other', operator: 'Exists' }] });
    admitPodRuntimeClass(p, lookup);
    expect(p['spec']).toMatchObject({
      overhead: { cpu: '250m', memory: '120Mi' },
      nodeSelector: { zone: 'a', sandbox: 'gvisor' },
      tolerations: [{ key: 'other', operator: 'Exists' }, { key: 'sandboxed', operator: 'Exists', effect: 'NoSchedule' }],
    });
  });

  it('a pod without runtimeClassName, or naming a class without overhead, is left as it is', () => {
    for (const p of [pod({}), pod({ runtimeClassName: 'plain' })]) {
      const before = structuredClone(p);
      admitPodRuntimeClass(p, lookup);
      expect(p).toEqual(before);
    }
  });

  it.each([
    ['a missing class', { runtimeClassName: 'kata' }, 'pods "p" is forbidden: pod rejected: RuntimeClass "kata" not found'],
    ["an overhead that differs from the class's", { runtimeClassName: 'gvisor', overhead: { cpu: '1' } }, `pods "p" is forbidden: pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead`],
    ['an overhead without a class', { overhead: { cpu: '1' } }, 'pods "p" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead'],
    ['a nodeSelector conflicting with the class', { runtimeClassName: 'gvisor', nodeSelector: { sandbox: 'kata' } }, 'pods "p" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[sandbox] = gvisor; pod.spec.nodeSelector[sandbox] = kata'],
  ])('refuses %s with 403', (_, spec, message) => {
    expect(rejected(pod(spec))).toEqual({ code: 403, message });
  });

  it("the class's own overhead, written differently (1000m for 1), is accepted", () => {
    const p = pod({ runtimeClassName: 'gvisor', overhead: { cpu: '0.25', memory: '120Mi' } });
    admitPodRuntimeClass(p, lookup);
    expect(p['spec']['overhead']).toEqual({ cpu: '250m', memory: '120Mi' });
  });
});
