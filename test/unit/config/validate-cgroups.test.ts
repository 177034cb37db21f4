/**
 * The cgroup fields are validated as the kubelet validates them: enforceNodeAllocatable's
 * keys and their required cgroups, cgroupsPerQOS, and the paths nodelet writes under.
 */
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../../src/config/resolve.js';

const MAIN = '/etc/kubernetes/kubelet.yaml';
const HEADER = { apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration' };

function problems(doc: Record<string, unknown>) {
  return resolveConfig([{ origin: MAIN, doc: { ...HEADER, ...doc }, requireHeader: true }]).problems;
}

describe('cgroup fields', () => {
  it('accepts the defaults and the usual settings', () => {
    expect(problems({})).toEqual([]);
    expect(problems({ cgroupDriver: 'systemd', cgroupRoot: '/', enforceNodeAllocatable: ['pods', 'kube-reserved'], kubeReservedCgroup: '/kube.slice' })).toEqual([]);
    expect(problems({ cgroupsPerQOS: false, enforceNodeAllocatable: [] })).toEqual([]);
    expect(problems({ enforceNodeAllocatable: ['none'] })).toEqual([]);
  });

  it.each([
    ['an unknown enforcement key', { enforceNodeAllocatable: ['pods', 'everything'] }, 'enforceNodeAllocatable.1', /^option "everything" is not valid: valid options are "pods", "system-reserved"/],
    ['none with others', { enforceNodeAllocatable: ['none', 'pods'] }, 'enforceNodeAllocatable', /^may not contain additional enforcements when "none" is specified$/],
    ['kube-reserved without its cgroup', { enforceNodeAllocatable: ['pods', 'kube-reserved'] }, 'kubeReservedCgroup', /^must be specified when "kube-reserved" is in enforceNodeAllocatable$/],
    ['system-reserved-compressible without its cgroup', { enforceNodeAllocatable: ['system-reserved-compressible'] }, 'systemReservedCgroup', /^must be specified when "system-reserved-compressible"/],
    ['enforcement without cgroupsPerQOS (the default pods)', { cgroupsPerQOS: false }, 'enforceNodeAllocatable', /^is not supported unless cgroupsPerQOS is true/],
    ['systemCgroups without cgroupRoot', { systemCgroups: '/system.slice' }, 'systemCgroups', /^is set but cgroupRoot is not/],
    ['a relative cgroupRoot', { cgroupRoot: 'kubepods' }, 'cgroupRoot', /^must be an absolute cgroup path/],
    ['a cgroupRoot that climbs', { cgroupRoot: '/a/../../etc' }, 'cgroupRoot', /^must not contain \. or \.\. components/],
    ['a control character', { kubeReservedCgroup: '/a\nb' }, 'kubeReservedCgroup', /^must not contain control characters/],
  ])('refuses %s', (_name, doc, field, message) => {
    expect(problems(doc)).toEqual([{ file: MAIN, field, message: expect.stringMatching(message) }]);
  });

  it('refuses a key with its -compressible twin', () => {
    const p = problems({ enforceNodeAllocatable: ['kube-reserved', 'kube-reserved-compressible'], kubeReservedCgroup: '/kube.slice' });
    expect(p).toEqual([{ file: MAIN, field: 'enforceNodeAllocatable', message: 'may not contain both "kube-reserved" and "kube-reserved-compressible"' }]);
  });
});
