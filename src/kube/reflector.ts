/**
 * A reflector: list (in chunks) then watch from the list's resourceVersion with
 * bookmarks, keeping a store of the objects and handing the full set to its consumer after
 * every change. A broken connection resumes the watch from the last resourceVersion seen
 * (bookmarks included); 410 Gone lists again, and the replace that follows is the correct
 * final state (deletions during the gap included). Failures back off 200 ms doubling to
 * 30 s. Events older than what the store holds are dropped, so nothing is applied twice.
 *
 * Contract: `start(onChange)` resolves after the first full list was delivered (or rejects
 * when the first list fails; the loop keeps trying either way); `stop()` ends it. It never
 * throws out of its loop: faults are logged and retried.
 */
import { backoffDelay, realClock, type Clock } from '../clock.js';
import { NodeletError, errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import { resourcePath, type KubeClient, type ResourceType, type WatchEvent } from './client.js';

type Obj = { metadata?: { name?: string; namespace?: string; resourceVersion?: string } };

export interface ReflectorOptions {
  client: KubeClient;
  type: ResourceType;
  namespace?: string;
  fieldSelector?: string;
  labelSelector?: string;
  /** Page size of the list (default 500). */
  limit?: number;
  logger: Logger;
  clock?: Clock;
  /** A watch that says nothing for this long (no event, no bookmark) is restarted (default 5 min). */
  idleTimeoutMs?: number;
}

const key = (o: Obj) => `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;
const rvOf = (o: Obj) => Number(o.metadata?.resourceVersion ?? 0);

export class Reflector<T extends Obj = Obj> {
  readonly #o: ReflectorOptions;
  readonly #store = new Map<string, T>();
  #rv = '';
  #abort = new AbortController();
  #loop: Promise<void> | undefined;
  #failures = 0;
  lastSync = 0;

  constructor(o: ReflectorOptions) {
    this.#o = o;
  }

  get #clock(): Clock {
    return this.#o.clock ?? realClock;
  }

  items(): T[] {
    return [...this.#store.values()];
  }

  /** The resourceVersion the store is at. */
  get resourceVersion(): string {
    return this.#rv;
  }

  async #list(): Promise<void> {
    const { client, type, namespace } = this.#o;
    const path = resourcePath(type, namespace ? { namespace } : {});
    const items: T[] = [];
    let cont: string | undefined;
    let rv = '';
    do {
      const page = await client.do<{ metadata: { resourceVersion: string; continue?: string }; items: T[] }>('GET', path, {
        query: { limit: this.#o.limit ?? 500, continue: cont, fieldSelector: this.#o.fieldSelector, labelSelector: this.#o.labelSelector },
        signal: this.#abort.signal,
      });
      items.push(...page.items);
      rv = page.metadata.resourceVersion;
      cont = page.metadata.continue || undefined;
    } while (cont);
    this.#store.clear();
    for (const it of items) this.#store.set(key(it), it);
    this.#rv = rv;
  }

  /** Watches from #rv until the stream ends; applies events; returns normally on a clean end. */
  async #watch(onChange: (items: T[]) => void): Promise<void> {
    const { client, type, namespace } = this.#o;
    const path = resourcePath(type, namespace ? { namespace } : {});
    const idle = new AbortController();
    const both = AbortSignal.any([this.#abort.signal, idle.signal]);
    let timer = setTimeout(() => idle.abort(), this.#o.idleTimeoutMs ?? 300_000);
    try {
      const events = await client.stream(path, {
        query: { watch: 1, resourceVersion: this.#rv, allowWatchBookmarks: true, fieldSelector: this.#o.fieldSelector, labelSelector: this.#o.labelSelector },
        signal: both,
      });
      for await (const ev of events as AsyncIterable<WatchEvent>) {
        clearTimeout(timer);
        timer = setTimeout(() => idle.abort(), this.#o.idleTimeoutMs ?? 300_000);
        this.#failures = 0;
        if (ev.type === 'ERROR') {
          const st = ev.object as { code?: number; message?: string; reason?: string };
          throw new NodeletError(st.code === 410 ? 'GONE' : 'UNAVAILABLE', `watch ${path}: ${st.message ?? 'error event'}`, { status: st.code });
        }
        const obj = ev.object as T;
        const rv = obj.metadata?.resourceVersion;
        if (ev.type === 'BOOKMARK') {
          if (rv) this.#rv = rv;
          continue;
        }
        // Never apply an event the store already reflects (a resumed watch may replay).
        if (rv && this.#rv && Number(rv) <= Number(this.#rv)) continue;
        if (ev.type === 'DELETED') this.#store.delete(key(obj));
        else {
          const cur = this.#store.get(key(obj));
          if (!cur || rvOf(cur) < rvOf(obj)) this.#store.set(key(obj), obj);
        }
        if (rv) this.#rv = rv;
        this.lastSync = this.#clock.now();
        onChange(this.items());
      }
    } catch (err) {
      if (idle.signal.aborted && !this.#abort.signal.aborted) return; // quiet too long: resume
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  start(onChange: (items: T[]) => void): Promise<void> {
    const log = this.#o.logger;
    let first: { resolve: () => void; reject: (e: unknown) => void } | undefined;
    const firstList = new Promise<void>((resolve, reject) => (first = { resolve, reject }));
    this.#loop = (async () => {
      let needList = true;
      while (!this.#abort.signal.aborted) {
        try {
          if (needList) {
            await this.#list();
            needList = false;
            this.#failures = 0;
            this.lastSync = this.#clock.now();
            onChange(this.items());
            first?.resolve();
            first = undefined;
          }
          await this.#watch(onChange);
          // A clean end (the server closed the stream): resume from where the store is.
        } catch (err) {
          if (this.#abort.signal.aborted) break;
          if (err instanceof NodeletError && err.code === 'GONE') {
            log.info({ resource: this.#o.type.resource, resourceVersion: this.#rv }, `watch expired (${errorMessage(err)}); listing again`);
            needList = true;
            continue;
          }
          this.#failures++;
          if (first) {
            first.reject(err);
            first = undefined;
          }
          if (this.#failures === 1 || this.#failures % 10 === 0) log.warn({ err: errorMessage(err), failures: this.#failures }, `${this.#o.type.resource}: ${errorMessage(err)}; retrying`);
          await this.#clock.sleep(backoffDelay(this.#failures - 1, 200, 30_000, 0.1), this.#abort.signal).catch(() => undefined);
        }
      }
    })();
    return firstList;
  }

  async stop(): Promise<void> {
    this.#abort.abort();
    await this.#loop;
  }
}
