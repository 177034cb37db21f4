/**
 * systemd-logind, as the graceful node shutdown needs it: its `InhibitDelayMaxUSec`, a reload
 * of its configuration, a `shutdown` delay inhibitor, and its `PrepareForShutdown` signal.
 *
 * Why two channels:
 * - The inhibitor is a file descriptor that logind returns from
 *   `org.freedesktop.login1.Manager.Inhibit("shutdown", who, why, "delay")` (D-Bus type `h`,
 *   passed with SCM_RIGHTS); the lock lasts as long as that descriptor is open anywhere.
 *   Node's sockets cannot receive ancillary data, and the JavaScript D-Bus clients only do with
 *   a native addon (dbus-next's optional `usocket`, an old major). So nodelet holds the lock
 *   through a child: `systemd-inhibit --what=shutdown --mode=delay ... cat`, with the child's
 *   stdin a pipe from nodelet. Releasing closes the pipe: `cat` ends, `systemd-inhibit` ends
 *   and logind's descriptor is closed. If nodelet dies, the pipe closes the same way, so a lock
 *   never outlives its holder. nodelet knows the lock is held when `cat` echoes a line back
 *   (systemd-inhibit starts the command only after Inhibit succeeded).
 * - Everything else (a property, a method call, a signal match) needs no descriptor and goes
 *   over a D-Bus connection of nodelet's own: `@jellybrick/dbus-next` (pure JavaScript, the
 *   maintained fork of dbus-next), imported only when graceful shutdown is configured.
 *
 * Contract: connectLogind() resolves a Logind or rejects with a NodeletError saying why
 * (no system bus, no logind); the caller decides to run without the feature.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { EventEmitter } from 'node:events';
import fs from 'node:fs/promises';
import path from 'node:path';
import { errorMessage, NodeletError } from '../errors.js';
import type { Logger } from '../log.js';
import { LOGIND_DROP_IN_DIR, LOGIND_DROP_IN_FILE, logindDropIn } from './shutdown-plan.js';

/** A held delay inhibitor. */
export interface Inhibitor {
  /** Lets logind go on with the shutdown. Idempotent; resolves once the lock is gone. */
  release(): Promise<void>;
  /** Resolves when the lock went away (released, or its holder died). */
  readonly gone: Promise<void>;
}

/** What the shutdown manager uses of logind (the real one below; a fake in tests). */
export interface Logind {
  /** logind's `InhibitDelayMaxUSec`, in seconds. */
  inhibitDelayMaxSeconds(): Promise<number>;
  /** Writes the kubelet's logind.conf.d drop-in with `InhibitDelayMaxSec=<seconds>`. */
  overrideInhibitDelay(seconds: number): Promise<void>;
  /** SIGHUP to systemd-logind.service (systemd's KillUnit), which rereads its configuration. */
  reloadConfig(): Promise<void>;
  /** Takes a `shutdown` delay inhibitor. */
  inhibitShutdown(): Promise<Inhibitor>;
  /**
   * Calls `onEvent(true)` on PrepareForShutdown(true) (the shutdown is starting) and
   * `onEvent(false)` when it was cancelled. `onLost` once if the bus connection ends.
   */
  watchShutdown(onEvent: (shuttingDown: boolean) => void, onLost: (why: string) => void): Promise<void>;
  /** Closes the bus connection (not the inhibitor). Idempotent. */
  close(): void;
}

const LOGIN1 = 'org.freedesktop.login1';
const LOGIN1_PATH = '/org/freedesktop/login1';
const LOGIN1_MANAGER = 'org.freedesktop.login1.Manager';
const DEFAULT_SYSTEM_BUS = 'unix:path=/var/run/dbus/system_bus_socket';

export interface LogindOptions {
  logger: Logger;
  /** D-Bus address (default: DBUS_SYSTEM_BUS_ADDRESS, else the system bus socket). */
  busAddress?: string;
  /** Who holds the inhibitor, and why (shown by `systemd-inhibit --list`). */
  who?: string;
  why?: string;
  /** The systemd-inhibit binary (default: from PATH). */
  systemdInhibit?: string;
  /** Where the logind drop-in goes (default /etc/systemd/logind.conf.d). */
  dropInDir?: string;
  /** Bound on connecting and on each call (default 10 s). */
  timeoutMs?: number;
}

/** The socket path of a `unix:path=...` address, to say plainly when there is no bus. */
function socketPath(address: string): string | undefined {
  const m = /(?:^|;)unix:(?:[^;]*,)?path=([^,;]+)/.exec(address);
  return m?.[1];
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new NodeletError('UNAVAILABLE', `${what}: no answer within ${ms} ms`)), ms);
    }),
  ]);
}

/**
 * A connection to the system bus at `address`, up within `timeoutMs`. `lost` says why it
 * ended (first reason only) and tells its listeners: every error of the connection after it is
 * up ends it for us (the shutdown manager reconnects).
 */
async function openSystemBus(address: string, timeoutMs: number) {
  const dbus = await import('@jellybrick/dbus-next');
  // The library takes the address from the environment only; pass ours through it.
  const saved = process.env.DBUS_SYSTEM_BUS_ADDRESS;
  process.env.DBUS_SYSTEM_BUS_ADDRESS = address;
  let bus: InstanceType<typeof dbus.MessageBus>;
  try {
    bus = dbus.systemBus();
  } finally {
    if (saved === undefined) delete process.env.DBUS_SYSTEM_BUS_ADDRESS;
    else process.env.DBUS_SYSTEM_BUS_ADDRESS = saved;
  }
  const lost = { why: undefined as string | undefined, listeners: new Set<(why: string) => void>() };
  const end = (why: string) => {
    if (lost.why !== undefined) return;
    lost.why = why;
    for (const l of lost.listeners) l(why);
  };
  // ('error' is emitted though the library's event types leave it out.)
  const emitter = bus as unknown as EventEmitter;
  emitter.on('error', (err: unknown) => end(errorMessage(err)));
  (bus as unknown as { _connection?: { on?(ev: string, fn: () => void): void } })._connection?.on?.('end', () => end('the D-Bus connection was closed'));
  await withTimeout(
    new Promise<void>((resolve, reject) => {
      bus.once('connect', () => resolve());
      emitter.once('error', (err: unknown) => reject(new NodeletError('UNAVAILABLE', `cannot connect to the D-Bus system bus at ${address}: ${errorMessage(err)}`)));
    }),
    timeoutMs,
    `connecting to the D-Bus system bus at ${address}`,
  ).catch((err) => {
    bus.disconnect();
    throw err;
  });
  return { dbus, bus, lost };
}

export async function connectLogind(o: LogindOptions): Promise<Logind> {
  const address = o.busAddress ?? process.env.DBUS_SYSTEM_BUS_ADDRESS ?? DEFAULT_SYSTEM_BUS;
  const timeoutMs = o.timeoutMs ?? 10_000;
  const sock = socketPath(address);
  if (sock) {
    try {
      await fs.access(sock);
    } catch {
      throw new NodeletError('UNAVAILABLE', `no D-Bus system bus (${sock} does not exist)`);
    }
  }
  const { dbus, bus, lost } = await openSystemBus(address, timeoutMs);
  const { Message, MessageType } = dbus;

  const call = async (destination: string, objPath: string, iface: string, member: string, signature = '', body: unknown[] = []): Promise<unknown[]> => {
    const reply = await withTimeout(bus.call(new Message({ destination, path: objPath, interface: iface, member, signature, body })), timeoutMs, `${iface}.${member}`);
    return reply?.body ?? [];
  };

  const logind: Logind = {
    async inhibitDelayMaxSeconds() {
      let v: unknown;
      try {
        [v] = await call(LOGIN1, LOGIN1_PATH, 'org.freedesktop.DBus.Properties', 'Get', 'ss', [LOGIN1_MANAGER, 'InhibitDelayMaxUSec']);
      } catch (err) {
        throw new NodeletError('UNAVAILABLE', `cannot read InhibitDelayMaxUSec from systemd-logind: ${errorMessage(err)}`);
      }
      const value = (v as { value?: unknown } | undefined)?.value;
      if (typeof value !== 'bigint' && typeof value !== 'number') throw new NodeletError('UNAVAILABLE', `InhibitDelayMaxUSec from systemd-logind is not a uint64: ${String(value)}`);
      return Number(value) / 1e6;
    },
    async overrideInhibitDelay(seconds) {
      const dir = o.dropInDir ?? LOGIND_DROP_IN_DIR;
      await fs.mkdir(dir, { recursive: true, mode: 0o755 });
      await fs.writeFile(path.join(dir, LOGIND_DROP_IN_FILE), logindDropIn(seconds), { mode: 0o644 });
    },
    async reloadConfig() {
      await call('org.freedesktop.systemd1', '/org/freedesktop/systemd1', 'org.freedesktop.systemd1.Manager', 'KillUnit', 'ssi', ['systemd-logind.service', 'all', 1]);
    },
    inhibitShutdown: () => holdInhibitor(o),
    async watchShutdown(onEvent, onLost) {
      if (lost.why !== undefined) throw new NodeletError('UNAVAILABLE', lost.why);
      lost.listeners.add(onLost);
      bus.on('message', (msg) => {
        if (msg.type !== MessageType.SIGNAL || msg.interface !== LOGIN1_MANAGER || msg.member !== 'PrepareForShutdown' || msg.path !== LOGIN1_PATH) return;
        const active = msg.body[0];
        if (typeof active !== 'boolean') {
          o.logger.error({ body: msg.body }, 'PrepareForShutdown signal without its boolean argument; ignored');
          return;
        }
        onEvent(active);
      });
      await call('org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus', 'AddMatch', 's', [
        `type='signal',sender='${LOGIN1}',interface='${LOGIN1_MANAGER}',member='PrepareForShutdown',path='${LOGIN1_PATH}'`,
      ]);
    },
    close() {
      lost.listeners.clear();
      lost.why ??= 'closed';
      bus.disconnect();
    },
  };
  // logind answers (it may be absent on a host with a bus, as in most containers).
  await logind.inhibitDelayMaxSeconds().catch((err) => {
    logind.close();
    throw err;
  });
  return logind;
}

/**
 * `systemd-inhibit --what=shutdown --mode=delay --who=... --why=... cat`, stdin and stdout
 * pipes: resolves once `cat` echoed our line (the lock is held), rejects with what
 * systemd-inhibit said if it ends first.
 */
export function holdInhibitor(o: Pick<LogindOptions, 'who' | 'why' | 'systemdInhibit' | 'timeoutMs' | 'logger'>): Promise<Inhibitor> {
  const args = ['--what=shutdown', '--mode=delay', `--who=${o.who ?? 'nodelet'}`, `--why=${o.why ?? 'nodelet needs time to handle node shutdown'}`, '--', 'cat'];
  return new Promise((resolve, reject) => {
    let child: ChildProcess;
    try {
      child = spawn(o.systemdInhibit ?? 'systemd-inhibit', args, { stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (err) {
      reject(new NodeletError('UNAVAILABLE', `cannot run systemd-inhibit: ${errorMessage(err)}`));
      return;
    }
    let stderr = '';
    let held = false;
    const gone = new Promise<void>((r) => child.once('close', () => r()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new NodeletError('UNAVAILABLE', `systemd-inhibit did not take the lock within ${o.timeoutMs ?? 10_000} ms`));
    }, o.timeoutMs ?? 10_000);
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr = (stderr + d).slice(-4096)));
    child.stdin!.on('error', () => {}); // EPIPE when it ended
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(new NodeletError('UNAVAILABLE', `cannot run systemd-inhibit: ${err.message}`));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (!held) reject(new NodeletError('UNAVAILABLE', `systemd-inhibit ended (${signal ?? `exit ${code}`}) without taking the lock: ${stderr.trim() || 'no message'}`));
      else o.logger.debug({ code, signal }, 'shutdown inhibitor released');
    });
    child.stdout!.once('data', () => {
      held = true;
      clearTimeout(timer);
      const release = async () => {
        child.stdin!.end();
        // cat ends at EOF; if it does not within a second, end the holder outright.
        const t = setTimeout(() => child.kill('SIGKILL'), 1000);
        await gone;
        clearTimeout(t);
      };
      let releasing: Promise<void> | undefined;
      resolve({ release: () => (releasing ??= release()), gone });
    });
    child.stdin!.write('held\n');
  });
}
