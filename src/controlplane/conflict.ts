/**
 * Optimistic concurrency: `fn` reads the current object, changes it and writes it back with
 * the resourceVersion it read. When the write answers CONFLICT (someone else wrote first)
 * `fn` runs again, re-reading, up to `attempts` times in all; the last conflict and every
 * other error are thrown unchanged. No delay: a conflict means fresher data is available now.
 */
import { isNodeletError } from '../errors.js';

export async function retryOnConflict<T>(fn: (attempt: number) => Promise<T>, attempts = 5): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (!isNodeletError(err, 'CONFLICT') || attempt >= attempts) throw err;
    }
  }
}
