/**
 * The shape of the field schema the SSA engine merges and tracks ownership by. It is the
 * same type `test/control-plane/schema.ts` exports as `SchemaNode` (declared here too so the
 * engine does not depend on that file's other contents).
 *
 * - `scalar`: a leaf; replaced whole.
 * - `struct`: named `fields`; `elementType: 'atomic'` replaces the whole struct and gives it
 *   one owner; `open: true` makes it a map with arbitrary keys whose values follow `values`
 *   (labels, annotations, nodeSelector). A key that is neither a named field nor allowed by
 *   `open` is treated as unstructured (see below).
 * - `list`: `atomic` (replaced whole, one owner), `set` (scalar items, owned one by one),
 *   `map` (object items identified by `keys`, merged and owned entry by entry).
 *
 * A missing node (`undefined`) means "unstructured", as the spec says for custom resources
 * without schema markers: objects are granular maps whose keys are all tracked, lists atomic.
 */
export type SchemaNode =
  | { kind: 'scalar' }
  | {
      kind: 'struct';
      fields: Record<string, SchemaNode>;
      elementType?: 'atomic' | 'granular';
      open?: boolean;
      values?: SchemaNode;
    }
  | { kind: 'list'; listType: 'atomic' | 'set' | 'map'; keys?: string[]; items: SchemaNode };
