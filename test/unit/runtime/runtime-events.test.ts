import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log.js';
import { GrpcError, GrpcStatus } from '../../../src/runtime/grpc-unary.js';
import type { ContainerEvent } from '../../../src/runtime/containerd-event.js';
import { CONTAINERD_EVENTS_PATH, CRI_EVENTS_PATH, RuntimeEvents, type EventStreamer } from '../../../src/runtime/runtime-events.js';
import { settle, VirtualClock } from '../../helpers/clock.js';
import { taskExit, taskOom } from '../../helpers/containerd-events.js';

/** A runtime socket whose streams the test drives: each call waits until the test ends it. */
class FakeRuntime {
  readonly calls: { path: string; body: Buffer; send: (m: string | Buffer) => void; end: (err?: Error) => void; aborted: () => boolean }[] = [];
  /** Paths answered UNIMPLEMENTED at once. */
  unimplemented = new Set<string>();

  readonly stream: EventStreamer = (path, body, onMessage, signal) => {
    if (this.unimplemented.has(path)) return Promise.reject(new GrpcError(GrpcStatus.UNIMPLEMENTED, 'unknown method'));
    return new Promise<void>((resolve, reject) => {
      const end = (err?: Error) => (err ? reject(err) : resolve());
      signal.addEventListener('abort', () => reject(new GrpcError(GrpcStatus.CANCELLED, 'Cancelled on client')), { once: true });
      this.calls.push({ path, body: Buffer.from(body), send: (m) => onMessage(typeof m === 'string' ? Buffer.from(m) : m), end, aborted: () => signal.aborted });
    });
  };
}

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const s of stops.splice(0)) await s();
});

function watch(rt: FakeRuntime, clock: VirtualClock, onContainerEvent?: (e: ContainerEvent, relists: number) => void) {
  const events: number[] = [];
  const ev = new RuntimeEvents({
    stream: rt.stream,
    onEvent: () => events.push(clock.now()),
    ...(onContainerEvent ? { onContainerEvent: (e: ContainerEvent) => onContainerEvent(e, events.length) } : {}),
    clock,
    logger: silentLogger(),
    settleMs: 1000,
    coalesceMs: 100,
    retryUnsupportedMs: 300_000,
  });
  const ab = new AbortController();
  ev.start(ab.signal);
  stops.push(async () => {
    ab.abort();
    await ev.stop();
  });
  return { ev, events };
}

describe('RuntimeEvents', () => {
  it('containerd 1.6 (no CRI GetContainerEvents): subscribes to the CRI namespace of its event service, live once the stream stays open, events coalesced', async () => {
    const clock = new VirtualClock();
    const rt = new FakeRuntime();
    rt.unimplemented.add(CRI_EVENTS_PATH);
    const t0 = clock.now();
    const { ev, events } = watch(rt, clock);
    await settle();
    expect(rt.calls.map((c) => c.path)).toEqual([CONTAINERD_EVENTS_PATH]);
    expect(rt.calls[0]!.body.toString('latin1')).toBe('\x0a\x11namespace==k8s.io');
    expect(ev.live).toBe(false);
    await clock.advance(999);
    expect(ev.live).toBe(false);
    await clock.advance(1);
    // Live, and one relist for what changed before the subscription.
    expect([ev.live, ev.source, events]).toEqual([true, 'containerd', [t0 + 1000]]);
    // A burst of five events: one relist 100 ms after the first.
    for (let i = 0; i < 5; i++) rt.calls[0]!.send(`e${i}`);
    await clock.advance(100);
    expect(events).toEqual([t0 + 1000, t0 + 1100]);
    // The stream fails (containerd restarted): not live, one relist at once, a new subscription after a backoff.
    rt.calls[0]!.end(new GrpcError(GrpcStatus.UNAVAILABLE, 'Connection dropped'));
    await settle();
    expect([ev.live, events.length]).toEqual([false, 3]);
    await clock.advance(1000);
    expect(rt.calls.length).toBe(2);
    await clock.advance(1000);
    expect([ev.live, events.length]).toEqual([true, 4]);
  });

  it('a runtime with CRI events is live at its first event, not on time alone; a runtime with neither is never live and is asked again after retryUnsupportedMs', async () => {
    const clock = new VirtualClock();
    const rt = new FakeRuntime();
    const { ev, events } = watch(rt, clock);
    await settle();
    expect(rt.calls.map((c) => c.path)).toEqual([CRI_EVENTS_PATH]);
    // A CRI runtime may accept the call and never send (CRI-O without pod events): not live on time alone.
    await clock.advance(5000);
    expect([ev.live, events.length]).toEqual([false, 0]);
    rt.calls[0]!.send('started');
    await settle();
    expect([ev.live, ev.source, events.length]).toEqual([true, 'cri', 1]);

    const clock2 = new VirtualClock();
    const none = new FakeRuntime();
    none.unimplemented.add(CRI_EVENTS_PATH).add(CONTAINERD_EVENTS_PATH);
    const asked: string[] = [];
    const counting: EventStreamer = (path, ...rest) => (asked.push(path), none.stream(path, ...rest));
    const ev2 = new RuntimeEvents({ stream: counting, onEvent: () => {}, clock: clock2, logger: silentLogger(), retryUnsupportedMs: 300_000 });
    const ab = new AbortController();
    ev2.start(ab.signal);
    stops.push(async () => (ab.abort(), await ev2.stop()));
    await settle();
    await clock2.advance(299_999);
    expect([ev2.live, asked.length]).toEqual([false, 2]);
    await clock2.advance(1);
    expect(asked.length).toBe(4);
  });

  it("containerd's exit and OOM events are handed on with what they say, before the relist they ask for; an exec's exit and a CRI runtime's events are not", async () => {
    const clock = new VirtualClock();
    const told: string[] = [];
    const tell = (e: ContainerEvent, relists: number) => told.push(`${e.kind} ${e.containerId}${e.kind === 'exit' ? ` ${e.exitCode}` : ''} after ${relists} relists`);
    const containerd = new FakeRuntime();
    containerd.unimplemented.add(CRI_EVENTS_PATH);
    const { events } = watch(containerd, clock, tell);
    await settle();
    await clock.advance(1100);
    const t = clock.now();
    containerd.calls[0]!.send(taskOom('c1'));
    containerd.calls[0]!.send(taskExit('c1', 137, 5000));
    containerd.calls[0]!.send(taskExit('c1', 1, 5000, 'exec-1'));
    await clock.advance(100);
    // The OOM event (quiet before) is handed on, then relisted at once; the exit, within the
    // window, is handed on at once and relisted at the window's end; the exec's exit is not handed on.
    expect(told).toEqual(['oom c1 after 1 relists', 'exit c1 137 after 2 relists']);
    expect(events.slice(1)).toEqual([t, t + 100]);

    told.length = 0;
    const cri = new FakeRuntime();
    const second = watch(cri, clock, tell);
    await settle();
    cri.calls[0]!.send(taskExit('c2', 137, 5000));
    await settle();
    expect([told, second.events]).toEqual([[], [clock.now()]]);
  });

  it('a container event listener that throws costs neither the relist nor the subscription', async () => {
    const clock = new VirtualClock();
    const rt = new FakeRuntime();
    rt.unimplemented.add(CRI_EVENTS_PATH);
    const { ev, events } = watch(rt, clock, () => {
      throw new Error('listener bug');
    });
    await settle();
    await clock.advance(1100);
    rt.calls[0]!.send(taskExit('c1', 1, 5000));
    await settle();
    expect([events.slice(1), ev.live, rt.calls.length]).toEqual([[clock.now()], true, 1]);
  });

  it('stop ends the subscription (the stream is cancelled) and asks for no relist', async () => {
    const clock = new VirtualClock();
    const rt = new FakeRuntime();
    rt.unimplemented.add(CRI_EVENTS_PATH);
    const { ev, events } = watch(rt, clock);
    await settle();
    await clock.advance(1000);
    expect(events.length).toBe(1);
    await stops.pop()!();
    expect([ev.live, rt.calls[0]!.aborted(), events.length]).toEqual([false, true, 1]);
  });
});
