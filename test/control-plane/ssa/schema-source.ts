/**
 * Where the engine gets a kind's schema when the caller passes none. The server's
 * test/control-plane/schema.ts is the source; a kind it does not describe is unstructured.
 */
import type { SchemaNode } from './schema-types.js';

export function fieldSchema(_kind: string): SchemaNode | undefined {
  return undefined;
}
