/** The NodeletError a promise rejects with; fails the test if it resolves or rejects with anything else. */
import { isNodeletError, type NodeletError } from '../../src/errors.js';

export async function rejection(p: Promise<unknown>): Promise<NodeletError> {
  try {
    await p;
  } catch (err) {
    if (isNodeletError(err)) return err;
    throw err;
  }
  throw new Error('expected the call to fail');
}

/** The NodeletError a call throws; fails the test if it returns or throws anything else. */
export function thrown(f: () => unknown): NodeletError {
  try {
    f();
  } catch (err) {
    if (isNodeletError(err)) return err;
    throw err;
  }
  throw new Error('expected the call to fail');
}
