/** The kubelet's cgroup names for both drivers (cgroup_manager_linux.go's ToCgroupfs / ToSystemd and their parsers). */
import { describe, expect, it } from 'vitest';
import { cgroupPath, expandSlice, kubepodsName, parseDriverName, podCgroupName, podUidFromDir, qosCgroupName, toSystemd } from '../../../../src/pods/cgroups/names.js';

const UID = '5f2b3c4d-1111-2222-3333-444455556666';

describe('pod cgroup names', () => {
  it.each([
    ['/', 'Guaranteed', 'cgroupfs', `/kubepods/pod${UID}`],
    ['/', 'Burstable', 'cgroupfs', `/kubepods/burstable/pod${UID}`],
    ['/', 'BestEffort', 'cgroupfs', `/kubepods/besteffort/pod${UID}`],
    ['/nodelet-test-ab12', 'Burstable', 'cgroupfs', `/nodelet-test-ab12/kubepods/burstable/pod${UID}`],
    ['/', 'Guaranteed', 'systemd', `/kubepods.slice/kubepods-pod5f2b3c4d_1111_2222_3333_444455556666.slice`],
    ['/', 'Burstable', 'systemd', `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2b3c4d_1111_2222_3333_444455556666.slice`],
    ['/', 'BestEffort', 'systemd', `/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5f2b3c4d_1111_2222_3333_444455556666.slice`],
    // cgroupRoot is read in cgroupfs form; its own dashes are escaped as any component's.
    ['/nodelet-test', 'BestEffort', 'systemd', `/nodelet_test.slice/nodelet_test-kubepods.slice/nodelet_test-kubepods-besteffort.slice/nodelet_test-kubepods-besteffort-pod5f2b3c4d_1111_2222_3333_444455556666.slice`],
  ] as const)('cgroupRoot %s, %s, %s driver: %s', (root, qos, driver, want) => {
    expect(cgroupPath(podCgroupName(kubepodsName(root), qos, UID), driver)).toBe(want);
  });

  it('names the QoS cgroups and kubepods as the kubelet', () => {
    const k = kubepodsName('/');
    expect(cgroupPath(k, 'cgroupfs')).toBe('/kubepods');
    expect(cgroupPath(k, 'systemd')).toBe('/kubepods.slice');
    expect(cgroupPath(qosCgroupName(k, 'Burstable'), 'cgroupfs')).toBe('/kubepods/burstable');
    expect(cgroupPath(qosCgroupName(k, 'Burstable'), 'systemd')).toBe('/kubepods.slice/kubepods-burstable.slice');
    expect(cgroupPath(qosCgroupName(k, 'BestEffort'), 'systemd')).toBe('/kubepods.slice/kubepods-besteffort.slice');
    expect(cgroupPath(qosCgroupName(k, 'Guaranteed'), 'systemd')).toBe('/kubepods.slice');
    expect(toSystemd([])).toBe('/');
  });

  it('expands slices as libcontainer and refuses malformed ones', () => {
    expect(expandSlice('a-b-c.slice')).toBe('/a.slice/a-b.slice/a-b-c.slice');
    expect(expandSlice('-.slice')).toBe('/');
    expect(() => expandSlice('a--b.slice')).toThrow(/invalid slice name/);
    expect(() => expandSlice('a.service')).toThrow(/invalid slice name/);
  });

  it('reads configured cgroups in the driver form', () => {
    expect(parseDriverName('/kube.slice', 'systemd')).toEqual(['kube']);
    expect(parseDriverName('/system.slice/system-reserved.slice', 'systemd')).toEqual(['system', 'reserved']);
    expect(cgroupPath(parseDriverName('/system.slice/system-reserved.slice', 'systemd'), 'systemd')).toBe('/system.slice/system-reserved.slice');
    expect(parseDriverName('/kube-reserved/x', 'cgroupfs')).toEqual(['kube-reserved', 'x']);
  });

  it('finds the pod UID in a pod cgroup directory, and nothing in another', () => {
    expect(podUidFromDir(`pod${UID}`, 'cgroupfs')).toBe(UID);
    expect(podUidFromDir('burstable', 'cgroupfs')).toBeUndefined();
    expect(podUidFromDir('pod', 'cgroupfs')).toBeUndefined();
    expect(podUidFromDir('kubepods-burstable-pod5f2b3c4d_1111_2222_3333_444455556666.slice', 'systemd')).toBe(UID);
    expect(podUidFromDir('kubepods-burstable.slice', 'systemd')).toBeUndefined();
  });
});
