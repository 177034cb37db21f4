/**
 * systemd notifications (sd_notify protocol) and the watchdog.
 *
 * Messages go out through libsystemd's sd_notify in-process (the `sd-notify` native
 * addon): systemd's default NotifyAccess=main accepts datagrams only from the main PID,
 * so a helper process cannot send them for us, and Node's dgram has no unix datagrams.
 * The addon is loaded lazily and only when NOTIFY_SOCKET is set.
 */
import { createRequire } from 'node:module';
import { NodeletError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { HealthRegistry } from '../health/checks.js';
import type { Logger } from '../log.js';
import { LoopOwner } from '../loop.js';

export interface Notifier {
  readonly enabled: boolean;
  ready(status?: string): void;
  status(text: string): void;
  watchdog(): void;
  stopping(status?: string): void;
}

type SdNotify = { sendState(state: string): void };

/** A Notifier for NOTIFY_SOCKET, or a silent one when it is unset. */
export function createNotifier(env: NodeJS.ProcessEnv = process.env): Notifier {
  if (!env.NOTIFY_SOCKET) {
    return { enabled: false, ready() {}, status() {}, watchdog() {}, stopping() {} };
  }
  const sd = createRequire(import.meta.url)('sd-notify') as SdNotify;
  // STATUS= is one line: newlines would start a new assignment.
  const st = (s: string) => `STATUS=${s.replace(/\n/g, ' ')}`;
  return {
    enabled: true,
    ready: (status) => sd.sendState(status ? `READY=1\n${st(status)}` : 'READY=1'),
    status: (text) => sd.sendState(st(text)),
    watchdog: () => sd.sendState('WATCHDOG=1'),
    stopping: (status) => sd.sendState(status ? `STOPPING=1\n${st(status)}` : 'STOPPING=1'),
  };
}

/**
 * Reads WATCHDOG_USEC (and WATCHDOG_PID) the way sd_watchdog_enabled does, but strictly:
 * unset or "0" -> undefined (no pings); a PID that is not ours -> undefined; not a
 * positive integer, or under one second (the kubelet does not support sub-second
 * watchdogs) -> a startup error naming the variable.
 */
export function watchdogIntervalFromEnv(env: NodeJS.ProcessEnv = process.env, pid = process.pid): number | undefined {
  const raw = env.WATCHDOG_USEC;
  if (raw === undefined || raw === '' || raw === '0') return undefined;
  if (!/^\d+$/.test(raw)) {
    throw new NodeletError('CONFIG_INVALID', `WATCHDOG_USEC: "${raw}" is not a number of microseconds`);
  }
  const usec = Number(raw);
  if (usec < 1_000_000) {
    throw new NodeletError('CONFIG_INVALID', `WATCHDOG_USEC: ${raw}µs is under one second; sub-second watchdog timeouts are not supported`);
  }
  if (env.WATCHDOG_PID && env.WATCHDOG_PID !== String(pid)) return undefined;
  return usec / 1000;
}

/**
 * Pings WATCHDOG=1 every timeout/2 while every health check passes. A failing check
 * stops the pings (and is logged), so systemd kills and restarts a nodelet that is up
 * but no longer working; a frozen event loop stops them by itself.
 */
export class WatchdogLoop extends LoopOwner {
  #failing = false;

  constructor(
    private readonly deps: { notifier: Notifier; health: HealthRegistry; timeoutMs: number; clock: Clock; logger: Logger },
  ) {
    super({ name: 'watchdog', clock: deps.clock, logger: deps.logger, periodMs: deps.timeoutMs / 2 });
  }

  get periodMs(): number {
    return this.deps.timeoutMs / 2;
  }

  /** One turn: run the checks, ping if healthy. Returns whether it pinged. */
  async syncOnce(): Promise<boolean> {
    const report = await this.deps.health.run(Math.min(2000, this.periodMs / 2));
    if (report.ok) {
      this.deps.notifier.watchdog();
      if (this.#failing) this.deps.logger.info('health checks pass again; watchdog pings resumed');
      this.#failing = false;
      return true;
    }
    const failed = report.results.filter((r) => !r.ok).map((r) => `${r.name}: ${r.reason}`);
    if (!this.#failing) this.deps.logger.warn({ failed }, `health checks fail (${failed.join('; ')}); watchdog pings withheld`);
    this.#failing = true;
    return false;
  }
}
