/**
 * The pods' API data volumes (api-data.ts) kept up to date, the part of the kubelet's volume
 * manager nodelet needs for them:
 *
 * - `setUp` (a container start) writes a volume, registers the pod's references with the
 *   API objects (their watches start) and remembers the pod; a volume that cannot be set up
 *   because of the API (an object or key missing, the control plane down) is the kubelet's
 *   FailedMount: a Warning event `MountVolume.SetUp failed for volume "x" : ...`, and the
 *   container waits (ContainerCreating) and is tried again;
 * - `refresh` (each pod sync) registers the pod's references (its env's too: they are read
 *   from the same watches) and rewrites the volumes set up, from the pod as it is now;
 * - a change of a watched ConfigMap or Secret rewrites, at once, the volumes of the pods that
 *   refer to it (only those volumes), without waiting for the pods' next sync;
 * - a token due for renewal (token-manager.ts) rewrites its volume when it is due, on the
 *   injected Clock, not at the pod's next periodic sync;
 * - `forget` (the pod is gone) drops the registration, the tokens and the timer.
 *
 * The writes of one pod are serialized (a sync and a change never write a volume at once).
 * Never written into a subPath mount: those are binds of the file as it was at the
 * container's creation, as the kubelet's. Nothing here throws out of a refresh: problems
 * are logged and the volume is left as it was, for the next try.
 */
import type { Pod, Volume } from 'kubernetes-types/core/v1.js';
import { realClock, type Clock } from '../../clock.js';
import { errorMessage } from '../../errors.js';
import { podRef, type EventSink } from '../../events.js';
import { silentLogger, type Logger } from '../../log.js';
import type { ApiObjects, ObjectRef } from '../objects/objects.js';
import { isApiDataVolume, MountFailure, refreshApiDataVolumes, setUpApiDataVolume, type ApiDataContext } from './api-data.js';
import type { Mounter } from './subpath.js';
import { TokenManager } from './token-manager.js';

export interface ApiVolumesOptions {
  rootDir: string;
  quantity: (q: string | number) => number;
  objects?: ApiObjects;
  mounter?: Mounter;
  clock?: Clock;
  logger?: Logger;
  events?: EventSink;
  /** The jitter of token renewals (token-manager.ts), for tests. */
  random?: () => number;
}

/** The wait before a token renewal that failed is tried again. */
const TOKEN_RETRY_MS = 10_000;

interface Known {
  pod: Pod;
  /** The pending token renewal: when, and how to cancel its wait. */
  timer?: { at: number; abort: AbortController };
}

/** Whether the volume shows the object (a configMap or secret volume, or a projected source). */
export function volumeShows(v: Volume, ref: ObjectRef): boolean {
  if (ref.kind === 'ConfigMap') return v.configMap?.name === ref.name || !!v.projected?.sources?.some((s) => s.configMap?.name === ref.name);
  return v.secret?.secretName === ref.name || !!v.projected?.sources?.some((s) => s.secret?.name === ref.name);
}

export class ApiVolumes {
  readonly #o: ApiVolumesOptions;
  readonly #ctx: ApiDataContext;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #pods = new Map<string, Known>();
  /** Each pod's write chain. */
  readonly #chains = new Map<string, Promise<unknown>>();
  readonly tokens: TokenManager | undefined;

  constructor(o: ApiVolumesOptions) {
    this.#o = o;
    this.#clock = o.clock ?? realClock;
    this.#log = o.logger ?? silentLogger();
    const objects = o.objects;
    this.tokens = objects ? new TokenManager({ request: (ns, sa, spec) => objects.requestToken(ns, sa, spec), clock: this.#clock, ...(o.random ? { random: o.random } : {}) }) : undefined;
    this.#ctx = { quantity: o.quantity, ...(objects ? { objects } : {}), ...(this.tokens ? { tokens: this.tokens } : {}), ...(o.mounter ? { mounter: o.mounter } : {}) };
    objects?.onChange?.((ref) => this.#objectChanged(ref));
  }

  /** Runs `fn` after the pod's earlier writes. */
  #serial<T>(uid: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#chains.get(uid) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.#chains.set(uid, tail);
    void tail.then(() => {
      if (this.#chains.get(uid) === tail) this.#chains.delete(uid);
    });
    return next;
  }

  #remember(pod: Pod): void {
    const uid = pod.metadata?.uid ?? '';
    const k = this.#pods.get(uid);
    if (k) k.pod = pod;
    else this.#pods.set(uid, { pod });
    this.#o.objects?.registerPod?.(pod);
  }

  /**
   * Sets up one volume for a container start and returns its directory. Throws a
   * NodeletError whose reason is the container's waiting reason; a FailedMount also goes out
   * as a Warning event.
   */
  setUp(pod: Pod, v: Volume): Promise<string> {
    const uid = pod.metadata?.uid ?? '';
    this.#remember(pod);
    return this.#serial(uid, async () => {
      try {
        const { dir, refreshAt } = await setUpApiDataVolume(this.#o.rootDir, pod, v, this.#ctx);
        this.#schedule(uid, refreshAt);
        return dir;
      } catch (err) {
        if (err instanceof MountFailure) this.#o.events?.emit(podRef(pod), 'Warning', 'FailedMount', err.message);
        throw err;
      }
    });
  }

  /** Brings the set-up volumes of `pod` up to date (each sync). Never throws. */
  async refresh(pod: Pod, only?: (v: Volume) => boolean): Promise<void> {
    // Every pod's references are registered (its env's too), so the objects it reads are watched.
    this.#remember(pod);
    if (!pod.spec?.volumes?.some(isApiDataVolume)) return;
    const uid = pod.metadata?.uid ?? '';
    await this.#serial(uid, async () => {
      const { problems, refreshAt } = await refreshApiDataVolumes(this.#o.rootDir, pod, this.#ctx, only);
      for (const p of problems) this.#log.warn({ pod: `${pod.metadata?.namespace}/${pod.metadata?.name}` }, `cannot update a volume of the pod (left as it was): ${p}`);
      this.#schedule(uid, refreshAt);
    }).catch((err) => this.#log.warn({ err: errorMessage(err) }, `cannot update the volumes of pod ${pod.metadata?.namespace}/${pod.metadata?.name}: ${errorMessage(err)}`));
  }

  /** The pod is gone: its watches, tokens and timer go. */
  forget(uid: string): void {
    const k = this.#pods.get(uid);
    k?.timer?.abort.abort();
    this.#pods.delete(uid);
    this.#o.objects?.unregisterPod?.(uid);
    this.tokens?.forgetPod(uid);
  }

  /** Pods whose volumes are kept (tests). */
  get podCount(): number {
    return this.#pods.size;
  }

  #objectChanged(ref: ObjectRef): void {
    for (const { pod } of this.#pods.values()) {
      if ((pod.metadata?.namespace ?? 'default') !== ref.namespace) continue;
      if (!pod.spec?.volumes?.some((v) => volumeShows(v, ref))) continue;
      void this.refresh(pod, (v) => volumeShows(v, ref));
    }
  }

  /** A token in the pod's volumes is due at `at`: its volumes are refreshed then. */
  #schedule(uid: string, at: number): void {
    const k = this.#pods.get(uid);
    if (!k || !Number.isFinite(at)) return;
    if (k.timer && k.timer.at <= at && !k.timer.abort.signal.aborted) return;
    k.timer?.abort.abort();
    const abort = new AbortController();
    k.timer = { at, abort };
    // A renewal that failed keeps the token it had (still valid) and is tried again a little later.
    const now = this.#clock.now();
    const wait = at > now ? at - now : TOKEN_RETRY_MS;
    this.#clock.sleep(wait, abort.signal).then(
      () => {
        const cur = this.#pods.get(uid);
        if (!cur || cur.timer?.abort !== abort) return;
        cur.timer = undefined;
        void this.refresh(cur.pod, (v) => !!v.projected?.sources?.some((s) => s.serviceAccountToken));
      },
      () => {},
    );
  }
}
