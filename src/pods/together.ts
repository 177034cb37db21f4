/**
 * Independent steps of a pod start run at once (the sandbox's directories, cgroups and
 * records; a container's config beside its sandbox's), with the error the caller would have
 * seen running them one after the other.
 */

/**
 * Awaits every step to its end, then throws the first failure in the order given (not the
 * order they failed in): the same error whichever finished first, and nothing of the steps
 * still running when the caller reports it or tries again.
 */
export async function together<T extends readonly unknown[]>(...steps: { [K in keyof T]: Promise<T[K]> }): Promise<T> {
  const settled = await Promise.allSettled(steps);
  for (const r of settled) if (r.status === 'rejected') throw r.reason;
  return settled.map((r) => (r as PromiseFulfilledResult<unknown>).value) as unknown as T;
}
