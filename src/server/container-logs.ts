/**
 * `GET /containerLogs/<namespace>/<pod>/<container>`: what `kubectl logs` reads from the
 * node agent, from the CRI log files the runtime writes under `podLogsDir`
 * (`<ns>_<pod>_<uid>/<container>/<restartCount>.log`, lines `<RFC3339Nano> <stream> <P|F> <text>`).
 *
 * Query parameters, as the kubelet's: `previous` (the instance before the current one),
 * `timestamps` (each line prefixed with its RFC 3339 time), `tailLines`, `limitBytes`,
 * `sinceSeconds` or `sinceTime` (not both), `follow` (keeps streaming what the container
 * writes until it stops or the client goes). Partial (`P`) lines are joined with the next
 * until an `F`. A bad parameter is a 400 naming it; an unknown pod or container a 404; a
 * container that has no log yet (waiting), or no previous instance, a 400 saying so.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { NodeletError } from '../errors.js';
import type { PodLookup } from './checkpoint.js';

export interface LogOptions {
  previous: boolean;
  timestamps: boolean;
  follow: boolean;
  tailLines?: number;
  limitBytes?: number;
  /** ms since the epoch: only lines at or after it. */
  since?: number;
}

function bool(q: URLSearchParams, name: string): boolean {
  const v = q.get(name);
  if (v === null || v === '' || v === 'false' || v === '0') return false;
  if (v === 'true' || v === '1') return true;
  throw new NodeletError('INVALID_ARGUMENT', `query parameter ${name}: ${JSON.stringify(v)} is not a boolean`, { param: name });
}

function int(q: URLSearchParams, name: string, min: number): number | undefined {
  const v = q.get(name);
  if (v === null) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || !Number.isSafeInteger(Number(v))) {
    throw new NodeletError('INVALID_ARGUMENT', `query parameter ${name}: ${JSON.stringify(v)} must be an integer >= ${min}`, { param: name });
  }
  return Number(v);
}

export function parseLogOptions(q: URLSearchParams, now: number): LogOptions {
  const sinceSeconds = int(q, 'sinceSeconds', 1);
  const sinceTime = q.get('sinceTime');
  if (sinceSeconds !== undefined && sinceTime !== null) throw new NodeletError('INVALID_ARGUMENT', 'at most one of sinceTime or sinceSeconds may be specified', { param: 'sinceTime' });
  let since: number | undefined;
  if (sinceSeconds !== undefined) since = now - sinceSeconds * 1000;
  if (sinceTime !== null) {
    since = Date.parse(sinceTime);
    if (!/^\d{4}-\d{2}-\d{2}T/.test(sinceTime) || Number.isNaN(since)) throw new NodeletError('INVALID_ARGUMENT', `query parameter sinceTime: ${JSON.stringify(sinceTime)} is not an RFC 3339 time`, { param: 'sinceTime' });
  }
  const tailLines = int(q, 'tailLines', 0);
  const limitBytes = int(q, 'limitBytes', 1);
  return {
    previous: bool(q, 'previous'),
    timestamps: bool(q, 'timestamps'),
    follow: bool(q, 'follow'),
    ...(tailLines !== undefined ? { tailLines } : {}),
    ...(limitBytes !== undefined ? { limitBytes } : {}),
    ...(since !== undefined ? { since } : {}),
  };
}

const CRI_LINE = /^(\S+) (stdout|stderr) ([FP]) ?(.*)$/;

/** Joins CRI log lines into whole lines with their time (ms) and RFC 3339 text. */
export class CriLogDecoder {
  #rest = '';
  #partial = '';

  /** Feeds raw text; returns the whole lines completed by it. */
  push(chunk: string): { ts: string; ms: number; text: string }[] {
    const data = this.#rest + chunk;
    const lines = data.split('\n');
    this.#rest = lines.pop() ?? '';
    const out: { ts: string; ms: number; text: string }[] = [];
    for (const line of lines) {
      const m = CRI_LINE.exec(line);
      if (!m) continue;
      const [, ts, , tag, text] = m as unknown as [string, string, string, string, string];
      if (tag === 'P') {
        this.#partial += text;
        continue;
      }
      out.push({ ts, ms: Date.parse(ts), text: this.#partial + text });
      this.#partial = '';
    }
    return out;
  }
}

export interface LogTarget {
  file: string;
  /** The container still runs this instance (follow keeps reading). */
  running: () => boolean;
}

/** Finds the log file of a container instance; the errors name what is missing. */
export function logTarget(pods: PodLookup, podLogsDir: string, namespace: string, name: string, container: string, previous: boolean): LogTarget {
  const pod = pods.getPod(namespace, name);
  if (!pod) throw new NodeletError('NOT_FOUND', `pod "${name}" in namespace "${namespace}" not found`, { param: 'pod' });
  const statuses = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
  const known = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].some((c) => c.name === container);
  const st = statuses.find((s) => s.name === container);
  if (!known) throw new NodeletError('NOT_FOUND', `container "${container}" not found in pod "${name}"`, { param: 'container' });
  const restarts = st?.restartCount ?? 0;
  const dir = path.join(podLogsDir, `${namespace}_${name}_${pod.metadata?.uid}`, container);
  if (previous) {
    if (restarts === 0 || !st?.lastState?.terminated) throw new NodeletError('INVALID_ARGUMENT', `previous terminated container "${container}" in pod "${name}" not found`, { param: 'previous' });
    return { file: path.join(dir, `${restarts - 1}.log`), running: () => false };
  }
  if (!st?.containerID) {
    const why = st?.state?.waiting?.reason;
    throw new NodeletError('INVALID_ARGUMENT', `container "${container}" in pod "${name}" is waiting to start${why ? `: ${why}` : ''}`, { param: 'container' });
  }
  const id = st.containerID;
  const stillRunning = (p: Pod | undefined) => {
    const s = [...(p?.status?.initContainerStatuses ?? []), ...(p?.status?.containerStatuses ?? [])].find((x) => x.name === container);
    return s?.containerID === id && !!s.state?.running;
  };
  return { file: path.join(dir, `${restarts}.log`), running: () => stillRunning(pods.getPod(namespace, name)) };
}

/** Opens the target's log file; a missing one is a 404 naming the container. */
export async function openLog(target: LogTarget, container: string): Promise<fsp.FileHandle> {
  try {
    return await fsp.open(target.file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new NodeletError('NOT_FOUND', `container "${container}" has no log file ${path.basename(target.file)}`, { param: 'container' });
    throw err;
  }
}

/** Writes the selected lines of the open log to `write`; with follow, keeps going until it stops or `signal` aborts. Closes `fh`. */
export async function streamLogs(fh: fsp.FileHandle, target: LogTarget, o: LogOptions, write: (s: string) => void, signal: AbortSignal, pollMs = 250): Promise<void> {
  try {
    const dec = new CriLogDecoder();
    let budget = o.limitBytes ?? Infinity;
    const emit = (lines: { ts: string; ms: number; text: string }[]): boolean => {
      for (const l of lines) {
        if (o.since !== undefined && l.ms < o.since) continue;
        let s = `${o.timestamps ? `${l.ts} ` : ''}${l.text}\n`;
        if (Buffer.byteLength(s) > budget) s = Buffer.from(s).subarray(0, budget).toString('utf8');
        budget -= Buffer.byteLength(s);
        write(s);
        if (budget <= 0) return false;
      }
      return true;
    };
    // What is there now: tailLines applies to it.
    const { size } = await fh.stat();
    const buf = Buffer.alloc(size);
    await fh.read(buf, 0, size, 0);
    let pos = size;
    let lines = dec.push(buf.toString('utf8'));
    if (o.tailLines !== undefined) lines = o.tailLines === 0 ? [] : lines.slice(-o.tailLines);
    if (!emit(lines) || !o.follow) return;
    // Follow: what is appended, until the instance stops (then what is left) or the client goes.
    for (;;) {
      const done = !target.running();
      const st = await fh.stat();
      if (st.size > pos) {
        const more = Buffer.alloc(st.size - pos);
        await fh.read(more, 0, more.length, pos);
        pos = st.size;
        if (!emit(dec.push(more.toString('utf8')))) return;
      }
      if (done || signal.aborted) return;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, pollMs);
        signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
      });
    }
  } finally {
    await fh.close();
  }
}
