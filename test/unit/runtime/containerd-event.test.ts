import { describe, expect, it } from 'vitest';
import { containerEvent } from '../../../src/runtime/containerd-event.js';
import { envelope, taskExit, taskOom } from '../../helpers/containerd-events.js';

const ID = 'a'.repeat(64);

describe('containerEvent: what a containerd event says of a container', () => {
  it("reads a container's exit from /tasks/exit: its code (uint32 as CRI's int32) and its time in ns", () => {
    expect(containerEvent(taskExit(ID, 137, 1_795_817_175_100))).toEqual({ kind: 'exit', containerId: ID, exitCode: 137, exitedAtNs: 1_795_817_175_100 * 1e6 });
    expect(containerEvent(taskExit(ID, 0, 1000))).toMatchObject({ exitCode: 0 });
    // containerd keeps `int32(exit_status)`: a status of 2^32-1 is -1 in CRI.
    expect(containerEvent(taskExit(ID, 0xffffffff, 1000))).toMatchObject({ exitCode: -1 });
  });

  it("an exec's process exit is not the container's; an OOM kill is told; other topics are no container event", () => {
    expect(containerEvent(taskExit(ID, 1, 1000, 'exec-probe-1'))).toBeUndefined();
    expect(containerEvent(taskOom(ID))).toEqual({ kind: 'oom', containerId: ID });
    expect(containerEvent(envelope('/tasks/delete', 'containerd.events.TaskDelete', Buffer.from([0x0a, 0x01, 0x61])))).toBeUndefined();
    expect(containerEvent(envelope('/containers/create', 'containerd.events.ContainerCreate', Buffer.alloc(0)))).toBeUndefined();
  });

  it('hostile or broken bytes are no event and never throw: truncated, garbage, an empty or oversized ID', () => {
    const good = taskExit(ID, 137, 1000);
    for (let n = 0; n < good.length; n++) expect(() => containerEvent(good.subarray(0, n))).not.toThrow();
    expect(containerEvent(good.subarray(0, good.length - 3))).toBeUndefined();
    expect(containerEvent(Buffer.from('not a protobuf message at all \xff\xff\xff\xff\xff\xff\xff\xff\xff\xff', 'latin1'))).toBeUndefined();
    expect(containerEvent(Buffer.alloc(0))).toBeUndefined();
    expect(containerEvent(taskExit('', 1, 1000))).toBeUndefined();
    expect(containerEvent(taskExit('x'.repeat(257), 1, 1000))).toBeUndefined();
    // A length beyond the message.
    expect(containerEvent(Buffer.from([0x22, 0x7f, 0x0a]))).toBeUndefined();
  });
});
