/**
 * Structured logging: one JSON object a line on stdout (pino), with `level` as a name,
 * `time` as ISO 8601, `msg` and `component`.
 *
 * When stdout is the journal (systemd sets JOURNAL_STREAM to "<dev>:<inode>" of the
 * stream it connected), every line is prefixed with its syslog priority `<N>` so that
 * journald stores it with that PRIORITY and `journalctl -p warning` works. pino writes
 * each record with a single write(2) call, so a long record is never interleaved with
 * another one.
 *
 * journald splits a line longer than its LineMax (48 KiB by default) into several
 * entries, each an invalid JSON fragment. So no record leaves nodelet longer than
 * MAX_LINE bytes: an over-long record is re-serialized with its long strings cut and a
 * `truncated` field giving the original size.
 */
import fs from 'node:fs';
import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger } from 'pino';

/** Longest record written, in bytes (well under journald's default LineMax of 48 KiB). */
export const MAX_LINE = 16 * 1024;

/** Returns `line` (a JSON record + "\n") unchanged when short enough, else a valid shortened record. */
export function capLine(line: string, max = MAX_LINE): string {
  if (Buffer.byteLength(line) <= max) return line;
  let rec: Record<string, unknown>;
  try {
    rec = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return JSON.stringify({ level: 'error', time: new Date().toISOString(), msg: 'unserializable over-long log record', truncated: Buffer.byteLength(line) }) + '\n';
  }
  const cut = (v: unknown, depth: number): unknown => {
    if (typeof v === 'string') return v.length > 512 ? `${v.slice(0, 512)}…` : v;
    if (depth > 4 || v === null || typeof v !== 'object') return v;
    if (Array.isArray(v)) return v.slice(0, 20).map((x) => cut(x, depth + 1));
    return Object.fromEntries(Object.entries(v).slice(0, 50).map(([k, x]) => [k.length > 256 ? `${k.slice(0, 256)}…` : k, cut(x, depth + 1)]));
  };
  const out = cut(rec, 0) as Record<string, unknown>;
  out.truncated = Buffer.byteLength(line);
  let s = JSON.stringify(out);
  if (Buffer.byteLength(s) > max) {
    s = JSON.stringify({ level: rec.level, time: rec.time, component: rec.component, msg: String(rec.msg ?? '').slice(0, 1024), truncated: Buffer.byteLength(line) });
  }
  return s + '\n';
}

/**
 * A child logger of a child repeats `component` (pino appends bindings); keep the
 * innermost one so each record names exactly one component.
 */
function dedupeComponent(line: string): string {
  const first = line.indexOf('"component":');
  if (first < 0 || line.indexOf('"component":', first + 1) < 0) return line;
  try {
    return JSON.stringify(JSON.parse(line)) + '\n';
  } catch {
    return line;
  }
}

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
      hooks: {
        streamWrite(raw: string): string {
          const line = capLine(dedupeComponent(raw));
          if (!journal) return line;
          // The level label is the first field pino writes after `{"level":"`.
          const m = /^\{"level":"([a-z]+)"/.exec(line);
          const prio = (m && PRIORITY[m[1]!]) ?? 6;
          return `<${prio}>${line}`;
        },
      },
    },
    dest,
  );
}

/** A logger that drops everything, for tests and library callers that pass none. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
