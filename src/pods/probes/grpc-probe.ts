/**
 * The kubelet's gRPC probe (pkg/probe/grpc): one `grpc.health.v1.Health/Check` call over
 * plaintext HTTP/2 to the pod's IP (or the node's, on the host network) and the probe's
 * port, with its `service` (default ""). Healthy only when the answer is SERVING; every
 * failure is the kubelet's message. The two protobuf messages are one field each, written
 * and read here (HealthCheckRequest{service=1}, HealthCheckResponse{status=1}) rather than
 * loaded from a descriptor for a call that carries a string and an enum.
 */
import http2 from 'node:http2';
/** What a probe run gives (probes.ts's ProbeOutcome, the same shape: this module does not import probes.ts, which imports it). */
interface ProbeOutcome {
  ok: boolean;
  output: string;
}

/** HealthCheckResponse.ServingStatus names, by number. */
const SERVING_STATUS = ['UNKNOWN', 'SERVING', 'NOT_SERVING', 'SERVICE_UNKNOWN'];
/** gRPC status codes used in the messages. */
const UNIMPLEMENTED = 12;
const MAX_ANSWER = 64 * 1024;

function varint(n: number): Buffer {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return Buffer.from(out);
}

/** A length-prefixed gRPC message holding HealthCheckRequest{service}. */
export function healthCheckRequest(service: string): Buffer {
  const s = Buffer.from(service);
  const msg = s.length ? Buffer.concat([Buffer.from([0x0a]), varint(s.length), s]) : Buffer.alloc(0);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  return Buffer.concat([head, msg]);
}

/** The status of a length-prefixed HealthCheckResponse (0, UNKNOWN, when the field is absent); undefined when it is not one. */
export function healthCheckStatus(frame: Buffer): number | undefined {
  if (frame.length < 5 || frame[0] !== 0) return undefined;
  const len = frame.readUInt32BE(1);
  const msg = frame.subarray(5, 5 + len);
  if (msg.length !== len) return undefined;
  let status = 0;
  for (let i = 0; i < msg.length; ) {
    const tag = msg[i++]!;
    let v = 0;
    let shift = 0;
    for (;;) {
      if (i >= msg.length) return undefined;
      const b = msg[i++]!;
      v += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if (!(b & 0x80)) break;
    }
    if (tag === 0x08) status = v;
    else if ((tag & 7) === 2) i += v; // a length-delimited field this code does not know
    else if ((tag & 7) !== 0) return undefined;
  }
  return status;
}

/** grpc-message is percent-encoded (the gRPC HTTP/2 spec). */
function grpcMessage(v: string | string[] | undefined): string {
  const text = Array.isArray(v) ? v.join(',') : (v ?? '');
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

export function grpcProbe(host: string, port: number, service: string, timeoutMs: number): Promise<ProbeOutcome> {
  const authority = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  const within = `${timeoutMs / 1000}s`;
  return new Promise((resolve) => {
    let done = false;
    const session = http2.connect(`http://${authority}`);
    const finish = (o: ProbeOutcome) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      session.destroy();
      resolve(o);
    };
    let connected = false;
    const timer = setTimeout(
      () => finish({ ok: false, output: connected ? `timeout: health rpc did not complete within ${within}` : `timeout: failed to connect service "${authority}" within ${within}` }),
      timeoutMs,
    );
    session.once('connect', () => (connected = true));
    session.once('error', (err) => finish({ ok: false, output: connected ? `error: health rpc probe failed: ${err.message}` : `timeout: failed to connect service "${authority}" within ${within}: ${err.message}` }));
    const req = session.request({ ':method': 'POST', ':path': '/grpc.health.v1.Health/Check', 'content-type': 'application/grpc', te: 'trailers', 'user-agent': 'kube-probe/1.35' });
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (d: Buffer) => {
      size += d.length;
      if (size > MAX_ANSWER) return finish({ ok: false, output: `error: health rpc probe failed: answer over ${MAX_ANSWER} bytes` });
      chunks.push(d);
    });
    let headers: http2.IncomingHttpHeaders = {};
    req.on('response', (h) => (headers = h));
    req.on('trailers', (trailers) => {
      const code = Number(trailers['grpc-status'] ?? headers['grpc-status'] ?? 2);
      const message = grpcMessage(trailers['grpc-message'] ?? headers['grpc-message']);
      if (code === UNIMPLEMENTED) return finish({ ok: false, output: `this server does not implement the grpc health protocol (grpc.health.v1.Health): ${message}` });
      if (code !== 0) return finish({ ok: false, output: `error: health rpc probe failed: rpc error: code = ${code} desc = ${message}` });
      const status = healthCheckStatus(Buffer.concat(chunks));
      if (status === undefined) return finish({ ok: false, output: 'error: health rpc probe failed: the answer is not a HealthCheckResponse' });
      if (status !== 1) return finish({ ok: false, output: `service unhealthy (responded with "${SERVING_STATUS[status] ?? status}")` });
      finish({ ok: true, output: 'service healthy' });
    });
    req.on('end', () => {
      // Trailers-only answers (an error before any message) come as headers with the stream's end.
      const code = headers['grpc-status'];
      if (code !== undefined && !done) {
        const message = grpcMessage(headers['grpc-message']);
        if (Number(code) === UNIMPLEMENTED) return finish({ ok: false, output: `this server does not implement the grpc health protocol (grpc.health.v1.Health): ${message}` });
        if (Number(code) !== 0) return finish({ ok: false, output: `error: health rpc probe failed: rpc error: code = ${code} desc = ${message}` });
      }
      finish({ ok: false, output: 'error: health rpc probe failed: the stream ended without a status' });
    });
    req.on('error', (err) => {
      // Before the connection, the stream fails with the session's cause (connection refused, no route).
      const cause = (err as Error & { cause?: Error }).cause?.message ?? err.message;
      finish({ ok: false, output: connected ? `error: health rpc probe failed: ${err.message}` : `timeout: failed to connect service "${authority}" within ${within}: ${cause}` });
    });
    req.end(healthCheckRequest(service));
  });
}
