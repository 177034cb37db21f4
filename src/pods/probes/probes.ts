/**
 * Container probes, as the kubelet runs them: startup, liveness and readiness, each an
 * `exec` (CRI ExecSync), `httpGet` or `tcpSocket` check with initialDelaySeconds,
 * periodSeconds, timeoutSeconds, successThreshold and failureThreshold.
 *
 * One worker per running container ID and probe kind. Results, as the kubelet's:
 * readiness starts false and liveness true; while a startup probe has not succeeded,
 * liveness and readiness are not run; `failureThreshold` failures in a row turn a result
 * false, `successThreshold` successes (readiness only; 1 otherwise) turn it true. A
 * liveness or startup result of false means the container is killed and restarted per
 * the pod's restartPolicy; readiness false keeps it out of Ready. Every failed probe is an
 * `Unhealthy` event. A changed result wakes the pod's worker through `onChange`.
 *
 * One scheduler turn (`tick`) runs the probes that are due, each worker at most one at a
 * time, so a slow probe never delays another. `grpc` probes call grpc.health.v1.Health/Check
 * (grpc-probe.ts).
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { grpcProbe } from './grpc-probe.js';
import type { Container, Pod, Probe } from 'kubernetes-types/core/v1.js';
import { realClock, type Clock } from '../../clock.js';
import { errorMessage } from '../../errors.js';
import { noEvents, podRef, type EventSink } from '../../events.js';
import type { Logger } from '../../log.js';
import { Loop } from '../../loop.js';

export type ProbeKind = 'startup' | 'liveness' | 'readiness';

export interface ProbeOutcome {
  ok: boolean;
  /** Why it failed (or the command's output). */
  output: string;
}

export type ExecFn = (containerId: string, cmd: string[], timeoutSec: number) => Promise<{ exitCode: number; stdout: Buffer; stderr: Buffer }>;

export interface ProbeTarget {
  containerId: string;
  container: Container;
  /** Where httpGet and tcpSocket connect when the probe names no host: the pod's IP. */
  host: string;
}

const KIND_TITLE: Record<ProbeKind, string> = { startup: 'Startup', liveness: 'Liveness', readiness: 'Readiness' };

/** The probe's port: a number, or the name of one of the container's ports. */
function resolvePort(port: number | string | undefined, c: Container): number | undefined {
  if (typeof port === 'number') return port;
  if (port === undefined) return undefined;
  if (/^\d+$/.test(port)) return Number(port);
  return c.ports?.find((p) => p.name === port)?.containerPort;
}

/** Runs one probe once. Never throws: every fault is a failed outcome with its reason. */
export async function runProbe(probe: Probe, t: ProbeTarget, exec: ExecFn): Promise<ProbeOutcome> {
  const timeoutSec = Math.max(1, probe.timeoutSeconds ?? 1);
  try {
    if (probe.exec) {
      const cmd = probe.exec.command ?? [];
      const r = await exec(t.containerId, cmd, timeoutSec);
      const out = Buffer.concat([r.stdout, r.stderr]).toString('utf8').trim().slice(0, 1024);
      return r.exitCode === 0 ? { ok: true, output: out } : { ok: false, output: out || `command ${JSON.stringify(cmd)} exited with ${r.exitCode}` };
    }
    if (probe.httpGet) {
      const g = probe.httpGet;
      const port = resolvePort(g.port, t.container);
      if (!port) return { ok: false, output: `httpGet port ${JSON.stringify(g.port)} is not a number nor a port of the container` };
      return await httpProbe(g.scheme === 'HTTPS' ? 'https' : 'http', g.host || t.host, port, g.path || '/', g.httpHeaders ?? [], timeoutSec * 1000);
    }
    if (probe.tcpSocket) {
      const port = resolvePort(probe.tcpSocket.port, t.container);
      if (!port) return { ok: false, output: `tcpSocket port ${JSON.stringify(probe.tcpSocket.port)} is not a number nor a port of the container` };
      return await tcpProbe(probe.tcpSocket.host || t.host, port, timeoutSec * 1000);
    }
    if (probe.grpc) return await grpcProbe(t.host, probe.grpc.port, probe.grpc.service ?? '', timeoutSec * 1000);
    return { ok: false, output: 'the probe has no handler (exec, httpGet, tcpSocket or grpc)' };
  } catch (err) {
    return { ok: false, output: errorMessage(err) };
  }
}

function httpProbe(scheme: 'http' | 'https', host: string, port: number, path: string, headers: { name: string; value: string }[], timeoutMs: number): Promise<ProbeOutcome> {
  const url = `${scheme}://${host.includes(':') ? `[${host}]` : host}:${port}${path.startsWith('/') ? path : `/${path}`}`;
  return new Promise((resolve) => {
    const h: Record<string, string> = { 'User-Agent': 'kube-probe/1.32', Accept: '*/*' };
    for (const { name, value } of headers) h[name] = value;
    // As the kubelet: an HTTPS probe does not verify the certificate.
    const req = (scheme === 'https' ? https : http).get(url, { headers: h, timeout: timeoutMs, ...(scheme === 'https' ? { rejectUnauthorized: false } : {}) }, (res) => {
      res.resume();
      const code = res.statusCode ?? 0;
      resolve(code >= 200 && code < 400 ? { ok: true, output: '' } : { ok: false, output: `HTTP probe failed with statuscode: ${code}` });
    });
    req.on('timeout', () => req.destroy(new Error(`Get "${url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`)));
    req.on('error', (err) => resolve({ ok: false, output: err.message.startsWith('Get "') ? err.message : `Get "${url}": ${err.message}` }));
  });
}

function tcpProbe(host: string, port: number, timeoutMs: number): Promise<ProbeOutcome> {
  return new Promise((resolve) => {
    const s = net.connect({ host, port, timeout: timeoutMs });
    s.once('connect', () => {
      s.destroy();
      resolve({ ok: true, output: '' });
    });
    s.once('timeout', () => {
      s.destroy();
      resolve({ ok: false, output: `dial tcp ${host}:${port}: i/o timeout` });
    });
    s.once('error', (err) => resolve({ ok: false, output: `dial tcp ${host}:${port}: ${err.message}` }));
  });
}

interface Worker {
  uid: string;
  pod: Pod;
  kind: ProbeKind;
  probe: Probe;
  target: ProbeTarget;
  nextAt: number;
  successes: number;
  failures: number;
  result: boolean;
  running: boolean;
}

export interface RunningContainer {
  id: string;
  name: string;
  /** ms since the epoch. */
  startedAt: number;
}

export interface ProbeManagerOptions {
  exec: ExecFn;
  logger: Logger;
  clock?: Clock;
  events?: EventSink;
  /** A probe result changed for this pod: sync it. */
  onChange: (uid: string) => void;
}

/** The loop's sleep with no probe to run (a wake() ends it; under setTimeout's 2^31 - 1 ms limit). */
const IDLE_SLEEP_MS = 2 ** 30;

export class ProbeManager {
  readonly #o: Required<ProbeManagerOptions>;
  /** By `<containerId>/<kind>`. */
  readonly #workers = new Map<string, Worker>();
  readonly #loop: Loop;
  #stopped = false;

  constructor(o: ProbeManagerOptions) {
    this.#o = { clock: realClock, events: noEvents, ...o };
    this.#loop = new Loop({ name: 'probes', turn: () => this.tick(), delayMs: () => this.#nextDelay(), clock: this.#o.clock });
  }

  /**
   * After a pod sync: its running containers. Workers start for new container IDs (first
   * probe after initialDelaySeconds from the container's start) and stop for the others.
   */
  update(pod: Pod, running: readonly RunningContainer[], host: string): void {
    const uid = pod.metadata!.uid!;
    // By name, the first of each (as a search of the spec finds it): one search per running container was quadratic.
    const specs = new Map<string, Container>();
    // App containers and native sidecars (init containers with restartPolicy Always) are probed; other init containers are not.
    for (const c of pod.spec?.containers ?? []) if (!specs.has(c.name)) specs.set(c.name, c);
    for (const c of pod.spec?.initContainers ?? []) if (c.restartPolicy === 'Always' && !specs.has(c.name)) specs.set(c.name, c);
    const keep = new Set<string>();
    let added = false;
    for (const rc of running) {
      const c = specs.get(rc.name);
      if (!c) continue;
      for (const kind of ['startup', 'liveness', 'readiness'] as const) {
        const probe = c[`${kind}Probe`];
        if (!probe) continue;
        const key = `${rc.id}/${kind}`;
        keep.add(key);
        const w = this.#workers.get(key);
        if (w) {
          w.pod = pod;
          // The pod's IP can come after the worker (a status without it yet): probes follow it.
          if (w.target.host !== host) w.target = { ...w.target, host };
          continue;
        }
        this.#workers.set(key, {
          uid,
          pod,
          kind,
          probe,
          target: { containerId: rc.id, container: c, host },
          nextAt: rc.startedAt + Math.max(0, probe.initialDelaySeconds ?? 0) * 1000,
          successes: 0,
          failures: 0,
          result: kind === 'liveness',
          running: false,
        });
        added = true;
      }
    }
    for (const [key, w] of this.#workers) if (w.uid === uid && !keep.has(key)) this.#workers.delete(key);
    // The loop sleeps until the next probe it knows of: a new one may be due sooner.
    if (added) this.#loop.wake();
  }

  /** The pod is gone: its workers stop. */
  remove(uid: string): void {
    for (const [key, w] of this.#workers) if (w.uid === uid) this.#workers.delete(key);
  }

  /** Started (the container's `started`): no startup probe, or it succeeded. */
  started(containerId: string): boolean {
    const s = this.#workers.get(`${containerId}/startup`);
    return !s || s.result;
  }

  /** Ready as far as probes go: started, and no readiness probe or it succeeded. */
  ready(containerId: string): boolean {
    const r = this.#workers.get(`${containerId}/readiness`);
    return this.started(containerId) && (!r || r.result);
  }

  /** Why the container must be restarted (a failed liveness or startup probe), or undefined. */
  mustRestart(containerId: string): string | undefined {
    const live = this.#workers.get(`${containerId}/liveness`);
    if (live && !live.result) return `Container ${live.target.container.name} failed liveness probe, will be restarted`;
    const start = this.#workers.get(`${containerId}/startup`);
    if (start && !start.result && start.failures >= Math.max(1, start.probe.failureThreshold ?? 3)) return `Container ${start.target.container.name} failed startup probe, will be restarted`;
    return undefined;
  }

  start(signal?: AbortSignal): void {
    this.#loop.start(signal);
  }

  /** Stops probing. Probes in flight are not waited for (an exec may take its whole timeout); their results are dropped. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#loop.stop();
  }

  /** Starts the probes that are due; resolves when they are done (tests await it, the loop does not). */
  async tick(): Promise<void> {
    const now = this.#o.clock.now();
    const runs: Promise<void>[] = [];
    for (const w of this.#workers.values()) {
      if (w.running || now < w.nextAt) continue;
      // A startup probe that succeeded is done for this container.
      if (w.kind === 'startup' && w.result) continue;
      // Liveness and readiness wait for the startup probe to succeed.
      if (w.kind !== 'startup' && !this.started(w.target.containerId)) continue;
      w.running = true;
      w.nextAt = now + Math.max(1, w.probe.periodSeconds ?? 10) * 1000;
      runs.push(
        this.#probe(w).finally(() => {
          w.running = false;
          // Its next run (and, after a startup probe, the liveness and readiness probes
          // waiting for it) was not in the delay the loop is sleeping.
          this.#loop.wake();
        }),
      );
    }
    // The loop only starts them: one slow probe never holds back the next tick.
    if (this.#loop.running) return;
    await Promise.all(runs);
  }

  async #probe(w: Worker): Promise<void> {
    const out = await runProbe(w.probe, w.target, this.#o.exec);
    const key = `${w.target.containerId}/${w.kind}`;
    if (this.#stopped || this.#workers.get(key) !== w) return; // stopped, or the container went meanwhile
    const before = w.result;
    if (out.ok) {
      w.failures = 0;
      w.successes++;
      const needed = w.kind === 'readiness' ? Math.max(1, w.probe.successThreshold ?? 1) : 1;
      if (w.successes >= needed) w.result = true;
    } else {
      w.successes = 0;
      w.failures++;
      this.#o.events.emit(podRef(w.pod, { name: w.target.container.name }), 'Warning', 'Unhealthy', `${KIND_TITLE[w.kind]} probe failed: ${out.output}`);
      if (w.failures >= Math.max(1, w.probe.failureThreshold ?? 3)) w.result = false;
    }
    const startupGaveUp = w.kind === 'startup' && !w.result && w.failures === Math.max(1, w.probe.failureThreshold ?? 3);
    if (w.result !== before || startupGaveUp) {
      const log = this.#o.logger.child({ pod: `${w.pod.metadata?.namespace}/${w.pod.metadata?.name}`, container: w.target.container.name, probe: w.kind });
      if (w.result) log.info(`${w.kind} probe succeeded`);
      else log.warn({ output: out.output }, `${w.kind} probe failed ${w.failures} times: ${out.output}`);
      this.#o.onChange(w.uid);
    }
  }

  /**
   * Until the next probe due among those that can run (not running, not a startup probe
   * already passed, not waiting for its container's startup probe): the loop sleeps that
   * long, and with nothing due, until update() or a finished probe wakes it (it used to
   * turn every 250 ms with no probe at all: 4 wake-ups a second on an idle node).
   */
  #nextDelay(): number {
    let next = Infinity;
    for (const w of this.#workers.values()) {
      if (w.running || (w.kind === 'startup' && w.result) || (w.kind !== 'startup' && !this.started(w.target.containerId))) continue;
      next = Math.min(next, w.nextAt);
    }
    return next === Infinity ? IDLE_SLEEP_MS : Math.max(20, next - this.#o.clock.now());
  }
}
