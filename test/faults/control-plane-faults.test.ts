/**
 * (c) Control-plane faults: the built nodelet connected to the test control plane through
 * a TCP proxy (test CRI server as the runtime), pods bound to it by an admin who talks to
 * the control plane directly. Faults, each while a pod is created, deleted or crashes:
 * - drop: every connection reset mid-watch;
 * - watch-410: watches closed (and held off with 500s while the pods change), then the history
 *   compacted, so the resumed watch gets 410 Gone;
 * - continue-410: lists paged one pod at a time (a server may page sooner than asked) and
 *   the first continue answered 410 Expired, during a relist forced as above;
 * - conflict: 409 Conflict on every second write nodelet sends (lease, node and pod status,
 *   events, deletions);
 * - throttle: 429 with `Retry-After: 1` on every request nodelet sends;
 * - error: 500 on every request nodelet sends;
 * - silence: connections accepted and never answered (the proxy's black hole), 30 s in the
 *   full profile.
 * (409/429/500/410-on-continue come from test/control-plane/faults.ts rules on nodelet's
 * requests only.) After each fault, and at the end: the pods the API binds to n1 are
 * exactly the pods that run (one ready sandbox, one running container each), each API
 * status names the running container with its restart count (nothing lost, nothing
 * duplicated), deleted pods are gone from both, and the Lease is renewed again. Throughout:
 * the same process, /healthz 200, RSS bounded.
 * Events, at the end: nodelet runs with `logging.verbosity: 3` and so logs every event it
 * takes (`Event occurred`, as the kubelet at -v=3) and every event it drops (after its 12
 * attempts, or queue full, or stopping). Grouped as the recorder aggregates them (involved
 * object UID, field path, type, reason, message), the Event objects the control plane holds
 * from source kubelet/n1 must add up, by `count`, to exactly what nodelet took minus what it
 * logged as dropped: nothing missing, nothing duplicated, nothing nobody meant; a group with
 * nothing dropped whose repeats all fell within the 10-minute aggregation window is one
 * object. Events are best effort, as the kubelet's: what nodelet drops by design is an event
 * still failing after 12 attempts (about 40 s of backoff), the oldest waiting event when
 * 1,000 are queued, and any emitted once it is stopping; each is logged, and counted here.
 */
import type { Lease } from 'kubernetes-types/coordination/v1.js';
import type { Node, Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Event as CoreEvent } from 'kubernetes-types/core/v1.js';
import { EVENTS, LEASES, NAMESPACES, NODES, PODS } from '../../src/controlplane/client.js';
import type { FaultRequest } from '../control-plane/faults.js';
import { startHealthzPoller } from '../helpers/healthz-poller.js';
import { eventually, type LogRecord } from '../helpers/nodelet.js';
import { startConnectedNode, type ConnectedNode } from './connected-node.js';
import { pick, procUsage, rng, SEED, Tally } from './report.js';

type Kind = 'drop' | 'watch-410' | 'continue-410' | 'conflict' | 'throttle' | 'error' | 'silence';
const KINDS: Kind[] = ['drop', 'watch-410', 'continue-410', 'conflict', 'throttle', 'error', 'silence'];
const ROUNDS = pick(1, 3);
const WINDOW_MS = { min: pick(1_000, 3_000), max: pick(1_000, 8_000) };
const SILENCE_MS = pick(3_000, 30_000);
const INITIAL_PODS = pick(3, 6);

const tally = new Tally('control-plane-faults');
let n: ConnectedNode;
let poller: ReturnType<typeof startHealthzPoller> | undefined;

const podSpec = (name: string): Pod => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default' },
  spec: { nodeName: 'n1', hostNetwork: true, terminationGracePeriodSeconds: 1, containers: [{ name: 'app', image: 'docker.io/local/busybox:latest', imagePullPolicy: 'IfNotPresent', command: ['sleep', '3600'] }] },
});

beforeAll(async () => {
  // Verbosity 3: nodelet logs each event it takes (the ledger the Event objects are compared with).
  n = await startConnectedNode({ prefix: 'nodelet-faults-cp-', proxy: true, config: { logging: '{verbosity: 3}' } });
  await eventually(async () => (await n.api.get<Node>(NODES, { name: 'n1' }).catch(() => undefined))?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True', 20_000);
  for (let i = 0; i < INITIAL_PODS; i++) await n.api.create<Pod>(PODS, podSpec(`p${i}`));
});
afterAll(async () => {
  tally.write();
  await poller?.stop();
  await n?.close();
});

const fromNodelet = (r: FaultRequest) => r.user === 'system:node:n1';
const isWrite = (r: FaultRequest) => ['POST', 'PUT', 'PATCH', 'DELETE'].includes(r.method) && !/(tokenreviews|subjectaccessreviews)$/.test(r.path);
const lists = () => n.nodelet.records.filter((r) => /^listed pods /.test(r.msg)).length;
const leaseRenewTime = async () => Date.parse((await n.api.get<Lease>(LEASES, { namespace: 'kube-node-lease', name: 'n1' })).spec!.renewTime!);

/** The API's pods on n1 against the runtime: undefined when they agree, else what differs. */
async function apiMatchesRuntime(): Promise<string | undefined> {
  const { items } = await n.api.listAll<Pod>(PODS, { namespace: 'default' });
  const mine = items.filter((p) => p.spec?.nodeName === 'n1');
  if (mine.some((p) => p.metadata?.deletionTimestamp)) return `pods being deleted: ${mine.filter((p) => p.metadata?.deletionTimestamp).map((p) => p.metadata!.name).join()}`;
  const apiUids = mine.map((p) => p.metadata!.uid!).sort();
  const sandboxUids = [...n.cri.sandboxes.values()].filter((s) => s.state === 'SANDBOX_READY').map((s) => s.config.labels!['io.kubernetes.pod.uid']!).sort();
  if (apiUids.join() !== sandboxUids.join()) return `API pods ${apiUids.length} != ready sandboxes ${sandboxUids.length}`;
  for (const p of mine) {
    const running = [...n.cri.containers.values()].filter((c) => c.state === 'CONTAINER_RUNNING' && c.config.labels?.['io.kubernetes.pod.uid'] === p.metadata!.uid);
    if (running.length !== 1) return `${p.metadata!.name}: ${running.length} running containers`;
    const cs = p.status?.containerStatuses?.[0];
    if (p.status?.phase !== 'Running' || !cs?.state?.running || cs.ready !== true) return `${p.metadata!.name}: API status ${p.status?.phase} ${JSON.stringify(cs?.state)}`;
    if (!cs.containerID?.endsWith(`://${running[0]!.id}`)) return `${p.metadata!.name}: API names container ${cs.containerID}, runtime runs ${running[0]!.id}`;
    const restarts = Number(running[0]!.config.annotations?.['io.kubernetes.container.restartCount'] ?? 0);
    if (cs.restartCount !== restarts) return `${p.metadata!.name}: API restartCount ${cs.restartCount}, runtime ${restarts}`;
  }
  return undefined;
}

/** The recorder's aggregation key: involved object UID, field path, type, reason, message. */
const eventKey = (uid: string | undefined, fieldPath: string | undefined, type: string | undefined, reason: string | undefined, message: string | undefined) => [uid ?? '', fieldPath ?? '', type ?? '', reason ?? '', message ?? ''].join(' | ');
const AGGREGATE_WINDOW_MS = 600_000;

interface EventTally {
  /** Events nodelet took (logged `Event occurred`), per key. */
  meant: Map<string, { n: number; first: number; last: number; object: string }>;
  /** Events nodelet logged as dropped, per key. */
  dropped: Map<string, number>;
  /** Event objects from kubelet on n1, per key: their counts. */
  held: Map<string, number[]>;
}

/** What nodelet meant to send and dropped (from its log) against the Event objects the control plane holds. */
async function eventLedger(): Promise<EventTally> {
  const meant: EventTally['meant'] = new Map();
  const dropped: EventTally['dropped'] = new Map();
  const keyOf = (r: LogRecord) => eventKey(r['uid'] as string | undefined, r['fieldPath'] as string | undefined, r['type'] as string, r['reason'] as string, r['message'] as string);
  for (const r of n.nodelet.records) {
    if (r.component !== 'events') continue;
    if (r.msg === 'Event occurred') {
      const k = keyOf(r);
      const at = Date.parse(String(r['time']));
      const m = meant.get(k) ?? { n: 0, first: at, last: at, object: String(r['object']) };
      m.n++;
      m.last = at;
      meant.set(k, m);
    } else if (/^event dropped/.test(r.msg)) dropped.set(keyOf(r), (dropped.get(keyOf(r)) ?? 0) + 1);
  }
  const held: EventTally['held'] = new Map();
  for (const e of (await n.api.listAll<CoreEvent>(EVENTS)).items) {
    if (e.source?.component !== 'kubelet' || e.source?.host !== 'n1') continue;
    const o = e.involvedObject;
    const k = eventKey(o.uid, o.fieldPath, e.type, e.reason, e.message);
    held.set(k, [...(held.get(k) ?? []), e.count ?? 1]);
  }
  return { meant, dropped, held };
}

/** Undefined when the Event objects add up to what nodelet took minus what it dropped; else every difference. */
function eventsDiffer(t: EventTally): string | undefined {
  const out: string[] = [];
  for (const [k, m] of t.meant) {
    const drops = t.dropped.get(k) ?? 0;
    const counts = t.held.get(k) ?? [];
    const sum = counts.reduce((a, b) => a + b, 0);
    if (sum !== m.n - drops) out.push(`${m.object} [${k}]: took ${m.n}, dropped ${drops}, the API holds counts [${counts.join()}]`);
    else if (drops === 0 && m.last - m.first < AGGREGATE_WINDOW_MS && counts.length !== 1) out.push(`${m.object} [${k}]: ${counts.length} objects (counts [${counts.join()}]) for one aggregated event`);
  }
  for (const [k, counts] of t.held) if (!t.meant.has(k)) out.push(`[${k}]: ${counts.length} object(s) nodelet never logged`);
  return out.length ? out.join('\n') : undefined;
}

describe(`control-plane faults (seed ${SEED})`, () => {
  it('pods keep running, the API ends equal to what runs, the lease is renewed, memory bounded', async () => {
    const r = rng(SEED);
    const pid = n.nodelet.pid;
    let last: string | undefined;
    await eventually(async () => (last = await apiMatchesRuntime()) === undefined, 30_000, 200).catch(() => {
      throw new Error(`not settled before the faults: ${last}`);
    });
    const usage0 = procUsage(pid);
    poller = startHealthzPoller(n.ports.healthz, pid);
    let podStatusWrites = 0;
    n.faults.observe = (q) => {
      if (fromNodelet(q) && q.method === 'PATCH' && /\/pods\/[^/]+\/status$/.test(q.path)) podStatusWrites++;
    };
    const kinds: Kind[] = [];
    for (let i = 0; i < ROUNDS; i++) kinds.push(...[...KINDS].sort(() => r.next() - 0.5));
    const convergence: Record<string, number[]> = {};
    const leaseDelay: Record<string, number[]> = {};
    let created = INITIAL_PODS;
    const crashed = new Set<string>();
    let compactions = 0;
    let continueGones = 0;
    const changes = { created: 0, deleted: 0, crashed: 0 };

    /** A change nodelet must carry through the fault: a pod created, one deleted, or a container crashed. */
    async function change(): Promise<void> {
      const { items } = await n.api.listAll<Pod>(PODS, { namespace: 'default' });
      const live = items.filter((p) => !p.metadata?.deletionTimestamp);
      const what = r.pick(['create', 'delete', 'crash'] as const);
      if (what === 'delete' && live.length > 2) {
        await n.api.delete(PODS, { namespace: 'default', name: r.pick(live).metadata!.name! });
        changes.deleted++;
      } else if (what === 'crash') {
        // One crash per pod: a second would wait for the crash-loop backoff (10 s and more).
        const c = r.pick([...n.cri.containers.values()].filter((x) => x.state === 'CONTAINER_RUNNING' && !crashed.has(x.config.labels!['io.kubernetes.pod.uid']!)));
        if (c) {
          crashed.add(c.config.labels!['io.kubernetes.pod.uid']!);
          n.cri.exitContainer(c.id, 1);
          changes.crashed++;
        }
      } else {
        await n.api.create<Pod>(PODS, podSpec(`p${created++}`));
        changes.created++;
      }
    }

    for (const kind of kinds) {
      const listsBefore = lists();
      const recordsBefore = n.nodelet.records.length;
      const window = WINDOW_MS.min + r.int(WINDOW_MS.max - WINDOW_MS.min + 1);
      const undo: (() => void)[] = [];
      if (kind === 'drop') {
        n.proxy!.dropAll();
        await change();
      } else if (kind === 'watch-410' || kind === 'continue-410') {
        if (kind === 'continue-410') {
          undo.push(n.faults.add({ match: (q) => fromNodelet(q) && q.method === 'GET' && q.path === '/api/v1/pods' && !q.query.has('watch'), rewrite: (u) => (u.searchParams.set('limit', '1'), `${u.pathname}?${u.searchParams}`) }, 'list paged by 1'));
          undo.push(n.faults.add({ match: (q) => fromNodelet(q) && q.query.has('continue'), respond: { code: 410, message: 'The provided continue parameter is too old to display a consistent list result.' }, times: 1 }, 'continue-410'));
        }
        // Watches closed and kept from reconnecting while the pods change, then the history
        // compacted past what nodelet saw: its resumed watch gets 410 Gone.
        const block = n.faults.add({ match: (q) => fromNodelet(q) && q.query.has('watch'), respond: { code: 500, message: 'Internal error occurred: injected' } }, 'watch held off');
        n.cp.dropWatches();
        await change();
        // The cluster moves on meanwhile (whatever the change was): the store's version advances.
        await n.api.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: `moved-on-${compactions++}` } });
        n.cp.compactHistory();
        block();
        await eventually(() => lists() > listsBefore, 20_000, 50).catch(() => {
          throw new Error(`${kind}: no relist after the history was compacted; nodelet logged: ${n.nodelet.records.slice(recordsBefore).filter((x) => x.component !== 'pod-worker').map((x) => `${x.level} ${x.msg}`).join(' | ').slice(0, 4000)}`);
        });
        if (kind === 'continue-410') expect(n.faults.byLabel.get('continue-410'), 'the continue was answered 410 once').toBe(++continueGones);
      } else if (kind === 'silence') {
        n.proxy!.silence();
        await new Promise((res) => setTimeout(res, SILENCE_MS / 3));
        await change();
        await new Promise((res) => setTimeout(res, SILENCE_MS - SILENCE_MS / 3));
        await n.proxy!.restore();
      } else {
        const rule =
          kind === 'conflict'
            ? { match: (q: FaultRequest) => fromNodelet(q) && isWrite(q), respond: { code: 409, message: 'Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again' }, every: 2 }
            : kind === 'throttle'
              ? { match: fromNodelet, respond: { code: 429, message: 'Too many requests, please try again later.', headers: { 'Retry-After': '1' } } }
              : { match: fromNodelet, respond: { code: 500, message: 'Internal error occurred: injected' } };
        undo.push(n.faults.add(rule, kind));
        await new Promise((res) => setTimeout(res, window / 3));
        await change();
        await new Promise((res) => setTimeout(res, window - window / 3));
      }
      for (const u of undo) u();
      tally.add(`faults: ${kind}`);
      tally.add('faults injected');
      expect(n.nodelet.child.exitCode, `after ${kind}`).toBeNull();
      const end = Date.now();
      await eventually(async () => (last = await apiMatchesRuntime()) === undefined, 60_000, 200).catch(() => {
        throw new Error(`${kind}: the API and the runtime still differ 60 s after the fault: ${last}`);
      });
      (convergence[kind] ??= []).push(Date.now() - end);
      const renewed = await eventually(async () => {
        const t = await leaseRenewTime();
        return t > end ? t : undefined;
      }, 20_000, 100);
      (leaseDelay[kind] ??= []).push(renewed - end);
      if (kind === 'drop') expect(lists(), 'a dropped watch resumes without a relist').toBe(listsBefore);
    }
    // Events: nodelet's ledger against the API, once its queue has drained (a retried event
    // may still be waiting its backoff: up to about 40 s).
    let ledger = await eventLedger();
    let diff: string | undefined;
    const eventsFrom = Date.now();
    await eventually(async () => (diff = eventsDiffer((ledger = await eventLedger()))) === undefined, 60_000, 500).catch(() => {
      throw new Error(`events: the API's Event objects differ from what nodelet took and dropped, 60 s after the last fault:\n${diff}`);
    });
    const eventsSettledMs = Date.now() - eventsFrom;
    const meantTotal = [...ledger.meant.values()].reduce((a, m) => a + m.n, 0);
    const droppedTotal = [...ledger.dropped.values()].reduce((a, b) => a + b, 0);
    const objects = [...ledger.held.values()].reduce((a, c) => a + c.length, 0);
    expect(meantTotal, 'nodelet logged the events it took').toBeGreaterThan(0);
    const byReason: Record<string, number> = {};
    for (const [k, m] of ledger.meant) byReason[k.split(' | ')[3]!] = (byReason[k.split(' | ')[3]!] ?? 0) + m.n;
    const samples = await poller.stop();
    poller = undefined;
    const usage1 = procUsage(pid);
    const injectedByRules = Object.fromEntries(n.faults.byLabel);
    for (const [k, v] of Object.entries(changes)) tally.add(`pods ${k} during faults`, v);
    tally.add('requests answered by a fault rule', n.faults.injected);
    tally.add('relists', lists() - 1);
    tally.add('pod status PATCHes', podStatusWrites);
    const failed = tally.addLiveness(samples.latencies, n.nodelet.records);
    tally.add('lost (API status != runtime after the faults)', 0);
    tally.add('events nodelet took (logged Event occurred)', meantTotal);
    tally.add('events nodelet dropped (logged)', droppedTotal);
    tally.add('Event objects (aggregated by count)', objects);
    tally.add('events missing or duplicated in the API', 0);
    tally.note('events taken by reason', byReason);
    tally.note('events settled ms after the last fault converged', eventsSettledMs);
    tally.note('fault rule hits', injectedByRules);
    tally.note('convergence ms (fault end -> API equals runtime)', convergence);
    tally.note('lease renewed ms after fault end', leaseDelay);
    tally.note('nodelet before', usage0);
    tally.note('nodelet after', usage1);
    tally.note('rss MB min/max (poller)', [Math.min(...samples.rssMb), Math.max(...samples.rssMb)].map((x) => Math.round(x * 10) / 10));
    console.log(`control-plane faults: ${kinds.join(', ')}; changes ${JSON.stringify(changes)}; rule hits ${JSON.stringify(injectedByRules)}; convergence ms ${JSON.stringify(convergence)}; lease ms ${JSON.stringify(leaseDelay)}; relists ${lists() - 1}; events took ${meantTotal}, dropped ${droppedTotal}, ${objects} objects, settled in ${eventsSettledMs} ms; healthz ${samples.latencies.length} polls, ${failed} failed; rss ${usage0.rssKiB} -> ${usage1.rssKiB} KiB (max ${Math.max(...samples.rssMb).toFixed(1)} MB), fds ${usage0.fds} -> ${usage1.fds}`);
    expect(n.nodelet.pid).toBe(pid);
    expect(n.nodelet.records.filter((x) => /starting nodelet/.test(x.msg))).toHaveLength(1);
    expect(failed).toBe(0);
    // Bounded: nothing piles up while the control plane is away (a generous bound: twice the start).
    expect(Math.max(...samples.rssMb) * 1024).toBeLessThan(2 * usage0.rssKiB);
  });
});
