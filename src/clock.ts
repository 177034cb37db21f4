/**
 * Time as a dependency. Loops and decisions take a Clock so that tests drive time
 * instead of sleeping on real timers.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The longest delay setTimeout honours. */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

export const realClock: Clock = {
  now: () => Date.now(),
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const onAbort = () => {
        clearTimeout(t);
        reject(signal!.reason);
      };
      // setTimeout takes at most 2^31-1 ms (24.8 days): a longer delay would fire at once
      // (a year-long certificate's renewal point is months away), so it waits in steps.
      const end = Date.now() + ms;
      const arm = (left: number): NodeJS.Timeout =>
        setTimeout(() => {
          const rest = end - Date.now();
          if (rest > 0) {
            t = arm(rest);
            return;
          }
          signal?.removeEventListener('abort', onAbort);
          resolve();
        }, Math.min(left, MAX_TIMEOUT_MS));
      let t = arm(ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  },
};

/** Exponential backoff: base doubling up to max, with +/- jitter fraction. */
export function backoffDelay(attempt: number, baseMs: number, maxMs: number, jitter = 0, rand: () => number = Math.random): number {
  const d = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt));
  return jitter > 0 ? Math.round(d * (1 + jitter * (2 * rand() - 1))) : d;
}
