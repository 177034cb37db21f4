/**
 * Structured logging: one JSON object a line on stdout (pino), with `level` as a name,
 * `time` as ISO 8601, `msg` and `component`.
 *
 * When stdout is the journal (systemd sets JOURNAL_STREAM to "<dev>:<inode>" of the
 * stream it connected), every line is prefixed with its syslog priority `<N>` so that
 * journald stores it with that PRIORITY and `journalctl -p warning` works. pino writes
 * each record with a single write(2) call, so a long record is never interleaved with
 * another one; journald itself splits lines over LineMax, which is documented.
 */
import fs from 'node:fs';
import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger } from 'pino';

const PRIORITY: Record<string, number> = { fatal: 2, error: 3, warn: 4, info: 6, debug: 7, trace: 7 };

/** True when fd 1 is the stream systemd told us about in JOURNAL_STREAM. */
export function stdoutIsJournal(env: NodeJS.ProcessEnv = process.env, fd = 1): boolean {
  const js = env.JOURNAL_STREAM;
  if (!js) return false;
  const [dev, ino] = js.split(':');
  if (dev === undefined || ino === undefined) return false;
  try {
    const st = fs.fstatSync(fd, { bigint: true });
    return st.dev.toString() === dev && st.ino.toString() === ino;
  } catch {
    return false;
  }
}

/** Maps the kubelet's `-v` verbosity to a pino level: 0-1 info, 2-3 debug, >=4 trace. */
export function levelFromVerbosity(v: number): LevelWithSilent {
  if (v >= 4) return 'trace';
  if (v >= 2) return 'debug';
  return 'info';
}

export interface LoggerOptions {
  level?: LevelWithSilent;
  /** Prefix lines with `<N>`; defaults to stdoutIsJournal(). */
  journal?: boolean;
  /** Destination; defaults to stdout (fd 1), written synchronously so nothing is lost on exit. */
  destination?: pino.DestinationStream;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const journal = opts.journal ?? stdoutIsJournal();
  const dest = opts.destination ?? pino.destination({ dest: 1, sync: true });
  return pino(
    {
      level: opts.level ?? 'info',
      base: { component: 'nodelet' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      hooks: journal
        ? {
            streamWrite(line: string): string {
              // The level label is the first field pino writes after `{"level":"`.
              const m = /^\{"level":"([a-z]+)"/.exec(line);
              const prio = (m && PRIORITY[m[1]!]) ?? 6;
              return `<${prio}>${line}`;
            },
          }
        : {},
    },
    dest,
  );
}

/** A logger that drops everything, for tests and library callers that pass none. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
