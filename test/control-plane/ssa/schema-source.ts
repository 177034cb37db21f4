/**
 * Where the engine gets a kind's schema when the caller passes none: the server's
 * test/control-plane/schema.ts. A kind it does not describe is unstructured.
 */
export { fieldSchema } from '../schema.js';
