/**
 * Container lifecycle hooks, as the kubelet runs them: `postStart` right after the
 * container starts (the pod worker waits for it; a failure kills the container, which then
 * restarts per restartPolicy), `preStop` before the runtime is asked to stop it (within
 * the grace period, which the hook's time is taken from). Handlers: `exec` (CRI ExecSync),
 * `httpGet`, `tcpSocket` (as probes run them) and `sleep`.
 */
import type { LifecycleHandler } from 'kubernetes-types/core/v1.js';
import type { Clock } from '../../clock.js';
import { runProbe, type ExecFn, type ProbeOutcome, type ProbeTarget } from '../probes/probes.js';

/** Runs one lifecycle handler, for at most `timeoutSec`. Never throws. */
export async function runLifecycleHandler(h: LifecycleHandler, t: ProbeTarget, exec: ExecFn, timeoutSec: number, clock: Clock): Promise<ProbeOutcome> {
  const seconds = Math.max(1, Math.floor(timeoutSec));
  if (h.sleep) {
    const ms = Math.max(0, Math.min(h.sleep.seconds, seconds)) * 1000;
    await clock.sleep(ms).catch(() => undefined);
    return { ok: true, output: '' };
  }
  if (!h.exec && !h.httpGet && !h.tcpSocket) return { ok: false, output: 'the hook has no handler (exec, httpGet, tcpSocket or sleep)' };
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<ProbeOutcome>((resolve) => (timer = setTimeout(() => resolve({ ok: false, output: `the hook did not finish within ${seconds}s` }), seconds * 1000 + 500)));
  try {
    // A probe with the hook's handler: the same exec/httpGet/tcpSocket code and messages.
    return await Promise.race([runProbe({ ...(h.exec ? { exec: h.exec } : {}), ...(h.httpGet ? { httpGet: h.httpGet } : {}), ...(h.tcpSocket ? { tcpSocket: h.tcpSocket } : {}), timeoutSeconds: seconds }, t, exec), late]);
  } finally {
    clearTimeout(timer);
  }
}
