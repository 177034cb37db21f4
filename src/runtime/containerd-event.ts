/**
 * What a containerd event says of a container's end, read from the event's own bytes, so
 * that a container's exit reaches its pod's status at the runtime's pace: containerd 1.6
 * publishes `/tasks/exit` as the task exits, while its CRI plugin updates the record that
 * ListContainers and ContainerStatus answer only after it deleted the task (a runc call:
 * 50-200 ms later here, FACTS.md). The relist reads the exit from the event meanwhile
 * (cri-pod-runtime.ts `noteContainerEvent`).
 *
 * Wire formats (containerd's api/events and api/services/events/v1):
 *   Envelope  { Timestamp timestamp = 1; string namespace = 2; string topic = 3; Any event = 4 }
 *   Any       { string type_url = 1; bytes value = 2 }
 *   TaskExit  { string container_id = 1; string id = 2; uint32 pid = 3; uint32 exit_status = 4; Timestamp exited_at = 5 }
 *   TaskOOM   { string container_id = 1 }
 *   Timestamp { int64 seconds = 1; int32 nanos = 2 }
 * Anything else, or anything malformed, is no container event (undefined): the event still
 * asks for a relist, which reads the runtime's own listing.
 */

import { readVarint, topFields } from './list-decoder.js';

/** A container's init process exited (`/tasks/exit` whose process is the container's own, not an exec). */
export interface ContainerExitEvent {
  kind: 'exit';
  containerId: string;
  exitCode: number;
  /** When it exited, ns since the epoch (as CRI's `finished_at`); 0 when the event has none. */
  exitedAtNs: number;
}

/** The kernel's OOM killer hit the container (`/tasks/oom`): its exit that follows is `OOMKilled`. */
export interface ContainerOomEvent {
  kind: 'oom';
  containerId: string;
}

export type ContainerEvent = ContainerExitEvent | ContainerOomEvent;

/** Container IDs longer than this are no container's (containerd's are 64 hex digits; CRI-O's too). */
const MAX_ID_BYTES = 256;

/** One top-level field: its number, its varint value (wire 0) or its bytes (wire 2). */
interface Field {
  no: number;
  value: number;
  bytes: Buffer | undefined;
}

/**
 * The fields of a message, in order (the walk is list-decoder.ts's topFields); undefined when
 * malformed. Varint values up to 2^56 (a Timestamp's seconds are int64; a negative one, 10
 * bytes, is refused as malformed).
 */
function fields(msg: Buffer): Field[] | undefined {
  const walk = topFields(msg);
  if (!walk) return undefined;
  const out: Field[] = [];
  for (let i = 0; i < walk.length; i += 3) {
    const tag = walk[i]!;
    const body = readVarint(msg, walk[i + 1]!)!.end;
    if ((tag & 7) === 0) {
      const v = varint(msg, body);
      if (!v) return undefined;
      out.push({ no: tag >>> 3, value: v.value, bytes: undefined });
    } else if ((tag & 7) === 2) {
      out.push({ no: tag >>> 3, value: 0, bytes: msg.subarray(readVarint(msg, body)!.end, walk[i + 2]!) });
    }
  }
  return out;
}

/** A varint value of up to 8 bytes (readVarint stops at 2^31: tags and lengths). */
function varint(buf: Buffer, pos: number): { value: number; end: number } | undefined {
  let value = 0;
  for (let i = 0; i < 8 && pos + i < buf.length; i++) {
    const b = buf[pos + i]!;
    value += (b & 0x7f) * 2 ** (7 * i);
    if (b < 0x80) return { value, end: pos + i + 1 };
  }
  return undefined;
}

const last = (f: Field[], no: number): Field | undefined => f.findLast((x) => x.no === no);

function str(f: Field[], no: number): string {
  const b = last(f, no)?.bytes;
  return b && b.length <= MAX_ID_BYTES ? b.toString('utf8') : '';
}

/** A Timestamp as ns since the epoch (0 when absent or malformed). */
function timestampNs(b: Buffer | undefined): number {
  const t = b && fields(b);
  if (!t) return 0;
  const nanos = last(t, 2)?.value ?? 0;
  return (last(t, 1)?.value ?? 0) * 1e9 + (nanos < 1e9 ? nanos : 0);
}

/** The container event in a containerd event service Envelope, or undefined (another event, or malformed). */
export function containerEvent(envelope: Buffer): ContainerEvent | undefined {
  const env = fields(envelope);
  const any = env && last(env, 4)?.bytes;
  const topic = env && str(env, 3);
  if (!any || (topic !== '/tasks/exit' && topic !== '/tasks/oom')) return undefined;
  const value = fields(any);
  const body = value && last(value, 2)?.bytes;
  const ev = body && fields(body);
  if (!ev) return undefined;
  const containerId = str(ev, 1);
  if (!containerId) return undefined;
  if (topic === '/tasks/oom') return { kind: 'oom', containerId };
  // An exec's process exits with its own ID: the container runs on.
  if (str(ev, 2) !== containerId) return undefined;
  const status = last(ev, 4)?.value ?? 0;
  return { kind: 'exit', containerId, exitCode: status <= 0xffffffff ? status | 0 : 0, exitedAtNs: timestampNs(last(ev, 5)?.bytes) };
}
