/**
 * containerd event service Envelopes as containerd 1.6 sends them (containerd-event.ts has the
 * wire formats), for tests of what nodelet reads from them.
 */
function varint(n: number): Buffer {
  const out: number[] = [];
  for (let v = n; ; v = Math.floor(v / 128)) {
    if (v < 128) {
      out.push(v);
      return Buffer.from(out);
    }
    out.push((v % 128) | 0x80);
  }
}

const bytesField = (no: number, b: Buffer | string) => {
  const buf = Buffer.from(b);
  return Buffer.concat([varint(no * 8 + 2), varint(buf.length), buf]);
};
const varintField = (no: number, n: number) => Buffer.concat([varint(no * 8), varint(n)]);
const timestamp = (ms: number) => Buffer.concat([varintField(1, Math.floor(ms / 1000)), varintField(2, (ms % 1000) * 1e6)]);

/** An Envelope of the `k8s.io` namespace with `topic` and the event message `body` (TaskExit, TaskOOM, ...). */
export function envelope(topic: string, typeUrl: string, body: Buffer): Buffer {
  const any = Buffer.concat([bytesField(1, typeUrl), bytesField(2, body)]);
  return Buffer.concat([bytesField(1, timestamp(Date.now())), bytesField(2, 'k8s.io'), bytesField(3, topic), bytesField(4, any)]);
}

/** `/tasks/exit` of process `id` (the container's own when `id` is the container's ID) with `status`, exited at `exitedAtMs`. */
export function taskExit(containerId: string, status: number, exitedAtMs: number, id = containerId): Buffer {
  const body = Buffer.concat([bytesField(1, containerId), bytesField(2, id), varintField(3, 4242), varintField(4, status), bytesField(5, timestamp(exitedAtMs))]);
  return envelope('/tasks/exit', 'containerd.events.TaskExit', body);
}

/** `/tasks/oom` of the container. */
export function taskOom(containerId: string): Buffer {
  return envelope('/tasks/oom', 'containerd.events.TaskOOM', bytesField(1, containerId));
}
