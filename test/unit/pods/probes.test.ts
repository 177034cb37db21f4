import type { Container, Pod, Probe } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log.js';
import { ProbeManager, runProbe, type ExecFn } from '../../../src/pods/probes/probes.js';
import { ManualClock, VirtualClock } from '../../helpers/clock.js';
import { execAnswer as exec, probeTarget as target } from '../../fakes/probe-exec.js';

describe('runProbe', () => {
  it('exec: exit 0 succeeds; another exit code fails with the output, or the code when there is none', async () => {
    expect(await runProbe({ exec: { command: ['true'] } }, target(), exec(0))).toEqual({ ok: true, output: '' });
    expect(await runProbe({ exec: { command: ['cat', '/tmp/healthy'] } }, target(), exec(1, 'cat: /tmp/healthy: No such file or directory\n'))).toEqual({
      ok: false,
      output: 'cat: /tmp/healthy: No such file or directory',
    });
    expect(await runProbe({ exec: { command: ['false'] } }, target(), exec(1))).toEqual({ ok: false, output: 'command ["false"] exited with 1' });
    const failing: ExecFn = async () => {
      throw new Error('container is not running');
    };
    expect(await runProbe({ exec: { command: ['true'] } }, target(), failing)).toEqual({ ok: false, output: 'container is not running' });
  });
});

function setup(spec: Partial<Container>) {
  const clock = new ManualClock(1_000_000);
  let exitCode = 0;
  const calls: string[] = [];
  const changes: string[] = [];
  const events: string[] = [];
  const pm = new ProbeManager({
    exec: async (_id, cmd) => {
      calls.push(cmd.join(' '));
      return { exitCode: typeof exitCode === 'number' ? exitCode : 0, stdout: Buffer.from(''), stderr: Buffer.from('') };
    },
    clock,
    logger: silentLogger(),
    events: { emit: (_ref, type, reason, message) => events.push(`${type} ${reason}: ${message}`) },
    onChange: (uid) => changes.push(uid),
  });
  const pod: Pod = { metadata: { name: 'p', namespace: 'default', uid: 'u1' }, spec: { containers: [{ name: 'app', image: 'busybox', ...spec }] } };
  pm.update(pod, [{ id: 'c1', name: 'app', startedAt: clock.t }], '127.0.0.1');
  const turn = async (ms: number) => {
    clock.t += ms;
    await pm.tick();
  };
  return { clock, pm, calls, changes, events, turn, setExit: (c: number) => (exitCode = c) };
}

const probe = (cmd: string, o: Partial<Probe> = {}): Probe => ({ exec: { command: [cmd] }, periodSeconds: 1, ...o });

describe('ProbeManager', () => {
  it('readiness starts false, waits initialDelaySeconds, turns true after successThreshold successes and false after failureThreshold failures', async () => {
    const { pm, calls, changes, turn, setExit, events } = setup({ readinessProbe: probe('ready', { initialDelaySeconds: 5, successThreshold: 2, failureThreshold: 2 }) });
    expect(pm.ready('c1')).toBe(false);
    await turn(4000);
    expect(calls).toEqual([]);
    await turn(1000);
    expect(pm.ready('c1')).toBe(false); // 1 of 2 successes
    await turn(1000);
    expect(pm.ready('c1')).toBe(true);
    expect(changes).toEqual(['u1']);
    setExit(1);
    await turn(1000);
    expect(pm.ready('c1')).toBe(true); // 1 of 2 failures
    await turn(1000);
    expect(pm.ready('c1')).toBe(false);
    expect(changes).toEqual(['u1', 'u1']);
    expect(pm.mustRestart('c1')).toBeUndefined(); // readiness never restarts
    expect(events).toEqual(['Warning Unhealthy: Readiness probe failed: command ["ready"] exited with 1', 'Warning Unhealthy: Readiness probe failed: command ["ready"] exited with 1']);
  });

  it('liveness starts true and asks for a restart after failureThreshold failures in a row', async () => {
    const { pm, turn, setExit, changes } = setup({ livenessProbe: probe('alive', { failureThreshold: 3 }) });
    expect(pm.ready('c1')).toBe(true);
    setExit(1);
    await turn(0);
    await turn(1000);
    setExit(0);
    await turn(1000); // a success resets the count
    setExit(1);
    await turn(1000);
    await turn(1000);
    expect(pm.mustRestart('c1')).toBeUndefined();
    await turn(1000);
    expect(pm.mustRestart('c1')).toBe('Container app failed liveness probe, will be restarted');
    expect(changes).toEqual(['u1']);
  });

  it('a startup probe holds liveness and readiness back until it succeeds, and gives up after failureThreshold', async () => {
    const { pm, calls, turn, setExit } = setup({
      startupProbe: probe('started', { failureThreshold: 2 }),
      livenessProbe: probe('alive'),
      readinessProbe: probe('ready'),
    });
    setExit(1);
    await turn(0);
    expect(calls).toEqual(['started']);
    expect([pm.started('c1'), pm.ready('c1'), pm.mustRestart('c1')]).toEqual([false, false, undefined]);
    setExit(0);
    await turn(1000);
    expect(pm.started('c1')).toBe(true);
    await turn(1000);
    expect(calls.slice(2).sort()).toEqual(['alive', 'ready']);
    expect(pm.ready('c1')).toBe(true);

    const other = setup({ startupProbe: probe('started', { failureThreshold: 2 }), livenessProbe: probe('alive') });
    other.setExit(1);
    await other.turn(0);
    await other.turn(1000);
    expect(other.pm.mustRestart('c1')).toBe('Container app failed startup probe, will be restarted');
    expect(other.calls).toEqual(['started', 'started']);
  });

  it('a new container ID starts fresh; a container gone stops its probes', async () => {
    const { pm, calls, turn, clock } = setup({ readinessProbe: probe('ready') });
    await turn(0);
    expect(pm.ready('c1')).toBe(true);
    const pod: Pod = { metadata: { name: 'p', namespace: 'default', uid: 'u1' }, spec: { containers: [{ name: 'app', image: 'busybox', readinessProbe: probe('ready') }] } };
    pm.update(pod, [{ id: 'c2', name: 'app', startedAt: clock.t }], '127.0.0.1');
    expect(pm.ready('c2')).toBe(false);
    expect(pm.ready('c1')).toBe(true); // no worker any more: nothing holds it back
    pm.remove('u1');
    const before = calls.length;
    await turn(5000);
    expect(calls.length).toBe(before);
  });
});

describe('ProbeManager loop schedule', () => {
  /** A manager on a VirtualClock whose loop runs; exec answers at once. */
  function running() {
    const clock = new VirtualClock(1_000_000);
    const calls: string[] = [];
    const pm = new ProbeManager({
      exec: async (_id, cmd) => (calls.push(cmd.join(' ')), { exitCode: 0, stdout: Buffer.from(''), stderr: Buffer.from('') }),
      clock,
      logger: silentLogger(),
      onChange: () => {},
    });
    const pod = (spec: Partial<Container>): Pod => ({ metadata: { name: 'p', namespace: 'default', uid: 'u1' }, spec: { containers: [{ name: 'app', image: 'busybox', ...spec }] } });
    return { clock, calls, pm, pod };
  }

  it('with no probe the loop sleeps until update() gives it one (no turn every 250 ms)', async () => {
    const { clock, calls, pm, pod } = running();
    pm.start();
    await clock.advance(60_000);
    expect(clock.sleeps).toEqual([2 ** 30]);
    pm.update(pod({ livenessProbe: probe('alive', { initialDelaySeconds: 3, periodSeconds: 10 }) }), [{ id: 'c1', name: 'app', startedAt: clock.t }], '127.0.0.1');
    await clock.advance(2_999);
    expect(calls).toEqual([]);
    await clock.advance(1);
    expect(calls).toEqual(['alive']);
    await clock.advance(30_000);
    expect(calls).toEqual(['alive', 'alive', 'alive', 'alive']);
    // Two sleeps per probe run (while it runs, until the finished probe wakes the loop; then
    // until the next one is due), plus the first: 90 s of polling every 250 ms would be 360.
    expect(clock.sleeps.length).toBeLessThanOrEqual(2 + 4 * 2);
    await pm.stop();
  });

  it('a liveness probe waiting for the startup probe runs right after the startup probe succeeds, without polling meanwhile', async () => {
    const { clock, calls, pm, pod } = running();
    pm.start();
    pm.update(pod({ startupProbe: probe('started', { initialDelaySeconds: 5, periodSeconds: 10 }), livenessProbe: probe('alive', { periodSeconds: 10 }) }), [{ id: 'c1', name: 'app', startedAt: clock.t }], '127.0.0.1');
    await clock.advance(4_999);
    expect(calls).toEqual([]);
    // Only the startup probe's time was slept for: the liveness probe, due at once, waits for it.
    expect(clock.sleeps.filter((ms) => ms < 2 ** 30).every((ms) => ms >= 4_000)).toBe(true);
    await clock.advance(1);
    expect(calls).toEqual(['started', 'alive']);
    await clock.advance(10_000);
    expect(calls).toEqual(['started', 'alive', 'alive']); // the startup probe is done for this container
    await pm.stop();
  });
});
