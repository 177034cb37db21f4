/**
 * A scripted ReflectorClient (the list/watch half of the control-plane client the Reflector
 * uses): each listAll() and watch() call takes the next step of its script (a list result
 * or an error; a watch's events, then close, hang until aborted, or an error) and records
 * its options. When the script runs out, lists fail UNAVAILABLE and watches hang. A script,
 * not a model of the API: the Reflector's integration tests
 * (test/integration/controlplane/client.test.ts) run the same loop on the real client.
 */
import type { KubeObject, ListOptions, WatchEvent, WatchOptions } from '../../src/controlplane/client.js';
import type { ReflectorClient } from '../../src/controlplane/reflector.js';
import { NodeletError } from '../../src/errors.js';

export type ListStep = { items: KubeObject[]; rv: string } | Error;
export type WatchStep = { events: WatchEvent[]; end: 'close' | 'hang' | Error } | Error;

/** A scripted client: each listAll/watch call takes the next step and records its arguments. */
export class ScriptedClient implements ReflectorClient {
  listCalls: ListOptions[] = [];
  watchCalls: WatchOptions[] = [];
  constructor(
    private lists: ListStep[],
    private watches: WatchStep[],
  ) {}
  async listAll<T extends KubeObject>(_t: unknown, o: ListOptions = {}): Promise<{ items: T[]; resourceVersion: string }> {
    this.listCalls.push(o);
    const s = this.lists.shift() ?? new NodeletError('UNAVAILABLE', 'script ended');
    if (s instanceof Error) throw s;
    return { items: s.items as T[], resourceVersion: s.rv };
  }
  async watch<T extends KubeObject>(_t: unknown, o: WatchOptions = {}): Promise<AsyncIterable<WatchEvent<T>>> {
    this.watchCalls.push(o);
    const s = this.watches.shift() ?? { events: [], end: 'hang' as const };
    if (s instanceof Error) throw s;
    return (async function* () {
      for (const e of s.events) yield e as WatchEvent<T>;
      if (s.end instanceof Error) throw s.end;
      if (s.end === 'hang') {
        await new Promise((_, reject) => {
          if (o.signal?.aborted) reject(new NodeletError('CANCELLED', 'aborted'));
          o.signal?.addEventListener('abort', () => reject(new NodeletError('CANCELLED', 'aborted')), { once: true });
        });
      }
    })();
  }
}
