/**
 * The node shutdown manager (src/node/shutdown-manager.ts) against a fake logind and a fake
 * pod manager, on the test kit's clock: the logind handshake (InhibitDelayMaxSec raised through
 * the drop-in and a reload, the inhibitor, the signal), the pods stopped group by group with
 * their grace periods, the node not ready meanwhile, the state file, the inhibitor released
 * last, new pods refused, a cancelled shutdown, and no logind at all.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import type { Pod, PodStatus } from 'kubernetes-types/core/v1.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Inhibitor, Logind } from '../../../src/node/shutdown-logind.js';
import { Metrics } from '../../../src/metrics/kubelet.js';
import { NodeShutdownManager, nodeShutdownFor } from '../../../src/node/shutdown-manager.js';
import { shutdownGroups } from '../../../src/node/shutdown-plan.js';
import { nodeConditions, type NodeFacts } from '../../../src/node/status.js';
import type { RuntimeState } from '../../../src/runtime/health.js';
import { VirtualClock } from '../../helpers/clock.js';

type Line = { level: string; msg: string } & Record<string, unknown>;

/** Everything that happened, in order, with the virtual time. */
type Step = [number, string];

class FakeLogind implements Logind {
  delay = 5;
  /** The delay logind shows after a reload (what the drop-in made it). */
  afterReload: number | undefined;
  held = 0;
  onEvent: ((b: boolean) => void) | undefined;
  onLost: ((why: string) => void) | undefined;
  closed = false;
  constructor(
    readonly steps: Step[],
    readonly clock: VirtualClock,
  ) {}
  async inhibitDelayMaxSeconds() {
    return this.delay;
  }
  async overrideInhibitDelay(s: number) {
    this.steps.push([this.clock.now(), `drop-in InhibitDelayMaxSec=${s}`]);
    this.afterReload ??= s;
  }
  async reloadConfig() {
    this.steps.push([this.clock.now(), 'reload logind']);
    this.delay = this.afterReload ?? this.delay;
  }
  async inhibitShutdown(): Promise<Inhibitor> {
    this.held++;
    this.steps.push([this.clock.now(), `inhibit (${this.held} held)`]);
    let released = false;
    let done!: () => void;
    const gone = new Promise<void>((r) => (done = r));
    return {
      gone,
      release: async () => {
        if (released) return;
        released = true;
        this.held--;
        this.steps.push([this.clock.now(), `release (${this.held} held)`]);
        done();
      },
    };
  }
  async watchShutdown(onEvent: (b: boolean) => void, onLost: (why: string) => void) {
    this.onEvent = onEvent;
    this.onLost = onLost;
  }
  close() {
    this.closed = true;
  }
}

/** The pod manager's two methods the shutdown manager uses: a pod handed over as Failed stops after its delay. */
class FakePods {
  handed: Pod[] = [];
  failedAt = new Map<string, { at: number; grace: number | undefined; reason: string | undefined }>();
  constructor(
    readonly steps: Step[],
    readonly clock: VirtualClock,
    readonly stopDelayMs: Record<string, number>,
  ) {}
  setDesired = (pods: Pod[]) => {
    this.handed = pods;
    for (const p of pods) {
      const uid = p.metadata!.uid!;
      if (p.status?.phase === 'Failed' && !this.failedAt.has(uid)) {
        this.failedAt.set(uid, { at: this.clock.now(), grace: p.spec?.terminationGracePeriodSeconds, reason: p.status.reason });
        this.steps.push([this.clock.now(), `stop ${p.metadata!.name} (grace ${p.spec?.terminationGracePeriodSeconds ?? '-'}, ${p.status.reason})`]);
      }
    }
  };
  podStatus = (uid: string): PodStatus | undefined => {
    const f = this.failedAt.get(uid);
    const name = uid.replace(/^uid-/, '');
    const stopped = f !== undefined && this.clock.now() >= f.at + (this.stopDelayMs[name] ?? 0);
    return { phase: 'Running', containerStatuses: [{ name: 'c', image: 'i', imageID: '', ready: !stopped, restartCount: 0, state: stopped ? { terminated: { exitCode: 0 } } : { running: {} } }] };
  };
}

function pod(name: string, spec: Partial<NonNullable<Pod['spec']>> = {}): Pod {
  return { metadata: { name, namespace: 'default', uid: `uid-${name}` }, spec: { containers: [{ name: 'c', image: 'i' }], ...spec } };
}

const RT: RuntimeState = { runtimeReady: true, networkReady: true, reason: 'ContainerRuntimeReady', message: '' } as RuntimeState;

let dir: string;
let lines: Line[];
let clock: VirtualClock;
let steps: Step[];
const logger = () => pino({ level: 'debug', formatters: { level: (label) => ({ level: label }) } }, { write: (s: string) => lines.push(JSON.parse(s) as Line) });

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-shutdown-'));
  lines = [];
  steps = [];
  clock = new VirtualClock(Date.UTC(2026, 10, 24, 7, 0, 0), { autoAdvance: true });
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function build(o: { stopDelayMs?: Record<string, number>; logind?: FakeLogind | (() => Promise<Logind>); cfg?: Parameters<typeof shutdownGroups>[0] } = {}) {
  const pods = new FakePods(steps, clock, o.stopDelayMs ?? {});
  const logind = o.logind ?? new FakeLogind(steps, clock);
  const m = new NodeShutdownManager({
    groups: shutdownGroups(o.cfg ?? { shutdownGracePeriod: '20s', shutdownGracePeriodCriticalPods: '8s' }),
    rootDir: dir,
    connect: typeof logind === 'function' ? logind : async () => logind,
    setDesired: pods.setDesired,
    podStatus: pods.podStatus,
    logger: logger(),
    clock,
  });
  return { m, pods, logind };
}

const T0 = Date.UTC(2026, 10, 24, 7, 0, 0);
const rel = (s: Step[]) => s.map(([t, what]) => [t - T0, what]);
const stateFile = () => JSON.parse(fs.readFileSync(path.join(dir, 'graceful_node_shutdown_state'), 'utf8')) as { startTime: string; endTime: string };

/** Waits until the condition holds: event-loop turns (the state file is real IO), no timer, bounded. */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 100_000 && !cond(); i++) await new Promise((r) => setImmediate(r));
  if (!cond()) throw new Error(`never: ${what}`);
}

describe('NodeShutdownManager', () => {
  it('raises logind\'s delay, takes the inhibitor and watches the signal at start', async () => {
    const { m, logind } = build();
    await m.start();
    const fake = logind as FakeLogind;
    await until(() => fake.onEvent !== undefined, 'watching');
    expect(rel(steps)).toEqual([
      [0, 'drop-in InhibitDelayMaxSec=20'],
      [0, 'reload logind'],
      [0, 'inhibit (1 held)'],
    ]);
    expect(lines.map((l) => l.msg)).toContain('raised logind\'s InhibitDelayMaxSec from 5 s to 20 s (/etc/systemd/logind.conf.d/99-kubelet.conf)');
    await m.stop();
    expect(fake.held).toBe(0);
    expect(fake.closed).toBe(true);
  });

  it('keeps logind\'s delay when it is long enough', async () => {
    const fake = new FakeLogind(steps, clock);
    fake.delay = 30;
    const { m } = build({ logind: fake });
    await m.start();
    await until(() => fake.onEvent !== undefined, 'watching');
    expect(rel(steps)).toEqual([[0, 'inhibit (1 held)']]);
    await m.stop();
  });

  it('on PrepareForShutdown: not ready, regular pods, then critical ones, state file, then the inhibitor released', async () => {
    const { m, pods, logind } = build({ stopDelayMs: { web: 2000, quick: 300, proxy: 100, dns: 500 } });
    const fake = logind as FakeLogind;
    m.setDesired([pod('web'), pod('quick', { terminationGracePeriodSeconds: 5 }), pod('proxy', { priorityClassName: 'system-node-critical' }), pod('dns', { priority: 2_000_000_000 })]);
    await m.start();
    await until(() => fake.onEvent !== undefined, 'watching');
    steps.length = 0;
    expect(m.runtimeState(RT)).toEqual(RT);

    fake.onEvent!(true);
    // The shutdown manager's error beside the runtime's state, untouched: Ready's message is `node is shutting down` (status.test.ts).
    expect(m.runtimeState(RT)).toEqual({ ...RT, nodeShutdownError: 'node is shutting down' });
    await until(() => fake.held === 0, 'the inhibitor released');
    expect(rel(steps)).toEqual([
      [0, 'stop web (grace 12, Terminated)'],
      [0, 'stop quick (grace 5, Terminated)'],
      // The critical group starts once the regular one is over (web took 2 s), polled every 200 ms.
      [2000, 'stop proxy (grace 8, Terminated)'],
      [2000, 'stop dns (grace 8, Terminated)'],
      [2600, 'release (0 held)'],
    ]);
    expect(stateFile()).toEqual({ startTime: '2026-11-24T07:00:00.000Z', endTime: '2026-11-24T07:00:02.600Z' });
    // What the status writer reports for a stopped pod (connected), as the kubelet.
    expect(m.statusOf('uid-web', pods.podStatus('uid-web'))).toMatchObject({
      phase: 'Failed',
      reason: 'Terminated',
      message: 'Pod was terminated in response to imminent node shutdown.',
      conditions: [{ type: 'DisruptionTarget', status: 'True', reason: 'TerminationByKubelet', message: 'Pod was terminated in response to imminent node shutdown.' }],
    });
    expect(m.statusOf('uid-other', undefined)).toBeUndefined();
    const msgs = lines.map((l) => l.msg);
    expect(msgs).toContain('node shutdown detected (logind PrepareForShutdown)');
    expect(msgs.findIndex((x) => x.startsWith('graceful node shutdown done'))).toBeGreaterThan(msgs.findIndex((x) => x.startsWith('shutdown: pods of priority 2000000000 stopped')));
    await m.stop();
  });

  it('goes on to the next group when a group is not stopped within its period', async () => {
    const { m } = build({ stopDelayMs: { stuck: Infinity, proxy: 100 } });
    m.setDesired([pod('stuck'), pod('proxy', { priorityClassName: 'system-node-critical' })]);
    await m.processShutdown();
    expect(rel(steps)).toEqual([
      [0, 'stop stuck (grace 12, Terminated)'],
      [12_000, 'stop proxy (grace 8, Terminated)'],
    ]);
    expect(stateFile()).toEqual({ startTime: '2026-11-24T07:00:00.000Z', endTime: '2026-11-24T07:00:12.200Z' });
    expect(lines.some((l) => l.level === 'warn' && l.msg === 'shutdown: pods of priority 0 not all stopped within 12 s; going on')).toBe(true);
  });

  it('byPodPriority: one group per priority, lowest first, empty groups skipped', async () => {
    const { m } = build({
      cfg: { shutdownGracePeriodByPodPriority: [{ priority: 0, shutdownGracePeriodSeconds: 10 }, { priority: 1000, shutdownGracePeriodSeconds: 5 }, { priority: 100_000, shutdownGracePeriodSeconds: 3 }] },
      stopDelayMs: { low: 400, top: 200 },
    });
    m.setDesired([pod('top', { priority: 200_000 }), pod('low', { priority: 10 })]);
    await m.processShutdown();
    expect(rel(steps)).toEqual([
      [0, 'stop low (grace 10, Terminated)'],
      [400, 'stop top (grace 3, Terminated)'],
    ]);
  });

  it('refuses pods that arrive while the node shuts down, and leaves finished pods alone', async () => {
    const { m, pods } = build({ stopDelayMs: { web: 1000 } });
    const done = { ...pod('done'), status: { phase: 'Succeeded' } } as Pod;
    m.setDesired([pod('web'), done]);
    const p = m.processShutdown();
    await until(() => steps.length > 0, 'web stopped');
    m.setDesired([pod('web'), done, pod('late')]);
    await p;
    expect(rel(steps)).toEqual([
      [0, 'stop web (grace 12, Terminated)'],
      [expect.any(Number), 'stop late (grace -, NodeShutdown)'],
    ]);
    expect(pods.handed.find((x) => x.metadata!.name === 'late')?.status).toEqual({ phase: 'Failed', reason: 'NodeShutdown', message: 'Pod was rejected as the node is shutting down.' });
    expect(pods.handed.find((x) => x.metadata!.name === 'done')).toBe(done);
  });

  it('a cancelled shutdown takes the inhibitor again and the node is ready again', async () => {
    const { m, logind } = build();
    const fake = logind as FakeLogind;
    await m.start();
    await until(() => fake.onEvent !== undefined, 'watching');
    fake.onEvent!(true);
    await until(() => fake.held === 0, 'released');
    fake.onEvent!(false);
    await until(() => fake.held === 1, 'taken again');
    expect(m.runtimeState(RT)).toEqual(RT);
    await m.stop();
  });

  it('reconnects when the bus connection is lost', async () => {
    const made: FakeLogind[] = [];
    const { m } = build({
      logind: async () => {
        const f = new FakeLogind(steps, clock);
        f.delay = 30;
        made.push(f);
        return f;
      },
    });
    await m.start();
    await until(() => made[0]?.onLost !== undefined, 'first watch');
    made[0]!.onLost!('the D-Bus connection was closed');
    await until(() => made[1]?.onEvent !== undefined, 'second watch');
    expect(made[0]!.closed).toBe(true);
    expect(lines.some((l) => l.msg === 'lost the connection to systemd-logind (the D-Bus connection was closed); reconnecting')).toBe(true);
    await m.stop();
  });

  it('without logind: one warning, startup goes on, pods pass through unchanged', async () => {
    let attempts = 0;
    const { m, pods } = build({
      logind: async () => {
        attempts++;
        throw new Error('no D-Bus system bus (/var/run/dbus/system_bus_socket does not exist)');
      },
    });
    await m.start();
    await until(() => attempts >= 3, 'retries');
    const warnings = lines.filter((l) => l.level === 'warn');
    expect(warnings.map((l) => l.msg)).toEqual([
      'graceful node shutdown is unavailable: no D-Bus system bus (/var/run/dbus/system_bus_socket does not exist); nodelet runs without it (a node shutdown will not stop pods first) and tries again in the background',
    ]);
    const list = [pod('web')];
    m.setDesired(list);
    expect(pods.handed).toBe(list);
    await m.stop();
  });

  it('logind that cannot be raised to the grace period: no inhibitor, a warning, retried', async () => {
    const fake = new FakeLogind(steps, clock);
    fake.afterReload = 10; // something else (a later drop-in) keeps it at 10 s
    let attempts = 0;
    const { m } = build({
      logind: async () => {
        attempts++;
        return fake;
      },
    });
    await m.start();
    await until(() => attempts >= 2, 'retried');
    expect(fake.held).toBe(0);
    expect(lines.find((l) => l.level === 'warn')?.msg).toBe(
      'graceful node shutdown is unavailable: unable to raise logind\'s InhibitDelayMaxSec to 20 s (the shutdown grace period): it is 10 s; nodelet runs without it (a node shutdown will not stop pods first) and tries again in the background',
    );
    await m.stop();
  });

  it('reads the last shutdown back at start', async () => {
    fs.writeFileSync(path.join(dir, 'graceful_node_shutdown_state'), '{"startTime":"2026-11-24T06:00:00Z","endTime":"2026-11-24T06:00:04.5Z"}');
    const { m } = build();
    await m.start();
    expect(lines.map((l) => l.msg)).toContain('last graceful node shutdown: started 2026-11-24T06:00:00.000Z, ended 2026-11-24T06:00:04.500Z (4.5 s)');
    await m.stop();
  });

  it('the Node is not ready while it shuts down, with the kubelet\'s message; listeners told first, before any pod stops', async () => {
    const { m, pods } = build({ stopDelayMs: { web: 500 } });
    m.setDesired([pod('web')]);
    const told: [number, number, string | undefined][] = [];
    const ready = (n: NodeShutdownManager) => nodeConditions({ runtime: n.runtimeState(RT), pressure: {} } as NodeFacts, undefined, 't').at(-1)!;
    m.onShutdownStart(() => told.push([clock.now() - T0, pods.failedAt.size, ready(m).message]));
    expect(ready(m)).toMatchObject({ status: 'True', reason: 'KubeletReady' });
    const done = m.processShutdown();
    // At once (the reporter's reportNow: the Ready=False goes out when the shutdown starts), already not ready, no pod stopped yet.
    expect(told).toEqual([[0, 0, 'node is shutting down']]);
    expect(ready(m)).toMatchObject({ status: 'False', reason: 'KubeletNotReady', message: 'node is shutting down' });
    await done;
    expect(told).toHaveLength(1);
    expect(pods.failedAt.has('uid-web')).toBe(true);
  });

  it('kubelet_graceful_shutdown_{start,end}_time_seconds: the last shutdown read back at start, then the start (end 0) and the end of this one', async () => {
    fs.writeFileSync(path.join(dir, 'graceful_node_shutdown_state'), '{"startTime":"2026-11-24T06:00:00Z","endTime":"2026-11-24T06:00:04.5Z"}');
    const metrics = new Metrics({ processMetrics: false });
    const pods = new FakePods(steps, clock, { web: 1500 });
    const fake = new FakeLogind(steps, clock);
    const gauges = () => metrics.render().split('\n').filter((l) => l.startsWith('kubelet_graceful_shutdown_'));
    // What a scrape shows while the shutdown is under way: taken when the pod is handed over to be stopped.
    let underWay: string[] | undefined;
    const setDesired = (list: Pod[]) => {
      if (!underWay && list.some((p) => p.status?.phase === 'Failed')) underWay = gauges();
      pods.setDesired(list);
    };
    const m = nodeShutdownFor({ shutdownGracePeriod: '20s', shutdownGracePeriodCriticalPods: '8s' }, { rootDir: dir, connect: async () => fake, setDesired, podStatus: pods.podStatus, logger: logger(), clock, metrics });
    expect(gauges()).toEqual(['kubelet_graceful_shutdown_start_time_seconds 0', 'kubelet_graceful_shutdown_end_time_seconds 0']);
    await m.start();
    expect(gauges()).toEqual([`kubelet_graceful_shutdown_start_time_seconds ${Date.UTC(2026, 10, 24, 6) / 1000}`, `kubelet_graceful_shutdown_end_time_seconds ${Date.UTC(2026, 10, 24, 6) / 1000 + 4.5}`]);
    m.setDesired([pod('web')]);
    await m.processShutdown();
    // Under way: this shutdown's start, no end yet.
    expect(underWay).toEqual([`kubelet_graceful_shutdown_start_time_seconds ${T0 / 1000}`, 'kubelet_graceful_shutdown_end_time_seconds 0']);
    expect(stateFile()).toEqual({ startTime: '2026-11-24T07:00:00.000Z', endTime: '2026-11-24T07:00:01.600Z' });
    expect(gauges()).toEqual([`kubelet_graceful_shutdown_start_time_seconds ${T0 / 1000}`, `kubelet_graceful_shutdown_end_time_seconds ${T0 / 1000 + 1.6}`]);
    await m.stop();
  });

  it('the graceful shutdown gauges are registered with gates GracefulNodeShutdown and GracefulNodeShutdownBasedOnPodPriority, as the kubelet does', () => {
    const registered = (featureGates: Record<string, boolean>, cfg: { shutdownGracePeriod?: string } = {}) => {
      const metrics = new Metrics({ processMetrics: false });
      nodeShutdownFor({ featureGates, ...cfg }, { rootDir: dir, setDesired: () => {}, podStatus: () => undefined, logger: logger(), clock, metrics });
      return metrics.render().includes('kubelet_graceful_shutdown_start_time_seconds');
    };
    // The gates' defaults (both on): registered, even with no period (0 until a shutdown).
    expect(registered({})).toBe(true);
    expect(registered({}, { shutdownGracePeriod: '30s' })).toBe(true);
    expect(registered({ GracefulNodeShutdownBasedOnPodPriority: false }, { shutdownGracePeriod: '30s' })).toBe(false);
    expect(registered({ GracefulNodeShutdown: false }, { shutdownGracePeriod: '30s' })).toBe(false);
  });

  it('off: no logind, a line saying so, pods pass through', async () => {
    let connected = false;
    const pods = new FakePods(steps, clock, {});
    const m = nodeShutdownFor(
      { featureGates: {} },
      {
        rootDir: dir,
        connect: async () => {
          connected = true;
          throw new Error('unexpected');
        },
        setDesired: pods.setDesired,
        podStatus: pods.podStatus,
        logger: logger(),
        clock,
      },
    );
    expect(m.enabled).toBe(false);
    await m.start();
    expect(connected).toBe(false);
    expect(lines.map((l) => l.msg)).toContain('graceful node shutdown is off (shutdownGracePeriod and shutdownGracePeriodByPodPriority unset): a node shutdown stops no pod first');
    await m.stop();
  });

  it('off when gate GracefulNodeShutdown is off', () => {
    const m = nodeShutdownFor({ featureGates: { GracefulNodeShutdown: false }, shutdownGracePeriod: '30s' }, { rootDir: dir, setDesired: () => {}, podStatus: () => undefined, logger: logger(), clock });
    expect(m.enabled).toBe(false);
  });
});
