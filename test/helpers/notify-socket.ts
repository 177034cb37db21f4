/**
 * A real AF_UNIX SOCK_DGRAM socket owned by the test, to be NOTIFY_SOCKET of a nodelet.
 * Node cannot receive unix datagrams itself, so a tiny python3 receiver prints each
 * datagram as one JSON line {t: ms since epoch, msg}.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';

export interface NotifyMessage {
  t: number;
  msg: string;
}

const RECEIVER = `
import socket, sys, json, time, os
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
print(json.dumps({"t": time.time() * 1000, "msg": "__bound__"}), flush=True)
while True:
    data = s.recv(65536)
    print(json.dumps({"t": time.time() * 1000, "msg": data.decode()}), flush=True)
`;

export async function startNotifySocket(dir: string) {
  const socketPath = path.join(dir, 'notify.sock');
  const child = spawn('python3', ['-c', RECEIVER, socketPath], { stdio: ['ignore', 'pipe', 'inherit'] });
  const messages: NotifyMessage[] = [];
  let buf = '';
  let bound!: () => void;
  const ready = new Promise<void>((r) => (bound = r));
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    buf += d;
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const m = JSON.parse(buf.slice(0, i)) as NotifyMessage;
      buf = buf.slice(i + 1);
      if (m.msg === '__bound__') bound();
      else messages.push(m);
    }
  });
  await ready;
  return {
    path: socketPath,
    messages,
    /** Every assignment (KEY=value) received, in order, one entry per line of each datagram. */
    assignments: () => messages.flatMap((m) => m.msg.split('\n').filter(Boolean).map((a) => ({ t: m.t, a }))),
    close: () => child.kill('SIGTERM'),
  };
}
