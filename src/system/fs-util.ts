/**
 * Small file-system helpers for paths that may not exist: the one place the "ENOENT means
 * absent" rule is written. Any other error is thrown.
 */
import fsp from 'node:fs/promises';

/** The promise's value, or undefined when it failed because the path does not exist. */
export async function ifExists<T>(p: Promise<T>): Promise<T | undefined> {
  try {
    return await p;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** The names in a directory; none when it does not exist. */
export async function readdirOrEmpty(dir: string): Promise<string[]> {
  return (await ifExists(fsp.readdir(dir))) ?? [];
}

/** Whether something (a file, directory or link, followed or not) is at the path. */
export async function exists(p: string): Promise<boolean> {
  try {
    await fsp.lstat(p);
    return true;
  } catch {
    return false;
  }
}
