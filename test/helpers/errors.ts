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
