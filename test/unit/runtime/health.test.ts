import { describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { deriveRuntimeState, INITIAL_RUNTIME_STATE, RuntimeHealth, type RuntimeState } from '../../../src/runtime/health.js';
import type { RuntimeCondition, RuntimeService, RuntimeStatusInfo, VersionInfo } from '../../../src/runtime/types.js';
import { VirtualClock } from '../../helpers/clock.js';

const VERSION: VersionInfo = { version: '0.1.0', runtimeName: 'containerd', runtimeVersion: '1.6.20', runtimeApiVersion: 'v1' };
const cond = (type: string, status: boolean, reason = '', message = ''): RuntimeCondition => ({ type, status, reason, message });
const READY: RuntimeCondition[] = [cond('RuntimeReady', true), cond('NetworkReady', true)];
const NO_CNI: RuntimeCondition[] = [cond('RuntimeReady', true), cond('NetworkReady', false, 'NetworkPluginNotReady', 'Network plugin returns error: cni plugin not initialized')];
const down = () => new NodeletError('UNAVAILABLE', 'Status: rpc error: code = Unavailable desc = connect ENOENT /run/x.sock');

/** A runtime whose answers the test sets; `down` makes every call fail like a missing socket. */
class ScriptedRuntime implements Pick<RuntimeService, 'status' | 'version'> {
  conditions: RuntimeCondition[] = READY;
  down = false;
  calls: string[] = [];
  async status(): Promise<RuntimeStatusInfo> {
    this.calls.push('status');
    if (this.down) throw down();
    return { conditions: this.conditions, info: {} };
  }
  async version(): Promise<VersionInfo> {
    this.calls.push('version');
    if (this.down) throw down();
    return VERSION;
  }
}

describe('deriveRuntimeState', () => {
  const at = 5000;
  it.each<[string, RuntimeCondition[], Partial<RuntimeState>]>([
    ['both ready', READY, { runtimeReady: true, networkReady: true, reason: 'ContainerRuntimeReady', message: 'container runtime is ready' }],
    [
      'network not ready (no CNI config)',
      NO_CNI,
      {
        runtimeReady: true,
        networkReady: false,
        reason: 'NetworkPluginNotReady',
        message: 'container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized',
        networkReason: 'NetworkPluginNotReady',
        networkMessage: 'Network plugin returns error: cni plugin not initialized',
      },
    ],
    [
      'runtime not ready',
      [cond('RuntimeReady', false, 'Starting', 'loading plugins'), cond('NetworkReady', true)],
      { runtimeReady: false, networkReady: true, reason: 'ContainerRuntimeNotReady', message: 'container runtime not ready: RuntimeReady=false reason:Starting message:loading plugins' },
    ],
    [
      'no conditions at all',
      [],
      { runtimeReady: false, networkReady: false, reason: 'ContainerRuntimeNotReady', message: 'container runtime not ready: the runtime reports no RuntimeReady condition' },
    ],
  ])('%s', (_name, conditions, expected) => {
    const s = deriveRuntimeState(INITIAL_RUNTIME_STATE, at, { status: { conditions, info: {} }, version: VERSION });
    expect(s).toMatchObject({ ...expected, runtimeName: 'containerd', runtimeVersion: '1.6.20', runtimeApiVersion: 'v1', lastChecked: at });
    expect(s.lastError).toBeUndefined();
  });

  it('reports a failed check as ContainerRuntimeDown and keeps the last known name and version', () => {
    const before = deriveRuntimeState(INITIAL_RUNTIME_STATE, 1, { status: { conditions: READY, info: {} }, version: VERSION });
    const s = deriveRuntimeState(before, 2, { error: down() });
    expect(s).toEqual({
      runtimeReady: false,
      networkReady: false,
      reason: 'ContainerRuntimeDown',
      message: 'container runtime is down: Status: rpc error: code = Unavailable desc = connect ENOENT /run/x.sock',
      runtimeName: 'containerd',
      runtimeVersion: '1.6.20',
      runtimeApiVersion: 'v1',
      lastChecked: 2,
      lastError: 'Status: rpc error: code = Unavailable desc = connect ENOENT /run/x.sock',
    });
  });
});

describe('RuntimeHealth', () => {
  it('starts unknown, and syncOnce reflects the runtime without throwing when it is down', async () => {
    const rt = new ScriptedRuntime();
    const clock = new VirtualClock();
    const h = new RuntimeHealth({ runtime: rt, clock });
    expect(h.state()).toMatchObject({ runtimeReady: false, reason: 'ContainerRuntimeUnknown' });
    expect(await h.syncOnce()).toMatchObject({ runtimeReady: true, networkReady: true, reason: 'ContainerRuntimeReady', lastChecked: clock.t });
    expect(rt.calls).toEqual(['status', 'version']);
    rt.down = true;
    await expect(h.syncOnce()).resolves.toMatchObject({ runtimeReady: false, reason: 'ContainerRuntimeDown' });
    expect(h.state()).toMatchObject({ runtimeReady: false, reason: 'ContainerRuntimeDown' });
    expect(h.failures()).toBe(1);
  });

  it('calls onChange only when the state changes, and survives a listener that throws', async () => {
    const rt = new ScriptedRuntime();
    const changes: [string, string][] = [];
    const h = new RuntimeHealth({
      runtime: rt,
      clock: new VirtualClock(),
      onChange: (s, prev) => {
        changes.push([prev.reason, s.reason]);
        throw new Error('listener bug');
      },
    });
    await h.syncOnce();
    await h.syncOnce();
    rt.conditions = NO_CNI;
    await h.syncOnce();
    rt.down = true;
    await h.syncOnce();
    await h.syncOnce();
    rt.down = false;
    rt.conditions = READY;
    await h.syncOnce();
    expect(changes).toEqual([
      ['ContainerRuntimeUnknown', 'ContainerRuntimeReady'],
      ['ContainerRuntimeReady', 'NetworkPluginNotReady'],
      ['NetworkPluginNotReady', 'ContainerRuntimeDown'],
      ['ContainerRuntimeDown', 'ContainerRuntimeReady'],
    ]);
  });

  it('polls every interval while up, backs off 1 s doubling to a 5 s cap while down, and recovers by itself', async () => {
    const rt = new ScriptedRuntime();
    const clock = new VirtualClock();
    const states: string[] = [];
    const h = new RuntimeHealth({ runtime: rt, clock, onChange: (s) => states.push(s.reason) });
    h.start();
    await clock.advance(0);
    expect(h.state().runtimeReady).toBe(true);
    rt.down = true;
    for (let i = 0; i < 6; i++) await clock.advanceToNext();
    expect(h.state().reason).toBe('ContainerRuntimeDown');
    rt.down = false;
    await clock.advanceToNext();
    expect(h.state()).toMatchObject({ runtimeReady: true, reason: 'ContainerRuntimeReady', lastChecked: clock.t });
    await clock.advanceToNext();
    await h.stop();
    // up: 5000; down x6: 1000 2000 4000 5000 5000 5000; up again: 5000 5000
    expect(clock.sleeps).toEqual([5000, 1000, 2000, 4000, 5000, 5000, 5000, 5000, 5000]);
    expect(states).toEqual(['ContainerRuntimeReady', 'ContainerRuntimeDown', 'ContainerRuntimeReady']);
  });

  it('stops when the start signal aborts, and stop() is idempotent', async () => {
    const rt = new ScriptedRuntime();
    const clock = new VirtualClock();
    const h = new RuntimeHealth({ runtime: rt, clock });
    const ac = new AbortController();
    h.start(ac.signal);
    await clock.advance(0);
    const callsBefore = rt.calls.length;
    ac.abort();
    await h.stop();
    await h.stop();
    expect(rt.calls.length).toBe(callsBefore);
    expect(clock.sleeps).toEqual([5000]);
  });
});
